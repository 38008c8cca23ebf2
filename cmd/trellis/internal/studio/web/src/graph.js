// The flow's graph, drawn as SVG from the API's graph JSON and laid out
// with dagre: one element per node (its kind's colour, marks for a node
// that asks, pauses or caches, a subflow's or map's node expandable into
// a cluster of what it runs) and one per arc (conditions, routes and
// bounds as labels). Nodes are focusable buttons; marks show a run
// moving through the graph.
import { graphlib, layout } from '@dagrejs/dagre';

const SVG = 'http://www.w3.org/2000/svg';

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function textWidth(s, size) {
  return s.length * size * 0.6;
}

function shorten(s, n) {
  s = s.replace(/\s+/g, ' ').trim();
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

// arcLabel is what an arc says on the graph (shortened), and in full.
export function arcLabel(a) {
  let text = a.label || '';
  switch (a.kind) {
    case 'route': {
      const m = /==\s*"([^"]*)"\s*$/.exec(text);
      text = m ? '→ ' + m[1] : text;
      break;
    }
    case 'else':
      text = 'else';
      break;
    case 'default':
      text = 'default';
      break;
  }
  if (a.bound) text = (text ? text + ' ' : '') + '≤' + a.bound;
  const full = (a.label || '') + (a.bound ? ' (taken at most ' + a.bound + ' times a run)' : '');
  return { short: shorten(text, 34), full: full || a.kind };
}

function kindLabel(n) {
  if (n.subflow) return 'subflow: ' + n.subflow.name;
  if (n.map) return 'map: ' + (n.map.node ? n.map.node.kind : '') + ' ×' + (n.map.max_concurrency || 1);
  return n.kind;
}

function marks(n) {
  const m = [];
  if (n.asks) m.push('? asks');
  if (n.interrupt_before) m.push('⏸ before');
  if (n.interrupt_after) m.push('⏸ after');
  if (n.cached) m.push('cached');
  return m.join(' · ');
}

// B-spline through the points dagre gives an edge.
function curve(pts) {
  if (pts.length < 3) return 'M' + pts.map((p) => p.x + ',' + p.y).join('L');
  let d = 'M' + pts[0].x + ',' + pts[0].y;
  const p = pts;
  d += 'L' + (5 * p[0].x + p[1].x) / 6 + ',' + (5 * p[0].y + p[1].y) / 6;
  for (let i = 1; i < p.length - 1; i++) {
    const a = p[i - 1], b = p[i], c = p[i + 1];
    d += 'C' + (2 * a.x + b.x) / 3 + ',' + (2 * a.y + b.y) / 3 + ' ' + (a.x + 2 * b.x) / 3 + ',' + (a.y + 2 * b.y) / 3 + ' ' +
      (a.x + 4 * b.x + c.x) / 6 + ',' + (a.y + 4 * b.y + c.y) / 6;
  }
  const n = p.length;
  d += 'C' + (2 * p[n - 2].x + p[n - 1].x) / 3 + ',' + (2 * p[n - 2].y + p[n - 1].y) / 3 + ' ' + (p[n - 2].x + 5 * p[n - 1].x) / 6 + ',' +
    (p[n - 2].y + 5 * p[n - 1].y) / 6 + ' ' + p[n - 1].x + ',' + p[n - 1].y;
  return d;
}

export class GraphView {
  constructor(container, { onSelect, onToggle }) {
    this.container = container;
    this.onSelect = onSelect;
    this.onToggle = onToggle;
    this.nodes = new Map(); // id → <g>
    this.edges = []; // {from, to, el}
    this.selected = null;
    this.fit = false;
  }

