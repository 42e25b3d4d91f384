// What an export's result says (no vscode import: unit-testable). The outcome (`Job.outcome`: failed, wrong,
// degraded, verified, exported) is the exporter's one rule (exporter/outcome.py); here it only gets its look.
import * as path from 'node:path';

import { Job, OutcomeKind, Severity } from './protocol';

export const SHOW_PROBLEMS = 'Show Problems';
export const OPEN_IN_NETRON = 'Open in Netron';
export const SHOW_GRAPH = 'Show Graph';

/** Each outcome's look: its codicon and word (status item, results view) and how its notification shows. */
export const LOOKS: Record<OutcomeKind, { icon: string; word: string }> = {
  failed: { icon: 'error', word: 'failed' },
  wrong: { icon: 'error', word: 'wrong model' },
  degraded: { icon: 'warning', word: 'static shapes' },
  verified: { icon: 'pass-filled', word: 'verified' },
  exported: { icon: 'check', word: 'exported' },
};

const SEVERITY_ORDER: Severity[] = ['error', 'warning', 'info'];

/** A model was written and no check says it is wrong. */
export function exported(job: Job): boolean {
  return job.onnx !== null && ['degraded', 'verified', 'exported'].includes(job.outcome.kind);
}

/** The export left problems to look at (cancelling is not one). */
export function failed(job: Job): boolean {
  return job.status !== 'cancelled' && ['failed', 'wrong'].includes(job.outcome.kind);
}

/** How a notification of `jobs` shows: the worst of their outcomes' severities (a cancelled export: info). */
export function severity(jobs: Job[]): Severity {
  const severities = jobs.map((job) => (job.status === 'cancelled' ? 'info' : job.outcome.severity));
  return SEVERITY_ORDER.find((s) => severities.includes(s)) ?? 'info';
}

/** The notification of one export (its outcome's headline, the model and its size: "Exported mlp → mlp.mlp.onnx
 * (11 ops, 0.4 s)"), or one summary of many. */
export function resultMessage(jobs: Job[], file: string): string {
  return jobs.length === 1 ? jobMessage(jobs[0]) : summaryMessage(jobs, file);
}

/** Its buttons: the problems of anything not plainly exported, the SARIF log(s), the graph view and Netron for one
 * model (a wrong one too: to see where it diverges). */
export function resultActions(jobs: Job[], netron: boolean): string[] {
  const logs = jobs.filter((job) => job.sarif).length;
  const model = jobs.length === 1 && jobs[0].onnx !== null;
  return [
    ...(jobs.some((job) => job.status !== 'cancelled' && job.outcome.severity !== 'info') ? [SHOW_PROBLEMS] : []),
    ...(logs ? [openLogsAction(logs)] : []),
    ...(model ? [SHOW_GRAPH] : []),
    ...(netron && model ? [OPEN_IN_NETRON] : []),
  ];
}

export function openLogsAction(logs: number): string {
  return logs === 1 ? 'Open SARIF Log' : 'Open SARIF Logs';
}

/** The status item's text and tooltip for the last export (codicons in the text). */
export function statusText(jobs: Job[]): { text: string; tooltip: string } {
  const shown = jobs.filter((job) => job.status !== 'cancelled');
  if (!shown.length) {
    return { text: '$(circle-slash) export cancelled', tooltip: jobs.map((job) => job.message).join('\n') };
  }
  const worst = shown.find((job) => job.outcome.severity === severity(shown)) ?? shown[0];
  const look = LOOKS[worst.outcome.kind];
  const others = shown.length > 1 ? ` (+${shown.length - 1})` : '';
  const tooltip = shown.map((job) => job.outcome.headline).join('\n');
  return { text: `$(${look.icon}) ${worst.target}: ${look.word}${others}`, tooltip };
}

function jobMessage(job: Job): string {
  if (job.status === 'cancelled') {
    return `Export of ${job.target} cancelled.`;
  }
  const { headline, kind } = job.outcome;
  if (job.onnx === null) {
    return headline;
  }
  const model = `${written(job)} (${details(job)})`;
  return kind === 'wrong' ? `${headline}. The model is kept to inspect: ${model}` : `${headline} → ${model}`;
}

/** "Exported 1 of 3 targets of net.py: encoder (12 ops, 0.4 s); decoder wrong model: …; head cancelled". */
function summaryMessage(jobs: Job[], file: string): string {
  const parts = jobs.map((job) => {
    if (job.status === 'cancelled') {
      return `${job.target} cancelled`;
    }
    if (job.outcome.kind === 'exported') {
      return `${job.target} (${details(job)})`;
    }
    const words = LOOKS[job.outcome.kind].word;
    const size = job.onnx !== null ? ` (${details(job)})` : '';
    return `${job.target} ${words}${size}: ${job.outcome.headline.replace(/\.$/, '')}`;
  });
  return `Exported ${jobs.filter(exported).length} of ${jobs.length} targets of ${file}: ${parts.join('; ')}`;
}

/** The model file, or for an export for generation its folder ("net.lm/"). */
function written(job: Job): string {
  const onnx = job.onnx ?? '';
  return job.summary?.generation ? `${path.basename(path.dirname(onnx))}/` : path.basename(onnx);
}

/** The model's size as the graph view counts it ("12 ops"; none counted when a check stopped the export), its
 * warnings, the generation check, the time. */
function details(job: Job): string {
  const summary = job.summary;
  return [
    ...(summary ? [`${summary.nodes} ops`] : []),
    ...(summary?.warnings ? [`${summary.warnings} warnings`] : []),
    ...(summary?.generation ? [summary.generation] : []),
    `${job.seconds.toFixed(1)} s`,
  ].join(', ');
}
