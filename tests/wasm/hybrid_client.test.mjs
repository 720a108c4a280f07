// The wasm core's hybrid client (dnnlab_hybrid_* in dnnlab_wasm.h) under
// node, without a browser: two node clients speak the protocol of
// docs/distributed.md "Over the network" to a real `dnnlab train
// --distributed --listen` (hello, welcome with core_spec and shard, then the
// binary frames handed to the core as they come) and train with it; and the
// core refuses what it must (a garbage frame, a shard that is not the
// server's) with a message rather than an abort.
//   node --experimental-websocket tests/wasm/hybrid_client.test.mjs --core DIR --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const CORE = resolve(arg('--core', resolve(here, '../../build/release/web/dist/core')));
const DNNLAB = arg('--dnnlab', null);
const { wrapCore, DnnlabError } = await import('../../src/wasm/dnnlab_api.mjs');

const missing = !existsSync(join(CORE, 'dnnlab_core.wasm')) ? `no wasm core in ${CORE}`
  : !DNNLAB || !existsSync(DNNLAB) ? 'no --dnnlab binary' : typeof WebSocket === 'undefined'
    ? 'no WebSocket in this node (node 20: --experimental-websocket)' : null;
if (missing) {
  test('prerequisites', () => { throw new Error(missing); });
} else {
  await run();
}

async function loadCore() {
  const { default: factory } = await import(pathToFileURL(join(CORE, 'dnnlab_core.mjs')).href);
  return wrapCore(await factory({ wasmBinary: readFileSync(join(CORE, 'dnnlab_core.wasm')) }));
}

const SPEC = `name: hybrid-node
data: {dataset: synthetic, validation: 64, limit_train: 256}
model:
  input: [1, 28, 28]
  parts:
    features:
      - {conv2d: 4, padding: 1}
      - batchnorm
      - relu
      - max_pool2d: 2
    classifier:
      - dense: 10
train:
  epochs: 2
  batch_size: 16
  seed: 3
  optimizer: {type: adam, lr: 0.003}
`;

// One client: resolves with its state when the socket closes.
function nodeClient(core, url, token, { onWelcome } = {}) {
  return new Promise((done) => {
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    const s = { client: null, welcome: null, tickets: 0, bytesIn: 0, bytesOut: 0, error: '', hc: null };
    const early = [];
    const handle = (buf) => {
      const reply = s.hc.frame(buf);
      s.bytesIn += buf.byteLength;
      if (reply) { ws.send(reply); s.bytesOut += reply.byteLength; }
    };
    ws.onopen = () => ws.send(JSON.stringify({ v: 2, type: 'hello', token, agent: 'browser' }));
    ws.onmessage = async (ev) => {
      if (typeof ev.data !== 'string') {
        if (!s.hc) return early.push(ev.data);
        try { handle(ev.data); } catch (e) { s.error = e.message; ws.close(); }
        return;
      }
      const m = JSON.parse(ev.data);
      if (m.type === 'error') { s.error = m.message; return; }
      s.welcome = m;
      s.client = m.client;
      onWelcome?.(m);
      const res = await fetch(new URL(m.shard, url.replace(/^ws/, 'http')), { headers: { authorization: `Bearer ${token}` } });
      if (!res.ok) { s.error = `GET ${m.shard}: ${res.status}`; return ws.close(); }
      const shard = core.openShard(new Uint8Array(await res.arrayBuffer()));
      s.hc = core.createHybridClient(m.core_spec, shard, m.data_fingerprint);
      s.shard = shard;
      while (early.length) handle(early.shift());
    };
    ws.onclose = (ev) => {
      s.info = s.hc?.info();
      s.closeCode = ev.code;
      s.closeReason = ev.reason;
      done(s);
    };
  });
}

