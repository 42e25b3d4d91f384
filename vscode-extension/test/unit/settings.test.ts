import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import { DEFAULTS, exportOptions, installCommand, readSettings } from '../../src/settings';

test('settings fall back to defaults and keep what is set', () => {
  const stored: Record<string, unknown> = { opset: 20, dynamicShapes: true, interpreter: null };
  const settings = readSettings((key) => stored[key] as any);
  assert.equal(settings.opset, 20);
  assert.equal(settings.dynamicShapes, true);
  assert.equal(settings.interpreter, DEFAULTS.interpreter);
  assert.equal(settings.timeoutSeconds, 300);
});

test('export options carry the settings the server maps to ExportOptions', () => {
  const settings = readSettings(() => undefined);
  assert.deepEqual(exportOptions(settings), { opset: 18, dynamicShapes: false, opLevelDebug: false, verbosity: 'info', warningsAsErrors: false });
  assert.equal(exportOptions(settings, { opLevelDebug: true }).opLevelDebug, true);
});

test('the install command quotes interpreters with spaces', () => {
  assert.equal(installCommand('/usr/bin/python3'), '/usr/bin/python3 -m pip install "onnxlens[server]"');
  assert.equal(installCommand('/My Envs/python'), '"/My Envs/python" -m pip install "onnxlens[server]"');
});
