// Drafts keep what was typed into a form the page draws anew: an answer
// to a question, a decision on a tool call, an edit of the state. The
// page redraws its panels whenever it reads the thread again (a refresh,
// the end of a run, coming back from a subflow's thread), and what a
// person typed a moment before must be there after it, and be what is
// sent. A form's fields name their draft with data-draft; drafts are kept
// by thread, until what they were typed for is done (drop, prune).
export class Drafts {
  constructor() {
    this.byThread = new Map();
  }

  of(thread) {
    let m = this.byThread.get(thread);
    if (!m) {
      m = new Map();
      this.byThread.set(thread, m);
    }
    return m;
  }

  // watch gives the fields of root (root among them) that name a draft
  // what was typed into them before, and keeps what is typed from now.
  watch(root, thread) {
    const kept = this.of(thread);
    const fields = [root, ...root.querySelectorAll('[data-draft]')].filter((e) => e.dataset && e.dataset.draft);
    for (const e of fields) {
      const key = e.dataset.draft;
      if (kept.has(key)) restore(e, kept.get(key));
      if (e.tagName === 'DETAILS') {
        // toggle does not bubble, and fires for the page's own opening
        e.addEventListener('toggle', () => kept.set(key, e.open));
        continue;
      }
      const keep = () => {
        if (e.type === 'radio') {
          if (e.checked) kept.set(key, e.value);
        } else kept.set(key, e.type === 'checkbox' ? e.checked : e.value);
      };
      e.addEventListener('input', keep);
      e.addEventListener('change', keep);
    }
    return root;
  }

  // drop forgets a thread's drafts whose key starts with prefix.
  drop(thread, prefix) {
    const kept = this.byThread.get(thread);
    if (!kept) return;
    for (const key of [...kept.keys()]) if (key.startsWith(prefix)) kept.delete(key);
  }

  // prune forgets a thread's drafts of the given kind (the key's first
  // part) that live() no longer wants: the questions answered meanwhile.
  prune(thread, kind, live) {
    const kept = this.byThread.get(thread);
    if (!kept) return;
    for (const key of [...kept.keys()]) {
      const [k, what] = key.split('\n');
      if (k === kind && !live(what)) kept.delete(key);
    }
  }
}

function restore(e, v) {
  if (e.tagName === 'DETAILS') e.open = !!v;
  else if (e.type === 'radio') e.checked = e.value === v;
  else if (e.type === 'checkbox') e.checked = !!v;
  else e.value = v;
}

// draftKey names a draft: its kind, what it is for, and the field.
export function draftKey(kind, what, ...field) {
  return [kind, what, ...field].join('\n');
}
