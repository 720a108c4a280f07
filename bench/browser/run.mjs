// The browser-core benchmark of issue 5 in one headless Chromium run: dnnlab
// wasm vs TensorFlow.js (wasm backend, one thread) vs ConvNetJS, each in a
// fresh Web Worker per measurement, plus dnnlab native (bench/train_bench,
// one thread) run by this script between the browser measurements. Every
// round runs all four on each config in an order that flips every round;
// prints medians and per-round ratios as markdown for bench/RESULTS.md.
// Config q is issue 14's CNN (CIFAR-10-quick): TF.js on its cpu backend
// there, dnnlab native is bench/cnn_bench --config cifar --threads 1.
// See run.sh (which builds everything first).
//
//   ROUNDS=5 SECS=3 node run.mjs
//   IMPLS='dnnlab-wasm convnetjs' CONFIGS=a node run.mjs   # a subset
//   CONFIGS=q NODE=1 node run.mjs          # the CNN, in Chromium and under node
//   LOG=old.log node run.mjs report        # tables from an earlier log only
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LAUNCH } from '../../tests/browser/launch.mjs';
import { CNN, NAME } from '../js/cases.mjs';
import { serve } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const ROUNDS = Number(process.env.ROUNDS ?? 5), SECS = Number(process.env.SECS ?? 3);
const CONFIGS = (process.env.CONFIGS ?? 'a c').split(' ');
const CORE_DIR = resolve(process.env.DNNLAB_CORE_DIR ?? join(root, 'build/wasm-bench/src/wasm'));
const NATIVE = resolve(process.env.NATIVE ?? join(root, 'build/bench-browser/bench/train_bench'));
const NATIVE_CNN = resolve(process.env.NATIVE_CNN ?? join(dirname(NATIVE), 'cnn_bench'));
const LOG = process.env.LOG ?? join(mkdtempSync(join(tmpdir(), 'browser-bench-')), 'bench.log');
// NODE=1 adds the same wasm/JS workloads under node (bench/js/one.mjs), to
// tell the browser's share of a difference from the library's.
// dnnlab-wasm is the core the join page loads (relaxed SIMD in Chromium),
// dnnlab-wasm128 the plain SIMD128 build that engines without it get.
// node-relaxed:dnnlab-wasm runs node with --experimental-wasm-relaxed-simd
// (node 20's V8 has relaxed SIMD behind that flag), so the core loads its
// relaxed build there too.
const IMPLS = (process.env.IMPLS ?? 'dnnlab-wasm dnnlab-wasm128 dnnlab-native tfjs convnetjs' +
  (process.env.NODE === '1' ? ' node:dnnlab-wasm node:tfjs node:convnetjs' : '')).split(' ');
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));

if (process.argv[2] !== 'report') await measureAll();
report();

