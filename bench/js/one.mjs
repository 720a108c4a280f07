// One training-throughput measurement in this process, printed as a
// `RESULT impl=... config=... samples_per_s=... cpu_samples_per_s=...` line
// (the format of bench/train_bench.cpp). run.mjs alternates these; the
// workloads themselves are in cases.mjs (shared with bench/browser).
//
//   node --no-experimental-fetch one.mjs dnnlab|tfjs|convnetjs a|c SECONDS [CORE_DIR]
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createRequire } from 'node:module';
import { HIDDEN, convnetjsCase, dnnlabCase, makeData, measure, resultLine, tfjsCase } from './cases.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const [impl, config, secArg, coreDirArg] = process.argv.slice(2);
const hidden = HIDDEN[config];
if (!hidden) throw new Error(`unknown config ${config}`);

const setup = {
  async dnnlab(data) {
    const coreDir = resolve(coreDirArg ?? join(here, '../../build/wasm-api/src/wasm'));
    const { loadCore } = await import(pathToFileURL(join(coreDir, 'dnnlab.mjs')).href);
    return dnnlabCase(await loadCore(), hidden, data);
  },
  async tfjs(data) {
    const tf = require('@tensorflow/tfjs');
    const wasm = require('@tensorflow/tfjs-backend-wasm');
    // One thread, the plain SIMD binary (not the threaded one).
    tf.env().set('WASM_HAS_MULTITHREAD_SUPPORT', false);
    // The .wasm files beside the package's entry point (dist/), wherever it was installed.
    wasm.setWasmPaths(dirname(require.resolve('@tensorflow/tfjs-backend-wasm')) + '/');
    await tf.setBackend('wasm');
    await tf.ready();
    return tfjsCase(tf, hidden, data);
  },
  async convnetjs(data) {
    return convnetjsCase(require('convnetjs'), hidden, data);
  },
}[impl];
if (!setup) throw new Error(`unknown impl ${impl}`);
const c = await setup(makeData());
const cpuSeconds = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
const r = await measure(c.step, { seconds: Number(secArg ?? 3), cpuSeconds });
console.log(resultLine(impl === 'dnnlab' ? 'dnnlab-wasm' : impl, config, c.kernels, r, c.samplesPerStep));
