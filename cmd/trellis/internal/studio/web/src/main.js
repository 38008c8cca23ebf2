// Trellis Studio: signs in (the one-time token `trellis studio` posts
// from its sign-in file or that is typed in, or an API key), then shows a flow's graph, its files in an editor checked as
// they are typed, runs streamed live, and a thread's history. Every call
// goes through the public API with the session's key. Its state is kept
// on window.trellisStudio for those who script the page.
import { API, APIError } from './api.js';
import { GraphView } from './graph.js';
import { createEditor } from './editor.js';
import { EvalsPanel } from './evals.js';
import { h, fill, json, diffValues, nodeBlock, readsOf, promptName, reducersOf, nodeAt, nsPath, transcript } from './util.js';
import { toolEvent, toolEntry, isApproval, approvalForm, approvalAnswer } from './tools.js';
import { Drafts, draftKey } from './drafts.js';

const $ = (id) => document.getElementById(id);
const keyStore = 'trellis.studio.key';
const refusedStore = 'trellis.studio.sign-in-refused';

const S = {
  ready: false,
  status: 'loading',
  session: null,
  flows: [],
  flow: null,
  graph: null,
  shownGraph: null,
  graphEdited: false,
  expanded: new Set(),
  files: null,
  edits: {},
  diagnostics: [],
  checks: 0,
  checking: false,
  config: [],
  threads: [],
  thread: null,
  state: null,
  runs: [],
  checkpoints: [],
  ns: '',
  selected: null,
  at: 0,
  node: null,
  run: null,
  saved: null,
};
window.trellisStudio = S;

let api = new API('');
let graphView = null;
let editor = null;
let evalsPanel = null;
// what was typed into the forms the page draws anew (answers, decisions
// on tool calls, edits of the state), by thread
const drafts = new Drafts();

// --- status and tabs ---

function setStatus(text, error) {
  S.status = text;
  const s = $('status');
  s.textContent = text;
  s.title = text;
  s.classList.toggle('error', !!error);
}

function fail(e, doing) {
  const msg = (doing ? doing + ': ' : '') + (e instanceof APIError ? e.code + ': ' + e.message : e.message || String(e));
  setStatus(msg, true);
  return msg;
}

const tabs = ['run', 'history', 'editor', 'node', 'state', 'evals'];

function showTab(name, focus) {
  for (const t of tabs) {
    const on = t === name;
    const tab = $('tab-' + t);
    tab.setAttribute('aria-selected', on ? 'true' : 'false');
    tab.tabIndex = on ? 0 : -1;
    $('panel-' + t).classList.toggle('hidden', !on);
    if (on && focus) tab.focus();
  }
  S.tab = name;
  if (name === 'editor' && editor) editor.view.requestMeasure();
  if (name === 'evals') evalsPanel.show();
  else evalsPanel.hide();
}

function setupTabs() {
  tabs.forEach((t, i) => {
    const tab = $('tab-' + t);
    tab.addEventListener('click', () => showTab(t));
    tab.addEventListener('keydown', (ev) => {
      let j = -1;
      if (ev.key === 'ArrowRight') j = (i + 1) % tabs.length;
      else if (ev.key === 'ArrowLeft') j = (i + tabs.length - 1) % tabs.length;
      else if (ev.key === 'Home') j = 0;
      else if (ev.key === 'End') j = tabs.length - 1;
      if (j >= 0) {
        ev.preventDefault();
        showTab(tabs[j], true);
      }
    });
  });
}

function saveHash() {
  const p = new URLSearchParams();
  if (S.flow) p.set('flow', S.flow.name);
  if (S.thread) p.set('thread', S.thread.id);
  history.replaceState(null, '', location.pathname + '#' + p.toString());
}

// --- signing in ---

// signIn takes the key the page was answered with when the sign-in file
// `trellis studio` writes posted its one-time token (POST /studio/signin:
// neither the token nor the key is ever in the page's address), else the
// key this tab signed in with before, else asks for one.
async function signIn() {
  const given = document.querySelector('meta[name="trellis-studio-key"]');
  const refused = document.querySelector('meta[name="trellis-studio-sign-in-error"]');
  if (given || refused) {
    if (given) sessionStorage.setItem(keyStore, given.content);
    else sessionStorage.setItem(refusedStore, refused.content);
    // the form's answer leaves the tab's history for the page itself:
    // the browser keeps the body a form posted (the token) with its
    // entry, for as long as the entry is there
    location.replace('/studio' + location.hash);
    return;
  }
  const why = sessionStorage.getItem(refusedStore);
  if (why !== null) {
    sessionStorage.removeItem(refusedStore);
    askKey('Signing in with the one-time token: ' + why);
    return;
  }
  const key = sessionStorage.getItem(keyStore);
  if (key) return start(key);
  askKey('');
}

// exchange spends a one-time token (trs_...) typed into the sign-in
// dialog on a key.
async function exchange(token) {
  try {
    const s = await new API('').post('/v1/studio/session', { token });
    sessionStorage.setItem(keyStore, s.key);
    return start(s.key);
  } catch (e) {
    askKey(fail(e, 'signing in with the one-time token'));
  }
}

// whoOf says who a session is: its tenant, and what its key may do.
function whoOf(s) {
  return s.tenant + (s.admin ? ' (admin)' : s.scope ? ' (' + s.scope + ')' : '');
}

// renewal keeps a lapsing key working while the page is open.
let renewal = null;

function keepRenewing(expires) {
  clearInterval(renewal);
  renewal = null;
  if (!expires) return;
  renewal = setInterval(async () => {
    try {
      const s = await api.post('/v1/studio/session/renew');
      S.session.expires = s.expires;
    } catch (e) {
      if (e instanceof APIError && e.status === 401) {
        clearInterval(renewal);
        sessionStorage.removeItem(keyStore);
        askKey('The studio\'s session ended (' + e.message + '): sign in again with an API key, or start trellis studio again for another sign-in.');
      }
    }
  }, 60 * 1000);
}

function askKey(message) {
  $('sign-in-error').textContent = message || '';
  setStatus('sign in with an API key');
  const d = $('sign-in');
  if (!d.open) d.showModal();
  $('key').focus();
}

async function start(key) {
  api = new API(key);
  let session;
  try {
    session = await api.get('/v1/studio/session');
    S.flows = (await api.get('/v1/flows')).flows;
  } catch (e) {
    if (e instanceof APIError && e.status === 401) {
      sessionStorage.removeItem(keyStore);
      askKey(e.message);
      return;
    }
    fail(e, 'listing the flows');
    return;
  }
  S.session = { who: whoOf(session), edits: session.edits, expires: session.expires, scope: session.scope || '' };
  $('who').textContent = S.session.who;
  $('who').title = 'key ' + session.key_id + (session.expires ? ', renewed while this page is open' : '');
  keepRenewing(session.expires);
  $('sign-out').classList.remove('hidden');
  const params = new URLSearchParams(location.hash.slice(1));
  const sel = $('flow');
  fill(sel, ...S.flows.map((f) => h('option', { value: f.name }, f.name)));
  const want = params.get('flow');
  const name = S.flows.some((f) => f.name === want) ? want : S.flows.length ? S.flows[0].name : '';
  if (!name) {
    setStatus('the server has no flows');
    S.ready = true;
    return;
  }
  sel.value = name;
  await loadFlow(name, params.get('thread') || '');
  S.ready = true;
}

function signOut() {
  sessionStorage.removeItem(keyStore);
  location.hash = '';
  location.reload();
}

// --- a flow ---

// showVersion says which version of the flow new threads start on (the
// promoted one, on every server) and, when it is another, the one this
// server loaded from its flow directory (the one edited here).
function showVersion(flow) {
  const short = (v) => (v || '').slice(0, 8);
  let text = 'version ' + short(flow.version);
  if (flow.promoted && flow.promoted === flow.version) text += ' (promoted)';
  else if (flow.promoted) text = 'promoted ' + short(flow.promoted) + ', loaded ' + short(flow.version);
  $('flow-version').textContent = text;
}

