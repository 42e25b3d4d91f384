import * as assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Uri } from 'vscode';

import { documentKey, locationKey, locationUri, Uris } from '../../src/locations';

// vscode.Uri's factories, recording which one a location went through (no vscode module in unit tests).
const made: string[] = [];
const uris: Uris = {
  file: (path) => {
    made.push(`file ${path}`);
    return { scheme: 'file', fsPath: path, toString: () => `file://${path}` } as unknown as Uri;
  },
  parse: (value) => {
    made.push(`parse ${value}`);
    const scheme = value.slice(0, value.indexOf(':'));
    return { scheme, fsPath: value.slice(scheme.length + 1).split('#')[0], toString: () => value } as unknown as Uri;
  },
};

function madeBy(location: string): string {
  made.length = 0;
  locationUri(location, uris);
  return made[0];
}

test('a notebook cell\'s URI is parsed (its fragment kept), a path is a file', () => {
  const cell = 'vscode-notebook-cell:/work/nb/model.ipynb#W1sZmlsZQ%3D%3D';
  assert.equal(madeBy(cell), `parse ${cell}`);
  assert.equal(madeBy('file:///work/net.py'), 'parse file:///work/net.py');
  assert.equal(madeBy('/work/my models/net.py'), 'file /work/my models/net.py');
  assert.equal(madeBy('net.py'), 'file net.py');
});

test('a Windows path is a file, its drive letter not a scheme', () => {
  assert.equal(madeBy('C:\\models\\net.py'), 'file C:\\models\\net.py');
  assert.equal(madeBy('c:/models/net.py'), 'file c:/models/net.py');
  assert.equal(madeBy('\\\\server\\share\\net.py'), 'file \\\\server\\share\\net.py');
});

test('a file is known by its real path, a cell by its URI', () => {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'onnxlens-locations-')));
  try {
    mkdirSync(join(dir, 'real'));
    writeFileSync(join(dir, 'real', 'net.py'), '');
    symlinkSync(join(dir, 'real'), join(dir, 'linked'));
    const real = join(dir, 'real', 'net.py');
    assert.equal(locationKey(join(dir, 'linked', 'net.py'), uris), real);
    assert.equal(documentKey(uris.file(join(dir, 'linked', 'net.py'))), real);
    assert.equal(locationKey(join(dir, 'gone.py'), uris), join(dir, 'gone.py')); // not on disk: as given
    const cell = 'vscode-notebook-cell:/work/nb/model.ipynb#W2sZmlsZQ%3D%3D';
    assert.equal(locationKey(cell, uris), cell);
    assert.notEqual(locationKey(cell, uris), locationKey('vscode-notebook-cell:/work/nb/model.ipynb#W3sZmlsZQ%3D%3D', uris));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
