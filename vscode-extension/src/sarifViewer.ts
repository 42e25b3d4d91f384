// SARIF logs: through the SARIF Viewer extension's API when installed, else the built-in results view. The
// extension does not read the logs itself: the server parsed each one when its export finished (`Job.results`).
import * as vscode from 'vscode';

import { documentKey, locationKey } from './locations';
import { Outcome, ResultItem } from './protocol';
import { filesOf } from './results';
import { ResultsView } from './resultsView';

const VIEWER_ID = 'MS-SarifVSCode.sarif-viewer';

interface SarifViewerApi {
  openLogs(logs: vscode.Uri[]): Promise<void>;
  closeLogs(logs: vscode.Uri[]): Promise<void>;
}

export class SarifLogs {
  /** Files whose problems the viewer shows for an open log (ours are hidden there, not shown twice). */
  private readonly openInViewer = new Map<string, Set<string>>();
  /** The results of each log an export wrote, by its path. */
  private readonly results = new Map<string, ResultItem[]>();
  /** The outcome of the export that wrote each log. */
  private readonly outcomes = new Map<string, Outcome>();
  private offeredViewer = false;

  constructor(private readonly view: ResultsView, private readonly log: vscode.LogOutputChannel) {}

  async open(sarifPath: string): Promise<void> {
    const uri = vscode.Uri.file(sarifPath);
    const results = this.results.get(uri.fsPath) ?? [];
    const api = await viewerApi();
    if (api) {
      await api.closeLogs([uri]); // the viewer does not de-duplicate logs opened twice
      await api.openLogs([uri]);
      this.openInViewer.set(uri.fsPath, new Set([...filesOf(results)].map((file) => locationKey(file, vscode.Uri))));
      this.log.info(`Opened ${sarifPath} in the SARIF Viewer`);
      return;
    }
    this.view.show(sarifPath, results, this.outcomes.get(uri.fsPath));
    await vscode.commands.executeCommand('onnxlens.results.focus');
    if (!this.offeredViewer && !vscode.extensions.getExtension(VIEWER_ID)) {
      this.offeredViewer = true;
      const choice = await vscode.window.showInformationMessage('Install the SARIF Viewer for a richer view of export logs?', 'Show Extension');
      if (choice) {
        await vscode.commands.executeCommand('workbench.extensions.search', VIEWER_ID);
      }
    }
  }

  /** A new export replaced its log (`results`): close the old one in the viewer so its problems go away
   * too; the results view shows the new one. */
  async replaced(sarifPath: string, results: ResultItem[], outcome: Outcome): Promise<void> {
    const file = vscode.Uri.file(sarifPath).fsPath;
    this.results.set(file, results);
    this.outcomes.set(file, outcome);
    if (this.openInViewer.delete(file)) {
      await (await viewerApi())?.closeLogs([vscode.Uri.file(sarifPath)]);
    }
    if (this.view.shows(sarifPath)) {
      this.view.update(sarifPath, results, outcome);
    }
  }

  /** Our diagnostics for a file the viewer already shows are dropped. */
  filter(uri: vscode.Uri, diagnostics: vscode.Diagnostic[]): vscode.Diagnostic[] {
    for (const files of this.openInViewer.values()) {
      if (files.has(documentKey(uri))) { // a cell's problems too (its URI is the key)
        return [];
      }
    }
    return diagnostics;
  }
}

async function viewerApi(): Promise<SarifViewerApi | undefined> {
  const extension = vscode.extensions.getExtension(VIEWER_ID);
  if (!extension || !vscode.workspace.getConfiguration('onnxlens').get<boolean>('useSarifViewer', true)) {
    return undefined;
  }
  return (extension.isActive ? extension.exports : await extension.activate()) as SarifViewerApi;
}
