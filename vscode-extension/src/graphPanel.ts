// The graph view: a webview panel drawing a target's last exported model (the server's GRAPH command),
// linked to the editor both ways; the same view is the custom editor of .onnx files (GRAPH_FILE, `OnnxEditor`)
// and shows two exports compared (COMPARE_GRAPHS). The view's code is webview/graph/ (bundled into dist/webview/).
import { randomBytes } from 'node:crypto';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { ExecuteCommandRequest } from 'vscode-languageclient/node';

import { ServerConnection } from './client';
import { documentKey, locationKey, locationUri } from './locations';
import {
  COMPARE_GRAPHS, CompareArgs, ErrorCode, errorCode, EXPORT_TARGET, GRAPH, GRAPH_FILE, LIST_TARGETS, ListTargetsResult,
  NoModelData, OPEN_SARIF_LOG, RULE_ACCURACY_DIVERGENCE, RULE_NO_SYMBOLIC_FUNCTION, RULE_OP_LEVEL_DEBUGGING, TargetArgs,
  TENSOR,
} from './protocol';
import { openLogsAction, SHOW_PROBLEMS } from './reports';
import { debounce } from './settings';
import { targetAt } from './targets';

export const SHOW_GRAPH = 'onnxlens.showGraph';
export const SHOW_IN_GRAPH = 'onnxlens.showInGraph';
export const COMPARE_MODELS = 'onnxlens.compareModels';
export const COMPARE_WITH_PREVIOUS = 'onnxlens.compareWithPrevious';
export const ONNX_EDITOR = 'onnxlens.onnxGraph'; // the custom editor of .onnx files (package.json customEditors)
const OPEN_SARIF_LOG_ACTION = openLogsAction(1);
/** Problems whose lines have graph nodes: untranslatable ops (if the export went on), op-level debug, verification. */
const GRAPH_RULES = new Set([RULE_NO_SYMBOLIC_FUNCTION, RULE_OP_LEVEL_DEBUGGING, RULE_ACCURACY_DIVERGENCE]);

/** Messages from the view (webview/graph/main.ts). */
type FromView =
  | { type: 'ready'; pageMs: number }
  | { type: 'reveal'; path: string; line: number; preserveFocus?: boolean; ifShown?: boolean }
  | { type: 'rendered'; reason: string; boxes: number; layoutMs: number; renderMs: number }
  | { type: 'highlighted'; path: string; line: number; nodes: number }
  | { type: 'tensor'; name: string };

/** Reveals of a view's line under way: the selections the editor goes through meanwhile are not the user's. */
let revealing = 0;

/** Every open view, for the editor's cursor line. */
const views = new Set<GraphView>();

/** One webview showing a graph (or a comparison): its page, what it draws, its messages. Revealing a source line
 * and reading a tensor are handled here; the rest goes to `onMessage`. */
export class GraphView {
  readonly ready: Promise<void>;
  pageMs = 0; // the view's page: from its start to the script ready
  model: string | undefined; // the drawn model's path (a comparison's second)
  files = new Map<string, string>(); // the source locations of its nodes (files, notebook cells) by `documentKey`

  constructor(
    readonly panel: vscode.WebviewPanel,
    extensionUri: vscode.Uri,
    private readonly server: ServerConnection,
    onMessage: (m: FromView) => void,
  ) {
    const bundle = vscode.Uri.joinPath(extensionUri, 'dist', 'webview');
    panel.webview.options = { enableScripts: true, localResourceRoots: [bundle] };
    this.ready = new Promise((resolve) => {
      panel.webview.onDidReceiveMessage((message: FromView) => {
        if (message.type === 'ready') {
          this.pageMs = message.pageMs;
          resolve();
        } else if (message.type === 'reveal') {
          void revealLine(message, panel.viewColumn);
        } else if (message.type === 'tensor') {
          void this.tensor(message.name);
        } else {
          onMessage(message);
        }
      });
    });
    views.add(this);
    panel.onDidDispose(() => views.delete(this));
    panel.webview.html = html(panel.webview, bundle);
  }

