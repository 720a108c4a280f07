// Runs in Chromium (webgpu_kernels.test.mjs serves it): every WebGPU kernel
// (src/wasm/webgpu/) against the wasm core's (dnnlab_kernel_probe, the same
// kernel table, optimizers, BatchNorm and loss the wasm core trains with) on
// awkward shapes. Returns one row per check: { name, err, tol, exact? },
// err = max |gpu - ref| / max(1, max |ref|) (a norm-wise relative error:
// sums that cancel are judged against the size of what was summed).
import createKernelProbe from '/probe/dnnlab_kernel_probe.mjs';
import { GpuDevice } from '/webgpu/device.mjs';
import { ACT, webgpuKernels } from '/webgpu/kernels.mjs';
import { Probe, TOL, compare, nans, uniform } from '/test/webgpu_kernels_common.mjs';
import { bnCases, ceCases, convCases, poolCases } from '/test/webgpu_kernels_cases.mjs';

export async function runAll() {
  const gpu = await GpuDevice.create();
  if (!gpu) return { error: 'no WebGPU adapter' };
  const probe = new Probe(await createKernelProbe());
  const table = probe.m.UTF8ToString(probe.m._probe_kernels_name());
  const k = webgpuKernels(gpu);
  const rows = [];
  const t0 = performance.now();
  const gpuError = await gpu.errors(() => {});
  const suiteMs = {};
  for (const suite of [gemmCases, actCases, sumCases, optimCases, convCases, poolCases, bnCases, ceCases]) {
    const s0 = performance.now();
    gpu.device.pushErrorScope('validation');
    rows.push(...await suite(gpu, k, probe));
    suiteMs[suite.name] = Math.round(performance.now() - s0);
    const e = await gpu.device.popErrorScope();
    if (e) rows.push({ name: `${suite.name}: WebGPU validation`, err: Infinity, tol: 0, message: e.message });
    probe.release();
  }
  return { table, adapter: gpu.info, rows, gpuError, ms: performance.now() - t0, stats: gpu.stats, suiteMs };
}

async function gemmCases(gpu, k, p) {
  const out = [];
  const shapes = [[1, 1, 1], [7, 33, 257], [33, 257, 7], [257, 7, 33], [64, 64, 16], [65, 130, 17]];
  let variant = 0;
  for (const [m, n, kk] of shapes) {
    for (const ta of [0, 1]) {
      for (const tb of [0, 1]) {
        const act = variant % 6, withBias = variant % 2 === 0, beta = variant % 5 === 3 ? 1.5 : 0;
        const alpha = beta ? 0.5 : 1, actAlpha = act === ACT.elu ? 1 : 0.1;
        variant++;
        const pad = variant % 3;  // row strides larger than the rows
        const lda = (ta ? m : kk) + pad, ldb = (tb ? kk : n) + pad, ldc = n + pad;
        const a = uniform((ta ? kk : m) * lda), b = uniform((tb ? n : kk) * ldb);
        const c0 = beta ? uniform(m * ldc) : nans(m * ldc);
        const bias = withBias ? uniform(n) : null;
        const ga = gpu.tensor(a), gb = gpu.tensor(b), gc = gpu.tensor(c0), gbias = bias && gpu.tensor(bias);
        k.sgemm(ta, tb, m, n, kk, alpha, ga, lda, gb, ldb, beta, gc, ldc, { bias: gbias, act, alpha: actAlpha });
        const got = await gpu.read(gc);
        const pc = p.put(beta ? c0 : new Float32Array(m * ldc));
        p.m._probe_sgemm(ta, tb, m, n, kk, alpha, p.put(a), lda, p.put(b), ldb, beta, pc, ldc,
          bias ? p.put(bias) : 0, act, actAlpha);
        const ref = p.get(pc, m * ldc);
        // Only the m x n part is C; the stride padding is never written.
        const pick = (v) => Float32Array.from({ length: m * n }, (_, i) => v[Math.floor(i / n) * ldc + (i % n)]);
        out.push(compare(`sgemm ${m}x${n}x${kk} ta${ta} tb${tb} act${act}${bias ? ' bias' : ''}${beta ? ' beta' : ''}`,
          pick(got), pick(ref), TOL.gemm * Math.max(1, Math.sqrt(kk) / 4)));
        for (const t of [ga, gb, gc, gbias]) t?.destroy();
      }
    }
  }
  return out;
}

