import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import type { ElkNode } from 'elkjs/lib/elk-api';

import { Check, defaultExpanded, elkGraph, errorLevel, GraphData, GraphIndex, GraphNode } from '../../webview/graph/model';

// input x → n1 (in block.inner) → n2 (in block) → n3 (root) → output y, and x → n2 too.
function node(id: string, op: string, group: string | null, line: number, checks: Check[] = []): GraphNode {
  return { id, op, domain: '', name: `${op}_${id}`, group, module: '', inputs: [], outputs: [], attributes: {}, source: { path: '/ws/net.py', line }, stack: [], checks };
}

const GRAPH: GraphData = {
  path: '/ws/net.onnx', opset: 18, producer: 'onnxlens', initializers: [],
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
  assert.deepEqual([...defaultExpanded(GRAPH)], ['block']);
});

test('a collapsed group is one box with its boundary edges', () => {
  const index = new GraphIndex(GRAPH);
  assert.deepEqual(shape(elkGraph(index, new Set(['block']))), {
    tree: ['input:x', { block: ['block/inner', 'block/n2'] }, 'n3', 'output:y'],
    edges: ['block/inner>block/n2', 'block/n2>n3', 'input:x>block/inner', 'input:x>block/n2', 'n3>output:y'],
  });
  // All closed: the edges inside the block are gone, and x → block is one edge (not two).
  assert.deepEqual(shape(elkGraph(index, new Set())), {
    tree: ['input:x', 'block', 'n3', 'output:y'],
    edges: ['block>n3', 'input:x>block', 'n3>output:y'],
  });
});

test('an open group is a compound node around its nodes', () => {
  const elk = elkGraph(new GraphIndex(GRAPH), new Set(['block', 'block/inner']));
  assert.deepEqual(shape(elk), {
    tree: ['input:x', { block: [{ 'block/inner': ['block/inner/n1'] }, 'block/n2'] }, 'n3', 'output:y'],
    edges: ['block/inner/n1>block/n2', 'block/n2>n3', 'input:x>block/inner/n1', 'input:x>block/n2', 'n3>output:y'],
  });
  assert.equal(elk.layoutOptions?.['elk.algorithm'], 'layered');
  assert.equal(elk.layoutOptions?.['elk.direction'], 'DOWN');
  assert.equal(elk.layoutOptions?.['elk.hierarchyHandling'], 'INCLUDE_CHILDREN'); // edges cross group borders
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

test('search by op type or name, case-insensitive', () => {
  const index = new GraphIndex(GRAPH);
  assert.deepEqual(index.search('gemm'), ['block/inner/n1']);
  assert.deepEqual(index.search('relu_block'), ['block/n2']);
  assert.deepEqual(index.search('  '), []);
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
