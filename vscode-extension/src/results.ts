// SARIF logs → a tree of runs → rules → results (no vscode import: unit-testable).

export interface ResultLocation {
  path: string;
  line: number; // 0-based
}

export interface ResultItem {
  ruleId: string;
  level: string;
  message: string;
  location?: ResultLocation;
}

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

/** Runs with their results grouped by rule; errors first, rules in id order; level-none results left out. */
export function groupResults(log: any): RunGroup[] {
  return (log?.runs ?? []).map((run: any) => {
    const names = new Map<string, string>((run.tool?.driver?.rules ?? []).map((r: any) => [r.id, r.name]));
    const groups = new Map<string, RuleGroup>();
    for (const result of run.results ?? []) {
      const level = result.level ?? 'warning';
      if (level === 'none') {
        continue;
      }
      const group: RuleGroup = groups.get(result.ruleId) ?? { ruleId: result.ruleId, ruleName: names.get(result.ruleId) ?? '', results: [] };
      group.results.push({ ruleId: result.ruleId, level, message: result.message?.text ?? '', location: resultLocation(result, run) });
      groups.set(result.ruleId, group);
    }
    const rules = [...groups.values()].sort((a, b) => worst(a) - worst(b) || a.ruleId.localeCompare(b.ruleId));
    return { tool: run.tool?.driver?.name ?? 'SARIF', rules };
  });
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

/** The file path and 0-based line of a result's primary location (resolving uriBaseId). */
export function resultLocation(result: any, run: any): ResultLocation | undefined {
  const physical = result.locations?.[0]?.physicalLocation;
  const artifact = physical?.artifactLocation;
  if (!artifact?.uri) {
    return undefined;
  }
  let uri: string = artifact.uri;
  if (artifact.uriBaseId) {
    const base = run.originalUriBaseIds?.[artifact.uriBaseId]?.uri;
    if (base) {
      uri = new URL(uri, base).toString();
    }
  }
  if (!uri.startsWith('file:')) {
    return undefined;
  }
  return { path: decodeURIComponent(new URL(uri).pathname), line: (physical.region?.startLine ?? 1) - 1 };
}

/** Every file a log's results point into (to avoid showing their problems twice). */
export function filesOf(log: any): Set<string> {
  const files = new Set<string>();
  for (const run of groupResults(log)) {
    for (const rule of run.rules) {
      for (const result of rule.results) {
        if (result.location) {
          files.add(result.location.path);
        }
      }
    }
  }
  return files;
}