async function loadFlow(name, thread) {
  setStatus('loading flow ' + name);
  try {
    const [flow, graph, files] = await Promise.all([
      api.get('/v1/flows/' + encodeURIComponent(name)),
      api.get('/v1/flows/' + encodeURIComponent(name) + '/graph'),
      api.get('/v1/flows/' + encodeURIComponent(name) + '/files'),
    ]);
    if (S.run && S.run.active) S.run.abort.abort();
    S.run = null;
    S.flow = flow;
    S.graph = graph;
    S.files = files;
    showVersion(flow);
    S.edits = {};
    S.diagnostics = [];
    S.expanded = new Set();
    $('expand').setAttribute('aria-pressed', 'false');
    S.thread = null;
    S.state = null;
    S.checkpoints = [];
    S.node = null;
    S.at = 0;
    S.ns = '';
    drawGraph(graph, false);
    setupFiles();
    renderState();
    renderNode();
    if (S.tab === 'evals') evalsPanel.show();
    check();
    setStatus('flow ' + name);
    await loadThreads(thread);
  } catch (e) {
    fail(e, 'loading flow ' + name);
  }
  saveHash();
}

function drawGraph(doc, edited) {
  S.shownGraph = doc;
  S.graphEdited = edited;
  graphView.render(doc, S.expanded);
  $('graph-note').textContent = edited ? 'drawn from the edited text (not saved)' : '';
  markThread();
  if (S.run && S.run.marks) for (const [id, cls] of S.run.marks) graphView.mark(id, cls, true);
  if (S.run && S.run.taken) for (const [from, to] of S.run.taken) graphView.markEdge(from, to);
}

function toggleExpand(id) {
  if (S.expanded.has(id)) S.expanded.delete(id);
  else S.expanded.add(id);
  drawGraph(S.shownGraph, S.graphEdited);
  graphView.select(id, true);
}

function expandAll() {
  const btn = $('expand');
  const on = btn.getAttribute('aria-pressed') !== 'true';
  btn.setAttribute('aria-pressed', on ? 'true' : 'false');
  S.expanded = new Set();
  if (on) {
    const walk = (doc, prefix) => {
      for (const n of doc.nodes || []) {
        const id = prefix + n.name;
        if (n.subflow) {
          S.expanded.add(id);
          walk(n.subflow, id + '/');
        } else if (n.map) S.expanded.add(id);
      }
    };
    walk(S.shownGraph, '');
  }
  drawGraph(S.shownGraph, S.graphEdited);
}

// --- threads ---

async function loadThreads(want) {
  const out = await api.get('/v1/threads?flow=' + encodeURIComponent(S.flow.name) + '&limit=100');
  S.threads = out.threads;
  fillThreads();
  if (want) await selectThread(want);
  else renderRun();
  renderHistory();
}

function fillThreads() {
  const sel = $('thread');
  fill(sel, h('option', { value: '' }, '(none)'), ...S.threads.map((t) => h('option', { value: t.id }, t.id + ' · #' + t.checkpoint + (t.status === 'unfinished' ? ' · paused' : ''))));
  if (S.thread && !S.threads.some((t) => t.id === S.thread.id)) sel.append(h('option', { value: S.thread.id }, S.thread.id));
  sel.value = S.thread ? S.thread.id : '';
}

async function selectThread(id) {
  if (S.run && !S.run.active) {
    // the marks of a run on another thread go
    S.run = null;
    if (graphView.svg) graphView.clearMarks();
  }
  S.ns = '';
  S.selected = null;
  S.at = 0;
  if (!id) {
    S.thread = null;
    S.state = null;
    S.checkpoints = [];
    fillThreads();
    markThread();
    renderRun();
    renderHistory();
    saveHash();
    return;
  }
  try {
    S.thread = await api.get('/v1/threads/' + encodeURIComponent(id));
    if (S.thread.flow !== S.flow.name) {
      $('flow').value = S.thread.flow;
      await loadFlow(S.thread.flow, id);
      return;
    }
    await refreshThread();
    setStatus('thread ' + id);
  } catch (e) {
    S.thread = null;
    S.state = null;
    S.checkpoints = [];
    renderRun();
    renderHistory();
    fail(e, 'opening thread ' + id);
  }
  fillThreads();
  saveHash();
}

// refreshThread reads the thread's state, runs and history again.
let historyLoads = 0;

async function refreshThread() {
  const id = S.thread.id;
  const load = ++historyLoads;
  const base = '/v1/threads/' + encodeURIComponent(id);
  const [thread, state, runs, hist] = await Promise.all([
    api.get(base), api.get(base + '/state'), api.get(base + '/runs'), api.get(base + '/history?limit=1000'),
  ]);
  if (load !== historyLoads || !S.thread || S.thread.id !== id) return;
  S.thread = thread;
  S.state = state;
  S.runs = runs.runs;
  if (!S.ns) S.checkpoints = hist.checkpoints.slice().reverse();
  const i = S.threads.findIndex((t) => t.id === id);
  if (i >= 0) S.threads[i] = thread;
  else S.threads.unshift(thread);
  fillThreads();
  markThread();
  renderRun();
  if (S.ns) await loadChildHistory();
  else renderHistory();
  S.threadLoads = (S.threadLoads || 0) + 1; // the thread as read now is drawn
}

// markThread marks the nodes a paused run waits at.
function markThread() {
  if (!graphView || !graphView.svg) return;
  if (S.run && S.run.active) return;
  for (const n of graphView.nodes.values()) n.classList.remove('waiting');
  if (S.state && S.state.next) for (const n of S.state.next) graphView.mark(n, 'waiting', true);
}

// --- the run panel ---

function fieldInput(name, schema, value) {
  const type = schema && schema.type;
  const id = 'in-' + name;
  if (type === 'boolean') return h('input', { id, type: 'checkbox', checked: value === true ? '' : null, 'data-field': name, 'data-type': 'boolean' });
  if (type === 'integer' || type === 'number') return h('input', { id, type: 'number', step: type === 'integer' ? '1' : 'any', value: value ?? '', 'data-field': name, 'data-type': type });
  if (type === 'string') return h('textarea', { id, rows: 2, 'data-field': name, 'data-type': 'string' }, value ?? '');
  return h('textarea', { id, rows: 3, 'data-field': name, 'data-type': 'json', placeholder: 'JSON' }, value === undefined ? '' : json(value));
}

function readFields(form) {
  const out = {};
  for (const e of form.querySelectorAll('[data-field]')) {
    const name = e.dataset.field;
    switch (e.dataset.type) {
      case 'boolean':
        out[name] = e.checked;
        break;
      case 'integer':
      case 'number':
        if (e.value !== '') out[name] = Number(e.value);
        break;
      case 'string':
        if (e.value !== '') out[name] = e.value;
        break;
      default:
        if (e.value.trim() !== '') {
          try {
            out[name] = JSON.parse(e.value);
          } catch (err) {
            throw new Error(name + ': not JSON: ' + err.message);
          }
        }
    }
  }
  return out;
}

function schemaProps(raw) {
  return (raw && raw.properties) || {};
}

// typed keeps what was typed in a panel's fields across its redrawing.
function typed(p) {
  const out = {};
  for (const e of p.querySelectorAll('input[id], textarea[id], select[id]')) out[e.id] = e.type === 'checkbox' ? e.checked : e.value;
  return out;
}

function retype(values) {
  for (const [id, v] of Object.entries(values)) {
    const e = $(id);
    if (!e || e.type === 'password') continue;
    if (e.type === 'checkbox') e.checked = v;
    else if (v !== '' || e.value === '') e.value = v;
  }
}

// threadStatus says what a thread is doing, as the page knows it now.
function threadStatus() {
  if (S.run && S.run.active) return 'running' + (S.run.node ? ' ' + S.run.node : '');
  const st = S.state || {};
  if (st.interrupts && st.interrupts.length) return 'waiting for an answer';
  if (st.next && st.next.length) return 'stopped before ' + st.next.join(', ');
  return S.thread.status + (st.finished ? ' · finished' : '');
}