async function measureAll() {
  if (!existsSync(join(CORE_DIR, 'dnnlab_core.wasm'))) throw new Error(`no wasm core in ${CORE_DIR} (run.sh builds it)`);
  for (const [bin, needed] of [[NATIVE, CONFIGS.some((c) => !CNN.has(c))], [NATIVE_CNN, CONFIGS.some((c) => CNN.has(c))]])
    if (needed && IMPLS.includes('dnnlab-native') && !existsSync(bin)) throw new Error(`no native bench at ${bin} (run.sh builds it)`);
  const { chromium } = createRequire(import.meta.url)('playwright-core');
  const served = new Set();
  const server = await serve({ coreDir: CORE_DIR, log: (l) => served.add(l) });
  const browser = await chromium.launch(LAUNCH);
  try {
    const context = await browser.newContext();
    // Everything comes from the loopback server: any other request is a bug.
    const foreign = [];
    await context.route((url) => url.hostname !== '127.0.0.1', (route) => {
      foreign.push(route.request().url());
      return route.abort();
    });
    await context.exposeFunction('benchCpuSeconds', browserCpuSeconds);
    const page = await context.newPage();
    page.on('console', (m) => m.type() === 'error' && console.error(`page: ${m.text()}`));
    await page.goto(server.url);
    await page.waitForFunction(() => window.benchReady === true);
    const ua = await page.evaluate(() => navigator.userAgent);
    const head = `# ${new Date().toISOString()} chromium ${browser.version()} node ${process.version} ` +
      `rev ${git('describe', '--always', '--dirty')} cpu ${cpuName()}`;
    console.error(`log: ${LOG}\n${head}\n# ${ua}`);
    appendFileSync(LOG, `${head}\n`);
    for (let r = 1; r <= ROUNDS; r++) {
      for (const c of CONFIGS) {
        const order = r % 2 ? IMPLS : [...IMPLS].reverse();
        for (const impl of order) {
          let line;
          if (impl === 'dnnlab-native') {
            const [bin, args] = CNN.has(c)
              ? [NATIVE_CNN, ['--config', 'cifar', '--threads', '1', '--seconds', String(SECS)]]
              : [NATIVE, ['throughput', '--config', c, '--seconds', String(SECS)]];
            const out = execFileSync(bin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
            // The native benches name themselves impl=dnnlab; this table calls it dnnlab-native.
            line = out.split('\n').find((l) => l.startsWith('RESULT')).replace('impl=dnnlab ', 'impl=dnnlab-native ')
              .replace('config=cifar ', 'config=q ');
          } else if (impl.startsWith('node:') || impl.startsWith('node-relaxed:')) {
            const [host, name] = impl.split(':');
            const lib = name.replace('dnnlab-wasm', 'dnnlab');
            const flags = host === 'node-relaxed' ? ['--experimental-wasm-relaxed-simd'] : [];
            const out = execFileSync('node', [...flags, '--no-experimental-fetch', join(root, 'bench/js/one.mjs'), lib, c, String(SECS), CORE_DIR],
              { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'],
                env: { ...process.env, NODE_PATH: join(here, 'node_modules') } });
            line = out.split('\n').find((l) => l.startsWith('RESULT')).replace(/impl=(\S+)/, `impl=${host}:$1`);
          } else {
            const job = { impl: { 'dnnlab-wasm': 'dnnlab', 'dnnlab-wasm128': 'dnnlab128' }[impl] ?? impl,
              config: c, seconds: SECS, warmup: 0.5, timeout: CNN.has(c) ? 900 : undefined };
            ({ line } = await page.evaluate((j) => window.runCase(j), job));
          }
          line += ` round=${r}`;
          appendFileSync(LOG, line + '\n');
          console.error(line);
        }
      }
    }
    console.error(`# wasm binaries served: ${[...served].filter((l) => l.endsWith('.wasm')).join(', ')}`);
    if (foreign.length) throw new Error(`requests outside the loopback server: ${foreign.join(' ')}`);
  } finally {
    await browser.close();
    await server.close();
  }
}

// CPU time (user + system) of every process under this one: the browser,
// its renderer (the worker thread, V8's compiler and GC helpers) and its
// utility processes; the measured worker waits while this is read. The
// counterpart of node's process.cpuUsage() in bench/js.
function browserCpuSeconds() {
  const procs = new Map();  // pid -> [ppid, ticks]
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const after = f.slice(f.lastIndexOf(')') + 2).split(' ');  // fields from 3 (state) on
      procs.set(Number(pid), [Number(after[1]), Number(after[11]) + Number(after[12])]);
    } catch { /* exited meanwhile */ }
  }
  let ticks = 0;
  const todo = [process.pid];
  while (todo.length) {
    const p = todo.pop();
    for (const [pid, [ppid, t]] of procs) if (ppid === p) { ticks += t; todo.push(pid); }
  }
  return ticks / CLK_TCK;
}

function git(...args) {
  try { return execFileSync('git', ['-C', root, ...args], { encoding: 'utf8' }).trim(); } catch { return '?'; }
}
function cpuName() {
  const m = readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m);
  return (m?.[1] ?? '?').replace(/ +/g, '_');
}

