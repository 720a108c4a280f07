// Bundles web/src (plain ES modules + CSS) into one app.js, app.css and index.html,
// the join page (src/join) into join.html, join.js and join_worker.js, and the
// distributed run's browser client (src/hybrid) into hybrid.html, hybrid.js and hybrid_worker.js,
// and its run page into hybrid_run.html, hybrid_run.js and hybrid_run.css.
// Usage: node build.mjs [--outdir DIR] [--dev]
import * as esbuild from 'esbuild';
import { copyFile, mkdir } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const flag = (name) => args.includes(name);
const value = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const outdir = resolve(value('--outdir', join(here, 'dist')));
const dev = flag('--dev');

await mkdir(outdir, { recursive: true });
const common = {
  bundle: true,
  target: ['chrome100', 'firefox100', 'safari15'],
  minify: !dev,
  sourcemap: dev ? 'inline' : false,
  outdir,
  logLevel: 'warning',
  metafile: true,
};
const result = await esbuild.build({
  ...common,
  entryPoints: { app: join(here, 'src/main.js') },
  format: 'iife',
});
await copyFile(join(here, 'src/index.html'), join(outdir, 'index.html'));
// The join page: ES modules (a module Web Worker imports the wasm core's glue
// dynamically); the core itself goes to dist/core/ (web/CMakeLists.txt).
const joinResult = await esbuild.build({
  ...common,
  entryPoints: {
    join: join(here, 'src/join/join.js'), join_worker: join(here, 'src/join/join_worker.js'),
    // The browser client of a distributed run (served by `dnnlab train --listen`).
    hybrid: join(here, 'src/hybrid/hybrid.js'), hybrid_worker: join(here, 'src/hybrid/hybrid_worker.js'),
    // Its live run page (the status, the clients, the curve).
    hybrid_run: join(here, 'src/hybrid/run.js'),
  },
  format: 'esm',
});
await copyFile(join(here, 'src/join/join.html'), join(outdir, 'join.html'));
await copyFile(join(here, 'src/hybrid/hybrid.html'), join(outdir, 'hybrid.html'));
await copyFile(join(here, 'src/hybrid/run.html'), join(outdir, 'hybrid_run.html'));
const sizes = [...Object.entries(result.metafile.outputs), ...Object.entries(joinResult.metafile.outputs)]
  .map(([f, o]) => `${f.split('/').pop()} ${(o.bytes / 1024).toFixed(1)} KiB`);
console.log(`dashboard -> ${outdir}: ${sizes.join(', ')}`);
