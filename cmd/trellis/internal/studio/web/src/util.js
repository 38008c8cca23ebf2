// Small helpers of the studio: building elements, and reading what the
// page shows out of the API's answers and the flow's text.

// h builds an element: attributes (on* functions become listeners; null
// ones are left out) and children (strings become text; null ones are
// left out).
export function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  if (tag === 'textarea' && children.length) e.value = children.flat().filter((c) => typeof c === 'string').join('');
  // a block of text may scroll: the keyboard reaches it
  if (tag === 'pre' && !e.hasAttribute('tabindex')) e.tabIndex = 0;
  return e;
}

// fill replaces an element's children, leaving out null ones.
export function fill(e, ...children) {
  e.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return e;
}

export function json(v, indent) {
  const s = JSON.stringify(v, null, indent === undefined ? 2 : indent);
  return s === undefined ? 'null' : s;
}

// diffValues lists the top-level fields whose values differ.
export function diffValues(before, after) {
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  const out = [];
  for (const k of keys) {
    const a = before[k], b = after[k];
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push({ field: k, before: a, after: b });
  }
  return out;
}

function indentOf(line) {
  return line.length - line.trimStart().length;
}

// nodeBlock is the text of the YAML mapping entry that starts at line
// (1-based): the key's line and every line indented below it.
export function nodeBlock(src, line) {
  const lines = src.split('\n');
  const first = lines[line - 1];
  if (first === undefined) return '';
  const base = indentOf(first);
  const out = [first];
  for (let i = line; i < lines.length; i++) {
    const l = lines[i];
    if (l.trim() === '') {
      out.push(l);
      continue;
    }
    if (indentOf(l) <= base) break;
    out.push(l);
  }
  while (out.length && out[out.length - 1].trim() === '') out.pop();
  const cut = Math.min(...out.filter((l) => l.trim()).map(indentOf));
  return out.map((l) => l.slice(cut)).join('\n');
}

// readsOf lists the state fields a text reads (state.NAME in expressions,
// .state.NAME in templates), among fields.
export function readsOf(text, fields) {
  const known = new Set(fields);
  const out = new Set();
  for (const m of text.matchAll(/\bstate\.([A-Za-z_]\w*)/g)) if (known.has(m[1])) out.add(m[1]);
  return [...out].sort();
}

export function promptName(block) {
  const m = /^\s*prompt:\s*["']?([^"'\s#]+)/m.exec(block);
  return m ? m[1] : '';
}

// reducersOf reads the state block's reducers from the flow's text.
export function reducersOf(src) {
  const out = {};
  const lines = src.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s+)reducers:\s*(\{.*\})?\s*$/.exec(lines[i]);
    if (!m) continue;
    if (m[2]) {
      for (const p of m[2].matchAll(/([\w]+)\s*:\s*([\w]+)/g)) out[p[1]] = p[2];
      continue;
    }
    const base = m[1].length;
    for (let j = i + 1; j < lines.length; j++) {
      const l = lines[j];
      if (!l.trim() || l.trim().startsWith('#')) continue;
      if (indentOf(l) <= base) break;
      const r = /^\s+([\w]+)\s*:\s*([\w]+)\s*$/.exec(l);
      if (r) out[r[1]] = r[2];
      else {
        const c = /^\s+([\w]+)\s*:/.exec(l);
        if (c) out[c[1]] = 'custom';
      }
    }
  }
  return out;
}

// nodeAt finds a drawn node by its id (a subflow's or map's inner nodes
// are named through it: screen_resume/router, sections/each), with the
// graph whose file declares it.
export function nodeAt(doc, id) {
  const parts = id.split('/');
  let g = doc;
  let owner = doc;
  let node = null;
  for (let i = 0; i < parts.length; i++) {
    if (node && node.map && parts[i] === 'each') {
      node = node.map.node;
      continue;
    }
    if (node) {
      if (!node.subflow) return null;
      g = node.subflow;
      owner = g;
    }
    node = (g.nodes || []).find((n) => n.name === parts[i]) || null;
    if (!node) return null;
  }
  return node ? { node, graph: owner } : null;
}

// nsPath turns an event's namespace (NODE:SEQ, levels joined by |) into
// the id prefix of the nodes drawn inside it.
export function nsPath(ns) {
  return ns.split('|').map((p) => p.replace(/(\[[0-9]+\])?:[0-9]+$/, '')).join('/');
}

// transcript reads a conversation from a thread's checkpoints (oldest
// first) and runs: each run's message, then the reply it left.
export function transcript(checkpoints, runs, conv) {
  const byRun = new Map(runs.map((r) => [r.id, r]));
  const out = [];
  let run = null;
  let reply = null;
  const flush = () => {
    if (reply !== null && reply !== '') out.push({ who: 'flow', text: String(reply) });
    reply = null;
  };
  for (const cp of checkpoints) {
    if (!cp.run) continue;
    if (cp.run !== run) {
      flush();
      run = cp.run;
      const r = byRun.get(run);
      const said = r && r.input ? r.input[conv.input] : undefined;
      if (said !== undefined && said !== null && said !== '') out.push({ who: 'you', text: String(said) });
    }
    for (const w of cp.writes || []) if (w.field === conv.output) reply = w.value;
  }
  flush();
  return out;
}
