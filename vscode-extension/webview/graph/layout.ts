// Places what shows: each open container (the root, an expanded group) is laid out on its own, innermost first;
// then every box gets absolute coordinates and every edge a path. A container's layout comes, fastest first, from
// the layouts made so far (by structure: every layer like an expanded one has its layout already), from its last
// layout stretched around the children that grew (expanding a layer moves the rest aside: no ELK for the
// containers around it), or from ELK. No DOM: unit-testable in node with elkjs.
import type { ElkNode, ElkPoint } from 'elkjs/lib/elk-api';

import { childBoxes, containerGraph, GraphIndex, headerWidth, Size } from './model';

export interface PlacedBox {
  x: number; // absolute, in graph units
  y: number;
  width: number;
  height: number;
  container: string | null; // the open group it is drawn in (null: the root)
}

export interface Placed {
  boxes: Map<string, PlacedBox>; // containers before what they hold
  edges: string[]; // SVG path data, one per pair of boxes an edge of the model joins
  laidOut: number; // containers ELK laid out for this
  stretched: number; // containers whose last layout was stretched around children that grew
}

export interface Elk {
  layout(graph: ElkNode): Promise<ElkNode>;
}

interface Rect {
  x: number;
  y: number;
  width: number;
  height: number;
}

/** One container's layout by position: its ELK input's children and edges in order (the ids are the input's). */
export interface Laid {
  width: number;
  height: number;
  boxes: Rect[];
  routes: (ElkPoint[] | null)[]; // per edge of the input: ELK's route, null if it made none
}

export class Layout {
  /** Layouts by the structure of their ELK input (sizes and edges by position): groups alike share theirs. */
  private readonly bySignature = new Map<string, Promise<Laid>>();
  /** Each container's first and last layouts ("" for the root) with their inputs: what children that grow stretch
   * (the last; else the first, where they were all collapsed). */
  private readonly drawn = new Map<string, { input: ElkNode; laid: Laid }[]>();

  constructor(private readonly elk: Elk, private readonly index: GraphIndex) {}

  async place(expanded: ReadonlySet<string>): Promise<Placed> {
    const laid = new Map<string | null, { input: ElkNode; laid: Laid }>();
    let laidOut = 0;
    let stretched = 0;
    const layOut = async (container: string | null): Promise<void> => {
      const sizes = new Map<string, Size>();
      for (const child of childBoxes(this.index, container).filter((id) => expanded.has(id))) {
        await layOut(child);
        const inner = laid.get(child)!.laid;
        sizes.set(child, { width: Math.max(inner.width, headerWidth(this.index.groups.get(child)!)), height: inner.height });
      }
      const input = containerGraph(this.index, container, expanded, sizes);
      const signature = signatureOf(input);
      let layout = this.bySignature.get(signature);
      if (!layout) {
        const before = [...(this.drawn.get(container ?? '') ?? [])].reverse();
        const grown = before.map((b) => stretch(b.input, b.laid, input)).find((l) => l !== undefined);
        if (grown) {
          stretched++;
        } else {
          laidOut++;
        }
        layout = grown ? Promise.resolve(grown) : this.layOutWithElk(signature, input);
        this.bySignature.set(signature, layout);
      }
      const entry = { input, laid: await layout };
      const drawn = this.drawn.get(container ?? '');
      this.drawn.set(container ?? '', drawn ? [drawn[0], entry] : [entry]);
      laid.set(container, entry);
    };
    await layOut(null);

    const boxes = new Map<string, PlacedBox>();
    const routes = new Map<string, ElkPoint[]>(); // the route of an edge between two boxes of one container
    const place = (container: string | null, dx: number, dy: number): void => {
      const { input, laid: layout } = laid.get(container)!;
      input.children!.forEach((child, i) => {
        const box = layout.boxes[i];
        boxes.set(child.id, { x: dx + box.x, y: dy + box.y, width: box.width, height: box.height, container });
        if (expanded.has(child.id)) {
          place(child.id, dx + box.x, dy + box.y);
        }
      });
      input.edges!.forEach((edge, i) => {
        const route = layout.routes[i];
        if (route) {
          routes.set(edge.id, route.map((p) => ({ x: dx + p.x, y: dy + p.y })));
        }
      });
    };
    place(null, 0, 0);

    const edges: string[] = [];
    const seen = new Set<string>();
    for (const edge of this.index.edges) {
      const from = this.index.visibleBox(edge.from, expanded);
      const to = this.index.visibleBox(edge.to, expanded);
      const key = `${from}>${to}`;
      const a = boxes.get(from);
      const b = boxes.get(to);
      if (from === to || seen.has(key) || !a || !b) {
        continue;
      }
      seen.add(key);
      const route = a.container === b.container ? routes.get(key) : undefined;
      edges.push(route ? `M${route.map((p) => `${p.x},${p.y}`).join('L')}` : curve(a, b));
    }
    return { boxes, edges, laidOut, stretched };
  }

  /** Lays out, ahead of a click, what expanding the collapsed `group` would show (unless a group inside it is open);
   * resolves whether ELK ran (a group like one laid out before shares its layout). */
  async prefetch(group: string, expanded: ReadonlySet<string>): Promise<boolean> {
    if (childBoxes(this.index, group).some((id) => expanded.has(id))) {
      return false;
    }
    const input = containerGraph(this.index, group, new Set(expanded).add(group), new Map());
    const signature = signatureOf(input);
    if (this.bySignature.has(signature)) {
      return false;
    }
    const layout = this.layOutWithElk(signature, input);
    this.bySignature.set(signature, layout);
    await layout;
    return true;
  }

