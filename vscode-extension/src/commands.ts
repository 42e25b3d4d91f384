// The extension's commands (ids differ from the server's: the client auto-registers those).
import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { ExecuteCommandRequest, LanguageClient } from 'vscode-languageclient/node';

import { ServerConnection } from './client';
import { GraphPanel } from './graphPanel';
import { openInNetron } from './netron';
import {
  CANCEL,
  CONFIGURATION_SECTION,
  EXPORT,
  EXPORT_AFTER_FIX,
  EXPORT_PROGRESS,
  EXPORT_TARGET,
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
import {
  failed, OPEN_IN_NETRON, openLogsAction, resultActions, resultMessage, severity, SHOW_GRAPH, SHOW_PROBLEMS, statusText,
} from './reports';
import { SarifLogs } from './sarifViewer';
import { TargetLine, targetAt } from './targets';

/** How a notification shows, by its severity. */
const SHOW = {
  error: vscode.window.showErrorMessage,
  warning: vscode.window.showWarningMessage,
  info: vscode.window.showInformationMessage,
};

export class Commands {
  /** The last export's outcome (its look and words, the headlines in its tooltip); a click shows the problems. */
  private readonly outcome = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 9);
  private lastSarif: string | undefined;
  private lastOnnx: string | undefined;
  private readonly running = new Set<string>();

  constructor(private readonly server: ServerConnection, private readonly sarif: SarifLogs, private readonly graph: GraphPanel) {}

  register(context: vscode.ExtensionContext): void {
    const commands: Record<string, (...args: any[]) => unknown> = {
      'onnxlens.exportAtCursor': () => this.exportAtCursor(false),
      'onnxlens.exportWithOpLevelDebug': () => this.exportAtCursor(true),
      'onnxlens.exportFile': (uri?: vscode.Uri) => this.exportFile(uri),
      [EXPORT_TARGET]: (args: ExportArgs) => this.export(args), // the code lenses' (the server checks the arguments)
      [EXPORT_AFTER_FIX]: (args: ExportArgs) => this.exportAfterFix(args),
      [OPEN_SARIF_LOG]: (sarifPath?: string) => this.openSarif(sarifPath),
      'onnxlens.openInNetron': (onnxPath?: string) => this.openInNetron(onnxPath),
      'onnxlens.cancelExport': () => this.cancelAll(),
      'onnxlens.restartServer': () => this.server.restart(),
      'onnxlens.showLog': () => this.server.log.show(),
    };
    for (const [id, handler] of Object.entries(commands)) {
      context.subscriptions.push(vscode.commands.registerCommand(id, handler));
    }
    this.outcome.command = 'workbench.actions.view.problems';
    context.subscriptions.push(this.outcome);
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
    const uri = editor.document.uri;
    const line = editor.selection.active.line;
    await this.server.ready(); // its code lenses name the target
    const target = targetAt(await this.targetLines(uri), line);
    const options = opLevelDebug ? { [OP_LEVEL_DEBUG_OPTION]: true } : {};
    await this.export({ uri: uri.toString(), ...(target ? { target } : { line }), options });
  }

  /** The file's targets at the lines of their code lenses (the server's, so its own rule applies); none
   * until the server has answered for the file. */
  private async targetLines(uri: vscode.Uri): Promise<TargetLine[]> {
    const lenses = (await vscode.commands.executeCommand<vscode.CodeLens[] | undefined>('vscode.executeCodeLensProvider', uri)) ?? [];
    return lenses
      .filter((lens) => lens.command?.command === EXPORT_TARGET)
      .map((lens) => ({ name: (lens.command?.arguments?.[0] as ExportArgs).target ?? '', line: lens.range.start.line }));
  }

  private async exportFile(resource?: vscode.Uri): Promise<void> {
    const uri = resource ?? vscode.window.activeTextEditor?.document.uri;
    if (uri) {
      await this.export({ uri: uri.toString(), all: true });
    }
  }

  /** A quick fix's export: its edit saved first (the file on disk is the model the export describes). */
  private async exportAfterFix(args: ExportArgs): Promise<void> {
    const uri = vscode.Uri.parse(args.uri).toString();
    const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri);
    if (document?.isDirty && !(await document.save())) {
      const file = path.basename(document.uri.fsPath);
      void vscode.window.showWarningMessage(`${file} was not saved: the export uses its unsaved text.`);
    }
    await this.export(args);
  }

  /** Exports with the `onnxlens` settings (the server reads them) and `args.options` over them; shows the
   * progress, then one notification with the result (a summary for several targets). */
  private async export(args: ExportArgs): Promise<void> {
    if (!vscode.workspace.isTrusted) {
      void vscode.window.showWarningMessage('Exporting runs your model code: trust this workspace to export (Workspaces: Manage Workspace Trust).');
      return;
    }
    const client = await this.server.ready();
    if (!client) {
      void vscode.window.showErrorMessage('The onnxlens server is not running: see onnxlens: Show Log.', 'Show Log').then((c) => c && this.server.log.show());
      return;
    }
    const file = path.basename(vscode.Uri.parse(args.uri).fsPath);
    const name = args.target ?? (args.all ? `all targets of ${file}` : `a target of ${file}`);
    let result: ExportResult;
    try {
      result = await this.runExport(client, args, name);
    } catch (error: any) {
      if (errorCode(error) === ErrorCode.NoExportTarget) {
        await this.offerTarget(args.uri);
      } else {
        void vscode.window.showErrorMessage(`onnxlens: ${error?.message ?? String(error)}`);
      }
      return;
    }
    await this.showResult(result.jobs, file, args.uri);
  }

  /** The export request, with a cancellable progress notification titled `name`. */
  private async runExport(client: LanguageClient, args: ExportArgs, name: string): Promise<ExportResult> {
    const jobId = randomUUID();
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
            const request: ExportArgs = { ...args, jobId, options: args.options ?? {} };
            return (await client.sendRequest(ExecuteCommandRequest.type, { command: EXPORT, arguments: [request] })) as ExportResult;
          } finally {
            listener.dispose();
          }
        },
      );
      this.server.log.info(`Export of ${name} answered in ${Date.now() - started} ms: ${JSON.stringify(result.jobs.map((j) => [j.target, j.status]))}`);
      return result;
    } finally {
      this.running.delete(jobId);
      void vscode.commands.executeCommand('setContext', 'onnxlens.exporting', this.running.size > 0);
    }
  }

  /** One notification for the export, whatever the number of its targets. */
  private async showResult(jobs: Job[], file: string, uri: string): Promise<void> {
    for (const job of jobs) {
      await this.remember(job);
    }
    const logs = jobs.flatMap((job) => (job.sarif ? [job.sarif] : []));
    if (vscode.workspace.getConfiguration(CONFIGURATION_SECTION).get<boolean>('openSarifViewerOnFailure', false)) {
      for (const job of jobs.filter((j) => failed(j) && j.sarif)) {
        await this.openSarif(job.sarif ?? undefined);
      }
    }
    ({ text: this.outcome.text, tooltip: this.outcome.tooltip } = statusText(jobs));
    this.outcome.show();
    const show = SHOW[severity(jobs)];
    const choice = await show(resultMessage(jobs, file), ...resultActions(jobs, this.server.status?.netron ?? false));
    if (choice === SHOW_PROBLEMS) {
      await vscode.commands.executeCommand('workbench.actions.view.problems');
    } else if (choice === SHOW_GRAPH) {
      await this.graph.showGraph(uri, jobs[0].target);
    } else if (choice === OPEN_IN_NETRON) {
      await this.openInNetron(jobs[0].onnx ?? undefined);
    } else if (choice === openLogsAction(logs.length)) {
      for (const log of logs) {
        await this.openSarif(log);
      }
    }
  }

  /** The last outputs (for Open SARIF Log and Netron); a new log replaces the one shown. */
  private async remember(job: Job): Promise<void> {
    if (job.sarif) {
      this.lastSarif = job.sarif;
      await this.sarif.replaced(job.sarif, job.results, job.outcome);
    }
    if (job.onnx) {
      this.lastOnnx = job.onnx;
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
