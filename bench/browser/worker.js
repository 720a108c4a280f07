// One measurement in a fresh Web Worker (classic, so the UMD builds of
// TensorFlow.js and ConvNetJS load with importScripts). The workloads are
// bench/js/cases.mjs, the same code the node runner times.
//   postMessage({ impl: 'dnnlab'|'dnnlab128'|'tfjs'|'convnetjs', config: 'a'|'c'|'q', seconds, warmup, cpu })
// TF.js: the wasm backend for the MLPs, the cpu one for the CNN (q): the
// wasm backend has no Conv2DBackpropFilter.
// dnnlab: the core build the join page would load (relaxed SIMD where the
// engine has it); dnnlab128: the plain SIMD128 build.
//   -> { line: 'RESULT ...', kernels } or { error }
// With cpu: true the worker asks the page for CPU-seconds ({ cpuRequest })
// just before and after the timed loop and waits for the { cpuReply }.
let cpuReply;
self.onmessage = ({ data }) => ('cpuReply' in data ? cpuReply(data.cpuReply) : run(data));
const askCpuSeconds = () => new Promise((resolve) => {
  cpuReply = resolve;
  postMessage({ cpuRequest: true });
});

async function run(job) {
  try {
    const cases = await import('/js/cases.mjs');
    const hidden = cases.HIDDEN[job.config], cnn = cases.CNN.has(job.config);
    if (!hidden && !cnn) throw new Error(`unknown config ${job.config}`);
    const data = cnn ? cases.makeImages() : cases.makeData();
    let c;
    if (job.impl === 'dnnlab' || job.impl === 'dnnlab128') {
      const { loadCore } = await import('/core/dnnlab.mjs');
      const core = await loadCore({ simd: job.impl === 'dnnlab128' ? 'simd128' : 'auto' });
      c = cnn ? await cases.dnnlabCnnCase(core, data) : await cases.dnnlabCase(core, hidden, data);
    } else if (job.impl === 'tfjs' && cnn) {
      importScripts('/npm/@tensorflow/tfjs/dist/tf.min.js');
      if (!(await tf.setBackend('cpu'))) throw new Error('tfjs: the cpu backend did not start');
      await tf.ready();
      c = await cases.tfjsCnnCase(tf, data);
    } else if (job.impl === 'tfjs') {
      importScripts('/npm/@tensorflow/tfjs/dist/tf.min.js',
        '/npm/@tensorflow/tfjs-backend-wasm/dist/tf-backend-wasm.min.js');
      // One thread: the plain (SIMD when supported) binary, never the threaded one.
      tf.env().set('WASM_HAS_MULTITHREAD_SUPPORT', false);
      tf.wasm.setWasmPaths('/npm/@tensorflow/tfjs-backend-wasm/dist/');
      if (!(await tf.setBackend('wasm'))) throw new Error('tfjs: the wasm backend did not start');
      await tf.ready();
      c = await cases.tfjsCase(tf, hidden, data);
    } else if (job.impl === 'convnetjs') {
      self.window = self;  // convnet.js's footer assigns to window in a browser
      importScripts('/npm/convnetjs/build/convnet.js');
      c = cnn ? await cases.convnetjsCnnCase(convnetjs, data) : await cases.convnetjsCase(convnetjs, hidden, data);
    } else {
      throw new Error(`unknown impl ${job.impl}`);
    }
    const r = await cases.measure(c.step, { seconds: job.seconds, warmup: job.warmup,
      cpuSeconds: job.cpu ? askCpuSeconds : undefined });
    const impl = { dnnlab: 'dnnlab-wasm', dnnlab128: 'dnnlab-wasm128' }[job.impl] ?? job.impl;
    postMessage({ line: cases.resultLine(impl, job.config, c.kernels, r, c.samplesPerStep), kernels: c.kernels });
  } catch (e) {
    postMessage({ error: String(e?.stack ?? e) });
  }
}
