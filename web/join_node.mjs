#!/usr/bin/env node
// A headless join worker: the join page's worker (src/join/join_worker.js)
// run under node through src/join/node_host.js, so a machine with no browser
// (a server, with or without a GPU) takes tickets from `dnnlab serve` with
// one command. It prints one line per state change and exits with a status
// (--help); web/README.md "Headless join worker" has the details.
import { X509Certificate } from 'node:crypto';
import { accessSync, constants, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { BACKENDS, gatewayUrl } from './src/join/protocol.js';
import { nodeGpu, startJoinWorker } from './src/join/node_host.js';

const HELP = `Usage: node web/join_node.mjs URL [options]

Joins a dnnlab server as a worker, as the join page does in a browser: takes
trials over /join (worker protocol v1) and trains them in the wasm core, or on
a GPU through the npm package webgpu (Dawn) where it is installed.

  URL                the join URL \`dnnlab serve\` prints
                     (http://HOST:PORT/join?token=T), or the server's
                     http(s)://HOST:PORT with --token
  --token T          the join token (else the URL's token=, else
                     $DNNLAB_JOIN_TOKEN: a command line shows in ps)
  --backend B        auto (default, or the URL's backend=): WebGPU where an
                     adapter is found and a probe finds it faster, else wasm;
                     webgpu: fail at start without an adapter; wasm: never a GPU
  --trials N         leave after N trials ended (default: until Ctrl-C)
  --once             --trials 1
  --cache-dir DIR    the core, the data shards and this worker's identity
                     (default $XDG_CACHE_HOME/dnnlab/join or ~/.cache/dnnlab/join)
  --tls-ca FILE      https:// only: trust the CA (or the self-signed
                     certificate) in this PEM file instead of the system's
                     (alias --cacert, as \`dnnlab join\` takes it)
  -h, --help         this text

Exit status: 0 --trials reached; 1 could not join (refused connection, wrong
token, no wasm core offered), quarantined, or --backend webgpu without an
adapter; 2 bad flag or argument; 130 interrupted (Ctrl-C, SIGTERM) after
leaving: a held ticket goes back to the server at once.`;

class UsageError extends Error {}

function parseArgs(argv) {
  const o = { url: '', token: '', backend: '', trials: 0, cacheDir: '', tlsCa: '' };
  const takes = new Set(['--token', '--backend', '--trials', '--cache-dir', '--tls-ca', '--cacert']);
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i], v;
    if (a === '-h' || a === '--help') return { help: true };
    const eq = a.indexOf('=');
    if (a.startsWith('--') && eq > 0) [a, v] = [a.slice(0, eq), a.slice(eq + 1)];
    if (takes.has(a) && v === undefined) {
      if (i + 1 >= argv.length) throw new UsageError(`${a} needs a value`);
      v = argv[++i];
    }
    if (a === '--token') o.token = v;
    else if (a === '--backend') {
      if (!BACKENDS.includes(v)) throw new UsageError(`--backend must be auto, webgpu or wasm, not '${v}'`);
      o.backend = v;
    } else if (a === '--trials') {
      if (!/^[1-9][0-9]*$/.test(v)) throw new UsageError(`--trials must be a whole number >= 1, not '${v}'`);
      o.trials = Number(v);
    } else if (a === '--once') {
      if (v !== undefined) throw new UsageError('--once takes no value (--trials N does)');
      o.trials = 1;
    }
    else if (a === '--cache-dir') o.cacheDir = v;
    else if (a === '--tls-ca' || a === '--cacert') o.tlsCa = v;
    else if (a.startsWith('-')) throw new UsageError(`unknown flag ${a} (see --help)`);
    else if (o.url) throw new UsageError(`one URL only, not also '${a}'`);
    else o.url = a;
  }
  if (!o.url) throw new UsageError('no URL: give the join URL `dnnlab serve` printed (see --help)');
  let page;
  try {
    page = new URL(o.url);
  } catch {
    throw new UsageError(`URL: expected http(s)://HOST:PORT/join?token=T, not '${o.url}'`);
  }
  // A ws:// gateway URL names the same server.
  const http = { 'http:': 'http:', 'https:': 'https:', 'ws:': 'http:', 'wss:': 'https:' }[page.protocol];
  if (!http) throw new UsageError(`URL: expected http(s)://HOST:PORT/join?token=T, not '${o.url}'`);
  page.protocol = http;
  o.page = page;
  // Refused rather than ignored, as `dnnlab join` does.
  if (o.tlsCa && http !== 'https:') throw new UsageError(`--tls-ca is for https:// (wss://) URLs; this one is ${o.url}`);
  o.token ||= page.searchParams.get('token') || process.env.DNNLAB_JOIN_TOKEN || '';
  if (!o.token) throw new UsageError('no join token: give --token T, the URL with ?token=T, or DNNLAB_JOIN_TOKEN');
  const fromUrl = page.searchParams.get('backend');
  if (!o.backend && fromUrl && !BACKENDS.includes(fromUrl)) {
    throw new UsageError(`URL: backend= must be auto, webgpu or wasm, not '${fromUrl}'`);
  }
  o.backend ||= fromUrl || 'auto';
  o.cacheDir ||= join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'dnnlab', 'join');
  return o;
}

