// The studio's Evals panel: the datasets (*.eval.yaml) of the server's
// flows directory that evaluate the flow shown, an eval started on one
// (POST /v1/evals), the flow's evals the server keeps, newest first, and
// one of them opened: each case's status, pass rate, scores and failures
// with their reasons, and the transcript of each of its runs (what was
// said, what the flow replied, the nodes each turn took).
import { APIError } from './api.js';
import { h, fill, json } from './util.js';

// the statuses an eval has not ended in
const going = (s) => s === 'queued' || s === 'running';

export class EvalsPanel {
  // ctx gives the panel the API client (api()), the flow shown (flow()),
  // and the page's status line (status(text), fail(error, doing)).
  constructor(panel, ctx) {
    this.p = panel;
    this.ctx = ctx;
    this.state = { flow: '', datasets: [], evals: [], open: null, loaded: false, error: '' };
    this.poll = null;
    this.visible = false;
    this.loads = 0;
    // what the start form holds: the panel is drawn anew while an eval
    // runs (twice a second), and a choice half made must outlive that
    this.chosen = { dataset: '', repeat: '1' };
  }

  // show loads the flow's datasets and evals (again) and draws them.
  async show() {
    this.visible = true;
    const f = this.ctx.flow();
    const load = ++this.loads;
    const st = this.state;
    if (st.flow !== (f ? f.name : '')) {
      st.open = null;
      st.loaded = false;
    }
    st.flow = f ? f.name : '';
    this.draw();
    try {
      const api = this.ctx.api();
      const [ds, list] = await Promise.all([api.get('/v1/evals/datasets'), api.get('/v1/evals?limit=100')]);
      if (load !== this.loads) return;
      st.datasets = ds.datasets.filter((d) => d.flow === st.flow);
      st.evals = list.evals.filter((e) => e.flow === st.flow);
      st.loaded = true;
      st.error = '';
    } catch (e) {
      if (load !== this.loads) return;
      st.error = this.ctx.fail(e, 'listing the evals');
    }
    this.draw();
    if (st.open) await this.open(st.open.id);
  }

  draw() {
    const st = this.state;
    if (!st.flow) {
      fill(this.p, h('p', { class: 'muted' }, 'Open a flow to see its evals.'));
      return;
    }
    fill(this.p,
      h('h2', {}, 'Evals of ' + st.flow),
      st.error ? h('p', { class: 'banner error', role: 'alert' }, st.error) : null,
      this.startForm(),
      this.list(),
      h('section', { id: 'eval', 'aria-live': 'polite' }, st.open ? this.report(st.open) : null));
  }

  startForm() {
    const st = this.state;
    if (!st.loaded) return h('p', { class: 'muted' }, 'loading the datasets');
    if (!st.datasets.length) {
      return h('p', { class: 'muted', id: 'eval-none' }, 'No dataset of the flows directory evaluates ' + st.flow +
        ' (a *.eval.yaml file beside it whose flow is its file).');
    }
    const sel = h('select', { id: 'eval-dataset', 'aria-label': 'Dataset' },
      ...st.datasets.map((d) => h('option', { value: d.path, disabled: d.error ? true : null },
        d.path + ' (' + d.cases.length + ' cases)' + (d.error ? ': ' + d.error : ''))));
    if (st.datasets.some((d) => d.path === this.chosen.dataset && !d.error)) sel.value = this.chosen.dataset;
    sel.addEventListener('change', () => { this.chosen.dataset = sel.value; });
    const repeat = h('input', { id: 'eval-repeat', type: 'number', min: 1, max: 20, value: this.chosen.repeat, 'aria-label': 'Runs per case', style: 'width:4.5rem' });
    repeat.addEventListener('input', () => { this.chosen.repeat = repeat.value; });
    const form = h('form', { id: 'eval-form', class: 'row' },
      h('label', {}, 'Dataset ', sel),
      h('label', {}, 'Runs per case ', repeat),
      h('button', { id: 'eval-start', class: 'primary', type: 'submit' }, 'Run eval'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      this.start(sel.value, Number(repeat.value) || 1);
    });
    const d = st.datasets.find((x) => x.path === sel.value);
    return h('div', {}, form, d && d.description ? h('p', { class: 'muted' }, d.description) : null);
  }

  async start(dataset, repeat) {
    const btn = this.p.querySelector('#eval-start');
    if (btn) btn.disabled = true;
    try {
      const e = await this.ctx.api().post('/v1/evals', { dataset, repeat });
      this.ctx.status('started an eval of ' + dataset);
      this.state.open = e;
      await this.show();
    } catch (e) {
      this.ctx.fail(e, 'starting an eval of ' + dataset);
      if (btn) btn.disabled = false;
    }
  }

