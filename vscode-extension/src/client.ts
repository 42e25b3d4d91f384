// The language client: starts onnxlens-server with the chosen interpreter, shows its state, and restarts
// it (debounced) when the interpreter changes.
import { readFileSync } from 'node:fs';
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, State } from 'vscode-languageclient/node';

import { CONFIGURATION_SECTION, OUTPUT_FOLDER_SCOPE } from './protocol';
import { checkInterpreter, InterpreterStatus, onDidChangeInterpreter, resolveInterpreter } from './python';
import { headingLines, localRuleLink } from './rulesDoc';
import { debounce, installCommand, needsRestart, outputFolderScope } from './settings';

export type DiagnosticsFilter = (uri: vscode.Uri, diagnostics: vscode.Diagnostic[]) => vscode.Diagnostic[];

const RESTART_DELAY_MS = 500;

export class ServerConnection implements vscode.Disposable {
  client: LanguageClient | undefined;
  status: InterpreterStatus | undefined;
  private readonly statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 10);
  /** Listeners of the running client: disposed when it stops. */
  private clientListeners: vscode.Disposable[] = [];
  /** Starts and stops, one after the other. */
  private queue: Promise<unknown> = Promise.resolve();
  readonly scheduleRestart = debounce(() => void this.restart(), RESTART_DELAY_MS);

  private rulesPage: RulesPage | undefined | null; // null: not shipped (a development build)

  constructor(
    private readonly context: vscode.ExtensionContext,
    readonly log: vscode.LogOutputChannel,
    private readonly filterDiagnostics: DiagnosticsFilter,
  ) {
    this.statusItem.command = 'onnxlens.showLog';
    this.show('$(circle-slash) onnxlens', 'Not started');
    this.statusItem.show();
  }

  /** Restart on a change of the interpreter: the `onnxlens` setting or the Python extension's selection. */
  async watchInterpreter(): Promise<vscode.Disposable> {
    const onSettings = vscode.workspace.onDidChangeConfiguration((e) => {
      if (needsRestart((section) => e.affectsConfiguration(section), CONFIGURATION_SECTION)) {
        this.log.info('The interpreter setting changed: restarting the server');
        this.scheduleRestart();
      }
    });
    const onPython = await onDidChangeInterpreter(() => {
      this.log.info('The Python extension\'s interpreter changed: restarting the server');
      this.scheduleRestart();
    });
    return vscode.Disposable.from(onSettings, onPython);
  }

  start(): Promise<LanguageClient | undefined> {
    return this.enqueue(() => this.startNow());
  }

  stop(): Promise<void> {
    return this.enqueue(() => this.stopNow());
  }

  /** The client once the starts and stops under way are done (undefined: the server is not running). */
  ready(): Promise<LanguageClient | undefined> {
    return this.queue.then(() => this.client);
  }

  restart(): Promise<LanguageClient | undefined> {
    return this.enqueue(async () => {
      await this.stopNow();
      return vscode.workspace.isTrusted ? this.startNow() : undefined;
    });
  }

  private enqueue<T>(step: () => Promise<T>): Promise<T> {
    const next = this.queue.then(step, step);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async startNow(): Promise<LanguageClient | undefined> {
    this.show('$(sync~spin) onnxlens', 'Starting');
    const configured = vscode.workspace.getConfiguration(CONFIGURATION_SECTION).get<string>('interpreter', '');
    const python = await resolveInterpreter(configured, vscode.window.activeTextEditor?.document.uri);
    const launcher = this.context.asAbsolutePath('bundled/launch_server.py');
    this.show('$(sync~spin) onnxlens', `Checking ${python}`);
    this.status = await checkInterpreter(python, launcher);
    void vscode.commands.executeCommand('setContext', 'onnxlens.netronAvailable', this.status.netron);
    if (!this.status.ok) {
      this.show('$(error) onnxlens', `Not installed in ${python}`);
      this.offerInstall(python, this.status.missing);
      return undefined;
    }
    const serverOptions: ServerOptions = {
      command: python,
      args: [launcher],
      options: { env: { ...process.env, PYTHONUNBUFFERED: '1' } },
    };
    const clientOptions: LanguageClientOptions = {
      // Python files, and the Python cells of notebooks: the server asks for notebook sync (a notebook is one
      // program to it), and lenses, hints, hovers, fixes and problems land on the cells.
      documentSelector: [{ scheme: 'file', language: 'python' }, { notebook: '*', language: 'python' }],
      outputChannel: this.log,
      traceOutputChannel: this.log,
      synchronize: { configurationSection: CONFIGURATION_SECTION }, // didChangeConfiguration: the server checks the settings
      middleware: {
        handleDiagnostics: (uri, diagnostics, next) => next(uri, this.withLocalRuleLinks(this.filterDiagnostics(uri, diagnostics))),
        // The server's op-level debug tables use codicons ($(check), $(error)), not emoji.
        provideHover: async (document, position, token, next) => {
          const hover = await next(document, position, token);
          hover?.contents.forEach(withThemeIcons);
          return hover;
        },
        provideInlayHints: async (document, range, token, next) => {
          const hints = await next(document, range, token);
          hints?.forEach((hint) => withThemeIcons(hint.tooltip));
          return hints;
        },
        workspace: {
          // The server writes outside the workspace only where the user (not the workspace) chose so.
          configuration: async (params, token, next) => {
            const answers = await next(params, token);
            if (!Array.isArray(answers)) {
              return answers;
            }
            return answers.map((answer, i) => {
              const item = params.items[i];
              if (item?.section !== CONFIGURATION_SECTION || typeof answer !== 'object' || answer === null) {
                return answer;
              }
              const scope = item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined;
              const inspected = vscode.workspace.getConfiguration(CONFIGURATION_SECTION, scope).inspect('outputFolder');
              return { ...answer, [OUTPUT_FOLDER_SCOPE]: outputFolderScope(inspected) };
            });
          },
        },
      },
    };
    const client = new LanguageClient('onnxlens', 'onnxlens', serverOptions, clientOptions);
    this.clientListeners.push(
      client.onDidChangeState((e) => {
        if (e.newState === State.Running) {
          this.show('$(check) onnxlens', `Running with ${python}`);
        } else if (e.newState === State.Stopped) {
          this.show('$(error) onnxlens', 'Stopped');
        }
      }),
    );
    this.client = client;
    this.show('$(sync~spin) onnxlens', `Starting with ${python}`);
    const started = Date.now();
    await client.start();
    this.log.info(`Server started with ${python} in ${Date.now() - started} ms`);
    return client;
  }

  private async stopNow(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    for (const listener of this.clientListeners.splice(0)) {
      listener.dispose();
    }
    if (client) {
      await client.stop().catch((error) => this.log.warn(`Stopping the server: ${error}`));
      this.show('$(circle-slash) onnxlens', 'Stopped');
    }
  }

  /** Rule links open the rules page shipped in the .vsix (offline), at the rule's heading. */
  private withLocalRuleLinks(diagnostics: vscode.Diagnostic[]): vscode.Diagnostic[] {
    this.rulesPage ??= readRulesPage(this.context.asAbsolutePath('docs/rules.md'));
    const page = this.rulesPage;
    if (!page) {
      return diagnostics;
    }
    for (const diagnostic of diagnostics) {
      const code = diagnostic.code;
      if (typeof code === 'object' && code.target) {
        const local = localRuleLink(code.target.toString(), page.uri, page.lines);
        if (local) {
          diagnostic.code = { value: code.value, target: vscode.Uri.parse(local) };
        }
      }
    }
    return diagnostics;
  }

  private offerInstall(python: string, missing: string[]): void {
    const command = installCommand(python);
    this.log.error(`${missing.join(', ')} missing in ${python}. Install with: ${command}`);
    void vscode.window.showErrorMessage(`onnxlens needs ${missing.join(', ')} in ${python}. Install with: ${command}`, 'Copy Command', 'Run in Terminal').then((choice) => {
      if (choice === 'Copy Command') {
        void vscode.env.clipboard.writeText(command);
      } else if (choice === 'Run in Terminal') {
        const terminal = vscode.window.createTerminal('onnxlens install');
        terminal.show();
        terminal.sendText(command);
      }
    });
  }

  private show(text: string, tooltip: string): void {
    this.statusItem.text = text;
    this.statusItem.tooltip = `onnxlens: ${tooltip} (click for the log)`;
  }

  dispose(): void {
    this.scheduleRestart.cancel();
    this.statusItem.dispose();
    void this.stop();
  }
}

function withThemeIcons(content: unknown): void {
  if (content instanceof vscode.MarkdownString) {
    content.supportThemeIcons = true;
  }
}

interface RulesPage {
  uri: string;
  lines: Map<string, number>;
}

function readRulesPage(file: string): RulesPage | null {
  try {
    return { uri: vscode.Uri.file(file).toString(), lines: headingLines(readFileSync(file, 'utf8')) };
  } catch {
    return null;
  }
}
