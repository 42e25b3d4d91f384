// The graph view of a model in the real editor (code-server + Chromium, as the e2e test runs them): memory of the
// VS Code extension host, of the language server and of the ELK worker, and the times, while the model's .onnx
// opens from Quick Open in the graph editor and a layer expands (the largest collapsed group; back; then another
// as large). Run by graph_view.py (--editor); needs `npm run package` (dist/onnxlens.vsix)
// and `bash scripts/setup-e2e.sh` (.tools/).
//   node benchmarks/graph_view_editor.mjs [--warm-up SMALL.onnx] MODEL.onnx [PYTHON]
// The model's folder is the workspace (a warm-up model, opened and closed first, must be in it too). Times: from
// Quick Open and from the click on its row to the boxes in the view, and of the view's `rendered` messages as the
// extension logs them (the view's own clock: layout and render). Figures, each named for what it is:
// - extension host: the code-server extension host process (command line with --type=extensionHost), VmRSS from
//   /proc sampled every 50 ms from before the file opens to the end, and its VmHWM (the process's lifetime peak);
// - language server: the onnxlens server process (python …/bundled/launch_server.py), the same (its samples start
//   once the model is drawn; VmHWM is from its start);
// - ELK worker: its own V8 isolate's heap, used and allocated (CDP Runtime.getHeapUsage on the worker's target;
//   no GC forced), after the first picture and after each expand;
// - the view's page: V8 heap of the isolate the webview's frames run in (CDP Runtime.getHeapUsage on its target):
//   when code-server serves webviews from the workbench's origin that isolate is the workbench's too, which the
//   figure then says.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const TOOLS = join(ROOT, '.tools');
const NODE24 = join(TOOLS, 'node24/bin/node');
const CODE_SERVER = join(TOOLS, 'code-server/node_modules/code-server/out/node/entry.js');
const VSIX = join(ROOT, 'vscode-extension/dist/onnxlens.vsix');
const { chromium } = createRequire(import.meta.url)(join(TOOLS, 'e2e/node_modules/playwright-core'));

const args = process.argv.slice(2);
const warmUpModel = args[0] === '--warm-up' ? args[1] : null;
const [model, python = join(ROOT, '.venv/bin/python')] = warmUpModel ? args.slice(2) : args;
for (const [path, fix] of [[VSIX, 'npm run package in vscode-extension/'], [CODE_SERVER, 'bash scripts/setup-e2e.sh']]) {
  if (!existsSync(path)) {
    throw new Error(`${path} missing: ${fix}`);
  }
}
const MiB = (bytes) => Math.round(bytes / 2 ** 20);
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

async function until(predicate, what, timeout = 120_000) {
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    const value = await predicate();
    if (value) {
      return value;
    }
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
}

// ----- processes: found by command line among code-server's descendants, sampled from /proc -----

function children(pid) {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function descendants(pid) {
  return children(pid).flatMap((child) => [child, ...descendants(child)]);
}

function commandLine(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

function status(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kib = (key) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(text)?.[1] ?? NaN);
    return { rss: kib('VmRSS') / 1024, hwm: kib('VmHWM') / 1024 };
  } catch {
    return null;
  }
}

class Sampler {
  constructor(pid) {
    this.pid = pid;
    this.samples = [];
    this.timer = setInterval(() => this.sample(), 50);
  }

  sample() {
    const now = status(this.pid);
    if (now) {
      this.samples.push(now.rss);
    }
    return now;
  }

  stop() {
    clearInterval(this.timer);
    const last = this.sample();
    return { first: Math.round(this.samples[0]), peak: Math.round(Math.max(...this.samples)), last: Math.round(last?.rss), hwm: Math.round(last?.hwm) };
  }
}

// ----- CDP: a target's V8 heap through the browser session (non-flattened attach: workers and frames alike) -----

