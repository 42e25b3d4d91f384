// The graph command's JSON (server/graph.py) and what the view derives from it: which boxes are
// visible for a collapse state, the ELK input for them, the nodes of a source line, error levels.
// No DOM: unit-testable in node.
import type { ElkExtendedEdge, ElkNode } from 'elkjs/lib/elk-api';

export interface Value {
  name: string;
  dtype?: string | null;
  shape?: (string | number | null)[] | null;
}

export interface Frame {
  path: string;
  line: number; // 1-based
  function?: string;
}

export interface Check {
  rule: string; // FXE0013 (op-level debug) or FXE0021 (verification)
  ok?: boolean;
  maxAbsError?: number;
  maxRelError?: number;
  atol?: number;
  rtol?: number;
  skipped?: boolean;
}

/** A located result at the node's source line (server/graph.py `line_marks`): FXE0020, a dimension specialized. */
export interface Mark {
  rule: string;
  level: string;
  message: string;
}

/** A node's status when two exports are compared (server/graph_diff.py). */
export type DiffStatus = 'added' | 'removed' | 'changed' | 'same';

export interface GraphNode {
  id: string;
  op: string;
  domain: string;
  name: string;
  group: string | null;
  module: string;
  inputs: (Value | null)[];
  outputs: Value[];
  attributes: Record<string, string>;
  source: Frame | null; // (the graph command's `stack` is not posted to the view)
  checks: Check[];
  marks?: Mark[];
  plumbing?: boolean; // constants, initializers, shapes and what only they compute: folded away by default
  diff?: DiffStatus;
}

export interface Group {
  id: string;
  parent: string | null;
  function: string;
  module: string;
  class?: string;
  source: Frame | null;
}

export interface Edge {
  from: string;
  to: string;
  value: string;
}

export interface GraphData {
  path: string;
  opset: number | null;
  producer: string;
  inputs: Value[];
  outputs: Value[];
  initializers: Initializer[];
  groups: Group[];
  nodes: GraphNode[];
  edges: Edge[];
  outcome: { kind: string; headline: string; severity: 'error' | 'warning' | 'info' } | null; // protocol.ts `Outcome`
}

export interface Initializer extends Value {
  bytes: number | null; // from its type: nothing read
  external: boolean;
}

/** Two exports compared (the compare command's answer): both graphs with their nodes' `diff`, ops per type. */
export interface Comparison {
  before: GraphData;
  after: GraphData;
  added: number;
  removed: number;
  changed: number;
  summary: { op: string; before: number; after: number }[];
}

export interface IndexOptions {
  plumbing: boolean; // show constants and shape plumbing
}

/** How bad a node's checks are: none run, all within tolerance, or the worst error in multiples of its tolerance. */
export type ErrorLevel = 'unchecked' | 'ok' | 'over' | 'over10' | 'over1000';

export const ERROR_LEVELS: { level: ErrorLevel; label: string }[] = [
  { level: 'ok', label: 'checked, within tolerance' },
  { level: 'over', label: 'error ≤ 10× tolerance' },
  { level: 'over10', label: 'error ≤ 1000× tolerance' },
  { level: 'over1000', label: 'error > 1000× tolerance' },
];

export const NODE_HEIGHT = 28;
export const GROUP_HEADER = 22;
/** A box feeding more of its container's boxes (a mask or a shape every layer uses) is left out of the layout's
 * edges: ELK would route each through every layer in between (in a 24-layer GPT-2's group, 1 s instead of 0.2 s).
 * Those edges are drawn as curves. */
export const MAX_LAID_OUT_FAN_OUT = 8;
const CHAR_WIDTH = 7.2; // 12px monospace
/** More top-level groups than this are a stack of layers: they show collapsed. */
export const MAX_OPEN_TOP_LEVEL = 8;

/** What a collapsed group holds, for its colours: the worst error level, marks, compared nodes. */
export interface Contents {
  level: ErrorLevel;
  marked: boolean;
  diff: boolean; // added or changed nodes inside
}

