// The graph view's webview bundle in Chromium (playwright-core from .tools/): per graph JSON, timed in the page, the
// first (collapsed) render; toggling its largest collapsed group (else its first open one) the moment it is drawn
// (nothing laid out ahead: ELK lays out the group's contents) and back; then, the view idle (it lays out the collapsed
// groups in view ahead), toggling another group as large (another layer). Each `rendered` message says how many
// containers ELK laid out and how many were stretched. The page's JS heap after the first render and the expand
// (Chromium's Performance.getMetrics, after a GC), and the ELK worker's own heap (its isolate, through CDP
// Runtime.getHeapUsage on the worker's target, no GC: the larger of two samples). Run by graph_view.py.
//   node benchmarks/graph_view.mjs [--repeats N] graph.json...
import { readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BUNDLE = join(ROOT, 'vscode-extension/dist/webview');
const { chromium } = createRequire(import.meta.url)(join(ROOT, '.tools/e2e/node_modules/playwright-core'));

const args = process.argv.slice(2);
const repeats = args[0] === '--repeats' ? Number(args[1]) : 3;
const graphs = (args[0] === '--repeats' ? args.slice(2) : args).map((file) => ({ name: basename(file, '.json'), file, json: readFileSync(file, 'utf8'), runs: [] }));

// The page graphPanel.ts makes, with the same Content-Security-Policy; acquireVsCodeApi records the view's messages.
const PAGE = `<!DOCTYPE html><html><head>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'nonce-n0nce'; worker-src blob:; style-src http://bench.local; img-src 'none'; connect-src 'none'; font-src 'none'">
<link rel="stylesheet" href="http://bench.local/graph.css"></head><body>
<div id="toolbar"><input id="search" type="search"><label><input id="plumbing" type="checkbox">constants &amp; shapes</label>
<button id="side">Show before</button><span id="status"></span><span id="outcome"></span>
<span id="legend"><button id="legend-toggle">Legend</button><span id="legend-items"></span></span></div>
<svg id="graph"><defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L8,4L0,8z"/></marker></defs><g id="viewport"></g></svg>
<div id="details"><button id="details-close">×</button><div id="details-rows"></div></div>
<script nonce="n0nce">window.messages = []; window.acquireVsCodeApi = () => ({ postMessage: (m) => { window.messages.push({ ...m, at: performance.now() }); window.onMessage?.(m); } });</script>
<script nonce="n0nce" src="http://bench.local/graph.js"></script></body></html>`;

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/lib/chromium/chromium', args: ['--no-sandbox', '--disable-gpu'] });
const browserCdp = await browser.newBrowserCDPSession();
try {
  for (let r = 0; r < repeats; r++) {
    for (const graph of graphs) { // the models alternate, page by page
      graph.runs.push(await run(graph));
    }
  }
} finally {
  await browser.close();
}
for (const { name, runs } of graphs) {
  const median = (key) => runs.map((r) => r[key]).sort((a, b) => a - b)[Math.floor(runs.length / 2)];
  const all = (key) => runs.map((r) => r[key]).join(', ');
  const [r] = runs;
  console.log(`${name}: ${r.nodes} nodes; first render ${median('first')} ms (layout ${median('firstLayout')} ms, ${r.firstBoxes} boxes); ` +
    `toggle ${r.toggled}${r.toggledOps === null ? '' : ` (${r.toggledOps} ops)`} at once: ${median('cold')} ms (layout ${median('coldLayout')} ms, ELK ${r.coldElk} containers, ${r.coldStretched} stretched); ` +
    `toggle ${r.expanded} once idle: ${median('expand')} ms (layout ${median('expandLayout')} ms, ELK ${r.expandElk} containers, ${r.expandStretched} stretched, ${r.expandBoxes} boxes); median of ${runs.length}; ` +
    `page JS heap ${median('heapFirst')} MiB after the first render, ${median('heapExpand')} MiB after the expand; ELK worker JS heap ${median('workerUsed')} MiB used of ${median('workerTotal')} MiB (largest sample); ` +
    `all first renders ${all('first')} ms, toggles at once ${all('cold')} ms, once idle ${all('expand')} ms`);
}
const js = statSync(join(BUNDLE, 'graph.js')).size;
console.log(`bundle: graph.js ${(js / 1024).toFixed(0)} KiB, graph.css ${(statSync(join(BUNDLE, 'graph.css')).size / 1024).toFixed(1)} KiB`);

async function heapMiB(cdp) {
  await cdp.send('HeapProfiler.collectGarbage');
  const { metrics } = await cdp.send('Performance.getMetrics');
  return Math.round(metrics.find((m) => m.name === 'JSHeapUsedSize').value / 2 ** 20);
}

/** The ELK worker's V8 heap, used and allocated (CDP Runtime.getHeapUsage in the worker's own target; no GC forced).
 * The worker has its own isolate: the page's heap figure does not include it. */
async function workerHeap() {
  const { targetInfos } = await browserCdp.send('Target.getTargets');
  const worker = targetInfos.find((t) => t.type === 'worker');
  const { sessionId } = await browserCdp.send('Target.attachToTarget', { targetId: worker.targetId, flatten: false });
  const reply = new Promise((resolve) => {
    const listener = (event) => {
      const message = JSON.parse(event.message);
      if (event.sessionId === sessionId && message.id === 1) {
        browserCdp.off('Target.receivedMessageFromTarget', listener);
        resolve(message.result);
      }
    };
    browserCdp.on('Target.receivedMessageFromTarget', listener);
  });
  await browserCdp.send('Target.sendMessageToTarget', { sessionId, message: JSON.stringify({ id: 1, method: 'Runtime.getHeapUsage' }) });
  const { usedSize, totalSize } = await reply;
  await browserCdp.send('Target.detachFromTarget', { sessionId });
  return { used: Math.round(usedSize / 2 ** 20), total: Math.round(totalSize / 2 ** 20) };
}

async function run(graph) {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  await page.route('http://bench.local/**', (route) => {
    const file = new URL(route.request().url()).pathname.slice(1);
    if (file === '') {
      return route.fulfill({ contentType: 'text/html', body: PAGE });
    }
    return route.fulfill({ contentType: file.endsWith('.css') ? 'text/css' : 'text/javascript', body: readFileSync(join(BUNDLE, file)) });
  });
  await page.goto('http://bench.local/');
  await page.waitForFunction(() => window.messages.some((m) => m.type === 'ready'));
  // The message as the extension posts it: the JSON parsed in the page, then timed from the post. The moment the
  // first picture is drawn, a click toggles its largest collapsed group (else its first open one): nothing was laid
  // out ahead for it.
  const { first, cold, toggled, toggledOps } = await page.evaluate(async (json) => {
    const graph = JSON.parse(json);
    const clicked = new Promise((resolve) => {
      window.onMessage = (m) => {
        if (m.type !== 'rendered') {
          return;
        }
        window.onMessage = undefined;
        const collapsed = [...document.querySelectorAll('g.box.collapsed')];
        const ops = collapsed.map((g) => Number(/· (\d+) ops$/.exec(g.querySelector('text').textContent)?.[1] ?? 0));
        const box = collapsed[ops.indexOf(Math.max(...ops))] ?? document.querySelector('g.box.group');
        resolve({ n: window.messages.length, at: performance.now(), id: box.dataset.id, ops: collapsed.length ? Math.max(...ops) : null });
        box.dispatchEvent(new MouseEvent('click', { bubbles: true }));
      };
    });
    const posted = performance.now();
    window.postMessage({ type: 'graph', graph, title: 'bench' }, '*');
    const click = await clicked;
    const m = window.messages.find((m) => m.type === 'rendered');
    const first = { ms: Math.round(m.at - posted), layoutMs: m.layoutMs, boxes: m.boxes, nodes: graph.nodes.length };
    while (!window.messages.slice(click.n).some((m) => m.type === 'rendered')) {
      await new Promise((r) => setTimeout(r, 5));
    }
    const c = window.messages.slice(click.n).find((m) => m.type === 'rendered');
    const cold = { ms: Math.round(c.at - click.at), layoutMs: c.layoutMs, elk: c.containers, stretched: c.stretched };
    return { first, cold, toggled: click.id, toggledOps: click.ops };
  }, graph.json);
  // Back as first drawn (the layout kept), then idle: the collapsed groups in view are laid out ahead.
  const back = await page.evaluate(() => window.messages.length);
  await page.locator(`g.box[data-id="${toggled}"]`).dispatchEvent('click');
  await page.waitForFunction((n) => window.messages.slice(n).some((m) => m.type === 'rendered'), back);
  await page.waitForTimeout(3000);
  const heapFirst = await heapMiB(cdp);
  const workerFirst = await workerHeap();
  // another group as large (another layer), else the same one
  const ops = toggledOps === null ? null : `· ${toggledOps} ops`;
  const same = ops ? await page.locator('g.box.collapsed').evaluateAll((gs, o) => gs.filter((g) => g.querySelector('text').textContent.endsWith(o)).map((g) => g.dataset.id), ops) : [];
  const expanded = same.find((id) => id !== toggled) ?? toggled;
  const before = await page.evaluate(() => window.messages.length);
  const clicked = await page.evaluate(() => performance.now());
  await page.locator(`g.box[data-id="${expanded}"]`).dispatchEvent('click'); // the box may be out of view
  await page.waitForFunction((n) => window.messages.slice(n).some((m) => m.type === 'rendered'), before);
  const expand = await page.evaluate(([n, t]) => {
    const m = window.messages.slice(n).find((m) => m.type === 'rendered');
    return { ms: Math.round(m.at - t), layoutMs: m.layoutMs, elk: m.containers, stretched: m.stretched, boxes: m.boxes };
  }, [before, clicked]);
  const workerExpand = await workerHeap();
  const heapExpand = await heapMiB(cdp);
  if (errors.length) {
    throw new Error(`${graph.name}: errors in the page: ${errors.join('; ')}`);
  }
  if (graph.runs.length === 0) {
    await page.screenshot({ path: graph.file.replace(/\.json$/, '.png') }); // beside the JSON: after the toggle
  }
  await page.close();
  return {
    heapFirst, heapExpand, workerUsed: Math.max(workerFirst.used, workerExpand.used), workerTotal: Math.max(workerFirst.total, workerExpand.total),
    nodes: first.nodes, first: first.ms, firstLayout: first.layoutMs, firstBoxes: first.boxes,
    toggled, toggledOps, cold: cold.ms, coldLayout: cold.layoutMs, coldElk: cold.elk, coldStretched: cold.stretched,
    expanded, expand: expand.ms, expandLayout: expand.layoutMs, expandElk: expand.elk, expandStretched: expand.stretched, expandBoxes: expand.boxes,
  };
}
