// Netron: serve an .onnx model with the interpreter's netron package and open it in the browser.
import { spawn } from 'node:child_process';
import * as vscode from 'vscode';

const SCRIPT = 'import sys, netron; a = netron.start(sys.argv[1], browse=False); print("http://%s:%d" % a, flush=True); netron.wait()';

/** Starts Netron on `model` with `python`; opens its page once it prints its address. */
export function openInNetron(python: string, model: string, log: vscode.LogOutputChannel): void {
  const netron = spawn(python, ['-c', SCRIPT, model], { stdio: ['ignore', 'pipe', 'pipe'] });
  netron.stdout.once('data', (data: Buffer) => void vscode.env.openExternal(vscode.Uri.parse(data.toString().trim())));
  netron.stderr.on('data', (data: Buffer) => log.warn(`netron: ${data.toString().trimEnd()}`));
  netron.on('error', (error) => log.error(`netron: ${error.message}`));
}
