// The graph view (runs in the webview): lays the graph out with ELK (in a web worker: the page stays responsive),
// draws it, pans, zooms, searches, expands and collapses groups, folds constants and shape plumbing away, shows two
// compared exports, and talks to the extension (graphPanel.ts): it gets the graph (or a comparison) and the editor's
// cursor line, and asks to reveal a source line or to read a tensor's first values.
import ELK from 'elkjs/lib/elk-api.js';
import elkWorker from 'elkjs/lib/elk-worker.min.js';

import { Layout } from './layout';
import { Comparison, defaultExpanded, DiffStatus, ERROR_LEVELS, GraphData, GraphIndex, Initializer, lineKey } from './model';
import { Box, render } from './render';

/** A tensor's size and first values (the server's TENSOR command), or why it could not be read. */
interface Tensor {
  name: string;
  bytes: number | null;
  values: string[];
  read: number;
  external: { location: string } | null;
}

/** Messages from the extension. */
type Incoming =
  | { type: 'graph'; graph: GraphData; title: string }
  | { type: 'compare'; comparison: Comparison; title: string }
  | { type: 'cursor'; path: string; line: number }
  | { type: 'tensor'; name: string; tensor?: Tensor; error?: string };

declare function acquireVsCodeApi(): { postMessage(message: unknown): void };

/** Compared nodes up to this many open their groups on the first drawing. */
const MAX_OPENED_FOR_CHANGES = 40;

const vscode = acquireVsCodeApi();
// The worker's script is in the bundle (the page may load nothing else): a blob: URL, allowed by `worker-src blob:`.
const workerUrl = URL.createObjectURL(new Blob([elkWorker], { type: 'text/javascript' }));
const elk = new ELK({ workerFactory: () => new Worker(workerUrl) });
const svg = document.querySelector<SVGSVGElement>('#graph')!;
const layer = document.querySelector<SVGGElement>('#viewport')!;
const search = document.querySelector<HTMLInputElement>('#search')!;
const status = document.querySelector<HTMLElement>('#status')!;
const details = document.querySelector<HTMLElement>('#details-rows')!;
const outcome = document.querySelector<HTMLElement>('#outcome')!;
const plumbing = document.querySelector<HTMLInputElement>('#plumbing')!;
const sideButton = document.querySelector<HTMLButtonElement>('#side')!;

let graph: GraphData | undefined; // what is drawn (a comparison's side)
let comparison: Comparison | undefined;
let side: 'before' | 'after' = 'after';
let index: GraphIndex | undefined;
let layout: Layout | undefined;
let expanded = new Set<string>();
let boxes = new Map<string, Box>();
let highlighted: string[] = []; // nodes of the editor's cursor line
let matches: string[] = [];
let matchAt = -1;
let selected: string | undefined;
let revealed: string | undefined; // the source line the view just showed in the editor: its cursor comes back
const view = { x: 0, y: 0, k: 1 };
let drawing: Promise<void> = Promise.resolve();
let draws = 0; // redraws asked for: a prefetch stops when the view is to be drawn again
/** Groups laid out ahead of clicks after a drawing, at most (groups alike share one layout, and count once). */
const MAX_PREFETCHED = 8;

window.addEventListener('message', (event: MessageEvent<Incoming>) => {
  const message = event.data;
  if (message.type === 'graph' || message.type === 'compare') {
    comparison = message.type === 'compare' ? message.comparison : undefined;
    side = 'after';
    document.title = message.title;
    show(comparison ? comparison.after : (message as { graph: GraphData }).graph, 'first');
  } else if (message.type === 'cursor') {
    void showLine(message.path, message.line);
  } else if (message.type === 'tensor') {
    showTensor(message.name, message.tensor, message.error);
  }
});

