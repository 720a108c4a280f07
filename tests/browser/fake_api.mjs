// A small in-memory stand-in for the dnnlab server's read API and event
// stream, serving a built dashboard. Used by the browser tests and the
// first-paint benchmark (which asks it for 100,000 generated trials).
//   node tests/browser/fake_api.mjs --dist build/web/dist [--trials N] [--port P]
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, extname, join, normalize, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const { WebSocketServer } = require('ws');

const DEPTHS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 700];
const ACTS = ['relu', 'tanh', 'sigmoid'];
const T0 = 1_780_000_000; // seconds since the epoch; the sweep starts here

// Deterministic pseudo-random numbers (mulberry32).
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function accuracy(p, r) {
  const d = Math.log2(p.depth ?? 4);
  const collapse = { relu: 9.5, tanh: 7, sigmoid: 3.5 }[p.activation] ?? 6;
  const base = 0.86 - 0.01 * Math.abs(d - 2) + (p.width ?? 64) / 6400;
  const acc = d > collapse ? 0.1 + (base - 0.1) * Math.exp(-(d - collapse) * 1.5) : base;
  return Math.min(0.99, Math.max(0.08, acc + (r() - 0.5) * 0.02));
}

function makeTrial(exp, index, r, status) {
  const p = exp.space(index, r);
  const val = accuracy(p, r);
  const seconds = +(0.5 + (p.depth ?? 4) * ((p.width ?? 64) / 64) * (0.08 + r() * 0.02)).toFixed(3);
  const finishedAt = T0 + exp.offset + index * 2;
  const done = status === 'finished' || status === 'pruned';
  return {
    id: exp.idBase + index + 1, experiment_id: exp.id, index, params: p, seed: String(1000 + index), status, attempt: 1,
    worker: status === 'queued' ? null : `w${(index % 3) + 1}`,
    started_at: status === 'queued' ? null : finishedAt - seconds,
    finished_at: done ? finishedAt : null,
    train_loss: done ? +(1.2 - val).toFixed(4) : null, train_acc: done ? +(val + 0.02).toFixed(4) : null,
    val_loss: done ? +(1.25 - val).toFixed(4) : null, val_acc: done ? +val.toFixed(4) : null,
    test_acc: status === 'finished' ? +(val - 0.005).toFixed(4) : null,
    epochs_done: status === 'finished' ? 3 : status === 'pruned' ? 1 : 0,
    seconds: done ? seconds : null, error: null,
  };
}

// Builds the experiments: "depth-sweep" with `trials` trials (the last few
// running or queued) and a small "lr-sweep" without a depth parameter.
export function makeData({ trials = 132, running = 3, queued = 3 } = {}) {
  const depthSweep = {
    id: 1, name: 'depth-sweep', method: 'grid', offset: 0, idBase: 0, metric: 'val_acc', mode: 'max',
    parameters: ['depth', 'activation', 'width', 'lr'],
    space: (i) => ({
      depth: DEPTHS[i % DEPTHS.length], activation: ACTS[Math.floor(i / DEPTHS.length) % 3],
      width: [32, 64][Math.floor(i / 33) % 2], lr: [1e-3, 1e-4][Math.floor(i / 66) % 2],
    }),
  };
  const lrSweep = {
    id: 2, name: 'lr-sweep', method: 'random', offset: -86400, idBase: 10_000_000, metric: 'val_acc', mode: 'max',
    parameters: ['lr', 'width'],
    space: (i, r) => ({ lr: +(10 ** (-5 + 3 * r())).toPrecision(3), width: [32, 64, 128][i % 3] }),
  };
  const exps = [depthSweep, lrSweep];
  const r = rng(42);
  depthSweep.trials = Array.from({ length: trials }, (_, i) => {
    const st = i >= trials - queued ? 'queued' : i >= trials - queued - running ? 'running'
      : i % 17 === 5 ? 'pruned' : i % 53 === 7 ? 'failed' : 'finished';
    const t = makeTrial(depthSweep, i, r, st);
    if (st === 'failed') t.error = 'loss became NaN at epoch 2';
    return t;
  });
  lrSweep.trials = Array.from({ length: 24 }, (_, i) => makeTrial(lrSweep, i, r, 'finished'));
  return exps;
}

