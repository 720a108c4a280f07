// A browser client of a distributed run (docs/distributed.md "Browser
// clients"): one WebSocket to /hybrid, the text hello and welcome, then the
// server's binary frames handed to the wasm core's hybrid client
// (dnnlab_hybrid_frame: the same C++ step and frame codec as `dnnlab join`),
// whose replies go back as they are. This file only moves bytes.
import { wrapCore } from '../../../src/wasm/dnnlab_api.mjs';

const state = {
  connection: 'starting', // connecting | loading | connected | finished | closed
  client: null,           // the id the server gave this connection
  tickets: 0, version: null,
  bytesIn: 0, bytesOut: 0, framesIn: 0, framesOut: 0,
  data: '', kernels: '', error: '', closeCode: 0, closeReason: '',
};
let lastPublish = 0;
function publish(force = false) {
  const now = performance.now();
  if (!force && now - lastPublish < 100) return;
  lastPublish = now;
  self.postMessage({ type: 'state', state: { ...state } });
}
function set(patch, force = true) {
  Object.assign(state, patch);
  publish(force);
}

async function loadCore(base) {
  const { default: factory } = await import(/* @vite-ignore */ new URL('core/dnnlab_core.mjs', base).href);
  return wrapCore(await factory({ locateFile: (f) => new URL(`core/${f}`, base).href }));
}

// The shard needs the join token: whoever may not join may not read the data.
async function fetchBytes(url, token) {
  const res = await fetch(url, { cache: 'no-cache', headers: { authorization: `Bearer ${token}` } });
  if (!res.ok) throw new Error(`GET ${url}: HTTP ${res.status}`);
  return new Uint8Array(await res.arrayBuffer());
}

// `identity` ({client, secret} from an earlier welcome of this run, kept by
// the page): presented in the hello to resume that client's record
// (docs/distributed.md "Identities").
function run({ token, url, base, identity }) {
  set({ connection: 'connecting' });
  const corePromise = loadCore(base);
  const ws = new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  let client = null;    // the wasm hybrid client, once the welcome's data is loaded
  const early = [];     // frames that came while it was loading
  const fail = (message) => {
    set({ error: message });
    if (ws.readyState === WebSocket.OPEN) ws.close(1000, 'the client failed');
  };
  const handle = (buf) => {
    const reply = client.frame(buf);
    state.bytesIn += buf.byteLength;
    state.framesIn++;
    if (reply) {
      ws.send(reply);
      state.bytesOut += reply.byteLength;
      state.framesOut++;
    }
    const info = client.info();
    state.tickets = info.tickets;
    state.version = info.version;
    publish(info.done);
  };
  ws.onopen = () => ws.send(JSON.stringify({
    v: 1, type: 'hello', token, agent: 'browser',
    ...(identity ? { client: identity.client, secret: identity.secret } : {}),
  }));
  ws.onmessage = (ev) => {
    if (typeof ev.data !== 'string') {
      if (!client) early.push(ev.data);
      else {
        try {
          handle(ev.data);
        } catch (e) {
          fail(String(e?.message ?? e));
        }
      }
      return;
    }
    let msg;
    try {
      msg = JSON.parse(ev.data);
    } catch {
      return fail('the server sent text that is not JSON');
    }
    if (msg.type === 'error') return set({ error: msg.message });
    if (msg.type !== 'welcome') return;
    set({ connection: 'loading', client: msg.client });
    // Not in the state the page mirrors (window.dnnlabHybrid): only the page keeps it.
    if (msg.secret) self.postMessage({ type: 'identity', identity: { client: msg.client, secret: msg.secret } });
    (async () => {
      if (!msg.core_spec || !msg.shard) throw new Error('the welcome has no core_spec or shard: this server cannot take browser clients');
      const core = await corePromise;
      set({ kernels: core.kernels });
      const shard = core.openShard(await fetchBytes(new URL(msg.shard, base).href, token));
      set({ data: `${shard.info.dataset}, ${shard.info.train} training samples` });
      client = core.createHybridClient(msg.core_spec, shard, msg.data_fingerprint);
      shard.free(); // the client keeps its data
      set({ connection: 'connected' });
      while (early.length) handle(early.shift());
    })().catch((e) => fail(String(e?.message ?? e)));
  };
  ws.onclose = (ev) => {
    const done = client?.info().done;
    set({ connection: done ? 'finished' : 'closed', closeCode: ev.code, closeReason: ev.reason,
      error: done ? state.error : state.error || ev.reason || `closed (${ev.code})` });
  };
}

self.onmessage = (ev) => {
  if (ev.data?.type === 'start' && state.connection === 'starting') run(ev.data);
};