function renderRun() {
  const p = $('panel-run');
  if (!S.flow) {
    fill(p);
    return;
  }
  if (!S.thread) {
    const kept = typed(p);
    fill(p, newThreadForm());
    retype(kept);
    return;
  }
  const kept = typed(p);
  const conv = S.flow.conversation;
  const parts = [];
  const st = S.state || {};
  // a run that waits (for an answer, or to be resumed) takes no input
  const waiting = !!(st.next && st.next.length);
  const busy = !!(S.run && S.run.active);
  parts.push(h('div', { class: 'row' },
    h('strong', {}, 'Thread ' + S.thread.id),
    h('span', { class: 'muted', id: 'thread-summary' }, '#' + S.thread.checkpoint + ' · ' + threadStatus()),
    h('span', { class: 'spacer' }),
    h('button', { id: 'flow-test', title: 'Make a flow test of this thread: its inputs, the model\'s recorded replies as a cassette, the path of each run and the final state', onclick: saveFlowTest }, 'Save as a flow test'),
    h('button', { id: 'refresh', onclick: () => refreshThread().catch((e) => fail(e, 'refreshing')) }, 'Refresh')));
  parts.push(h('div', { id: 'flow-test-result' }));

  if (conv) {
    const chat = h('div', { class: 'chat', id: 'chat', 'aria-live': 'polite' });
    for (const m of transcript(S.checkpoints, S.runs, conv)) chat.append(h('div', { class: 'msg ' + m.who }, m.text));
    parts.push(h('h2', {}, 'Conversation'), chat);
    const say = h('textarea', { id: 'say', rows: 2, placeholder: 'Say something to the flow (Ctrl-Enter sends)', 'aria-label': 'Message' });
    say.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        sendMessage();
      }
    });
    const attachments = Object.entries(conv.attachments || {}).map(([name, field]) =>
      h('label', {}, name + ' (' + field + ')', h('textarea', { rows: 3, id: 'attach-' + domName(name), 'data-field': field, 'data-type': 'string', 'aria-label': name })));
    parts.push(h('form', { class: 'stack', id: 'say-form', onsubmit: (ev) => { ev.preventDefault(); sendMessage(); } },
      say, ...attachments,
      h('div', { class: 'row' }, h('button', { class: 'primary', id: 'send', disabled: waiting || busy }, 'Send'),
        h('button', { type: 'button', id: 'cancel', disabled: !busy, onclick: cancelRun }, 'Cancel'),
        waiting && !busy ? h('span', { class: 'muted', id: 'input-waits' }, 'The run goes on first: answer or resume it below.') : null)));
  } else {
    const props = schemaProps(S.flow.input_schema);
    const rows = S.flow.inputs.map((name) => h('label', {}, name, fieldInput(name, props[name])));
    parts.push(h('h2', {}, 'Run'), h('form', { class: 'stack', id: 'run-form', onsubmit: (ev) => { ev.preventDefault(); runWithInput(); } },
      ...rows,
      h('div', { class: 'row' }, h('button', { class: 'primary', id: 'run', disabled: waiting || busy }, 'Run'),
        h('button', { type: 'button', id: 'cancel', disabled: !busy, onclick: cancelRun }, 'Cancel'),
        waiting && !busy ? h('span', { class: 'muted', id: 'input-waits' }, 'The run goes on first: answer or resume it below.') : null)));
  }
  if (st.next && st.next.length && !(st.interrupts && st.interrupts.length)) {
    parts.push(h('div', { class: 'banner' }, 'The last run stopped before ' + st.next.join(', ') + '. ',
      h('button', { id: 'resume', onclick: () => startRun({ resume: true }) }, 'Resume')));
  }
  parts.push(h('div', { id: 'interrupts' }));
  parts.push(optionsBlock());
  parts.push(h('section', { id: 'live' }));
  fill(p, ...parts);
  retype(kept);
  renderInterrupts();
  renderLive();
  const chat = $('chat');
  if (chat) {
    chat.tabIndex = 0;
    chat.scrollTop = chat.scrollHeight;
  }
}

function optionsBlock() {
  const cfg = S.config || [];
  const defaults = {};
  for (const c of cfg) if (c.default !== undefined) defaults[c.name] = c.default;
  const rows = [h('label', {}, 'When the thread is busy', h('select', { id: 'on-busy' },
    h('option', { value: 'reject' }, 'refuse the run'), h('option', { value: 'enqueue' }, 'queue it'), h('option', { value: 'interrupt' }, 'interrupt the running one')))];
  if (cfg.length) {
    rows.push(h('label', {}, 'Run configuration (' + cfg.map((c) => c.name + (c.secret ? ' (secret)' : '')).join(', ') + ')',
      h('textarea', { id: 'config', rows: Math.min(8, cfg.length + 2) }, json(defaults))));
  }
  return h('details', { id: 'options' }, h('summary', {}, 'Run options'), h('div', { class: 'stack' }, ...rows));
}

function runOptions() {
  const out = {};
  const busy = $('on-busy');
  if (busy && busy.value !== 'reject') out.on_busy = busy.value;
  const cfg = $('config');
  if (cfg && cfg.value.trim()) {
    try {
      out.config = JSON.parse(cfg.value);
    } catch (e) {
      throw new Error('the run configuration is not JSON: ' + e.message);
    }
  }
  return out;
}

function newThreadForm() {
  const props = schemaProps(S.flow.state_schema);
  const required = Object.keys(props).filter((k) => !('default' in props[k]) && !S.flow.inputs.includes(k)).sort();
  const rows = required.map((name) => h('label', {}, name + ' (no default)', fieldInput(name, props[name])));
  return h('form', { class: 'stack', id: 'new-thread-form', onsubmit: (ev) => { ev.preventDefault(); createThread(); } },
    h('h2', {}, 'New thread of ' + S.flow.name),
    h('p', { class: 'muted' }, S.flow.description || ''),
    h('label', {}, 'Thread id (empty: a new id)', h('input', { id: 'new-id', autocomplete: 'off', pattern: '[A-Za-z0-9._:\\-]{1,128}' })),
    ...rows,
    h('label', {}, 'Other initial values (JSON object, over the schema\'s defaults)', h('textarea', { id: 'new-values', rows: 6, placeholder: '{}' })),
    h('div', { class: 'row' }, h('button', { class: 'primary', id: 'create' }, 'Create thread')));
}

async function createThread() {
  const form = $('new-thread-form');
  let values;
  try {
    const extra = $('new-values').value.trim();
    values = extra ? JSON.parse(extra) : {};
    Object.assign(values, readFields(form));
  } catch (e) {
    fail(e, 'the initial values');
    return;
  }
  const body = { flow: S.flow.name, values };
  const id = $('new-id').value.trim();
  if (id) body.id = id;
  try {
    const t = await api.post('/v1/threads', body);
    S.threads.unshift(t);
    await selectThread(t.id);
    setStatus('created thread ' + t.id);
  } catch (e) {
    fail(e, 'creating the thread');
  }
}

function sendMessage() {
  const conv = S.flow.conversation;
  const text = $('say').value;
  let input;
  try {
    input = readFields($('say-form'));
  } catch (e) {
    fail(e);
    return;
  }
  input[conv.input] = text;
  $('say').value = '';
  if (text) $('chat').append(h('div', { class: 'msg you' }, text));
  startRun({ input });
}

function runWithInput() {
  let input;
  try {
    input = readFields($('run-form'));
  } catch (e) {
    fail(e);
    return;
  }
  startRun({ input });
}

function nodeOf(ev) {
  return ev.ns ? nsPath(ev.ns) + '/' + ev.node : ev.node;
}

let refreshTimer = null;

function refreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => refreshHistoryOnly().catch(() => {}), 150);
}

async function refreshHistoryOnly() {
  if (!S.thread || S.ns) return;
  const id = S.thread.id;
  const load = ++historyLoads;
  const hist = await api.get('/v1/threads/' + encodeURIComponent(id) + '/history?limit=1000');
  if (load !== historyLoads || S.ns || !S.thread || S.thread.id !== id) return;
  S.checkpoints = hist.checkpoints.slice().reverse();
  renderHistory();
}

