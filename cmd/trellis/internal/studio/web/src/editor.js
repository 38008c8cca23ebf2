// The flow's files in CodeMirror 6: YAML highlighting, the diagnostics
// the server's check returns shown at their line and column (with the
// suggestion offered as a fix), and completion of keys and values from
// the flow format's JSON Schema.
import { EditorState } from '@codemirror/state';
import { EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter, drawSelection } from '@codemirror/view';
import { defaultKeymap, history, historyKeymap, indentWithTab } from '@codemirror/commands';
import { syntaxHighlighting, defaultHighlightStyle, indentOnInput, bracketMatching } from '@codemirror/language';
import { searchKeymap, highlightSelectionMatches } from '@codemirror/search';
import { autocompletion, completionKeymap } from '@codemirror/autocomplete';
import { lintGutter, setDiagnostics, lintKeymap } from '@codemirror/lint';
import { yaml } from '@codemirror/lang-yaml';

// toCM turns the API's diagnostics for one file into CodeMirror's: a
// line and 1-based columns become offsets in the document.
export function toCM(doc, diags) {
  const out = [];
  for (const d of diags) {
    const lineNo = Math.min(Math.max(d.line || 1, 1), doc.lines);
    const line = doc.line(lineNo);
    let from = line.from + Math.max((d.col || 1) - 1, 0);
    let to = d.end_col ? line.from + d.end_col - 1 : line.to;
    from = Math.min(from, line.to);
    to = Math.min(Math.max(to, from), line.to);
    if (to === from && line.to > line.from) {
      // a point: mark the word there, or the line
      to = Math.min(line.to, from + 1);
      if (from === line.to) from = line.from;
    }
    const message = '[' + d.code + '] ' + d.message + (d.suggestion ? '; did you mean "' + d.suggestion + '"?' : '') + (d.detail ? '\n' + d.detail : '');
    const cm = { from, to, severity: d.severity === 'warning' ? 'warning' : 'error', message, source: d.code };
    if (d.suggestion && d.end_col) {
      const rf = from, rt = to, s = d.suggestion;
      cm.actions = [{ name: 'Use "' + s + '"', apply: (view) => view.dispatch({ changes: { from: rf, to: rt, insert: s } }) }];
    }
    out.push(cm);
  }
  return out;
}

// --- completion from the flow format's JSON Schema ---

