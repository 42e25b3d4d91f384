// The built-in results view (when the SARIF Viewer is not installed): logs → rules → results. It shows the
// logs opened in it, one per target, each as the target's latest export left it (the results the server
// parsed from it, `Job.results`).
import * as path from 'node:path';
import * as vscode from 'vscode';

import { groupResults, problemCounts, ResultItem, RuleGroup, RunGroup } from './results';

type Node = { kind: 'log'; label: string; runs: RunGroup[] } | { kind: 'rule'; rule: RuleGroup } | { kind: 'result'; result: ResultItem };

const ICONS: Record<string, string> = { error: 'error', warning: 'warning', note: 'info' };

export class ResultsView implements vscode.TreeDataProvider<Node> {
  /** By SARIF log path (a target's log path stays the same from export to export), the last opened first. */
  private logs = new Map<string, Node>();
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;

  /** Shows the log first (the one read from the same path before goes). */
  show(sarifPath: string, results: ResultItem[]): void {
    this.logs.delete(sarifPath);
    this.logs = new Map([[sarifPath, logNode(sarifPath, results)], ...this.logs]);
    void vscode.commands.executeCommand('setContext', 'onnxlens.hasResults', true);
    this.changed.fire();
  }

  shows(sarifPath: string): boolean {
    return this.logs.has(sarifPath);
  }

  /** Replaces a log shown with its new content, in its place. */
  update(sarifPath: string, results: ResultItem[]): void {
    this.logs.set(sarifPath, logNode(sarifPath, results));
    this.changed.fire();
  }

  getChildren(node?: Node): Node[] {
    if (!node) {
      return [...this.logs.values()];
    }
    if (node.kind === 'log') {
      return node.runs.flatMap((run) => run.rules.map((rule): Node => ({ kind: 'rule', rule })));
    }
    return node.kind === 'rule' ? node.rule.results.map((result): Node => ({ kind: 'result', result })) : [];
  }

  getTreeItem(node: Node): vscode.TreeItem {
    if (node.kind === 'log') {
      const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.Expanded);
      item.description = problemCounts(node.runs);
      return item;
    }
    if (node.kind === 'rule') {
      const item = new vscode.TreeItem(`${node.rule.ruleId} ${node.rule.ruleName}`, vscode.TreeItemCollapsibleState.Expanded);
      item.description = `${node.rule.results.length}`;
      return item;
    }
    const { result } = node;
    const item = new vscode.TreeItem(result.message, vscode.TreeItemCollapsibleState.None);
    item.iconPath = new vscode.ThemeIcon(ICONS[result.level] ?? 'circle-outline');
    if (result.location) {
      item.description = `${path.basename(result.location.path)}:${result.location.line + 1}`;
      const position = new vscode.Position(result.location.line, 0);
      item.command = {
        title: 'Go to location',
        command: 'vscode.open',
        arguments: [vscode.Uri.file(result.location.path), { selection: new vscode.Range(position, position) }],
      };
    }
    return item;
  }
}

function logNode(sarifPath: string, results: ResultItem[]): Node {
  return { kind: 'log', label: path.basename(sarifPath), runs: groupResults(results) };
}
