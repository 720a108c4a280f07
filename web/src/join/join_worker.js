// The join page's Web Worker (a module worker): one WebSocket to /join,
// protocol v1 (docs/protocol.md), the wasm core and the data shards from the
// Cache API, and trials trained epoch by epoch. It reports its state to the
// page with {type: 'state', ...} messages; the page sends {type: 'start'} and
// {type: 'pause', paused}. web/join_node.mjs runs this same module under node
// (src/join/node_host.js supplies the globals); it also sends {type: 'stop'},
// and start's `trials` (no request after that many ended) and `noGpu` (why
// there is no navigator.gpu).
import { wrapCore, DnnlabError, relaxedMaddFused, relaxedSimdSupported } from '../../../src/wasm/dnnlab_api.mjs';
import * as proto from './protocol.js';
import { GpuBackend } from './gpu_backend.js';
import { nextSliceBatches } from '../../../src/wasm/webgpu/model.mjs';

const CACHE_NAME = 'dnnlab-v1';

const state = {
  connection: 'starting', // connecting | connected | reconnecting | quarantined | closed
  activity: 'idle',       // idle | loading | training | waiting | paused
  paused: false,
  worker: null,           // the worker id from welcome
  client: null,           // the identity the server issued (welcome.client)
  trialsDone: 0,
  trialsFailed: 0,
  current: null,          // { ticket, experiment, index, trial, attempt, epoch, epochs,
                          //   epochSamplesDone, epochSamples (the epoch under way) }
  samplesPerSecond: 0,
  lastEpoch: null,
  error: '',
  closeCode: 0,
  closeReason: '',
  kernels: '',
  epochSlices: 0,         // slices (fitEpochInSlices) or GPU chunks the last epoch ran in
  reconnects: 0,
  shardsVerified: 0,      // shards whose sha256 was checked (needs crypto.subtle:
  shardsUnverified: 0,    // a secure context); and those that could not be
  backendRequested: 'auto', // ?backend= (gpu_backend.js)
  backend: '',            // what the current (or last) trial trains on: webgpu | wasm | webgpu→wasm
  backendReason: '',      // why (the probe's numbers, a missing adapter, ...)
  adapter: null,          // { vendor, architecture } of the WebGPU adapter, once one was opened
};

function publish() {
  self.postMessage({ type: 'state', state: structuredClone(state) });
}
function set(patch) {
  Object.assign(state, patch);
  publish();
}

let cfg = null;        // { token, client, url, agent }
let ws = null;
let welcome = null;
let heartbeatTimer = 0;
let retryTimer = 0;
let failures = 0;      // failed connection attempts in a row
let stopped = false;   // quarantined, version mismatch or 'stop': no more reconnects
let holding = null;    // the ticket being trained (string) or null
let requested = false; // a request is outstanding
let unpause = null;    // resolves when pause is lifted
const waiters = new Map(); // key -> {resolve, reject}
let corePromise = null, coreUrls = '';
let openShard = null;  // { url, shard }
let gpuBackend = null; // GpuBackend: the choice and the device (start's backend and fault)

// ---- Cache API ----------------------------------------------------------

// Response bytes for an immutable, content-hashed URL: from the Cache API
// when there, else fetched once and stored.
async function cachedBytes(url) {
  const abs = new URL(url, self.location.href).href;
  const cache = typeof caches !== 'undefined' ? await caches.open(CACHE_NAME).catch(() => null) : null;
  if (cache) {
    const hit = await cache.match(abs);
    if (hit) return new Uint8Array(await hit.arrayBuffer());
  }
  const res = await fetch(abs);
  if (!res.ok) throw new Error(`GET ${url}: HTTP ${res.status}`);
  const bytes = new Uint8Array(await res.arrayBuffer());
  if (cache) {
    await cache.put(abs, new Response(bytes, { headers: { 'Content-Type': res.headers.get('Content-Type') ?? 'application/octet-stream' } }))
      .catch(() => {}); // a full quota only costs a refetch next time
  }
  return bytes;
}

async function forget(url) {
  if (typeof caches === 'undefined') return;
  const cache = await caches.open(CACHE_NAME).catch(() => null);
  if (cache) await cache.delete(new URL(url, self.location.href).href);
}