  /** Draws `graph` (the server's answer; its node stacks left out of the message), or a comparison. */
  async show(title: string, graph: any, comparison?: any): Promise<void> {
    const graphs = comparison ? [comparison.before, comparison.after] : [graph];
    const sources = (g: any): string[] => g.nodes.flatMap((n: any) => (n.source ? [n.source.path] : []));
    this.files = new Map([...new Set<string>(graphs.flatMap(sources))].map((p) => [locationKey(p, vscode.Uri), p]));
    for (const node of graphs.flatMap((g: any) => g.nodes)) {
      delete node.stack; // a third of the JSON, which the view does not show: the message to it is that much shorter
    }
    this.model = (comparison?.after ?? graph).path;
    await this.ready;
    const message = comparison ? { type: 'compare', comparison, title } : { type: 'graph', graph, title };
    await this.panel.webview.postMessage(message);
  }

  /** The cursor's line in the document known by `key` (`documentKey`), if the view's nodes come from it. */
  postCursor(key: string, line: number): void {
    const source = this.files.get(key); // as the nodes name it
    if (source !== undefined) {
      void this.panel.webview.postMessage({ type: 'cursor', path: source, line: line + 1 });
    }
  }

  /** A tensor's size and first values, read by the server only now. */
  private async tensor(name: string): Promise<void> {
    try {
      const client = await this.server.ready();
      const uri = vscode.Uri.file(this.model!).toString();
      const tensor = await client!.sendRequest(ExecuteCommandRequest.type, { command: TENSOR, arguments: [{ uri, name }] });
      await this.panel.webview.postMessage({ type: 'tensor', name, tensor });
    } catch (error) {
      await this.panel.webview.postMessage({ type: 'tensor', name, error: (error as Error)?.message ?? String(error) });
    }
  }
}

/** The custom editor of .onnx files: any model file as a graph (module groups from onnxlens's metadata or torch.onnx's
 * scopes, flat otherwise), its export's SARIF log beside it coloured in. */
class OnnxEditor implements vscode.CustomReadonlyEditorProvider {
  constructor(private readonly server: ServerConnection, private readonly extensionUri: vscode.Uri) {}

  openCustomDocument(uri: vscode.Uri): vscode.CustomDocument {
    return { uri, dispose: () => undefined };
  }

  /** Returns at once: VS Code shows the page only after this, and the graph is posted once the page is ready. */
  resolveCustomEditor(document: vscode.CustomDocument, panel: vscode.WebviewPanel): void {
    void this.load(document, panel);
  }

  private async load(document: vscode.CustomDocument, panel: vscode.WebviewPanel): Promise<void> {
    const requested = Date.now();
    const name = path.basename(document.uri.fsPath);
    const log = this.server.log;
    const view = new GraphView(panel, this.extensionUri, this.server, (message) => {
      if (message.type === 'rendered') {
        log.info(`Graph of ${name}: ${renderedText(message, requested)}`);
      }
    });
    const client = await this.server.ready();
    if (!client) {
      void vscode.window.showWarningMessage('The onnxlens server is not running: see onnxlens: Show Log.');
      return;
    }
    try {
      const args = [{ uri: document.uri.toString() }];
      const graph: any = await client.sendRequest(ExecuteCommandRequest.type, { command: GRAPH_FILE, arguments: args });
      log.info(`Graph of ${name} (${graph.nodes.length} nodes) read by the server in ${Date.now() - requested} ms`);
      await view.show(name, graph);
    } catch (error) {
      void vscode.window.showErrorMessage(`onnxlens: ${(error as Error)?.message ?? String(error)}`);
    }
  }
}

interface Shown {
  target: TargetArgs;
  requested: number; // Date.now() of the command
  serverMs: number; // the graph command
  viewMs: number; // both the command and the view loaded
  nodes: number;
}