/** Draws `shown` from its default state: collapsed by module (and, comparing, the groups around what changed). */
function show(shown: GraphData, reason: string): void {
  graph = shown;
  index = new GraphIndex(shown, { plumbing: plumbing.checked });
  layout = new Layout(elk, index);
  expanded = defaultExpanded(index);
  const changed = [...index.nodes.values()].filter((n) => n.diff && n.diff !== 'same').map((n) => n.id);
  if (changed.length <= MAX_OPENED_FOR_CHANGES) {
    index.groupsAround(changed).forEach((g) => expanded.add(g));
  }
  highlighted = [];
  matches = [];
  closeDetails();
  const headline = shown.outcome;
  const failed = headline && headline.kind !== 'exported' ? headline.headline : '';
  outcome.textContent = comparison ? compareHeadline(comparison) : failed;
  outcome.className = comparison ? '' : (headline?.severity ?? ''); // "… is wrong: output 0 diverges …"
  outcome.title = outcome.textContent;
  document.body.classList.toggle('comparing', comparison !== undefined);
  sideButton.textContent = side === 'after' ? 'Show before' : 'Show after';
  if (comparison) {
    showSummary(comparison);
  }
  void redraw(reason, () => fit());
}

function compareHeadline(c: Comparison): string {
  const name = (g: GraphData) => g.path.split(/[\\/]/).pop();
  const shown = name(side === 'after' ? c.after : c.before);
  return `${shown} (${side}): ${c.added} added, ${c.removed} removed, ${c.changed} changed ops`;
}

plumbing.addEventListener('change', () => {
  if (!graph) {
    return;
  }
  const open = expanded;
  index = new GraphIndex(graph, { plumbing: plumbing.checked });
  layout = new Layout(elk, index);
  expanded = new Set([...open].filter((g) => index!.groups.has(g)));
  void redraw(plumbing.checked ? 'show plumbing' : 'fold plumbing');
});
sideButton.addEventListener('click', () => {
  if (comparison) {
    side = side === 'after' ? 'before' : 'after';
    show(side === 'after' ? comparison.after : comparison.before, `show ${side}`);
  }
});

/** Lays out and draws what shows now (one at a time); tells the extension how long it took. */
function redraw(reason: string, after?: () => void): Promise<void> {
  const draw = ++draws;
  drawing = drawing.then(async () => {
    if (!index || !layout) {
      return;
    }
    const started = performance.now();
    const placed = await layout.place(expanded);
    const laidOut = performance.now();
    boxes = render(layer, placed, index, expanded);
    decorate();
    after?.();
    const rendered = performance.now();
    const folded = index.hidden ? ` (${index.hidden} constants and shape ops folded)` : '';
    status.textContent = `${index.nodes.size} ops${folded}, ${boxes.size} boxes`;
    vscode.postMessage({
      type: 'rendered', reason, boxes: boxes.size, containers: placed.laidOut, stretched: placed.stretched,
      layoutMs: Math.round(laidOut - started), renderMs: Math.round(rendered - laidOut),
    });
    void prefetch(draw);
  });
  return drawing;
}

/** While nothing else is to be drawn, lays out the contents of the collapsed groups in view, the largest first, so
 * that expanding one needs no layout of its own (ELK runs in the worker; one group at a time, between tasks). */
async function prefetch(draw: number): Promise<void> {
  const shown = index!;
  const collapsed = [...boxes.keys()].filter((id) => shown.groups.has(id) && !expanded.has(id));
  collapsed.sort((a, b) => shown.nodeCount(b) - shown.nodeCount(a));
  let runs = 0;
  for (const group of collapsed) {
    await new Promise((resolve) => setTimeout(resolve, 0));
    if (draw !== draws || runs >= MAX_PREFETCHED) {
      return;
    }
    runs += (await layout!.prefetch(group, expanded)) ? 1 : 0;
  }
}

/** Classes for the cursor line's nodes, the search matches (or the collapsed groups holding them), the selection. */
function decorate(): void {
  for (const element of layer.querySelectorAll('.highlighted, .match, .selected')) {
    element.classList.remove('highlighted', 'match', 'selected');
  }
  for (const id of highlighted) {
    boxes.get(index!.nodes.has(id) ? id : index!.visibleBox(id, expanded))?.element.classList.add('highlighted');
  }
  for (const id of matches) {
    boxes.get(index!.visibleBox(id, expanded))?.element.classList.add('match');
  }
  if (selected) {
    boxes.get(selected)?.element.classList.add('selected');
    const group = index!.nodes.get(selected)?.group;
    if (group) {
      boxes.get(index!.visibleBox(group, expanded))?.element.classList.add('selected');
    }
  }
}

