import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import { filesOf, groupResults, problemCounts } from '../../src/results';

const log = {
  runs: [
    {
      tool: { driver: { name: 'onnxlens', rules: [{ id: 'FXE0011', name: 'no-symbolic-function-for-call-function' }, { id: 'FXE0012', name: 'unsupported-fx-node-analysis' }, { id: 'FXE0017', name: 'fx-graph-capture' }] } },
      originalUriBaseIds: { SRCROOT: { uri: 'file:///work/my%20models/' } },
      results: [
        { ruleId: 'FXE0017', level: 'note', message: { text: 'strict capture failed' } },
        { ruleId: 'FXE0011', level: 'error', message: { text: 'no function for a::b' },
          locations: [{ physicalLocation: { artifactLocation: { uri: 'net.py', uriBaseId: 'SRCROOT' }, region: { startLine: 12 } } }] },
        { ruleId: 'FXE0008', level: 'none', message: { text: 'trail' } },
        { ruleId: 'FXE0012', level: 'error', message: { text: 'unsupported: a::b' },
          locations: [{ physicalLocation: { artifactLocation: { uri: 'file:///elsewhere/helpers.py' }, region: { startLine: 3 } } }] },
        { ruleId: 'FXE0011', message: { text: 'another' } },
      ],
    },
  ],
};

test('results are grouped by rule, errors first, level-none dropped', () => {
  const [run] = groupResults(log);
  assert.equal(run.tool, 'onnxlens');
  assert.deepEqual(run.rules.map((r) => r.ruleId), ['FXE0011', 'FXE0012', 'FXE0017']);
  assert.equal(run.rules[0].ruleName, 'no-symbolic-function-for-call-function');
  assert.deepEqual(run.rules[0].results.map((r) => r.level), ['error', 'warning']); // SARIF's default level is warning
});

test('locations resolve uriBaseId and percent-encoding to 0-based lines', () => {
  const [run] = groupResults(log);
  assert.deepEqual(run.rules[0].results[0].location, { path: '/work/my models/net.py', line: 11 });
  assert.deepEqual(run.rules[1].results[0].location, { path: '/elsewhere/helpers.py', line: 2 });
  assert.equal(run.rules[2].results[0].location, undefined);
});

test('filesOf lists every file the results point into', () => {
  assert.deepEqual([...filesOf(log)].sort(), ['/elsewhere/helpers.py', '/work/my models/net.py']);
});

test('problem counts by level, or no problems', () => {
  assert.equal(problemCounts(groupResults(log)), '2 errors, 1 warning, 1 note');
  assert.equal(problemCounts(groupResults({ runs: [{ tool: { driver: { name: 'onnxlens' } }, results: [] }] })), 'no problems');
});