export class GraphPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private view: GraphView | undefined;
  private ready: Promise<void> | undefined;
  private shown: Shown | undefined;
  private readonly disposables: vscode.Disposable[] = [];
  private cursor: vscode.TextEditor | undefined;
  private readonly sendCursor = debounce(() => this.cursor && this.postCursor(this.cursor.document.uri, this.cursor.selection.active.line), 50);

  constructor(private readonly server: ServerConnection, private readonly extensionUri: vscode.Uri) {}

  register(context: vscode.ExtensionContext): void {
    context.subscriptions.push(
      this,
      vscode.commands.registerCommand(SHOW_GRAPH, (uri?: string, target?: string) => this.showGraph(uri, target)),
      vscode.commands.registerCommand(SHOW_IN_GRAPH, (uri?: string, line?: number, targetUri?: string, target?: string) => this.showInGraph(uri, line, targetUri, target)),
      vscode.window.onDidChangeTextEditorSelection((e) => {
        this.cursor = e.textEditor;
        if (!revealing) {
          this.sendCursor();
        }
      }),
      vscode.window.registerCustomEditorProvider(ONNX_EDITOR, new OnnxEditor(this.server, this.extensionUri), {
        webviewOptions: { retainContextWhenHidden: true }, // laying out a large graph again each time is slower
      }),
      vscode.commands.registerCommand(COMPARE_MODELS, (uri?: vscode.Uri, uris?: vscode.Uri[]) => this.compareModels(uri, uris)),
      vscode.commands.registerCommand(COMPARE_WITH_PREVIOUS, (uri?: string, t?: string) => this.compareWithPrevious(uri, t)),
      vscode.languages.registerCodeActionsProvider({ scheme: 'file', language: 'python' }, { provideCodeActions: (document, range, context) => this.codeActions(document, context) }),
    );
  }

  /** Shows `target` of `uri` (default: the target at the cursor, or one picked from the file's); false if it
   * could not. */
  async showGraph(uri?: string, target?: string): Promise<boolean> {
    const requested = Date.now();
    const editor = vscode.window.activeTextEditor;
    uri ??= editor?.document.uri.toString();
    const client = await this.server.ready();
    if (!uri || !client) {
      void vscode.window.showWarningMessage(client ? 'Open a Python file with an exported target to show its graph.' : 'The onnxlens server is not running: see onnxlens: Show Log.');
      return false;
    }
    target ??= await this.pickTarget(uri, editor?.document.uri.toString() === uri ? editor.selection.active.line : undefined);
    if (!target) {
      return false;
    }
    const args: TargetArgs = { uri, target };
    const title = `Graph: ${target}`;
    const opened = !this.panel;
    const view = this.open(title); // the view loads while the server reads the model; an open one keeps its title
    let graph: any;
    try {
      graph = await client.sendRequest(ExecuteCommandRequest.type, { command: GRAPH, arguments: [args] });
    } catch (error) {
      if (opened) {
        this.panel?.dispose();
      }
      await this.noGraph(error, uri, target);
      return false;
    }
    const serverMs = Date.now() - requested;
    await view;
    if (this.panel) {
      this.panel.title = title; // only now: the title names what is drawn
    }
    this.shown = { target: args, requested, serverMs, viewMs: Date.now() - requested, nodes: graph.nodes.length };
    await this.view?.show(title, graph);
    return true;
  }

  /** Two .onnx files compared: the explorer's two selected, or the one clicked and one picked, or two picked. */
  async compareModels(uri?: vscode.Uri, uris?: vscode.Uri[]): Promise<void> {
    let [before, after]: (vscode.Uri | undefined)[] = uris && uris.length === 2 ? uris : [uri];
    const filters = { 'ONNX models': ['onnx'] };
    const pick = async (title: string) => (await vscode.window.showOpenDialog({ title, filters, canSelectMany: false }))?.[0];
    before ??= await pick('The first model (before)');
    after ??= before && (await pick(`Compare ${path.basename(before.fsPath)} with (after)`));
    if (before && after) {
      const title = `Compare: ${path.basename(before.fsPath)} ↔ ${path.basename(after.fsPath)}`;
      await this.compare(title, { before: before.toString(), after: after.toString() });
    }
  }

  /** The target at the cursor: its previous export (kept by the server when it exports again) and its last. */
  async compareWithPrevious(uri?: string, target?: string): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    uri ??= editor?.document.uri.toString();
    const line = editor?.document.uri.toString() === uri ? editor?.selection.active.line : undefined;
    target ??= uri ? await this.pickTarget(uri, line) : undefined;
    if (uri && target) {
      await this.compare(`Compare: ${target}, previous ↔ last export`, { uri, target });
    }
  }

  private async compare(title: string, args: CompareArgs): Promise<void> {
    const client = await this.server.ready();
    if (!client) {
      void vscode.window.showWarningMessage('The onnxlens server is not running: see onnxlens: Show Log.');
      return;
    }
    const requested = Date.now();
    const log = this.server.log;
    const column = { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true };
    const panel = vscode.window.createWebviewPanel('onnxlens.compare', title, column, { retainContextWhenHidden: true });
    const view = new GraphView(panel, this.extensionUri, this.server, (message) => {
      if (message.type === 'rendered') {
        log.info(`${title}: ${renderedText(message, requested)}`);
      }
    });
    try {
      const request = { command: COMPARE_GRAPHS, arguments: [args] };
      const comparison: any = await client.sendRequest(ExecuteCommandRequest.type, request);
      log.info(`${title}: ${comparison.added} added, ${comparison.removed} removed, ${comparison.changed} changed ops`);
      await view.show(title, undefined, comparison);
    } catch (error) {
      panel.dispose();
      void vscode.window.showErrorMessage(`onnxlens: ${(error as Error)?.message ?? String(error)}`);
    }
  }

  /** Why there is no graph to show, with the action that helps: an export for a target never exported in this
   * session; the log and the problems of one whose export wrote no model (a new export would replace what it found). */
  private async noGraph(error: unknown, uri: string, target: string): Promise<void> {
    const message = (error as Error)?.message ?? String(error);
    const code = errorCode(error);
    if (code === ErrorCode.NotExported) {
      const choice = await vscode.window.showWarningMessage(message, 'Export to ONNX');
      if (choice) {
        await vscode.commands.executeCommand(EXPORT_TARGET, { uri, target });
      }
    } else if (code === ErrorCode.NoModel) {
      const sarif = (error as { data?: NoModelData }).data?.sarif;
      const actions = [SHOW_PROBLEMS, ...(sarif ? [OPEN_SARIF_LOG_ACTION] : [])];
      const choice = await vscode.window.showErrorMessage(message, ...actions);
      if (choice === SHOW_PROBLEMS) {
        await vscode.commands.executeCommand('workbench.actions.view.problems');
      } else if (choice === OPEN_SARIF_LOG_ACTION) {
        await vscode.commands.executeCommand(OPEN_SARIF_LOG, sarif);
      }
    } else {
      void vscode.window.showErrorMessage(`onnxlens: ${message}`);
    }
  }

  /** The target at the cursor line (as Export to ONNX picks it); a quick pick when the cursor is above every target of several. */
  private async pickTarget(uri: string, line: number | undefined): Promise<string | undefined> {
    const listed = (await this.server.client?.sendRequest(ExecuteCommandRequest.type, { command: LIST_TARGETS, arguments: [{ uri }] })) as ListTargetsResult | undefined;
    const targets = listed?.targets ?? [];
    if (targets.length === 0) {
      void vscode.window.showWarningMessage('This file has no @exporter.export_target function.');
      return undefined;
    }
    if (targets.length === 1 || (line !== undefined && targets.some((t) => t.line <= line))) {
      return targetAt(targets, line ?? 0);
    }
    return vscode.window.showQuickPick(targets.map((t) => t.name), { placeHolder: 'The export target whose graph to show' });
  }

  /** The panel (created once, beside the editor), with the view loaded. */
  private async open(title: string): Promise<void> {
    if (this.panel) {
      this.panel.reveal(vscode.ViewColumn.Beside, true);
      return this.ready;
    }
    const panel = vscode.window.createWebviewPanel('onnxlens.graph', title, { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true }, {
      retainContextWhenHidden: true, // re-laying out a large graph each time the tab shows is slower than keeping it
    });
    this.panel = panel;
    this.view = new GraphView(panel, this.extensionUri, this.server, (message) => void this.fromView(message));
    panel.onDidDispose(() => {
      this.panel = undefined;
      this.view = undefined;
      this.shown = undefined;
    }, undefined, this.disposables);
    this.ready = this.view.ready;
    return this.ready;
  }

  private async fromView(message: FromView): Promise<void> {
    const log = this.server.log;
    const shown = this.shown;
    if (message.type === 'rendered' && shown) {
      const timing = `layout ${message.layoutMs} ms, render ${message.renderMs} ms, ${message.boxes} boxes`;
      if (message.reason === 'first') {
        log.info(`Graph of ${shown.target.target} (${shown.nodes} nodes) shown in ${Date.now() - shown.requested} ms (graph command ${shown.serverMs} ms, view loaded at ${shown.viewMs} ms (its page ${this.view?.pageMs} ms), ${timing})`);
      } else {
        log.info(`Graph of ${shown.target.target}: ${message.reason} in ${message.layoutMs + message.renderMs} ms (${timing})`);
      }
    } else if (message.type === 'highlighted') {
      log.info(`Graph: ${message.nodes} nodes at ${path.basename(message.path)}:${message.line}`);
    }
  }

  /** Tells the views the cursor line of a document (a file, a notebook cell) their nodes come from. */
  private postCursor(uri: vscode.Uri, line: number): void {
    const key = documentKey(uri);
    views.forEach((view) => view.postCursor(key, line));
  }

  /** A problem's line in its target's graph (the code action's command): the graph shown if it is not, its ops highlighted. */
  private async showInGraph(uri?: string, line?: number, targetUri?: string, target?: string): Promise<void> {
    if (uri === undefined || line === undefined || !targetUri || !target) {
      return;
    }
    const shown = this.shown?.target;
    const other = !this.panel || shown?.uri !== targetUri || shown.target !== target;
    if (other && !(await this.showGraph(targetUri, target))) {
      return; // no graph of that target: the graph shown (another's) is not highlighted
    }
    this.panel?.reveal(undefined, true);
    this.postCursor(vscode.Uri.parse(uri), line);
  }

  /** "Show in Graph" on the problems of GRAPH_RULES that name the target whose export found them. */
  private codeActions(document: vscode.TextDocument, context: vscode.CodeActionContext): vscode.CodeAction[] {
    return context.diagnostics.filter((d) => GRAPH_RULES.has(ruleOf(d)) && exportOf(d)).slice(0, 1).map((diagnostic) => {
      const { targetUri, target } = exportOf(diagnostic)!;
      const action = new vscode.CodeAction('Show in Graph', vscode.CodeActionKind.QuickFix);
      action.diagnostics = [diagnostic];
      action.command = { command: SHOW_IN_GRAPH, title: 'Show in Graph', arguments: [document.uri.toString(), diagnostic.range.start.line, targetUri, target] };
      return action;
    });
  }

  dispose(): void {
    this.sendCursor.cancel();
    this.panel?.dispose();
    this.disposables.forEach((d) => d.dispose());
  }
}

