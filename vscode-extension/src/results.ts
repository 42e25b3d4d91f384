// An export's results (as the server parsed its SARIF log) → a tree of rules → results (no vscode import:
// unit-testable).
import { ResultItem } from './protocol';

export { ResultItem, ResultLocation } from './protocol';

export interface RuleGroup {
  ruleId: string;
  ruleName: string;
  results: ResultItem[];
}

export interface RunGroup {
  tool: string;
  rules: RuleGroup[];
}

const LEVEL_ORDER = ['error', 'warning', 'note', 'none'];

/** The results grouped by rule; errors first, rules in id order. */
export function groupResults(results: ResultItem[], tool = 'onnxlens'): RunGroup[] {
  const groups = new Map<string, RuleGroup>();
  for (const result of results) {
    const group: RuleGroup = groups.get(result.ruleId) ?? { ruleId: result.ruleId, ruleName: result.ruleName, results: [] };
    group.results.push(result);
    groups.set(result.ruleId, group);
  }
  const rules = [...groups.values()].sort((a, b) => worst(a) - worst(b) || a.ruleId.localeCompare(b.ruleId));
  return [{ tool, rules }];
}

/** "2 errors, 1 warning" (errors, warnings, notes), or "no problems". */
export function problemCounts(runs: RunGroup[]): string {
  const levels = runs.flatMap((run) => run.rules.flatMap((rule) => rule.results.map((result) => result.level)));
  const counts = (['error', 'warning', 'note'] as const)
    .map((level) => [level, levels.filter((l) => l === level).length] as const)
    .filter(([, count]) => count > 0)
    .map(([level, count]) => `${count} ${level}${count === 1 ? '' : 's'}`);
  return counts.join(', ') || 'no problems';
}

function worst(group: RuleGroup): number {
  return Math.min(...group.results.map((r) => LEVEL_ORDER.indexOf(r.level)));
}

/** Every file the results point into (to avoid showing their problems twice). */
export function filesOf(results: ResultItem[]): Set<string> {
  return new Set(results.flatMap((result) => (result.location ? [result.location.path] : [])));
}

/** `text` in lines of at most `width` characters, broken at spaces (a longer word stays whole), its own line
 * breaks kept: a tree row is one line cut at the view's edge, so a long message takes several rows. */
export function wrap(text: string, width = 72): string[] {
  const lines: string[] = [];
  for (const paragraph of text.split('\n')) {
    let line = '';
    for (const word of paragraph.split(' ').filter((w) => w !== '')) {
      if (line && line.length + 1 + word.length > width) {
        lines.push(line);
        line = word;
      } else {
        line = line ? `${line} ${word}` : word;
      }
    }
    lines.push(line);
  }
  return lines.filter((line, i) => line !== '' || i === 0);
}
