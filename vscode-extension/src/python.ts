// Which Python runs the server: the Python extension's interpreter, else the setting, else python3.
import { execFile } from 'node:child_process';
import * as vscode from 'vscode';

export interface InterpreterStatus {
  ok: boolean;
  missing: string[];
  python: string;
  netron: boolean;
}

/** The interpreter for `resource`: `onnxlens.interpreter`, else the Python extension's, else `python3`. */
export async function resolveInterpreter(configured: string, resource?: vscode.Uri): Promise<string> {
  if (configured) {
    return configured;
  }
  const python = vscode.extensions.getExtension('ms-python.python');
  if (python) {
    try {
      const api = python.isActive ? python.exports : await python.activate();
      const active = api?.environments?.getActiveEnvironmentPath?.(resource);
      const resolved = active ? await api.environments.resolveEnvironment(active) : undefined;
      const executable = resolved?.executable?.uri?.fsPath ?? active?.path;
      if (executable) {
        return executable;
      }
    } catch {
      // the Python extension is optional: fall through
    }
  }
  return 'python3';
}

/** Runs the bundled launcher's `--check` with `python`. */
export function checkInterpreter(python: string, launcher: string): Promise<InterpreterStatus> {
  return new Promise((resolve) => {
    execFile(python, [launcher, '--check'], { timeout: 60_000 }, (error, stdout) => {
      try {
        resolve(JSON.parse(stdout));
      } catch {
        resolve({ ok: false, missing: [error ? `a working interpreter (${error.message})` : 'onnxlens'], python, netron: false });
      }
    });
  });
}
