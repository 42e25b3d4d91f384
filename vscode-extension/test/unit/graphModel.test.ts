import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import type { ElkNode } from 'elkjs/lib/elk-api';

import ELK from 'elkjs/lib/elk.bundled.js';

import { Layout, PlacedBox } from '../../webview/graph/layout';
import { Check, containerGraph, defaultExpanded, errorLevel, GraphData, GraphIndex, GraphNode, MAX_LAID_OUT_FAN_OUT } from '../../webview/graph/model';

// input x → n1 (in block.inner) → n2 (in block) → n3 (root) → output y, and x → n2 too.
function node(id: string, op: string, group: string | null, line: number, checks: Check[] = []): GraphNode {
  return { id, op, domain: '', name: `${op}_${id}`, group, module: '', inputs: [], outputs: [], attributes: {}, source: { path: '/ws/net.py', line }, checks };
}

const GRAPH: GraphData = {
  path: '/ws/net.onnx', opset: 18, producer: 'onnxlens', initializers: [], outcome: null,
  inputs: [{ name: 'x' }], outputs: [{ name: 'y' }],
  groups: [
    { id: 'block', parent: null, function: 'Block_0', module: 'block', class: 'Block', source: null },
    { id: 'block/inner', parent: 'block', function: 'Linear_1', module: 'block.inner', class: 'Linear', source: null },
  ],
  nodes: [node('block/inner/n1', 'Gemm', 'block/inner', 7), node('block/n2', 'Relu', 'block', 8), node('n3', 'Add', null, 8)],
  edges: [
    { from: 'input:x', to: 'block/inner/n1', value: 'x' },
    { from: 'input:x', to: 'block/n2', value: 'x' },
    { from: 'block/inner/n1', to: 'block/n2', value: 'a' },
    { from: 'block/n2', to: 'n3', value: 'b' },
    { from: 'n3', to: 'output:y', value: 'y' },
  ],
};

/** Each box's id with its children, and the edges as "from>to". */
function shape(elk: ElkNode): { tree: unknown[]; edges: string[] } {
  const tree = (n: ElkNode): unknown[] => (n.children ?? []).map((c) => (c.children ? { [c.id]: tree(c) } : c.id));
  return { tree: tree(elk), edges: (elk.edges ?? []).map((e) => `${e.sources[0]}>${e.targets[0]}`).sort() };
}

test('groups are open at the top level only', () => {
  assert.deepEqual([...defaultExpanded(new GraphIndex(GRAPH))], ['block']);
});

test('collapsed by module: the top level open, and a lone wrapper below it, the layers one box each', () => {
  const group = (id: string, parent: string | null) => ({ id, parent, function: id, module: id, source: null });
  const layers = ['model/layers.0', 'model/layers.1'];
  const graph: GraphData = {
    ...GRAPH, edges: [],
    groups: [group('outer', null), group('model', 'outer'), ...layers.map((l) => group(l, 'model')), group('model/layers.0/attn', 'model/layers.0')],
    nodes: [node('a', 'MatMul', 'model/layers.0/attn', 3), node('b', 'Add', 'model/layers.1', 4), node('c', 'Gemm', 'model', 5)],
  };
  assert.deepEqual([...defaultExpanded(new GraphIndex(graph))].sort(), ['model', 'outer']);
  // layers at the top level (a ModuleList is not called): each one box
  const stack: GraphData = {
    ...GRAPH, edges: [], groups: Array.from({ length: 9 }, (_, i) => group(`layers.${i}`, null)),
    nodes: Array.from({ length: 9 }, (_, i) => node(`n${i}`, 'Add', `layers.${i}`, 3)),
  };
  assert.deepEqual([...defaultExpanded(new GraphIndex(stack))], []);
  assert.deepEqual([...defaultExpanded(new GraphIndex({ ...stack, groups: stack.groups.slice(1), nodes: stack.nodes.slice(1) }))].length, 8);
});

test('constants and shape plumbing are folded away unless asked for, with the groups they alone fill', () => {
  const plumbing = (n: GraphNode): GraphNode => ({ ...n, plumbing: true });
  const graph: GraphData = {
    ...GRAPH,
    groups: [...GRAPH.groups, { id: 'rotary', parent: null, function: 'Rotary_2', module: 'rotary', source: null }],
    nodes: [...GRAPH.nodes, plumbing(node('shape', 'Shape', null, 9)), plumbing(node('rotary/cos', 'Cos', 'rotary', 9))],
    edges: [...GRAPH.edges, { from: 'input:x', to: 'shape', value: 'x' }, { from: 'shape', to: 'n3', value: 's' }, { from: 'rotary/cos', to: 'n3', value: 'c' }],
  };
  const folded = new GraphIndex(graph, { plumbing: false });
  assert.deepEqual([...folded.nodes.keys()], ['block/inner/n1', 'block/n2', 'n3']);
  assert.deepEqual([...folded.groups.keys()], ['block', 'block/inner']); // rotary held only plumbing
  assert.equal(folded.hidden, 2);
  assert.deepEqual(folded.edges, GRAPH.edges);
  assert.deepEqual(shape(containerGraph(folded, null, new Set(), new Map())).tree, ['input:x', 'block', 'n3', 'output:y']);
  const all = new GraphIndex(graph, { plumbing: true });
  assert.equal(all.nodes.size, 5);
  assert.equal(all.edges.length, 8);
  assert.deepEqual(shape(containerGraph(all, null, new Set(), new Map())).tree, ['input:x', 'block', 'rotary', 'n3', 'shape', 'output:y']);
});