// startRun starts a run on the thread shown (or follows one) and shows it
// as it goes. answered names the questions body answers: their drafts go
// once a run has taken the answers (not when the answers were refused).
async function startRun(body, { answered } = {}) {
  if (!S.thread || (S.run && S.run.active)) return;
  let opts;
  try {
    opts = runOptions();
  } catch (e) {
    fail(e);
    return;
  }
  const thread = S.thread.id;
  const run = S.run = { id: null, active: true, status: 'starting', node: '', tokens: '', byNode: {}, steps: [], events: 0, marks: new Map(),
    prev: ['START'], stepNodes: [], taken: [], abort: new AbortController() };
  graphView.clearMarks();
  graphView.mark('START', 'reached', true);
  renderLive();
  setCancel(true);
  setStatus('running on ' + thread);
  const take = (from, to) => {
    graphView.markEdge(from, to);
    run.taken.push([from, to]);
  };
  const mark = (id, cls, on) => {
    graphView.mark(id, cls, on);
    if (on) run.marks.set(id, cls);
    else run.marks.delete(id);
  };
  try {
    await api.stream(thread, { ...body, ...opts }, (type, ev) => {
      run.events++;
      switch (type) {
        case 'run_start':
          run.status = 'running';
          break;
        case 'node_start':
          run.node = nodeOf(ev);
          mark(run.node, 'running', true);
          if (!ev.ns) {
            for (const p of run.prev) take(p, ev.node);
            run.stepNodes.push(ev.node);
          }
          break;
        case 'tool_start':
        case 'tool_end':
          toolEvent(run, type, ev);
          break;
        case 'node_output':
          run.tokens += ev.text;
          run.byNode[nodeOf(ev)] = (run.byNode[nodeOf(ev)] || '') + ev.text;
          run.tokenEvents = (run.tokenEvents || 0) + 1;
          break;
        case 'node_retry':
          // what the attempt streamed is void: the next attempt's
          // output replaces it
          if (run.byNode[nodeOf(ev)]) run.byNode[nodeOf(ev)] = '';
          break;
        case 'node_end':
          mark(nodeOf(ev), 'running', false);
          mark(nodeOf(ev), 'ran', true);
          if (run.node === nodeOf(ev)) run.node = '';
          break;
        case 'node_error':
          if (!ev.handled) {
            mark(nodeOf(ev), 'running', false);
            mark(nodeOf(ev), 'failed', true);
          }
          break;
        case 'state_update':
          if (!ev.ns) {
            if (run.stepNodes.length) run.prev = run.stepNodes;
            run.stepNodes = [];
            run.steps.push({ step: ev.step, checkpoint: ev.checkpoint, fields: ev.fields || Object.keys(ev.update || {}), next: ev.next || [] });
            (run.timeline = run.timeline || []).push({ step: run.steps[run.steps.length - 1] });
            refreshSoon();
          }
          break;
        case 'run_end':
          run.status = ev.interrupt ? 'paused' : 'succeeded';
          if (!ev.interrupt) {
            mark('END', 'reached', true);
            for (const p of run.prev) take(p, 'END');
          }
          break;
        case 'run_error':
          run.status = 'failed';
          run.error = ev.error;
          break;
      }
      renderLive();
    }, run.abort.signal, (id) => { run.id = id; renderLive(); });
  } catch (e) {
    if (!run.abort.signal.aborted) {
      run.status = 'failed';
      run.error = fail(e, 'the run');
    }
  }
  run.active = false;
  clearTimeout(refreshTimer);
  setCancel(false);
  if (run.id && S.thread && S.thread.id === thread) {
    // the run's record says how it ended (a cancelled run's stream ends
    // as a failed one's does); its last event can reach the page before
    // the record is written, so the page waits for the record to end
    const path = '/v1/threads/' + encodeURIComponent(thread) + '/runs/' + encodeURIComponent(run.id);
    try {
      const rec = await api.get(run.abort.signal.aborted ? path : path + '/wait');
      if (rec.status === 'cancelled' || rec.status === 'failed') {
        run.status = rec.status;
        run.error = rec.error || run.error;
      }
    } catch (e) {
      // the events said enough
    }
  }
  if (answered && run.id && run.status !== 'failed' && run.status !== 'cancelled') {
    for (const id of answered) drafts.drop(thread, draftKey('ask', id) + '\n');
  }
  try {
    if (S.thread && S.thread.id === thread) await refreshThread();
  } catch (e) {
    fail(e, 'reading the thread after the run');
  }
  run.settled = true; // the page shows the thread as the run left it
  renderLive();
  if (run.status !== 'failed') setStatus('run ' + (run.id || '') + ' ' + run.status);
}

function setCancel(on) {
  const c = $('cancel');
  if (c) {
    if (on) c.removeAttribute('disabled');
    else c.setAttribute('disabled', '');
  }
  for (const id of ['send', 'run', 'resume', 'answer']) {
    const b = $(id);
    if (!b) continue;
    if (on) b.setAttribute('disabled', '');
    else b.removeAttribute('disabled');
  }
}

async function cancelRun() {
  const run = S.run;
  if (!run || !run.active || !run.id) return;
  try {
    await api.post('/v1/threads/' + encodeURIComponent(S.thread.id) + '/runs/' + encodeURIComponent(run.id) + '/cancel');
    setStatus('cancelling run ' + run.id);
  } catch (e) {
    fail(e, 'cancelling');
  }
}

function renderLive() {
  const summary = $('thread-summary');
  if (summary && S.thread) summary.textContent = '#' + S.thread.checkpoint + ' · ' + threadStatus();
  const live = $('live');
  if (!live) return;
  const run = S.run;
  if (!run) {
    fill(live);
    return;
  }
  const parts = [h('h2', {}, 'Run ' + (run.id || '')),
    h('p', { id: 'run-status', 'data-status': run.status }, run.status + (run.active && run.node ? ' · running ' + run.node : '') + (run.error ? ': ' + run.error : ''))];
  if (run.tokens) {
    parts.push(h('h3', {}, 'Tokens as they came'), h('div', { id: 'tokens' },
      ...Object.entries(run.byNode).map(([n, t]) => h('div', { class: 'tokens', 'data-node': n }, h('strong', {}, n), h('pre', {}, t)))));
  }
  if (run.timeline && run.timeline.length) {
    // the steps as they committed, and the tool calls where they came
    parts.push(h('h3', {}, 'Steps'), h('ol', { class: 'steps', id: 'steps' }, ...run.timeline.map((e) => e.tool ? toolEntry(e.tool) :
      h('li', {}, 'step ' + e.step.step + ' → #' + e.step.checkpoint + ': wrote ' + (e.step.fields.join(', ') || 'nothing') + (e.step.next.length ? '; next ' + e.step.next.join(', ') : '')))));
  }
  fill(live, ...parts);
  // the streaming reply shows in the conversation too
  const chat = $('chat');
  if (chat) {
    // the reply streams into the conversation when the running node
    // writes the conversation's output; otherwise the flow is at work
    let bubble = chat.querySelector('.msg.streaming');
    if (run.active) {
      if (!bubble) {
        bubble = h('div', { class: 'msg flow streaming' });
        chat.append(bubble);
      }
      const out = S.flow.conversation.output;
      const n = run.node && nodeAt(S.graph, run.node);
      const writes = n && (n.node.writes || []).includes(out);
      bubble.classList.toggle('typing', !(writes && run.byNode[run.node]));
      bubble.textContent = writes && run.byNode[run.node] ? run.byNode[run.node] : '… ' + (run.node || 'starting');
      chat.scrollTop = chat.scrollHeight;
    } else if (bubble) bubble.remove();
  }
}