const LEVEL_ORDER: ErrorLevel[] = ['unchecked', 'ok', 'over', 'over10', 'over1000'];

/** Lookups over one graph as shown (plumbing folded away unless `options.plumbing`; groups left empty by that
 * too): groups by id and nesting, nodes by id and by source line, the edges between shown nodes. */
export class GraphIndex {
  readonly nodes = new Map<string, GraphNode>();
  readonly groups = new Map<string, Group>();
  readonly childGroups = new Map<string | null, Group[]>();
  readonly childNodes = new Map<string | null, GraphNode[]>();
  readonly edges: Edge[];
  readonly hidden: number; // plumbing nodes folded away
  private readonly lines = new Map<string, string[]>();
  private readonly groupLines = new Map<string, string[]>();
  private readonly nodeCounts = new Map<string, number>();
  private readonly contents = new Map<string, Contents>();

  constructor(readonly graph: GraphData, readonly options: IndexOptions = { plumbing: true }) {
    const shown = graph.nodes.filter((n) => options.plumbing || !n.plumbing);
    this.hidden = graph.nodes.length - shown.length;
    const parents = new Map(graph.groups.map((g) => [g.id, g.parent]));
    const around = (group: string | null) => {
      const chain: string[] = [];
      for (let g = group; g !== null && g !== undefined; g = parents.get(g) ?? null) {
        chain.push(g);
      }
      return chain;
    };
    for (const node of shown) {
      for (const group of around(node.group)) {
        this.nodeCounts.set(group, (this.nodeCounts.get(group) ?? 0) + 1);
        const inside = this.contents.get(group) ?? { level: 'unchecked', marked: false, diff: false };
        const level = errorLevel(node.checks);
        this.contents.set(group, {
          level: LEVEL_ORDER.indexOf(level) > LEVEL_ORDER.indexOf(inside.level) ? level : inside.level,
          marked: inside.marked || Boolean(node.marks?.length),
          diff: inside.diff || node.diff === 'added' || node.diff === 'changed' || node.diff === 'removed',
        });
      }
    }
    for (const group of graph.groups.filter((g) => this.nodeCounts.has(g.id))) {
      this.groups.set(group.id, group);
      push(this.childGroups, group.parent, group);
      if (group.source) {
        push(this.groupLines, lineKey(group.source.path, group.source.line), group.id);
      }
    }
    for (const node of shown) {
      this.nodes.set(node.id, node);
      push(this.childNodes, node.group, node);
      if (node.source) {
        push(this.lines, lineKey(node.source.path, node.source.line), node.id);
      }
    }
    const known = (id: string) => this.nodes.has(id) || id.startsWith('input:') || id.startsWith('output:');
    this.edges = graph.edges.filter((e) => known(e.from) && known(e.to));
  }

  /** What a group holds, for its colours when collapsed. */
  groupContents(group: string): Contents {
    return this.contents.get(group) ?? { level: 'unchecked', marked: false, diff: false };
  }

  /** The groups whose module call is at `path`:`line`. */
  groupsAt(path: string, line: number): string[] {
    return this.groupLines.get(lineKey(path, line)) ?? [];
  }

  /** `group` and the groups around it, innermost first. */
  ancestors(group: string | null): string[] {
    const chain: string[] = [];
    for (let g = group; g !== null && g !== undefined; g = this.groups.get(g)?.parent ?? null) {
      chain.push(g);
    }
    return chain;
  }

  /** The ids of the nodes whose source (innermost user frame) is `path`:`line` (1-based). */
  nodesAt(path: string, line: number): string[] {
    return this.lines.get(lineKey(path, line)) ?? [];
  }

  /** The ops inside a group, its subgroups' included. */
  nodeCount(group: string): number {
    return this.nodeCounts.get(group) ?? 0;
  }

  /** The box that shows `id` (a node or a group) under `expanded`: itself, or its outermost collapsed group. */
  visibleBox(id: string, expanded: ReadonlySet<string>): string {
    if (id.startsWith('input:') || id.startsWith('output:')) {
      return id;
    }
    const group = this.nodes.has(id) ? this.nodes.get(id)!.group : (this.groups.get(id)?.parent ?? null);
    const chain = this.ancestors(group);
    for (let i = chain.length - 1; i >= 0; i--) {
      if (!expanded.has(chain[i])) {
        return chain[i];
      }
    }
    return id;
  }

