// The graph view (runs in the webview): lays the graph out with ELK, draws it, pans, zooms, searches,
// expands and collapses groups, and talks to the extension (graphPanel.ts): it gets the graph and the
// editor's cursor line, and asks to reveal a node's source line.
import ELK from 'elkjs/lib/elk.bundled.js';

import { Layout } from './layout';
import { defaultExpanded, ERROR_LEVELS, GraphData, GraphIndex } from './model';
import { Box, render } from './render';

/** Messages from the extension. */
type Incoming = { type: 'graph'; graph: GraphData; title: string } | { type: 'cursor'; path: string; line: number };

declare function acquireVsCodeApi(): { postMessage(message: unknown): void };

const vscode = acquireVsCodeApi();
const elk = new ELK();
const svg = document.querySelector<SVGSVGElement>('#graph')!;
const layer = document.querySelector<SVGGElement>('#viewport')!;
const search = document.querySelector<HTMLInputElement>('#search')!;
const status = document.querySelector<HTMLElement>('#status')!;
const details = document.querySelector<HTMLElement>('#details-rows')!;
const outcome = document.querySelector<HTMLElement>('#outcome')!;

let index: GraphIndex | undefined;
let layout: Layout | undefined;
let expanded = new Set<string>();
let boxes = new Map<string, Box>();
let highlighted: string[] = []; // nodes of the editor's cursor line
let matches: string[] = [];
let matchAt = -1;
let selected: string | undefined;
const view = { x: 0, y: 0, k: 1 };
let drawing: Promise<void> = Promise.resolve();

window.addEventListener('message', (event: MessageEvent<Incoming>) => {
  const message = event.data;
  if (message.type === 'graph') {
    index = new GraphIndex(message.graph);
    layout = new Layout(elk, index);
    expanded = defaultExpanded(message.graph);
    highlighted = [];
    matches = [];
    selected = undefined;
    closeDetails();
    document.title = message.title;
    const shown = message.graph.outcome;
    outcome.textContent = shown && shown.kind !== 'exported' ? shown.headline : ''; // "… is wrong: output 0 diverges …"
    outcome.className = shown?.severity ?? '';
    outcome.title = outcome.textContent;
    void redraw('first', () => fit());
  } else if (message.type === 'cursor') {
    void showLine(message.path, message.line);
  }
});

/** Lays out and draws what shows now (one at a time); tells the extension how long it took. */
function redraw(reason: string, after?: () => void): Promise<void> {
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
    status.textContent = `${index.graph.nodes.length} ops, ${boxes.size} boxes`;
    vscode.postMessage({ type: 'rendered', reason, boxes: boxes.size, containers: placed.laidOut, layoutMs: Math.round(laidOut - started), renderMs: Math.round(rendered - laidOut) });
  });
  return drawing;
}

/** Classes for the cursor line's nodes, the search matches (or the collapsed groups holding them), the selection. */
function decorate(): void {
  for (const element of layer.querySelectorAll('.highlighted, .match, .selected')) {
    element.classList.remove('highlighted', 'match', 'selected');
  }
  for (const id of highlighted) {
    boxes.get(id)?.element.classList.add('highlighted');
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
  const closed = [...index.groupsAround(highlighted)].filter((g) => !expanded.has(g));
  if (closed.length) {
    closed.forEach((g) => expanded.add(g));
    await redraw('expand for the cursor line');
  } else {
    decorate();
  }
  centre(highlighted);
  vscode.postMessage({ type: 'highlighted', path, line, nodes: highlighted.length });
}

function toggle(group: string): void {
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

document.querySelector('#details-close')!.addEventListener('click', closeDetails);
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
  const value = (v: { name: string; dtype?: string | null; shape?: unknown[] | null } | null) =>
    v ? `${v.name}: ${v.dtype ?? '?'}${v.shape ? `[${v.shape.map((d) => d ?? '?').join(', ')}]` : ''}` : '—';
  const rows: [string, string][] = [
    ['op', `${node.domain ? `${node.domain}::` : ''}${node.op}`],
    ['name', node.name],
    ['module', node.module || '(root)'],
    ['source', node.source ? `${node.source.path}:${node.source.line} (${node.source.function ?? ''})` : '—'],
    ...node.inputs.map((v, i): [string, string] => [`input ${i}`, value(v)]),
    ...node.outputs.map((v, i): [string, string] => [`output ${i}`, value(v)]),
    ...Object.entries(node.attributes),
    ...node.checks.map((c): [string, string] => [c.rule, `${c.ok === false ? 'MISMATCH' : 'ok'} max abs ${c.maxAbsError ?? '?'} (atol ${c.atol ?? '?'}, rtol ${c.rtol ?? '?'})`]),
  ];
  return rows.map(([key, text]) => {
    const row = document.createElement('div');
    const k = document.createElement('b');
    k.textContent = `${key} `;
    row.append(k, text);
    return row;
  });
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

document.querySelector('#legend-items')!.append(...ERROR_LEVELS.map(({ level, label }) => {
  const item = document.createElement('span');
  item.className = `swatch level-${level}`;
  item.textContent = label;
  return item;
}));
vscode.postMessage({ type: 'ready', pageMs: Math.round(performance.now()) }); // since the page started loading
