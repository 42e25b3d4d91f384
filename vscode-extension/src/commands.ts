// The extension's commands (ids differ from the server's: the client auto-registers those).
import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { ExecuteCommandRequest } from 'vscode-languageclient/node';

import { ServerConnection } from './client';
import { openInNetron } from './netron';
import {
  CANCEL,
  CONFIGURATION_SECTION,
  EXPORT,
  EXPORT_PROGRESS,
  ErrorCode,
  errorCode,
  ExportArgs,
  ExportProgress,
  ExportResult,
  Job,
  LIST_TARGETS,
  ListTargetsResult,
  OP_LEVEL_DEBUG_OPTION,
  OPEN_SARIF_LOG,
} from './protocol';
import { SarifLogs } from './sarifViewer';

export class Commands {
  private lastSarif: string | undefined;
  private lastOnnx: string | undefined;
  private readonly running = new Set<string>();

  constructor(private readonly server: ServerConnection, private readonly sarif: SarifLogs) {}

  register(context: vscode.ExtensionContext): void {
    const commands: Record<string, (...args: any[]) => unknown> = {
      'onnxlens.exportAtCursor': () => this.exportAtCursor(false),
      'onnxlens.exportWithOpLevelDebug': () => this.exportAtCursor(true),
      'onnxlens.exportFile': (uri?: vscode.Uri) => this.exportFile(uri),
      [OPEN_SARIF_LOG]: (sarifPath?: string) => this.openSarif(sarifPath),
      'onnxlens.openInNetron': (onnxPath?: string) => this.openInNetron(onnxPath),
      'onnxlens.cancelExport': () => this.cancelAll(),
      'onnxlens.restartServer': () => this.server.restart(),
      'onnxlens.showLog': () => this.server.log.show(),
    };
    for (const [id, handler] of Object.entries(commands)) {
      context.subscriptions.push(vscode.commands.registerCommand(id, handler));
    }
  }

