// The headless join worker (web/join_node.mjs, issue 28) against the real
// `dnnlab serve`: the join page's worker code run under node. With --backend
// auto and no WebGPU here (the npm package webgpu is not installed, and Dawn
// refuses lavapipe), it says why and trains in the wasm core: an MLP sweep
// and a small CNN whose results agree with their native re-runs
// (--verify-fraction 1), then it leaves after --trials. A bad flag, URL or
// token exits non-zero naming the problem; SIGINT mid-trial leaves with 130
// and the trial goes back to the queue. Against `dnnlab serve --tls-cert` with
// a self-signed certificate it joins only with --tls-ca naming it.
//   node tests/browser/join_node.test.mjs --dist DIR --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { prerequisite, until } from './launch.mjs';
import { hasOpenssl, makeCertificate } from './certificate.mjs';
import { SMALL_SWEEP, realServerMissing, smallCnnSweep, startRealServer } from './real_server.mjs';
import { nodeGpu } from '../../web/src/join/node_host.js';

const here = dirname(fileURLToPath(import.meta.url));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
const DNNLAB = arg('--dnnlab', process.env.DNNLAB_BIN || null);
const JOIN = resolve(here, '../../web/join_node.mjs');
const WS = resolve(here, '../../web/node_modules/ws');
// Where the npm package webgpu is installed and finds an adapter (a GPU
// machine) the cases below would train on the GPU; without the package, or
// without an adapter (Dawn takes no software Vulkan), they fall back.
const { gpu: GPU } = await nodeGpu();
const ADAPTER = !!(GPU && await GPU.requestAdapter().catch(() => null));
const BACKEND = ADAPTER ? '(webgpu|wasm)' : 'wasm'; // auto's probe decides on a GPU
const NO_GPU = GPU ? 'no WebGPU adapter' : 'no WebGPU under node: the npm package webgpu is not installed';

// One trial long enough to be interrupted in.
const LONG_SWEEP = SMALL_SWEEP.replace('name: browser-sweep', 'name: node-long').replace('epochs: 2', 'epochs: 40')
  .replace('depth: [1, 2, 4]', 'depth: [8]').replace('activation: [relu, tanh]', 'activation: [relu]');

const skip = prerequisite(test, !existsSync(join(DIST, 'core', 'dnnlab_core.wasm')) ? `no wasm core in ${DIST}/core (em++ missing?)`
  : !existsSync(WS) ? `no ${WS} (cd web && npm ci)`
  : !hasOpenssl ? 'no openssl CLI to make a certificate'
  : realServerMissing(DNNLAB) || false);