async function sha256Hex(bytes) {
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}

// ---- the core -----------------------------------------------------------

// The glue JS is imported from a Blob of the cached text (an import of the
// URL itself would go to the network). Node cannot import blob: URLs: its
// host (node_host.js) swaps in an import from a file.
let importGlue = async (bytes) => {
  const blobUrl = URL.createObjectURL(new Blob([bytes], { type: 'text/javascript' }));
  try {
    return await import(/* @vite-ignore */ blobUrl);
  } finally {
    URL.revokeObjectURL(blobUrl);
  }
};
export function setGlueImporter(fn) {
  importGlue = fn;
}

// The wasm bytes are handed over too, with locateFile pointing at the hashed
// URL for completeness.
function loadCore(offered) {
  // The relaxed-SIMD build (FMA in the GEMM) where this engine has it.
  const urls = { js: offered.js,
    wasm: offered.relaxed_wasm && relaxedSimdSupported() ? offered.relaxed_wasm : offered.wasm };
  const key = `${urls.js} ${urls.wasm}`;
  if (corePromise && coreUrls === key) return corePromise;
  coreUrls = key;
  corePromise = (async () => {
    const [js, wasm] = await Promise.all([cachedBytes(urls.js), cachedBytes(urls.wasm)]);
    const { default: factory } = await importGlue(js);
    const wasmUrl = new URL(urls.wasm, self.location.href).href;
    const core = wrapCore(await factory({ wasmBinary: wasm, locateFile: () => wasmUrl }));
    set({ kernels: core.kernels });
    return core;
  })();
  corePromise.catch(() => { corePromise = null; });
  return corePromise;
}

async function shardFor(core, data) {
  if (openShard?.url === data.url) return openShard.shard;
  let bytes = await cachedBytes(data.url);
  // crypto.subtle (like the Cache API) exists only in secure contexts (https,
  // localhost); over plain http on a LAN the shard goes unverified.
  const canHash = typeof crypto !== 'undefined' && !!crypto.subtle;
  if (data.sha256 && canHash && (await sha256Hex(bytes)) !== data.sha256) {
    await forget(data.url); // a damaged copy: fetch once more
    bytes = await cachedBytes(data.url);
    const got = await sha256Hex(bytes);
    if (got !== data.sha256) throw new Error(`shard ${data.url}: sha256 ${got}, expected ${data.sha256}`);
  }
  if (data.sha256 && canHash) set({ shardsVerified: state.shardsVerified + 1 });
  else set({ shardsUnverified: state.shardsUnverified + 1 });
  if (openShard) openShard.shard.free(); // models still training on it keep its data
  openShard = { url: data.url, shard: core.openShard(bytes) };
  return openShard.shard;
}

// ---- the socket ---------------------------------------------------------

function send(msg) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(typeof msg === 'string' || msg instanceof ArrayBuffer ? msg : JSON.stringify(msg));
}

// Whether cfg.trials (node's --trials) have ended: then no more requests.
const enough = () => cfg.trials > 0 && state.trialsDone + state.trialsFailed >= cfg.trials;

function sendRequest() {
  clearTimeout(retryTimer);
  if (!welcome || holding || requested || state.paused || enough() || ws?.readyState !== WebSocket.OPEN) return;
  requested = true;
  send(proto.request());
  set({ activity: 'waiting' });
}

function waitFor(key) {
  return new Promise((resolve, reject) => waiters.set(key, { resolve, reject }));
}
function settle(key, value) {
  const w = waiters.get(key);
  if (w) {
    waiters.delete(key);
    w.resolve(value);
  }
}
function rejectAll(err) {
  for (const w of waiters.values()) w.reject(err);
  waiters.clear();
}

class ConnectionLost extends Error {}