  list() {
    const st = this.state;
    if (!st.loaded) return null;
    if (!st.evals.length) return h('p', { class: 'muted', id: 'eval-list-empty' }, 'No eval of ' + st.flow + ' yet.');
    const rows = st.evals.map((e) => {
      const open = h('button', { class: 'link', 'data-eval': e.id, 'aria-pressed': st.open && st.open.id === e.id ? 'true' : 'false', onclick: () => this.open(e.id) },
        e.dataset);
      return h('tr', { 'data-eval': e.id, class: 'eval-' + e.status },
        h('td', {}, open),
        h('td', { class: 'mono' }, (e.flow_version || '').slice(0, 8)),
        h('td', {}, h('span', { class: 'status-' + e.status }, e.status)),
        h('td', {}, summaryText(e.summary)),
        h('td', { class: 'muted' }, new Date(e.created).toLocaleString()));
    });
    return h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'the flow\'s evals' },
      h('table', { id: 'evals' },
        h('colgroup', {}, ...[28, 14, 14, 26, 18].map((w) => h('col', { style: 'width:' + w + '%' }))),
        h('tr', {}, ...['dataset', 'version', 'status', 'cases', 'started'].map((t) => h('th', {}, t))),
        ...rows));
  }

  // open reads an eval with its report and draws it, reading it again
  // while it runs.
  async open(id) {
    clearTimeout(this.poll);
    const load = this.loads;
    let e;
    try {
      e = await this.ctx.api().get('/v1/evals/' + encodeURIComponent(id));
    } catch (err) {
      if (err instanceof APIError && err.status === 404) this.state.open = null;
      this.ctx.fail(err, 'reading eval ' + id);
      return;
    }
    if (load !== this.loads) return;
    const st = this.state;
    st.open = e;
    const i = st.evals.findIndex((x) => x.id === e.id);
    if (i >= 0) st.evals[i] = { ...e, report: undefined };
    this.draw();
    if (going(e.status) && this.visible) this.poll = setTimeout(() => this.open(id), 500);
  }

  report(e) {
    const head = h('div', { class: 'row' },
      h('h3', { id: 'eval-title' }, 'Eval ' + e.id + ' of ' + e.dataset),
      h('span', { id: 'eval-status', class: 'status-' + e.status }, e.status),
      h('span', { class: 'muted' }, summaryText(e.summary)));
    if (e.error) return h('div', {}, head, h('p', { class: 'banner error' }, e.error));
    const r = e.report;
    if (!r) return h('div', {}, head, h('p', { class: 'muted' }, going(e.status) ? 'running its cases' : 'no report'));
    const cases = r.cases.map((c) => this.caseBlock(c, r));
    const ranks = (r.rankings || []).map((k) => {
      const res = (k.results || [])[0] || {};
      const order = k.order.map((name, i) => name + (res.values && res.values[i] !== null && res.values[i] !== undefined ? ' (' + fmt(res.values[i]) + ')' : '')).join(' > ');
      return h('li', { class: 'ranking', 'data-status': k.status }, h('strong', { class: 'status-' + k.status }, k.status), ' by ' + k.by + ': ' + order,
        res.reason ? h('div', { class: 'muted' }, res.reason) : null,
        k.xfail ? h('div', { class: 'muted' }, 'known failure: ' + k.xfail) : null);
    });
    return h('div', {}, head,
      h('p', { class: 'muted' }, r.versions.map((v) => v.label + (v.flow_version && !v.label.includes(v.flow_version.slice(0, 8)) ? ' ' + v.flow_version.slice(0, 8) : '') + (v.error ? ' (' + v.error + ')' : '')).join(' against '),
        ' · ' + r.repeat + (r.repeat === 1 ? ' run' : ' runs') + ' per case · ' + (r.took_ms / 1000).toFixed(1) + ' s'),
      h('div', { id: 'eval-cases' }, ...cases),
      ranks.length ? h('h3', {}, 'Rankings') : null,
      ranks.length ? h('ul', { class: 'steps' }, ...ranks) : null);
  }

  caseBlock(c, r) {
    const res = c.results[0] || {};
    const scores = (res.scores || []).map((s) => s.name + ' ' + fmt(s.value)).join(', ');
    const failing = res.status !== 'passed';
    const det = h('details', { class: 'eval-case', 'data-status': c.status, 'data-case': c.name, open: failing ? true : null },
      h('summary', {},
        h('strong', { class: 'case-status status-' + c.status }, c.status), ' ',
        h('span', { class: 'case-name' }, c.name), ' ',
        h('span', { class: 'muted' }, res.passed + '/' + res.runs + (scores ? ' · ' + scores : '') + (c.regressed ? ' · regressed' : ''))),
      c.description ? h('p', { class: 'muted' }, c.description) : null,
      c.xfail ? h('p', { class: 'banner' }, 'Known failure: ' + c.xfail) : null,
      res.reason && !(res.failures || []).length ? h('p', {}, res.reason) : null,
      (res.failures || []).length ? h('ul', { class: 'failures' }, ...res.failures.map((f) =>
        h('li', { class: 'failure' }, h('span', { class: 'mono' }, f.pos), ' ', h('strong', {}, f.check), ': ', f.reason,
          res.runs > 1 ? ' (' + f.runs + ' of ' + res.runs + ' runs)' : '',
          f.xfail ? h('span', { class: 'muted' }, ' [known failure: ' + f.xfail + ']') : null))) : null,
      (res.scores || []).length ? h('div', { class: 'scroll', tabindex: 0, role: 'region', 'aria-label': 'scores of ' + c.name },
        h('table', { class: 'eval-scores' },
          h('tr', {}, ...['score', 'kind', 'value', 'want', r.versions.length > 1 ? r.versions[1].label : null].filter(Boolean).map((t) => h('th', {}, t))),
          ...res.scores.map((s, i) => {
            const old = c.results[1] && (c.results[1].scores || [])[i];
            return h('tr', {}, h('td', {}, s.name), h('td', {}, s.kind), h('td', {}, fmt(s.value)), h('td', { class: 'mono' }, s.want || ''),
              r.versions.length > 1 ? h('td', {}, old ? fmt(old.value) + ' (' + delta(s.value - old.value) + ')' : '') : null);
          }))) : null,
      ...(res.repeats || []).map((run, i) => this.runBlock(run, i, res.repeats.length)));
    return det;
  }

  runBlock(run, i, n) {
    const turns = (run.turns || []).map((t) => {
      const said = t.message || (t.input && Object.keys(t.input).length ? json(t.input, 0) : '') || (t.answers ? json(t.answers, 0) : '');
      const path = (t.path || []).map((step) => step.join(' + ')).join(' → ');
      return [
        said ? h('div', { class: 'msg you' }, said) : null,
        t.reply ? h('div', { class: 'msg flow' }, t.reply) : null,
        h('div', { class: 'muted path' }, 'turn ' + t.turn + (path ? ': ' + path : '') + ((t.paused || []).length ? ' · paused at ' + t.paused.join(', ') : '') +
          (t.degraded ? ' · fallback in ' + Object.keys(t.degraded).join(', ') : '')),
        t.error ? h('p', { class: 'banner error' }, t.error) : null,
      ];
    });
    const failed = (run.checks || []).filter((c) => !c.passed);
    return h('section', { class: 'eval-run', 'aria-label': 'run ' + (i + 1) + ' of ' + n },
      h('h4', {}, (n > 1 ? 'Run ' + (i + 1) + ': ' : 'Transcript: ') + (run.passed ? 'passed' : 'failed') +
        ' (' + (run.checks || []).length + ' checks, ' + failed.length + ' failed)'),
      run.error ? h('p', { class: 'banner error' }, run.error) : null,
      h('div', { class: 'chat transcript' }, ...turns.flat()),
      run.output ? h('details', {}, h('summary', {}, 'Output'), h('pre', {}, run.output)) : null);
  }

  // hide stops reading a running eval again.
  hide() {
    this.visible = false;
    clearTimeout(this.poll);
  }
}

function fmt(v) {
  return Number.isInteger(v) ? String(v) : Number(v).toFixed(2).replace(/0$/, '');
}

function delta(d) {
  return (d > 0 ? '+' : d < 0 ? '−' : '±') + fmt(Math.abs(d));
}

function summaryText(s) {
  if (!s) return '';
  const parts = [s.passed + ' of ' + s.cases + ' passed'];
  if (s.failed) parts.push(s.failed + ' failed');
  if (s.xfail) parts.push(s.xfail + ' known failures');
  if (s.xpass) parts.push(s.xpass + ' passing though marked xfail');
  if (s.errors) parts.push(s.errors + ' errors');
  if (s.regressed) parts.push(s.regressed + ' regressed');
  if (s.rankings_failed) parts.push(s.rankings_failed + ' of ' + s.rankings + ' rankings failed');
  return parts.join(', ');
}