  /** The groups to expand so that every node of `ids` shows (their ancestors). */
  groupsAround(ids: Iterable<string>): Set<string> {
    const groups = new Set<string>();
    for (const id of ids) {
      for (const group of this.ancestors(this.nodes.get(id)?.group ?? null)) {
        groups.add(group);
      }
    }
    return groups;
  }

  /** Nodes whose op type, name or module path contains `query` (case-insensitive), or, for `file:line`, the nodes
   * of that source line (`file` the end of its path: `model.py:12`). */
  search(query: string): string[] {
    const q = query.trim().toLowerCase();
    if (!q) {
      return [];
    }
    const at = /^(.+):(\d+)$/.exec(q);
    const nodes = [...this.nodes.values()];
    if (at) {
      const [file, line] = [at[1], Number(at[2])];
      const sep = (path: string) => path.length === file.length || '/\\'.includes(path[path.length - file.length - 1]);
      const there = (s: Frame | null) => s !== null && s.line === line && s.path.toLowerCase().endsWith(file) && sep(s.path);
      return nodes.filter((n) => there(n.source)).map((n) => n.id);
    }
    const found = (n: GraphNode) => [n.op, n.name, n.module].some((text) => text.toLowerCase().includes(q));
    return nodes.filter(found).map((n) => n.id);
  }
}

/** Collapsed by module: the top-level groups open when they are a few parts (not a stack of layers: more than
 * MAX_OPEN_TOP_LEVEL), and below them a group that is all its container shows (the container a wrapper, as a
 * decoder's `model`); every other group collapsed, one box with its op count. */
export function defaultExpanded(index: GraphIndex): Set<string> {
  const expanded = new Set<string>();
  const top = index.childGroups.get(null) ?? [];
  let level = top.length <= MAX_OPEN_TOP_LEVEL ? top : [];
  for (const group of level) {
    expanded.add(group.id);
  }
  while (level.length) {
    const alone = (g: Group) => index.childGroups.get(g.parent)!.length === 1 &&
      !index.childNodes.get(g.parent)?.length;
    level = level.flatMap((g) => index.childGroups.get(g.id) ?? []).filter(alone);
    level.forEach((g) => expanded.add(g.id));
  }
  return expanded;
}

/** What a group shows, or the root (`null`): its child groups and nodes (and the graph's inputs and outputs at the root). */
export function childBoxes(index: GraphIndex, container: string | null): string[] {
  const { graph } = index;
  const inner = [...(index.childGroups.get(container) ?? []).map((g) => g.id), ...(index.childNodes.get(container) ?? []).map((n) => n.id)];
  return container === null ? [...graph.inputs.map((v) => `input:${v.name}`), ...inner, ...graph.outputs.map((v) => `output:${v.name}`)] : inner;
}

/** The ELK graph of one open container (a group, or the root: `null`): its children as boxes, an open child group
 * at `sizes` (its own layout, done first), and an edge between two children wherever an edge of the model joins what
 * they hold (one per pair; none from a child feeding more than MAX_LAID_OUT_FAN_OUT others). Laying out each open group on its own keeps ELK's work small: expanding a group lays
 * out only it and the containers around it. */
