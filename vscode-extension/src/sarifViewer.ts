// SARIF logs: through the SARIF Viewer extension's API when installed, else the built-in results view.
import { readFileSync } from 'node:fs';
import * as vscode from 'vscode';

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
  private offeredViewer = false;

  constructor(private readonly view: ResultsView, private readonly log: vscode.LogOutputChannel) {}

  async open(sarifPath: string): Promise<void> {
    const uri = vscode.Uri.file(sarifPath);
    const api = await viewerApi();
    if (api) {
      await api.closeLogs([uri]); // the viewer does not de-duplicate logs opened twice
      await api.openLogs([uri]);
      this.openInViewer.set(uri.fsPath, filesOf(readJson(sarifPath)));
      this.log.info(`Opened ${sarifPath} in the SARIF Viewer`);
      return;
    }
    this.view.show(sarifPath, readJson(sarifPath));
    await vscode.commands.executeCommand('onnxlens.results.focus');
    if (!this.offeredViewer && !vscode.extensions.getExtension(VIEWER_ID)) {
      this.offeredViewer = true;
      const choice = await vscode.window.showInformationMessage('Install the SARIF Viewer for a richer view of export logs?', 'Show Extension');
      if (choice) {
        await vscode.commands.executeCommand('workbench.extensions.search', VIEWER_ID);
      }
    }
  }

  /** A new export replaced its log: close the old one in the viewer so its problems go away too; the
   * results view shows the new one. */
  async replaced(sarifPath: string): Promise<void> {
    if (this.openInViewer.delete(vscode.Uri.file(sarifPath).fsPath)) {
      await (await viewerApi())?.closeLogs([vscode.Uri.file(sarifPath)]);
    }
    if (this.view.shows(sarifPath)) {
      try {
        this.view.update(sarifPath, readJson(sarifPath));
      } catch (error) {
        this.log.warn(`Reading ${sarifPath}: ${error}`);
      }
    }
  }

  /** Our diagnostics for a file the viewer already shows are dropped. */
  filter(uri: vscode.Uri, diagnostics: vscode.Diagnostic[]): vscode.Diagnostic[] {
    for (const files of this.openInViewer.values()) {
      if (files.has(uri.fsPath)) {
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

function readJson(path: string): unknown {
  return JSON.parse(readFileSync(path, 'utf8'));
}
