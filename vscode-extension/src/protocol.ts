// What the extension and the language server say to each other. The server spells the same names in
// server/protocol.py (tests/test_protocol.py checks that the two agree). No vscode import.

/** Commands the server executes (`workspace/executeCommand`); the client registers them itself. */
export const EXPORT = 'onnxlens.server.export';
export const LIST_TARGETS = 'onnxlens.server.listTargets';
export const CANCEL = 'onnxlens.server.cancel';
export const GRAPH = 'onnxlens.server.graph'; // takes `TargetArgs`: the target's last exported model as a graph
export const GRAPH_FILE = 'onnxlens.server.graphFile'; // takes `{uri}`: any .onnx file as a graph
export const COMPARE_GRAPHS = 'onnxlens.server.compareGraphs'; // takes `CompareArgs`: two models compared
export const TENSOR = 'onnxlens.server.tensor'; // takes `{uri, name}`: an initializer's size and first values
/** Commands of the extension the server's code lenses invoke. */
export const OPEN_SARIF_LOG = 'onnxlens.openSarifLog';
export const EXPORT_TARGET = 'onnxlens.exportTarget'; // takes `ExportArgs`: exports as EXPORT does and shows the result
export const EXPORT_AFTER_FIX = 'onnxlens.exportAfterFix'; // a quick fix's: saves its file (`uri`), then EXPORT_TARGET

/** Notifications from the server. */
export const EXPORT_PROGRESS = 'onnxlens/exportProgress';
export const EXPORT_FINISHED = 'onnxlens/exportFinished';

export const CONFIGURATION_SECTION = 'onnxlens';
/** The setting a request overrides to export with op-level debug (declared in package.json). */
export const OP_LEVEL_DEBUG_OPTION = 'opLevelDebug';
/** Added by the extension to the configuration it answers: who chose `outputFolder` (`outputFolderScope()`). */
export const OUTPUT_FOLDER_SCOPE = 'outputFolderScope';

/** Rule ids of the exporter's results the extension acts on (exporter/diagnostics/rules.py: RULE_<its name>). */
export const RULE_NO_SYMBOLIC_FUNCTION = 'FXE0011'; // an operator without ONNX translation
export const RULE_OP_LEVEL_DEBUGGING = 'FXE0013';
export const RULE_ACCURACY_DIVERGENCE = 'FXE0021'; // verification in onnxruntime

/** JSON-RPC error codes of requests the server refuses. */
export enum ErrorCode {
  InvalidOptions = -32602, // JSON-RPC's InvalidParams: a wrong command argument, export option or setting
  NotOnDisk = 1001,
  NoSuchFile = 1002,
  NoExportTarget = 1003,
  UnknownTarget = 1004,
  UnreadableFile = 1006, // not UTF-8 text, or not readable
  SyntaxError = 1007, // the model file does not parse (the message says file:line)
  OutsideWorkspace = 1008, // the model file, or the output folder, is outside the workspace folders
  NotExported = 1009, // the target has not been exported in this session
  UnreadableModel = 1010, // the exported .onnx file is gone or is not a readable ONNX model
  NoModel = 1011, // the target's last export wrote no model (it failed before); data: `NoModelData`
  NoPrevious = 1012, // the target has no previous export to compare with
}

/** `EXPORT`'s argument: a target by name, all targets of the file, or the one at `line` (0-based). */
export interface ExportArgs {
  uri: string;
  target?: string;
  line?: number;
  all?: boolean;
  options?: Record<string, unknown>; // per-request overrides of the onnxlens settings (their keys)
  jobId?: string;
}

/** The data of `ErrorCode.NoModel`: the log of the export that wrote no model. */
export interface NoModelData {
  sarif: string | null;
}

/** `GRAPH`'s argument. */
export interface TargetArgs {
  uri: string;
  target: string;
}

/** `COMPARE_GRAPHS`'s argument: two model files (URIs), or a target's previous and last exports. */
export interface CompareArgs {
  before?: string;
  after?: string;
  uri?: string;
  target?: string;
}

/** A result of an export's SARIF log, as the server parsed it (level none left out). */
export interface ResultItem {
  ruleId: string;
  ruleName: string;
  level: string; // error, warning, note
  message: string;
  location: ResultLocation | null;
}

export interface ResultLocation {
  path: string;
  line: number; // 0-based
}

/** An export's outcome, by the exporter's one rule (exporter/outcome.py: `Kind`, `Outcome.to_json`). */
export type OutcomeKind = 'failed' | 'wrong' | 'degraded' | 'verified' | 'exported';
export type Severity = 'error' | 'warning' | 'info';

export interface FixedDim {
  input: string;
  dim: number;
  size: number;
}

export interface Outcome {
  kind: OutcomeKind;
  headline: string; // one line, in the user's words
  severity: Severity;
  fixedDims: FixedDim[]; // a degraded export's static dims
}

export interface Job {
  jobId: string;
  target: string;
  status: 'ok' | 'failed' | 'crashed' | 'timeout' | 'cancelled';
  outcome: Outcome;
  message: string;
  onnx: string | null;
  sarif: string | null;
  summary: { nodes: number; warnings: number; generation?: string } | null;  // generation: the check of an export for generation
  seconds: number;
  results: ResultItem[]; // the results of the log at `sarif`, in its order
}

export interface ExportResult {
  jobs: Job[];
}

export interface ExportProgress {
  jobId: string;
  target: string;
  stage: string;
  message: string;
}

export interface ListTargetsResult {
  targets: { name: string; line: number }[];
  modules: { name: string; line: number }[];
}

/** The server's error code of a failed request, if it has one. */
export function errorCode(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}