  // render draws doc; expanded holds the ids of the subflow and map nodes
  // drawn with what they run inside.
  render(doc, expanded) {
    this.doc = doc;
    const g = new graphlib.Graph({ multigraph: true, compound: true });
    g.setGraph({ rankdir: 'TB', nodesep: 28, ranksep: 42, edgesep: 14, marginx: 16, marginy: 16 });
    g.setDefaultEdgeLabel(() => ({}));
    const items = []; // drawn nodes: {id, node, kind: node|terminal}
    const clusters = [];
    const arcs = [];

    const addNode = (n, id, parent) => {
      const inner = expanded.has(id) && (n.subflow || (n.map && n.map.node));
      if (inner) {
        g.setNode(id, { label: id, clusterLabel: n.name + ' — ' + kindLabel(n) });
        if (parent) g.setParent(id, parent);
        clusters.push({ id, node: n });
        if (n.subflow) {
          return addGraph(n.subflow, id + '/', id);
        }
        const each = { ...n.map.node, name: 'each' };
        return addNode(each, id + '/each', id);
      }
      const name = n.name;
      const sub = kindLabel(n);
      const badge = marks(n);
      const w = Math.max(textWidth(name, 12.5), textWidth(sub, 11), textWidth(badge, 10)) + 26;
      const h = badge ? 50 : 38;
      g.setNode(id, { width: Math.max(w, 70), height: h });
      if (parent) g.setParent(id, parent);
      items.push({ id, node: n, sub, badge });
      return { entry: id, exit: id };
    };

    const addGraph = (d, prefix, parent) => {
      const ends = {};
      for (const t of ['START', 'END']) {
        const id = prefix + t;
        g.setNode(id, { width: 30, height: 30 });
        if (parent) g.setParent(id, parent);
        items.push({ id, terminal: t });
        ends[t] = { entry: id, exit: id };
      }
      for (const n of d.nodes || []) ends[n.name] = addNode(n, prefix + n.name, parent);
      (d.arcs || []).forEach((a, i) => {
        const from = ends[a.from], to = ends[a.to];
        if (!from || !to) return;
        const name = prefix + '#' + i;
        const lab = arcLabel(a);
        const label = lab.short ? { width: textWidth(lab.short, 10.5) + 6, height: 14, labelpos: 'c' } : {};
        g.setEdge(from.exit, to.entry, label, name);
        arcs.push({ name, from: from.exit, to: to.entry, arc: a, lab, top: prefix === '', fromNode: prefix + a.from, toNode: prefix + a.to });
      });
      return { entry: prefix + 'START', exit: prefix + 'END' };
    };

    addGraph(doc, '', null);
    layout(g);

    const box = g.graph();
    // a group, not an image: its nodes are buttons to reach and press
    const svg = el('svg', { width: box.width, height: box.height, viewBox: '0 0 ' + box.width + ' ' + box.height, role: 'group', 'aria-label': 'the graph of flow ' + doc.name });
    this.size = { width: box.width, height: box.height };
    const defs = el('defs', {}, svg);
    const marker = el('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, defs);
    el('path', { d: 'M0,0L10,5L0,10z', fill: '#8c959f' }, marker);

    for (const c of clusters) {
      const b = g.node(c.id);
      const cg = el('g', { class: 'cluster', 'data-cluster': c.id }, svg);
      el('rect', { x: b.x - b.width / 2, y: b.y - b.height / 2, width: b.width, height: b.height }, cg);
      const t = el('text', { x: b.x - b.width / 2 + 8, y: b.y - b.height / 2 + 13 }, cg);
      t.textContent = shorten(b.clusterLabel, 60);
    }

    this.edges = [];
    for (const a of arcs) {
      const e = g.edge({ v: a.from, w: a.to, name: a.name });
      const eg = el('g', { class: 'edge arc-' + a.arc.kind, 'data-from': a.fromNode, 'data-to': a.toNode, 'data-kind': a.arc.kind }, svg);
      if (!a.top) eg.classList.add('inner');
      const title = el('title', {}, eg);
      title.textContent = a.arc.from + ' → ' + a.arc.to + (a.lab.full ? ': ' + a.lab.full : '');
      el('path', { d: curve(e.points), 'marker-end': 'url(#arrow)' }, eg);
      if (a.lab.short && e.x !== undefined) {
        const w = textWidth(a.lab.short, 10.5) + 6;
        el('rect', { class: 'label-bg', x: e.x - w / 2, y: e.y - 8, width: w, height: 15, rx: 3 }, eg);
        const t = el('text', { x: e.x, y: e.y + 3.5, 'text-anchor': 'middle' }, eg);
        t.textContent = a.lab.short;
      }
      this.edges.push({ from: a.fromNode, to: a.toNode, el: eg });
    }

    this.nodes = new Map();
    for (const it of items) {
      const b = g.node(it.id);
      if (it.terminal) {
        const tg = el('g', { class: 'terminal', 'data-terminal': it.id }, svg);
        el('circle', { cx: b.x, cy: b.y, r: 14 }, tg);
        const t = el('text', { x: b.x, y: b.y + 3.5, 'text-anchor': 'middle' }, tg);
        t.textContent = it.terminal;
        this.nodes.set(it.id, tg);
        continue;
      }
      const n = it.node;
      // named by what it shows (its name, kind and marks); its
      // description is said after, and shown over its box
      const about = (n.description || it.id) + (n.subflow || n.map ? '\n(double-click to ' + (expanded.has(it.id) ? 'fold' : 'expand') + ')' : '');
      const ng = el('g', { class: 'node kind-' + (n.map ? 'map' : n.kind), 'data-node': it.id, tabindex: 0, role: 'button', 'aria-description': about }, svg);
      if (n.asks) ng.classList.add('asks');
      if (n.subflow || n.map) ng.classList.add('composite');
      if (!it.id.includes('/')) ng.classList.add('top');
      const rect = el('rect', { x: b.x - b.width / 2, y: b.y - b.height / 2, width: b.width, height: b.height }, ng);
      el('title', {}, rect).textContent = about;
      const top = b.y - b.height / 2;
      const name = el('text', { x: b.x, y: top + 16, 'text-anchor': 'middle', 'font-weight': 600 }, ng);
      name.textContent = n.name;
      const kind = el('text', { class: 'kind', x: b.x, y: top + 30, 'text-anchor': 'middle' }, ng);
      kind.textContent = it.sub;
      if (it.badge) {
        const bt = el('text', { class: 'badge', x: b.x, y: top + 43, 'text-anchor': 'middle' }, ng);
        bt.textContent = it.badge;
      }
      ng.addEventListener('click', () => this.select(it.id, true));
      ng.addEventListener('dblclick', () => { if ((n.subflow || n.map) && this.onToggle) this.onToggle(it.id); });
      ng.addEventListener('keydown', (ev) => {
        if (ev.key === 'Enter' || ev.key === ' ') {
          ev.preventDefault();
          this.select(it.id, true);
        } else if ((ev.key === '+' || ev.key === '-') && (n.subflow || n.map) && this.onToggle) {
          this.onToggle(it.id);
        }
      });
      this.nodes.set(it.id, ng);
    }

    this.container.replaceChildren(svg);
    this.svg = svg;
    this.applyFit();
    if (this.selected && this.nodes.has(this.selected)) this.nodes.get(this.selected).classList.add('selected');
  }

  // applyFit scales the drawing: to the pane's width (never below 60%,
  // scrolling beyond), or, fitted, the whole graph into the pane.
  applyFit() {
    if (!this.svg) return;
    const w = Math.max(this.container.clientWidth - 8, 100), h = Math.max(this.container.clientHeight - 8, 100);
    const s = this.fit ? Math.min(1, w / this.size.width, h / this.size.height) : Math.min(1, Math.max(0.6, w / this.size.width));
    this.svg.setAttribute('width', Math.floor(this.size.width * s));
    this.svg.setAttribute('height', Math.floor(this.size.height * s));
  }

  toggleFit() {
    this.fit = !this.fit;
    this.applyFit();
    return this.fit;
  }

  select(id, user) {
    if (this.selected && this.nodes.has(this.selected)) this.nodes.get(this.selected).classList.remove('selected');
    this.selected = id;
    const n = this.nodes.get(id);
    if (n) {
      n.classList.add('selected');
      if (user) n.focus();
    }
    if (user && this.onSelect) this.onSelect(id);
  }

  // mark sets or clears a run's mark (running, ran, failed, waiting) on a
  // node, or on the subflow or map node that holds it when that is folded.
  mark(id, cls, on) {
    let target = id;
    while (target && !this.nodes.has(target)) {
      const i = target.lastIndexOf('/');
      target = i < 0 ? '' : target.slice(0, i);
    }
    const n = target && this.nodes.get(target);
    if (n) n.classList.toggle(cls, on);
    return n || null;
  }

  markEdge(from, to) {
    for (const e of this.edges) if (e.from === from && e.to === to) e.el.classList.add('taken');
  }

  clearMarks() {
    for (const n of this.nodes.values()) n.classList.remove('running', 'ran', 'failed', 'waiting', 'reached', 'at', 'next');
    for (const e of this.edges) e.el.classList.remove('taken');
  }

  // showCheckpoint marks a checkpoint on the graph: the nodes of its step
  // (at) and those it left to run (next); none clears the marks.
  showCheckpoint(writers, next) {
    for (const n of this.nodes.values()) n.classList.remove('at', 'next');
    for (const w of writers || []) this.mark(w, 'at', true);
    for (const n of next || []) this.mark(n, 'next', true);
  }
}
