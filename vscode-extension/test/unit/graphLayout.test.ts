import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import type { ElkNode } from 'elkjs/lib/elk-api';

import ELK from 'elkjs/lib/elk.bundled.js';

import { Elk, Laid, Layout, PlacedBox, stretch } from '../../webview/graph/layout';
import { GraphData, GraphIndex, GraphNode } from '../../webview/graph/model';

interface Rect {
  x: number;
  y: number;
  width: number;
  height: number;
}

const overlap = (a: Rect, b: Rect) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;

function assertApart(boxes: Rect[]): void {
  boxes.forEach((a, i) => boxes.slice(i + 1).forEach((b) => assert.ok(!overlap(a, b), `${JSON.stringify(a)} overlaps ${JSON.stringify(b)}`)));
}

// a above b, c beside a (right), d below-left of b; edges a→b, a→c, b→d
const INPUT: ElkNode = {
  id: 'g',
  children: [{ id: 'a', width: 100, height: 28 }, { id: 'b', width: 100, height: 28 }, { id: 'c', width: 60, height: 28 }, { id: 'd', width: 48, height: 28 }],
  edges: [{ id: 'a>b', sources: ['a'], targets: ['b'] }, { id: 'a>c', sources: ['a'], targets: ['c'] }, { id: 'b>d', sources: ['b'], targets: ['d'] }],
};
const LAID: Laid = {
  width: 240, height: 160,
  boxes: [{ x: 10, y: 10, width: 100, height: 28 }, { x: 10, y: 62, width: 100, height: 28 }, { x: 140, y: 62, width: 60, height: 28 }, { x: 10, y: 120, width: 48, height: 28 }],
  routes: [[{ x: 60, y: 38 }, { x: 60, y: 62 }], [{ x: 80, y: 38 }, { x: 150, y: 50 }, { x: 170, y: 62 }], [{ x: 40, y: 90 }, { x: 34, y: 120 }]],
};

test('a child that grows stretches its container\'s layout: the rest moves aside, nothing comes closer', () => {
  const grown: ElkNode = { ...INPUT, children: INPUT.children!.map((c) => (c.id === 'a' ? { id: 'a', width: 300, height: 200 } : c)) };
  const laid = stretch(INPUT, LAID, grown)!;
  const [a, b, c, d] = laid.boxes;
  assert.deepEqual([a.width, a.height], [300, 200]);
  assert.deepEqual([b, c, d].map((r) => [r.width, r.height]), [[100, 28], [60, 28], [48, 28]]); // the others keep their sizes
  assertApart(laid.boxes);
  assert.equal(b.y - (a.y + a.height), 62 - 38); // the gap below the grown box is kept
  assert.equal(a.y, 10); // it grows downwards
  assert.equal(Math.min(...laid.boxes.map((r) => r.x)), 10); // nothing left of where the leftmost box was
  assert.equal(b.x + b.width / 2, a.x + a.width / 2); // centred under it as before
  assert.ok(laid.width >= Math.max(...laid.boxes.map((r) => r.x + r.width)) && laid.height >= d.y + d.height);
  // Routes end on the boxes they join.
  const [ab, , bd] = laid.routes;
  assert.deepEqual([ab![0].y, ab![1].y], [a.y + a.height, b.y]);
  assert.deepEqual(bd![0], { x: 40 + b.x - 10, y: b.y + b.height }); // moved with b
  assert.deepEqual(bd![1], { x: 34 + d.x - 10, y: d.y }); // moved with d
});

test('a layout is not stretched to a lower child, nor to other children or edges', () => {
  const lower: ElkNode = { ...INPUT, children: INPUT.children!.map((c) => (c.id === 'a' ? { id: 'a', width: 300, height: 20 } : c)) };
  assert.equal(stretch(INPUT, LAID, lower), undefined);
  assert.equal(stretch(INPUT, LAID, { ...INPUT, edges: INPUT.edges!.slice(1) }), undefined);
  assert.equal(stretch(INPUT, LAID, { ...INPUT, children: [...INPUT.children!].reverse() }), undefined);
});