// Medians over rounds; ratios per round (all four measured within a minute or
// so, under similar load from other jobs), then their median and range.
function report() {
  const rows = readFileSync(LOG, 'utf8').split('\n').filter((l) => l.startsWith('RESULT'))
    .map((l) => Object.fromEntries(l.split(' ').slice(1).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)])));
  const median = (a) => { const s = [...a].sort((x, y) => x - y), m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
  // One decimal below 100 (the CNN's TF.js and ConvNetJS run at a few samples/s).
  const fmt = (x) => (x < 100 ? x.toFixed(1) : Math.round(x).toLocaleString('en-US'));
  const byRound = (c, impl, key) => Object.fromEntries(rows.filter((r) => r.config === c && r.impl === impl && key in r)
    .map((r) => [r.round, Number(r[key])]));
  const cell = (c, impl, key) => { const v = Object.values(byRound(c, impl, key)); return v.length ? fmt(median(v)) : '–'; };
  // a / b: the median and range of the per-round ratios, and whether it meets `target`.
  const ratio = (c, a, b, key, target) => {
    const x = byRound(c, a, key), y = byRound(c, b, key);
    const rr = Object.keys(x).filter((k) => k in y).map((k) => x[k] / y[k]).sort((p, q) => p - q);
    if (!rr.length) return '–';
    const m = median(rr);
    const met = target ? (m >= target ? ' met' : ' NOT met') : '';
    return `${m.toFixed(2)}x (${rr[0].toFixed(2)}–${rr.at(-1).toFixed(2)})${met}`;
  };
  const kernels = [...new Set(rows.map((r) => `${r.impl} ${r.kernels}`))];
  console.log(`\nKernels: ${kernels.join('; ')}.`);
  // The MLPs (issue 5: targets 3x TF.js-wasm, 30x ConvNetJS) and the CNN
  // (issue 14: TF.js on its cpu backend, target 50x ConvNetJS) in tables of their own.
  const groups = [[CONFIGS.filter((c) => !CNN.has(c)), 'TF.js wasm', 3, 30],
    [CONFIGS.filter((c) => CNN.has(c)), 'TF.js cpu', null, 50]].filter(([cs]) => cs.length);
  for (const key of ['samples_per_s', 'cpu_samples_per_s']) {
    for (const [configs, tfName, tfTarget, cjTarget] of groups) {
      console.log(`\n${key === 'samples_per_s' ? 'Wall time' : 'CPU time'} (${key}):\n`);
      console.log(`| config | dnnlab wasm | dnnlab native | ${tfName} | ConvNetJS | wasm / native | ` +
        `wasm / TF.js${tfTarget ? ` (target ${tfTarget}x)` : ''} | wasm / ConvNetJS (target ${cjTarget}x) | rounds |`);
      console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
      for (const c of configs) {
        const w = 'dnnlab-wasm';
        console.log(`| ${c}: ${NAME[c]} | ${cell(c, w, key)} | ${cell(c, 'dnnlab-native', key)} | ${cell(c, 'tfjs', key)} | ` +
          `${cell(c, 'convnetjs', key)} | ${ratio(c, w, 'dnnlab-native', key)} | ${ratio(c, w, 'tfjs', key, tfTarget)} | ` +
          `${ratio(c, w, 'convnetjs', key, cjTarget)} | ${Object.keys(byRound(c, w, key)).length} |`);
      }
    }
  }
  if (rows.some((r) => r.impl === 'dnnlab-wasm128')) {
    console.log('\nThe two wasm builds (dnnlab wasm above is the first), wall time:\n');
    console.log('| config | dnnlab wasm | SIMD128 build | wasm / SIMD128 | SIMD128 / ConvNetJS |');
    console.log('|---|---:|---:|---:|---:|');
    for (const c of CONFIGS) {
      const k = 'samples_per_s';
      console.log(`| ${c} | ${cell(c, 'dnnlab-wasm', k)} | ${cell(c, 'dnnlab-wasm128', k)} | ` +
        `${ratio(c, 'dnnlab-wasm', 'dnnlab-wasm128', k)} | ${ratio(c, 'dnnlab-wasm128', 'convnetjs', k)} |`);
    }
  }
  if (!rows.some((r) => r.impl.startsWith('node:'))) return;
  const key = 'cpu_samples_per_s';
  console.log('\nChromium vs node (bench/js/one.mjs) in this run, CPU time (samples per CPU-second), medians:\n');
  console.log('| config | library | Chromium | node | Chromium / node |');
  console.log('|---|---|---:|---:|---:|');
  for (const c of CONFIGS) {
    for (const lib of ['dnnlab-wasm', 'tfjs', 'convnetjs'])
      console.log(`| ${c} | ${lib} | ${cell(c, lib, key)} | ${cell(c, `node:${lib}`, key)} | ${ratio(c, lib, `node:${lib}`, key)} |`);
  }
  console.log('\nThe ratios under node in this run (CPU time):\n');
  console.log('| config | node: wasm / native | node: wasm / TF.js (target 3x, MLPs) | node: wasm / ConvNetJS (target 30x MLPs, 50x CNN) |');
  console.log('|---|---:|---:|---:|');
  for (const c of CONFIGS) {
    const w = 'node:dnnlab-wasm', cnn = CNN.has(c);
    console.log(`| ${c} | ${ratio(c, w, 'dnnlab-native', key)} | ${ratio(c, w, 'node:tfjs', key, cnn ? null : 3)} | ` +
      `${ratio(c, w, 'node:convnetjs', key, cnn ? 50 : 30)} |`);
  }
  if (!rows.some((r) => r.impl === 'node-relaxed:dnnlab-wasm')) return;
  console.log('\nnode --experimental-wasm-relaxed-simd (the relaxed build) in this run, CPU time:\n');
  console.log('| config | node relaxed | node SIMD128 | relaxed / SIMD128 | node relaxed / ConvNetJS (target 30x MLPs, 50x CNN) |');
  console.log('|---|---:|---:|---:|---:|');
  for (const c of CONFIGS) {
    const w = 'node-relaxed:dnnlab-wasm', cnn = CNN.has(c);
    console.log(`| ${c} | ${cell(c, w, key)} | ${cell(c, 'node:dnnlab-wasm', key)} | ${ratio(c, w, 'node:dnnlab-wasm', key)} | ` +
      `${ratio(c, w, 'node:convnetjs', key, cnn ? 50 : 30)} |`);
  }
}
