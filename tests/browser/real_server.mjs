// Runs the real `dnnlab serve` on a temporary SQLite store for the browser
// tests, submits a small sweep through the API and starts workers on demand.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// args: more `dnnlab serve` flags (e.g. ['--verify-fraction', '1']).
export async function startRealServer({ bin, dist, args = [] }) {
  const dir = mkdtempSync(join(tmpdir(), 'dnnlab-real-'));
  const store = `sqlite:${join(dir, 'dnnlab.db')}`;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
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
    try { if ((await fetch(`${url}/api/stats`)).ok) break; } catch { /* not up yet */ }
    if (i > 100) throw new Error(`dnnlab serve did not answer on ${url}:\n${log}`);
    await sleep(100);
  }
  const token = readFileSync(join(dir, 'dnnlab.token'), 'utf8').trim();
  return {
    url,
    log: () => log,
    async submit(spec, name = 'browser-sweep.yaml') {
      const res = await fetch(`${url}/api/experiments`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ spec, name }),
      });
      const body = await res.json();
      if (!res.ok) throw new Error(`submit: ${res.status} ${JSON.stringify(body)}`);
      return body.id;
    },
    startWorker(experiment) {
      return start(['worker', '--store', store, '--experiment', String(experiment), '--idle-exit', '10']);
    },
    get: async (path) => (await fetch(`${url}${path}`)).json(),
    async close() {
      for (const p of procs.reverse()) if (p.exitCode === null) p.kill('SIGTERM');
      await sleep(300);
      for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