const counts = (trials) => {
  const c = { queued: 0, running: 0, finished: 0, pruned: 0, failed: 0, cancelled: 0 };
  for (const t of trials) c[t.status]++;
  return c;
};

const specText = (e) => `name: ${e.name}\nsearch:\n  method: ${e.method}\n  parameters:\n${e.parameters.map((p) => `    ${p}: [...]`).join('\n')}\n`;

// ws: false refuses the event stream, to exercise the dashboard's polling fallback.
export async function startFakeApi({ dist, trials = 132, port = 0, host = '127.0.0.1', ws = true, paramSort = true } = {}) {
  const exps = makeData({ trials });
  const byId = new Map(exps.flatMap((e) => e.trials.map((t) => [String(t.id), t])));
  let version = 0;
  const sortCache = new Map();
  let eventId = 0;
  const requests = [];

  function summary(e) {
    const c = counts(e.trials);
    const best = e.trials.reduce((b, t) => (t.status === 'finished' && t.val_acc > b ? t.val_acc : b), -Infinity);
    const running = c.running + c.queued > 0;
    // As the server: `planned` only while a coordinator drives the experiment.
    return { id: e.id, name: e.name, status: running ? 'running' : 'finished', method: e.method,
      created_at: T0 + e.offset - 5, counts: c, ...(running ? { planned: e.trials.length } : {}),
      best: Number.isFinite(best) ? best : null };
  }

  function listTrials(e, q) {
    const sort = q.get('sort') || 'index';
    const order = q.get('order') === 'desc' ? 'desc' : 'asc';
    const status = q.get('status') || '';
    const limit = Math.min(1000, Math.max(1, Number(q.get('limit') || 100)));
    const offset = Math.max(0, Number(q.get('offset') || 0));
    if (sort.startsWith('params.') && !paramSort) return { httpStatus: 400, error: `unknown sort column '${sort}'`, field: 'sort' };
    const key = `${e.id}|${sort}|${order}|${status}|${version}`;
    let rows = sortCache.get(key);
    if (!rows) {
      const get = sort.startsWith('params.') ? ((k) => (t) => t.params[k])(sort.slice(7)) : (t) => t[sort];
      rows = status ? e.trials.filter((t) => t.status === status) : e.trials.slice();
      const dir = order === 'desc' ? -1 : 1;
      rows.sort((a, b) => {
        const x = get(a);
        const y = get(b);
        if (x === y) return a.index - b.index;
        if (x === null || x === undefined) return 1; // nulls last either way
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * dir;
      });
      if (sortCache.size > 32) sortCache.clear();
      sortCache.set(key, rows);
    }
    return { total: rows.length, offset, limit, trials: rows.slice(offset, offset + limit) };
  }

  function curveOf(t) {
    return Array.from({ length: t.epochs_done }, (_, k) => {
      const f = (k + 1) / 3;
      return { epoch: k + 1, train_loss: +(2.3 - (2.3 - t.train_loss) * f).toFixed(4), train_acc: +(0.1 + (t.train_acc - 0.1) * f).toFixed(4),
        val_loss: +(2.3 - (2.3 - t.val_loss) * f).toFixed(4), val_acc: +(0.1 + (t.val_acc - 0.1) * f ** 0.7).toFixed(4),
        seconds: +(t.seconds * f).toFixed(3), lr: t.params.lr ?? 1e-3 };
    });
  }

  const running = exps[0].trials.filter((t) => t.status === 'running');
  const workers = [
    ...[1, 2, 3].map((i) => ({ id: `w${i}`, kind: 'native', host: 'lab-1', pid: 4100 + i, started_at: T0 - 60, last_seen: Date.now() / 1000 - i, current_trial: running[i - 1]?.id ?? null, gone: false })),
    { id: 'b1', kind: 'browser', host: '10.0.0.7', pid: null, started_at: T0, last_seen: Date.now() / 1000 - 40, current_trial: null, gone: true },
    // Left 20 minutes ago: hidden unless asked for.
    { id: 'b0', kind: 'browser', host: '10.0.0.8', pid: null, started_at: T0, last_seen: Date.now() / 1000 - 1200, current_trial: null, gone: true },
  ];

  function route(url) {
    const p = url.pathname;
    let m;
    if (p === '/api/experiments') return { experiments: exps.map(summary) };
    if ((m = p.match(/^\/api\/experiments\/(\d+)$/))) {
      const e = exps.find((x) => String(x.id) === m[1]);
      if (!e) return null;
      return { ...summary(e), spec_text: specText(e), provenance: { git: 'fake' }, metric: e.metric, mode: e.mode, parameters: e.parameters };
    }
    if ((m = p.match(/^\/api\/experiments\/(\d+)\/trials$/))) {
      const e = exps.find((x) => String(x.id) === m[1]);
      return e ? listTrials(e, url.searchParams) : null;
    }
    if ((m = p.match(/^\/api\/trials\/(\d+)$/))) {
      const t = byId.get(m[1]);
      // As the real server: finished trials' kept weights (the fake keeps them all).
      const weights = t?.status === 'finished' ? { url: `/api/trials/${t.id}/weights`, size: 32768, sha256: '0'.repeat(64) } : null;
      return t ? { ...t, pinned: false, weights, curve: curveOf(t) } : null;
    }
    if (p === '/api/workers') {
      for (const w of workers) if (!w.gone) w.last_seen = Date.now() / 1000 - 1;
      // As the real server: workers gone over 10 minutes only with ?gone=all.
      const gone = url.searchParams.get('gone') ?? 'recent';
      const listed = workers.filter((w) => !w.gone || gone === 'all' || (gone === 'recent' && Date.now() / 1000 - w.last_seen < 600));
      return { workers: listed, gone_omitted: workers.length - listed.length };
    }
    if (p === '/api/stats') {
      const all = exps.flatMap((e) => e.trials);
      const c = counts(all);
      return { trials_per_second: 1.5, queue_depth: c.queued, counts: c, workers_active: workers.filter((w) => !w.gone).length };
    }
    return null;
  }

  const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.css': 'text/css', '.png': 'image/png', '.map': 'application/json' };
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    requests.push(url.pathname + url.search);
    if (url.pathname.startsWith('/api/')) {
      const { httpStatus = 200, ...body } = route(url) ?? { httpStatus: 404, error: `no such resource: ${url.pathname}` };
      res.writeHead(httpStatus, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
      return;
    }
    const file = normalize(url.pathname === '/' ? '/index.html' : url.pathname);
    try {
      const data = await readFile(join(dist, file));
      res.writeHead(200, { 'content-type': types[extname(file)] || 'application/octet-stream', 'cache-control': 'no-cache' });
      res.end(data);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
    }
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    if (!ws || !req.url.startsWith('/api/events')) return socket.destroy();
    wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
  });
  const broadcast = (type, data) => {
    const frame = JSON.stringify({ id: ++eventId, time: Date.now() / 1000, type, data });
    for (const c of wss.clients) if (c.readyState === 1) c.send(frame);
  };

  await new Promise((ok) => server.listen(port, host, ok));
  const addr = server.address();
  return {
    url: `http://${host}:${addr.port}`,
    exps,
    requests,
    clients: () => wss.clients.size,
    // Finishes a running trial and announces it, as the real server would.
    finishTrial(id) {
      const t = byId.get(String(id));
      const e = exps.find((x) => x.id === t.experiment_id);
      Object.assign(t, makeTrial(e, t.index, rng(t.index), 'finished'), { finished_at: Date.now() / 1000 });
      version++;
      broadcast('trial.finished', { experiment: t.experiment_id, trial: t.id, val_acc: t.val_acc, epochs: t.epochs_done });
      return t;
    },
    close: () => new Promise((ok) => { for (const c of wss.clients) c.terminate(); server.close(ok); }),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
  const api = await startFakeApi({ dist: resolve(arg('--dist', resolve(here, '../../web/dist'))), trials: Number(arg('--trials', 132)), port: Number(arg('--port', 8090)) });
  console.log(`fake dnnlab API on ${api.url}`);
}
