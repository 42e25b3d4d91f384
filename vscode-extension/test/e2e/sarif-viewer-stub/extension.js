// A stand-in for the marketplace SARIF Viewer (MS-SarifVSCode.sarif-viewer) for onnxlens' e2e tests.
// activate() returns the viewer's API shape; every call is appended as one JSON line
// {"method": ..., "uris": [...], ...} to $SARIF_VIEWER_STUB_LOG (else the sarifViewerStub.logFile setting).
const fs = require('node:fs');
const vscode = require('vscode');

function logFile() {
  return process.env.SARIF_VIEWER_STUB_LOG || vscode.workspace.getConfiguration('sarifViewerStub').get('logFile') || '';
}

function record(method, uris, extra = {}) {
  const file = logFile();
  if (file) {
    const line = { method, uris: (uris || []).map((u) => u.toString()), time: Date.now(), ...extra };
    fs.appendFileSync(file, `${JSON.stringify(line)}\n`);
  }
}

function activate() {
  record('activate', []);
  let uriBases = [];
  // Like the real viewer (src/extension/index.ts): async methods, so callers get promises.
  return {
    async openLogs(logs, _options, _cancellationToken) {
      record('openLogs', logs);
    },
    async closeLogs(logs, _options, _cancellationToken) {
      record('closeLogs', logs);
    },
    async closeAllLogs() {
      record('closeAllLogs', []);
    },
    async selectByIndex(uri, runIndex, resultIndex) {
      record('selectByIndex', [uri], { runIndex, resultIndex });
    },
    get uriBases() {
      return uriBases.map((u) => vscode.Uri.parse(u));
    },
    set uriBases(values) {
      uriBases = values.map((u) => u.toString());
      record('uriBases', values);
    },
    dispose() {
      record('dispose', []);
    },
  };
}

function deactivate() {}

module.exports = { activate, deactivate };
