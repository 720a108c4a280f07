// The convolution, pooling, BatchNorm and softmax cross-entropy checks of
// webgpu_kernels_page.mjs: each WebGPU kernel against the wasm probe.
import { POOL } from '/webgpu/kernels.mjs';
import { TOL, compare, exact, nans, uniform } from '/test/webgpu_kernels_common.mjs';

const CONV_SHAPES = [  // n, c, h, w, k, kh, kw, sh, sw, ph, pw
  [1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0],
  [1, 3, 7, 7, 5, 3, 3, 1, 1, 1, 1],
  [2, 7, 9, 8, 33, 3, 3, 2, 2, 1, 1],
  [3, 2, 13, 11, 7, 5, 3, 2, 1, 2, 0],
  [1, 5, 33, 33, 4, 1, 1, 1, 1, 0, 0],
  [2, 3, 10, 10, 8, 4, 4, 3, 3, 0, 2],
  [1, 4, 8, 8, 257, 3, 3, 1, 1, 1, 1],
];
const FIELDS = ['n', 'c', 'h', 'w', 'k', 'kh', 'kw', 'sh', 'sw', 'ph', 'pw'];
const outSize = (i, k, s, p) => Math.floor((i + 2 * p - k) / s) + 1;

export async function convCases(gpu, k, p) {
  const out = [];
  let variant = 0;
  for (const v of CONV_SHAPES) {
    const s = Object.fromEntries(FIELDS.map((f, i) => [f, v[i]]));
    const oh = outSize(s.h, s.kh, s.sh, s.ph), ow = outSize(s.w, s.kw, s.sw, s.pw);
    const nx = s.n * s.c * s.h * s.w, nw = s.k * s.c * s.kh * s.kw, ny = s.n * s.k * oh * ow;
    const act = variant++ % 6, alpha = 0.1, acc = variant % 2 === 0;
    const x = uniform(nx), w = uniform(nw), bias = uniform(s.k), dy = uniform(ny);
    const dw0 = acc ? uniform(nw) : nans(nw), db0 = acc ? uniform(s.k) : nans(s.k);
    const gx = gpu.tensor(x), gw = gpu.tensor(w), gb = gpu.tensor(bias), gdy = gpu.tensor(dy);
    const gy = gpu.tensor(nans(ny)), gdx = gpu.tensor(nans(nx)), gdw = gpu.tensor(dw0), gdb = gpu.tensor(db0);
    k.conv2d_forward(s, gx, gw, gb, act, alpha, gy);
    k.conv2d_backward_data(s, gw, gdy, gdx);
    k.conv2d_backward_filter(s, gx, gdy, gdw, gdb, acc);
    const ps = p.put(Int32Array.from(v));
    const px = p.put(x), pw = p.put(w), pdy = p.put(dy);
    const py = p.put(new Float32Array(ny)), pdx = p.put(new Float32Array(nx));
    const pdw = p.put(acc ? dw0 : new Float32Array(nw)), pdb = p.put(acc ? db0 : new Float32Array(s.k));
    p.m._probe_conv_forward(ps, px, pw, p.put(bias), act, alpha, py);
    p.m._probe_conv_backward_data(ps, pw, pdy, pdx);
    p.m._probe_conv_backward_filter(ps, px, pdy, pdw, pdb, acc ? 1 : 0);
    const name = `conv ${v.join(',')}`;
    const depth = (n) => TOL.gemm * Math.max(1, Math.sqrt(n) / 4);
    out.push(compare(`${name} forward act${act}`, await gpu.read(gy), p.get(py, ny), depth(s.c * s.kh * s.kw)));
    out.push(compare(`${name} backward_data`, await gpu.read(gdx), p.get(pdx, nx), depth(s.k * s.kh * s.kw)));
    out.push(compare(`${name} backward_filter${acc ? ' accumulate' : ''}`, await gpu.read(gdw), p.get(pdw, nw),
      depth(s.n * oh * ow)));
    out.push(compare(`${name} bias grad${acc ? ' accumulate' : ''}`, await gpu.read(gdb), p.get(pdb, s.k), TOL.sum));
    for (const t of [gx, gw, gb, gdy, gy, gdx, gdw, gdb]) t.destroy();
  }
  return out;
}

const POOL_SHAPES = [  // n, c, h, w, kh, kw, sh, sw, ph, pw
  [1, 1, 1, 1, 1, 1, 1, 1, 0, 0],
  [2, 3, 7, 7, 2, 2, 2, 2, 0, 0],
  [1, 2, 33, 33, 3, 3, 2, 2, 1, 1],
  [3, 1, 9, 7, 3, 2, 1, 2, 1, 0],
  [1, 5, 8, 8, 8, 8, 1, 1, 0, 0],
  [1, 1, 257, 3, 3, 3, 1, 1, 1, 1],
];