  private layOutWithElk(signature: string, input: ElkNode): Promise<Laid> {
    return this.elk.layout(input).then((result) => byPosition(result, input), (error: unknown) => {
      this.bySignature.delete(signature);
      throw error;
    });
  }
}

/** What ELK's layout of `input` depends on: its options, children's sizes and edges, by position. */
function signatureOf(input: ElkNode): string {
  const children = input.children!;
  const at = new Map(children.map((c, i) => [c.id, i]));
  return JSON.stringify([
    input.layoutOptions,
    children.map((c) => [c.width, c.height]),
    input.edges!.map((e) => [at.get(e.sources[0]), at.get(e.targets[0])]),
  ]);
}

function byPosition(result: ElkNode, input: ElkNode): Laid {
  const children = new Map((result.children ?? []).map((c) => [c.id, c]));
  const edges = new Map((result.edges ?? []).map((e) => [e.id, e]));
  return {
    width: result.width ?? 0,
    height: result.height ?? 0,
    boxes: input.children!.map((c) => {
      const child = children.get(c.id)!;
      return { x: child.x ?? 0, y: child.y ?? 0, width: child.width ?? 0, height: child.height ?? 0 };
    }),
    routes: input.edges!.map((e) => {
      const section = edges.get(e.id)?.sections?.[0];
      return section ? [section.startPoint, ...(section.bendPoints ?? []), section.endPoint] : null;
    }),
  };
}

/** `before`, laid out for `old`, with the children of `input` that changed size at their new sizes: the plane is
 * stretched at each one's borders (below it moves down by its growth in height, beside it aside by half its growth
 * in width, inside it scaled), each other box keeping its size at its stretched centre. Stretching moves nothing
 * closer, so nothing overlaps (a child grown narrower keeps the width of its place, centred in it). Undefined
 * unless `input` has old's children and edges, none of them lower than before. */
export function stretch(old: ElkNode, before: Laid, input: ElkNode): Laid | undefined {
  const ids = (items: { id: string }[] | undefined) => (items ?? []).map((i) => i.id).join('\n');
  if (ids(old.children) !== ids(input.children) || ids(old.edges) !== ids(input.edges)) {
    return undefined;
  }
  const children = input.children!;
  const at = new Map(children.map((c, i) => [c.id, i]));
  const ends = input.edges!.map((e) => [at.get(e.sources[0])!, at.get(e.targets[0])!]);
  let { width, height, boxes, routes } = before;
  for (const [i, child] of children.entries()) {
    const { x: left, y: top, width: w, height: h } = boxes[i];
    const [newWidth, newHeight] = [child.width ?? 0, child.height ?? 0];
    const dw = Math.max(0, newWidth - w);
    const dh = newHeight - h;
    if (dh < 0) {
      return undefined;
    }
    if (newWidth === w && dh === 0) {
      continue;
    }
    const fx = (x: number) => (x <= left ? x - dw / 2 : x >= left + w ? x + dw / 2 : left - dw / 2 + ((x - left) * (w + dw)) / w);
    const fy = (y: number) => (y <= top ? y : y >= top + h ? y + dh : top + ((y - top) * (h + dh)) / h);
    const grown = { x: left + (w - newWidth) / 2, y: top, width: newWidth, height: newHeight };
    const moved = boxes.map((b, k) => (k === i ? grown : { ...b, x: fx(b.x + b.width / 2) - b.width / 2, y: fy(b.y + b.height / 2) - b.height / 2 }));
    // A route's ends move with the boxes they touch; its bends with the plane.
    const end = (p: ElkPoint, k: number) =>
      k === i
        ? { x: grown.x + ((p.x - left) * newWidth) / w, y: fy(p.y) }
        : { x: p.x + moved[k].x - boxes[k].x, y: p.y + moved[k].y - boxes[k].y };
    routes = routes.map((route, e) => route && route.map((p, n) =>
      n === 0 ? end(p, ends[e][0]) : n === route.length - 1 ? end(p, ends[e][1]) : { x: fx(p.x), y: fy(p.y) }));
    boxes = moved;
    width = fx(width);
    height = fy(height);
  }
  // What moved left of where the leftmost box was moves back right, and the container widens by as much.
  const shift = Math.max(0, Math.min(...before.boxes.map((b) => b.x)) - Math.min(...boxes.map((b) => b.x)));
  return {
    width: width + shift,
    height,
    boxes: boxes.map((b) => ({ ...b, x: b.x + shift })),
    routes: routes.map((route) => route && route.map((p) => ({ x: p.x + shift, y: p.y }))),
  };
}

/** From the bottom of `a` to the top of `b` (an edge across group borders, which no one layout routed). */
function curve(a: PlacedBox, b: PlacedBox): string {
  const x1 = a.x + a.width / 2;
  const y1 = a.y + a.height;
  const x2 = b.x + b.width / 2;
  const y2 = b.y;
  const bend = Math.max(20, Math.abs(y2 - y1) / 3);
  return `M${x1},${y1}C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`;
}
