// Runs the real `dnnlab serve` for the browser tests, submits a small sweep
// through the API and starts workers on demand. On a temporary SQLite store
// (the default), or in the cluster's shape: trials through a private RabbitMQ
// and results in a fresh database on a private PostgreSQL (store: 'postgres').
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from './launch.mjs';

const SCRIPTS = resolve(dirname(fileURLToPath(import.meta.url)), '../../scripts');
const PG_BINDIR = process.env.DNNLAB_PG_BINDIR || '/usr/lib/postgresql/15/bin';
const RABBITMQ_SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server';

// Six trials on 1000 Fashion-MNIST images (generated data where Fashion-MNIST
// is not installed): depth x activation, 2 epochs.
const DATASET = existsSync('/usr/share/datasets/fashion-mnist') ? 'fashion-mnist' : 'synthetic';
export const SMALL_SWEEP = `name: browser-sweep
template:
  data: {dataset: ${DATASET}, validation: 500, limit_train: 1000}
  model:
    layers:
      - repeat: \${depth}
        dense: 32
        activation: \${activation}
      - dense: 10
  train:
    epochs: 2
    batch_size: 64
    optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
search:
  method: grid
  metric: val_acc
  parameters:
    depth: [1, 2, 4]
    activation: [relu, tanh]
scheduler:
  type: fifo
`;

// One small CNN (a strided first convolution, no batchnorm: see
// join_cnn.test.mjs for what parts wasm and native there), 2 epochs on 512
// images: cheap in the wasm core and on SwiftShader's WebGPU.
export const smallCnnSweep = (name) => `name: ${name}
template:
  data: {dataset: ${DATASET}, validation: 128, limit_train: 512}
  model:
    input: [1, 28, 28]
    layers:
      - {conv2d: 4, kernel: 3, stride: 2, padding: 1}
      - relu
      - max_pool2d: 2
      - {conv2d: 8, kernel: 3, padding: 1}
      - relu
      - max_pool2d: 2
      - dense: 10
  train:
    epochs: 2
    batch_size: 32
    optimizer: {type: sgd, lr: \${lr}, momentum: 0.9}
search:
  method: grid
  metric: val_acc
  parameters:
    lr: [0.05]
scheduler:
  type: fifo
`;

// Why the real server cannot be used here, or null.
export function realServerMissing(bin) {
  if (!bin) return 'no --dnnlab binary given';
  const help = spawnSync(bin, ['--help'], { encoding: 'utf8' });
  if (help.error) return `cannot run ${bin}: ${help.error.message}`;
  if (!/^\s+serve\b/m.test(help.stdout)) return `${bin} has no serve subcommand yet`;
  return null;
}

// Why the cluster's servers (RabbitMQ, PostgreSQL, psql) cannot be started
// here, or null. The callers make it a failure under CI (launch.mjs prerequisite).
export function clusterServersMissing() {
  if (!existsSync(`${PG_BINDIR}/initdb`)) return `no PostgreSQL server in ${PG_BINDIR} (apt-get install postgresql, or set DNNLAB_PG_BINDIR)`;
  if (spawnSync('psql', ['--version']).error) return 'no psql (apt-get install postgresql-client)';
  if (!existsSync(RABBITMQ_SERVER)) return `no ${RABBITMQ_SERVER} (apt-get install rabbitmq-server)`;
  return null;
}

