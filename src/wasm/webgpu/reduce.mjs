// reduce.mjs: kernels that sum over the batch: the channel sum (bias
// gradients of dense and conv layers), BatchNorm (statistics, normalize,
// backward) and softmax cross-entropy (loss, hits, gradient). One workgroup
// of 256 threads per channel sums in a fixed order (strided partials, then a
// tree), so a run gives the same bits every time; the order differs from the
// native loops', so results agree within rounding, not bit for bit.
import { ELEMENTWISE_MAIN, kernelHead } from './wgsl_common.mjs';

// out[ch] (+)= sum over g < G, p < P of a[g * ld + ch * P + p]: col_sum
// (G = m rows, ld = lda, P = 1) and the conv bias gradient (G = images,
// ld = K * P). One workgroup per channel.
const REDUCE_TREE = /* wgsl */ `
var<workgroup> part: array<f32, 256>;
fn tree(t: u32, v: f32) -> f32 {
  part[t] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (t < s) { part[t] += part[t + s]; }
    workgroupBarrier();
  }
  let r = part[0];
  workgroupBarrier();
  return r;
}`;

export const CHANNEL_SUM = /* wgsl */ `
${kernelHead('groups: i32, ld: i32, positions: i32, accumulate: i32', ['a', 'out rw'])}
${REDUCE_TREE}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let ch = i32(wg.x);
  let total = u.groups * u.positions;
  var s = 0.0;
  for (var e = i32(lid.x); e < total; e += 256) {
    s += a[(e / u.positions) * u.ld + ch * u.positions + e % u.positions];
  }
  let r = tree(lid.x, s);
  if (lid.x == 0u) {
    if (u.accumulate != 0) { out[ch] += r; } else { out[ch] = r; }
  }
}`;

// BatchNorm statistics per channel of x [b, c, sp]: in training the batch's
// mean and biased variance (two passes), the running statistics moved by
// momentum (running_var by the unbiased variance); otherwise the running
// statistics. stats[ch] = mean, stats[c + ch] = invstd.
export const BN_STATS = /* wgsl */ `
${kernelHead('b: i32, c: i32, sp: i32, training: i32, momentum: f32, eps: f32', ['x', 'running rw', 'stats rw'])}
${REDUCE_TREE}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let ch = i32(wg.x);
  if (u.training == 0) {
    if (lid.x == 0u) {
      stats[ch] = running[ch];
      stats[u.c + ch] = 1.0 / sqrt(running[u.c + ch] + u.eps);
    }
    return;
  }
  let total = u.b * u.sp;
  let n = f32(total);
  var s = 0.0;
  for (var e = i32(lid.x); e < total; e += 256) {
    s += x[((e / u.sp) * u.c + ch) * u.sp + e % u.sp];
  }
  let mean = tree(lid.x, s) / n;
  var s2 = 0.0;
  for (var e = i32(lid.x); e < total; e += 256) {
    let d = x[((e / u.sp) * u.c + ch) * u.sp + e % u.sp] - mean;
    s2 += d * d;
  }
  let ss = tree(lid.x, s2);
  if (lid.x == 0u) {
    let variance = ss / n;
    let unbiased = select(variance, ss / (n - 1.0), total > 1);
    running[ch] = (1.0 - u.momentum) * running[ch] + u.momentum * mean;
    running[u.c + ch] = (1.0 - u.momentum) * running[u.c + ch] + u.momentum * unbiased;
    stats[ch] = mean;
    stats[u.c + ch] = 1.0 / sqrt(variance + u.eps);
  }
}`;

// y = x * g + (beta - mean * g), g = gamma * invstd, per element.
// params = [gamma[c], beta[c]].
export const BN_NORMALIZE = /* wgsl */ `
${kernelHead('n: i32, c: i32, sp: i32', ['x', 'params', 'stats', 'y rw'])}
${ELEMENTWISE_MAIN}
  let ch = (i / u.sp) % u.c;
  let g = params[ch] * stats[u.c + ch];
  y[i] = x[i] * g + (params[u.c + ch] - stats[ch] * g);
}`;

