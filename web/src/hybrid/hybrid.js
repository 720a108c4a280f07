// The browser client page of a distributed run, served by the run itself at
// /hybrid/join#token=... (docs/distributed.md "Browser clients"). The token
// stays in the fragment, which no request carries. The client runs in a Web
// Worker (hybrid_worker.js); this page shows its state, mirrored on
// window.dnnlabHybrid for tests and the curious. After a lost socket the
// worker joins again as the same client, `?reconnect=N` times at most
// (docs/distributed.md "Reconnecting"); #link says how that goes, in words
// and in data- attributes tests wait on.
import { parseTries } from './reconnect.js';

const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.hash.slice(1)).get('token') ?? '';
const tries = parseTries(location.search);

const view = {
  connection: 'starting', client: null, tickets: 0, version: null,
  bytesIn: 0, bytesOut: 0, framesIn: 0, framesOut: 0, data: '', kernels: '',
  error: '', closeCode: 0, closeReason: '', updates: 0,
  tries: 0, try: 0, retryAt: 0, lost: '', reconnects: 0, gaveUp: '', refused: false,
};
window.dnnlabHybrid = view;

const mib = (n) => `${(n / 2 ** 20).toFixed(1)} MiB`;
function render() {
  const c = $('connection');
  c.textContent = view.connection;
  c.className = `state-${view.connection}`;
  $('client').textContent = view.client ?? '—';
  $('tickets').textContent = String(view.tickets);
  $('version').textContent = view.version ?? '—';
  $('bytes').textContent = view.framesIn ? `${mib(view.bytesIn)} / ${mib(view.bytesOut)}` : '—';
  $('data').textContent = view.data || '—';
  $('kernels').textContent = view.kernels || '—';
  $('error').textContent = view.error;
  renderLink();
}

// The link in one line, and in #link's data-state (connecting, connected,
// reconnecting, finished, closed, gave-up), data-client, data-try and
// data-tries; while reconnecting the line counts down to the next try.
let countdown = 0;
function renderLink() {
  const l = $('link');
  const as = view.client === null ? '' : ` as client ${view.client}`;
  const state = view.connection === 'loading' ? 'connected' : view.connection;
  const line = {
    starting: 'starting',
    connecting: `connecting${as}`,
    connected: `connected${as}${view.reconnects ? ` (reconnected ${view.reconnects}×)` : ''}`,
    reconnecting: view.retryAt
      ? `the link was lost (${view.lost}); reconnecting${as} in ` +
        `${Math.max(0, (view.retryAt - Date.now()) / 1000).toFixed(1)} s (try ${view.try} of ${view.tries})`
      : `reconnecting${as} (try ${view.try} of ${view.tries})`,
    finished: 'the run is over',
    closed: 'closed',
    'gave-up': `gave up: ${view.gaveUp}`,
  }[state] ?? state;
  l.textContent = line;
  l.className = `state-${state}`;
  Object.assign(l.dataset, { state, client: view.client ?? '', try: view.try, tries: view.tries });
  const counting = state === 'reconnecting' && view.retryAt > 0;
  if (counting && !countdown) countdown = setInterval(renderLink, 200);
  if (!counting && countdown) {
    clearInterval(countdown);
    countdown = 0;
  }
}

if (!token || tries.error) {
  view.connection = 'closed';
  view.error = tries.error ??
    'No join token: open the URL that `dnnlab train --distributed --listen` printed (…/hybrid/join#token=…).';
  render();
} else {
  // The identity the server issued this tab, kept for this run's token in
  // sessionStorage (this tab only): a reload resumes it, with its record.
  const identityKey = `dnnlab-hybrid-identity:${token}`;
  let identity = null;
  try {
    identity = JSON.parse(sessionStorage.getItem(identityKey) ?? 'null');
  } catch {
    identity = null;
  }
  const worker = new Worker(new URL('hybrid_worker.js', location.href), { type: 'module' });
  worker.onmessage = (ev) => {
    if (ev.data?.type === 'identity') {
      sessionStorage.setItem(identityKey, JSON.stringify(ev.data.identity));
      return;
    }
    if (ev.data?.type !== 'state') return;
    // Refused an identity it no longer has (forgotten, or another run on
    // this port): the next load joins as a new client. A quarantined
    // identity stays, and stays refused.
    if (ev.data.state.refused && /is not known here/.test(ev.data.state.gaveUp)) sessionStorage.removeItem(identityKey);
    Object.assign(view, ev.data.state, { updates: view.updates + 1 });
    render();
  };
  worker.onerror = (ev) => {
    view.error = `worker error: ${ev.message}`;
    render();
  };
  const ws = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/hybrid`;
  worker.postMessage({ type: 'start', token, url: ws, base: new URL('./', location.href).href, identity, tries: tries.tries });
  render();
}