/** "first in 1200 ms (layout …)": what a view's `rendered` message says, for the log. */
function renderedText(message: Extract<FromView, { type: 'rendered' }>, requested: number): string {
  const ms = message.reason === 'first' ? Date.now() - requested : message.layoutMs + message.renderMs;
  return `${message.reason} in ${ms} ms (layout ${message.layoutMs} ms, render ${message.renderMs} ms, ${message.boxes} boxes)`;
}

/** The editor at `line` (1-based) of `file` (a path, or a notebook cell's URI), the line selected from its first
 * character: where the file (the cell's notebook) shows, else the first column, or beside the view when the view is
 * there (a .onnx file's editor). */
async function revealLine(message: Extract<FromView, { type: 'reveal' }>, view: vscode.ViewColumn | undefined): Promise<void> {
  const { path: file, line, preserveFocus, ifShown } = message;
  const uri = locationUri(file, vscode.Uri);
  const key = documentKey(uri);
  const other = view === vscode.ViewColumn.One ? vscode.ViewColumn.Beside : vscode.ViewColumn.One;
  const shown = vscode.window.visibleTextEditors.find((e) => documentKey(e.document.uri) === key)?.viewColumn ??
    vscode.window.visibleNotebookEditors.find((e) => e.notebook.getCells().some((c) => documentKey(c.document.uri) === key))?.viewColumn;
  if (ifShown && !shown) {
    return;
  }
  const column = shown ?? other;
  let document: vscode.TextDocument;
  try {
    document = await vscode.workspace.openTextDocument(uri);
  } catch {
    return; // a model's source file that is not here (another machine's export)
  }
  const text = document.lineAt(Math.min(line - 1, document.lineCount - 1));
  const selection = new vscode.Selection(text.lineNumber, text.firstNonWhitespaceCharacterIndex, text.lineNumber, text.range.end.character);
  revealing++; // an editor opening reports its old cursor line first: the view would open the groups of that line
  try {
    await vscode.window.showTextDocument(document, { viewColumn: column, selection, preserveFocus: preserveFocus ?? false });
  } finally {
    revealing--;
  }
}

