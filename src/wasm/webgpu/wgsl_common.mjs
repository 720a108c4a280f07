// wgsl_common.mjs: WGSL pieces several kernels share: the activations (in
// nn::Act's order) and their derivatives from the output, as
// src/nn/kernels/reference.cpp defines them.
export const ACT = Object.freeze({ identity: 0, relu: 1, leaky_relu: 2, elu: 3, tanh: 4, sigmoid: 5 });
export const POOL = Object.freeze({ max: 0, avg: 1 });

// tanh through exp(-2|x|): WGSL's tanh may be sinh/cosh, which overflows to
// NaN for |x| > ~44 on some implementations.
export const ACT_WGSL = /* wgsl */ `
fn act_fwd(a: i32, alpha: f32, x: f32) -> f32 {
  switch a {
    case 1: { return select(0.0, x, x > 0.0); }
    case 2: { return select(alpha * x, x, x > 0.0); }
    case 3: { return select(alpha * (exp(x) - 1.0), x, x > 0.0); }
    case 4: { let e = exp(-2.0 * abs(x)); return sign(x) * (1.0 - e) / (1.0 + e); }
    case 5: { return 1.0 / (1.0 + exp(-x)); }
    default: { return x; }
  }
}
fn act_grad(a: i32, alpha: f32, y: f32) -> f32 {
  switch a {
    case 1: { return select(0.0, 1.0, y > 0.0); }
    case 2: { return select(alpha, 1.0, y > 0.0); }
    case 3: { return select(y + alpha, 1.0, y > 0.0); }
    case 4: { return 1.0 - y * y; }
    case 5: { return y * (1.0 - y); }
    default: { return 1.0; }
  }
}`;

// Header of a one-thread-per-element kernel over n elements (groups1d).
export const ELEMENTWISE_MAIN = /* wgsl */ `
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let i = i32(gid.x + gid.y * 65535u * 256u);
  if (i >= u.n) { return; }`;

// The head every kernel here starts with: the uniform struct U ('name: type,
// ...') at binding 0, then one storage array per entry at bindings 1, 2, ...
// in order: 'x' (read, f32), 'x rw' (read_write), 'x i32', 'x rw i32'.
// device.mjs's run() binds its tensors in the same order.
export function kernelHead(fields, arrays) {
  const lines = arrays.map((entry, k) => {
    const [name, ...flags] = entry.split(' ');
    const access = flags.includes('rw') ? 'read_write' : 'read';
    return `@group(0) @binding(${k + 1}) var<storage, ${access}> ${name}: array<${flags.includes('i32') ? 'i32' : 'f32'}>;`;
  });
  return `struct U { ${fields} };\n@group(0) @binding(0) var<uniform> u: U;\n${lines.join('\n')}`;
}
