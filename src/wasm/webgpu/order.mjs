// order.mjs: the native trainer's batch order (src/nn/train.cpp's
// epoch_order with src/nn/rng.hpp's splitmix64 and xoshiro256**), so that a
// WebGPU run sees the same batches as the wasm core. BigInt arithmetic,
// 64-bit wrapped.
const M = (1n << 64n) - 1n;

function splitmix64(state) {  // state: [BigInt], advanced in place
  state[0] = (state[0] + 0x9E3779B97F4A7C15n) & M;
  let z = state[0];
  z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & M;
  z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & M;
  return z ^ (z >> 31n);
}

function deriveSeed(seed, tag) {
  const s = [(seed ^ ((tag * 0xD1342543DE82EF95n + 0x2545F4914F6CDD1Dn) & M)) & M];
  splitmix64(s);
  return splitmix64(s);
}

const rotl = (x, k) => ((x << BigInt(k)) | (x >> BigInt(64 - k))) & M;

class Xoshiro {
  constructor(seed) {
    const s = [seed & M];
    this.s = [0, 1, 2, 3].map(() => splitmix64(s));
  }
  next() {
    const s = this.s;
    const result = (rotl((s[1] * 5n) & M, 7) * 9n) & M;
    const t = (s[1] << 17n) & M;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
  below(n) {  // Lemire's multiply-shift, as Rng::below
    return Number((this.next() * BigInt(n)) >> 64n);
  }
}

// The permutation of [0, n) for 0-based `epoch` of a run seeded `seed`
// (a number or BigInt), as nn::epoch_order.
export function epochOrder(seed, epoch, n) {
  const order = Int32Array.from({ length: n }, (_, i) => i);
  const rng = new Xoshiro(deriveSeed(BigInt(seed), 0x5EED0000n + BigInt(epoch)));
  for (let i = n - 1; i > 0; i--) {
    const j = rng.below(i + 1);
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}
