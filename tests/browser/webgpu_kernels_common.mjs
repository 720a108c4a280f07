// Shared by the WebGPU kernel checks (webgpu_kernels_page.mjs,
// webgpu_kernels_cases.mjs): seeded inputs, the error measure and the wasm
// probe's heap.
// Tolerances (README "Tolerances"): f32 sums in another order. One rounding
// per element for element-wise kernels; GEMM-like sums grow with the depth.
export const TOL = { elementwise: 2e-6, optim: 1e-5, sum: 1e-5, gemm: 2e-5, bn: 5e-5, ce: 2e-6 };

function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20261207);
export const uniform = (n, lo = -1, hi = 1) => Float32Array.from({ length: n }, () => lo + (hi - lo) * rand());
export const nans = (n) => new Float32Array(n).fill(NaN);

export function compare(name, gpu, ref, tol) {
  let scale = 1, err = 0;
  for (let i = 0; i < ref.length; i++) scale = Math.max(scale, Math.abs(ref[i]));
  for (let i = 0; i < ref.length; i++) {
    const d = Math.abs(gpu[i] - ref[i]);
    err = Math.max(err, Number.isNaN(d) ? Infinity : d);
  }
  return { name, err: err / scale, tol, n: ref.length };
}
export function exact(name, gpu, ref) {
  let bad = 0;
  for (let i = 0; i < ref.length; i++) bad += gpu[i] !== ref[i];
  return { name, err: bad, tol: 0, exact: true, n: ref.length };
}

// The probe's heap: copies in, calls, copies out.
export class Probe {
  constructor(mod) {
    this.m = mod;
    this.ptrs = [];
  }
  put(a) {
    const p = this.m._malloc(Math.max(4, a.byteLength));
    this.ptrs.push(p);
    new Uint8Array(this.m.HEAPU8.buffer, p, a.byteLength).set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    return p;
  }
  get(p, n, Type = Float32Array) {
    return new Type(this.m.HEAPU8.buffer.slice(p, p + n * 4));
  }
  str(s) {
    return this.put(new TextEncoder().encode(`${s}\0`));
  }
  release() {
    for (const p of this.ptrs) this.m._free(p);
    this.ptrs = [];
  }
}

