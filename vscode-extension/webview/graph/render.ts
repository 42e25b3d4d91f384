// Draws a laid-out ELK graph as SVG: groups (open: a frame with a header; collapsed: one box), op nodes,
// graph inputs/outputs and the edges. Every box is a <g data-id> the view finds again by id.
import type { ElkNode } from 'elkjs/lib/elk-api';

import { errorLevel, GraphIndex, groupLabel } from './model';

const SVG = 'http://www.w3.org/2000/svg';

export interface Box {
  element: SVGGElement;
  x: number; // absolute, in graph units
  y: number;
  width: number;
  height: number;
}

/** Replaces the content of `layer` by the drawing of `laid`; returns the boxes by id. */
export function render(layer: SVGGElement, laid: ElkNode, index: GraphIndex, expanded: ReadonlySet<string>): Map<string, Box> {
  const boxes = new Map<string, Box>();
  const groups = element('g', { class: 'groups' });
  const edges = element('g', { class: 'edges' });
  const nodes = element('g', { class: 'nodes' });
  const draw = (parent: ElkNode, dx: number, dy: number): void => {
    for (const child of parent.children ?? []) {
      const x = dx + (child.x ?? 0);
      const y = dy + (child.y ?? 0);
      const width = child.width ?? 0;
      const height = child.height ?? 0;
      const g = boxElement(child.id, index, expanded, width, height);
      g.setAttribute('transform', `translate(${x},${y})`);
      (expanded.has(child.id) ? groups : nodes).appendChild(g);
      boxes.set(child.id, { element: g, x, y, width, height });
      draw(child, x, y);
    }
  };
  draw(laid, 0, 0);
  for (const edge of laid.edges ?? []) {
    for (const section of edge.sections ?? []) {
      const points = [section.startPoint, ...(section.bendPoints ?? []), section.endPoint];
      edges.appendChild(element('path', { d: `M${points.map((p) => `${p.x},${p.y}`).join('L')}`, 'marker-end': 'url(#arrow)' }));
    }
  }
  layer.replaceChildren(groups, edges, nodes);
  return boxes;
}

function boxElement(id: string, index: GraphIndex, expanded: ReadonlySet<string>, width: number, height: number): SVGGElement {
  const node = index.nodes.get(id);
  const group = index.groups.get(id);
  let kind: string;
  let label: string;
  let title: string;
  let level = 'unchecked';
  if (node) {
    kind = 'node';
    label = node.op;
    level = errorLevel(node.checks);
    title = `${node.op} ${node.name}\n${node.module || '(root)'}${node.source ? `\n${node.source.path}:${node.source.line}` : ''}`;
  } else if (group) {
    kind = expanded.has(id) ? 'group' : 'collapsed';
    label = kind === 'group' ? groupLabel(group) : `${groupLabel(group)} · ${index.nodeCount(id)} ops`;
    title = `${group.module} (${group.class ?? group.function}): click to ${kind === 'group' ? 'collapse' : 'expand'}`;
  } else {
    kind = 'io';
    label = id.slice(id.indexOf(':') + 1);
    title = id;
  }
  const g = element('g', { class: `box ${kind} level-${level}`, 'data-id': id, 'data-kind': kind });
  g.appendChild(element('rect', { width, height, rx: kind === 'io' ? height / 2 : 4 }));
  if (kind === 'group') {
    g.appendChild(element('rect', { class: 'header', width, height: 22, rx: 4 }));
  }
  const text = element('text', { x: kind === 'group' ? 8 : width / 2, y: kind === 'group' ? 15 : height / 2 + 4, 'text-anchor': kind === 'group' ? 'start' : 'middle' });
  text.textContent = label;
  g.appendChild(text);
  const tooltip = element('title', {});
  tooltip.textContent = title;
  g.appendChild(tooltip);
  return g;
}

function element<K extends keyof SVGElementTagNameMap>(tag: K, attributes: Record<string, string | number>): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) {
    e.setAttribute(name, String(value));
  }
  return e;
}
