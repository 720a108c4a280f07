// kernels.mjs: the WebGPU kernel table, the browser's third implementation
// of src/nn/kernels.hpp's nn::Kernels (beside the native and wasm tables),
// with the same names, argument order and semantics; tensors are GpuTensors
// (device.mjs) instead of pointers, and shapes are plain objects with
// ConvShape's / PoolShape's fields. It adds what the native code keeps
// outside the table but a GPU step needs on the device: AdaGrad, RMSprop,
// BatchNorm and softmax cross-entropy.
//
//   import { GpuDevice } from './device.mjs';
//   import { webgpuKernels, ACT } from './kernels.mjs';
//   const gpu = await GpuDevice.create();
//   const k = webgpuKernels(gpu);
//   // Y[m,n] = relu(X[m,kk] * W[kk,n] + b[n])
//   k.sgemm(false, false, m, n, kk, 1, X, kk, W, n, 0, Y, n, { bias: b, act: ACT.relu });
//   k.conv2d_forward({ n: 64, c: 3, h: 32, w: 32, k: 32, kh: 5, kw: 5, sh: 1, sw: 1, ph: 2, pw: 2 },
//                    x, w, bias, ACT.relu, 0, y);
//   const y0 = await gpu.read(Y);
import { groups1d } from './device.mjs';
import { CONV_BACKWARD_DATA, CONV_BACKWARD_FILTER, CONV_FORWARD, POOL_BACKWARD, POOL_FORWARD,
  convUniforms, poolUniforms } from './conv.mjs';
import { ACT_BACKWARD, ACT_BACKWARD_INPLACE, ACT_FORWARD, ACT_FORWARD_INPLACE, ADAGRAD_STEP, ADAM_STEP,
  RMSPROP_STEP, SGD_STEP } from './elementwise.mjs';
import { SGEMM, gemmGroups } from './gemm.mjs';
import { BN_BACKWARD_SUMS, BN_DX, BN_NORMALIZE, BN_STATS, CHANNEL_SUM, SOFTMAX_CE_ROWS,
  SOFTMAX_CE_TOTAL } from './reduce.mjs';

export { ACT, POOL } from './wgsl_common.mjs';

const i32 = (v) => [v | 0, 'i32'];
const f32 = (v) => [v, 'f32'];

