// The built-in results view (when the SARIF Viewer is not installed): runs → rules → results.
import * as path from 'node:path';
import * as vscode from 'vscode';

import { groupResults, ResultItem, RuleGroup, RunGroup } from './results';

type Node = { kind: 'log'; label: string; runs: RunGroup[] } | { kind: 'rule'; rule: RuleGroup } | { kind: 'result'; result: ResultItem };

const ICONS: Record<string, string> = { error: 'error', warning: 'warning', note: 'info' };

export class ResultsView implements vscode.TreeDataProvider<Node> {
  private logs: Node[] = [];
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;

  show(sarifPath: string, log: unknown): void {
    this.logs = [{ kind: 'log', label: path.basename(sarifPath), runs: groupResults(log) }];
    void vscode.commands.executeCommand('setContext', 'onnxlens.hasResults', true);
    this.changed.fire();
  }

  getChildren(node?: Node): Node[] {
    if (!node) {
      return this.logs;
    }
    if (node.kind === 'log') {
      return node.runs.flatMap((run) => run.rules.map((rule): Node => ({ kind: 'rule', rule })));
    }
    return node.kind === 'rule' ? node.rule.results.map((result): Node => ({ kind: 'result', result })) : [];
  }

  getTreeItem(node: Node): vscode.TreeItem {
    if (node.kind === 'log') {
      return new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.Expanded);
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