/** Highlights the nodes of `path`:`line`, opening the groups they are in, and centres them. */
async function showLine(path: string, line: number): Promise<void> {
  await drawing;
  if (!index) {
    return;
  }
  highlighted = index.nodesAt(path, line);
  // The line a click showed comes back as the cursor's: its ops light up where they show, no group opens (a
  // line of a layer's code has ops in every layer).
  const echo = revealed === lineKey(path, line);
  if (!echo) {
    revealed = undefined; // the editor left the line the view showed (it may report that line more than once)
  }
  const closed = echo ? [] : [...index.groupsAround(highlighted)].filter((g) => !expanded.has(g));
  if (!highlighted.length) {
    highlighted = index.groupsAt(path, line); // a line without ops of its own that calls modules: their boxes
  }
  if (closed.length) {
    closed.forEach((g) => expanded.add(g));
    await redraw('expand for the cursor line');
  } else {
    decorate();
  }
  if (!echo) {
    centre(highlighted);
  }
  vscode.postMessage({ type: 'highlighted', path, line, nodes: highlighted.length });
}

/** Opens or closes `group`; an editor showing its file goes to the line of its call (the view keeps the focus). */
function toggle(group: string): void {
  const source = index!.groups.get(group)?.source;
  if (source) {
    revealed = lineKey(source.path, source.line);
    vscode.postMessage({ type: 'reveal', path: source.path, line: source.line, preserveFocus: true, ifShown: true });
  }
  if (expanded.has(group)) {
    expanded.delete(group);
    for (const inner of index!.graph.groups.filter((g) => index!.ancestors(g.id).includes(group))) {
      expanded.delete(inner.id);
    }
  } else {
    expanded.add(group);
  }
  void redraw(expanded.has(group) ? 'expand' : 'collapse');
}

function select(id: string): void {
  const node = index!.nodes.get(id)!;
  selected = id;
  decorate();
  details.replaceChildren(...nodeDetails(id));
  document.body.classList.add('with-details');
  if (node.source) {
    revealed = lineKey(node.source.path, node.source.line);
    vscode.postMessage({ type: 'reveal', path: node.source.path, line: node.source.line });
  }
}

function closeDetails(): void {
  document.body.classList.remove('with-details');
  details.replaceChildren();
  selected = undefined;
  if (index) {
    decorate();
  }
}

/** A comparison's ops per type before and after, changed types first, in the details column. */
function showSummary(c: Comparison): void {
  const table = document.createElement('table');
  table.id = 'summary';
  const row = (cells: string[], tag: 'td' | 'th' = 'td') => {
    const tr = document.createElement('tr');
    tr.append(...cells.map((text) => Object.assign(document.createElement(tag), { textContent: text })));
    return tr;
  };
  table.append(row(['op', 'before', 'after'], 'th'), ...c.summary.map((r) => {
    const tr = row([r.op, String(r.before), String(r.after)]);
    tr.className = r.before === r.after ? '' : 'differs';
    return tr;
  }));
  const title = document.createElement('b');
  const ops = `${c.before.nodes.length} → ${c.after.nodes.length} ops`;
  title.textContent = `${c.added} added, ${c.removed} removed, ${c.changed} changed (${ops})`;
  details.replaceChildren(title, table);
  document.body.classList.add('with-details');
}

document.querySelector('#details-close')!.addEventListener('click', closeDetails);
// The view narrows when a click opens the source beside it (a .onnx file's editor) or the details open: the
// selected op stays in view.
let width = 0;
new ResizeObserver(() => {
  const before = width;
  width = svg.clientWidth;
  if (selected && boxes.has(selected)) {
    centre([selected]);
  } else if (before) {
    view.x += (width - before) / 2; // what was in the middle stays there
    applyView();
  }
}).observe(svg);
window.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && document.activeElement !== search) {
    closeDetails();
  }
});
document.querySelector('#legend-toggle')!.addEventListener('click', () => {
  document.querySelector('#legend')!.classList.toggle('closed');
});

