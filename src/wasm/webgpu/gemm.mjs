// gemm.mjs: one tiled matrix-multiply shader, specialized by its loaders.
// A workgroup of 16x16 threads computes a 64x64 tile of C, each thread a
// 4x4 block (rows ty + 16i, columns tx + 16j) in 16 scalar accumulators
// (written out, not an indexed array: SwiftShader keeps an indexed private
// array in memory, 10x slower), stepping K by 16 through two 16x64 tiles in
// workgroup memory (8 KiB). sgemm reads A and B as stored;
// the convolutions read them through index arithmetic (implicit GEMM: the
// im2col matrix is never written). Out-of-range loads are zeros, so any
// m, n, k works; only stores are bounds-checked.
import { ACT_WGSL } from './wgsl_common.mjs';

export const TILE = 64;

// spec: { uniforms: WGSL struct fields after m, n, k; bindings: WGSL
// declarations (binding 1..); loadA: body of fn loadA(r: i32, kk: i32) -> f32;
// loadB: fn loadB(kk: i32, c: i32) -> f32; store: fn store(r: i32, c: i32, v: f32);
// aKFast / bKFast: whether consecutive threads should load along k (the
// operand is contiguous along k) or along the row/column. }
const range16 = Array.from({ length: 16 }, (_, e) => e);

export function gemmShader({ uniforms = '', bindings, loadA, loadB, store, aKFast, bKFast }) {
  const mapA = aKFast ? 'let r = e / 16; let kk = e % 16;' : 'let r = e % 64; let kk = e / 64;';
  const mapB = bKFast ? 'let c = e / 16; let kk = e % 16;' : 'let c = e % 64; let kk = e / 64;';
  return /* wgsl */ `
struct U { m: i32, n: i32, k: i32, ${uniforms} };
@group(0) @binding(0) var<uniform> u: U;
${bindings}
var<workgroup> As: array<f32, 1024>;
var<workgroup> Bs: array<f32, 1024>;
${ACT_WGSL}
fn loadA(r: i32, kk: i32) -> f32 { ${loadA} }
fn loadB(kk: i32, c: i32) -> f32 { ${loadB} }
fn store(r: i32, c: i32, v: f32) { ${store} }
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_id) lid: vec3u) {
  let row0 = i32(wg.y) * 64;
  let col0 = i32(wg.x) * 64;
  let tx = i32(lid.x);
  let ty = i32(lid.y);
  let t = ty * 16 + tx;
  ${range16.map((e) => `var c${e} = 0.0;`).join(' ')}
  for (var k0 = 0; k0 < u.k; k0 += 16) {
    for (var l = 0; l < 4; l++) {
      let e = t + 256 * l;
      {
        ${mapA}
        var v = 0.0;
        if (row0 + r < u.m && k0 + kk < u.k) { v = loadA(row0 + r, k0 + kk); }
        As[kk * 64 + r] = v;
      }
      {
        ${mapB}
        var v = 0.0;
        if (col0 + c < u.n && k0 + kk < u.k) { v = loadB(k0 + kk, col0 + c); }
        Bs[kk * 64 + c] = v;
      }
    }
    workgroupBarrier();
    for (var kk = 0; kk < 16; kk++) {
      ${[0, 1, 2, 3].map((i) => `let a${i} = As[kk * 64 + ty + ${16 * i}]; let b${i} = Bs[kk * 64 + tx + ${16 * i}];`).join('\n      ')}
      ${range16.map((e) => `c${e} += a${e >> 2} * b${e & 3};`).join(' ')}
    }
    workgroupBarrier();
  }
  ${range16.map((e) => `if (row0 + ty + ${16 * (e >> 2)} < u.m && col0 + tx + ${16 * (e & 3)} < u.n) { store(row0 + ty + ${16 * (e >> 2)}, col0 + tx + ${16 * (e & 3)}, c${e}); }`).join('\n  ')}
}`;
}

export const gemmGroups = (m, n) => [Math.max(1, Math.ceil(n / TILE)), Math.max(1, Math.ceil(m / TILE)), 1];

// C = alpha op(A) op(B) + beta C, then act(C + bias[j]). beta 0 never reads
// C (it may hold NaN), as BLAS.
export const SGEMM = {
  variants: new Map(),
  code(ta, tb) {
    const key = `${ta}${tb}`;
    if (!this.variants.has(key)) {
      this.variants.set(key, gemmShader({
        uniforms: 'lda: i32, ldb: i32, ldc: i32, alpha: f32, beta: f32, has_bias: i32, act: i32, act_alpha: f32',
        bindings: `@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> cm: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;`,
        loadA: ta ? 'return a[kk * u.lda + r];' : 'return a[r * u.lda + kk];',
        loadB: tb ? 'return b[c * u.ldb + kk];' : 'return b[kk * u.ldb + c];',
        store: `let o = r * u.ldc + c;
  var x = u.alpha * v;
  if (u.beta != 0.0) { x += u.beta * cm[o]; }
  if (u.has_bias != 0) { x += bias[c]; }
  cm[o] = act_fwd(u.act, u.act_alpha, x);`,
        aKFast: !ta,
        bKFast: !!tb,
      }));
    }
    return this.variants.get(key);
  },
};