// scripts/<name> start|stop DIR; start prints the server's URL.
function testServer(name, cmd, dir) {
  const r = spawnSync(join(SCRIPTS, name), [cmd, dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${name} ${cmd} ${dir}: exit ${r.status ?? r.signal}: ${r.stderr}`);
  return r.stdout.trim();
}

function psql(url, sql) {
  const r = spawnSync('psql', ['-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', url, '-c', sql], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`psql ${sql}: ${r.error?.message ?? r.stderr}`);
  return r.stdout.trim();
}

// A private RabbitMQ (its own, in dir) and a fresh database on PostgreSQL:
// the ctest "postgres" fixture's server when DNNLAB_TEST_POSTGRES_DIR names a
// running one, else one started here. Returns {broker, store, stop}.
function startClusterServers(dir) {
  const stops = [];
  const stop = () => { for (const f of stops.reverse()) { try { f(); } catch { /* best effort */ } } };
  try {
    const rabbit = join(dir, 'rabbitmq');
    stops.push(() => spawnSync(join(SCRIPTS, 'rabbitmq_test_server.sh'), ['stop', rabbit, '--rm']));
    const broker = testServer('rabbitmq_test_server.sh', 'start', rabbit);
    const fixture = process.env.DNNLAB_TEST_POSTGRES_DIR;
    let admin;
    if (fixture && existsSync(join(fixture, 'url'))) {
      admin = readFileSync(join(fixture, 'url'), 'utf8').trim();
    } else {
      const pg = join(dir, 'postgres');
      stops.push(() => testServer('postgres_test_server.sh', 'stop', pg));
      admin = testServer('postgres_test_server.sh', 'start', pg);
    }
    const name = `browser_${process.pid}_${Date.now()}`;
    psql(admin, `CREATE DATABASE ${name}`);
    stops.push(() => psql(admin, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    return { broker, store: admin.replace(/\/[^/]*$/, `/${name}`), stop };
  } catch (e) {
    stop();
    throw e;
  }
}

const freePort = () => new Promise((ok, fail) => {
  const s = createServer();
  s.on('error', fail);
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); });
});

// One HTTP(S) request with a JSON answer; `ca` is the PEM the test trusts for
// https (node's fetch cannot be given one without a global agent).
function requestJson(url, { method = 'GET', headers = {}, body, ca } = {}) {
  return new Promise((ok, fail) => {
    const send = url.startsWith('https:') ? httpsRequest : httpRequest;
    const req = send(url, { method, headers, ca }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        try { ok({ status: res.statusCode, json: text ? JSON.parse(text) : null }); }
        catch (e) { fail(new Error(`${method} ${url}: ${res.statusCode}, not JSON: ${text.slice(0, 200)}`)); }
      });
    });
    req.on('error', fail);
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${url}: no answer in 10 s`)));
    req.end(body);
  });
}

// args: more `dnnlab serve` flags (e.g. ['--verify-fraction', '1']).
// tls: {cert, key, ca} files: the server speaks only HTTPS (--tls-cert/--tls-key)
// and the test's own requests trust `ca`.
// store: 'sqlite' (a file in a temporary directory) or 'postgres' (RabbitMQ +
// PostgreSQL, startClusterServers; check clusterServersMissing() first).
export async function startRealServer({ bin, dist, args = [], tls = null, store: kind = 'sqlite' }) {
  const dir = mkdtempSync(join(tmpdir(), 'dnnlab-real-'));
  const servers = kind === 'postgres' ? startClusterServers(dir) : null;
  const store = servers ? servers.store : `sqlite:${join(dir, 'dnnlab.db')}`;
  // The tokens live in dir whatever the store (beside a postgres:// store
  // would be the working directory).
  const backends = ['--store', store, ...(servers ? ['--broker', servers.broker] : [])];
  const port = await freePort();
  const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  const ca = tls ? readFileSync(tls.ca) : undefined;
  if (tls) args = ['--tls-cert', tls.cert, '--tls-key', tls.key, ...args];
  const procs = [];
  let log = '';
  const start = (args) => {
    const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    p.stdout.on('data', (d) => { log += d; });
    p.stderr.on('data', (d) => { log += d; });
    procs.push(p);
    return p;
  };
  const stopAll = async () => {
    for (const p of procs.reverse()) if (p.exitCode === null) p.kill('SIGTERM');
    await sleep(300);
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
    servers?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  const serve = start(['serve', '--listen', `127.0.0.1:${port}`, ...backends,
    '--token-file', join(dir, 'dnnlab.token'), '--web', dist, ...args]);
  for (let i = 0; ; i++) {
    let why = null;
    if (serve.exitCode !== null) why = `dnnlab serve exited ${serve.exitCode}`;
    else if (i > 100) why = `dnnlab serve did not answer on ${url}`;
    if (why) { await stopAll(); throw new Error(`${why}:\n${log}`); }
    try { if ((await requestJson(`${url}/api/stats`, { ca })).status === 200) break; } catch { /* not up yet */ }
    await sleep(100);
  }
  const token = readFileSync(join(dir, 'dnnlab.token'), 'utf8').trim();
  return {
    url,
    log: () => log,
    async submit(spec, name = 'browser-sweep.yaml') {
      const res = await requestJson(`${url}/api/experiments`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ spec, name }),
        ca,
      });
      if (res.status < 200 || res.status > 299) throw new Error(`submit: ${res.status} ${JSON.stringify(res.json)}`);
      return res.json.id;
    },
    startWorker(experiment) {
      return start(['worker', ...backends, '--experiment', String(experiment), '--idle-exit', '10']);
    },
    port,
    store,
    get: async (path) => (await requestJson(`${url}${path}`, { ca })).json,
    close: stopAll,
  };
}
