import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import { Job, Outcome, OutcomeKind } from '../../src/protocol';
import { resultActions, resultMessage, severity, statusText } from '../../src/reports';

const SEVERITIES = { failed: 'error', wrong: 'error', degraded: 'warning', verified: 'info', exported: 'info' } as const;

function outcome(kind: OutcomeKind, headline: string): Outcome {
  return { kind, headline, severity: SEVERITIES[kind], fixedDims: [] };
}

/** A job as the server sends it; a model and a size unless it failed. */
function job(target: string, kind: OutcomeKind, extra: Partial<Job> = {}): Job {
  const model = kind !== 'failed';
  return {
    jobId: target, target, status: kind === 'failed' || kind === 'wrong' ? 'failed' : 'ok',
    outcome: outcome(kind, kind === 'failed' ? `Export of ${target} failed: Unsupported: a::b.` : `Exported ${target}`),
    message: '', seconds: 0.44,
    onnx: model ? `/ws/onnxlens-out/net.${target}.onnx` : null, sarif: `/ws/onnxlens-out/net.${target}.sarif`,
    summary: model ? { nodes: 12, warnings: 0 } : null, results: [], ...extra,
  };
}

const verified = job('encoder', 'verified', { outcome: outcome('verified', 'Exported encoder, verified in onnxruntime: 1 output matches (max abs error 2.38e-07)') });
const degraded = job('encoder', 'degraded', { outcome: outcome('degraded', 'Exported encoder, but its dimensions are all static: x[2, 8] (asked dynamic: x)') });
const wrong = job('encoder', 'wrong', {
  outcome: outcome('wrong', "encoder's model is wrong: output 0 diverges at net.py:12 (floor_divide)"), summary: null,
});
const cancelled = job('encoder', 'failed', { status: 'cancelled', message: 'Cancelled during capture.', sarif: null });

test('one export: its outcome in its words, the model and its size in ops (as the graph view counts them)', () => {
  assert.equal(resultMessage([job('encoder', 'exported')], 'net.py'), 'Exported encoder → net.encoder.onnx (12 ops, 0.4 s)');
  assert.equal(resultMessage([job('encoder', 'exported', { summary: { nodes: 3, warnings: 2 } })], 'net.py'), 'Exported encoder → net.encoder.onnx (3 ops, 2 warnings, 0.4 s)');
  assert.equal(resultMessage([verified], 'net.py'),
    'Exported encoder, verified in onnxruntime: 1 output matches (max abs error 2.38e-07) → net.encoder.onnx (12 ops, 0.4 s)');
  assert.equal(resultMessage([degraded], 'net.py'),
    'Exported encoder, but its dimensions are all static: x[2, 8] (asked dynamic: x) → net.encoder.onnx (12 ops, 0.4 s)');
  assert.equal(resultMessage([wrong], 'net.py'),
    "encoder's model is wrong: output 0 diverges at net.py:12 (floor_divide). The model is kept to inspect: net.encoder.onnx (0.4 s)");
  assert.equal(resultMessage([job('encoder', 'failed')], 'net.py'), 'Export of encoder failed: Unsupported: a::b.');
  assert.equal(resultMessage([cancelled], 'net.py'), 'Export of encoder cancelled.');
});

test('each outcome its own look: error for failed and wrong, warning for degraded, info for verified and exported', () => {
  assert.equal(severity([job('encoder', 'failed')]), 'error');
  assert.equal(severity([wrong]), 'error'); // a model it knows is wrong is never an info success
  assert.equal(severity([degraded]), 'warning');
  assert.equal(severity([verified]), 'info');
  assert.equal(severity([job('encoder', 'exported')]), 'info');
  assert.equal(severity([cancelled]), 'info');
  assert.equal(severity([job('a', 'exported'), degraded, job('b', 'exported')]), 'warning'); // the worst of several
  assert.deepEqual(statusText([verified]), { text: '$(pass-filled) encoder: verified', tooltip: verified.outcome.headline });
  assert.deepEqual(statusText([wrong]).text, '$(error) encoder: wrong model');
  assert.deepEqual(statusText([degraded]).text, '$(warning) encoder: static shapes');
  assert.deepEqual(statusText([job('a', 'exported'), job('b', 'failed')]).text, '$(error) b: failed (+1)');
});

test('an export for generation: its folder and the generation check', () => {
  const lm = job('lm', 'exported', { onnx: '/ws/onnxlens-out/net.lm/model.onnx', summary: { nodes: 80, warnings: 0, generation: '16 greedy tokens for 2 prompts identical to generate()' } });
  assert.equal(resultMessage([lm], 'net.py'), 'Exported lm → net.lm/ (80 ops, 16 greedy tokens for 2 prompts identical to generate(), 0.4 s)');
});

test('several exports: one summary, every target in it in order, each with its outcome', () => {
  assert.equal(resultMessage([job('encoder', 'exported'), job('decoder', 'exported', { seconds: 1.26 })], 'net.py'),
    'Exported 2 of 2 targets of net.py: encoder (12 ops, 0.4 s); decoder (12 ops, 1.3 s)');
  const timeout = job('decoder', 'failed', { status: 'timeout', outcome: outcome('failed', 'Export of decoder failed: Timed out after 300 s during capture.') });
  assert.equal(resultMessage([job('encoder', 'exported'), timeout, job('head', 'failed', { status: 'cancelled' }), { ...wrong, target: 'tail' }], 'net.py'),
    'Exported 1 of 4 targets of net.py: encoder (12 ops, 0.4 s); decoder failed: Export of decoder failed: Timed out after 300 s during capture; '
    + "head cancelled; tail wrong model (0.4 s): encoder's model is wrong: output 0 diverges at net.py:12 (floor_divide)");
});

test('the buttons: problems unless plainly exported, the logs, the graph and Netron for one model (a wrong one too)', () => {
  assert.deepEqual(resultActions([job('encoder', 'exported')], true), ['Open SARIF Log', 'Show Graph', 'Open in Netron']);
  assert.deepEqual(resultActions([verified], false), ['Open SARIF Log', 'Show Graph']);
  assert.deepEqual(resultActions([wrong], false), ['Show Problems', 'Open SARIF Log', 'Show Graph']);
  assert.deepEqual(resultActions([degraded], false), ['Show Problems', 'Open SARIF Log', 'Show Graph']);
  assert.deepEqual(resultActions([job('encoder', 'failed')], true), ['Show Problems', 'Open SARIF Log']);
  assert.deepEqual(resultActions([job('encoder', 'failed', { status: 'crashed', sarif: null })], true), ['Show Problems']);
  assert.deepEqual(resultActions([cancelled], true), []);
  assert.deepEqual(resultActions([job('encoder', 'exported'), job('decoder', 'exported')], true), ['Open SARIF Logs']);
  assert.deepEqual(resultActions([job('encoder', 'exported'), job('decoder', 'failed')], true), ['Show Problems', 'Open SARIF Logs']);
});
