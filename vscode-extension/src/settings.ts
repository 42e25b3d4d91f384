// Editor settings → the export options the language server takes (no vscode import: unit-testable).

export interface OnnxlensSettings {
  interpreter: string;
  outputFolder: string;
  opset: number;
  dynamicShapes: boolean;
  opLevelDebug: boolean;
  timeoutSeconds: number;
  verbosity: 'debug' | 'info' | 'warning' | 'error';
  warningsAsErrors: boolean;
  openSarifViewerOnFailure: boolean;
}

export const DEFAULTS: OnnxlensSettings = {
  interpreter: '',
  outputFolder: 'onnxlens-out',
  opset: 18,
  dynamicShapes: false,
  opLevelDebug: false,
  timeoutSeconds: 300,
  verbosity: 'info',
  warningsAsErrors: false,
  openSarifViewerOnFailure: false,
};

/** Reads every setting through `get`, falling back to the defaults. */
export function readSettings(get: <T>(key: string) => T | undefined): OnnxlensSettings {
  const settings = { ...DEFAULTS };
  for (const key of Object.keys(DEFAULTS) as (keyof OnnxlensSettings)[]) {
    const value = get(key);
    if (value !== undefined && value !== null) {
      (settings as Record<string, unknown>)[key] = value;
    }
  }
  return settings;
}

/** The per-request export options (the server reads the rest of the settings itself). */
export function exportOptions(settings: OnnxlensSettings, overrides: { opLevelDebug?: boolean } = {}): Record<string, unknown> {
  return {
    opset: settings.opset,
    dynamicShapes: settings.dynamicShapes,
    opLevelDebug: overrides.opLevelDebug ?? settings.opLevelDebug,
    verbosity: settings.verbosity,
    warningsAsErrors: settings.warningsAsErrors,
  };
}

/** The command that installs what the server needs into `python`. */
export function installCommand(python: string): string {
  const quoted = /\s/.test(python) ? `"${python}"` : python;
  return `${quoted} -m pip install "onnxlens[server]"`;
}
