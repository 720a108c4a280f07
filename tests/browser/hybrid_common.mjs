// What the browser tests of a distributed run share (hybrid_join, hybrid_run):
// their arguments and prerequisites, the small Fashion-MNIST CNN they train,
// and `dnnlab` processes whose output they read.
import { spawn } from 'node:child_process';
import { connect, createServer } from 'node:net';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, prerequisite, until } from './launch.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const require = createRequire(resolve(here, '../../web/package.json'));
export const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
export const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
export const DNNLAB = arg('--dnnlab', process.env.DNNLAB_BIN || null);
export const FASHION = '/usr/share/datasets/fashion-mnist';
// The generated set's [784] samples read as [1, 28, 28] where Fashion-MNIST
// is not installed; under CI it is (scripts/bootstrap.sh), and required below.
export const DATASET = existsSync(FASHION) ? 'fashion-mnist' : 'synthetic';

// 768 images, batch 32: 24 batches an epoch.
export const hybridSpec = (name, epochs) => `name: ${name}
data: {dataset: ${DATASET}, validation: 300, limit_train: 768}
model:
  input: [1, 28, 28]
  parts:
    features:
      - {conv2d: 6, kernel: 3, padding: 1, bias: false}
      - batchnorm
      - relu
      - max_pool2d: 2
    classifier:
      - dense: 10
train:
  epochs: ${epochs}
  batch_size: 32
  seed: 7
  optimizer: {type: adam, lr: 0.003}
`;

// The skip reason (under CI: a failing test) when a part is missing; `page`
// is the bundle file the test opens.
export const hybridSkip = (test, page) => prerequisite(test, !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}`
  : !existsSync(join(DIST, page)) ? `no ${page} in ${DIST}`
  : !existsSync(join(DIST, 'core', 'dnnlab_core.wasm')) ? `no wasm core in ${DIST}/core (em++ missing?)`
  : !DNNLAB || !existsSync(DNNLAB) ? 'no --dnnlab binary given'
  : process.env.CI && !existsSync(FASHION) ? `${FASHION} is not installed`
  : false);

// `dnnlab ARGS`: its output in p.log, its exit code (128 + 9 on a signal) in p.exited.
export function start(args, env = {}) {
  const p = spawn(DNNLAB, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  p.log = '';
  p.stdout.on('data', (d) => { p.log += d; });
  p.stderr.on('data', (d) => { p.log += d; });
  p.exited = new Promise((ok) => p.on('exit', (code, signal) => ok(code ?? 128 + (signal ? 9 : 0))));
  return p;
}

// `dnnlab train SPEC --distributed --listen 127.0.0.1:0 --clients N` (and
// `extra` flags) in a temporary directory, the page and core from DIST, until it has printed
// where to join: {dir, server, procs (kill them all with the test), lines
// {url, token, page, watch, watchToken}}. The test's end closes `run.browser`
// (set it once launched), kills what is left and removes the directory.
export async function startRun(t, spec, clients, extra = []) {
  const run = { dir: mkdtempSync(join(tmpdir(), 'dnnlab-hybrid-')), procs: [], browser: null };
  t.after(async () => {
    await run.browser?.close();
    for (const p of run.procs) if (p.exitCode === null) p.kill('SIGKILL');
    rmSync(run.dir, { recursive: true, force: true });
  });
  writeFileSync(join(run.dir, 'spec.yaml'), spec);
  run.server = start(['train', join(run.dir, 'spec.yaml'), '--distributed', '--listen', '127.0.0.1:0',
    '--clients', String(clients), '--client-wait', '120', '--out', run.dir, ...extra], { DNNLAB_WEB_DIR: DIST });
  run.procs.push(run.server);
  const log = () => run.server.log;
  run.lines = await until('the join lines', () => {
    if (run.server.exitCode !== null) throw new Error(`dnnlab train exited ${run.server.exitCode}:\n${log()}`);
    const native = log().match(/join with: dnnlab join (\S+) --token ([0-9a-f]+)/);
    const page = log().match(/browsers join at (\S+)/);
    const watch = log().match(/watch the run at (\S+)#token=([0-9a-f]{64})/);
    return native && page && watch
      ? { url: native[1], token: native[2], page: page[1], watch: watch[1], watchToken: watch[2] } : null;
  }, 30_000).catch((e) => { throw new Error(`${e.message}:\n${log()}`); });
  return run;
}

// A slow link in front of a run's ws:// URL, for one client: each chunk
// from the server is passed on `ms` later (the other way at once). A test
// that must watch a run while it goes on makes it last so, however fast the
// machine. Resolves to the URL through it; `t.after` closes it.
export async function slowLink(t, url, ms) {
  const u = new URL(url);
  const sockets = [];
  const proxy = createServer((down) => {
    const up = connect(Number(u.port), u.hostname);
    sockets.push(down, up);
    down.pipe(up);
    up.on('data', (chunk) => {
      up.pause();
      setTimeout(() => { down.write(chunk); up.resume(); }, ms);
    });
    up.on('end', () => setTimeout(() => down.end(), ms));
    for (const s of [down, up]) s.on('error', () => { down.destroy(); up.destroy(); });
  });
  await new Promise((ok) => proxy.listen(0, '127.0.0.1', ok));
  t.after(() => { for (const s of sockets) s.destroy(); proxy.close(); });
  return `ws://127.0.0.1:${proxy.address().port}${u.pathname}`;
}