function renderInterrupts() {
  const box = $('interrupts');
  if (!box) return;
  const st = S.state || {};
  const asks = st.interrupts || [];
  // the questions are the thread's whose state this is; a question no
  // longer asked takes its draft with it
  const thread = st.thread || (S.thread && S.thread.id);
  if (thread) drafts.prune(thread, 'ask', (id) => asks.some((a) => a.id === id));
  if (!asks.length) {
    fill(box);
    return;
  }
  // every question the run waits on, at any depth: a question asked
  // inside a subflow or a map's item is named by its path (review/approve,
  // items[2]/approve), answered by its id, and its child's thread can be
  // opened; answering some resumes those, the others wait on
  const forms = asks.map((a) => {
    if (isApproval(a)) return approvalForm(a);
    const path = a.path || a.id;
    const ta = h('textarea', { rows: 3, id: 'answer-' + domName(path), 'data-ask': a.id, 'data-draft': draftKey('ask', a.id, 'answer'), 'aria-label': 'answer to ' + path, placeholder: 'the answer, as JSON (true, "text", {"approve": true})' });
    const ns = childOf(a.id);
    return h('div', { class: 'interrupt', 'data-interrupt': path, 'data-id': a.id },
      h('div', { class: 'row' }, h('strong', {}, path + ' asks'),
        a.id !== path ? h('span', { class: 'muted', title: 'the question\'s id, by which the API answers it' }, a.id) : null,
        h('span', { class: 'spacer' }),
        ns ? h('button', { class: 'child-thread', 'data-ns': ns, 'aria-label': 'Its subflow\'s thread, where ' + path + ' asks', onclick: () => { showTab('history'); openChild(ns); } }, 'Its subflow\'s thread') : null),
      h('pre', {}, json(a.payload)),
      h('label', {}, 'Answer (JSON)', ta));
  });
  const busy = !!(S.run && S.run.active);
  fill(box, h('h2', {}, asks.length > 1 ? asks.length + ' questions waiting for an answer' : 'Waiting for an answer'), ...forms,
    asks.length > 1 ? h('p', { class: 'muted' }, 'Answer any of them: those answered go on, the others keep waiting.') : null,
    h('button', { class: 'primary', id: 'answer', 'data-thread': thread, disabled: busy, onclick: () => answerInterrupts(thread) }, 'Answer and resume'));
  // what was typed before the box was drawn anew is there again
  drafts.watch(box, thread);
}

// domName makes a question's path an element id's part.
function domName(path) {
  return path.replace(/[^A-Za-z0-9_-]+/g, '-');
}

// childOf is the namespace of the child flow's thread a question's id
// was asked in (review:7 of review:7|approve), or '' at the top.
function childOf(id) {
  const i = id.lastIndexOf('|');
  return i < 0 ? '' : id.slice(0, i);
}

// answerInterrupts answers the questions shown, of the thread they were
// shown for, with what their forms hold as the button is pressed.
function answerInterrupts(thread) {
  if (!S.thread || S.thread.id !== thread) {
    // the page moved to another thread while these were shown
    fail(new Error('these questions are ' + thread + '\'s, not the thread shown now: open ' + thread + ' to answer them'));
    return;
  }
  const answers = {};
  for (const box of document.querySelectorAll('#interrupts .interrupt[data-approval]')) {
    try {
      answers[box.dataset.interrupt] = approvalAnswer(box);
    } catch (e) {
      fail(e);
      return;
    }
  }
  for (const ta of document.querySelectorAll('#interrupts textarea[data-ask]')) {
    const v = ta.value.trim();
    if (!v) continue;
    try {
      answers[ta.dataset.ask] = JSON.parse(v);
    } catch (e) {
      answers[ta.dataset.ask] = v; // plain text
    }
  }
  const ids = Object.keys(answers);
  if (!ids.length) {
    // resumed without an answer, the run would ask the same again
    fail(new Error('type an answer to a question first'));
    const first = document.querySelector('#interrupts textarea[data-ask]');
    if (first) first.focus();
    return;
  }
  startRun({ resume: true, answers }, { answered: ids });
}

// --- history ---

async function loadChildHistory() {
  const base = '/v1/threads/' + encodeURIComponent(S.thread.id);
  const load = ++historyLoads;
  const ns = S.ns;
  const hist = await api.get(base + '/history?limit=1000&ns=' + encodeURIComponent(ns));
  if (load !== historyLoads || S.ns !== ns) return;
  S.checkpoints = hist.checkpoints.slice().reverse();
  renderHistory();
}

// few names the first of a list, and how many more.
function few(list) {
  return list.length > 4 ? list.slice(0, 4).join(', ') + ' and ' + (list.length - 4) + ' more' : list.join(', ');
}

function writerKind(name) {
  const n = S.graph && (S.graph.nodes || []).find((x) => x.name === name);
  return n ? n : null;
}

function renderHistory() {
  const p = $('panel-history');
  if (!S.thread) {
    fill(p, h('p', { class: 'muted' }, 'Open a thread (or start one) to see its checkpoints.'));
    return;
  }
  const head = [h('div', { class: 'row' },
    h('strong', {}, S.ns ? 'Subflow ' + S.ns + ' of ' + S.thread.id : 'Thread ' + S.thread.id),
    h('span', { class: 'muted', id: 'history-count' }, S.checkpoints.length + ' checkpoints'),
    h('span', { class: 'spacer' }),
    S.ns ? h('button', { id: 'back-to-thread', onclick: () => { S.ns = ''; S.selected = null; refreshThread().catch((e) => fail(e)); } }, 'Back to ' + S.thread.id) : null)];
  const items = S.checkpoints.map((cp) => {
    const who = (cp.writers || []).map((w) => w.node).join(', ');
    const cls = [S.selected === cp.seq ? 'selected' : '', cp.base ? 'branch' : ''].filter(Boolean).join(' ');
    const li = h('li', { tabindex: 0, 'data-seq': cp.seq, class: cls || null, title: cp.base ? 'a branch: goes on from #' + cp.base : null },
      h('span', { class: 'seq' }, '#' + cp.seq),
      h('span', {}, cp.source + (cp.step ? ' · step ' + cp.step : '') + (cp.base ? ' · from #' + cp.base : '')),
      h('span', { class: 'muted' }, who || few(cp.writes.map((w) => w.field))));
    li.addEventListener('click', () => selectCheckpoint(cp.seq));
    li.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        selectCheckpoint(cp.seq);
      } else if (ev.key === 'ArrowDown' || ev.key === 'ArrowUp') {
        ev.preventDefault();
        const next = ev.key === 'ArrowDown' ? li.nextElementSibling : li.previousElementSibling;
        if (next) next.focus();
      }
    });
    return li;
  });
  const list = h('ol', { class: 'timeline', id: 'timeline', 'data-ns': S.ns, 'aria-label': S.ns ? 'checkpoints of ' + S.ns : 'checkpoints' }, ...items);
  fill(p, ...head.filter(Boolean), list, h('section', { id: 'checkpoint' }), S.ns || S.selected ? null : updateForm(null));
  list.scrollTop = list.scrollHeight;
  if (S.selected) renderCheckpoint();
  else if (graphView && graphView.svg && !(S.run && S.run.active)) graphView.showCheckpoint([], []);
}

async function selectCheckpoint(seq) {
  S.selected = seq;
  S.at = S.ns ? 0 : seq;
  for (const li of document.querySelectorAll('#timeline li')) li.classList.toggle('selected', Number(li.dataset.seq) === seq);
  const old = $('update');
  if (old && !old.closest('#checkpoint')) old.remove();
  await renderCheckpoint();
  if (S.node && S.tab === 'node') renderNode();
}

