// Worker protocol v1 (docs/protocol.md): message builders and the binary
// tensor frame. Pure functions, shared by the join worker and its tests.

export const PROTOCOL_VERSION = 1;

export const hello = (token, client, agent, capabilities) =>
  ({ v: 1, type: 'hello', token, client, agent, capabilities });
export const request = () => ({ v: 1, type: 'request' });
export const heartbeat = (ticket, paused) => ({ v: 1, type: 'heartbeat', ticket: ticket ?? null, paused: !!paused });

// What the trial trains on (docs/protocol.md): backend 'wasm', 'webgpu' or
// 'webgpu→wasm' (moved to the wasm core mid-trial), and the WebGPU adapter's
// { vendor, architecture } (each at most 64 characters) when a GPU ran it.
function withBackend(m, { backend, adapter } = {}) {
  if (backend) m.backend = backend;
  if (adapter) m.adapter = { vendor: String(adapter.vendor ?? '').slice(0, 64), architecture: String(adapter.architecture ?? '').slice(0, 64) };
  return m;
}

// One epoch's numbers as `progress` wants them.
export const progress = (ticket, e, backend) => withBackend({
  v: 1, type: 'progress', ticket, epoch: e.epoch,
  train_loss: e.trainLoss, train_acc: e.trainAcc, val_loss: e.valLoss, val_acc: e.valAcc,
  seconds: e.seconds, samples_per_second: e.samplesPerSecond, lr: e.lr,
}, backend);

export function result(ticket, status, metrics, error, backend) {
  const m = { v: 1, type: 'result', ticket, status, metrics };
  if (status === 'failed') m.error = String(error ?? 'failed');
  return withBackend(m, backend);
}

// u32 LE header length, JSON header, float32 LE values.
export function weightsFrame(ticket, values) {
  const header = new TextEncoder().encode(JSON.stringify(
    { v: 1, ticket, tensor: 'weights', dtype: 'F32', count: values.length }));
  const buf = new ArrayBuffer(4 + header.length + values.length * 4);
  new DataView(buf).setUint32(0, header.length, true);
  new Uint8Array(buf, 4, header.length).set(header);
  // Float32Array uses the platform's byte order: little-endian on every browser target.
  new Uint8Array(buf, 4 + header.length).set(new Uint8Array(values.buffer, values.byteOffset, values.length * 4));
  return buf;
}

export const BACKENDS = ['auto', 'webgpu', 'wasm'];

// ?backend= and ?gpu_fault= from the join URL's query: { backend, fault, error }.
export function backendOptions(search) {
  const q = new URLSearchParams(search);
  const backend = q.get('backend') ?? 'auto';
  const fault = q.get('gpu_fault') ?? '';
  if (!BACKENDS.includes(backend)) {
    return { backend: 'auto', fault, error: `backend must be auto, webgpu or wasm, not '${backend.slice(0, 20)}': using auto` };
  }
  return { backend, fault, error: '' };
}

// The WebSocket URL of the gateway for a page at `location`.
export const gatewayUrl = (loc) => `${loc.protocol === 'https:' ? 'wss' : 'ws'}://${loc.host}/join`;

// Reconnect delay after `failures` failed attempts in a row: 1, 2, 4 ... 30 s, with jitter.
export const backoffMs = (failures, random = Math.random) =>
  Math.min(30000, 1000 * 2 ** Math.min(failures, 5)) * (0.75 + 0.5 * random());