// node web/join_node.mjs ARGS: { code, stdout, stderr, child } once it exits
// (killed after timeoutMs); onStdout sees the output so far.
function runJoin(args, { timeoutMs = 60_000, onStdout = () => {} } = {}) {
  const child = spawn(process.execPath, [JOIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '', stderr = '';
  child.stdout.on('data', (d) => { stdout += d; onStdout(stdout, child); });
  child.stderr.on('data', (d) => { stderr += d; });
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((ok) => child.on('exit', (code, signal) => {
    clearTimeout(timer);
    ok({ code: code ?? signal, stdout, stderr });
  }));
}

test('the node join worker trains trials that pass native verification, on wasm without a GPU', { skip, timeout: 240_000 }, async (t) => {
  const t0 = Date.now();
  const server = await startRealServer({ bin: DNNLAB, dist: DIST, args: ['--verify-fraction', '1'] });
  const cache = mkdtempSync(join(tmpdir(), 'dnnlab-join-node-'));
  t.after(async () => { await server.close(); rmSync(cache, { recursive: true, force: true }); });
  const joinUrl = await until('the join URL', () => server.log().match(/browsers join at (\S+)/)?.[1], 10_000);
  const worker = (out) => out.match(/connected to \S+ as worker (\S+)/)?.[1];

  await t.test('bad flags, URLs and tokens exit non-zero naming the problem', async () => {
    const cases = [
      [[], 2, /no URL/],
      [['--backend', 'gpu', joinUrl], 2, /--backend must be auto, webgpu or wasm, not 'gpu'/],
      [[joinUrl, '--trials', 'many'], 2, /--trials must be a whole number/],
      [[joinUrl, '--frobnicate'], 2, /unknown flag --frobnicate/],
      [['ftp://example.org/join?token=x'], 2, /URL: expected http\(s\)/],
      [[`${server.url}/join`], 2, /no join token/],
      // A file, and a path under /proc (where node's recursive mkdir never returns).
      [[joinUrl, '--cache-dir', '/etc/passwd'], 2, /--cache-dir \/etc\/passwd: not a directory/],
      [[joinUrl, '--cache-dir', '/proc/dnnlab-none/x'], 2, /--cache-dir \/proc\/dnnlab-none\/x: ENOENT/],
      [[joinUrl.replace(/token=\w+/, 'token=wrong'), '--cache-dir', cache], 1, /cannot join .*the join token is wrong/],
      [[`http://127.0.0.1:1/join?token=x`, '--cache-dir', cache], 1, /cannot join ws:\/\/127\.0\.0\.1:1\/join: .*ECONNREFUSED/],
    ];
    if (!ADAPTER) cases.push([[joinUrl, '--backend', 'webgpu', '--cache-dir', cache], 1, /--backend webgpu: .*(webgpu is not installed|no WebGPU adapter)/]);
    const runs = await Promise.all(cases.map(([args]) => runJoin(args, { timeoutMs: 20_000 })));
    runs.forEach((r, i) => {
      const [args, code, message] = cases[i];
      assert.equal(r.code, code, `${args.join(' ')}: exit ${r.code}\n${r.stdout}${r.stderr}`);
      assert.match(r.stderr, message, args.join(' '));
    });
  });

  let id = '';
  await t.test('--backend auto falls back to wasm, saying why, and finishes an MLP and a CNN sweep', async () => {
    const mlp = await server.submit(SMALL_SWEEP, 'node-mlp.yaml'); // six trials
    const cnn = await server.submit(smallCnnSweep('node-cnn'), 'node-cnn.yaml');
    const r = await runJoin([joinUrl, '--backend', 'auto', '--trials', '7', '--cache-dir', cache], { timeoutMs: 120_000 });
    for (const line of r.stdout.trim().split('\n')) t.diagnostic(line);
    assert.equal(r.code, 0, `exit ${r.code}\n${r.stdout}${r.stderr}\n${server.log()}`);
    id = worker(r.stdout);
    assert.ok(id?.startsWith('browser-'), r.stdout);
    if (!ADAPTER) assert.match(r.stdout, /^join: backend auto: no WebGPU .*; trials train in the wasm core$/m);
    if (!ADAPTER) assert.ok(r.stdout.includes(`\njoin: backend wasm: ${NO_GPU}`), r.stdout);
    const kernels = r.stdout.match(/wasm core loaded \((\S+)\)/)?.[1];
    assert.ok(kernels, r.stdout);
    const epochLine = new RegExp(`^join: ticket \\S+ epoch \\d/2: .* \\d+ samples/s, backend ${BACKEND}$`, 'gm');
    assert.equal(r.stdout.match(epochLine)?.length, 14, r.stdout);
    assert.match(r.stdout, /\(7 done, 0 failed\)\njoin: 7 trial\(s\) ended; leaving\n$/);
    const trials = [];
    for (const exp of [mlp, cnn]) trials.push(...(await server.get(`/api/experiments/${exp}/trials?limit=10`)).trials);
    assert.equal(trials.length, 7);
    for (const x of trials) {
      assert.equal(x.status, 'finished', JSON.stringify(x));
      assert.equal(x.worker, id);
      assert.equal(x.epochs_done, 2);
      const { provenance } = await server.get(`/api/trials/${x.id}`);
      assert.match(provenance.backend, new RegExp(`^${BACKEND}$`));
      assert.equal(provenance.adapter === undefined, provenance.backend === 'wasm', JSON.stringify(provenance));
      assert.equal(provenance.worker_kind, 'browser');
      assert.equal(provenance.kernel_target, kernels);
    }
    const ids = trials.map((x) => x.id);
    const verified = await until(`the native re-runs of ${ids}`, async () => {
      const { events } = await server.get('/api/events?limit=10000');
      const v = events.filter((e) => e.type === 'trial.verified' && ids.includes(e.data.trial));
      return v.length >= ids.length ? v : null;
    }, 60_000, 250);
    for (const e of verified) {
      assert.equal(e.data.agree, true, JSON.stringify(e.data));
      assert.match(e.data.backend, new RegExp(`^${BACKEND}$`));
    }
  });

  await t.test('SIGINT mid-trial leaves with 130 and gives the ticket back; the identity is kept', async () => {
    const exp = await server.submit(LONG_SWEEP, 'node-long.yaml');
    let interrupted = false;
    const r = await runJoin([joinUrl, '--cache-dir', cache], {
      onStdout: (out, child) => {
        if (!interrupted && /epoch 1\/40/.test(out)) {
          interrupted = true;
          child.kill('SIGINT');
        }
      },
    });
    assert.equal(r.code, 130, `exit ${r.code}\n${r.stdout}${r.stderr}`);
    assert.equal(worker(r.stdout), id, 'the second run is the same client (its identity kept in --cache-dir)');
    const ticket = r.stdout.match(/SIGINT: leaving \(ticket (\S+) goes back to the server\)/)?.[1];
    assert.ok(ticket, r.stdout);
    const [x] = await until('the trial to be given back', async () => {
      const { trials } = await server.get(`/api/experiments/${exp}/trials?limit=10`);
      return trials[0]?.status === 'queued' ? trials : null;
    }, 10_000);
    assert.equal(x.epochs_done ?? 0, 0, JSON.stringify(x));
  });
  t.diagnostic(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});

test('--tls-ca: the node join worker trusts a self-signed https server with its certificate, and only then', { skip, timeout: 120_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'dnnlab-join-node-tls-'));
  const tls = makeCertificate(dir);
  const server = await startRealServer({ bin: DNNLAB, dist: DIST, tls });
  t.after(async () => { await server.close(); rmSync(dir, { recursive: true, force: true }); });
  const joinUrl = await until('the join URL', () => server.log().match(/browsers join at (\S+)/)?.[1], 10_000);
  assert.match(joinUrl, /^https:\/\/127\.0\.0\.1:/);
  const cache = join(dir, 'cache');
  mkdirSync(join(dir, 'stranger'));
  const stranger = makeCertificate(join(dir, 'stranger')); // for the same address, another key
  writeFileSync(join(dir, 'not.pem'), 'a certificate, honestly\n');
  const cases = [
    // The system's CAs do not hold a self-signed certificate.
    [[joinUrl, '--cache-dir', cache], 1, /cannot join wss:\/\/127\.0\.0\.1:\d+\/join: .*self[- ]signed certificate/],
    [[joinUrl, '--tls-ca', stranger.cert, '--cache-dir', cache], 1, /cannot join wss:\/\/127\.0\.0\.1:\d+\/join: .*self[- ]signed certificate/],
    [[joinUrl.replace('https:', 'http:'), '--tls-ca', tls.cert], 2, /--tls-ca is for https:\/\/ \(wss:\/\/\) URLs/],
    [[joinUrl, '--tls-ca', join(dir, 'none.pem'), '--cache-dir', cache], 2, /--tls-ca \S+none\.pem: no such file/],
    [[joinUrl, '--cacert', join(dir, 'not.pem'), '--cache-dir', cache], 2, /--tls-ca \S+not\.pem: not a PEM certificate/],
  ];
  const runs = await Promise.all(cases.map(([args]) => runJoin(args, { timeoutMs: 20_000 })));
  runs.forEach((r, i) => {
    const [args, code, message] = cases[i];
    assert.equal(r.code, code, `${args.join(' ')}: exit ${r.code}\n${r.stdout}${r.stderr}`);
    assert.match(r.stderr, message, args.join(' '));
  });
  // With the certificate: the core and the shard over https, the tickets over wss.
  const exp = await server.submit(SMALL_SWEEP.replace('depth: [1, 2, 4]', 'depth: [1]').replace('activation: [relu, tanh]', 'activation: [relu]'), 'node-tls.yaml');
  const r = await runJoin([joinUrl, '--tls-ca', tls.cert, '--once', '--cache-dir', cache], { timeoutMs: 60_000 });
  assert.equal(r.code, 0, `exit ${r.code}\n${r.stdout}${r.stderr}\n${server.log()}`);
  assert.match(r.stdout, /^join: connected to wss:\/\/127\.0\.0\.1:\d+\/join as worker browser-/m);
  assert.match(r.stdout, /wasm core loaded/);
  const { trials } = await server.get(`/api/experiments/${exp}/trials?limit=10`);
  assert.deepEqual(trials.map((x) => x.status), ['finished']);
});
