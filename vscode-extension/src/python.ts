// Which Python runs the server: `onnxlens.interpreter`, else the Python extension's, else python3.
import { execFile } from 'node:child_process';
import { PythonExtension } from '@vscode/python-extension';
import * as vscode from 'vscode';

export interface InterpreterStatus {
  ok: boolean;
  missing: string[];
  python: string;
  netron: boolean;
}

/** The Python extension's API, or undefined when it is not installed (it is optional). */
async function pythonApi(): Promise<PythonExtension | undefined> {
  try {
    return await PythonExtension.api();
  } catch {
    return undefined;
  }
}

/** The interpreter for `resource`: `configured`, else the Python extension's active one, else `python3`. */
export async function resolveInterpreter(configured: string, resource?: vscode.Uri): Promise<string> {
  if (configured) {
    return configured;
  }
  const environments = (await pythonApi())?.environments;
  if (environments) {
    const active = environments.getActiveEnvironmentPath(resource);
    const resolved = await environments.resolveEnvironment(active);
    const executable = resolved?.executable.uri?.fsPath ?? active.path;
    if (executable) {
      return executable;
    }
  }
  return 'python3';
}

/** Calls `listener` when the Python extension's selected interpreter changes (nothing without it). */
export async function onDidChangeInterpreter(listener: () => void): Promise<vscode.Disposable> {
  const environments = (await pythonApi())?.environments;
  return environments?.onDidChangeActiveEnvironmentPath(() => listener()) ?? new vscode.Disposable(() => {});
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
