// fallback.mjs: GpuOrWasmModel trains on WebGPU and, when the device is lost
// or a kernel fails (GpuFailure), carries on in the wasm core without
// losing the run: after every GPU epoch it keeps a checkpoint (parameters
// and training state: one read of about three times the parameters), and on
// a failure the wasm model takes the last checkpoint and redoes the epoch
// that failed. Same batch order, so the run stays what the wasm core (and a
// native re-run) would have trained, within the GPU's rounding. The wasm
// model holds its own copy of the training set meanwhile.
//
//   const m = core.createGpuModel(spec, { fallback: true });
//   m.loadData(x, y);
//   const e = await m.trainEpoch();   // { epoch, loss, accuracy, backend: 'webgpu' | 'wasm' }
//   await m.trainEpoch({ between });  // in chunks on WebGPU (WebGpuModel.trainEpoch)
//   m.failure;                        // the GpuFailure that moved it, or null
import { GpuFailure } from './device.mjs';

export class GpuOrWasmModel {
  // gpu: a WebGpuModel; wasm: the wasm core model it shadows (the same spec,
  // untrained). Both are owned: free() frees them.
  constructor(gpu, wasm) {
    this.gpu = gpu;
    this.wasm = wasm;
    this.backend = 'webgpu';
    this.failure = null;
    this.checkpoint = null;
    this.epoch = 0;  // epochs done
  }

  loadData(x, y) {
    this.wasm.loadData(x, y);
    if (this.backend === 'webgpu') this.gpu.loadData(x, y);
  }

  // options: WebGpuModel.trainEpoch's (a `between` hook, chunks); a device
  // lost between two chunks fails the epoch, which the wasm core then
  // redoes whole. The wasm core trains its epoch in one call.
  async trainEpoch(options = {}) {
    if (this.backend === 'webgpu') {
      try {
        const r = await this.gpu.trainEpoch(options);
        this.checkpoint = { params: await this.gpu.getParams(), state: await this.gpu.getState() };
        this.epoch = r.epoch;
        return { ...r, backend: 'webgpu' };
      } catch (e) {
        if (!(e instanceof GpuFailure)) throw e;
        this.fallBack(e);
      }
    }
    const r = this.wasm.trainEpoch();
    return { epoch: ++this.epoch, loss: r.loss, accuracy: r.accuracy, backend: 'wasm' };
  }

  async evaluate(x, y) {
    if (this.backend === 'webgpu') {
      try {
        return await this.gpu.evaluate(x, y);
      } catch (e) {
        if (!(e instanceof GpuFailure)) throw e;
        this.fallBack(e);
      }
    }
    return this.wasm.evaluate(x, y);
  }

  async getParams() {
    return this.backend === 'webgpu' ? this.gpu.getParams() : this.wasm.getParams();
  }

  // The wasm model takes the last finished GPU epoch (none: it still holds
  // the initial parameters and a fresh optimizer, as the GPU run began).
  fallBack(failure) {
    this.failure = failure;
    this.backend = 'wasm';
    if (this.checkpoint) {
      this.wasm.setParams(this.checkpoint.params);
      this.wasm.setState(this.checkpoint.state);
    }
    try {
      this.gpu.free();
    } catch {
      // a lost device's buffers are gone already
    }
  }

  free() {
    if (this.backend === 'webgpu') this.gpu.free();
    this.wasm.free();
  }
}
