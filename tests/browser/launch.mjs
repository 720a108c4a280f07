// How the browser tests start Debian's Chromium (headless, no sandbox, no GPU).
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const LAUNCH = {
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
};
// WebGPU on the CPU (SwiftShader's Vulkan), for the WebGPU backend's tests:
// navigator.gpu gives an adapter on a page served from http://127.0.0.1.
export const LAUNCH_WEBGPU = {
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader',
    '--disable-background-networking', '--disable-component-update'],
};

// A missing prerequisite (Chromium, the built dashboard or wasm core, a dnnlab
// binary) skips a test on a developer's machine, but ctest counts a skipped
// node test as passed: under CI it is a failing test instead.
export function prerequisite(test, reason) {
  if (reason && process.env.CI) {
    test(`prerequisites (CI=${process.env.CI})`, () => {
      throw new Error(`${reason}: under CI a browser test may not skip`);
    });
  }
  return reason || false;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls `fn` every `pollMs` until it returns something truthy, which it
// returns; throws naming `what` after `timeoutMs`.
export async function until(what, fn, timeoutMs = 120_000, pollMs = 100) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(pollMs);
  }
}