async function actCases(gpu, k, p) {
  const out = [];
  for (const n of [1, 7, 33, 257, 70001]) {
    for (let act = 0; act < 6; act++) {
      const alpha = act === ACT.elu ? 1.3 : 0.07;
      const x = uniform(n, -4, 4);
      if (n > 2) x[0] = 60, x[1] = -60;  // tanh and sigmoid saturate without NaN
      const dy = uniform(n);
      const gx = gpu.tensor(x), gy = gpu.tensor(nans(n)), gdy = gpu.tensor(dy), gdx = gpu.tensor(nans(n));
      k.act_forward(act, alpha, gx, gy, n);
      k.act_backward(act, alpha, gy, gdy, gdx, n);
      const [y, dx] = [await gpu.read(gy), await gpu.read(gdx)];
      const py = p.put(new Float32Array(n)), pdx = p.put(new Float32Array(n));
      p.m._probe_act_forward(act, alpha, p.put(x), py, n);
      const yRef = p.get(py, n);
      // The backward from the reference's y, so each kernel is judged alone.
      p.m._probe_act_backward(act, alpha, py, p.put(dy), pdx, n);
      out.push(compare(`act_forward ${act} n${n}`, y, yRef, TOL.elementwise));
      const gyRef = gpu.tensor(yRef);
      k.act_backward(act, alpha, gyRef, gdy, gdy, n);  // in place (dx == dy)
      out.push(compare(`act_backward ${act} n${n} in place`, await gpu.read(gdy), p.get(pdx, n), TOL.elementwise));
      if (n === 33) out.push(compare(`act_backward ${act} n${n} from gpu y`, dx, p.get(pdx, n), 1e-5));
      if (n === 7) {  // in-place forward
        k.act_forward(act, alpha, gx, gx, n);
        out.push(compare(`act_forward ${act} n${n} in place`, await gpu.read(gx), yRef, TOL.elementwise));
      }
      for (const t of [gx, gy, gdy, gdx, gyRef]) t.destroy();
    }
  }
  return out;
}

async function sumCases(gpu, k, p) {
  const out = [];
  for (const [m, n, lda, acc] of [[1, 1, 1, 0], [257, 7, 9, 1], [7, 257, 257, 0], [33, 33, 40, 1], [1000, 3, 3, 0]]) {
    const a = uniform(m * lda), o = uniform(n);
    const ga = gpu.tensor(a), go = gpu.tensor(acc ? o : nans(n));
    k.col_sum(ga, m, n, lda, go, acc);
    const po = p.put(o);
    p.m._probe_col_sum(p.put(a), m, n, lda, po, acc);
    out.push(compare(`col_sum ${m}x${n} lda${lda}${acc ? ' accumulate' : ''}`, await gpu.read(go), p.get(po, n), TOL.sum));
    ga.destroy();
    go.destroy();
  }
  return out;
}

const OPTIMIZERS = [
  ['sgd', { lr: 0.1 }],
  ['sgd', { lr: 0.05, momentum: 0.9, weight_decay: 1e-3 }],
  ['sgd', { lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 1e-2 }],
  ['adam', { lr: 1e-3 }],
  ['adam', { lr: 1e-2, weight_decay: 1e-2, beta1: 0.8, beta2: 0.99, eps: 1e-6 }],
  ['adamw', { lr: 1e-2, weight_decay: 0.1 }],
  ['adagrad', { lr: 0.1, lr_decay: 0.01, initial_accumulator: 0.1, weight_decay: 0.01, eps: 1e-10 }],
  ['rmsprop', { lr: 0.01, alpha: 0.99 }],
  ['rmsprop', { lr: 0.01, alpha: 0.9, momentum: 0.9, centered: true, weight_decay: 0.01 }],
  ['rmsprop', { lr: 0.01, centered: true }],
];

async function optimCases(gpu, k, p) {
  const out = [];
  const steps = 3;
  for (const [type, given] of OPTIMIZERS) {
    const o = { lr: 0.01, momentum: 0, weight_decay: 0, beta1: 0.9, beta2: 0.999, eps: 1e-8, alpha: 0.99,
      lr_decay: 0, initial_accumulator: 0, nesterov: false, centered: false, ...given };
    for (const n of [1, 257]) {
      const w = uniform(n), g = uniform(steps * n);
      const gw = gpu.tensor(w), gg = gpu.zeros(n);
      const s1 = gpu.tensor(new Float32Array(n).fill(type === 'adagrad' ? o.initial_accumulator : 0));
      const s2 = gpu.zeros(n), s3 = gpu.zeros(n);
      for (let t = 1; t <= steps; t++) {
        gpu.write(gg, g.subarray((t - 1) * n, t * n));
        if (type === 'sgd') k.sgd_step(gw, gg, s1, n, o);
        else if (type === 'adagrad') k.adagrad_step(gw, gg, s1, n, { ...o, step: t });
        else if (type === 'rmsprop') k.rmsprop_step(gw, gg, s1, s2, s3, n, o);
        else k.adam_step(gw, gg, s1, s2, n, { ...o, decoupled: type === 'adamw', step: t });
      }
      const f = Float32Array.of(o.lr, o.momentum, o.weight_decay, o.beta1, o.beta2, o.eps, o.alpha, o.lr_decay,
        o.initial_accumulator);
      const pw = p.put(w);
      const rc = p.m._probe_optimizer(p.str(type), p.put(f), (o.nesterov ? 1 : 0) | (o.centered ? 2 : 0), pw,
        p.put(g), n, steps);
      if (rc !== 0) throw new Error(`probe_optimizer ${type} failed`);
      out.push(compare(`${type} ${JSON.stringify(given)} n${n} ${steps} steps`, await gpu.read(gw), p.get(pw, n), TOL.optim));
      for (const t of [gw, gg, s1, s2, s3]) t.destroy();
    }
  }
  return out;
}

