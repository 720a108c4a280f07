// The REST client and the live event stream (WebSocket /api/events, falling
// back to polling /api/stats every 2 s while the socket is down).

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// Reads are public by default; a dashboard opened with ?token=… (or
// #…?token=…) passes the token on, for servers started with private reads.
const token = (location.search.match(/[?&]token=([^&#]+)/) || location.hash.match(/[?&]token=([^&]+)/) || [])[1];
const withToken = (path) => (token ? `${path}${path.includes('?') ? '&' : '?'}token=${token}` : path);

// Event payloads name the experiment and trial as "experiment"/"trial" (ids).
export const eventExperiment = (d = {}) => d.experiment ?? d.experiment_id;
export const eventTrial = (d = {}) => {
  const t = d.trial ?? d.trial_id;
  return t !== null && typeof t === 'object' ? t.id : t;
};

export async function getJSON(path, { signal } = {}) {
  const res = await fetch(withToken(path), { signal, headers: { Accept: 'application/json' } });
  if (!res.ok) {
    let msg = `${res.status} ${res.statusText}`;
    try {
      const body = await res.json();
      if (body && body.error) msg += `: ${typeof body.error === 'string' ? body.error : JSON.stringify(body.error)}`;
    } catch { /* not JSON */ }
    throw new ApiError(res.status, `GET ${path}: ${msg}`);
  }
  return res.json();
}

export const api = {
  experiments: () => getJSON('/api/experiments'),
  experiment: (id) => getJSON(`/api/experiments/${encodeURIComponent(id)}`),
  trials: (id, q, opts) => getJSON(`/api/experiments/${encodeURIComponent(id)}/trials?${query(q)}`, opts),
  trial: (id) => getJSON(`/api/trials/${encodeURIComponent(id)}`),
  // gone: 'recent' (the server's default: left in the last 10 minutes), 'all' or 'none'.
  workers: (gone = 'recent') => getJSON(`/api/workers?gone=${gone}`),
  stats: () => getJSON('/api/stats'),
};

function query(q) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
  return p.toString();
}

// Listeners receive every event ({id, time, type, data}); the synthetic type
// "poll" carries a /api/stats sample when the socket is down.
class EventStream {
  constructor() {
    this.listeners = new Set();
    this.lastId = null;
    this.ws = null;
    this.pollTimer = null;
    this.retry = 1000;
    this.state = 'connecting';
  }

  on(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  emit(ev) {
    for (const fn of this.listeners) {
      try { fn(ev); } catch (e) { console.warn('event listener failed', e); }
    }
  }

  setState(state) {
    this.state = state;
    const el = document.getElementById('live');
    if (!el) return;
    el.textContent = { live: '● live', polling: '◌ polling', connecting: 'connecting…' }[state];
    el.className = `live ${state}`;
  }

  start() {
    if (typeof WebSocket === 'undefined') return this.startPolling();
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${withToken('/api/events')}`;
    let ws;
    try { ws = new WebSocket(url); } catch { return this.startPolling(); }
    this.ws = ws;
    ws.onopen = () => {
      this.retry = 1000;
      this.stopPolling();
      this.setState('live');
      if (this.lastId !== null) ws.send(JSON.stringify({ after: this.lastId }));
    };
    ws.onmessage = (msg) => {
      if (typeof msg.data !== 'string') return;
      let ev;
      try { ev = JSON.parse(msg.data); } catch { return; }
      if (!ev || typeof ev.type !== 'string') return;
      if (ev.id !== undefined && ev.id !== null) this.lastId = ev.id;
      this.emit(ev);
    };
    ws.onclose = () => {
      this.ws = null;
      this.startPolling();
      setTimeout(() => this.start(), this.retry);
      this.retry = Math.min(this.retry * 2, 30000);
    };
    ws.onerror = () => { /* onclose follows */ };
  }

  startPolling() {
    this.setState('polling');
    if (this.pollTimer) return;
    const tick = async () => {
      try { this.emit({ type: 'poll', time: Date.now() / 1000, data: await api.stats() }); } catch { /* server down */ }
    };
    tick();
    this.pollTimer = setInterval(tick, 2000);
  }

  stopPolling() {
    clearInterval(this.pollTimer);
    this.pollTimer = null;
  }
}

export const events = new EventStream();
