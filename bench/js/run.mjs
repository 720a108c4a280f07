// Browser-core training throughput under node, one thread: dnnlab wasm vs
// dnnlab native (bench/train_bench) vs TensorFlow.js (wasm backend, SIMD, no
// threads) vs ConvNetJS. Each measurement is its own process (one.mjs or
// train_bench); every round runs all of them for each config, in an order
// that flips every round. Prints medians and the per-round ratios as a
// markdown table for bench/RESULTS.md. See bench/js/run.sh.
//
//   ROUNDS=5 SECS=3 node --no-experimental-fetch run.mjs
//   LOG=old.log node run.mjs report        # tables from an earlier log only
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const ROUNDS = Number(process.env.ROUNDS ?? 5), SECS = Number(process.env.SECS ?? 3);
const CONFIGS = (process.env.CONFIGS ?? 'a c').split(' ');
const CORE_DIR = resolve(process.env.DNNLAB_CORE_DIR ?? join(root, 'build/wasm-api/src/wasm'));
const NATIVE = resolve(process.env.NATIVE ?? join(root, 'build/bench/bench/train_bench'));
const LOG = process.env.LOG ?? join(mkdtempSync(join(tmpdir(), 'js-bench-')), 'bench.log');
const NAME = { a: 'MLP 784-256-256-10, SGD, batch 64', c: '16 hidden x 256, SGD, batch 64' };

const impls = {
  'dnnlab-wasm': (c) => ['node', ['--no-experimental-fetch', join(here, 'one.mjs'), 'dnnlab', c, String(SECS), CORE_DIR]],
  'dnnlab-native': (c) => [NATIVE, ['throughput', '--config', c, '--seconds', String(SECS)]],
  tfjs: (c) => ['node', ['--no-experimental-fetch', join(here, 'one.mjs'), 'tfjs', c, String(SECS)]],
  convnetjs: (c) => ['node', ['--no-experimental-fetch', join(here, 'one.mjs'), 'convnetjs', c, String(SECS)]],
};
if (!existsSync(NATIVE)) {
  console.error(`no native train_bench at ${NATIVE}: dnnlab-native left out (bench/js/run.sh builds it)`);
  delete impls['dnnlab-native'];
}

if (process.argv[2] !== 'report') {
  console.error(`log: ${LOG}`);
  appendFileSync(LOG, `# ${new Date().toISOString()} node ${process.version}\n`);
  for (let r = 1; r <= ROUNDS; r++) {
    for (const c of CONFIGS) {
      const order = Object.keys(impls);
      if (r % 2 === 0) order.reverse();
      for (const impl of order) {
        const [cmd, args] = impls[impl](c);
        const out = execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
        const line = out.split('\n').find((l) => l.startsWith('RESULT'));
        // train_bench names itself impl=dnnlab; this table calls it dnnlab-native.
        const tagged = line.replace('impl=dnnlab ', 'impl=dnnlab-native ') + ` round=${r}`;
        appendFileSync(LOG, tagged + '\n');
        console.error(tagged);
      }
    }
  }
}

// Report: medians over rounds; ratios per round (measured minutes apart at
// most, so the load from other jobs is similar), then their median and range.
const rows = readFileSync(LOG, 'utf8').split('\n').filter((l) => l.startsWith('RESULT'))
  .map((l) => Object.fromEntries(l.split(' ').slice(1).map((kv) => kv.split('='))));
const median = (a) => { const s = [...a].sort((x, y) => x - y), m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const fmt = (x) => Math.round(x).toLocaleString('en-US');
const TARGET = { tfjs: 3, convnetjs: 30 };
for (const key of ['samples_per_s', 'cpu_samples_per_s']) {
  console.log(`\n${key === 'samples_per_s' ? 'Wall time' : 'Process CPU time'} (${key}):\n`);
  console.log('| config | dnnlab wasm | dnnlab native | TF.js wasm | ConvNetJS | wasm / native | wasm / TF.js (target 3x) | wasm / ConvNetJS (target 30x) | rounds |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const c of CONFIGS) {
    const sel = (impl) => rows.filter((r) => r.config === c && r.impl === impl);
    const byRound = (impl) => Object.fromEntries(sel(impl).map((r) => [r.round, Number(r[key])]));
    const w = byRound('dnnlab-wasm');
    const cell = (impl) => { const v = Object.values(byRound(impl)); return v.length ? fmt(median(v)) : '–'; };
    const ratio = (impl) => {
      const o = byRound(impl);
      const rr = Object.keys(w).filter((k) => k in o).map((k) => w[k] / o[k]).sort((x, y) => x - y);
      if (!rr.length) return '–';
      const m = median(rr);
      const met = TARGET[impl] ? (m >= TARGET[impl] ? ' met' : ' NOT met') : '';
      return `${m.toFixed(2)}x (${rr[0].toFixed(2)}–${rr.at(-1).toFixed(2)})${met}`;
    };
    console.log(`| ${c}: ${NAME[c]} | ${cell('dnnlab-wasm')} | ${cell('dnnlab-native')} | ${cell('tfjs')} | ${cell('convnetjs')} | ` +
      `${ratio('dnnlab-native')} | ${ratio('tfjs')} | ${ratio('convnetjs')} | ${Object.keys(w).length} |`);
  }
}
