// Tool calls in the studio: a run's calls in its timeline (tool_start and
// tool_end events, in the order they came, with their arguments, how a
// person answered one that waited, and their results), and the form that
// answers a tool call waiting for approval (approve, edit the arguments,
// or reject with a reason).

import { h, json } from './util.js';
import { draftKey } from './drafts.js';

// toolEvent records a tool_start or tool_end event in the run's timeline.
export function toolEvent(run, type, ev) {
  const t = ev.tool;
  if (!t) return;
  run.tools = run.tools || [];
  const key = (ev.ns || '') + '/' + ev.node + '/' + t.id;
  let call = run.tools.find((c) => c.key === key);
  if (!call) {
    call = { key, ns: ev.ns || '', node: ev.node, id: t.id, name: t.name, kind: t.kind, arguments: t.arguments, status: 'running' };
    run.tools.push(call);
    // the timeline shows the call where it came among the steps
    run.timeline = run.timeline || [];
    run.timeline.push({ tool: call });
  }
  if (t.approval) call.approval = t.approval;
  if (type === 'tool_end') {
    call.status = t.error ? 'failed' : 'done';
    call.result = t.result;
    call.error = t.error;
  }
}

// timelineEntry renders one tool call of the run's timeline.
export function toolEntry(c) {
  const head = (c.ns ? '[' + c.ns + '] ' : '') + c.node + ' → ' + c.name + (c.kind ? ' (' + c.kind + ')' : '');
  const parts = [h('strong', {}, head), h('code', { class: 'tool-args' }, json(c.arguments || {}))];
  if (c.approval) parts.push(h('span', { class: 'tool-approval', 'data-approval': c.approval }, c.approval));
  if (c.status === 'done') parts.push(h('span', { class: 'tool-result' }, '= ' + short(c.result)));
  else if (c.status === 'failed') parts.push(h('span', { class: 'tool-error' }, 'failed: ' + c.error));
  else parts.push(h('span', { class: 'tool-running' }, 'running…'));
  return h('li', { class: 'tool-call', 'data-tool': c.name, 'data-call': c.id, 'data-status': c.status }, ...parts);
}

function short(v) {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s && s.length > 160 ? s.slice(0, 160) + '…' : s;
}

// isApproval reports whether an interrupt asks to approve tool calls.
export function isApproval(a) {
  return a && a.payload && a.payload.type === 'tool_approval' && Array.isArray(a.payload.calls);
}

// approvalForm is the form of a node's tool calls waiting for approval:
// per call, its tool and arguments, and a choice of approve, edit (the
// arguments, as JSON) or reject (with a reason). Its fields name their
// drafts (by the question's id and the call's), which the page keeps
// across its redrawing.
export function approvalForm(a) {
  const calls = a.payload.calls.map((c) => {
    const name = 'decision-' + a.id + '-' + c.id;
    const choice = (value, label, checked) => h('label', { class: 'choice' },
      h('input', Object.assign({ type: 'radio', name, value, 'data-decision': value, 'data-draft': draftKey('ask', a.id, c.id, 'decision') }, checked ? { checked: '' } : {})), label);
    return h('fieldset', { class: 'tool-approval-call', 'data-call': c.id, 'data-tool': c.tool },
      h('legend', {}, c.tool + ' (call ' + c.id + ')'),
      h('div', { class: 'row', role: 'radiogroup', 'aria-label': 'decision on ' + c.tool },
        choice('approve', 'Approve', true), choice('edit', 'Edit the arguments', false), choice('reject', 'Reject', false)),
      h('label', {}, 'Arguments (JSON)', h('textarea', { rows: 3, class: 'tool-arguments', 'aria-label': 'arguments of ' + c.tool, 'data-draft': draftKey('ask', a.id, c.id, 'arguments') }, json(c.arguments || {}))),
      h('label', {}, 'Reason (when rejected)', h('input', { class: 'tool-reason', 'aria-label': 'reason to reject ' + c.tool, 'data-draft': draftKey('ask', a.id, c.id, 'reason') })));
  });
  const parts = [h('strong', {}, (a.path || a.id) + ' would call these tools'), ...calls];
  if (a.payload.problem) parts.push(h('p', { class: 'problem', role: 'alert' }, 'The last answer could not be taken: ' + a.payload.problem));
  return h('div', { class: 'interrupt', 'data-interrupt': a.id, 'data-id': a.id, 'data-approval': '' }, ...parts);
}

// approvalAnswer reads a node's approval form into its answer:
// {calls: {ID: decision}}.
export function approvalAnswer(box) {
  const calls = {};
  for (const fs of box.querySelectorAll('fieldset[data-call]')) {
    const picked = fs.querySelector('input[data-decision]:checked');
    const kind = picked ? picked.value : 'approve';
    if (kind === 'edit') {
      const text = fs.querySelector('textarea.tool-arguments').value;
      let args;
      try {
        args = JSON.parse(text);
      } catch (e) {
        throw new Error('the arguments of ' + fs.dataset.tool + ' are not JSON: ' + e.message);
      }
      calls[fs.dataset.call] = { decision: 'edit', arguments: args };
    } else if (kind === 'reject') {
      const reason = fs.querySelector('input.tool-reason').value.trim();
      calls[fs.dataset.call] = reason ? { decision: 'reject', reason } : 'reject';
    } else {
      calls[fs.dataset.call] = 'approve';
    }
  }
  return { calls };
}
