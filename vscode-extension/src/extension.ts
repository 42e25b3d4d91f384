// onnxlens for VS Code: activation wiring.
import * as vscode from 'vscode';

import { ServerConnection } from './client';
import { Commands } from './commands';
import { GraphPanel } from './graphPanel';
import { ResultsView } from './resultsView';
import { SarifLogs } from './sarifViewer';

let connection: ServerConnection | undefined;

/** Returns at once: the status item shows, the server starts (and warms its export worker) in the background. */
export function activate(context: vscode.ExtensionContext): void {
  const started = Date.now();
  const log = vscode.window.createOutputChannel('onnxlens', { log: true });
  const view = new ResultsView();
  const sarif = new SarifLogs(view, log);
  connection = new ServerConnection(context, log, (uri, diagnostics) => sarif.filter(uri, diagnostics));
  const graph = new GraphPanel(connection, context.extensionUri);
  graph.register(context);
  new Commands(connection, sarif, graph).register(context);
  context.subscriptions.push(log, connection, vscode.window.registerTreeDataProvider('onnxlens.results', view));
  void connection.watchInterpreter().then((watcher) => context.subscriptions.push(watcher)); // may wait for the Python extension
  const start = () => connection?.start().catch((error) => log.error(`The server did not start: ${error}`));
  if (vscode.workspace.isTrusted) {
    void start();
  } else {
    log.info('Workspace not trusted: the server starts (and exports run) once it is trusted.');
    context.subscriptions.push(vscode.workspace.onDidGrantWorkspaceTrust(() => void start()));
  }
  log.info(`onnxlens activated in ${Date.now() - started} ms (started at ${new Date(started).toISOString()})`);
}

export async function deactivate(): Promise<void> {
  await connection?.stop();
}
