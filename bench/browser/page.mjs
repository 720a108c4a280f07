// The benchmark page's API: runCase() starts a fresh worker (worker.js),
// runs one measurement in it and ends it. The driver (run.mjs) calls
// window.runCase through playwright and exposes window.benchCpuSeconds (the
// browser's CPU time, from /proc); index.html's button calls runCase by hand.
export function runCase(job) {
  job = { seconds: 3, warmup: 0.5, ...job, cpu: typeof window.benchCpuSeconds === 'function' };
  return new Promise((resolve, reject) => {
    const w = new Worker('/worker.js');
    // A hung worker must fail the run, not stall it: an MLP step takes ~1 s at
    // worst; a CNN step of TF.js's cpu backend takes ~10 CPU-seconds (job.timeout).
    const timer = setTimeout(() => done(reject, new Error(`${job.impl} ${job.config}: timed out`)),
      (job.timeout ?? job.seconds + job.warmup + 60) * 1000);
    const done = (f, v) => { clearTimeout(timer); w.terminate(); f(v); };
    w.onmessage = ({ data }) => {
      if (data.cpuRequest) {
        window.benchCpuSeconds().then((v) => w.postMessage({ cpuReply: v }), (e) => done(reject, e));
      }
      else if (data.error) done(reject, new Error(data.error));
      else done(resolve, data);
    };
    w.onerror = (e) => done(reject, new Error(e.message || 'worker failed to load'));
    w.postMessage(job);
  });
}
window.runCase = runCase;
window.benchReady = true;