async function heapUsage(cdp, targetId) {
  const { sessionId } = await cdp.send('Target.attachToTarget', { targetId, flatten: false });
  const reply = new Promise((resolveReply) => {
    const listener = (event) => {
      const message = JSON.parse(event.message);
      if (event.sessionId === sessionId && message.id === 1) {
        cdp.off('Target.receivedMessageFromTarget', listener);
        resolveReply(message.result);
      }
    };
    cdp.on('Target.receivedMessageFromTarget', listener);
  });
  await cdp.send('Target.sendMessageToTarget', { sessionId, message: JSON.stringify({ id: 1, method: 'Runtime.getHeapUsage' }) });
  const { usedSize, totalSize } = await reply;
  await cdp.send('Target.detachFromTarget', { sessionId });
  return { used: MiB(usedSize), total: MiB(totalSize) };
}

/** The heaps of the ELK worker and of the isolate the webview's page runs in (its frame's target, else the page's). */
async function heaps(cdp) {
  const { targetInfos } = await cdp.send('Target.getTargets');
  const worker = targetInfos.find((t) => t.type === 'worker' && t.url.startsWith('blob:'));
  const frame = targetInfos.find((t) => t.type === 'iframe' && t.url.includes('webview'));
  const page = targetInfos.find((t) => t.type === 'page');
  return {
    worker: worker ? await heapUsage(cdp, worker.targetId) : null,
    view: await heapUsage(cdp, (frame ?? page).targetId),
    viewIsolate: frame ? 'the webview frame\'s own process' : 'shared with the workbench (same-origin webview frames)',
  };
}

// ----- the editor -----

