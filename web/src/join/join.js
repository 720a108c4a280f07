// The join page (served at /join?token=...): starts the join worker, shows
// its state, and offers a Pause button. The state is mirrored on
// window.dnnlabJoin for tests and the curious.
import { backendOptions, gatewayUrl } from './protocol.js';

const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.search).get('token') ?? '';
const backendOpt = backendOptions(location.search); // ?backend=auto|webgpu|wasm, ?gpu_fault= (tests)

// The identity the server issued this browser ("<id>.<mac>", from welcome):
// kept so that its record of agreement follows it across reloads. Null the
// first time: the server issues one (the page cannot choose its own).
const clientKey = 'dnnlab-client-v2';
function clientId() {
  try {
    return localStorage.getItem(clientKey);
  } catch {
    return null; // storage blocked: a new identity each visit
  }
}
function keepClientId(id) {
  try {
    if (id && localStorage.getItem(clientKey) !== id) localStorage.setItem(clientKey, id);
  } catch {
    // storage blocked
  }
}

const join = {
  state: 'starting', // the connection state
  activity: 'idle',
  trialsDone: 0,
  trialsFailed: 0,
  current: null,
  samplesPerSecond: 0,
  paused: false,
  worker: null,
  error: '',
  closeCode: 0,
  kernels: '',
  epochSlices: 0, // how many slices the last epoch ran in (join_worker.js)
  shardsVerified: 0,   // data shards whose sha256 was checked
  shardsUnverified: 0, // and those that could not be (no crypto.subtle: not https)
  client: clientId(),
  backendRequested: backendOpt.backend,
  backend: '',         // what the current (or last) trial trains on: webgpu | wasm | webgpu→wasm
  backendReason: '',
  adapter: null,       // { vendor, architecture }
  updates: 0,
};
window.dnnlabJoin = join;

function render() {
  const c = $('connection');
  c.textContent = join.state === 'quarantined' ? 'quarantined — this client was refused by the server' : join.state;
  c.className = `state-${join.state}`;
  $('activity').textContent = join.activity;
  $('trials-done').textContent = String(join.trialsDone) + (join.trialsFailed ? ` (${join.trialsFailed} failed)` : '');
  const cur = join.current;
  $('current').textContent = cur
    ? `experiment ${cur.experiment}, trial #${cur.index}, ` + (cur.epochSamples
      ? `epoch ${cur.epoch + 1}/${cur.epochs} at ${Math.floor((100 * cur.epochSamplesDone) / cur.epochSamples)}%`
      : `epoch ${cur.epoch}/${cur.epochs}`)
    : '—';
  $('samples').textContent = join.samplesPerSecond ? Math.round(join.samplesPerSecond).toLocaleString('en') : '—';
  $('worker').textContent = join.worker ?? '—';
  $('kernels').textContent = join.kernels || '—';
  $('backend').textContent = join.backend
    ? `${join.backend}${join.backendRequested !== 'auto' ? ` (asked for ${join.backendRequested})` : ''} — ${join.backendReason}`
    : `${join.backendRequested}: chosen at the first trial`;
  $('adapter').textContent = join.adapter
    ? [join.adapter.vendor, join.adapter.architecture].filter(Boolean).join(' / ') || 'an adapter that gives no vendor'
    : '—';
  $('shards').textContent = join.shardsUnverified
    ? `${join.shardsUnverified} shard(s) not checked: sha256 needs a secure context (https)`
    : join.shardsVerified ? `${join.shardsVerified} shard(s), sha256 checked` : '—';
  $('error').textContent = join.error;
  const b = $('pause');
  b.textContent = join.paused ? 'Resume' : 'Pause';
  b.setAttribute('aria-pressed', String(join.paused));
}

if (!token) {
  join.state = 'closed';
  join.error = 'No join token: open the URL that `dnnlab serve` printed (…/join?token=…).';
  render();
} else {
  const worker = new Worker(new URL('join_worker.js', location.href), { type: 'module' });
  worker.onmessage = (ev) => {
    if (ev.data?.type !== 'state') return;
    const s = ev.data.state;
    if (s.client && s.client !== join.client) {
      join.client = s.client;
      keepClientId(s.client);
    }
    Object.assign(join, {
      state: s.connection, activity: s.activity, trialsDone: s.trialsDone, trialsFailed: s.trialsFailed,
      current: s.current, samplesPerSecond: s.samplesPerSecond, paused: s.paused, worker: s.worker,
      error: s.error, closeCode: s.closeCode, kernels: s.kernels, epochSlices: s.epochSlices,
      shardsVerified: s.shardsVerified, shardsUnverified: s.shardsUnverified,
      backendRequested: s.backendRequested, backend: s.backend, backendReason: s.backendReason, adapter: s.adapter,
      updates: join.updates + 1,
    });
    render();
  };
  worker.onerror = (ev) => {
    join.error = `worker error: ${ev.message}`;
    render();
  };
  $('pause').onclick = () => {
    join.paused = !join.paused;
    worker.postMessage({ type: 'pause', paused: join.paused });
    render();
  };
  worker.postMessage({ type: 'start', token, client: join.client, url: gatewayUrl(location), agent: navigator.userAgent,
    backend: backendOpt.backend, gpuFault: backendOpt.fault, backendError: backendOpt.error });
  join.pause = (p = true) => {
    join.paused = p;
    worker.postMessage({ type: 'pause', paused: p });
    render();
  };
  render();
}