function connect() {
  if (stopped) return;
  set({ connection: failures ? 'reconnecting' : 'connecting' });
  const sock = new WebSocket(cfg.url);
  ws = sock;
  sock.binaryType = 'arraybuffer';
  sock.onopen = () => {
    send(proto.hello(cfg.token, cfg.client, cfg.agent, {
      // The build loadCore() picks when the server offers both.
      simd: simdSupported(), kernels: relaxedSimdSupported() ? 'wasm-relaxed-simd' : 'wasm-simd128',
      fma: relaxedMaddFused(), threads: 1,
    }));
  };
  sock.onmessage = (ev) => {
    if (typeof ev.data !== 'string') return; // the server sends no tensors to browsers yet
    let msg;
    try {
      msg = JSON.parse(ev.data);
    } catch {
      return;
    }
    onMessage(msg).catch((e) => set({ error: String(e?.message ?? e) }));
  };
  sock.onclose = (ev) => {
    if (ws !== sock) return;
    ws = null;
    welcome = null;
    requested = false;
    clearInterval(heartbeatTimer);
    clearTimeout(retryTimer);
    rejectAll(new ConnectionLost(`connection closed (${ev.code})`));
    const quarantined = ev.code === 1008 && /quarantin/i.test(ev.reason);
    const badVersion = ev.code === 1002;
    set({ closeCode: ev.code, closeReason: ev.reason });
    if (quarantined || badVersion) {
      stopped = true;
      set({ connection: quarantined ? 'quarantined' : 'closed', activity: 'idle',
        error: ev.reason || `closed with ${ev.code}` });
      return;
    }
    if (stopped) {
      set({ connection: 'closed', activity: 'idle' });
      return;
    }
    failures++;
    set({ connection: 'reconnecting', reconnects: state.reconnects + 1 });
    setTimeout(connect, proto.backoffMs(failures - 1));
  };
}

async function onMessage(msg) {
  switch (msg.type) {
    case 'welcome':
      welcome = msg;
      failures = 0;
      // The server's name for this client: sent back on every reconnect,
      // and to the page, which keeps it in localStorage.
      if (typeof msg.client === 'string') cfg.client = msg.client;
      set({ connection: 'connected', worker: msg.worker, client: cfg.client, error: '' });
      clearInterval(heartbeatTimer);
      heartbeatTimer = setInterval(
        () => send(proto.heartbeat(holding, state.paused)),
        Math.max(1, Number(msg.heartbeat_seconds) || 10) * 1000);
      if (!msg.wasm?.js || !msg.wasm?.wasm) {
        // Nothing could be trained: do not take tickets only to fail them.
        set({ error: 'the server has no wasm core to offer (it was built without em++)' });
        break;
      }
      set({ activity: 'loading' });
      try {
        await loadCore(msg.wasm);
      } catch (e) {
        set({ activity: 'idle', error: `cannot load the wasm core: ${e?.message ?? e}` });
        break;
      }
      set({ activity: state.paused ? 'paused' : 'idle' });
      sendRequest();
      break;
    case 'ticket':
      requested = false;
      await runTicket(msg);
      break;
    case 'idle':
      requested = false;
      // 'preparing data': the server is still building a data shard.
      set({ activity: state.paused ? 'paused' : msg.reason === 'preparing data' ? 'waiting for data' : 'idle' });
      clearTimeout(retryTimer);
      retryTimer = setTimeout(sendRequest, Math.max(0.2, Number(msg.retry_seconds) || 1) * 1000);
      break;
    case 'verdict':
      settle(`verdict ${msg.ticket} ${msg.epoch}`, msg);
      break;
    case 'accepted':
      settle(`accepted ${msg.ticket}`, msg);
      break;
    case 'error':
      set({ error: `${msg.code}: ${msg.message}` });
      break;
    default:
      break; // heartbeat replies and anything newer
  }
}

// ---- trials -------------------------------------------------------------

async function waitWhilePaused() {
  while (state.paused) {
    set({ activity: 'paused' });
    await new Promise((r) => { unpause = r; });
  }
}

const finite = (x) => (Number.isFinite(x) ? x : 0);