const say = (line) => console.log(`join: ${line}`);
const fail = (code, line) => {
  console.error(`join: ${line}`);
  process.exit(code);
};

// The identity the server issued this worker (welcome.client), kept as the
// page keeps it in localStorage: its record of agreement follows it.
const readClient = (file) => {
  try {
    return readFileSync(file, 'utf8').trim() || null;
  } catch {
    return null;
  }
};

// The GPU for --backend: { gpu, why } (gpu null, and why, where there is no
// adapter: a GPU does not appear later). Exits when webgpu was asked for and
// none is there: a command can say so, where the page falls back.
async function gpuFor(backend) {
  if (backend === 'wasm') return { gpu: null, why: '' };
  let { gpu, why } = await nodeGpu();
  if (gpu) {
    const adapter = await gpu.requestAdapter().catch((e) => {
      why = `the WebGPU adapter request failed: ${e?.message ?? e}`;
      return null;
    });
    if (!adapter) {
      why ||= 'no WebGPU adapter (Dawn needs a GPU and its Vulkan driver: it takes no software Vulkan such as lavapipe)';
      gpu = null;
    }
  }
  if (backend === 'webgpu' && !gpu) fail(1, `--backend webgpu: ${why}`);
  return { gpu, why };
}

// The lines of a trial's progress: the state `s` against the last one, `p`.
function reportTrial(s, p) {
  if (s.kernels && s.kernels !== p.kernels) say(`wasm core loaded (${s.kernels})`);
  const c = s.current;
  if (c && c.ticket !== p.current?.ticket) {
    say(`ticket ${c.ticket}: trial ${c.trial} (experiment ${c.experiment} #${c.index}, attempt ${c.attempt}), ${c.epochs} epochs`);
  }
  if (s.backend && (s.backend !== p.backend || s.backendReason !== p.backendReason)) {
    say(`backend ${s.backend}${s.backendRequested !== 'auto' ? ` (asked for ${s.backendRequested})` : ''}: ${s.backendReason}`);
  }
  // current.epoch and lastEpoch change together, once per epoch.
  const e = s.lastEpoch;
  if (c && e && c.epoch === e.epoch && (c.ticket !== p.current?.ticket || c.epoch !== p.current?.epoch)) {
    say(`ticket ${c.ticket} epoch ${e.epoch}/${c.epochs}: train_loss ${e.trainLoss.toFixed(4)} val_acc ${e.valAcc.toFixed(4)}, ` +
      `${Math.round(e.samplesPerSecond)} samples/s, backend ${s.backend}`);
  }
  // Counted when the server's 'accepted' arrives, the ticket still current;
  // a failure's message follows as an error line.
  if (s.trialsDone + s.trialsFailed > p.trialsDone + p.trialsFailed) {
    say(`ticket ${c?.ticket} ${s.trialsFailed > p.trialsFailed ? 'failed' : 'done'} (${s.trialsDone} done, ${s.trialsFailed} failed)`);
  }
}