async function renderCheckpoint() {
  const box = $('checkpoint');
  const cp = S.checkpoints.find((c) => c.seq === S.selected);
  if (!box || !cp) return;
  const base = '/v1/threads/' + encodeURIComponent(S.thread.id) + '/state';
  const ns = S.ns ? '&ns=' + encodeURIComponent(S.ns) : '';
  let now, before;
  try {
    [now, before] = await Promise.all([
      api.get(base + '?at=' + cp.seq + ns),
      cp.parent ? api.get(base + '?at=' + cp.parent + ns) : Promise.resolve({ values: {} }),
    ]);
  } catch (e) {
    fill(box, h('p', { class: 'banner error' }, fail(e, 'reading checkpoint ' + cp.seq)));
    return;
  }
  if (S.selected !== cp.seq) return;
  S.checkpointState = now;
  // the graph shows the step: the nodes that ran in it, those it left
  if (!S.ns && !(S.run && S.run.active)) graphView.showCheckpoint((cp.writers || []).map((w) => w.node), cp.next || []);
  const diff = diffValues(before.values || {}, now.values || {});
  const rows = diff.map((d) => h('tr', { 'data-field': d.field },
    h('td', { class: 'mono' }, d.field), h('td', { class: 'before' }, h('pre', {}, d.before === undefined ? '—' : json(d.before))),
    h('td', { class: 'after' }, h('pre', {}, d.after === undefined ? '—' : json(d.after)))));
  const children = [];
  for (const w of cp.writers || []) {
    const n = writerKind(w.node);
    if (n && n.subflow) {
      children.push(h('button', { class: 'subflow-link', 'data-ns': w.node + ':' + cp.parent, onclick: () => openChild(w.node + ':' + cp.parent) },
        'Open the thread ' + w.node + ' ran (' + n.subflow.name + ')'));
    }
  }
  const actions = S.ns ? [] : [h('button', { class: 'primary', id: 'fork', onclick: () => fork(cp.seq) }, 'Fork from #' + cp.seq),
    h('button', { id: 'replay', title: 'A new thread from #' + cp.seq + ' that runs what was next there, told the model\'s recorded replies', onclick: () => replay(cp.seq) }, 'Replay from here'),
    h('label', { class: 'row', title: 'Ask the model again instead of telling the nodes its recorded replies' }, h('input', { type: 'checkbox', id: 'replay-model' }), 'ask the model'),
    h('button', { id: 'prompt-here', onclick: () => { S.at = cp.seq; showTab('node'); renderNode(); } }, 'Render prompts here')];
  const origin = cp.source === 'fork' && cp.run ? 'forked from ' + cp.run.replace(/@(\d+)$/, ' #$1') : cp.base ? 'a branch: goes on from #' + cp.base : '';
  fill(box,
    h('h2', {}, 'Checkpoint #' + cp.seq),
    h('dl', { class: 'kv' },
      h('dt', {}, 'step'), h('dd', {}, String(cp.step)),
      h('dt', {}, 'source'), h('dd', {}, cp.source + (cp.run ? ' (run ' + cp.run + ')' : '')),
      h('dt', {}, 'time'), h('dd', {}, new Date(cp.time).toLocaleString()),
      h('dt', {}, 'nodes'), h('dd', {}, (cp.writers || []).map((w) => w.node + ((w.fields || []).length ? ' → ' + w.fields.join(', ') : ' (wrote nothing)')).join('; ') || '—'),
      h('dt', {}, 'next'), h('dd', { id: 'checkpoint-next' }, (cp.next || []).join(', ') || '—'),
      origin ? h('dt', {}, 'from') : null, origin ? h('dd', { id: 'checkpoint-origin' }, origin) : null,
      (cp.replies || []).length ? h('dt', {}, 'model replies') : null,
      (cp.replies || []).length ? h('dd', {}, cp.replies.map((r) => r.node).join(', ') + ' (recorded: a replay tells them again)') : null),
    h('div', { class: 'row' }, ...actions, ...children),
    S.ns ? null : updateForm(cp),
    h('h3', {}, diff.length ? 'Changed since #' + (cp.parent || 0) : 'Nothing changed since #' + (cp.parent || 0)),
    diff.length ? h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'what changed' },
      h('table', { class: 'diff', id: 'diff' }, h('tr', {}, h('th', {}, 'field'), h('th', {}, 'before'), h('th', {}, 'after')), ...rows)) : null,
    h('details', {}, h('summary', {}, 'The whole state at #' + cp.seq), h('pre', { id: 'checkpoint-state' }, json(now.values))));
}

async function openChild(ns) {
  S.ns = ns;
  S.selected = null;
  try {
    await loadChildHistory();
    setStatus('subflow thread ' + ns);
  } catch (e) {
    S.ns = '';
    fail(e, 'opening the subflow\'s thread');
  }
}

async function fork(seq) {
  try {
    const t = await api.post('/v1/threads/' + encodeURIComponent(S.thread.id) + '/fork', { at: seq });
    S.threads.unshift(t);
    const from = S.thread.id;
    await selectThread(t.id);
    setStatus('forked ' + t.id + ' from ' + from + ' #' + seq);
    S.forked = { from, at: seq, thread: t.id };
  } catch (e) {
    fail(e, 'forking');
  }
}

// updateForm edits the state as a node would write it: at checkpoint cp
// (a branch from there, which keeps its unfinished run), or at the
// newest when cp is null. "Edit and continue" resumes the run it keeps.
// What is typed in it stays while the history is drawn anew (as a run's
// steps come in), until the edit is made.
function updateForm(cp) {
  const nodes = (S.graph.nodes || []).map((n) => n.name);
  const at = cp ? cp.seq : 0;
  const next = cp ? cp.next || [] : (S.state && S.state.next) || [];
  const title = cp ? 'Edit the state at #' + cp.seq + ' (as if a node had written it)' : 'Edit the state (as if a node had written it)';
  const key = (field) => draftKey('update', String(at), field);
  return drafts.watch(h('details', { id: 'update', 'data-at': at, 'data-draft': key('open') }, h('summary', {}, title),
    h('form', { class: 'stack', onsubmit: (ev) => { ev.preventDefault(); updateState(at, false); } },
      h('label', {}, 'As node', h('select', { id: 'update-as', 'data-draft': key('as') }, ...nodes.map((n) => h('option', { value: n }, n)))),
      h('label', {}, 'Values (JSON object of fields the node writes)', h('textarea', { id: 'update-values', rows: 4, placeholder: '{"field": "value"}', 'data-draft': key('values') })),
      cp && S.checkpoints.length && cp.seq !== S.checkpoints[S.checkpoints.length - 1].seq
        ? h('p', { class: 'muted' }, 'The edit is a branch: a checkpoint after the newest that goes on from #' + cp.seq + '; the checkpoints between stay in the history.') : null,
      h('div', { class: 'row' }, h('button', { class: 'primary', id: 'update-button' }, 'Update'),
        next.length ? h('button', { type: 'button', id: 'update-continue', title: 'Edit, then run ' + next.join(', ') + ' and on from there', onclick: () => updateState(at, true) }, 'Edit and continue from here') : null,
        !cp && next.length ? h('button', { type: 'button', onclick: () => { showTab('run'); startRun({ resume: true }); } }, 'Resume') : null))), S.thread.id);
}

async function updateState(at, resume) {
  let values;
  try {
    values = JSON.parse($('update-values').value || '{}');
  } catch (e) {
    fail(e, 'the values');
    return;
  }
  const body = { as: $('update-as').value, values };
  if (at) body.at = at;
  try {
    const st = await api.post('/v1/threads/' + encodeURIComponent(S.thread.id) + '/update', body);
    drafts.drop(S.thread.id, draftKey('update', String(at)) + '\n');
    setStatus('updated the state: checkpoint #' + st.checkpoint + (at && at !== st.checkpoint - 1 ? ', a branch of #' + at : ''));
    S.updated = { checkpoint: st.checkpoint, at };
    S.selected = null;
    await refreshThread();
    if (resume) {
      showTab('run');
      await startRun({ resume: true });
    }
  } catch (e) {
    fail(e, 'updating the state');
  }
}

// replay forks the thread at seq and follows the run that replays it.
async function replay(seq) {
  const model = $('replay-model') && $('replay-model').checked;
  try {
    const from = S.thread.id;
    const out = await api.post('/v1/threads/' + encodeURIComponent(from) + '/replay', { at: seq, replies: model ? 'model' : 'recorded' });
    S.threads.unshift(out.thread);
    await selectThread(out.thread.id);
    S.replayed = { from, at: seq, thread: out.thread.id, run: out.run ? out.run.id : null };
    setStatus('replaying ' + from + ' from #' + seq + ' on ' + out.thread.id);
    if (out.run) {
      showTab('run');
      await startRun({ follow: out.run.id });
    }
  } catch (e) {
    fail(e, 'replaying');
  }
}

