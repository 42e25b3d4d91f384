import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import { ResultItem } from '../../src/protocol';
import { filesOf, groupResults, problemCounts, wrap } from '../../src/results';

// An export's results as the server sends them (`Job.results`: level none left out, locations resolved).
const results: ResultItem[] = [
  { ruleId: 'FXE0017', ruleName: 'fx-graph-capture', level: 'note', message: 'strict capture failed', location: null },
  { ruleId: 'FXE0011', ruleName: 'no-symbolic-function-for-call-function', level: 'error', message: 'no function for a::b',
    location: { path: '/work/my models/net.py', line: 11 } },
  { ruleId: 'FXE0012', ruleName: 'unsupported-fx-node-analysis', level: 'error', message: 'unsupported: a::b',
    location: { path: '/elsewhere/helpers.py', line: 2 } },
  { ruleId: 'FXE0011', ruleName: 'no-symbolic-function-for-call-function', level: 'warning', message: 'another', location: null },
];

test('results are grouped by rule, errors first', () => {
  const [run] = groupResults(results);
  assert.equal(run.tool, 'onnxlens');
  assert.deepEqual(run.rules.map((r) => r.ruleId), ['FXE0011', 'FXE0012', 'FXE0017']);
  assert.equal(run.rules[0].ruleName, 'no-symbolic-function-for-call-function');
  assert.deepEqual(run.rules[0].results.map((r) => r.level), ['error', 'warning']);
  assert.deepEqual(run.rules[0].results[0].location, { path: '/work/my models/net.py', line: 11 });
});

test('filesOf lists every file the results point into', () => {
  assert.deepEqual([...filesOf(results)].sort(), ['/elsewhere/helpers.py', '/work/my models/net.py']);
});

test('problem counts by level, or no problems', () => {
  assert.equal(problemCounts(groupResults(results)), '2 errors, 1 warning, 1 note');
  assert.equal(problemCounts(groupResults([])), 'no problems');
});

test('a long message is wrapped into rows at spaces, every word kept, its own line breaks kept', () => {
  const message = 'First divergence from eager PyTorch in onnxruntime: aten.floor_divide.default at net.py:12 gives other integers\nReproducer: run.py';
  const rows = wrap(message, 40);
  assert.ok(rows.every((row) => row.length <= 40), rows.join('|'));
  assert.deepEqual(rows.join(' ').split(/\s+/), message.split(/\s+/));
  assert.equal(rows.at(-1), 'Reproducer: run.py');
  assert.deepEqual(wrap('short'), ['short']);
  assert.deepEqual(wrap('averyveryverylongword fits', 8), ['averyveryverylongword', 'fits']);
});
