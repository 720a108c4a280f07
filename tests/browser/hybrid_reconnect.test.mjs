// The browser client of a distributed run after a lost socket (issue 26,
// docs/distributed.md "Reconnecting"): the page the run serves, opened in
// headless Chromium through a TCP proxy written here, which the test cuts
// mid-run (both sockets reset). The tab must join again as the same client
// and the run finish; a tab whose identity the server refuses, and one whose
// tries all fail, must stop and say why. The rules themselves
// (web/src/hybrid/reconnect.js) are checked first, without a browser.
//   node tests/browser/hybrid_reconnect.test.mjs --dist DIR --dnnlab BIN
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { LAUNCH, until } from './launch.mjs';
import { DATASET, hybridSkip, hybridSpec, require, startRun } from './hybrid_common.mjs';
import { afterClose, backoffMs, parseTries } from '../../web/src/hybrid/reconnect.js';

const skip = hybridSkip(test, 'hybrid.html');

test('the reconnect rules: tries from ?reconnect=, the pauses, what a close leads to', () => {
  assert.deepEqual(parseTries(''), { tries: 10 });
  assert.deepEqual(parseTries('?reconnect=0'), { tries: 0 });
  assert.deepEqual(parseTries('?x=1&reconnect=1000'), { tries: 1000 });
  for (const bad of ['-1', '1001', 'ten', '', '2.5']) {
    assert.match(parseTries(`?reconnect=${bad}`).error, /^reconnect=.* in the page's URL: a whole number of tries, 0 to 1000/, bad);
  }
  // 0.5 s doubling to 10 s, each pause in the upper half of its ceiling.
  const ceilings = [500, 1000, 2000, 4000, 8000, 10_000, 10_000];
  for (const [i, c] of ceilings.entries()) {
    assert.equal(backoffMs(i + 1, 0), c / 2);
    assert.equal(backoffMs(i + 1, 0.999999), c);
  }
  const close = (patch) => ({ code: 1006, reason: '', welcomed: true, done: false, failed: false, timedOut: false, ...patch });
  assert.deepEqual(afterClose(close({}), true), { next: 'retry', why: 'the socket closed without a word from the server (1006)' });
  assert.equal(afterClose(close({ done: true }), true).next, 'finished');
  assert.equal(afterClose(close({ code: 1000, reason: 'the run is over' }), true).next, 'finished');
  assert.equal(afterClose(close({ code: 1000, failed: true }), true).next, 'closed');
  assert.deepEqual(afterClose(close({ code: 1005, timedOut: true, welcomed: false }), true), { next: 'retry', why: 'no welcome within 10 s' });
  const busy = 'hello: identity 3 is connected already (on another connection)';
  assert.deepEqual(afterClose(close({ code: 1013, reason: busy, welcomed: false }), true), { next: 'retry', why: busy });
  const unknown = "hello: identity 3 is not known here or 'secret' is not its secret";
  assert.deepEqual(afterClose(close({ code: 1008, reason: unknown, welcomed: false }), true), { next: 'refused', why: unknown });
  // Closed by the server after a welcome (a quarantine), or a new client
  // refused (a wrong token): the server's word, never retried.
  assert.deepEqual(afterClose(close({ code: 1008, reason: 'quarantined: re-check' }), true), { next: 'closed', why: 'quarantined: re-check' });
  assert.equal(afterClose(close({ code: 1008, reason: 'token', welcomed: false }), false).next, 'closed');
});

// A TCP proxy to `port` on 127.0.0.1. mode 'pass' forwards; cut() resets
// every connection open; then 'refuse' resets each new one at once, and
// 'forge' forwards but changes one digit of the secret in the first hello.
async function proxy(port) {
  const p = { mode: 'pass', open: new Set(), connections: 0, refused: 0, forged: 0 };
  p.server = net.createServer((c) => {
    p.connections++;
    c.on('error', () => {});
    if (p.mode === 'refuse') {
      p.refused++;
      return c.resetAndDestroy();
    }
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    for (const [a, b] of [[c, s], [s, c]]) {
      p.open.add(a);
      a.on('close', () => { p.open.delete(a); b.destroy(); });
    }
    s.pipe(c);
    if (p.mode === 'forge') forgeHello(c, s, p);
    else c.pipe(s);
  });
  await new Promise((ok) => p.server.listen(0, '127.0.0.1', ok));
  p.port = p.server.address().port;
  p.cut = () => { for (const s of p.open) s.resetAndDestroy(); };
  return p;
}

// The page → server bytes of one connection: the HTTP upgrade request
// (passed at once: the page sends no frame before the server's answer), then
// WebSocket frames, masked. In the first (the hello), one hex digit of
// "secret" is changed (XOR under the mask); the rest passes as it is.
function forgeHello(c, s, p) {
  let buf = Buffer.alloc(0);
  let phase = 'head';
  c.on('data', (d) => {
    if (phase === 'pass') return s.write(d);
    buf = Buffer.concat([buf, d]);
    if (phase === 'head') {
      const head = buf.indexOf('\r\n\r\n');
      if (head < 0) return;
      s.write(buf.subarray(0, head + 4));
      buf = buf.subarray(head + 4);
      phase = 'hello';
    }
    if (buf.length < 2) return;
    let len = buf[1] & 0x7f;
    let at = 2;
    if (len === 126) {
      if (buf.length < 4) return;
      len = buf.readUInt16BE(2);
      at = 4;
    }
    if (buf.length < at + 4 + len) return;
    const mask = buf.subarray(at, at + 4);
    const body = at + 4;
    const text = Buffer.from(buf.subarray(body, body + len).map((b, i) => b ^ mask[i % 4])).toString();
    const i = text.indexOf('"secret":"');
    if (i >= 0) {
      const j = i + '"secret":"'.length;
      buf[body + j] ^= text.charCodeAt(j) ^ (text[j] === '0' ? 0x31 : 0x30);
      p.forged++;
    }
    phase = 'pass';
    s.write(buf);
  });
  c.on('end', () => s.end());
}

const state = (page) => page.evaluate(() => ({ ...window.dnnlabHybrid }));
const link = (page) => page.evaluate(() => {
  const l = document.getElementById('link');
  return { text: l.textContent, ...l.dataset };
});

test('a tab cut mid-run joins again as the same client and the run finishes', { skip, timeout: 180_000 }, async (t) => {
  const t0 = Date.now();
  const { chromium } = require('playwright-core');
  // 24 tickets, all the tab's.
  const run = await startRun(t, hybridSpec('hybrid-reconnect', 1), 1);
  const { dir, server, lines: joined } = run;
  const px = await proxy(Number(new URL(joined.page).port));
  t.after(() => px.server.close());
  const browser = run.browser = await chromium.launch(LAUNCH);
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const url = new URL(joined.page);
  url.port = String(px.port);
  await page.goto(url.href);
  const why = async () => `\nserver:\n${server.log}\ntab: ${JSON.stringify(await state(page))}`;

  await page.waitForFunction(() => window.dnnlabHybrid.tickets >= 4, null, { timeout: 90_000 });
  const before = await state(page);
  assert.equal(before.connection, 'connected');
  assert.deepEqual(await link(page), { text: `connected as client ${before.client}`, state: 'connected',
    client: String(before.client), try: '0', tries: '10' });
  px.cut();
  await page.waitForSelector('#link[data-state="reconnecting"][data-try="1"]', { timeout: 10_000 });
  const waiting = await link(page);
  assert.match(waiting.text, new RegExp(`^the link was lost \\(.+\\); reconnecting as client ${before.client} ` +
    'in \\d+\\.\\d s \\(try 1 of 10\\)$'), JSON.stringify(waiting));
  await page.waitForFunction(() => window.dnnlabHybrid.reconnects === 1 &&
    document.getElementById('link').dataset.state === 'connected', null, { timeout: 20_000 });
  assert.match((await link(page)).text, new RegExp(`^connected as client ${before.client} \\(reconnected 1×\\)$`));

  let timer;
  const code = await Promise.race([server.exited, new Promise((r) => { timer = setTimeout(() => r('timeout'), 120_000); })]);
  clearTimeout(timer);
  const after = await state(page);
  assert.equal(code, 0, `dnnlab train exit${await why()}`);
  // The server resumed the identity: "is back", one id in the run.
  assert.match(server.log, new RegExp(`client ${before.client} \\(127\\.0\\.0\\.1:\\d+\\) joined \\(browser\\)`), await why());
  assert.match(server.log, new RegExp(`client ${before.client} \\(127\\.0\\.0\\.1:\\d+\\) is back \\(browser\\)`), await why());
  const metrics = JSON.parse(readFileSync(join(dir, 'hybrid-reconnect.metrics.json'), 'utf8'));
  const d = metrics.distributed;
  t.diagnostic(`${DATASET}: ${JSON.stringify(d.tickets_by_client)} tickets by client, ${d.reissued} reissued, ` +
    `${after.tickets} answered by the tab over ${after.reconnects + 1} links; val loss ${metrics.epochs.at(-1).val_loss.toFixed(4)}`);
  assert.deepEqual(d.tickets_by_client.length, 1, JSON.stringify(d));
  assert.ok(d.reissued <= 1, JSON.stringify(d));
  // 24 batches; the ticket held when the link was cut went again to the same client.
  assert.ok(d.tickets_by_client[0] >= 24 && d.tickets_by_client[0] <= 25, JSON.stringify(d));
  assert.ok(after.tickets >= 24 && after.tickets <= d.tickets_by_client[0], `${after.tickets} ${JSON.stringify(d)}`);
  assert.deepEqual(d.quarantined, []);
  assert.ok(metrics.epochs[0].val_loss < 2.0, JSON.stringify(metrics.epochs));
  assert.equal(after.connection, 'finished', JSON.stringify(after));
  assert.equal(after.client, before.client);
  assert.equal(after.error, '');
  assert.equal((await link(page)).state, 'finished');
  assert.deepEqual(errors, []);
  t.diagnostic(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});

test('a refused identity or tries that all fail end the tab with the reason', { skip, timeout: 180_000 }, async (t) => {
  const t0 = Date.now();
  const { chromium } = require('playwright-core');
  // Two tabs, each behind its own proxy; both are cut and neither comes
  // back, so the test ends the run.
  const run = await startRun(t, hybridSpec('hybrid-reconnect-end', 1), 2);
  const { server, lines: joined } = run;
  const port = Number(new URL(joined.page).port);
  const forged = await proxy(port), dead = await proxy(port);
  t.after(() => { forged.server.close(); dead.server.close(); });
  const browser = run.browser = await chromium.launch(LAUNCH);
  const open = async (px, query) => {
    const page = await (await browser.newContext()).newPage();
    const url = new URL(joined.page);
    url.port = String(px.port);
    url.search = query;
    await page.goto(url.href);
    return page;
  };
  // A bad ?reconnect= is named, and the tab does not join.
  const bad = await open(dead, '?reconnect=ten');
  await bad.waitForSelector('#link[data-state="closed"]');
  assert.match(await bad.textContent('#error'), /^reconnect=ten in the page's URL: a whole number of tries, 0 to 1000/);
  const tabs = [await open(forged, ''), await open(dead, '?reconnect=2')];
  const why = async () => `\nserver:\n${server.log}\ntabs: ${JSON.stringify(await Promise.all(tabs.map(state)))}`;
  for (const tab of tabs) await tab.waitForFunction(() => window.dnnlabHybrid.tickets >= 2, null, { timeout: 90_000 });
  const [a, b] = await Promise.all(tabs.map(state));
  assert.equal(b.tries, 2);
  forged.mode = 'forge';
  dead.mode = 'refuse';
  forged.cut();
  dead.cut();

  // The forged secret: refused at the first try, and the identity dropped.
  await tabs[0].waitForSelector('#link[data-state="gave-up"]', { timeout: 20_000 })
    .catch(async (e) => { throw new Error(`${e.message}${await why()}`); });
  const refused = await link(tabs[0]);
  assert.equal(refused.text, `gave up: the server refused to resume client ${a.client}: ` +
    `hello: identity ${a.client} is not known here or 'secret' is not its secret`, await why());
  assert.equal(refused.try, '1');
  assert.equal(forged.forged, 1);
  assert.equal(await tabs[0].evaluate(() => sessionStorage.length), 0);
  // No way back: two tries, then the last reason.
  await tabs[1].waitForSelector('#link[data-state="gave-up"]', { timeout: 20_000 });
  const gaveUp = await link(tabs[1]);
  assert.match(gaveUp.text, /^gave up: the link was lost and 2 tries at reconnecting failed; the last: /, await why());
  assert.equal(gaveUp.try, '2');
  assert.equal(dead.refused, 2);
  const sb = await state(tabs[1]);
  assert.equal(sb.client, b.client);
  assert.equal(sb.connection, 'gave-up');
  // The server: each client joined once and was never back.
  assert.equal([...server.log.matchAll(/ joined \(browser\)/g)].length, 2, server.log);
  assert.doesNotMatch(server.log, /is back/);
  assert.match(server.log, new RegExp(`identity ${a.client} is not known here`));
  t.diagnostic(`took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