// saveFlowTest makes a flow test of the thread, saved beside its flow
// when the key may change the flows, shown otherwise.
async function saveFlowTest() {
  const box = $('flow-test-result');
  const save = !!(S.session && S.session.edits);
  try {
    fill(box, h('p', { class: 'muted' }, 'making a flow test of ' + S.thread.id + '…'));
    const res = await api.post('/v1/threads/' + encodeURIComponent(S.thread.id) + '/flow-test', { save, replace: true });
    S.flowTest = res;
    const said = (res.saved ? 'Saved ' + res.path + (res.cassette_path ? ' and its cassette ' + res.cassette_path : '') : 'Made ' + res.path + ' (this key may not save beside the flows: copy it)') +
      (res.passed ? '; it passes offline.' : '; it does not pass as made.') + (res.unasserted && res.unasserted.length ? ' Not asserted (they come out otherwise each run): ' + res.unasserted.join(', ') + '.' : '');
    fill(box, h('div', { class: 'banner ' + (res.passed ? 'ok' : 'error'), role: 'status' }, said),
      h('details', {}, h('summary', {}, res.path), h('pre', { id: 'flow-test-text' }, res.text)));
    setStatus('flow test ' + res.path);
  } catch (e) {
    fill(box, h('div', { class: 'banner error', role: 'alert' }, fail(e, 'making a flow test')));
  }
}

// --- the node panel ---

function fileByPath(suffix) {
  if (!S.files) return null;
  return S.files.files.find((f) => f.path === suffix || f.path.endsWith('/' + suffix)) || null;
}

function fileText(f) {
  return f ? (S.edits[f.path] ?? f.text) : '';
}

async function renderNode() {
  const p = $('panel-node');
  const id = S.node;
  const found = id && nodeAt(S.shownGraph || S.graph, id);
  if (!found) {
    fill(p, h('p', { class: 'muted' }, 'Select a node in the graph (click it, or Tab to it and press Enter).'));
    return;
  }
  const { node: n, graph: owner } = found;
  const main = S.files && S.files.files[0];
  const file = owner.path ? fileByPath(owner.path) : main;
  const src = fileText(file);
  const block = src && n.line ? nodeBlock(src, n.line) : '';
  const fields = Object.keys(schemaProps(S.flow.state_schema));
  const promptRef = promptName(block);
  const promptFile = promptRef ? fileByPath(promptRef.endsWith('.prompt') ? promptRef.replace(/^\.\//, '') : promptRef + '.prompt') : null;
  const reads = readsOf(block + '\n' + fileText(promptFile), fields);
  const parts = [h('h2', {}, n.name + ' ', h('span', { class: 'muted' }, '(' + n.kind + ')'))];
  if (n.description) parts.push(h('p', {}, n.description));
  const marks = [n.asks && 'asks a question (pauses the run for an answer)', n.interrupt_before && 'pauses the run before it', n.interrupt_after && 'pauses the run after it', n.cached && 'caches its writes'].filter(Boolean);
  parts.push(h('dl', { class: 'kv', id: 'node-facts' },
    h('dt', {}, 'file'), h('dd', {}, (file ? file.path : '') + ':' + n.line + ' ', file ? h('button', { onclick: () => { openFile(file.path); editor.goto(n.line, 1); } }, 'Edit') : null),
    h('dt', {}, 'writes'), h('dd', { id: 'node-writes' }, (n.writes || []).join(', ') || '—'),
    h('dt', {}, 'reads'), h('dd', { id: 'node-reads' }, reads.join(', ') || '—'),
    marks.length ? h('dt', {}, 'marks') : null, marks.length ? h('dd', {}, marks.join('; ')) : null));
  if (n.subflow || n.map) {
    parts.push(h('div', { class: 'row' }, h('button', { id: 'toggle-expand', onclick: () => toggleExpand(id) },
      S.expanded.has(id) ? 'Fold in the graph' : 'Expand in the graph'),
      n.subflow && S.flows.some((f) => f.name === n.subflow.name) ? h('button', { onclick: () => { $('flow').value = n.subflow.name; loadFlow(n.subflow.name, ''); } }, 'Open flow ' + n.subflow.name) : null));
    if (n.map) parts.push(h('p', {}, 'Runs ', h('code', {}, n.map.node ? n.map.node.kind : ''), ' for each item of ', h('code', {}, n.map.items), ', ' + n.map.max_concurrency + ' at a time.'));
  }
  if (block) parts.push(h('h3', {}, 'Settings'), h('pre', { id: 'node-settings' }, block));
  if (promptFile) {
    parts.push(h('h3', {}, 'Prompt file ' + promptFile.path), h('pre', { id: 'node-prompt' }, fileText(promptFile)));
  }
  const rendered = h('section', { id: 'node-rendered' });
  if (promptRef && !id.includes('/')) parts.push(rendered);
  fill(p, ...parts);
  if (promptRef && !id.includes('/')) {
    const q = new URLSearchParams();
    if (S.thread) q.set('thread', S.thread.id);
    if (S.thread && S.at) q.set('at', String(S.at));
    const over = S.thread ? 'thread ' + S.thread.id + (S.at ? ' at #' + S.at : ' now') : 'the flow\'s defaults';
    fill(rendered, h('h3', {}, 'Rendered over ' + over), h('p', { class: 'muted' }, 'rendering…'));
    try {
      const pv = await api.get('/v1/flows/' + encodeURIComponent(S.flow.name) + '/nodes/' + encodeURIComponent(n.name) + '/prompt?' + q);
      if (S.node !== id) return;
      fill(rendered, h('h3', {}, 'Rendered over ' + over + ' — ' + pv.title),
        ...pv.sections.map((s) => h('div', {}, h('strong', {}, s.name), h('pre', {}, s.text))));
    } catch (e) {
      fill(rendered, h('h3', {}, 'Rendered over ' + over), h('p', { class: 'banner error' }, e.message));
    }
  }
}

// --- the state panel ---

function renderState() {
  const p = $('panel-state');
  const f = S.flow;
  const props = schemaProps(f.state_schema);
  const src = S.files && S.files.files[0] ? fileText(S.files.files[0]) : '';
  const reducers = reducersOf(src);
  const writers = {};
  for (const n of S.graph.nodes || []) for (const w of n.writes || []) (writers[w] = writers[w] || []).push(n.name);
  const typeOf = (s) => Array.isArray(s.type) ? s.type.join(' | ') : s.type || 'any';
  const rows = Object.keys(props).sort().map((k) => h('tr', { 'data-field': k },
    h('td', { class: 'mono' }, k),
    h('td', {}, typeOf(props[k]) + (props[k].items && props[k].items.type ? ' of ' + typeOf(props[k].items) : '')),
    h('td', { class: 'mono' }, 'default' in props[k] ? json(props[k].default, 0) : '—'),
    h('td', {}, reducers[k] || 'replace'),
    h('td', {}, f.inputs.includes(k) ? 'input' : ''),
    h('td', {}, (writers[k] || []).join(', '))));
  const conv = f.conversation;
  fill(p,
    h('h2', {}, 'State of ' + f.name),
    h('p', { class: 'muted' }, (f.description || '') + ' '),
    conv ? h('p', {}, 'A conversation: a message goes to ', h('code', {}, conv.input), ', the reply is ', h('code', {}, conv.output), '.') : null,
    h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'the state\'s fields' },
      h('table', { id: 'state-schema' }, h('tr', {}, ...['field', 'type', 'default', 'reducer', 'input', 'written by'].map((t) => h('th', {}, t))), ...rows)));
}

// --- the editor ---

function setupFiles() {
  const sel = $('file');
  fill(sel, ...S.files.files.map((f) => h('option', { value: f.path }, f.path + ' (' + f.role + ')')));
  editor.reset();
  openFile(S.files.files[0].path, true);
  const banner = $('editor-banner');
  fill(banner);
  const save = $('save');
  save.removeAttribute('disabled');
  if (!S.files.writable) banner.append(h('div', { class: 'banner', id: 'read-only' }, 'Saving is off: ' + S.files.read_only));
  else if (S.session && !S.session.edits) {
    banner.append(h('div', { class: 'banner', id: 'read-only' }, 'Saving is off: this key may not change the flows (an admin key may, or the studio trellis studio opens). Edits are checked as you type.'));
    save.setAttribute('disabled', '');
  }
}

