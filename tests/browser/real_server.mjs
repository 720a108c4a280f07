// Runs the real `dnnlab serve` on a temporary SQLite store for the browser
// tests, submits a small sweep through the API and starts workers on demand.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep } from './launch.mjs';

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

// Why the real server cannot be used here, or null.
export function realServerMissing(bin) {
  if (!bin) return 'no --dnnlab binary given';
  const help = spawnSync(bin, ['--help'], { encoding: 'utf8' });
  if (help.error) return `cannot run ${bin}: ${help.error.message}`;
  if (!/^\s+serve\b/m.test(help.stdout)) return `${bin} has no serve subcommand yet`;
  return null;
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
export async function startRealServer({ bin, dist, args = [], tls = null }) {
  const dir = mkdtempSync(join(tmpdir(), 'dnnlab-real-'));
  const store = `sqlite:${join(dir, 'dnnlab.db')}`;
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
  const serve = start(['serve', '--listen', `127.0.0.1:${port}`, '--store', store, '--web', dist, ...args]);
  for (let i = 0; ; i++) {
    if (serve.exitCode !== null) throw new Error(`dnnlab serve exited ${serve.exitCode}:\n${log}`);
    try { if ((await requestJson(`${url}/api/stats`, { ca })).status === 200) break; } catch { /* not up yet */ }
    if (i > 100) throw new Error(`dnnlab serve did not answer on ${url}:\n${log}`);
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
      return start(['worker', '--store', store, '--experiment', String(experiment), '--idle-exit', '10']);
    },
    port,
    get: async (path) => (await requestJson(`${url}${path}`, { ca })).json,
    async close() {
      for (const p of procs.reverse()) if (p.exitCode === null) p.kill('SIGTERM');
      await sleep(300);
      for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
