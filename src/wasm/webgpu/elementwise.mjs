// elementwise.mjs: one thread per element: the activations and their
// backward, and the optimizer steps with src/nn/optim.cpp's and
// src/nn/kernels/reference.cpp's rules (SGD with momentum, Nesterov and
// weight decay; Adam/AdamW; AdaGrad and RMSprop as torch.optim).
import { ACT_WGSL, ELEMENTWISE_MAIN, kernelHead } from './wgsl_common.mjs';

// Activation forward (y = act(x)) and backward (dx = dy * act'(y)); the
// in-place variants are separate shaders: one buffer may not be bound twice
// where one binding writes.
function actShader(backward, inPlace) {
  const out = backward ? 'dx' : 'y';
  const arrays = backward ? ['dx rw', 'y', ...(inPlace ? [] : ['dy'])] : ['y rw', ...(inPlace ? [] : ['x'])];
  const src = inPlace ? `${out}[i]` : backward ? 'dy[i]' : 'x[i]';
  const body = backward ? `${src} * act_grad(u.act, u.alpha, y[i])` : `act_fwd(u.act, u.alpha, ${src})`;
  return `${kernelHead('n: i32, act: i32, alpha: f32', arrays)}
${ACT_WGSL}
${ELEMENTWISE_MAIN}
  ${out}[i] = ${body};
}`;
}
export const ACT_FORWARD = actShader(false, false);
export const ACT_FORWARD_INPLACE = actShader(false, true);
export const ACT_BACKWARD = actShader(true, false);
export const ACT_BACKWARD_INPLACE = actShader(true, true);

// reference.cpp's ref_sgd_step.
export const SGD_STEP = /* wgsl */ `
${kernelHead('n: i32, lr: f32, momentum: f32, weight_decay: f32, nesterov: i32', ['w rw', 'g', 'v rw'])}
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
${kernelHead('n: i32, lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32, decoupled: i32, bc1: f32, bc2: f32', ['w rw', 'g', 'm rw', 'v rw'])}
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
${kernelHead('n: i32, clr: f32, weight_decay: f32, eps: f32', ['w rw', 'g', 'sum rw'])}
${ELEMENTWISE_MAIN}
  let gi = g[i] + u.weight_decay * w[i];
  let s = sum[i] + gi * gi;
  sum[i] = s;
  w[i] -= u.clr * gi / (sqrt(s) + u.eps);
}`;

// optim.cpp's rmsprop_step: buf (momentum > 0) and ga (centered) are bound
// to a 16-byte dummy when unused, and never touched then.
export const RMSPROP_STEP = /* wgsl */ `
${kernelHead('n: i32, lr: f32, alpha: f32, eps: f32, weight_decay: f32, momentum: f32, centered: i32', ['w rw', 'g', 'sq rw', 'buf rw', 'ga rw'])}
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
