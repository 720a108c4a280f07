// elementwise.mjs: one thread per element: the activations and their
// backward, and the optimizer steps with src/nn/optim.cpp's and
// src/nn/kernels/reference.cpp's rules (SGD with momentum, Nesterov and
// weight decay; Adam/AdamW; AdaGrad and RMSprop as torch.optim).
import { ACT_WGSL, ELEMENTWISE_MAIN } from './wgsl_common.mjs';

export const ACT_FORWARD = /* wgsl */ `
struct U { n: i32, act: i32, alpha: f32 };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
${ACT_WGSL}
${ELEMENTWISE_MAIN}
  y[i] = act_fwd(u.act, u.alpha, x[i]);
}`;

// In place (x == y) is a separate variant: one buffer may not be bound twice
// where one binding writes.
export const ACT_FORWARD_INPLACE = /* wgsl */ `
struct U { n: i32, act: i32, alpha: f32 };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
${ACT_WGSL}
${ELEMENTWISE_MAIN}
  y[i] = act_fwd(u.act, u.alpha, y[i]);
}`;

export const ACT_BACKWARD = /* wgsl */ `
struct U { n: i32, act: i32, alpha: f32 };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> dx: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
${ACT_WGSL}
${ELEMENTWISE_MAIN}
  dx[i] = dy[i] * act_grad(u.act, u.alpha, y[i]);
}`;

export const ACT_BACKWARD_INPLACE = /* wgsl */ `
struct U { n: i32, act: i32, alpha: f32 };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> dx: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
${ACT_WGSL}
${ELEMENTWISE_MAIN}
  dx[i] = dx[i] * act_grad(u.act, u.alpha, y[i]);
}`;

// reference.cpp's ref_sgd_step.
export const SGD_STEP = /* wgsl */ `
struct U { n: i32, lr: f32, momentum: f32, weight_decay: f32, nesterov: i32 };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
${ELEMENTWISE_MAIN}
  let gi = g[i] + u.weight_decay * w[i];
  var d = gi;
  if (u.momentum != 0.0) {
    let vi = u.momentum * v[i] + gi;
    v[i] = vi;
    d = select(vi, gi + u.momentum * vi, u.nesterov != 0);
  }
  w[i] -= u.lr * d;
}`;

// reference.cpp's ref_adam_step; bc1, bc2 (the bias corrections) computed
// on the host in double and rounded to f32, as there.
export const ADAM_STEP = /* wgsl */ `
struct U { n: i32, lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, decoupled: i32, bc1: f32, bc2: f32 };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;
${ELEMENTWISE_MAIN}
  var gi = g[i];
  var wi = w[i];
  if (u.decoupled != 0) { wi -= u.lr * u.weight_decay * wi; } else { gi += u.weight_decay * wi; }
  let mi = u.beta1 * m[i] + (1.0 - u.beta1) * gi;
  let vi = u.beta2 * v[i] + (1.0 - u.beta2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  w[i] = wi - u.lr * (mi / u.bc1) / (sqrt(vi / u.bc2) + u.eps);
}`;

// optim.cpp's adagrad_step; clr = lr / (1 + (t - 1) lr_decay) from the host.
export const ADAGRAD_STEP = /* wgsl */ `
struct U { n: i32, clr: f32, weight_decay: f32, eps: f32 };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> sum: array<f32>;
${ELEMENTWISE_MAIN}
  let gi = g[i] + u.weight_decay * w[i];
  let s = sum[i] + gi * gi;
  sum[i] = s;
  w[i] -= u.clr * gi / (sqrt(s) + u.eps);
}`;

// optim.cpp's rmsprop_step: buf (momentum > 0) and ga (centered) are bound
// to a 16-byte dummy when unused, and never touched then.
export const RMSPROP_STEP = /* wgsl */ `
struct U { n: i32, lr: f32, alpha: f32, eps: f32, weight_decay: f32, momentum: f32, centered: i32 };
@group(0) @binding(0) var<uniform> u: U;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read> g: array<f32>;
@group(0) @binding(3) var<storage, read_write> sq: array<f32>;
@group(0) @binding(4) var<storage, read_write> buf: array<f32>;
@group(0) @binding(5) var<storage, read_write> ga: array<f32>;
${ELEMENTWISE_MAIN}
  let gi = g[i] + u.weight_decay * w[i];
  let s = u.alpha * sq[i] + (1.0 - u.alpha) * gi * gi;
  sq[i] = s;
  var variance = s;
  if (u.centered != 0) {
    let a = u.alpha * ga[i] + (1.0 - u.alpha) * gi;
    ga[i] = a;
    variance -= a * a;
  }
  let stp = gi / (sqrt(variance) + u.eps);
  if (u.momentum > 0.0) {
    let b = u.momentum * buf[i] + stp;
    buf[i] = b;
    w[i] -= u.lr * b;
  } else {
    w[i] -= u.lr * stp;
  }
}`;