const tmp = mkdtempSync(join(tmpdir(), 'onnxlens-graph-bench-'));
const userData = join(tmp, 'user-data');
const extensions = join(tmp, 'extensions');
mkdirSync(join(userData, 'User'), { recursive: true });
writeFileSync(join(tmp, 'config.yaml'), 'bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n');
writeFileSync(join(userData, 'User/settings.json'), JSON.stringify({
  'workbench.startupEditor': 'none', 'workbench.tips.enabled': false, 'telemetry.telemetryLevel': 'off', 'chat.disableAIFeatures': true,
  'security.workspace.trust.enabled': false, 'extensions.autoCheckUpdates': false, 'extensions.autoUpdate': false, 'git.enabled': false,
  'workbench.editor.enablePreview': false, 'onnxlens.interpreter': python,
}));
const serverEnv = { ...Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith('VSCODE_'))), XDG_DATA_HOME: join(tmp, 'xdg-data'), XDG_CONFIG_HOME: join(tmp, 'xdg-config') };
const common = ['--config', join(tmp, 'config.yaml'), '--user-data-dir', userData, '--extensions-dir', extensions];
execFileSync(NODE24, [CODE_SERVER, ...common, '--install-extension', VSIX], { env: serverEnv, stdio: 'pipe', timeout: 120_000 });
const workspace = dirname(resolve(model));
const server = spawn(NODE24, [CODE_SERVER, ...common, '--auth', 'none', '--bind-addr', '127.0.0.1:0', '--disable-telemetry', '--disable-update-check',
  '--disable-workspace-trust', '--disable-getting-started-override', workspace], { env: serverEnv, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
const stop = () => {
  try {
    process.kill(-server.pid, 'SIGKILL');
  } catch {
    // gone
  }
};
process.on('exit', stop);
let output = '';
server.stdout.on('data', (data) => (output += data));
server.stderr.on('data', (data) => (output += data));
const url = await until(() => /HTTP server listening on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(output)?.[1], 'code-server');
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/lib/chromium/chromium', args: ['--no-sandbox', '--disable-gpu'] });
try {
  const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
  const cdp = await browser.newBrowserCDPSession();
  await page.goto(`${url}?folder=${encodeURIComponent(workspace)}`, { waitUntil: 'domcontentloaded' });
  await page.locator('.statusbar').waitFor({ timeout: 120_000 });
  const host = await until(() => descendants(server.pid).find((pid) => commandLine(pid).includes('--type=extensionHost')), 'the extension host');
  const hostSampler = new Sampler(host);
  await sleep(3000); // the workbench settles
  const view = page.frameLocator('iframe.webview.ready').frameLocator('iframe#active-frame');
  const boxes = () => view.locator('g.box').evaluateAll((gs) => gs.map((g) => ({ id: g.dataset.id, kind: g.dataset.kind, label: g.querySelector('text')?.textContent ?? '' }))).catch(() => []);

  /** `file` from Quick Open, as a user opens it (the graph editor): resolves when its boxes show, with the times. */
  const open = async (file) => {
    const opened = Date.now();
    const input = page.locator('.quick-input-widget input');
    const row = page.locator('.quick-input-list .monaco-list-row', { hasText: file }).first();
    await until(async () => {
      await page.keyboard.press('Escape');
      await page.keyboard.press('Control+P');
      await input.fill(file);
      return row.waitFor({ timeout: 5000 }).then(() => true, () => false);
    }, `${file} in Quick Open`);
    await row.click();
    const clicked = Date.now();
    const shown = await until(async () => {
      const all = await boxes();
      return all.length ? all : null;
    }, `the graph of ${file}`);
    return { boxes: shown, quickOpenMs: Date.now() - opened, pictureMs: Date.now() - clicked };
  };
  // A small model first (--warm-up): the extension activates and its language server starts for it.
  let warmUp = null;
  if (warmUpModel) {
    const { boxes: shown, pictureMs } = await open(basename(warmUpModel));
    await sleep(2000);
    warmUp = { model: basename(warmUpModel), boxes: shown.length, pictureMs, extensionHostRssMiB: Math.round(status(host).rss) };
    await page.keyboard.press('F1');
    await page.locator('.quick-input-widget input').fill('>View: Close All Editors');
    await page.keyboard.press('Enter');
    await until(async () => (await page.locator('iframe.webview').count()) === 0, 'the graph editor closed');
    await sleep(2000);
    warmUp.afterCloseRssMiB = Math.round(status(host).rss);
  }
  const name = basename(model);
  const { boxes: shown, quickOpenMs, pictureMs } = await open(name);
  const collapsed = shown.filter((b) => b.kind === 'collapsed');
  const lsp = descendants(host).find((pid) => commandLine(pid).includes('launch_server.py'));
  const serverSampler = lsp ? new Sampler(lsp) : null;
  const afterFirst = await heaps(cdp);

  // A layer, then back, then (idle: the view lays out collapsed groups ahead) another as large.
  const ops = (b) => Number(/· (\d+) ops$/.exec(b.label)?.[1] ?? 0);
  const largest = Math.max(...collapsed.map(ops));
  const layers = collapsed.filter((b) => ops(b) === largest);
  const toggle = async (id, kind) => {
    const started = Date.now();
    await view.locator(`g.box[data-id="${id}"]`).dispatchEvent('click');
    await until(async () => (await boxes()).some((b) => b.id === id && b.kind === kind), `${id} ${kind}`);
    return Date.now() - started;
  };
  const firstExpand = await toggle(layers[0].id, 'group');
  await toggle(layers[0].id, 'collapsed');
  await sleep(3000);
  const secondExpand = await toggle((layers[1] ?? layers[0]).id, 'group');
  await sleep(500);
  const afterExpand = await heaps(cdp);
  const log = readdirSync(join(userData, 'logs'), { recursive: true }).filter((f) => f.endsWith('.log')).map((f) => readFileSync(join(userData, 'logs', f), 'utf8')).join('\n');
  const rendered = [...log.matchAll(/^.*Graph of .*(?:shown in|: (?:first|expand|collapse) in) .*$/gm)].map((m) => m[0].replace(/^\S+ \S+ /, ''));
  console.log(JSON.stringify({
    warmUp, model: name, boxes: shown.length, quickOpenToPictureMs: quickOpenMs, clickToPictureMs: pictureMs,
    expandMs: firstExpand, secondExpandMs: secondExpand, timedBy: 'the benchmark polling the view\'s DOM in its frames, from the click',
    extensionHostMiB: hostSampler.stop(), languageServerMiB: serverSampler?.stop() ?? null,
    heapsMiB: { afterFirstPicture: afterFirst, afterExpand }, log: rendered,
  }, null, 1));
} finally {
  await browser.close();
  stop();
  rmSync(tmp, { recursive: true, force: true });
}
