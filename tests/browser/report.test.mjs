// `dnnlab report` in Debian's Chromium: the HTML it writes for a real sweep
// opens from file:// without a console message (no script, no blocked
// fetch: its Content-Security-Policy is default-src 'none', so anything it
// tried to load would be reported), and its SVG figures hold the store's
// trials at the store's values (`dnnlab results --json`). Chromium runs
// headless with --dump-dom (the DOM it built) and its console on stderr; no
// node packages are needed.
//   node tests/browser/report.test.mjs --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, LAUNCH, prerequisite } from './launch.mjs';

const arg = (n, d) => { const i = process.argv.indexOf(n); return i > 0 ? process.argv[i + 1] : d; };
const DNNLAB_ARG = arg('--dnnlab', process.env.DNNLAB_BIN || null);
const DNNLAB = DNNLAB_ARG && resolve(DNNLAB_ARG);

const here = dirname(fileURLToPath(import.meta.url));
const SWEEP = readFileSync(join(here, '../report/fixtures/small-depth-sweep.yaml'), 'utf8');

const skip = prerequisite(test, !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}`
  : !DNNLAB || !existsSync(DNNLAB) ? 'no dnnlab binary (--dnnlab)' : false);

function dnnlab(args, cwd) {
  const r = spawnSync(DNNLAB, args, { cwd, encoding: 'utf8' });
  assert.equal(r.status, 0, `dnnlab ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

test('the report opens without console messages and plots the store\'s trials', { skip }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'dnnlab-report-'));
  try {
    writeFileSync(join(dir, 'sweep.yaml'), SWEEP);
    const store = `sqlite:${join(dir, 't.db')}`;
    dnnlab(['run', '-q', '-w', '1', '--no-server', '--store', store, 'sweep.yaml'], dir);
    dnnlab(['report', 'rep', '--store', store, '--out', dir], dir);
    const trials = JSON.parse(dnnlab(['results', 'rep', '--store', store, '--json', '--top', '0'], dir));
    assert.equal(trials.length, 12);

    const r = spawnSync(CHROMIUM, [...LAUNCH.args, '--headless', '--enable-logging=stderr', '--v=0',
      '--dump-dom', `file://${join(dir, 'rep-report.html')}`], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(r.status, 0, r.stderr);
    const consoleLines = r.stderr.split('\n').filter((l) => /CONSOLE/.test(l));
    assert.deepEqual(consoleLines, [], 'console messages (errors, blocked loads)');
    const dom = r.stdout;
    assert.ok(!/<script/i.test(dom), 'no scripts');

    // The accuracy figures' points, by trial id, as the browser parsed them.
    const points = new Map();
    for (const svg of dom.match(/<svg[^>]*id="accuracy-[\s\S]*?<\/svg>/g) ?? []) {
      for (const m of svg.matchAll(/<circle class="pt (\w+)" data-trial="(\d+)" data-x="([^"]+)" data-y="([^"]+)"/g))
        points.set(Number(m[2]), { status: m[1], x: Number(m[3]), y: Number(m[4]) });
    }
    assert.equal(points.size, trials.length);
    for (const t of trials) {
      const p = points.get(t.id);
      assert.ok(p, `trial ${t.id} is drawn`);
      assert.equal(p.status, t.status);
      assert.equal(p.x, t.params.depth);
      assert.ok(Math.abs(p.y - t.val_acc) < 1e-8, `trial ${t.id}: drawn at ${p.y}, stored ${t.val_acc}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
