// The honest spread of WebGPU results against native re-runs (issue 28):
// one sweep of Fashion-MNIST MLPs and CNNs trained by a join tab on WebGPU
// (SwiftShader in headless Chromium), then the same sweep by a tab on the
// wasm core (the peer, measured in the same run), every result re-run
// natively by the server (--verify-fraction 1). Prints, per backend, model
// and metric, the largest deviation the verifier measured (trial.verified's
// "deviations": losses relative, |a - b| / max(1, |a|, |b|); accuracies
// absolute, also in samples of their split) and its ratio to the tolerance
// (1% on losses, 3 samples on accuracies). bench/RESULTS.md records it.
//   node bench/webgpu_spread.mjs --dist build/release/web/dist --dnnlab build/release/src/cli/dnnlab
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LAUNCH_WEBGPU, until } from '../tests/browser/launch.mjs';
import { startRealServer } from '../tests/browser/real_server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../web/package.json'));
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DIST = resolve(arg('--dist', resolve(here, '../build/release/web/dist')));
const DNNLAB = arg('--dnnlab', resolve(here, '../build/release/src/cli/dnnlab'));
const SPLITS = { train: 1000, val: 200, test: 10000 };  // samples behind each accuracy

const MLP = (name) => `name: ${name}
template:
  data: {dataset: fashion-mnist, validation: ${SPLITS.val}, limit_train: ${SPLITS.train}}
  model:
    layers:
      - {dense: 128, activation: \${act}}
      - {dense: 64, activation: \${act}}
      - dense: 10
  train:
    epochs: 3
    batch_size: 64
    optimizer: {type: \${opt}, lr: 0.01}
search:
  method: grid
  metric: val_acc
  parameters:
    act: [relu, tanh]
    opt: [sgd, adam]
scheduler:
  type: fifo
`;
// Batchnorm under Adam: where wasm and native drift most (native_check.cpp).
const CNN = (name) => `name: ${name}
template:
  data: {dataset: fashion-mnist, validation: ${SPLITS.val}, limit_train: 512}
  model:
    input: [1, 28, 28]
    layers:
      - {conv2d: 8, kernel: 3, stride: 2, padding: 1, bias: false}
      - batchnorm
      - relu
      - max_pool2d: 2
      - {conv2d: 8, kernel: 3, padding: 1}
      - relu
      - max_pool2d: 2
      - dense: 10
  train:
    epochs: 2
    batch_size: 32
    optimizer: {type: \${opt}, lr: 0.01}
search:
  method: grid
  metric: val_acc
  parameters:
    opt: [sgd, adam]
scheduler:
  type: fifo
`;

const { chromium } = require('playwright-core');
const server = await startRealServer({ bin: DNNLAB, dist: DIST, args: ['--verify-fraction', '1'] });
const browser = await chromium.launch(LAUNCH_WEBGPU);
try {
  const joinUrl = await until('the join URL', () => server.log().match(/browsers join at (\S+)/)?.[1], 10_000);
  const rows = [];
  for (const backend of ['webgpu', 'wasm']) {
    const exps = { MLP: await server.submit(MLP(`spread-mlp-${backend}`), 'mlp.yaml'),
      CNN: await server.submit(CNN(`spread-cnn-${backend}`), 'cnn.yaml') };
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${joinUrl}&backend=${backend}`);
    const t0 = Date.now();
    const trials = {};
    for (const [model, exp] of Object.entries(exps)) {
      trials[model] = await until(`${backend} ${model}`, async () => {
        const { trials: ts } = await server.get(`/api/experiments/${exp}/trials?limit=100`);
        if (ts.some((x) => x.status === 'failed')) throw new Error(`a trial failed: ${JSON.stringify(ts)}`);
        return ts.length && ts.every((x) => x.status === 'finished') ? ts : null;
      }, 900_000, 500);
    }
    const state = await page.evaluate(() => ({ ...window.dnnlabJoin }));
    await context.close();
    console.log(`${backend}: ${Object.values(trials).flat().length} trials in ${((Date.now() - t0) / 1000).toFixed(0)} s; tab backend ${state.backend} (${state.backendReason}); adapter ${JSON.stringify(state.adapter)}`);
    for (const [model, ts] of Object.entries(trials)) {
      const ids = ts.map((x) => x.id);
      const verified = await until('the re-runs', async () => {
        const { events } = await server.get('/api/events?limit=10000');
        const v = events.filter((e) => e.type === 'trial.verified' && ids.includes(e.data.trial));
        return v.length >= ids.length ? v : null;
      }, 120_000, 500);
      const worst = {};
      for (const e of verified) {
        if (!e.data.agree) console.log(`DISAGREED: ${JSON.stringify(e.data)}`);
        for (const d of e.data.deviations) {
          for (const [k, v] of Object.entries(d)) {
            if (k === 'epoch' || k === 'final') continue;
            worst[k] = Math.max(worst[k] ?? 0, v);
          }
        }
      }
      rows.push({ backend, model, trials: ts.length, epochs: ts[0].epochs_done, agree: verified.every((e) => e.data.agree), worst });
    }
  }
  const samples = { train_acc: SPLITS.train, val_acc: SPLITS.val, test_acc: SPLITS.test };
  console.log('\n| backend | model | trials × epochs | all agreed | train_loss | val_loss | train_acc | val_acc | test_acc |');
  console.log('|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    const cell = (k) => {
      const v = r.worst[k];
      if (v === undefined) return '—';
      if (k.endsWith('loss')) return `${v.toExponential(1)} (${(v / 0.01).toExponential(1)} of tol.)`;
      const n = k === 'train_acc' && r.model === 'CNN' ? 512 : samples[k];
      return `${v.toExponential(1)} (${(v * n).toFixed(1)} samples)`;
    };
    console.log(`| ${r.backend} | ${r.model} | ${r.trials} × ${r.epochs} | ${r.agree ? 'yes' : 'NO'} | ${cell('train_loss')} | ${cell('val_loss')} | ${cell('train_acc')} | ${cell('val_acc')} | ${cell('test_acc')} |`);
  }
} finally {
  await browser.close();
  await server.close();
}
