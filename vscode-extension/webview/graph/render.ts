// Draws placed boxes as SVG: open groups (a frame with a header), collapsed groups, op nodes, graph inputs and
// outputs, and the edges. Every box is a <g class="box" data-id> the view finds again by id.
import { boxLabel, errorLevel, GraphIndex } from './model';
import { Placed, PlacedBox } from './layout';

const SVG = 'http://www.w3.org/2000/svg';

export interface Box extends PlacedBox {
  element: SVGGElement;
}

/** Replaces the content of `layer` by the drawing of `placed`; returns the boxes by id. */
export function render(layer: SVGGElement, placed: Placed, index: GraphIndex, expanded: ReadonlySet<string>): Map<string, Box> {
  const boxes = new Map<string, Box>();
  const groups = element('g', { class: 'groups' });
  const edges = element('g', { class: 'edges' });
  const nodes = element('g', { class: 'nodes' });
  for (const [id, box] of placed.boxes) {
    const g = boxElement(id, index, expanded, box);
    (expanded.has(id) ? groups : nodes).appendChild(g);
    boxes.set(id, { ...box, element: g });
  }
  for (const d of placed.edges) {
    edges.appendChild(element('path', { d, 'marker-end': 'url(#arrow)' }));
  }
  layer.replaceChildren(groups, edges, nodes);
  return boxes;
}

function boxElement(id: string, index: GraphIndex, expanded: ReadonlySet<string>, { x, y, width, height }: PlacedBox): SVGGElement {
  const node = index.nodes.get(id);
  const group = index.groups.get(id);
  const kind = node ? 'node' : group ? (expanded.has(id) ? 'group' : 'collapsed') : 'io';
  const classes = ['box', kind, ...overlays(id, index, kind)].join(' ');
  const g = element('g', { class: classes, 'data-id': id, 'data-kind': kind, transform: `translate(${x},${y})` });
  g.appendChild(element('rect', { width, height, rx: kind === 'io' ? height / 2 : 4 }));
  if (kind === 'group') {
    g.appendChild(element('rect', { class: 'header', width, height: 22, rx: 4 }));
  }
  const text = element('text', kind === 'group' ? { x: 8, y: 15 } : { x: width / 2, y: height / 2 + 4, 'text-anchor': 'middle' });
  text.textContent = boxLabel(index, id, expanded);
  const title = element('title', {});
  if (node) {
    const source = node.source ? [`${node.source.path}:${node.source.line}`] : [];
    const marks = (node.marks ?? []).map((m) => `${m.rule}: ${m.message}`);
    const diff = node.diff && node.diff !== 'same' ? [node.diff] : [];
    title.textContent = [`${node.op} ${node.name}`, node.module || '(root)', ...source, ...marks, ...diff].join('\n');
  } else if (group) {
    const call = group.source ? ` called at ${group.source.path}:${group.source.line}` : '';
    const click = kind === 'group' ? 'collapse' : 'expand';
    title.textContent = `${group.module} (${group.class ?? group.function})${call}: click to ${click}`;
  } else {
    title.textContent = id;
  }
  g.append(text, title);
  return g;
}

/** The overlay classes of a box: a node's error level, FXE0020 mark and comparison status; a collapsed group's
 * worst level inside, and whether it holds marked or compared-changed nodes. */
function overlays(id: string, index: GraphIndex, kind: string): string[] {
  const node = index.nodes.get(id);
  if (node) {
    const level = `level-${errorLevel(node.checks)}`;
    return [level, ...(node.marks?.length ? ['marked'] : []), ...(node.diff ? [`diff-${node.diff}`] : [])];
  }
  if (kind === 'collapsed') {
    const inside = index.groupContents(id);
    return [`level-${inside.level}`, ...(inside.marked ? ['marked'] : []), ...(inside.diff ? ['diff-inside'] : [])];
  }
  return [];
}

function element<K extends keyof SVGElementTagNameMap>(tag: K, attributes: Record<string, string | number>): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) {
    e.setAttribute(name, String(value));
  }
  return e;
}
