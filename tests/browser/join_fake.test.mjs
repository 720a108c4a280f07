// The join page against a fake gateway (node + ws): checks the client side of
// protocol v1 frame by frame — hello, request, progress per epoch waiting for
// each verdict, result + a weights frame of the right size, idle -> request,
// pause, and no reconnect after a 1008 'quarantined' close. Fast: no dnnlab
// server, one tiny synthetic shard made by tests/wasm's make_shard.
//   node tests/browser/join_fake.test.mjs --dist DIR --make-shard BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, LAUNCH, prerequisite, sleep, until as untilEvery } from './launch.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
const MAKE_SHARD = arg('--make-shard', process.env.DNNLAB_MAKE_SHARD || null);

const skip = prerequisite(test, !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}`
  : !existsSync(join(DIST, 'core', 'dnnlab_core.wasm')) ? `no join page + core in ${DIST}`
  : !MAKE_SHARD ? 'no --make-shard binary' : false);

const SPEC = {
  input: [784], classes: 10, layers: [{ type: 'dense', units: 8 }, { type: 'relu' }, { type: 'dense', units: 10 }],
  optimizer: { type: 'sgd', lr: 0.05, momentum: 0.9 }, batch_size: 32, seed: 5, epochs: 3,
};
const NUM_PARAMS = 784 * 8 + 8 + 8 * 10 + 10;
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm' };
const until = (what, fn, ms = 60_000) => untilEvery(what, fn, ms, 50);

// A fake server: static files, hashed core, one shard, and a scripted /join.
async function startFake(shardBytes) {
  const { WebSocketServer } = require('ws');
  const sha = createHash('sha256').update(shardBytes).digest('hex');
  const core = {};
  for (const f of ['dnnlab_core.mjs', 'dnnlab_core.wasm']) {
    const bytes = readFileSync(join(DIST, 'core', f));
    const h = createHash('sha256').update(bytes).digest('hex').slice(0, 16);
    core[`/core/${f.replace(/\.(\w+)$/, `.${h}.$1`)}`] = { bytes, type: TYPES[extname(f)] };
  }
  const urls = Object.keys(core);
  const http = createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    let body = null, type = 'application/octet-stream';
    if (core[path]) ({ bytes: body, type } = core[path]);
    else if (path === `/shards/${sha}.safetensors`) body = shardBytes;
    else if (path === '/join') { body = readFileSync(join(DIST, 'join.html')); type = 'text/html'; }
    else if (/^\/join[\w.]*\.js$/.test(path)) { body = readFileSync(join(DIST, path.slice(1))); type = 'text/javascript'; }
    if (!body) { res.writeHead(404).end(); return; }
    res.writeHead(200, { 'content-type': type, 'cache-control': 'public, max-age=31536000, immutable' }).end(body);
  });
  const wss = new WebSocketServer({ noServer: true });
  http.on('upgrade', (req, sock, head) => wss.handleUpgrade(req, sock, head, (ws) => wss.emit('connection', ws)));
  const fake = { frames: [], tickets: 0, maxTickets: 1, pruneAt: 0, sockets: [], sha, spec: SPEC };
  wss.on('connection', (ws) => {
    fake.sockets.push(ws);
    const send = (m) => ws.send(JSON.stringify({ v: 1, ...m }));
    ws.on('message', (data, binary) => {
      if (binary) {
        const b = Buffer.from(data);
        const h = b.readUInt32LE(0);
        const header = JSON.parse(b.subarray(4, 4 + h).toString());
        fake.frames.push({ type: 'tensor', header, values: b.length - 4 - h });
        send({ type: 'accepted', ticket: header.ticket, counted: true });
        return;
      }
      const m = JSON.parse(data.toString());
      fake.frames.push(m);
      if (m.type === 'hello') {
        send({ type: 'welcome', worker: 'browser-test', heartbeat_seconds: 1, max_text_bytes: 65536,
          max_binary_bytes: 1 << 26, wasm: { js: urls.find((u) => u.endsWith('.mjs')), wasm: urls.find((u) => u.endsWith('.wasm')) } });
      } else if (m.type === 'request') {
        if (fake.tickets >= fake.maxTickets) { send({ type: 'idle', retry_seconds: 0.3 }); return; }
        fake.tickets++;
        send({ type: 'ticket', ticket: `t-${fake.tickets}-1`, trial: { id: fake.tickets, experiment: 1, index: fake.tickets - 1, attempt: 1 },
          spec: fake.spec, data: { url: `/shards/${sha}.safetensors`, sha256: sha, bytes: shardBytes.length }, lease_seconds: 30 });
      } else if (m.type === 'progress') {
        const go = !(fake.pruneAt && m.epoch >= fake.pruneAt);
        setTimeout(() => send({ type: 'verdict', ticket: m.ticket, epoch: m.epoch, continue: go, ...(go ? {} : { reason: 'pruned' }) }), 30);
      } else if (m.type === 'result' && m.status === 'failed') {
        send({ type: 'accepted', ticket: m.ticket, counted: true });
      } else if (m.type === 'heartbeat') {
        send({ type: 'heartbeat' });
      }
    });
  });
  await new Promise((r) => http.listen(0, '127.0.0.1', r));
  fake.url = `http://127.0.0.1:${http.address().port}`;
  fake.close = () => { for (const s of fake.sockets) s.terminate(); wss.close(); http.close(); };
  return fake;
}