// mkdir -p, one level at a time: node 20's mkdirSync({ recursive: true })
// never returns for a path under /proc.
function makeDirs(dir) {
  try {
    if (statSync(dir).isDirectory()) return;
  } catch (e) {
    if (e.code !== 'ENOENT') throw e;
    if (dirname(dir) !== dir) makeDirs(dirname(dir));
    mkdirSync(dir);
    return;
  }
  throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
}

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    if (e instanceof UsageError) fail(2, `${e.message}`);
    throw e;
  }
  if (o.help) {
    console.log(HELP);
    return;
  }
  try {
    makeDirs(resolve(o.cacheDir));
    accessSync(o.cacheDir, constants.W_OK);
  } catch (e) {
    fail(2, `--cache-dir ${o.cacheDir}: ${e.code === 'ENOTDIR' || e.code === 'EEXIST' ? 'not a directory' : e.message}`);
  }
  let ca = null;
  if (o.tlsCa) {
    try {
      ca = readFileSync(o.tlsCa, 'utf8');
      new X509Certificate(ca); // the first certificate in the file parses
    } catch (e) {
      fail(2, `--tls-ca ${o.tlsCa}: ${e.code === 'ENOENT' ? 'no such file' : e.code?.startsWith('ERR_OSSL') || e.code === 'ERR_INVALID_ARG_VALUE' ? 'not a PEM certificate' : e.message}`);
    }
  }
  const clientFile = join(o.cacheDir, 'client');
  const gateway = gatewayUrl(o.page);
  const { gpu, why } = await gpuFor(o.backend);
  if (o.backend === 'auto') say(`backend auto: ${why ? `${why}; trials train in the wasm core` : 'WebGPU (the npm package webgpu) where a probe finds it faster than the wasm core'}`);

  let prev = null, joined = false, exitCode = null;
  const leave = (code, line) => {
    if (exitCode !== null) return;
    exitCode = code;
    if (line) say(line);
    host.post({ type: 'stop' });
    setTimeout(() => process.exit(code), 3000).unref(); // a close handshake that never ends
  };
  const onState = (s) => {
    const p = prev ?? { trialsDone: 0, trialsFailed: 0 };
    prev = s;
    if (s.client && s.client !== p.client) writeFileSync(clientFile, `${s.client}\n`, { mode: 0o600 });
    // Before a welcome an error ends the command (below), naming it once.
    if (joined && s.error && s.error !== p.error) console.error(`join: error: ${s.error}`);
    if (s.connection === 'closed' && exitCode !== null) process.exit(exitCode);
    if (s.connection === 'connected' && p.connection !== 'connected') {
      joined = true;
      say(`connected to ${gateway} as worker ${s.worker}`);
    }
    if (!joined && ['reconnecting', 'closed', 'quarantined'].includes(s.connection)) {
      const reason = s.error || host.socketError() || `closed with ${s.closeCode} ${s.closeReason}`.trim();
      host.post({ type: 'stop' });
      fail(1, `cannot join ${gateway}: ${reason}`);
    }
    if (joined && s.connection === 'reconnecting' && p.connection === 'connected') {
      say(`connection closed (${s.closeCode}${s.closeReason ? ` ${s.closeReason}` : ''}); reconnecting`);
    }
    if (s.connection === 'quarantined' || (joined && s.connection === 'closed' && exitCode === null)) {
      fail(1, `the server closed the connection for good: ${s.error || s.closeReason}`);
    }
    // Connected, but nothing to train with (join_worker.js's welcome case):
    // it would sit idle for ever.
    if (joined && !s.kernels && s.error !== p.error && /wasm core/.test(s.error)) {
      host.post({ type: 'stop' });
      fail(1, `cannot train: ${s.error}`);
    }
    reportTrial(s, p);
    if (o.trials && !s.current && s.trialsDone + s.trialsFailed >= o.trials) leave(0, `${o.trials} trial(s) ended; leaving`);
  };

  const host = await startJoinWorker({ page: o.page.href, cacheDir: o.cacheDir, gpu, ca, onState });
  const interrupted = (sig) => {
    if (exitCode !== null) process.exit(exitCode); // a second Ctrl-C: at once
    leave(130, `${sig}: leaving${prev?.current ? ` (ticket ${prev.current.ticket} goes back to the server)` : ''}`);
  };
  process.on('SIGINT', () => interrupted('SIGINT'));
  process.on('SIGTERM', () => interrupted('SIGTERM'));
  host.post({
    type: 'start', token: o.token, client: readClient(clientFile), url: gateway,
    agent: `dnnlab join_node.mjs (node ${process.version}; ${process.platform} ${process.arch})`,
    backend: o.backend, trials: o.trials, noGpu: why,
  });
}

main().catch((e) => fail(1, String(e?.stack ?? e)));
