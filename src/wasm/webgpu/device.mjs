// device.mjs: the GPU side of the WebGPU kernel table. Tensors are
// GPUBuffers (GpuTensor); kernels are compute pipelines compiled once per
// WGSL source and recorded into one command encoder, submitted at the next
// read (or flush), so a training step is one submit and nothing comes down
// until a caller reads.
//
//   const gpu = await GpuDevice.create();           // null where no adapter
//   const x = gpu.tensor(new Float32Array([1, 2])); // uploaded
//   gpu.run(wgsl, [x, y], { n: 2 }, [1, 1, 1]);      // one dispatch
//   const y0 = await gpu.read(y);                    // Float32Array

// Uniform fields are 32-bit; each kernel declares its struct in this order.
// A value tagged f32 (a number with a fraction, or listed in `floats`) is
// written as a float, others as i32.
export class GpuTensor {
  constructor(gpu, buffer, length) {
    this.gpu = gpu;
    this.buffer = buffer;
    this.length = length;  // elements (4 bytes each: f32 or i32)
  }
  destroy() {
    this.buffer?.destroy();
    this.buffer = null;
  }
}

const STORAGE = 0x80 | 0x08 | 0x04;  // STORAGE | COPY_DST | COPY_SRC
// Each dispatch's uniforms take one 256-byte slot (the largest
// minUniformBufferOffsetAlignment WebGPU allows) of one buffer, written with
// one writeBuffer when the recorded work is submitted: no buffer per dispatch.
const UNIFORM_SLOT = 256, UNIFORM_SLOTS = 256;

// What a caller falls back to wasm on: the device was lost (driver reset,
// tab in the background on some systems, destroy()) or reported an error no
// scope caught (a shader or validation failure). Thrown by read() (so by
// every call that brings results down) and by run() once known.
export class GpuFailure extends Error {
  constructor(kind, message) {
    super(`WebGPU ${kind}: ${message}`);
    this.name = 'GpuFailure';
    this.kind = kind;  // 'lost' | 'error'
  }
}

export class GpuDevice {
  // Resolves to null where navigator.gpu or an adapter is missing.
  static async create({ gpu = globalThis.navigator?.gpu, powerPreference = 'high-performance' } = {}) {
    if (!gpu) return null;
    const adapter = await gpu.requestAdapter({ powerPreference });
    if (!adapter) return null;
    // The adapter's largest buffers (the default binding limit, 128 MiB, is
    // less than a 60,000-image training set as f32); 6 storage buffers a
    // kernel at most, under the default 8.
    const { maxStorageBufferBindingSize, maxBufferSize } = adapter.limits;
    const device = await adapter.requestDevice({ requiredLimits: { maxStorageBufferBindingSize, maxBufferSize } });
    return new GpuDevice(device, adapter.info ?? {});
  }

  constructor(device, info = {}) {
    this.device = device;
    this.info = { vendor: info.vendor ?? '', architecture: info.architecture ?? '', description: info.description ?? '' };
    this.pipelines = new Map();
    this.encoder = null;
    this.uniforms = device.createBuffer({ size: UNIFORM_SLOT * UNIFORM_SLOTS, usage: 0x40 | 0x08 });  // UNIFORM | COPY_DST
    this.staged = new ArrayBuffer(UNIFORM_SLOT * UNIFORM_SLOTS);
    this.slots = 0;  // slots used by the recorded dispatches
    this.dummy = this.zeros(4);
    // What crosses the bus, for bench/RESULTS.md's bytes per step.
    this.stats = { dispatches: 0, bytesUp: 0, bytesDown: 0, uniformBytes: 0 };
    this.failure = null;  // the first GpuFailure, kept: a failed device stays failed
    device.lost.then((info) => { this.failure ??= new GpuFailure('lost', info.message || info.reason || 'device lost'); });
    device.addEventListener?.('uncapturederror', (e) => { this.failure ??= new GpuFailure('error', e.error?.message ?? 'uncaptured error'); });
  }
  check() {
    if (this.failure) throw this.failure;
  }

  // A tensor of `n` zeros (f32 or i32: the bytes are the same).
  zeros(n) {
    const buffer = this.device.createBuffer({ size: Math.max(16, 4 * n), usage: STORAGE });
    return new GpuTensor(this, buffer, n);
  }
  // A tensor holding a copy of `data` (Float32Array or Int32Array).
  tensor(data) {
    const t = this.zeros(data.length);
    this.write(t, data);
    return t;
  }
  // Replaces the tensor's contents (in queue order: before what is recorded
  // after this call is submitted, so flush first if a recorded kernel must
  // see the old contents).
  write(t, data, offsetElements = 0) {
    this.flush();
    this.device.queue.writeBuffer(t.buffer, 4 * offsetElements, data.buffer, data.byteOffset, data.byteLength);
    this.stats.bytesUp += data.byteLength;
  }
  copy(src, dst, n = src.length, srcOffset = 0, dstOffset = 0) {
    this.enc().copyBufferToBuffer(src.buffer, 4 * srcOffset, dst.buffer, 4 * dstOffset, 4 * n);
  }