/** The export a problem came from: the server puts its target in the problem's data. */
function exportOf(diagnostic: vscode.Diagnostic): { targetUri: string; target: string } | undefined {
  const data = (diagnostic as { data?: { targetUri?: unknown; target?: unknown } }).data;
  return typeof data?.targetUri === 'string' && typeof data.target === 'string' ? { targetUri: data.targetUri, target: data.target } : undefined;
}

function ruleOf(diagnostic: vscode.Diagnostic): string {
  const code = diagnostic.code;
  return String(typeof code === 'object' ? code.value : code ?? '');
}

/** The view's page: the bundle only, under a strict Content-Security-Policy (nothing from the network). */
function html(webview: vscode.Webview, bundle: vscode.Uri): string {
  const nonce = randomBytes(16).toString('base64');
  const script = webview.asWebviewUri(vscode.Uri.joinPath(bundle, 'graph.js'));
  const style = webview.asWebviewUri(vscode.Uri.joinPath(bundle, 'graph.css'));
  const csp = `default-src 'none'; script-src 'nonce-${nonce}'; worker-src blob:; style-src ${webview.cspSource}; ` +
    "img-src 'none'; connect-src 'none'; font-src 'none'";
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${style}">
<title>Graph</title>
</head>
<body>
<div id="toolbar"><input id="search" type="search" placeholder="Search op, name, module or file:line (Enter: next)">
<label title="Constants, initializers, shapes and what only they compute">
<input id="plumbing" type="checkbox">constants &amp; shapes</label>
<button id="side" title="Show the other model of the comparison">Show before</button>
<span id="status"></span><span id="outcome"></span>
<span id="legend"><button id="legend-toggle" title="Show or hide the legend of the error colours">Legend</button>
<span id="legend-items"></span></span></div>
<svg id="graph"><defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L8,4L0,8z"/></marker></defs><g id="viewport"></g></svg>
<div id="details"><button id="details-close" title="Close the details">×</button><div id="details-rows"></div></div>
<script nonce="${nonce}" src="${script}"></script>
</body>
</html>`;
}
