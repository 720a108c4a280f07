// A browser client of a distributed run (docs/distributed.md "Browser
// clients"): one WebSocket to /hybrid, the text hello and welcome, then the
// server's binary frames handed to the wasm core's hybrid client
// (dnnlab_hybrid_frame: the same C++ step and frame codec as `dnnlab join`),
// whose replies go back as they are. This file only moves bytes.
import { wrapCore } from '../../../src/wasm/dnnlab_api.mjs';
import { afterClose, backoffMs } from './reconnect.js';

const state = {
  // connecting | loading | connected | reconnecting | finished | closed | gave-up
  connection: 'starting',
  client: null,           // the id the server gave this client (kept across links)
  tickets: 0, version: null, // tickets answered on every link
  bytesIn: 0, bytesOut: 0, framesIn: 0, framesOut: 0,
  data: '', kernels: '', error: '', closeCode: 0, closeReason: '',
  tries: 0,               // reconnect tries allowed after a lost link
  try: 0,                 // the reconnect try waited for or under way (1..tries); 0 once welcomed
  retryAt: 0,             // when that try connects (Date.now() ms), while waiting
  lost: '',               // why the last link was lost
  reconnects: 0,          // links resumed after a lost one
  gaveUp: '',             // why reconnecting ended: the server refused the identity, or no try got through
  refused: false,         // the server refused the identity presented
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

// Loads the core and the shard once (the first welcome names the shard): a
// new link makes a new client over the same shard, which stays open.
let loaded = null;
function load(corePromise, msg, base, token) {
  loaded ??= (async () => {
    if (!msg.core_spec || !msg.shard) throw new Error('the welcome has no core_spec or shard: this server cannot take browser clients');
    const core = await corePromise;
    set({ kernels: core.kernels });
    const shard = core.openShard(await fetchBytes(new URL(msg.shard, base).href, token));
    set({ data: `${shard.info.dataset}, ${shard.info.train} training samples` });
    return { core, shard };
  })().catch((e) => {
    loaded = null; // a later link tries again
    throw e;
  });
  return loaded;
}

// `identity` ({client, secret} from an earlier welcome of this run, kept by
// the page): presented in the hello to resume that client's record
// (docs/distributed.md "Identities"). After a lost link the client joins
// again as its identity, up to `tries` times (`?reconnect=N`; "Reconnecting").
function run({ token, url, base, identity: kept, tries }) {
  const corePromise = loadCore(base);
  let identity = kept ?? null;
  let fingerprint = null; // the first welcome's: a resumed link must be of the same run
  let ticketsBefore = 0;  // answered on earlier links
  set({ tries });

  // One socket; `k`: the reconnect try it is (0: the first connection).
  const connect = (k) => {
    set({ connection: k ? 'reconnecting' : 'connecting', try: k, retryAt: 0 });
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    const link = { welcomed: false, done: false, failed: false, timedOut: false, message: '' };
    const presented = Boolean(identity);
    let client = null;    // the wasm hybrid client, once the welcome's data is loaded
    const early = [];     // frames that came while it was loading
    const welcomeTimer = setTimeout(() => {
      link.timedOut = true;
      ws.close();
    }, 10_000);
    const fail = (message) => {
      link.failed = true;
      set({ error: message });
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000, 'the client failed');
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
      state.tickets = ticketsBefore + info.tickets;
      state.version = info.version;
      link.done = info.done;
      publish(info.done);
    };
    ws.onopen = () => ws.send(JSON.stringify({
      v: 2, type: 'hello', token, agent: 'browser',
      ...(identity ? { client: identity.client, secret: identity.secret } : {}),
    }));
    ws.onmessage = (ev) => {
      if (typeof ev.data !== 'string') {
        if (!client) early.push(ev.data);
        else if (!link.failed) {
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
      if (msg.type === 'error') {
        link.message = msg.message;
        return;
      }
      if (msg.type !== 'welcome') return;
      clearTimeout(welcomeTimer);
      if (presented && msg.client !== identity.client) {
        return fail(`the server resumed client ${identity.client} as client ${msg.client}`);
      }
      if (fingerprint !== null && msg.data_fingerprint !== fingerprint) {
        return fail(`the server resumed client ${msg.client} in another run (data fingerprint ${msg.data_fingerprint})`);
      }
      fingerprint = msg.data_fingerprint;
      link.welcomed = true;
      if (k) set({ reconnects: state.reconnects + 1 });
      set({ connection: 'loading', client: msg.client, try: 0, error: '' });
      // Not in the state the page mirrors (window.dnnlabHybrid): only the page keeps it.
      if (msg.secret) {
        identity = { client: msg.client, secret: msg.secret };
        self.postMessage({ type: 'identity', identity });
      }
      (async () => {
        const { core, shard } = await load(corePromise, msg, base, token);
        // A new link holds no weights: a fresh features part, which the
        // server's weights overwrite before its first ticket.
        const made = core.createHybridClient(msg.core_spec, shard, msg.data_fingerprint);
        if (ws.readyState !== WebSocket.OPEN) return made.free(); // lost while loading
        client = made;
        set({ connection: 'connected' });
        while (early.length && !link.failed) handle(early.shift());
      })().catch((e) => fail(String(e?.message ?? e)));
    };
    ws.onclose = (ev) => {
      clearTimeout(welcomeTimer);
      if (client) {
        link.done ||= client.info().done;
        ticketsBefore += client.info().tickets;
        client.free();
        client = null;
      }
      const reason = link.message || ev.reason;
      const then = afterClose({ ...link, code: ev.code, reason }, presented);
      const closed = { closeCode: ev.code, closeReason: ev.reason };
      if (then.next === 'finished') return set({ ...closed, connection: 'finished' });
      if (then.next === 'closed') {
        return set({ ...closed, connection: 'closed',
          error: state.error || (link.welcomed ? `the server closed the link: ${then.why}` : then.why) });
      }
      if (then.next === 'refused') {
        return set({ ...closed, connection: 'gave-up', refused: true,
          gaveUp: `the server refused to resume client ${identity.client}: ${then.why}` });
      }
      // Lost, or "try again later": joined again, within the tries.
      const next = link.welcomed ? 1 : k + 1;
      if (tries === 0) {
        return set({ ...closed, connection: 'gave-up',
          gaveUp: `the link was lost (${then.why}) and reconnecting is off (reconnect=0)` });
      }
      if (next > tries) {
        return set({ ...closed, connection: 'gave-up',
          gaveUp: `the link was lost and ${tries} ${tries === 1 ? 'try' : 'tries'} at reconnecting failed; the last: ${then.why}` });
      }
      const pause = backoffMs(next);
      set({ ...closed, connection: 'reconnecting', try: next, retryAt: Date.now() + pause, lost: then.why });
      setTimeout(() => connect(next), pause);
    };
  };
  connect(0);
}

self.onmessage = (ev) => {
  if (ev.data?.type === 'start' && state.connection === 'starting') run(ev.data);
};