function nodeDetails(id: string): HTMLElement[] {
  const node = index!.nodes.get(id)!;
  const initializers = new Map<string, Initializer>(graph!.initializers.map((i) => [i.name, i]));
  const value = (v: { name: string; dtype?: string | null; shape?: unknown[] | null } | null) =>
    v ? `${v.name}: ${v.dtype ?? '?'}${v.shape ? `[${v.shape.map((d) => d ?? '?').join(', ')}]` : ''}` : '—';
  const rows: [string, string | HTMLElement][] = [
    ['op', `${node.domain ? `${node.domain}::` : ''}${node.op}`],
    ['name', node.name],
    ['module', node.module || '(root)'],
    ['source', node.source ? `${node.source.path}:${node.source.line} (${node.source.function ?? ''})` : '—'],
    ...node.inputs.map((v, i): [string, string | HTMLElement] => {
      const init = v ? initializers.get(v.name) : undefined;
      return [`input ${i}`, init ? weight(init) : value(v)];
    }),
    ...node.outputs.map((v, i): [string, string] => [`output ${i}`, value(v)]),
    ...Object.entries(node.attributes),
    ...node.checks.map((c): [string, string] => [c.rule, `${c.ok === false ? 'MISMATCH' : 'ok'} max abs ${c.maxAbsError ?? '?'} (atol ${c.atol ?? '?'}, rtol ${c.rtol ?? '?'})`]),
    ...(node.marks ?? []).map((m): [string, string] => [m.rule, m.message]),
    ...(node.diff ? [['compared', node.diff] as [string, string]] : []),
  ];
  return rows.map(([key, text]) => {
    const row = document.createElement('div');
    row.className = 'row';
    const k = document.createElement('b');
    k.textContent = `${key} `;
    row.append(k, text);
    return row;
  });
}

/** An initializer input: its type and size (nothing read yet), and a button that reads its first values. */
function weight(init: Initializer): HTMLElement {
  const span = document.createElement('span');
  span.className = 'weight';
  span.dataset.name = init.name;
  const button = document.createElement('button');
  button.textContent = 'values';
  button.title = 'Read its first values (only those bytes, from the model or its external data file)';
  button.addEventListener('click', () => {
    button.disabled = true;
    vscode.postMessage({ type: 'tensor', name: init.name });
  });
  const shape = init.shape ? `[${init.shape.join(', ')}]` : '';
  const where = init.external ? ' (external data)' : '';
  span.append(`${init.name}: ${init.dtype ?? '?'}${shape}, ${size(init.bytes)}${where} `, button);
  return span;
}

function showTensor(name: string, tensor: Tensor | undefined, error: string | undefined): void {
  for (const span of details.querySelectorAll<HTMLElement>('.weight')) {
    if (span.dataset.name === name) {
      span.querySelector('.values')?.remove();
      const values = document.createElement('div');
      values.className = 'values';
      const first = tensor ? `${tensor.values.join(', ')}${tensor.values.length ? ' …' : ''}` : '';
      const from = tensor?.external ? `${size(tensor.read)} read from ${tensor.external.location}` : 'in the model';
      values.textContent = tensor ? `${first} (${from})` : `cannot read: ${error}`;
      span.append(values);
    }
  }
}

function size(bytes: number | null): string {
  if (bytes === null) {
    return '? bytes';
  }
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  const at = Math.min(units.length - 1, Math.floor(Math.log(Math.max(bytes, 1)) / Math.log(1024)));
  return at === 0 ? `${bytes} bytes` : `${(bytes / 1024 ** at).toFixed(1)} ${units[at]}`;
}

// ----- pointer: click (select, toggle), drag (pan), wheel (zoom) -----

