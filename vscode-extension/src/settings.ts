// Settings the extension itself acts on (no vscode import: unit-testable). The settings are declared in
// package.json; the server reads the export settings from the `onnxlens` configuration itself.

/** Settings whose change restarts the server: the ones it is started with. */
export const RESTART_SETTINGS = ['interpreter'];

/** Whether a configuration change (`affects(section)`, as `ConfigurationChangeEvent.affectsConfiguration`) needs a restart. */
export function needsRestart(affects: (section: string) => boolean, section: string): boolean {
  return RESTART_SETTINGS.some((key) => affects(`${section}.${key}`));
}

/** The command that installs what the server needs into `python`. */
export function installCommand(python: string): string {
  const quoted = /\s/.test(python) ? `"${python}"` : python;
  return `${quoted} -m pip install "onnxlens[server]"`;
}

/** `fn` called once, `ms` after the last of a burst of calls. */
export function debounce(fn: () => void, ms: number): { (): void; cancel(): void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const debounced = () => {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };
  debounced.cancel = () => clearTimeout(timer);
  return debounced;
}

/** The values of one setting by scope, as `WorkspaceConfiguration.inspect` gives them. */
export interface InspectedSetting {
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/**
 * Who chose the effective `outputFolder`: `user` when it comes from the user's own settings, `workspace`
 * when the workspace's settings set it (a repository may ship them), else `default`. The server writes
 * outside the workspace only for `user`.
 */
export function outputFolderScope(inspected: InspectedSetting | undefined): 'user' | 'workspace' | 'default' {
  if (inspected?.workspaceFolderValue !== undefined || inspected?.workspaceValue !== undefined) {
    return 'workspace';
  }
  return inspected?.globalValue !== undefined ? 'user' : 'default';
}
