// conv.mjs: NCHW convolution (nn::ConvShape) as implicit GEMMs on gemm.mjs's
// tile, and pooling (nn::PoolShape). Index names: img (image), C input
// channels, K filters, P = OH * OW output positions, Q = C * KH * KW the
// fan-in of one output.
//   forward:         y[img,k,p]  = act(sum_q w[k,q] * im2col(x)[q, (img,p)] + bias[k])
//                    M = K, N = n*P, depth Q
//   backward data:   dx[img,c,h,w] = sum_(k,i,j) w[k,c,i,j] * dy[img,k,oh,ow] where
//                    oh*sh - ph + i = h (and so for w): M = C, N = n*H*W, depth K*KH*KW
//   backward filter: dw[k,q] (+)= sum_(img,p) dy[img,k,p] * im2col(x)[q,(img,p)]
//                    M = K, N = Q, depth n*P
import { gemmShader } from './gemm.mjs';
import { ELEMENTWISE_MAIN, kernelHead } from './wgsl_common.mjs';

const SHAPE_FIELDS = 'bn: i32, cc: i32, hh: i32, ww: i32, kk_: i32, kh: i32, kw: i32, sh: i32, sw: i32, ph: i32, pw: i32, oh: i32, ow: i32';

// x at im2col row q, column (img, p); zero in the padding.
const IM2COL = /* wgsl */ `
fn im2col(q: i32, col: i32) -> f32 {
  let P = u.oh * u.ow;
  let img = col / P;
  let p = col % P;
  let c = q / (u.kh * u.kw);
  let rem = q % (u.kh * u.kw);
  let ih = (p / u.ow) * u.sh - u.ph + rem / u.kw;
  let iw = (p % u.ow) * u.sw - u.pw + rem % u.kw;
  if (ih < 0 || ih >= u.hh || iw < 0 || iw >= u.ww) { return 0.0; }
  return x[((img * u.cc + c) * u.hh + ih) * u.ww + iw];
}`;

export const CONV_FORWARD = gemmShader({
  uniforms: `${SHAPE_FIELDS}, has_bias: i32, act: i32, act_alpha: f32`,
  bindings: `@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
${IM2COL}`,
  loadA: 'return w[r * u.k + kk];',
  loadB: 'return im2col(kk, c);',
  store: `let P = u.oh * u.ow;
  var s = v;
  if (u.has_bias != 0) { s += bias[r]; }
  y[((c / P) * u.kk_ + r) * P + c % P] = act_fwd(u.act, u.act_alpha, s);`,
  aKFast: true,
  bKFast: false,
});

export const CONV_BACKWARD_DATA = gemmShader({
  uniforms: SHAPE_FIELDS,
  bindings: `@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<f32>;`,
  loadA: `let k = kk / (u.kh * u.kw);
  let rem = kk % (u.kh * u.kw);
  return w[(k * u.cc + r) * u.kh * u.kw + rem];`,
  loadB: `let HW = u.hh * u.ww;
  let img = c / HW;
  let ih = (c % HW) / u.ww;
  let iw = c % u.ww;
  let k = kk / (u.kh * u.kw);
  let rem = kk % (u.kh * u.kw);
  let ty = ih + u.ph - rem / u.kw;
  let tx = iw + u.pw - rem % u.kw;
  if (ty < 0 || tx < 0 || ty % u.sh != 0 || tx % u.sw != 0) { return 0.0; }
  let oy = ty / u.sh;
  let ox = tx / u.sw;
  if (oy >= u.oh || ox >= u.ow) { return 0.0; }
  return dy[((img * u.kk_ + k) * u.oh + oy) * u.ow + ox];`,
  store: `let HW = u.hh * u.ww;
  dx[((c / HW) * u.cc + r) * HW + c % HW] = v;`,
  aKFast: false,
  bKFast: false,
});