// Starts `dnnlab train SPEC --distributed --listen` for two clients in `dir`
// (with `extra` flags) and waits for the join line it prints. The run's
// output gathers in `log`; `exited` settles with its exit code.
async function startTrain(dir, extra = []) {
  writeFileSync(join(dir, 'spec.yaml'), SPEC);
  const p = spawn(DNNLAB, ['train', join(dir, 'spec.yaml'), '--distributed', '--listen', '127.0.0.1:0',
    '--clients', '2', '--client-wait', '60', ...extra, '--out', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
  const train = { log: '', exited: new Promise((ok) => p.on('exit', (c) => ok(c))) };
  p.stderr.on('data', (d) => { train.log += d; });
  p.stdout.on('data', (d) => { train.log += d; });
  let j = null;
  for (let i = 0; i < 300 && !j; i++) {
    j = train.log.match(/join with: dnnlab join (\S+) --token ([0-9a-f]+)/);
    if (!j) await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(j, train.log);
  [train.url, train.token] = [j[1], j[2]];
  return train;
}

async function run() {
  const core = await loadCore();

  test('two node clients train with dnnlab train --listen through the wasm core', { timeout: 120_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'dnnlab-hybrid-node-'));
    try {
      const train = await startTrain(dir);
      let welcome = null, noToken = null;
      const clients = await Promise.all([0, 1].map(() => nodeClient(core, train.url, train.token, {
        onWelcome: (w) => {
          welcome = w;
          // The training data only with the join token (asked while the run serves).
          noToken ??= fetch(new URL(w.shard, train.url.replace(/^ws/, 'http'))).then((r) => r.status);
        },
      })));
      assert.equal(await noToken, 401, 'the shard without the token');
      assert.equal(await train.exited, 0, train.log);
      const metrics = JSON.parse(readFileSync(join(dir, 'hybrid-node.metrics.json'), 'utf8'));
      const d = metrics.distributed;
      // The welcome carries what a browser needs, the shard is the server's.
      assert.equal(typeof welcome.core_spec, 'object');
      assert.match(welcome.shard, /^\/hybrid\/shard-[0-9a-f]{16}\.safetensors$/);
      assert.equal(d.tickets_by_client.length, 2);
      for (const c of clients) {
        const brief = JSON.stringify({ client: c.client, error: c.error, info: c.info, closeCode: c.closeCode, closeReason: c.closeReason });
        assert.equal(c.error, '', `${brief}\n${train.log}`);
        assert.equal(c.info.done, true, 'the server said bye');
        assert.ok(c.info.tickets > 0);
        assert.equal(c.info.tickets, d.tickets_by_client[c.client], JSON.stringify({ d, info: c.info }));
      }
      assert.equal(d.reissued, 0);
      assert.deepEqual(d.quarantined, []);
      // 16 batches an epoch: 8 rounds of two, each publishing a version (s = 0).
      assert.equal(d.versions, 16);
      assert.ok(metrics.epochs[1].train_loss < metrics.epochs[0].train_loss, JSON.stringify(metrics.epochs));
      assert.ok(metrics.epochs[1].val_loss < 2.0, JSON.stringify(metrics.epochs));

      // A garbage frame and a shard that is not the server's: errors, not aborts.
      const shard = clients[0].shard;
      const hc = core.createHybridClient(welcome.core_spec, shard, welcome.data_fingerprint);
      assert.throws(() => hc.frame(new Uint8Array([1, 2, 3, 4, 5])),
        (e) => e instanceof DnnlabError && /hybrid frame at byte 0/.test(e.message));
      const ticket = new Uint8Array(40);  // a ticket for version 0 before any weights (format 2)
      ticket.set([0x44, 0x4e, 0x48, 0x46, 2, 1]);
      new DataView(ticket.buffer).setUint32(16, 1, true);
      new DataView(ticket.buffer).setUint32(24, 1, true);
      assert.throws(() => hc.frame(ticket), /this client holds none/);
      assert.equal(hc.info().tickets, 0);
      hc.free();
      assert.throws(() => core.createHybridClient(welcome.core_spec, shard, '0123456789abcdef'),
        (e) => e.code === 'data' && /is not the server's/.test(e.message));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // The core speaks int8 (docs/distributed.md "Bytes"): with error feedback
  // both ways, its quantised activations pass the server's native re-checks
  // (the first 3 tickets of each client) and the frames shrink to a quarter.
  test('the wasm core trains in int8 frames with error feedback', { timeout: 120_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'dnnlab-hybrid-node8-'));
    try {
      const train = await startTrain(dir, ['--wire', 'int8', '--error-feedback', 'both']);
      const clients = await Promise.all([0, 1].map(() => nodeClient(core, train.url, train.token)));
      assert.equal(await train.exited, 0, train.log);
      const metrics = JSON.parse(readFileSync(join(dir, 'hybrid-node.metrics.json'), 'utf8'));
      const d = metrics.distributed;
      assert.equal(d.wire, 'int8');
      assert.equal(d.error_feedback, 'both');
      for (const c of clients) {
        assert.equal(c.error, '', train.log);
        assert.equal(c.info.done, true);
        assert.ok(c.info.tickets > 0);
      }
      assert.deepEqual(d.quarantined, [], train.log);
      assert.ok(d.rechecks >= 6, JSON.stringify(d));
      assert.equal(d.recheck_failures, 0);
      // Activations [16, 4, 14, 14]: 3,136 bytes a sample in float32; in
      // int8 each ticket's frames (activations and the small weight
      // gradients) stay under 30% of float32's activations alone.
      const act32 = 4 * 16 * 4 * 14 * 14;
      assert.ok(d.bytes_from_clients / d.tickets < 0.3 * act32, JSON.stringify(d));
      assert.ok(metrics.epochs[1].train_loss < metrics.epochs[0].train_loss, JSON.stringify(metrics.epochs));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