let drag: { x: number; y: number; moved: boolean } | undefined;
let dragged = false; // the click ending a drag is not a click on a box
svg.addEventListener('pointerdown', (e) => {
  drag = { x: e.clientX, y: e.clientY, moved: false };
  dragged = false;
});
window.addEventListener('pointermove', (e) => {
  if (!drag) {
    return;
  }
  const dx = e.clientX - drag.x;
  const dy = e.clientY - drag.y;
  if (drag.moved || Math.abs(dx) + Math.abs(dy) > 3) {
    drag = { x: e.clientX, y: e.clientY, moved: true };
    view.x += dx;
    view.y += dy;
    applyView();
  }
});
window.addEventListener('pointerup', () => {
  dragged = drag?.moved ?? false;
  drag = undefined;
});
svg.addEventListener('click', (e) => {
  const id = (e.target as Element).closest<SVGGElement>('g.box')?.dataset.id;
  if (dragged || !id || !index) {
    return;
  }
  if (index.groups.has(id)) {
    toggle(id);
  } else if (index.nodes.has(id)) {
    select(id);
  }
});
svg.addEventListener('wheel', (e) => {
  e.preventDefault();
  const factor = Math.exp(-e.deltaY * 0.0015);
  const rect = svg.getBoundingClientRect();
  const px = e.clientX - rect.left;
  const py = e.clientY - rect.top;
  view.x = px - (px - view.x) * factor;
  view.y = py - (py - view.y) * factor;
  view.k *= factor;
  applyView();
}, { passive: false });

function applyView(): void {
  layer.setAttribute('transform', `translate(${view.x},${view.y}) scale(${view.k})`);
}

/** The whole graph in view, its width and its height (no larger than life, no smaller than readable: a graph too
 * large for that shows its top), centred. */
function fit(): void {
  const width = svg.clientWidth || 800;
  const height = svg.clientHeight || 600;
  const graphWidth = Math.max(...[...boxes.values()].map((b) => b.x + b.width), 1);
  const graphHeight = Math.max(...[...boxes.values()].map((b) => b.y + b.height), 1);
  view.k = Math.max(0.5, Math.min(1, width / (graphWidth + 24), height / (graphHeight + 16)));
  view.x = (width - graphWidth * view.k) / 2;
  view.y = Math.max(8, (height - graphHeight * view.k) / 2);
  applyView();
}

/** Centres the boxes of `ids` (nodes, or the collapsed groups that show them). */
function centre(ids: string[]): void {
  const shown = ids.map((id) => boxes.get(index!.visibleBox(id, expanded))).filter((b): b is Box => b !== undefined);
  if (!shown.length) {
    return;
  }
  const left = Math.min(...shown.map((b) => b.x));
  const top = Math.min(...shown.map((b) => b.y));
  const right = Math.max(...shown.map((b) => b.x + b.width));
  const bottom = Math.max(...shown.map((b) => b.y + b.height));
  view.k = Math.max(view.k, 0.6);
  view.x = svg.clientWidth / 2 - ((left + right) / 2) * view.k;
  view.y = svg.clientHeight / 2 - ((top + bottom) / 2) * view.k;
  applyView();
}

// ----- search: every match marked; Enter steps through them, opening their groups -----

search.addEventListener('input', () => {
  matches = index?.search(search.value) ?? [];
  matchAt = -1;
  status.textContent = search.value ? `${matches.length} matches` : '';
  decorate();
});
search.addEventListener('keydown', async (e) => {
  if (e.key !== 'Enter' || !matches.length || !index) {
    return;
  }
  matchAt = (matchAt + 1) % matches.length;
  const id = matches[matchAt];
  const closed = [...index.groupsAround([id])].filter((g) => !expanded.has(g));
  if (closed.length) {
    closed.forEach((g) => expanded.add(g));
    await redraw('expand for a search match');
  }
  centre([id]);
  status.textContent = `match ${matchAt + 1} of ${matches.length}`;
});

const DIFF_LEGEND: { status: DiffStatus | 'inside'; label: string }[] = [
  { status: 'added', label: 'added' },
  { status: 'removed', label: 'removed' },
  { status: 'changed', label: 'changed' },
  { status: 'inside', label: 'holds changes' },
];
document.querySelector('#legend-items')!.append(
  ...ERROR_LEVELS.map(({ level, label }) => swatch(`level-${level}`, label)),
  swatch('marked', 'specialized dim (FXE0020)'),
  ...DIFF_LEGEND.map(({ status, label }) => swatch(`diff-${status} compare-only`, label)),
);

function swatch(classes: string, label: string): HTMLElement {
  const item = document.createElement('span');
  item.className = `swatch ${classes}`;
  item.textContent = label;
  return item;
}
vscode.postMessage({ type: 'ready', pageMs: Math.round(performance.now()) }); // since the page started loading
