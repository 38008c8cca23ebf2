// The Trellis HTTP API as the studio calls it: JSON requests with the
// key it signed in with, errors in the API's one shape, and runs streamed
// as Server-Sent Events read from fetch (EventSource cannot send a key),
// picked up again with Last-Event-ID when the connection drops.

export class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || { code: 'http_' + status, message: 'HTTP ' + status };
    super(e.message);
    this.status = status;
    this.code = e.code;
    this.details = e.details;
  }
}

export class API {
  constructor(key) {
    this.key = key;
  }

  headers(extra) {
    const h = { ...extra };
    if (this.key) h.Authorization = 'Bearer ' + this.key;
    return h;
  }

  async call(method, path, body) {
    const init = { method, headers: this.headers() };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(path, init);
    if (res.status === 204) return null;
    let data = null;
    const text = await res.text();
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (e) {
        data = null;
      }
    }
    if (!res.ok) throw new APIError(res.status, data);
    return data;
  }

  get(path) { return this.call('GET', path); }
  post(path, body) { return this.call('POST', path, body === undefined ? {} : body); }
  put(path, body) { return this.call('PUT', path, body); }

  // stream starts a run (POST .../runs/stream) or follows one (GET
  // .../runs/{run}/stream) and calls onEvent(type, data, id) for each
  // event until the run ends or signal aborts. A connection that drops
  // before the run's end is opened again after the last event seen.
  // A start of {follow: RUN} follows a run already started (a replay's).
  async stream(thread, start, onEvent, signal, onRun) {
    const base = '/v1/threads/' + encodeURIComponent(thread) + '/runs';
    let run = start && start.follow ? start.follow : null;
    if (run !== null && onRun) onRun(run);
    let last = '';
    let ended = false;
    for (let attempt = 0; !ended; attempt++) {
      if (attempt > 0) {
        // the stream closed before the run's end: follow the run again
        // from the last event seen
        if (run === null || attempt > 30) throw new Error('the run\'s stream closed before its end');
        await new Promise((r) => setTimeout(r, Math.min(2000, 250 * attempt)));
        if (signal && signal.aborted) return run;
      }
      let res;
      try {
        if (run === null) {
          res = await fetch(base + '/stream', {
            method: 'POST', signal,
            headers: this.headers({ 'Content-Type': 'application/json', Accept: 'text/event-stream' }),
            body: JSON.stringify(start),
          });
        } else {
          const h = { Accept: 'text/event-stream' };
          if (last) h['Last-Event-ID'] = last;
          res = await fetch(base + '/' + encodeURIComponent(run) + '/stream', { signal, headers: this.headers(h) });
        }
      } catch (e) {
        if ((signal && signal.aborted) || run === null) throw e;
        continue;
      }
      if (!res.ok) {
        let body = null;
        try { body = await res.json(); } catch (e) { /* not JSON */ }
        throw new APIError(res.status, body);
      }
      if (run === null) {
        run = res.headers.get('Trellis-Run');
        if (onRun) onRun(run);
      }
      try {
        for await (const ev of readEvents(res.body)) {
          if (ev.id) last = ev.id;
          if (ev.event === 'run_end' || ev.event === 'run_error') ended = true;
          let data = null;
          try { data = JSON.parse(ev.data); } catch (e) { data = ev.data; }
          onEvent(ev.event, data, ev.id);
        }
      } catch (e) {
        if (signal && signal.aborted) throw e;
      }
    }
    return run;
  }
}

// readEvents parses a text/event-stream body into {id, event, data}.
export async function* readEvents(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let ev = { id: '', event: 'message', data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (ev.data.length) yield { id: ev.id, event: ev.event, data: ev.data.join('\n') };
        ev = { id: '', event: 'message', data: [] };
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? '' : line.slice(colon + 1);
      if (val.startsWith(' ')) val = val.slice(1);
      if (field === 'id') ev.id = val;
      else if (field === 'event') ev.event = val;
      else if (field === 'data') ev.data.push(val);
    }
  }
}
