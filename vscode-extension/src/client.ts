// The language client: starts onnxlens-server with the chosen interpreter; shows its state.
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, State } from 'vscode-languageclient/node';

import { checkInterpreter, InterpreterStatus, resolveInterpreter } from './python';
import { installCommand } from './settings';

export type DiagnosticsFilter = (uri: vscode.Uri, diagnostics: vscode.Diagnostic[]) => vscode.Diagnostic[];

export class ServerConnection implements vscode.Disposable {
  client: LanguageClient | undefined;
  status: InterpreterStatus | undefined;
  private readonly statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 10);

  constructor(
    private readonly context: vscode.ExtensionContext,
    readonly log: vscode.LogOutputChannel,
    private readonly filterDiagnostics: DiagnosticsFilter,
  ) {
    this.statusItem.command = 'onnxlens.showLog';
    this.show('$(circle-slash) onnxlens', 'Not started');
    this.statusItem.show();
  }

  async start(): Promise<LanguageClient | undefined> {
    const configured = vscode.workspace.getConfiguration('onnxlens').get<string>('interpreter', '');
    const python = await resolveInterpreter(configured, vscode.window.activeTextEditor?.document.uri);
    const launcher = this.context.asAbsolutePath('bundled/launch_server.py');
    this.show('$(sync~spin) onnxlens', `Checking ${python}`);
    this.status = await checkInterpreter(python, launcher);
    void vscode.commands.executeCommand('setContext', 'onnxlens.netronAvailable', this.status.netron);
    if (!this.status.ok) {
      this.show('$(error) onnxlens', `Not installed in ${python}`);
      const command = installCommand(python);
      this.log.error(`${this.status.missing.join(', ')} missing in ${python}. Install with: ${command}`);
      void vscode.window.showErrorMessage(`onnxlens needs ${this.status.missing.join(', ')} in ${python}. Install with: ${command}`, 'Copy Command', 'Run in Terminal').then((choice) => {
        if (choice === 'Copy Command') {
          void vscode.env.clipboard.writeText(command);
        } else if (choice === 'Run in Terminal') {
          const terminal = vscode.window.createTerminal('onnxlens install');
          terminal.show();
          terminal.sendText(command);
        }
      });
      return undefined;
    }
    const serverOptions: ServerOptions = {
      command: python,
      args: [launcher],
      options: { env: { ...process.env, PYTHONUNBUFFERED: '1' } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: 'file', language: 'python' }],
      outputChannel: this.log,
      traceOutputChannel: this.log,
      synchronize: { configurationSection: 'onnxlens' },
      middleware: {
        handleDiagnostics: (uri, diagnostics, next) => next(uri, this.filterDiagnostics(uri, diagnostics)),
      },
    };
    this.client = new LanguageClient('onnxlens', 'onnxlens', serverOptions, clientOptions);
    this.client.onDidChangeState((e) => {
      if (e.newState === State.Running) {
        this.show('$(check) onnxlens', `Running with ${python}`);
      } else if (e.newState === State.Stopped) {
        this.show('$(error) onnxlens', 'Stopped');
      }
    });
    this.show('$(sync~spin) onnxlens', `Starting with ${python}`);
    const started = Date.now();
    await this.client.start();
    this.log.info(`Server started with ${python} in ${Date.now() - started} ms`);
    return this.client;
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      await client.stop();
    }
  }

  async restart(): Promise<LanguageClient | undefined> {
    await this.stop();
    return this.start();
  }

  private show(text: string, tooltip: string): void {
    this.statusItem.text = text;
    this.statusItem.tooltip = `onnxlens: ${tooltip} (click for the log)`;
  }

  dispose(): void {
    this.statusItem.dispose();
    void this.stop();
  }
}