export function webgpuKernels(gpu) {
  // Scratch tensors the multi-pass kernels keep (grown on demand).
  const scratch = new Map();
  const temp = (name, n) => {
    let t = scratch.get(name);
    if (!t || t.length < n) {
      t?.destroy();
      t = gpu.zeros(n);
      scratch.set(name, t);
    }
    return t;
  };
  const spare = gpu.zeros(4);  // a second dummy: one buffer may not be bound to two writable bindings

  const k = {
    name: 'webgpu',
    gpu,  // the GpuDevice (copies, reads)

    // Row-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, then
    // act(C + bias[j]). ta/tb: true (or Trans::kYes's 1) to transpose.
    // ep: { bias: GpuTensor | null, act, alpha } or null.
    sgemm(ta, tb, m, n, kk, alpha, a, lda, b, ldb, beta, c, ldc, ep = null) {
      gpu.run(SGEMM.code(!!ta, !!tb), [a, b, c, ep?.bias ?? null], [
        i32(m), i32(n), i32(kk), i32(lda), i32(ldb), i32(ldc), f32(alpha), f32(beta),
        i32(ep?.bias ? 1 : 0), i32(ep?.act ?? 0), f32(ep?.alpha ?? 0)], gemmGroups(m, n));
    },

    // y = act(x) (x may be y).
    act_forward(act, alpha, x, y, n) {
      const u = [i32(n), i32(act), f32(alpha)];
      if (x === y) gpu.run(ACT_FORWARD_INPLACE, [y], u, groups1d(n));
      else gpu.run(ACT_FORWARD, [y, x], u, groups1d(n));
    },
    // dx = dy * act'(from y) (dx may be dy).
    act_backward(act, alpha, y, dy, dx, n) {
      const u = [i32(n), i32(act), f32(alpha)];
      if (dx === dy) gpu.run(ACT_BACKWARD_INPLACE, [dx, y], u, groups1d(n));
      else gpu.run(ACT_BACKWARD, [dx, y, dy], u, groups1d(n));
    },
    // out[j] (+)= sum_i a[i*lda + j]: the bias gradient.
    col_sum(a, m, n, lda, out, accumulate) {
      gpu.run(CHANNEL_SUM, [a, out], [i32(m), i32(lda), i32(1), i32(accumulate ? 1 : 0)], [n, 1, 1]);
    },

    // p: { lr, momentum, weight_decay, nesterov } (SgdParams).
    sgd_step(w, g, v, n, p) {
      gpu.run(SGD_STEP, [w, g, p.momentum ? v : spare], [i32(n), f32(p.lr), f32(p.momentum ?? 0),
        f32(p.weight_decay ?? 0), i32(p.nesterov ? 1 : 0)], groups1d(n));
    },
    // p: { lr, beta1, beta2, eps, weight_decay, decoupled, step } (AdamParams; step 1-based).
    adam_step(w, g, m, v, n, p) {
      const bc1 = Math.fround(1 - p.beta1 ** p.step), bc2 = Math.fround(1 - p.beta2 ** p.step);
      gpu.run(ADAM_STEP, [w, g, m, v], [i32(n), f32(p.lr), f32(p.beta1), f32(p.beta2), f32(p.eps),
        f32(p.weight_decay ?? 0), i32(p.decoupled ? 1 : 0), f32(bc1), f32(bc2)], groups1d(n));
    },
    // optim.cpp's AdaGrad: p { lr, lr_decay, weight_decay, eps, step } (step 1-based).
    adagrad_step(w, g, sum, n, p) {
      const clr = Math.fround(Math.fround(p.lr) / Math.fround(1 + Math.fround((p.step - 1) * Math.fround(p.lr_decay ?? 0))));
      gpu.run(ADAGRAD_STEP, [w, g, sum], [i32(n), f32(clr), f32(p.weight_decay ?? 0), f32(p.eps)], groups1d(n));
    },
    // optim.cpp's RMSprop: p { lr, alpha, eps, weight_decay, momentum, centered };
    // buf is used when momentum > 0, ga when centered (else may be null).
    rmsprop_step(w, g, sq, buf, ga, n, p) {
      gpu.run(RMSPROP_STEP, [w, g, sq, p.momentum > 0 ? buf : null, p.centered ? ga : spare], [i32(n),
        f32(p.lr), f32(p.alpha), f32(p.eps), f32(p.weight_decay ?? 0), f32(p.momentum ?? 0),
        i32(p.centered ? 1 : 0)], groups1d(n));
    },

    // s: { n, c, h, w, k, kh, kw, sh, sw, ph, pw } (ConvShape). y = act(conv(x, w) + bias[k]).
    conv2d_forward(s, x, w, bias, act, alpha, y) {
      const { oh, ow, fields } = convUniforms(s);
      const m = s.k, n = s.n * oh * ow, depth = s.c * s.kh * s.kw;
      gpu.run(CONV_FORWARD, [x, w, bias, y], [i32(m), i32(n), i32(depth), ...fields,
        i32(bias ? 1 : 0), i32(act), f32(alpha)], gemmGroups(m, n));
    },
    // dx = the input gradient (overwritten) from dy (already through the activation).
    conv2d_backward_data(s, w, dy, dx) {
      const { fields } = convUniforms(s);
      const m = s.c, n = s.n * s.h * s.w, depth = s.k * s.kh * s.kw;
      gpu.run(CONV_BACKWARD_DATA, [w, dy, dx], [i32(m), i32(n), i32(depth), ...fields], gemmGroups(m, n));
    },
    // dw (+)= the filter gradient; db (+)= sum of dy per filter (db may be null).
    conv2d_backward_filter(s, x, dy, dw, db, accumulate) {
      const { oh, ow, fields } = convUniforms(s);
      const p = oh * ow, m = s.k, n = s.c * s.kh * s.kw, depth = s.n * p;
      gpu.run(CONV_BACKWARD_FILTER, [x, dy, dw], [i32(m), i32(n), i32(depth), ...fields,
        i32(accumulate ? 1 : 0)], gemmGroups(m, n));
      if (db) gpu.run(CHANNEL_SUM, [dy, db], [i32(s.n), i32(s.k * p), i32(p), i32(accumulate ? 1 : 0)], [s.k, 1, 1]);
    },

    // kind: POOL.max | POOL.avg; s: { n, c, h, w, kh, kw, sh, sw, ph, pw } (PoolShape).
    // A max pool writes each output's winning index within its plane to argmax (i32).
    pool2d_forward(kind, s, x, y, argmax) {
      const { oh, ow, fields } = poolUniforms(kind, s);
      const n = s.n * s.c * oh * ow;
      fields[0] = i32(n);
      gpu.run(POOL_FORWARD, [x, y, kind === 0 ? argmax : spare], fields, groups1d(n));
    },
    // dx = the input gradient (overwritten).
    pool2d_backward(kind, s, dy, argmax, dx) {
      const { fields } = poolUniforms(kind, s);
      const n = s.n * s.c * s.h * s.w;
      fields[0] = i32(n);
      gpu.run(POOL_BACKWARD, [dy, kind === 0 ? argmax : null, dx], fields, groups1d(n));
    },

    // BatchNorm over x [b, c, sp] (sp = 1 for a dense input), as
    // nn::BatchNorm: params = [gamma[c], beta[c]], running = [mean[c],
    // var[c]] (moved in training), stats = a 2c tensor the backward reads
    // (mean, invstd).
    batchnorm_forward(b, c, sp, momentum, eps, training, x, params, running, stats, y) {
      gpu.run(BN_STATS, [x, running, stats], [i32(b), i32(c), i32(sp), i32(training ? 1 : 0),
        f32(momentum), f32(eps)], [c, 1, 1]);
      const n = b * c * sp;
      gpu.run(BN_NORMALIZE, [x, params, stats, y], [i32(n), i32(c), i32(sp)], groups1d(n));
    },
    // After a training forward: grads = [dgamma[c], dbeta[c]] (+)=, dx (may be null).
    batchnorm_backward(b, c, sp, x, dy, params, stats, grads, dx, accumulate) {
      const coef = temp('bn_coef', 2 * c);
      gpu.run(BN_BACKWARD_SUMS, [x, dy, stats, grads, coef], [i32(b), i32(c), i32(sp),
        i32(accumulate ? 1 : 0)], [c, 1, 1]);
      if (!dx) return;
      const n = b * c * sp;
      gpu.run(BN_DX, [x, dy, params, stats, coef, dx], [i32(n), i32(c), i32(sp)], groups1d(n));
    },

    // Softmax cross-entropy of logits [rows, cols] with labels (i32):
    // out (a tensor of >= 2) = [mean loss, hits]; grad (may be null) =
    // dLoss/dlogits, mean-reduced. Nothing is read back.
    softmax_cross_entropy(logits, labels, rows, cols, grad, out) {
      const rowOut = temp('ce_rows', 2 * rows);
      gpu.run(SOFTMAX_CE_ROWS, [logits, labels, grad ?? spare, rowOut], [i32(rows), i32(cols),
        i32(grad ? 1 : 0)], groups1d(rows, 64));
      gpu.run(SOFTMAX_CE_TOTAL, [rowOut, out], [i32(rows)], [1, 1, 1]);
    },
  };
  return k;
}