// Backward with batch statistics: per channel sdy = sum dy, sdyx = sum dy *
// xhat; grads[ch] (+)= sdyx (dgamma), grads[c + ch] (+)= sdy (dbeta);
// coef[ch] = sdy / n, coef[c + ch] = sdyx / n for BN_DX.
export const BN_BACKWARD_SUMS = /* wgsl */ `
${kernelHead('b: i32, c: i32, sp: i32, accumulate: i32', ['x', 'dy', 'stats', 'grads rw', 'coef rw'])}
${REDUCE_TREE}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let ch = i32(wg.x);
  let total = u.b * u.sp;
  let mean = stats[ch];
  let inv_std = stats[u.c + ch];
  var s = 0.0;
  var sx = 0.0;
  for (var e = i32(lid.x); e < total; e += 256) {
    let o = ((e / u.sp) * u.c + ch) * u.sp + e % u.sp;
    s += dy[o];
    sx += dy[o] * (x[o] - mean) * inv_std;
  }
  let sdy = tree(lid.x, s);
  let sdyx = tree(lid.x, sx);
  if (lid.x == 0u) {
    if (u.accumulate != 0) {
      grads[ch] += sdyx;
      grads[u.c + ch] += sdy;
    } else {
      grads[ch] = sdyx;
      grads[u.c + ch] = sdy;
    }
    coef[ch] = sdy / f32(total);
    coef[u.c + ch] = sdyx / f32(total);
  }
}`;

// dx = gamma * invstd * (dy - sdy/n - xhat * sdyx/n).
export const BN_DX = /* wgsl */ `
${kernelHead('n: i32, c: i32, sp: i32', ['x', 'dy', 'gamma', 'stats', 'coef', 'dx rw'])}
${ELEMENTWISE_MAIN}
  let ch = (i / u.sp) % u.c;
  let inv_std = stats[u.c + ch];
  let xh = (x[i] - stats[ch]) * inv_std;
  dx[i] = gamma[ch] * inv_std * (dy[i] - coef[ch] - xh * coef[u.c + ch]);
}`;

// Softmax cross-entropy per row (one thread a row): row_loss[r] =
// log(sum exp(z - max)) - (z[label] - max), hits[r] = argmax == label (the
// first of equals), grad (mean-reduced) = softmax / rows - onehot / rows.
export const SOFTMAX_CE_ROWS = /* wgsl */ `
${kernelHead('rows: i32, cols: i32, want_grad: i32', ['z', 'labels i32', 'grad rw', 'row_out rw'])}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let r = i32(gid.x + gid.y * 65535u * 64u);
  if (r >= u.rows) { return; }
  let base = r * u.cols;
  var am = 0;
  for (var j = 1; j < u.cols; j++) {
    if (z[base + j] > z[base + am]) { am = j; }
  }
  let mx = z[base + am];
  var sum = 0.0;
  for (var j = 0; j < u.cols; j++) { sum += exp(z[base + j] - mx); }
  let label = labels[r];
  row_out[r] = log(sum) - (z[base + label] - mx);
  row_out[u.rows + r] = select(0.0, 1.0, am == label);
  if (u.want_grad != 0) {
    let inv_rows = 1.0 / f32(u.rows);
    let inv = inv_rows / sum;
    for (var j = 0; j < u.cols; j++) { grad[base + j] = exp(z[base + j] - mx) * inv; }
    grad[base + label] -= inv_rows;
  }
}`;

// out[0] = mean loss, out[1] = hits, from SOFTMAX_CE_ROWS's row_out.
export const SOFTMAX_CE_TOTAL = /* wgsl */ `
${kernelHead('rows: i32', ['row_out', 'out rw'])}
${REDUCE_TREE}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3u) {
  var s = 0.0;
  var h = 0.0;
  for (var r = i32(lid.x); r < u.rows; r += 256) {
    s += row_out[r];
    h += row_out[u.rows + r];
  }
  let loss = tree(lid.x, s);
  let hits = tree(lid.x, h);
  if (lid.x == 0u) {
    out[0] = loss / f32(u.rows);
    out[1] = hits;
  }
}`;
