// The built-in results view (when the SARIF Viewer is not installed): logs → rules → results. It shows the
// logs opened in it, one per target, each as the target's latest export left it (the results the server
// parsed from it, `Job.results`).
import * as path from 'node:path';
import * as vscode from 'vscode';

import { documentKey, locationKey, locationUri } from './locations';
import { Outcome, ResultLocation } from './protocol';
import { LOOKS } from './reports';
import { groupResults, problemCounts, ResultItem, RuleGroup, RunGroup, wrap } from './results';

type Node =
  | { kind: 'log'; label: string; runs: RunGroup[]; outcome: Outcome | undefined }
  | { kind: 'rule'; rule: RuleGroup }
  | { kind: 'result'; result: ResultItem }
  | { kind: 'text'; text: string }; // a long message's further lines

const ICONS: Record<string, string> = { error: 'error', warning: 'warning', note: 'info' };

export class ResultsView implements vscode.TreeDataProvider<Node> {
  /** By SARIF log path (a target's log path stays the same from export to export), the last opened first. */
  private logs = new Map<string, Node>();
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;

  /** Shows the log first (the one read from the same path before goes). */
  show(sarifPath: string, results: ResultItem[], outcome: Outcome | undefined): void {
    this.logs.delete(sarifPath);
    this.logs = new Map([[sarifPath, logNode(sarifPath, results, outcome)], ...this.logs]);
    void vscode.commands.executeCommand('setContext', 'onnxlens.hasResults', true);
    this.changed.fire();
  }

  shows(sarifPath: string): boolean {
    return this.logs.has(sarifPath);
  }

  /** Replaces a log shown with its new content, in its place. */
  update(sarifPath: string, results: ResultItem[], outcome: Outcome): void {
    this.logs.set(sarifPath, logNode(sarifPath, results, outcome));
    this.changed.fire();
  }

  getChildren(node?: Node): Node[] {
    if (!node) {
      return [...this.logs.values()];
    }
    if (node.kind === 'log') {
      return node.runs.flatMap((run) => run.rules.map((rule): Node => ({ kind: 'rule', rule })));
    }
    if (node.kind === 'result') {
      return wrap(node.result.message).slice(1).map((text): Node => ({ kind: 'text', text }));
    }
    return node.kind === 'rule' ? node.rule.results.map((result): Node => ({ kind: 'result', result })) : [];
  }

  getTreeItem(node: Node): vscode.TreeItem {
    if (node.kind === 'log') {
      // The export's outcome first ("verified · 1 note"): where the results are, what they add up to.
      const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.Expanded);
      const look = node.outcome && LOOKS[node.outcome.kind];
      item.description = look ? `${look.word} · ${problemCounts(node.runs)}` : problemCounts(node.runs);
      item.tooltip = node.outcome?.headline;
      item.iconPath = look && new vscode.ThemeIcon(look.icon);
      return item;
    }
    if (node.kind === 'rule') {
      const item = new vscode.TreeItem(`${node.rule.ruleId} ${node.rule.ruleName}`, vscode.TreeItemCollapsibleState.Expanded);
      item.description = `${node.rule.results.length}`;
      return item;
    }
    if (node.kind === 'text') {
      return new vscode.TreeItem(node.text, vscode.TreeItemCollapsibleState.None);
    }
    const { result } = node;
    const lines = wrap(result.message);
    // Collapsed: the list stays one row per result (its first line); expanding shows the rest of the message.
    const state = lines.length > 1 ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.None;
    const item = new vscode.TreeItem(lines[0], state);
    item.tooltip = result.message; // a row is one line, cut at the view's width: the whole message on hover
    item.iconPath = new vscode.ThemeIcon(ICONS[result.level] ?? 'circle-outline');
    if (result.location) {
      item.description = `${placeOf(result.location)}:${result.location.line + 1}`;
      const position = new vscode.Position(result.location.line, 0);
      item.command = {
        title: 'Go to location',
        command: 'vscode.open', // a notebook cell's URI opens its notebook at the cell
        arguments: [locationUri(result.location.path, vscode.Uri), { selection: new vscode.Range(position, position) }],
      };
    }
    return item;
  }
}

/** "net.py", or "model.ipynb, cell 2" for a cell of an open notebook (its place in the notebook, 1-based). */
function placeOf(location: ResultLocation): string {
  const name = path.basename(locationUri(location.path, vscode.Uri).path);
  const key = locationKey(location.path, vscode.Uri);
  const cell = vscode.workspace.notebookDocuments.flatMap((n) => n.getCells()).find((c) => documentKey(c.document.uri) === key);
  return cell ? `${name}, cell ${cell.index + 1}` : name;
}

function logNode(sarifPath: string, results: ResultItem[], outcome: Outcome | undefined): Node {
  return { kind: 'log', label: path.basename(sarifPath), runs: groupResults(results), outcome };
}