export function containerGraph(index: GraphIndex, container: string | null, expanded: ReadonlySet<string>, sizes: ReadonlyMap<string, Size>): ElkNode {
  const children = childBoxes(index, container).map((id): ElkNode => {
    const size = sizes.get(id);
    return size ? { id, ...size } : box(id, boxLabel(index, id, expanded));
  });
  const ids = new Set(children.map((c) => c.id));
  const edges: ElkExtendedEdge[] = [];
  const seen = new Set<string>();
  for (const edge of index.edges) {
    const from = childOf(index, container, index.visibleBox(edge.from, expanded));
    const to = childOf(index, container, index.visibleBox(edge.to, expanded));
    const key = `${from}>${to}`;
    if (from && to && from !== to && ids.has(from) && ids.has(to) && !seen.has(key)) {
      seen.add(key);
      edges.push({ id: key, sources: [from], targets: [to] });
    }
  }
  const fanOut = new Map<string, number>();
  edges.forEach((e) => fanOut.set(e.sources[0], (fanOut.get(e.sources[0]) ?? 0) + 1));
  const padding = container === null ? '[top=12,left=12,bottom=12,right=12]' : `[top=${GROUP_HEADER + 8},left=10,bottom=10,right=10]`;
  return {
    id: container ?? 'root',
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': 'DOWN',
      // about half the layout time of the defaults on a tiny GPT-2's larger groups (100 boxes, 300 edges): 0.2-0.3 s, not 0.5
      'elk.layered.thoroughness': '1',
      'elk.separateConnectedComponents': 'false',
      'elk.edgeRouting': 'POLYLINE',
      'elk.layered.spacing.nodeNodeBetweenLayers': '24',
      'elk.spacing.nodeNode': '16',
      'elk.padding': padding,
    },
    children,
    edges: edges.filter((e) => fanOut.get(e.sources[0])! <= MAX_LAID_OUT_FAN_OUT),
  };
}

export interface Size {
  width: number;
  height: number;
}

/** The text of a box: a node's op, a graph input's or output's name, a group's label (with its op count when collapsed). */
export function boxLabel(index: GraphIndex, id: string, expanded: ReadonlySet<string>): string {
  // (a collapsed group's counts are of what shows: plumbing folded away is not counted)
  const node = index.nodes.get(id);
  const group = index.groups.get(id);
  if (node) {
    return node.op;
  }
  if (group) {
    return expanded.has(id) ? groupLabel(group) : `${groupLabel(group)} · ${index.nodeCount(id)} ops`;
  }
  return id.slice(id.indexOf(':') + 1);
}

/** The child of `container` that holds the box `id` (itself if it is one), or undefined. */
function childOf(index: GraphIndex, container: string | null, id: string): string | undefined {
  const node = index.nodes.get(id);
  const group = node ? node.group : (index.groups.get(id)?.parent ?? null);
  if (group === container || (!node && !index.groups.has(id) && container === null)) {
    return id; // inputs and outputs are the root's
  }
  const chain = index.ancestors(group); // innermost first
  const at = container === null ? chain.length : chain.indexOf(container);
  return at > 0 ? chain[at - 1] : undefined;
}

/** "h.0 (GPT2Block)": the module path's last part and the class. */
export function groupLabel(group: Group): string {
  const name = group.module.split('.').slice(-2).join('.') || group.function;
  return group.class ? `${name} (${group.class})` : name;
}

function box(id: string, label: string): ElkNode {
  return { id, width: labelWidth(label), height: NODE_HEIGHT };
}

/** The smallest width of an open group: its header's. */
export function headerWidth(group: Group): number {
  return labelWidth(groupLabel(group));
}

function labelWidth(label: string): number {
  return Math.max(48, Math.round(label.length * CHAR_WIDTH + 20));
}

/** The worst of a node's checks, in multiples of its tolerance (atol + rtol; the view has no values). */
export function errorLevel(checks: Check[]): ErrorLevel {
  const run = checks.filter((c) => !c.skipped);
  if (run.length === 0) {
    return 'unchecked';
  }
  const failed = run.filter((c) => c.ok === false);
  if (failed.length === 0) {
    return 'ok';
  }
  const ratio = Math.max(...failed.map((c) => (c.maxAbsError ?? Infinity) / Math.max((c.atol ?? 0) + (c.rtol ?? 0), 1e-12)));
  return ratio <= 10 ? 'over' : ratio <= 1000 ? 'over10' : 'over1000';
}

export function lineKey(path: string, line: number): string {
  return `${path}:${line}`;
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) {
    list.push(value);
  } else {
    map.set(key, [value]);
  }
}