export async function poolCases(gpu, k, p) {
  const out = [];
  for (const v of POOL_SHAPES) {
    const [n, c, h, w, kh, kw, sh, sw, ph, pw] = v;
    const s = { n, c, h, w, kh, kw, sh, sw, ph, pw };
    const ny = n * c * outSize(h, kh, sh, ph) * outSize(w, kw, sw, pw), nx = n * c * h * w;
    for (const kind of [POOL.max, POOL.avg]) {
      const x = uniform(nx), dy = uniform(ny);
      const gx = gpu.tensor(x), gy = gpu.tensor(nans(ny)), ga = gpu.tensor(new Int32Array(ny).fill(-7));
      const gdy = gpu.tensor(dy), gdx = gpu.tensor(nans(nx));
      k.pool2d_forward(kind, s, gx, gy, ga);
      k.pool2d_backward(kind, s, gdy, ga, gdx);
      const ps = p.put(Int32Array.from(v)), py = p.put(new Float32Array(ny)), pa = p.put(new Int32Array(ny));
      const pdx = p.put(new Float32Array(nx));
      p.m._probe_pool_forward(kind, ps, p.put(x), py, pa);
      p.m._probe_pool_backward(kind, ps, p.put(dy), pa, pdx);
      const name = `${kind === POOL.max ? 'max' : 'avg'}_pool ${v.join(',')}`;
      out.push(compare(`${name} forward`, await gpu.read(gy), p.get(py, ny), TOL.elementwise));
      if (kind === POOL.max) out.push(exact(`${name} argmax`, await gpu.read(ga, Int32Array), p.get(pa, ny, Int32Array)));
      out.push(compare(`${name} backward`, await gpu.read(gdx), p.get(pdx, nx), TOL.elementwise));
      for (const t of [gx, gy, ga, gdy, gdx]) t.destroy();
    }
  }
  return out;
}

export async function bnCases(gpu, k, p) {
  const out = [];
  for (const [b, c, sp] of [[1, 1, 1], [7, 33, 1], [257, 7, 1], [2, 3, 49], [1, 5, 33], [4, 2, 257]]) {
    const n = b * c * sp;
    for (const training of [1, 0]) {
      const x = uniform(n, -2, 3), dy = uniform(n);
      const gamma = uniform(c, 0.5, 1.5), beta = uniform(c), rm = uniform(c), rv = uniform(c, 0.5, 2);
      const params = new Float32Array([...gamma, ...beta]), running = new Float32Array([...rm, ...rv]);
      const momentum = 0.1, eps = 1e-5, acc = b === 7;
      const grads0 = acc ? uniform(2 * c) : nans(2 * c);
      const gx = gpu.tensor(x), gparams = gpu.tensor(params), grunning = gpu.tensor(running);
      const gstats = gpu.zeros(2 * c), gy = gpu.tensor(nans(n)), gdy = gpu.tensor(dy);
      const ggrads = gpu.tensor(grads0), gdx = gpu.tensor(nans(n));
      k.batchnorm_forward(b, c, sp, momentum, eps, training, gx, gparams, grunning, gstats, gy);
      if (training) k.batchnorm_backward(b, c, sp, gx, gdy, gparams, gstats, ggrads, gdx, acc);
      const io = p.put(new Float32Array([...params, ...running])), py = p.put(new Float32Array(n));
      const pdx = p.put(new Float32Array(n)), pdg = p.put(new Float32Array(c)), pdb = p.put(new Float32Array(c));
      if (p.m._probe_batchnorm(b, c, sp, momentum, eps, training, p.put(x), io, py, p.put(dy), pdx, pdg, pdb) !== 0) {
        throw new Error('probe_batchnorm failed');
      }
      const name = `batchnorm b${b} c${c} sp${sp} ${training ? 'train' : 'infer'}`;
      out.push(compare(`${name} y`, await gpu.read(gy), p.get(py, n), TOL.bn));
      out.push(compare(`${name} running stats`, await gpu.read(grunning), p.get(io + 8 * c, 2 * c), TOL.bn));
      if (training) {
        const dg = p.get(pdg, c), db = p.get(pdb, c);
        const want = Float32Array.from([...dg, ...db], (v, i) => (acc ? v + grads0[i] : v));
        out.push(compare(`${name} dgamma, dbeta${acc ? ' accumulate' : ''}`, await gpu.read(ggrads), want, TOL.bn));
        out.push(compare(`${name} dx`, await gpu.read(gdx), p.get(pdx, n), TOL.bn));
      }
      for (const t of [gx, gparams, grunning, gstats, gy, gdy, ggrads, gdx]) t.destroy();
    }
  }
  return out;
}

export async function ceCases(gpu, k, p) {
  const out = [];
  for (const [rows, cols] of [[1, 1], [1, 10], [7, 33], [257, 7], [33, 257]]) {
    const z = uniform(rows * cols, -5, 5);
    const labels = Int32Array.from({ length: rows }, (_, i) => (i * 7) % cols);
    if (rows > 2) z[labels[1] + cols] = 50;  // a sure hit, and exp() far from 1
    const gz = gpu.tensor(z), gl = gpu.tensor(labels), gg = gpu.tensor(nans(rows * cols)), go = gpu.zeros(2);
    k.softmax_cross_entropy(gz, gl, rows, cols, gg, go);
    const pg = p.put(new Float32Array(rows * cols)), pc = p.put(new Int32Array(1));
    const loss = p.m._probe_softmax_ce(rows, cols, p.put(z), p.put(labels), pg, pc);
    const got = await gpu.read(go);
    const name = `softmax_ce ${rows}x${cols}`;
    out.push(compare(`${name} loss`, [got[0]], [loss], TOL.ce * 10));
    out.push(exact(`${name} hits`, [got[1]], [p.get(pc, 1, Int32Array)[0]]));
    out.push(compare(`${name} grad`, await gpu.read(gg), p.get(pg, rows * cols), TOL.ce));
    for (const t of [gz, gl, gg, go]) t.destroy();
  }
  return out;
}