test('the join page speaks protocol v1 to a fake gateway', { skip, timeout: 180_000 }, async (t) => {
  const { chromium } = require('playwright-core');
  const tmp = mkdtempSync(join(tmpdir(), 'dnnlab-joinfake-'));
  execFileSync(MAKE_SHARD, [join(tmp, 's.safetensors'), 'synthetic', '400', '100']);
  const fake = await startFake(readFileSync(join(tmp, 's.safetensors')));
  const browser = await chromium.launch(LAUNCH);
  t.after(async () => { await browser.close(); fake.close(); rmSync(tmp, { recursive: true, force: true }); });
  const page = await browser.newPage();
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${fake.url}/join?token=secret`);
  const state = () => page.evaluate(() => ({ ...window.dnnlabJoin }));

  await until('one trial done', async () => (await state()).trialsDone === 1);
  const f = fake.frames;
  assert.equal(f[0].type, 'hello');
  assert.equal(f[0].token, 'secret');
  // A first visit has no identity yet: the server issues one in welcome.
  assert.ok(f[0].client === null || typeof f[0].client === 'string');
  assert.equal(typeof f[0].capabilities.simd, 'boolean');
  const progress = f.filter((m) => m.type === 'progress');
  assert.deepEqual(progress.map((m) => m.epoch), [1, 2, 3]);
  for (const p of progress)
    for (const k of ['train_loss', 'train_acc', 'val_loss', 'val_acc', 'seconds', 'samples_per_second', 'lr'])
      assert.ok(Number.isFinite(p[k]), `${k} = ${p[k]}`);
  const result = f.find((m) => m.type === 'result');
  assert.equal(result.status, 'finished');
  assert.equal(result.metrics.epochs_done, 3);
  assert.ok(result.metrics.test_acc > 0.5, `test_acc ${result.metrics.test_acc}`);
  const tensor = f.find((m) => m.type === 'tensor');
  assert.deepEqual(tensor.header, { v: 1, ticket: 't-1-1', tensor: 'weights', dtype: 'F32', count: NUM_PARAMS });
  assert.equal(tensor.values, NUM_PARAMS * 4);
  assert.ok(f.indexOf(tensor) === f.indexOf(result) + 1, 'the weights frame follows the result');
  // The client asks again after the result and after each idle.
  await until('requests after idle', () => f.filter((m) => m.type === 'request').length >= 3);
  await until('a heartbeat', () => f.some((m) => m.type === 'heartbeat' && m.paused === false));
  const s = await state();
  assert.equal(s.state, 'connected');
  assert.ok(s.samplesPerSecond > 0);

  // Paused: heartbeats say so, and no request goes out.
  await page.click('#pause');
  await until('a paused heartbeat', () => f.some((m) => m.type === 'heartbeat' && m.paused === true));
  const requests = f.filter((m) => m.type === 'request').length;
  await sleep(1000);
  assert.equal(f.filter((m) => m.type === 'request').length, requests, 'no requests while paused');
  // Resumed: a pruned trial sends status pruned (with weights) after the stop verdict.
  fake.maxTickets = 2;
  fake.pruneAt = 2;
  await page.click('#pause');
  await until('a pruned result', () => f.some((m) => m.type === 'result' && m.status === 'pruned'));
  assert.deepEqual(f.filter((m) => m.type === 'progress' && m.ticket === 't-2-1').map((m) => m.epoch), [1, 2]);
  assert.equal(f.filter((m) => m.type === 'result').find((m) => m.ticket === 't-2-1').metrics.epochs_done, 2);

  // A diverging trial is reported as failed, with the core's message, and no weights.
  fake.pruneAt = 0;
  fake.spec = { ...SPEC, optimizer: { type: 'sgd', lr: 1e9, momentum: 0.9 } };
  fake.maxTickets = 3;
  const failed = await until('a failed result', () => f.find((m) => m.type === 'result' && m.status === 'failed'));
  assert.equal(failed.ticket, 't-3-1');
  assert.match(failed.error, /numeric/);
  for (const v of Object.values(failed.metrics)) assert.ok(Number.isFinite(v));
  await until('the failed count', async () => (await state()).trialsFailed === 1);
  assert.ok(!f.some((m) => m.type === 'tensor' && m.header.ticket === 't-3-1'), 'no weights for a failed trial');

  // An epoch runs in slices that return to the event loop (heartbeats, pause):
  // 400 batches of 1, slices starting at 4 batches and at most 4x larger each
  // time (4, 16, 64, 256 < 400), so at least five, with the numbers of one call.
  fake.spec = { ...SPEC, batch_size: 1, epochs: 1 };
  fake.maxTickets = 4;
  const sliced = await until('the sliced trial', () => f.find((m) => m.type === 'result' && m.ticket === 't-4-1'));
  assert.equal(sliced.status, 'finished');
  assert.equal(sliced.metrics.epochs_done, 1);
  const slices = (await state()).epochSlices;
  assert.ok(slices >= 5, `the epoch ran in ${slices} slices`);
  t.diagnostic(`an epoch of 400 batches ran in ${slices} slices`);

  // A drop reconnects (hello again); a 1008 'quarantined' close does not.
  const hellos = () => f.filter((m) => m.type === 'hello').length;
  fake.sockets.at(-1).terminate();
  await until('a reconnect', () => hellos() === 2, 30_000);
  await until('connected again', async () => (await state()).state === 'connected');
  fake.sockets.at(-1).close(1008, 'quarantined: a result disagreed with a native re-run');
  await until('quarantined shown', async () => (await state()).state === 'quarantined');
  await sleep(2500);
  assert.equal(hellos(), 2, 'no reconnect after quarantine');
  assert.match(await page.textContent('#connection'), /quarantined/);
  assert.deepEqual(errors, []);
});
