// Compares the native and wasm runs of steps_main: the same spec and seed
// must give the same curve within a tolerance (float rounding differs in
// vectorized exp/tanh and summation order between targets).
import { readFileSync } from 'node:fs';

const [native, wasm] = process.argv.slice(2).map((f) => JSON.parse(readFileSync(f, 'utf8')));
const rel = (a, b) => Math.abs(a - b) / Math.max(1e-12, Math.abs(a));
const TOL = 1e-3;
let failed = 0;
const check = (what, a, b) => {
  const r = rel(a, b);
  const ok = r <= TOL && Number.isFinite(b);
  if (!ok) failed++;
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}: native ${a} wasm ${b} (rel ${r.toExponential(2)})`);
};
console.log(`native kernels: ${native.kernels}, wasm kernels: ${wasm.kernels}`);
if (native.losses.length !== wasm.losses.length) failed++;
native.losses.forEach((l, i) => check(`epoch ${i + 1} loss`, l, wasm.losses[i]));
check('val_acc', native.val_acc, wasm.val_acc);
check('weight checksum', native.checksum, wasm.checksum);
if (!wasm.kernels.includes('wasm')) {
  console.log('FAIL: the wasm build did not use the wasm SIMD kernels');
  failed++;
}
process.exit(failed ? 1 : 0);
