import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import { Job } from '../../src/protocol';
import { resultActions, resultMessage } from '../../src/reports';

function job(target: string, status: Job['status'], extra: Partial<Job> = {}): Job {
  const ok = status === 'ok';
  return {
    jobId: target, target, status, message: ok ? '' : 'Unsupported: a::b.', seconds: 0.44,
    onnx: ok ? `/ws/onnxlens-out/net.${target}.onnx` : null, sarif: `/ws/onnxlens-out/net.${target}.sarif`,
    summary: ok ? { nodes: 12, warnings: 0 } : null, results: [], ...extra,
  };
}

test('one export: its own result', () => {
  assert.equal(resultMessage([job('encoder', 'ok')], 'net.py'), 'Exported encoder → net.encoder.onnx (12 nodes, 0.4 s)');
  assert.equal(resultMessage([job('encoder', 'ok', { summary: { nodes: 3, warnings: 2 } })], 'net.py'), 'Exported encoder → net.encoder.onnx (3 nodes, 2 warnings, 0.4 s)');
  assert.equal(resultMessage([job('encoder', 'failed')], 'net.py'), 'Export of encoder failed: Unsupported: a::b.');
  assert.equal(resultMessage([job('encoder', 'cancelled', { message: 'Cancelled during capture.' })], 'net.py'), 'Export of encoder cancelled.');
});

test('an export for generation: its folder and the generation check', () => {
  const lm = job('lm', 'ok', { onnx: '/ws/onnxlens-out/net.lm/model.onnx', summary: { nodes: 80, warnings: 0, generation: '16 greedy tokens for 2 prompts identical to generate()' } });
  assert.equal(resultMessage([lm], 'net.py'), 'Exported lm → net.lm/ (80 nodes, 16 greedy tokens for 2 prompts identical to generate(), 0.4 s)');
});

test('several exports: one summary, every target in it in order', () => {
  assert.equal(resultMessage([job('encoder', 'ok'), job('decoder', 'ok', { seconds: 1.26 })], 'net.py'),
    'Exported 2 of 2 targets of net.py: encoder (12 nodes, 0.4 s); decoder (12 nodes, 1.3 s)');
  assert.equal(resultMessage([job('encoder', 'ok'), job('decoder', 'timeout', { message: 'Timed out after 300 s during capture.' }), job('head', 'cancelled')], 'net.py'),
    'Exported 1 of 3 targets of net.py: encoder (12 nodes, 0.4 s); decoder timeout: Timed out after 300 s during capture; head cancelled');
});

test('the buttons: problems on a failure, the logs, the graph and Netron for one exported model', () => {
  assert.deepEqual(resultActions([job('encoder', 'ok')], true), ['Open SARIF Log', 'Show Graph', 'Open in Netron']);
  assert.deepEqual(resultActions([job('encoder', 'ok')], false), ['Open SARIF Log', 'Show Graph']);
  assert.deepEqual(resultActions([job('encoder', 'failed')], true), ['Show Problems', 'Open SARIF Log']);
  assert.deepEqual(resultActions([job('encoder', 'crashed', { sarif: null })], true), ['Show Problems']);
  assert.deepEqual(resultActions([job('encoder', 'cancelled', { sarif: null })], true), []);
  assert.deepEqual(resultActions([job('encoder', 'ok'), job('decoder', 'ok')], true), ['Open SARIF Logs']);
  assert.deepEqual(resultActions([job('encoder', 'ok'), job('decoder', 'failed')], true), ['Show Problems', 'Open SARIF Logs']);
});