test('a collapsed group shows the worst error, marks and compared changes it holds', () => {
  const failed: Check = { rule: 'FXE0021', ok: false, maxAbsError: 1, atol: 1e-4, rtol: 1e-4 };
  const graph: GraphData = {
    ...GRAPH,
    nodes: [
      { ...node('block/inner/n1', 'Gemm', 'block/inner', 7, [failed]), diff: 'changed' },
      { ...node('block/n2', 'Relu', 'block', 8), marks: [{ rule: 'FXE0020', level: 'warning', message: 'dim 0 specialized' }], diff: 'same' },
      { ...node('n3', 'Add', null, 8), diff: 'added' },
    ],
  };
  const index = new GraphIndex(graph);
  assert.deepEqual(index.groupContents('block'), { level: 'over1000', marked: true, diff: true });
  assert.deepEqual(index.groupContents('block/inner'), { level: 'over1000', marked: false, diff: true });
});

test('a collapsed group is one box with its boundary edges', () => {
  const index = new GraphIndex(GRAPH);
  assert.deepEqual(shape(containerGraph(index, null, new Set(), new Map())), {
    tree: ['input:x', 'block', 'n3', 'output:y'],
    edges: ['block>n3', 'input:x>block', 'n3>output:y'], // x → block once, not twice; nothing inside the block
  });
});

test('an open group is laid out on its own: its children, the edges between them', () => {
  const index = new GraphIndex(GRAPH);
  const open = new Set(['block']);
  assert.deepEqual(shape(containerGraph(index, 'block', open, new Map())), { tree: ['block/inner', 'block/n2'], edges: ['block/inner>block/n2'] });
  // Around it, the block is one box of the size its own layout gave it.
  const root = containerGraph(index, null, open, new Map([['block', { width: 300, height: 200 }]]));
  assert.deepEqual(shape(root), { tree: ['input:x', 'block', 'n3', 'output:y'], edges: ['block>n3', 'input:x>block', 'n3>output:y'] });
  assert.deepEqual(root.children?.find((c) => c.id === 'block'), { id: 'block', width: 300, height: 200 });
  assert.equal(root.layoutOptions?.['elk.algorithm'], 'layered');
  assert.equal(root.layoutOptions?.['elk.direction'], 'DOWN');
  // Inside the inner group: its node, and no edge (its input comes from outside).
  assert.deepEqual(shape(containerGraph(index, 'block/inner', new Set(['block', 'block/inner']), new Map())), { tree: ['block/inner/n1'], edges: [] });
});

test('a box feeding many boxes of its container is left out of the layout\'s edges, not of the drawing', async () => {
  const consumers = Array.from({ length: MAX_LAID_OUT_FAN_OUT + 1 }, (_, i) => node(`c${i}`, 'Add', null, 20));
  const graph: GraphData = {
    ...GRAPH, groups: [], nodes: [node('mask', 'Shape', null, 10), ...consumers],
    edges: [{ from: 'input:x', to: 'mask', value: 'x' }, ...consumers.map((c) => ({ from: 'mask', to: c.id, value: 'm' }))],
  };
  const index = new GraphIndex(graph);
  assert.deepEqual(shape(containerGraph(index, null, new Set(), new Map())).edges, ['input:x>mask']);
  assert.equal((await new Layout(new ELK(), index).place(new Set())).edges.length, MAX_LAID_OUT_FAN_OUT + 2);
  const fewer = { ...graph, nodes: graph.nodes.slice(0, -1), edges: graph.edges.slice(0, -1) }; // at the limit: laid out
  assert.equal(shape(containerGraph(new GraphIndex(fewer), null, new Set(), new Map())).edges.length, MAX_LAID_OUT_FAN_OUT + 1);
});

