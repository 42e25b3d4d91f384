// The graph view's webview bundle in Chromium (playwright-core from .tools/): per graph JSON, the first
// (collapsed) render and expanding the largest collapsed group, timed in the page, and the page's JS heap after
// each (Chromium's Performance.getMetrics; ELK's worker has its own heap, not counted). Run by graph_view.py.
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
<script nonce="n0nce">window.messages = []; window.acquireVsCodeApi = () => ({ postMessage: (m) => window.messages.push({ ...m, at: performance.now() }) });</script>
<script nonce="n0nce" src="http://bench.local/graph.js"></script></body></html>`;

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/lib/chromium/chromium', args: ['--no-sandbox', '--disable-gpu'] });
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
  console.log(`${name}: ${runs[0].nodes} nodes; first render ${median('first')} ms (layout ${median('firstLayout')} ms, ${runs[0].firstBoxes} boxes); ` +
    `toggle ${runs[0].expanded}: ${median('expand')} ms (layout ${median('expandLayout')} ms, ${runs[0].expandBoxes} boxes); median of ${runs.length}; ` +
    `JS heap ${median('heapFirst')} MiB after the first render, ${median('heapExpand')} MiB after the expand; ` +
    `all first renders ${runs.map((r) => r.first).join(', ')} ms, expands ${runs.map((r) => r.expand).join(', ')} ms`);
}
const js = statSync(join(BUNDLE, 'graph.js')).size;
console.log(`bundle: graph.js ${(js / 1024).toFixed(0)} KiB, graph.css ${(statSync(join(BUNDLE, 'graph.css')).size / 1024).toFixed(1)} KiB`);

async function largestCollapsed(page) {
  const labels = await page.locator('g.box.collapsed text').allTextContents();
  const ops = labels.map((label) => Number(/· (\d+) ops$/.exec(label)?.[1] ?? 0));
  return ops.length ? page.locator('g.box.collapsed').nth(ops.indexOf(Math.max(...ops))) : null;
}

async function heapMiB(cdp) {
  await cdp.send('HeapProfiler.collectGarbage');
  const { metrics } = await cdp.send('Performance.getMetrics');
  return Math.round(metrics.find((m) => m.name === 'JSHeapUsedSize').value / 2 ** 20);
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
  // The message as the extension posts it: the JSON parsed in the page, then timed from the post.
  const first = await page.evaluate(async (json) => {
    const graph = JSON.parse(json);
    const posted = performance.now();
    window.postMessage({ type: 'graph', graph, title: 'bench' }, '*');
    while (!window.messages.some((m) => m.type === 'rendered')) {
      await new Promise((r) => setTimeout(r, 5));
    }
    const m = window.messages.find((m) => m.type === 'rendered');
    return { ms: Math.round(m.at - posted), layoutMs: m.layoutMs, boxes: m.boxes, nodes: graph.nodes.length };
  }, graph.json);
  const heapFirst = await heapMiB(cdp);
  // the collapsed group with the most ops (a layer of GPT-2), else the first open one (collapsing it)
  const group = await largestCollapsed(page) ?? page.locator('g.box.group').first();
  const expanded = await group.getAttribute('data-id');
  const before = await page.evaluate(() => window.messages.length);
  const clicked = await page.evaluate(() => performance.now());
  await group.dispatchEvent('click'); // the box may be out of view
  await page.waitForFunction((n) => window.messages.slice(n).some((m) => m.type === 'rendered'), before);
  const expand = await page.evaluate(([n, t]) => {
    const m = window.messages.slice(n).find((m) => m.type === 'rendered');
    return { ms: Math.round(m.at - t), layoutMs: m.layoutMs, boxes: m.boxes };
  }, [before, clicked]);
  const heapExpand = await heapMiB(cdp);
  if (errors.length) {
    throw new Error(`${graph.name}: errors in the page: ${errors.join('; ')}`);
  }
  if (graph.runs.length === 0) {
    await page.screenshot({ path: graph.file.replace(/\.json$/, '.png') }); // beside the JSON: after the toggle
  }
  await page.close();
  return { heapFirst, heapExpand, nodes: first.nodes, first: first.ms, firstLayout: first.layoutMs, firstBoxes: first.boxes, expanded, expand: expand.ms, expandLayout: expand.layoutMs, expandBoxes: expand.boxes };
}