// x → layer0 (mm, act) → layer1 (mm, act) → y: two layers alike.
function node(id: string, op: string, group: string | null): GraphNode {
  return { id, op, domain: '', name: id, group, module: group ?? '', inputs: [], outputs: [], attributes: {}, source: null, checks: [] };
}
const LAYERS: GraphData = {
  path: '/ws/net.onnx', opset: 18, producer: 'onnxlens', initializers: [], outcome: null, inputs: [{ name: 'x' }], outputs: [{ name: 'y' }],
  groups: [0, 1].map((i) => ({ id: `layer${i}`, parent: null, function: `Layer_${i}`, module: `layers.${i}`, class: 'Layer', source: null })),
  nodes: [0, 1].flatMap((i) => [node(`layer${i}/mm`, 'MatMul', `layer${i}`), node(`layer${i}/act`, 'Relu', `layer${i}`)]),
  edges: [
    { from: 'input:x', to: 'layer0/mm', value: 'x' }, { from: 'layer0/mm', to: 'layer0/act', value: 'a' },
    { from: 'layer0/act', to: 'layer1/mm', value: 'b' }, { from: 'layer1/mm', to: 'layer1/act', value: 'c' },
    { from: 'layer1/act', to: 'output:y', value: 'y' },
  ],
};

/** ELK, counting the containers it lays out. */
function counting(): Elk & { ids: string[] } {
  const elk = new ELK();
  const ids: string[] = [];
  return { ids, layout: (graph: ElkNode) => (ids.push(graph.id), elk.layout(graph)) };
}

const inside = (inner: PlacedBox, outer: PlacedBox) =>
  inner.x >= outer.x && inner.y >= outer.y && inner.x + inner.width <= outer.x + outer.width && inner.y + inner.height <= outer.y + outer.height;

test('expanding a layer lays out only its contents, once for layers alike; the containers around it stretch', async () => {
  const elk = counting();
  const layout = new Layout(elk, new GraphIndex(LAYERS));
  const first = await layout.place(new Set());
  assert.deepEqual([elk.ids, first.laidOut, first.stretched], [['root'], 1, 0]);

  const open0 = await layout.place(new Set(['layer0']));
  assert.deepEqual([elk.ids, open0.laidOut, open0.stretched], [['root', 'layer0'], 1, 1]); // the root stretched
  const box = (placed: typeof first, id: string) => placed.boxes.get(id)!;
  assert.ok(inside(box(open0, 'layer0/mm'), box(open0, 'layer0')) && inside(box(open0, 'layer0/act'), box(open0, 'layer0')));
  const roots = ['input:x', 'layer0', 'layer1', 'output:y'].map((id) => box(open0, id));
  assertApart(roots);
  assert.ok(roots.every((b, i) => i === 0 || roots[i - 1].y + roots[i - 1].height < b.y), 'still downwards in data-flow order');
  assert.equal(open0.edges.length, 4); // x → mm → act → layer1 → y

  const open1 = await layout.place(new Set(['layer1'])); // layer1's contents are layer0's: no ELK at all
  assert.deepEqual([elk.ids.length, open1.laidOut], [2, 0]);
  assert.ok(inside(box(open1, 'layer1/act'), box(open1, 'layer1')));
  const back = await layout.place(new Set()); // as first drawn
  assert.deepEqual([elk.ids.length, back.laidOut, back.stretched], [2, 0, 0]);
  assert.deepEqual(back.boxes, first.boxes);
});

test('a collapsed group laid out ahead of a click: expanding it needs no ELK, nor does a group alike', async () => {
  const elk = counting();
  const layout = new Layout(elk, new GraphIndex(LAYERS));
  await layout.place(new Set());
  assert.equal(await layout.prefetch('layer1', new Set()), true);
  assert.equal(await layout.prefetch('layer0', new Set()), false); // alike: laid out already
  assert.deepEqual(elk.ids, ['root', 'layer1']);
  const open = await layout.place(new Set(['layer0']));
  assert.deepEqual([open.laidOut, open.stretched, elk.ids.length], [0, 1, 2]);
});