function openFile(path, quiet) {
  const f = S.files.files.find((x) => x.path === path);
  if (!f) return;
  $('file').value = path;
  editor.setFile(path, S.edits[path] ?? f.text);
  showDiagnostics();
  if (!quiet && S.tab !== 'editor') showTab('editor');
}

let checkTimer = null;

let edits = 0;

function onEdit(path, text) {
  edits++;
  S.pending = true;
  const f = S.files.files.find((x) => x.path === path);
  if (f && text === f.text) delete S.edits[path];
  else S.edits[path] = text;
  markDirty();
  clearTimeout(checkTimer);
  $('check-state').textContent = 'checking…';
  checkTimer = setTimeout(check, 350);
}

function markDirty() {
  for (const o of $('file').options) o.classList.toggle('dirty', o.value in S.edits);
  $('file').classList.toggle('dirty', Object.keys(S.edits).length > 0);
}

function editList() {
  return Object.entries(S.edits).map(([path, text]) => ({ path, text }));
}

async function check() {
  if (!S.flow) return;
  const n = ++S.checks;
  const seen = edits;
  S.checking = true;
  try {
    const res = await api.post('/v1/flows/' + encodeURIComponent(S.flow.name) + '/check', { files: editList() });
    if (n !== S.checks) return;
    S.diagnostics = res.diagnostics;
    S.config = res.config || [];
    S.valid = res.valid;
    const errors = res.diagnostics.filter((d) => d.severity === 'error').length;
    const warnings = res.diagnostics.length - errors;
    const plural = (n, w) => n + ' ' + w + (n === 1 ? '' : 's');
    $('check-state').textContent = errors + warnings ? plural(errors, 'error') + ', ' + plural(warnings, 'warning') : 'no problems';
    showDiagnostics();
    const edited = Object.keys(S.edits).length > 0;
    if (res.valid && res.graph) {
      if (edited) drawGraph(res.graph, true);
      else if (S.graphEdited) drawGraph(S.graph, false);
    } else if (!res.valid && edited) {
      $('graph-note').textContent = 'the edited text does not compile: the graph shows the last that did';
    }
    const opts = $('options');
    if (opts && !opts.open && !$('config') && S.config.length) opts.replaceWith(optionsBlock());
  } catch (e) {
    if (n === S.checks) fail(e, 'checking the flow');
  } finally {
    if (n === S.checks) {
      S.checking = false;
      if (seen === edits) S.pending = false;
    }
  }
}

function showDiagnostics() {
  const cur = editor.current();
  editor.showDiagnostics(S.diagnostics.filter((d) => d.file === cur));
  const list = $('diagnostics');
  if (!S.diagnostics.length) {
    fill(list, h('li', { class: 'ok' }, Object.keys(S.edits).length ? 'The edited flow compiles with no problems.' : 'No problems.'));
    return;
  }
  fill(list, ...S.diagnostics.map((d) => {
    const fix = d.suggestion && d.end_col ? h('button', { class: 'fix', 'data-suggestion': d.suggestion, onclick: (ev) => {
      ev.stopPropagation();
      if (editor.current() !== d.file) openFile(d.file);
      editor.fix(d);
    } }, 'Use "' + d.suggestion + '"') : null;
    const li = h('li', { class: d.severity, tabindex: 0, 'data-code': d.code, 'data-file': d.file, 'data-line': d.line },
      h('span', { class: 'mono' }, d.file + ':' + d.line + ':' + d.col + ' '), d.severity + '[' + d.code + ']: ' + d.message +
      (d.suggestion ? '; did you mean "' + d.suggestion + '"? ' : ' '), fix);
    const go = () => {
      if (editor.current() !== d.file) openFile(d.file);
      editor.goto(d.line, d.col);
    };
    li.addEventListener('click', go);
    li.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') go(); });
    return li;
  }));
}

async function save() {
  const edits = Object.entries(S.edits).map(([path, text]) => ({ path, text, base: S.files.files.find((f) => f.path === path).hash }));
  const banner = $('editor-banner');
  const say = (cls, text) => {
    const b = h('div', { class: 'banner ' + cls, id: 'save-result', role: 'alert' }, text);
    const old = $('save-result');
    if (old) old.replaceWith(b);
    else banner.append(b);
    S.saved = { ok: cls === 'ok', text };
  };
  if (!edits.length) {
    say('', 'Nothing to save: no file was edited.');
    return;
  }
  try {
    const res = await api.put('/v1/flows/' + encodeURIComponent(S.flow.name) + '/files', { files: edits });
    const name = S.flow.name;
    S.flows = (await api.get('/v1/flows')).flows;
    const [flow, graph] = await Promise.all([api.get('/v1/flows/' + encodeURIComponent(name)), api.get('/v1/flows/' + encodeURIComponent(name) + '/graph')]);
    showVersion(flow);
    S.flow = flow;
    S.graph = graph;
    const current = editor.current();
    S.files.files = res.files;
    S.edits = {};
    for (const f of res.files) editor.replace(f.path, f.text);
    if (current) editor.setFile(current, res.files.find((f) => f.path === current).text);
    markDirty();
    drawGraph(graph, false);
    renderState();
    say('ok', 'Saved ' + edits.map((e) => e.path).join(', ') + '; the server\'s flows were reloaded.');
    setStatus('saved ' + name);
    check();
  } catch (e) {
    if (e instanceof APIError && e.details && e.details.diagnostics) {
      S.diagnostics = e.details.diagnostics;
      showDiagnostics();
    }
    say('error', 'Not saved — ' + (e instanceof APIError ? e.code + ': ' : '') + e.message);
    setStatus('not saved', true);
  }
}

function revert() {
  S.edits = {};
  const current = editor.current();
  editor.reset();
  openFile(current || S.files.files[0].path);
  markDirty();
  check();
}

// --- start ---

function boot() {
  setupTabs();
  graphView = new GraphView($('graph'), {
    onSelect: (id) => {
      S.node = id;
      showTab('node');
      renderNode();
    },
    onToggle: toggleExpand,
  });
  editor = createEditor($('editor'), {
    onChange: onEdit,
    onSave: save,
    getSchema: () => S.schema,
    getNames: () => (S.shownGraph ? (S.shownGraph.nodes || []).map((n) => n.name) : []),
  });
  S.editor = editor;
  S.graphView = graphView;
  evalsPanel = new EvalsPanel($('panel-evals'), {
    api: () => api,
    flow: () => S.flow,
    status: (text) => setStatus(text),
    fail,
  });
  S.evals = evalsPanel.state;
  const schemaAt = document.querySelector('meta[name=trellis-schema]');
  fetch(schemaAt ? schemaAt.content : '/studio/flow.schema.json').then((r) => r.json()).then((s) => { S.schema = s; }).catch(() => {});
  $('flow').addEventListener('change', (ev) => loadFlow(ev.target.value, ''));
  $('thread').addEventListener('change', (ev) => selectThread(ev.target.value));
  $('new-thread').addEventListener('click', () => { selectThread(''); showTab('run'); const f = $('new-id'); if (f) f.focus(); });
  $('fit').addEventListener('click', () => { const on = graphView.toggleFit(); $('fit').setAttribute('aria-pressed', on ? 'true' : 'false'); });
  $('fit').setAttribute('aria-pressed', 'false');
  $('expand').addEventListener('click', expandAll);
  $('file').addEventListener('change', (ev) => openFile(ev.target.value, true));
  $('save').addEventListener('click', save);
  $('revert').addEventListener('click', revert);
  $('sign-out').addEventListener('click', signOut);
  $('sign-in-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const key = $('key').value.trim();
    if (!key) return;
    $('sign-in').close();
    $('key').value = '';
    if (key.startsWith('trs_')) {
      exchange(key);
      return;
    }
    sessionStorage.setItem(keyStore, key);
    start(key);
  });
  $('sign-in').addEventListener('cancel', (ev) => ev.preventDefault());
  window.addEventListener('resize', () => graphView.applyFit());
  signIn().catch((e) => fail(e, 'starting'));
}

boot();
