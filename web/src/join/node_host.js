// Runs join_worker.js, the join page's Web Worker, in node (for
// web/join_node.mjs): the globals a module worker has and node 20 lacks, so
// that the protocol, the training loop and the choice of backend are the
// page's own code, not a copy. Node has fetch, crypto.subtle, MessageChannel
// and performance; it lacks self/postMessage/location, a WebSocket (the `ws`
// package), the Cache API (a directory stands in), imports of blob: URLs
// (the core's glue is imported from a file) and navigator.gpu (the npm
// `webgpu` package, Dawn, where it is installed).
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { get as httpsGet } from 'node:https';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const sha256 = (data) => createHash('sha256').update(data).digest('hex');

// The part of the Cache API join_worker.js uses (caches.open, match, put,
// delete), one file per URL. The URLs it caches are content-hashed (the
// core) or checked against a sha256 (the shards), so a file never goes stale.
class DirectoryCache {
  constructor(dir) {
    this.dir = dir;
    mkdirSync(dir, { recursive: true });
  }
  file(url) {
    return join(this.dir, sha256(String(url)));
  }
  async match(url) {
    try {
      return new Response(readFileSync(this.file(url)));
    } catch {
      return undefined;
    }
  }
  async put(url, response) {
    const f = this.file(url);
    writeFileSync(`${f}.part`, new Uint8Array(await response.arrayBuffer()));
    renameSync(`${f}.part`, f); // a worker killed mid-write leaves no torn file
  }
  async delete(url) {
    rmSync(this.file(url), { force: true });
    return true;
  }
}

// navigator.gpu from the npm `webgpu` package (Dawn) where it can be
// imported: { gpu, why } (why: the reason there is none).
export async function nodeGpu() {
  let webgpu;
  try {
    webgpu = await import('webgpu');
  } catch (e) {
    const missing = e?.code === 'ERR_MODULE_NOT_FOUND';
    return { gpu: null, why: missing ? 'no WebGPU under node: the npm package webgpu is not installed (npm install webgpu in web/)'
      : `no WebGPU under node: the npm package webgpu failed to load: ${String(e?.message ?? e).split('\n')[0]}` };
  }
  Object.assign(globalThis, webgpu.globals); // GPUBufferUsage and friends
  return { gpu: webgpu.create([]), why: '' };
}

// fetch for the GETs join_worker.js makes (the core, the shards), trusting
// exactly `ca` (PEM) for https: node's fetch takes no CA of its own.
function fetchTrusting(ca) {
  const plain = globalThis.fetch;
  return (url, init) => {
    const u = new URL(url);
    if (u.protocol !== 'https:' || (init && init.method && init.method !== 'GET')) return plain(url, init);
    return new Promise((ok, fail) => {
      httpsGet(u, { ca }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('error', fail);
        res.on('end', () => ok(new Response(Buffer.concat(chunks), {
          status: res.statusCode,
          headers: Object.entries(res.headers).flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => [k, x])),
        })));
      }).on('error', fail);
    });
  };
}

// Starts join_worker.js in this process. page: the join page's URL (its
// location); cacheDir: where the core and shards are kept; gpu: from
// nodeGpu() (becomes navigator.gpu); onState(state): each state the worker publishes (asynchronously,
// as a worker's postMessage is). Returns { post(msg), socketError() }: post
// is the page's worker.postMessage; socketError the last WebSocket error's
// message (a refused connection, an HTTP answer instead of an upgrade).
// ca: PEM to trust instead of the system's CAs for https and wss (--tls-ca).
export async function startJoinWorker({ page, cacheDir, gpu = null, ca = null, onState }) {
  let WebSocketImpl;
  try {
    ({ WebSocket: WebSocketImpl } = await import('ws'));
  } catch (e) {
    throw new Error(`the ws package is missing (cd web && npm ci): ${e?.message ?? e}`);
  }
  let lastSocketError = '';
  class NodeWebSocket extends WebSocketImpl {
    constructor(url) {
      super(url, ca ? { ca } : undefined);
      this.on('error', (e) => { lastSocketError = e?.message ?? String(e); });
    }
  }
  globalThis.self = globalThis;
  globalThis.location = new URL(page);
  globalThis.WebSocket = NodeWebSocket;
  if (ca) globalThis.fetch = fetchTrusting(ca);
  globalThis.caches = { open: async (name) => new DirectoryCache(join(cacheDir, name)) };
  if (gpu) {
    Object.defineProperty(globalThis, 'navigator', { value: { ...globalThis.navigator, gpu }, configurable: true });
  }
  globalThis.postMessage = (msg) => {
    if (msg?.type === 'state') queueMicrotask(() => onState(msg.state));
  };
  const worker = await import('./join_worker.js');
  // The glue under a name of its content: imported once per build of the core.
  const modules = join(cacheDir, 'modules');
  worker.setGlueImporter(async (bytes) => {
    mkdirSync(modules, { recursive: true });
    const file = join(modules, `${sha256(bytes)}.mjs`);
    writeFileSync(file, bytes);
    return import(pathToFileURL(file).href);
  });
  return {
    post: (msg) => globalThis.onmessage({ data: msg }),
    socketError: () => lastSocketError,
  };
}
