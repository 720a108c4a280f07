// Makes docs/dashboard.png from a real 48-trial depth study (8 depths x 3
// activations x 2 learning rates on 3000 Fashion-MNIST images), run by the
// real server and one worker while the dashboard watches.
//   node tests/browser/readme_screenshot.mjs --dnnlab build/release/src/cli/dnnlab [--dist DIR] [--out docs/dashboard.png]
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startRealServer } from './real_server.mjs';
import { LAUNCH } from './launch.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, '../../web/package.json'));
const { chromium } = require('playwright-core');
const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const BIN = arg('--dnnlab', process.env.DNNLAB_BIN);
const DIST = resolve(arg('--dist', resolve(here, '../../web/dist')));
const OUT = resolve(arg('--out', resolve(here, '../../docs/dashboard.png')));
const SWEEP = `name: depth-study
template:
  data: {dataset: fashion-mnist, validation: 1000, limit_train: 3000}
  model:
    init: lecun
    layers:
      - repeat: \${depth}
        dense: 32
        activation: \${activation}
      - dense: 10
  train:
    epochs: 4
    batch_size: 64
    optimizer: {type: adam, lr: \${lr}}
search:
  method: grid
  metric: val_acc
  mode: max
  parameters:
    depth: [1, 2, 4, 8, 16, 32, 64, 128]
    activation: [relu, tanh, sigmoid]
    lr: [1.0e-3, 3.0e-4]
scheduler:
  type: fifo
`;
const srv = await startRealServer({ bin: BIN, dist: DIST });
try {
  const id = await srv.submit(SWEEP, 'depth-study.yaml');
  const browser = await chromium.launch(LAUNCH);
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on('console', (m) => m.type() === 'error' && console.log('console error', m.text()));
  await page.goto(`${srv.url}/#/experiments/${id}`);
  await page.waitForSelector('#trials[data-rows]');
  const t0 = Date.now();
  srv.startWorker(id);
  for (;;) {
    const x = await srv.get(`/api/experiments/${id}`);
    const c = x.counts; const done = c.finished + c.pruned + c.failed;
    // A slow machine gets a picture of the sweep in progress instead.
    if (done >= 48 || Date.now() - t0 > 120_000) { console.log(`trials: ${JSON.stringify(c)}`); break; }
    await new Promise((r) => setTimeout(r, 1000));
  }
  await page.waitForTimeout(2500); // the throttled live refreshes settle
  await page.click('#trials th[data-key="val_acc"]');
  await page.waitForTimeout(800);
  for (const n of [0, 2, 5]) await page.click(`#trials tbody tr >> nth=${n}`);
  await page.waitForSelector('#plot-curves[data-trials="3"]');
  await page.waitForTimeout(500);
  await page.screenshot({ path: OUT, fullPage: true });
  console.log(`wrote ${OUT}`);
  await browser.close();
} finally { await srv.close(); }