function resolve(schema, root) {
  let s = schema;
  for (let i = 0; s && s.$ref && i < 10; i++) {
    const path = s.$ref.replace(/^#\//, '').split('/');
    let t = root;
    for (const p of path) t = t && t[p];
    s = t;
  }
  return s || {};
}

function leading(text) {
  return text.length - text.trimStart().length;
}

const keyRE = /^(- )?([A-Za-z_][\w.-]*)\s*:/;

// pathAt reads the YAML path of the mapping the cursor's line belongs to,
// from the indentation of the lines above it ('[]' for a list item).
export function pathAt(doc, lineNo, indent) {
  const path = [];
  const lines = [];
  let level = indent;
  for (let l = lineNo - 1; l >= 1 && level > 0; l--) {
    const t = doc.line(l).text;
    const s = t.trim();
    if (!s || s.startsWith('#')) continue;
    const ind = leading(t);
    const item = s.startsWith('- ');
    if (item && ind + 2 === level) {
      // a key beside the cursor's in the same list item
      path.unshift('[]');
      lines.unshift(l);
      level = ind;
      continue;
    }
    if (ind < level) {
      const m = keyRE.exec(s);
      if (!m) return null;
      path.unshift(m[2]);
      lines.unshift(l);
      if (item) {
        path.unshift('[]');
        lines.unshift(l);
      }
      level = ind;
    }
  }
  return { path, nodeLine: path[0] === 'nodes' && path.length >= 2 ? lines[1] : 0 };
}

// siblings lists the keys of the mapping that holds the given line.
function siblings(doc, lineNo, indent) {
  const keys = new Set();
  for (const dir of [-1, 1]) {
    for (let l = lineNo + dir; l >= 1 && l <= doc.lines; l += dir) {
      const t = doc.line(l).text;
      const s = t.trim();
      if (!s || s.startsWith('#')) continue;
      const ind = leading(t);
      if (ind < indent) break;
      if (ind === indent) {
        const m = keyRE.exec(s);
        if (m) keys.add(m[2]);
      }
    }
  }
  return keys;
}

function nodeKind(doc, nodeKeyLine) {
  if (!nodeKeyLine) return '';
  const base = leading(doc.line(nodeKeyLine).text);
  const inline = /kind:\s*([\w-]+)/.exec(doc.line(nodeKeyLine).text);
  if (inline) return inline[1];
  for (let l = nodeKeyLine + 1; l <= doc.lines; l++) {
    const t = doc.line(l).text;
    if (!t.trim() || t.trim().startsWith('#')) continue;
    if (leading(t) <= base) break;
    const m = /^\s*kind:\s*([\w-]+)/.exec(t);
    if (m) return m[1];
  }
  return '';
}

function schemaAt(root, path, kind) {
  let s = resolve(root, root);
  for (let i = 0; i < path.length; i++) {
    const p = path[i];
    if (p === '[]') {
      s = resolve(s.items || {}, root);
      continue;
    }
    if (i === 1 && path[0] === 'nodes') {
      s = kind && root.$defs && root.$defs['kind.' + kind] ? root.$defs['kind.' + kind] : resolve({ $ref: '#/$defs/node' }, root);
      continue;
    }
    const next = (s.properties && s.properties[p]) || (typeof s.additionalProperties === 'object' ? s.additionalProperties : null);
    if (!next) return null;
    s = resolve(next, root);
  }
  return s;
}

export function schemaCompletion(getSchema, getNames) {
  return (ctx) => {
    const root = getSchema();
    if (!root) return null;
    const line = ctx.state.doc.lineAt(ctx.pos);
    const before = line.text.slice(0, ctx.pos - line.from);
    const keyMatch = /^(\s*)(- )?([\w-]*)$/.exec(before);
    const valueMatch = /^(\s*)(- )?([\w-]+):\s*([\w-]*)$/.exec(before);
    if (!keyMatch && !valueMatch) return null;
    const m = keyMatch || valueMatch;
    const indent = m[1].length + (m[2] ? 2 : 0);
    const where = pathAt(ctx.state.doc, line.number, indent);
    if (!where) return null;
    const path = m[2] ? [...where.path, '[]'] : where.path;
    const kind = path[0] === 'nodes' && path.length >= 2 ? nodeKind(ctx.state.doc, where.nodeLine) : '';
    if (keyMatch) {
      if (!keyMatch[3] && !ctx.explicit) return null;
      let s = schemaAt(root, path, kind);
      if (path.length === 2 && path[0] === 'nodes' && !kind) s = { properties: { kind: { description: 'The node kind.' } } };
      if (!s || !s.properties) return null;
      const have = siblings(ctx.state.doc, line.number, indent);
      const options = Object.entries(s.properties).filter(([k]) => !have.has(k)).map(([k, v]) => ({
        label: k, type: 'property', apply: k + ': ', info: resolve(v, root).description || v.description || '',
      }));
      return { from: ctx.pos - keyMatch[3].length, options, validFor: /^[\w-]*$/ };
    }
    const key = valueMatch[3];
    const partial = valueMatch[4];
    let options = [];
    if (key === 'kind' && path[0] === 'nodes' && path.length === 2) {
      options = Object.keys(root.$defs || {}).filter((k) => k.startsWith('kind.')).map((k) => ({
        label: k.slice(5), type: 'type', info: root.$defs[k].description || '',
      }));
    } else if (['to', 'from', 'else', 'default'].includes(key) && path[0] === 'edges') {
      options = [...getNames(), 'END'].map((n) => ({ label: n, type: 'variable' }));
    } else {
      const s = schemaAt(root, [...path, key], kind);
      if (s && s.enum) options = s.enum.map((v) => ({ label: String(v), type: 'enum' }));
      else if (s && s.type === 'boolean') options = ['true', 'false'].map((v) => ({ label: v, type: 'keyword' }));
    }
    if (!options.length) return null;
    return { from: ctx.pos - partial.length, options, validFor: /^[\w-]*$/ };
  };
}

// createEditor makes the editor; setFile shows a file (each keeps its own
// undo history), onChange(path, text) runs after each edit.
export function createEditor(parent, { onChange, onSave, getSchema, getNames }) {
  const states = new Map();
  let current = null;
  const extensions = (path) => [
    lineNumbers(), highlightActiveLineGutter(), history(), drawSelection(), indentOnInput(), bracketMatching(),
    highlightActiveLine(), highlightSelectionMatches(), lintGutter(),
    syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
    path.endsWith('.yaml') || path.endsWith('.yml') || path.endsWith('.prompt') ? yaml() : [],
    path.endsWith('.yaml') || path.endsWith('.yml') ? autocompletion({ override: [schemaCompletion(getSchema, getNames)] }) : autocompletion(),
    keymap.of([{ key: 'Mod-s', preventDefault: true, run: () => { onSave(); return true; } },
      ...defaultKeymap, ...historyKeymap, ...searchKeymap, ...completionKeymap, ...lintKeymap, indentWithTab]),
    EditorView.updateListener.of((u) => { if (u.docChanged) onChange(path, u.state.doc.toString()); }),
    // the text is reached with Tab, which its scrolling needs too
    EditorView.contentAttributes.of({ 'aria-label': 'the text of ' + path, tabindex: '0' }),
  ];
  const view = new EditorView({ parent, state: EditorState.create({ doc: '' }) });
  return {
    view,
    reset() { states.clear(); current = null; view.setState(EditorState.create({ doc: '' })); },
    setFile(path, text) {
      if (current) states.set(current, view.state);
      current = path;
      let st = states.get(path);
      if (!st) st = EditorState.create({ doc: text, extensions: extensions(path) });
      view.setState(st);
    },
    replace(path, text) {
      const st = EditorState.create({ doc: text, extensions: extensions(path) });
      if (path === current) view.setState(st);
      else states.set(path, st);
    },
    current() { return current; },
    text() { return view.state.doc.toString(); },
    showDiagnostics(diags) { view.dispatch(setDiagnostics(view.state, toCM(view.state.doc, diags))); },
    // fix replaces a diagnostic's span with its suggestion
    fix(d) {
      const doc = view.state.doc;
      if (!d.suggestion || !d.end_col || d.line > doc.lines) return false;
      const l = doc.line(d.line);
      const from = Math.min(l.from + d.col - 1, l.to), to = Math.min(l.from + d.end_col - 1, l.to);
      view.dispatch({ changes: { from, to, insert: d.suggestion }, selection: { anchor: from + d.suggestion.length } });
      view.focus();
      return true;
    },
    goto(line, col) {
      const doc = view.state.doc;
      const l = doc.line(Math.min(Math.max(line, 1), doc.lines));
      const pos = Math.min(l.from + Math.max((col || 1) - 1, 0), l.to);
      view.dispatch({ selection: { anchor: pos }, scrollIntoView: true });
      view.focus();
    },
  };
}