  private async exportAtCursor(opLevelDebug: boolean): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.languageId !== 'python') {
      void vscode.window.showWarningMessage('Open a Python file with an @exporter.export_target function to export.');
      return;
    }
    if (editor.document.isUntitled) {
      void vscode.window.showWarningMessage('Save the file first: onnxlens exports from files on disk.');
      return;
    }
    await this.export({ uri: editor.document.uri.toString(), line: editor.selection.active.line }, opLevelDebug);
  }

  private async exportFile(resource?: vscode.Uri): Promise<void> {
    const uri = resource ?? vscode.window.activeTextEditor?.document.uri;
    if (uri) {
      await this.export({ uri: uri.toString(), all: true }, false);
    }
  }

  /** Exports with the `onnxlens` settings (the server reads them); `opLevelDebug` overrides its setting. */
  private async export(args: ExportArgs, opLevelDebug: boolean): Promise<void> {
    if (!vscode.workspace.isTrusted) {
      void vscode.window.showWarningMessage('Exporting runs your model code: trust this workspace to export (Workspaces: Manage Workspace Trust).');
      return;
    }
    const client = this.server.client;
    if (!client) {
      void vscode.window.showErrorMessage('The onnxlens server is not running: see onnxlens: Show Log.', 'Show Log').then((c) => c && this.server.log.show());
      return;
    }
    const openLogOnFailure = vscode.workspace.getConfiguration(CONFIGURATION_SECTION).get<boolean>('openSarifViewerOnFailure', false);
    const jobId = randomUUID();
    const name = args.target ?? (args.all ? path.basename(vscode.Uri.parse(args.uri).fsPath) : 'the target at the cursor');
    this.running.add(jobId);
    void vscode.commands.executeCommand('setContext', 'onnxlens.exporting', true);
    const started = Date.now();
    try {
      const result = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: `onnxlens: exporting ${name}`, cancellable: true },
        async (progress, token) => {
          token.onCancellationRequested(() => this.cancel(jobId));
          const listener = client.onNotification(EXPORT_PROGRESS, (p: ExportProgress) => {
            if (p.jobId.startsWith(jobId)) {
              progress.report({ message: p.message });
            }
          });
          try {
            const request: ExportArgs = { ...args, jobId, options: opLevelDebug ? { [OP_LEVEL_DEBUG_OPTION]: true } : {} };
            return (await client.sendRequest(ExecuteCommandRequest.type, { command: EXPORT, arguments: [request] })) as ExportResult;
          } finally {
            listener.dispose();
          }
        },
      );
      this.server.log.info(`Export of ${name} answered in ${Date.now() - started} ms: ${JSON.stringify(result.jobs.map((j) => [j.target, j.status]))}`);
      // Side by side: each report waits until its notification is closed.
      await Promise.all(result.jobs.map((job) => this.report(job, openLogOnFailure)));
    } catch (error: any) {
      if (errorCode(error) === ErrorCode.NoExportTarget) {
        await this.offerTarget(args.uri);
      } else {
        void vscode.window.showErrorMessage(`onnxlens: ${error?.message ?? String(error)}`);
      }
    } finally {
      this.running.delete(jobId);
      void vscode.commands.executeCommand('setContext', 'onnxlens.exporting', this.running.size > 0);
    }
  }

  private async report(job: Job, openLogOnFailure: boolean): Promise<void> {
    if (job.sarif) {
      this.lastSarif = job.sarif;
      await this.sarif.replaced(job.sarif);
    }
    if (job.status === 'ok' && job.onnx) {
      this.lastOnnx = job.onnx;
      const warnings = job.summary?.warnings ? `, ${job.summary.warnings} warnings` : '';
      const actions = ['Open SARIF Log', ...(this.server.status?.netron ? ['Open in Netron'] : [])];
      const choice = await vscode.window.showInformationMessage(
        `Exported ${job.target} → ${path.basename(job.onnx)} (${job.summary?.nodes ?? '?'} nodes${warnings}, ${job.seconds.toFixed(1)} s)`,
        ...actions,
      );
      if (choice === 'Open SARIF Log') {
        await this.openSarif(job.sarif ?? undefined);
      } else if (choice === 'Open in Netron') {
        await this.openInNetron(job.onnx);
      }
      return;
    }
    if (job.status === 'cancelled') {
      void vscode.window.showInformationMessage(`Export of ${job.target} cancelled.`);
      return;
    }
    if (openLogOnFailure && job.sarif) {
      await this.openSarif(job.sarif);
    }
    const choice = await vscode.window.showErrorMessage(`Export of ${job.target} ${job.status}: ${job.message}`, 'Show Problems', ...(job.sarif ? ['Open SARIF Log'] : []));
    if (choice === 'Show Problems') {
      await vscode.commands.executeCommand('workbench.actions.view.problems');
    } else if (choice === 'Open SARIF Log') {
      await this.openSarif(job.sarif ?? undefined);
    }
  }

  /** No target in the file: offer the quick fix that creates one for an nn.Module class. */
  private async offerTarget(uri: string): Promise<void> {
    const client = this.server.client;
    const listed = (await client?.sendRequest(ExecuteCommandRequest.type, { command: LIST_TARGETS, arguments: [{ uri }] })) as ListTargetsResult | undefined;
    const module = listed?.modules[0];
    if (!module) {
      void vscode.window.showWarningMessage('This file has no @exporter.export_target function and no nn.Module class to make one for.');
      return;
    }
    const choice = await vscode.window.showWarningMessage(`This file has no export target. Create one for ${module.name}?`, 'Create Export Target');
    if (choice) {
      const editor = await vscode.window.showTextDocument(vscode.Uri.parse(uri));
      const at = new vscode.Position(module.line, 0);
      editor.selection = new vscode.Selection(at, at);
      await vscode.commands.executeCommand('editor.action.quickFix');
    }
  }

  private async openSarif(sarifPath?: string): Promise<void> {
    const target = typeof sarifPath === 'string' ? sarifPath : this.lastSarif;
    if (!target) {
      void vscode.window.showInformationMessage('No SARIF log yet: export a model first.');
      return;
    }
    await this.sarif.open(target);
  }

  private async openInNetron(onnxPath?: string): Promise<void> {
    const model = typeof onnxPath === 'string' ? onnxPath : this.lastOnnx;
    const python = this.server.status?.python;
    if (!model || !python) {
      void vscode.window.showInformationMessage('No exported model yet: export a model first.');
      return;
    }
    openInNetron(python, model, this.server.log);
  }

  private cancel(jobId: string): void {
    void this.server.client?.sendRequest(ExecuteCommandRequest.type, { command: CANCEL, arguments: [{ jobId }] });
  }

  private cancelAll(): void {
    for (const jobId of this.running) {
      this.cancel(jobId);
    }
  }
}