// One epoch in slices of about SLICE_SECONDS, returning to the event loop
// between them: heartbeats keep the lease however long the epoch, messages
// are answered, and Pause takes effect within a slice. The numbers are those
// of one fitEpoch call (dnnlab_model_fit_epoch_part).
const SLICE_SECONDS = 0.1;
// Back to the event loop and straight on: a MessageChannel task, since
// chained setTimeout(0) calls are clamped to 4 ms each after five.
const yieldChannel = new MessageChannel();
const yieldToEventLoop = () => new Promise((r) => {
  yieldChannel.port1.onmessage = () => r();
  yieldChannel.port2.postMessage(0);
});
// Before each slice of an epoch (the wasm core's, or a GPU epoch's chunk:
// WebGpuModel.trainEpoch's between): back to the event loop, paused there
// while Pause is on, and out of the trial when the connection is gone.
async function betweenSlices(sock) {
  await yieldToEventLoop();
  await waitWhilePaused();
  if (ws !== sock) throw new ConnectionLost('connection closed');
  set({ activity: 'training' });
}
function showEpochProgress(samplesDone, samplesTotal) {
  set({ current: { ...state.current, epochSamplesDone: samplesDone, epochSamples: samplesTotal } });
}
let sliceBatches = 4;  // adapted to this machine and model as slices are timed; 4 per new trial
async function fitEpochInSlices(model, shard, sock) {
  for (let slices = 1; ; slices++) {
    await betweenSlices(sock);
    const t0 = performance.now();
    const r = model.fitEpochPart(shard, sliceBatches);
    if (r.done) {
      set({ epochSlices: slices });
      return r;
    }
    sliceBatches = nextSliceBatches(sliceBatches, (performance.now() - t0) / 1000, SLICE_SECONDS);
    showEpochProgress(r.samplesDone, r.samplesTotal);
  }
}

// A GPU epoch in chunks of about as long (WebGpuModel.trainEpoch sizes
// them), with the slices' progress, Pause and lost connection between them.
async function gpuEpochInChunks(gpuTrial, sock) {
  const r = await gpuTrial.epoch(async ({ samplesDone, samplesTotal }) => {
    showEpochProgress(samplesDone, samplesTotal);
    await betweenSlices(sock);
  });
  set({ epochSlices: gpuTrial.chunks });
  return r;
}

