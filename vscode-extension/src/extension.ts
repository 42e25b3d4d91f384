// onnxlens for VS Code: activation wiring.
import * as vscode from 'vscode';

import { ServerConnection } from './client';
import { Commands } from './commands';
import { ResultsView } from './resultsView';
import { SarifLogs } from './sarifViewer';

let connection: ServerConnection | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const started = Date.now();
  const log = vscode.window.createOutputChannel('onnxlens', { log: true });
  const view = new ResultsView();
  const sarif = new SarifLogs(view, log);
  connection = new ServerConnection(context, log, (uri, diagnostics) => sarif.filter(uri, diagnostics));
  new Commands(connection, sarif).register(context);
  context.subscriptions.push(log, connection, vscode.window.registerTreeDataProvider('onnxlens.results', view));
  context.subscriptions.push(await connection.watchInterpreter());
  if (vscode.workspace.isTrusted) {
    await connection.start();
  } else {
    log.info('Workspace not trusted: the server starts (and exports run) once it is trusted.');
    context.subscriptions.push(vscode.workspace.onDidGrantWorkspaceTrust(() => void connection?.start()));
  }
  log.info(`onnxlens activated in ${Date.now() - started} ms`);
}

export async function deactivate(): Promise<void> {
  await connection?.stop();
}
