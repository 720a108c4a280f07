// The browser client page of a distributed run, served by the run itself at
// /hybrid/join#token=... (docs/distributed.md "Browser clients"). The token
// stays in the fragment, which no request carries. The client runs in a Web
// Worker (hybrid_worker.js); this page shows its state, mirrored on
// window.dnnlabHybrid for tests and the curious.
const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.hash.slice(1)).get('token') ?? '';

const view = {
  connection: 'starting', client: null, tickets: 0, version: null,
  bytesIn: 0, bytesOut: 0, framesIn: 0, framesOut: 0, data: '', kernels: '',
  error: '', closeCode: 0, closeReason: '', updates: 0,
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
}

if (!token) {
  view.connection = 'closed';
  view.error = 'No join token: open the URL that `dnnlab train --distributed --listen` printed (…/hybrid/join#token=…).';
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
    // Refused before a welcome with an identity it no longer has (forgotten,
    // or another run on this port): the next load joins as a new client. A
    // quarantined identity stays, and stays refused.
    if (identity && ev.data.state.connection === 'closed' && ev.data.state.client === null &&
        /is not known here/.test(ev.data.state.closeReason ?? '')) sessionStorage.removeItem(identityKey);
    Object.assign(view, ev.data.state, { updates: view.updates + 1 });
    render();
  };
  worker.onerror = (ev) => {
    view.error = `worker error: ${ev.message}`;
    render();
  };
  const ws = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/hybrid`;
  worker.postMessage({ type: 'start', token, url: ws, base: new URL('./', location.href).href, identity });
  render();
}
