// Which export target the cursor is in (no vscode import: unit-testable).

/** A target and the 0-based line its code lenses are on (its decorator's). */
export interface TargetLine {
  name: string;
  line: number;
}

/** The target the server exports for a cursor on `line` (its `target_at`): the last one starting at or
 * above the line, else the first. */
export function targetAt(targets: TargetLine[], line: number): string | undefined {
  const sorted = [...targets].sort((a, b) => a.line - b.line);
  return (sorted.filter((t) => t.line <= line).at(-1) ?? sorted[0])?.name;
}
