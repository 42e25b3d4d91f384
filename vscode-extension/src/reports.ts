// What an export's result notification says (no vscode import: unit-testable).
import * as path from 'node:path';

import { Job } from './protocol';

export const SHOW_PROBLEMS = 'Show Problems';
export const OPEN_IN_NETRON = 'Open in Netron';
export const SHOW_GRAPH = 'Show Graph';

export function exported(job: Job): boolean {
  return job.status === 'ok' && job.onnx !== null;
}

export function failed(job: Job): boolean {
  return !exported(job) && job.status !== 'cancelled';
}

/** The notification of one export ("Exported mlp → mlp.mlp.onnx (11 nodes, 0.4 s)"; an export for generation names
 * its folder and the generation check), or one summary of many. */
export function resultMessage(jobs: Job[], file: string): string {
  return jobs.length === 1 ? jobMessage(jobs[0]) : summaryMessage(jobs, file);
}

/** Its buttons: the problems of a failure, the SARIF log(s), the graph view and Netron for one exported model. */
export function resultActions(jobs: Job[], netron: boolean): string[] {
  const logs = jobs.filter((job) => job.sarif).length;
  return [
    ...(jobs.some(failed) ? [SHOW_PROBLEMS] : []),
    ...(logs ? [openLogsAction(logs)] : []),
    ...(jobs.length === 1 && exported(jobs[0]) ? [SHOW_GRAPH] : []),
    ...(netron && jobs.length === 1 && exported(jobs[0]) ? [OPEN_IN_NETRON] : []),
  ];
}

export function openLogsAction(logs: number): string {
  return logs === 1 ? 'Open SARIF Log' : 'Open SARIF Logs';
}

function jobMessage(job: Job): string {
  if (exported(job)) {
    return `Exported ${job.target} → ${written(job)} (${details(job)})`;
  }
  return job.status === 'cancelled' ? `Export of ${job.target} cancelled.` : `Export of ${job.target} ${job.status}: ${job.message}`;
}

/** "Exported 1 of 2 targets of net.py: encoder (12 nodes, 0.4 s); decoder failed: …". */
function summaryMessage(jobs: Job[], file: string): string {
  const parts = jobs.map((job) => {
    if (exported(job)) {
      return `${job.target} (${details(job)})`;
    }
    return job.status === 'cancelled' ? `${job.target} cancelled` : `${job.target} ${job.status}: ${job.message.replace(/\.$/, '')}`;
  });
  return `Exported ${jobs.filter(exported).length} of ${jobs.length} targets of ${file}: ${parts.join('; ')}`;
}

/** The model file, or for an export for generation its folder ("net.lm/"). */
function written(job: Job): string {
  const onnx = job.onnx ?? '';
  return job.summary?.generation ? `${path.basename(path.dirname(onnx))}/` : path.basename(onnx);
}

function details(job: Job): string {
  const warnings = job.summary?.warnings ? `, ${job.summary.warnings} warnings` : '';
  const generation = job.summary?.generation ? `, ${job.summary.generation}` : '';
  return `${job.summary?.nodes ?? '?'} nodes${warnings}${generation}, ${job.seconds.toFixed(1)} s`;
}