export const CONV_BACKWARD_FILTER = gemmShader({
  uniforms: `${SHAPE_FIELDS}, accumulate: i32`,
  bindings: `@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dw: array<f32>;
${IM2COL}`,
  loadA: `let P = u.oh * u.ow;
  return dy[((kk / P) * u.kk_ + r) * P + kk % P];`,
  loadB: 'return im2col(c, kk);',
  store: `let o = r * u.n + c;
  if (u.accumulate != 0) { dw[o] += v; } else { dw[o] = v; }`,
  aKFast: true,
  bKFast: true,
});

export function convUniforms(s) {
  const oh = Math.floor((s.h + 2 * s.ph - s.kh) / s.sh) + 1, ow = Math.floor((s.w + 2 * s.pw - s.kw) / s.sw) + 1;
  return { oh, ow, fields: [s.n, s.c, s.h, s.w, s.k, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, oh, ow].map((v) => [v, 'i32']) };
}

const POOL_FIELDS = 'n: i32, hh: i32, ww: i32, kh: i32, kw: i32, sh: i32, sw: i32, ph: i32, pw: i32, oh: i32, ow: i32, kind: i32';

// One thread per output; the first of equal maxima wins, as the reference.
export const POOL_FORWARD = /* wgsl */ `
${kernelHead(POOL_FIELDS, ['x', 'y rw', 'argmax rw i32'])}
${ELEMENTWISE_MAIN}
  let P = u.oh * u.ow;
  let plane = i / P;
  let oy = (i % P) / u.ow;
  let ox = i % u.ow;
  let base = plane * u.hh * u.ww;
  var sum = 0.0;
  var best = -1;
  var bestv = 0.0;
  for (var a = 0; a < u.kh; a++) {
    for (var b = 0; b < u.kw; b++) {
      let ih = oy * u.sh - u.ph + a;
      let iw = ox * u.sw - u.pw + b;
      if (ih < 0 || ih >= u.hh || iw < 0 || iw >= u.ww) { continue; }
      let q = ih * u.ww + iw;
      let v = x[base + q];
      sum += v;
      if (best < 0 || v > bestv) { best = q; bestv = v; }
    }
  }
  if (u.kind == 0) {
    y[i] = bestv;
    argmax[i] = best;
  } else {
    y[i] = sum / f32(u.kh * u.kw);
  }
}`;

// One thread per input: gathers the outputs whose window covers it (no
// atomics; the same order for every run).
export const POOL_BACKWARD = /* wgsl */ `
${kernelHead(POOL_FIELDS, ['dy', 'argmax i32', 'dx rw'])}
${ELEMENTWISE_MAIN}
  let HW = u.hh * u.ww;
  let plane = i / HW;
  let q = i % HW;
  let ih = q / u.ww;
  let iw = q % u.ww;
  // Outputs oy with oy*sh - ph <= ih < oy*sh - ph + kh.
  let y0 = max(0, (ih + u.ph - u.kh + u.sh) / u.sh);
  let y1 = min(u.oh - 1, (ih + u.ph) / u.sh);
  let x0 = max(0, (iw + u.pw - u.kw + u.sw) / u.sw);
  let x1 = min(u.ow - 1, (iw + u.pw) / u.sw);
  var s = 0.0;
  for (var oy = y0; oy <= y1; oy++) {
    for (var ox = x0; ox <= x1; ox++) {
      let o = (plane * u.oh + oy) * u.ow + ox;
      if (u.kind == 0) {
        if (argmax[o] == q) { s += dy[o]; }
      } else {
        s += dy[o];
      }
    }
  }
  if (u.kind == 1) { s /= f32(u.kh * u.kw); }
  dx[i] = s;
}`;

export function poolUniforms(kind, s) {
  const oh = Math.floor((s.h + 2 * s.ph - s.kh) / s.sh) + 1, ow = Math.floor((s.w + 2 * s.pw - s.kw) / s.sw) + 1;
  return { oh, ow, fields: [0, s.h, s.w, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, oh, ow, kind].map((v) => [v, 'i32']) };
}