async function runTicket(t) {
  const ticket = t.ticket;
  holding = ticket;
  const sock = ws;
  const epochs = Number(t.spec?.epochs) || 1;
  set({
    activity: 'loading',
    current: { ticket, trial: t.trial?.id, experiment: t.trial?.experiment, index: t.trial?.index,
      attempt: t.trial?.attempt, epoch: 0, epochs },
  });
  const started = performance.now();
  let model = null;
  let gpuTrial = null;
  let backend = 'wasm';
  let last = null;
  let status = 'finished';
  let error = '';
  let test = { loss: 0, accuracy: 0 };
  try {
    const core = await loadCore(welcome.wasm);
    const shard = await shardFor(core, t.data);
    const choice = await gpuBackend.choose(core, t.spec, shard);
    if (choice.backend === 'webgpu') {
      try {
        gpuTrial = gpuBackend.trial(core, t.spec, shard);
        backend = 'webgpu';
      } catch (e) {
        Object.assign(choice, { backend: 'wasm', reason: `WebGPU could not set the trial up: ${e?.message ?? e}` });
      }
    }
    if (!gpuTrial) {
      model = core.createModel(t.spec);
      model.useSplit(shard, 'train');
    }
    set({ backend, backendReason: choice.reason, adapter: gpuBackend.adapter });
    sliceBatches = 4;
    set({ activity: 'training' });
    for (let e = 1; e <= epochs; e++) {
      await waitWhilePaused();
      if (ws !== sock) throw new ConnectionLost('connection closed');
      set({ activity: 'training' });
      const r = gpuTrial ? await gpuEpochInChunks(gpuTrial, sock) : await fitEpochInSlices(model, shard, sock);
      if (ws !== sock) throw new ConnectionLost('connection closed');
      if (gpuTrial && gpuTrial.backend !== backend) {
        backend = gpuTrial.backend;
        set({ backend, backendReason: `the GPU failed in epoch ${r.epoch} (${gpuTrial.failure.kind}: ${gpuTrial.failure.message}); the wasm core redid it` });
      }
      last = r;
      set({ samplesPerSecond: r.samplesPerSecond, lastEpoch: r,
        current: { ...state.current, epoch: r.epoch, epochSamples: 0, epochSamplesDone: 0 } });
      const verdict = waitFor(`verdict ${ticket} ${r.epoch}`);
      send(proto.progress(ticket, r, { backend, adapter: gpuTrial ? gpuBackend.adapter : null }));
      const v = await verdict;
      if (!v.continue) {
        if (v.reason === 'lost') throw new ConnectionLost('lease lost');
        status = 'pruned';
        break;
      }
    }
    if (status === 'finished' && shard.info.test > 0) {
      test = gpuTrial ? gpuTrial.test() : model.evaluateSplit(shard, 'test');
    }
  } catch (e) {
    if (e instanceof ConnectionLost || ws !== sock) {
      // The server released (or will expire) the lease; nothing to send.
      model?.free();
      gpuTrial?.free();
      holding = null;
      set({ current: null, activity: 'idle' });
      return;
    }
    status = 'failed';
    error = e instanceof DnnlabError ? `${e.code}: ${e.message}` : String(e?.message ?? e);
  }
  const metrics = {
    train_loss: finite(last?.trainLoss), train_acc: finite(last?.trainAcc),
    val_loss: finite(last?.valLoss), val_acc: finite(last?.valAcc),
    test_loss: finite(test.loss), test_acc: finite(test.accuracy),
    epochs_done: last?.epoch ?? 0,
    seconds: (performance.now() - started) / 1000,
  };
  let weights = null;
  if (status !== 'failed') {
    try {
      weights = gpuTrial ? await gpuTrial.getParams() : model.getParams();
    } catch (e) {
      status = 'failed';
      error = String(e?.message ?? e);
    }
  }
  if (gpuTrial && gpuTrial.backend !== backend) {
    backend = gpuTrial.backend;  // the device failed reading the parameters back
    set({ backend, backendReason: `the GPU failed at the end (${gpuTrial.failure.kind}: ${gpuTrial.failure.message}); the parameters are the last checkpoint's` });
  }
  model?.free();
  gpuTrial?.free();
  if (ws !== sock) {
    holding = null;
    set({ current: null, activity: 'idle' });
    return;
  }
  const accepted = waitFor(`accepted ${ticket}`);
  send(proto.result(ticket, status, metrics, error, { backend, adapter: backend === 'wasm' ? null : gpuBackend.adapter }));
  if (weights) send(proto.weightsFrame(ticket, weights));
  try {
    // The answer normally comes at once; do not hang on a server that never sends it.
    const a = await Promise.race([accepted, new Promise((r) => setTimeout(() => r({ counted: false, timeout: true }), 30000))]);
    waiters.delete(`accepted ${ticket}`);
    if (status === 'failed') set({ trialsFailed: state.trialsFailed + 1 });
    else if (a.counted !== false) set({ trialsDone: state.trialsDone + 1 });
  } catch {
    // closed before the answer: the server decides; we start afresh
  }
  holding = null;
  set({ current: null, activity: state.paused ? 'paused' : 'idle', error: status === 'failed' ? error : state.error });
  sendRequest();
}

// ---- misc ---------------------------------------------------------------

// wasm-feature-detect's SIMD probe: a function using v128 ops.
function simdSupported() {
  try {
    return WebAssembly.validate(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3,
      2, 1, 0, 10, 10, 1, 8, 0, 65, 0, 253, 15, 253, 98, 11]));
  } catch {
    return false;
  }
}

self.onmessage = (ev) => {
  const m = ev.data;
  if (m.type === 'start' && !cfg) {
    cfg = { token: m.token, client: m.client, url: m.url, agent: m.agent, trials: Number(m.trials) || 0 };
    gpuBackend = new GpuBackend({ requested: m.backend ?? 'auto', fault: m.gpuFault ?? '', noGpu: m.noGpu });
    state.backendRequested = gpuBackend.requested;
    if (m.backendError) state.error = m.backendError;
    publish();
    connect();
  } else if (m.type === 'pause') {
    set({ paused: !!m.paused });
    send(proto.heartbeat(holding, state.paused));
    if (!state.paused) {
      unpause?.();
      unpause = null;
      if (!holding) set({ activity: 'idle' });
      sendRequest();
    } else if (!holding) {
      set({ activity: 'paused' });
    }
  } else if (m.type === 'stop') {
    // Leaving as a closed tab does: the server gives a held ticket back at
    // once (docs/protocol.md "Leases"); no reconnect.
    stopped = true;
    clearInterval(heartbeatTimer);
    clearTimeout(retryTimer);
    if (ws) ws.close(1000, 'leaving');
    else set({ connection: 'closed', activity: 'idle' });
  }
};
