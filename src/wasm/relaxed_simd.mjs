// Rewrites the relaxed-SIMD FMA of a linked module from the proposal's early
// encoding to the standard one, in place:
//   node relaxed_simd.mjs MODULE.wasm [WASM_DIS]
// Clang 14 (Debian 12's em++ 3.1.6) emits __builtin_wasm_fma_f32x4 as
// f32x4.fma, 0xfd 0xaf 0x01; engines that ship relaxed SIMD (Chrome 114+,
// node 20 with --experimental-wasm-relaxed-simd) only accept
// f32x4.relaxed_madd, 0xfd 0x85 0x02, which computes a * b + c from the same
// three operands. Both are three bytes, so no size or offset changes.
//
// A byte search alone could also hit constants or data. binaryen's wasm-dis
// (v108 still knows the early opcode) counts the real instructions: the
// rewrite goes ahead only when it sees exactly as many f32x4.relaxed_fma as
// there are byte matches, so every match is an instruction. Any other relaxed
// instruction is refused, since its standard encoding is not known here.
import { execFileSync } from 'node:child_process';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';

const [file, wasmDis = 'wasm-dis'] = process.argv.slice(2);
if (!file) {
  console.error('usage: relaxed_simd.mjs MODULE.wasm [WASM_DIS]');
  process.exit(2);
}
const OLD = [0xfd, 0xaf, 0x01];
const NEW = [0xfd, 0x85, 0x02];

const bytes = readFileSync(file);
const at = [];
for (let i = 0; i + 2 < bytes.length; ++i) {
  if (bytes[i] === OLD[0] && bytes[i + 1] === OLD[1] && bytes[i + 2] === OLD[2]) {
    at.push(i);
    i += 2;  // the pattern cannot overlap itself
  }
}
if (at.length === 0) {
  // A newer clang emits relaxed_madd itself; nothing to do.
  console.log(`relaxed_simd: ${file}: no f32x4.fma (0xfd 0xaf 0x01), nothing to rewrite`);
  process.exit(0);
}
const text = execFileSync(wasmDis, ['--all-features', file], { maxBuffer: 1 << 30 }).toString();
const relaxed = text.match(/\b[a-z0-9]+x[0-9]+\.relaxed_[a-z_0-9]+/g) ?? [];
const other = [...new Set(relaxed.filter((op) => op !== 'f32x4.relaxed_fma'))];
if (other.length) {
  console.error(`relaxed_simd: ${file}: unsupported relaxed instructions ${other.join(', ')}`);
  process.exit(1);
}
if (relaxed.length !== at.length) {
  console.error(`relaxed_simd: ${file}: ${at.length} byte matches but ${relaxed.length} ` +
                'f32x4.fma instructions; refusing to guess which are code');
  process.exit(1);
}
for (const i of at) bytes.set(NEW, i);
writeFileSync(`${file}.tmp`, bytes);
renameSync(`${file}.tmp`, file);
console.log(`relaxed_simd: ${file}: ${at.length} f32x4.fma -> f32x4.relaxed_madd`);