  enc() {
    this.encoder ??= this.device.createCommandEncoder();
    return this.encoder;
  }
  // Submits the recorded work. The queue runs the uniforms' write after all
  // earlier submissions and before this one, so the slots can be reused at once.
  flush() {
    if (!this.encoder) return;
    if (this.slots) {
      this.device.queue.writeBuffer(this.uniforms, 0, this.staged, 0, this.slots * UNIFORM_SLOT);
      this.stats.uniformBytes += this.slots * UNIFORM_SLOT;
    }
    this.device.queue.submit([this.encoder.finish()]);
    this.encoder = null;
    this.slots = 0;
  }

  // Submits the recorded work and resolves when the GPU has finished it:
  // a chunk's end (model.mjs). Rejects with the GpuFailure where the device
  // was lost meanwhile (its lost promise settles the wait: a lost device's
  // queue may never report the work done).
  async done() {
    this.flush();
    await Promise.race([this.device.queue.onSubmittedWorkDone(), this.device.lost]);
    this.check();
  }

  pipeline(code) {
    let p = this.pipelines.get(code);
    if (!p) {
      const module = this.device.createShaderModule({ code });
      p = this.device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
      this.pipelines.set(code, p);
    }
    return p;
  }

  // One dispatch of `code` (entry point main; @group(0) @binding(0) the
  // uniforms, bindings 1.. the tensors in order). uniforms: [[value, 'f32'|'i32'], ...].
  run(code, tensors, uniforms, groups) {
    this.check();
    if (this.slots === UNIFORM_SLOTS) this.flush();
    const offset = this.slots++ * UNIFORM_SLOT, size = Math.max(16, Math.ceil(uniforms.length / 4) * 16);
    const f = new Float32Array(this.staged, offset, size / 4), i = new Int32Array(this.staged, offset, size / 4);
    uniforms.forEach(([v, type], k) => {
      if (type === 'f32') f[k] = v;
      else i[k] = v;
    });
    const pipeline = this.pipeline(code);
    const entries = [{ binding: 0, resource: { buffer: this.uniforms, offset, size } }];
    tensors.forEach((t, k) => entries.push({ binding: k + 1, resource: { buffer: (t ?? this.dummy).buffer } }));
    const bind = this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
    const pass = this.enc().beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(...groups);
    pass.end();
    this.stats.dispatches++;
  }

  // The tensor's contents (the first n elements) as a new typed array.
  async read(t, Type = Float32Array, n = t.length) {
    const staging = this.device.createBuffer({ size: Math.max(16, 4 * n), usage: 0x01 | 0x08 });  // MAP_READ | COPY_DST
    this.enc().copyBufferToBuffer(t.buffer, 0, staging, 0, 4 * n);
    this.flush();
    try {
      await staging.mapAsync(1);
    } catch (e) {
      // A lost device rejects the mapping; its lost promise may settle just after.
      await Promise.race([this.device.lost, new Promise((ok) => setTimeout(ok, 100))]);
      throw this.failure ?? new GpuFailure('lost', e.message);
    }
    // An uncaptured error is reported asynchronously: give it the turn.
    await new Promise((ok) => setTimeout(ok, 0));
    this.check();
    const out = new Type(staging.getMappedRange().slice(0, 4 * n));
    staging.unmap();
    staging.destroy();
    this.stats.bytesDown += 4 * n;
    return out;
  }

  // Resolves when the device reports a WGSL or validation error since the
  // last check (the message), else null: the test's and a caller's guard.
  async errors(fn) {
    this.device.pushErrorScope('validation');
    this.device.pushErrorScope('out-of-memory');
    fn();
    this.flush();
    const oom = await this.device.popErrorScope();
    const val = await this.device.popErrorScope();
    return (val ?? oom)?.message ?? null;
  }
}

// Workgroups for `n` threads of `size` each, spread over x and y (65535 per dimension).
export function groups1d(n, size = 256) {
  const g = Math.max(1, Math.ceil(n / size));
  if (g <= 65535) return [g, 1, 1];
  return [65535, Math.ceil(g / 65535), 1];
}

// WGSL that turns a 2-D dispatch of 256-thread groups into a flat index.
export const FLAT_INDEX = 'let i = gid.x + gid.y * 65535u * 256u;';
