// A static file server for the benchmark page, loopback only (node:http):
//   /          bench/browser (index.html, page.mjs, worker.js)
//   /js/       bench/js (cases.mjs: the workloads, shared with the node runner)
//   /core/     the wasm core's build output (dnnlab.mjs, dnnlab_core.{mjs,wasm}, dnnlab_core_relaxed.wasm)
//   /npm/      bench/browser/node_modules (TensorFlow.js, ConvNetJS from npm ci)
// No cross-origin-isolation headers, so nothing can use wasm threads.
//
//   node bench/browser/serve.mjs [CORE_DIR]      # prints the URL; open it to run by hand
import { createServer } from 'node:http';
import { createReadStream, statSync } from 'node:fs';
import { dirname, extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.wasm': 'application/wasm', '.json': 'application/json', '.map': 'application/json' };

// Resolves to { url, close() } once listening on 127.0.0.1 (a free port unless given).
export function serve({ coreDir = join(root, 'build/wasm-bench/src/wasm'), port = 0, log } = {}) {
  const mounts = [['/npm/', join(here, 'node_modules')], ['/core/', resolve(coreDir)],
    ['/js/', resolve(here, '../js')], ['/', here]];
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    const [prefix, dir] = mounts.find(([p]) => path.startsWith(p));
    let file = resolve(dir, '.' + path.slice(prefix.length - 1));
    if (file !== dir && !file.startsWith(dir + sep)) return send(res, 403);
    try {
      if (statSync(file).isDirectory()) file = join(file, 'index.html');
      const size = statSync(file).size;
      res.writeHead(200, { 'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream',
        'Content-Length': size, 'Cache-Control': 'no-store' });
      createReadStream(file).pipe(res);
      log?.(`200 ${path}`);
    } catch {
      send(res, 404);
      log?.(`404 ${path}`);
    }
  });
  return new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(port, '127.0.0.1', () => ok({
      url: `http://127.0.0.1:${server.address().port}/`,
      close: () => new Promise((done) => server.close(done)),
    }));
  });
}

function send(res, status) {
  res.writeHead(status, { 'Content-Type': 'text/plain' });
  res.end(`${status}\n`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { url } = await serve({ coreDir: process.argv[2], port: Number(process.env.PORT ?? 8077) });
  console.log(`serving ${url}`);
}
