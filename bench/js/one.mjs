// One training-throughput measurement in this process, printed as a
// `RESULT impl=... config=... samples_per_s=... cpu_samples_per_s=...` line
// (the format of bench/train_bench.cpp). run.mjs alternates these; the
// workloads themselves are in cases.mjs (shared with bench/browser).
//
//   node --no-experimental-fetch one.mjs dnnlab|tfjs|convnetjs a|c|q SECONDS [CORE_DIR]
// TF.js runs the MLPs on its wasm backend and the CNN (q) on its cpu one
// (the wasm backend has no Conv2DBackpropFilter).
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createRequire } from 'node:module';
import { CNN, HIDDEN, convnetjsCase, convnetjsCnnCase, dnnlabCase, dnnlabCnnCase, makeData, makeImages,
  measure, resultLine, tfjsCase, tfjsCnnCase } from './cases.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const [impl, config, secArg, coreDirArg] = process.argv.slice(2);
const hidden = HIDDEN[config], cnn = CNN.has(config);
if (!hidden && !cnn) throw new Error(`unknown config ${config}`);

const setup = {
  async dnnlab(data) {
    const coreDir = resolve(coreDirArg ?? join(here, '../../build/wasm-api/src/wasm'));
    const { loadCore } = await import(pathToFileURL(join(coreDir, 'dnnlab.mjs')).href);
    const core = await loadCore();
    return cnn ? dnnlabCnnCase(core, data) : dnnlabCase(core, hidden, data);
  },
  async tfjs(data) {
    const tf = require('@tensorflow/tfjs');
    if (cnn) {
      await tf.setBackend('cpu');
      await tf.ready();
      return tfjsCnnCase(tf, data);
    }
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
    const convnetjs = require('convnetjs');
    return cnn ? convnetjsCnnCase(convnetjs, data) : convnetjsCase(convnetjs, hidden, data);
  },
}[impl];
if (!setup) throw new Error(`unknown impl ${impl}`);
const c = await setup(cnn ? makeImages() : makeData());
const cpuSeconds = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
const r = await measure(c.step, { seconds: Number(secArg ?? 3), cpuSeconds });
console.log(resultLine(impl === 'dnnlab' ? 'dnnlab-wasm' : impl, config, c.kernels, r, c.samplesPerStep));
