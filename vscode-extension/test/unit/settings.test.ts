import * as assert from 'node:assert/strict';
import { test } from 'node:test';

import { debounce, installCommand, needsRestart, outputFolderScope } from '../../src/settings';

test('only a change of the interpreter setting restarts the server', () => {
  assert.equal(needsRestart((section) => section === 'onnxlens.interpreter', 'onnxlens'), true);
  assert.equal(needsRestart((section) => section === 'onnxlens.opset', 'onnxlens'), false);
});

test('a burst of calls runs the debounced function once, after the last', async () => {
  let calls = 0;
  const debounced = debounce(() => calls++, 20);
  debounced();
  debounced();
  await new Promise((done) => setTimeout(done, 10));
  debounced();
  await new Promise((done) => setTimeout(done, 15));
  assert.equal(calls, 0);
  await new Promise((done) => setTimeout(done, 20));
  assert.equal(calls, 1);
  debounced();
  debounced.cancel();
  await new Promise((done) => setTimeout(done, 30));
  assert.equal(calls, 1);
});

test('the install command quotes interpreters with spaces', () => {
  assert.equal(installCommand('/usr/bin/python3'), '/usr/bin/python3 -m pip install "onnxlens[server]"');
  assert.equal(installCommand('/My Envs/python'), '"/My Envs/python" -m pip install "onnxlens[server]"');
});

test('only an output folder from the user settings counts as chosen by the user', () => {
  assert.equal(outputFolderScope({ globalValue: '/elsewhere' }), 'user');
  assert.equal(outputFolderScope({ globalValue: '/elsewhere', workspaceValue: '../out' }), 'workspace');
  assert.equal(outputFolderScope({ globalValue: '/elsewhere', workspaceFolderValue: 'out' }), 'workspace');
  assert.equal(outputFolderScope({}), 'default');
  assert.equal(outputFolderScope(undefined), 'default');
});
