// Source locations from the server (problems' results, graph nodes' sources): a file's path, or a notebook cell's URI
// (`vscode-notebook-cell:…#…`, server/notebooks.py) as VS Code gave it. No runtime vscode import (unit-testable):
// callers pass `vscode.Uri`.
import { realpathSync } from 'node:fs';
import type { Uri } from 'vscode';

/** `vscode.Uri`'s two factories. */
export interface Uris {
  file(path: string): Uri;
  parse(value: string): Uri;
}

/** A scheme of two characters or more: "C:\models\net.py" is a Windows path, not a URI of scheme "c". */
const SCHEME = /^[a-zA-Z][a-zA-Z0-9+.-]+:/;

/** The URI of a server location: a URI (a notebook cell's) parsed, a path as a file. */
export function locationUri(location: string, uris: Uris): Uri {
  return SCHEME.test(location) ? uris.parse(location) : uris.file(location);
}

/** What a document's lines are known by: a file's real path (symbolic links resolved), else its URI as text (a cell's,
 * its fragment escaped as VS Code writes it). Equal for an editor's document and the server location it shows. */
export function documentKey(uri: Uri): string {
  return uri.scheme === 'file' ? realPath(uri.fsPath) : uri.toString();
}

/** `documentKey` of a server location. */
export function locationKey(location: string, uris: Uris): string {
  return documentKey(locationUri(location, uris));
}

function realPath(file: string): string {
  try {
    return realpathSync(file);
  } catch {
    return file;
  }
}