test('placed with ELK: boxes inside their groups, layouts kept until what is open in them changes', async () => {
  const layout = new Layout(new ELK(), new GraphIndex(GRAPH));
  const all = new Set(['block', 'block/inner']);
  const placed = await layout.place(all);
  assert.equal(placed.laidOut, 3); // block/inner, block, the root
  const inside = (inner: PlacedBox, outer: PlacedBox) =>
    inner.x >= outer.x && inner.y >= outer.y && inner.x + inner.width <= outer.x + outer.width && inner.y + inner.height <= outer.y + outer.height;
  const box = (id: string) => placed.boxes.get(id)!;
  assert.ok(inside(box('block/inner/n1'), box('block/inner')) && inside(box('block/inner'), box('block')) && inside(box('block/n2'), box('block')));
  assert.ok(!inside(box('n3'), box('block')));
  assert.ok(box('block/inner/n1').y < box('block/n2').y && box('block').y + box('block').height <= box('n3').y, 'downwards, in data-flow order');
  assert.equal(placed.edges.length, 5); // every edge of the model joins two shown boxes
  assert.deepEqual([...placed.boxes.keys()].sort(), ['block', 'block/inner', 'block/inner/n1', 'block/n2', 'input:x', 'n3', 'output:y']);

  assert.equal((await layout.place(all)).laidOut, 0);
  const collapsed = await layout.place(new Set(['block']));
  assert.equal(collapsed.laidOut, 2); // the block (its inner group is one box now) and the root; nothing inside the inner group
  assert.equal(collapsed.edges.length, 5); // x → inner, x → n2, inner → n2, n2 → n3, n3 → y
  assert.ok(!collapsed.boxes.has('block/inner/n1'));
  const closed = await layout.place(new Set());
  assert.equal(closed.edges.length, 3); // x → block (once), block → n3, n3 → y
  assert.deepEqual([...closed.boxes.keys()].sort(), ['block', 'input:x', 'n3', 'output:y']);
});

test('a source line gives its nodes, and the groups to open to show them', () => {
  const index = new GraphIndex(GRAPH);
  assert.deepEqual(index.nodesAt('/ws/net.py', 8), ['block/n2', 'n3']);
  assert.deepEqual(index.nodesAt('/ws/net.py', 7), ['block/inner/n1']);
  assert.deepEqual(index.nodesAt('/ws/other.py', 7), []);
  assert.deepEqual([...index.groupsAround(index.nodesAt('/ws/net.py', 7))].sort(), ['block', 'block/inner']);
  assert.deepEqual([...index.groupsAround(['n3'])], []);
});

test('a node shows as itself or as its outermost collapsed group', () => {
  const index = new GraphIndex(GRAPH);
  assert.equal(index.visibleBox('block/inner/n1', new Set()), 'block');
  assert.equal(index.visibleBox('block/inner/n1', new Set(['block'])), 'block/inner');
  assert.equal(index.visibleBox('block/inner/n1', new Set(['block', 'block/inner'])), 'block/inner/n1');
  assert.equal(index.visibleBox('block/inner', new Set()), 'block');
  assert.equal(index.nodeCount('block'), 2);
  assert.equal(index.nodeCount('block/inner'), 1);
});

test('search by op type, name, module or source file:line, case-insensitive', () => {
  const index = new GraphIndex({ ...GRAPH, nodes: GRAPH.nodes.map((n) => (n.id === 'n3' ? n : { ...n, module: 'block.inner' })) });
  assert.deepEqual(index.search('gemm'), ['block/inner/n1']);
  assert.deepEqual(index.search('relu_block'), ['block/n2']);
  assert.deepEqual(index.search('BLOCK.INNER'), ['block/inner/n1', 'block/n2']);
  assert.deepEqual(index.search('net.py:8'), ['block/n2', 'n3']);
  assert.deepEqual(index.search('/ws/net.py:7'), ['block/inner/n1']);
  assert.deepEqual(index.search('et.py:7'), []); // a file name's end is not a file
  assert.deepEqual(index.search('  '), []);
});

test('a module call\'s line gives its group', () => {
  const graph: GraphData = { ...GRAPH, groups: GRAPH.groups.map((g) => (g.id === 'block' ? { ...g, source: { path: '/ws/net.py', line: 20 } } : g)) };
  assert.deepEqual(new GraphIndex(graph).groupsAt('/ws/net.py', 20), ['block']);
  assert.deepEqual(new GraphIndex(graph).groupsAt('/ws/net.py', 8), []);
});

test('error levels: the worst failed check in multiples of atol + rtol', () => {
  const check = (maxAbsError: number, ok: boolean): Check => ({ rule: 'FXE0013', ok, maxAbsError, atol: 1e-4, rtol: 1e-3 });
  assert.equal(errorLevel([]), 'unchecked');
  assert.equal(errorLevel([{ rule: 'FXE0013', skipped: true }]), 'unchecked');
  assert.equal(errorLevel([check(1e-5, true)]), 'ok');
  assert.equal(errorLevel([check(1e-5, true), check(0.011, false)]), 'over'); // 10× of 1.1e-3
  assert.equal(errorLevel([check(0.0111, false)]), 'over10');
  assert.equal(errorLevel([check(1.1, false)]), 'over10'); // 1000×
  assert.equal(errorLevel([check(1.2, false), check(0.001, false)]), 'over1000');
});
