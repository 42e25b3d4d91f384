// Places what shows: each open container (the root, an expanded group) is laid out by ELK on its own, innermost
// first, and kept until what is open inside it changes; then every box gets absolute coordinates and every edge
// a path. No DOM: unit-testable in node with elkjs.
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
  laidOut: number; // containers ELK laid out for this (the others came from the cache)
}

export interface Elk {
  layout(graph: ElkNode): Promise<ElkNode>;
}

export class Layout {
  /** Each container's last layout, by container ("" for the root), with what was open inside it then. */
  private readonly cache = new Map<string, { key: string; laid: ElkNode }>();

  constructor(private readonly elk: Elk, private readonly index: GraphIndex) {}

  async place(expanded: ReadonlySet<string>): Promise<Placed> {
    const laid = new Map<string | null, ElkNode>();
    let laidOut = 0;
    /** Lays out `container` after its open children; resolves with what is open inside it (the cache key). */
    const layOut = async (container: string | null): Promise<string> => {
      const sizes = new Map<string, Size>();
      const open: string[] = [];
      for (const child of childBoxes(this.index, container).filter((id) => expanded.has(id))) {
        open.push(`${child}{${await layOut(child)}}`);
        const inner = laid.get(child)!;
        sizes.set(child, { width: Math.max(inner.width ?? 0, headerWidth(this.index.groups.get(child)!)), height: inner.height ?? 0 });
      }
      const key = open.join(',');
      const cached = this.cache.get(container ?? '');
      if (cached?.key === key) {
        laid.set(container, cached.laid);
      } else {
        const result = await this.elk.layout(containerGraph(this.index, container, expanded, sizes));
        laidOut++;
        this.cache.set(container ?? '', { key, laid: result });
        laid.set(container, result);
      }
      return key;
    };
    await layOut(null);

    const boxes = new Map<string, PlacedBox>();
    const routes = new Map<string, ElkPoint[]>(); // ELK's route of an edge between two boxes of one container
    const place = (container: string | null, dx: number, dy: number): void => {
      const graph = laid.get(container)!;
      for (const child of graph.children ?? []) {
        const x = dx + (child.x ?? 0);
        const y = dy + (child.y ?? 0);
        boxes.set(child.id, { x, y, width: child.width ?? 0, height: child.height ?? 0, container });
        if (expanded.has(child.id)) {
          place(child.id, x, y);
        }
      }
      for (const edge of graph.edges ?? []) {
        const section = edge.sections?.[0];
        if (section) {
          routes.set(edge.id, [section.startPoint, ...(section.bendPoints ?? []), section.endPoint].map((p) => ({ x: dx + p.x, y: dy + p.y })));
        }
      }
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
    return { boxes, edges, laidOut };
  }
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
