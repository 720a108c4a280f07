// The live page of a distributed run, served by the run itself at
// /hybrid/run#token=<watch token> (docs/distributed.md "Watching a run"). It
// polls GET /hybrid/status (the token, from the fragment, in the
// Authorization header) and shows the clients, where the time went (client
// turnarounds, server compute, idle), samples/s of each part and the curve,
// with the dashboard's charts (plots.js). window.dnnlabHybridRun mirrors the
// last status for tests.
import 'uplot/dist/uPlot.min.css';
import '../app.css';
import { Chart } from '../plots.js';
import { h, num } from '../format.js';

const POLL_MS = 1000;
const token = new URLSearchParams(location.hash.slice(1)).get('token') ?? '';
const view = { polls: 0, status: null, error: '' };
window.dnnlabHybridRun = view;

const $ = (id) => document.getElementById(id);
const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
const secs = (s) => `${num(s, 3)} s`;
const rate = (v) => String(Math.round(v));
const pct = (a, total) => (total > 0 ? `${Math.round((100 * a) / total)}%` : '—');

const summary = h('div', { class: 'cards', id: 'summary' });
const split = h('table', { class: 'grid', id: 'split' });
const clients = h('table', { class: 'grid', id: 'clients' });
const loss = new Chart({ id: 'loss', title: 'Loss per epoch', height: 220, xLabel: 'epoch', yLabel: 'loss', xInt: true });
const acc = new Chart({ id: 'accuracy', title: 'Accuracy per epoch', height: 220, xLabel: 'epoch', yLabel: 'accuracy', xInt: true });
$('run').append(summary,
  h('div', { class: 'card' }, h('div', { class: 'card-head' }, h('h3', {}, 'Where the time went'),
    h('span', { class: 'note' }, 'client turnaround = its compute (as it reports it) + both transfers')), split),
  h('div', { class: 'card' }, h('div', { class: 'card-head' }, h('h3', {}, 'Clients')),
    h('div', { style: 'overflow-x:auto' }, clients)),
  loss.el, acc.el);

function stat(label, value, id) {
  return h('div', { class: 'card', id }, h('div', { class: 'note' }, label), h('div', { style: 'font-size:1.1rem' }, value));
}

// One stacked bar: parts [[label, seconds, colour]].
function bar(parts) {
  const total = parts.reduce((a, p) => a + p[1], 0);
  return h('div', { style: 'display:flex;height:12px;width:100%;min-width:200px;background:#eee' },
    parts.map(([label, s, colour]) => h('div', {
      title: `${label}: ${secs(s)} (${pct(s, total)})`,
      style: `width:${total > 0 ? (100 * s) / total : 0}%;background:${colour}`,
    })));
}

function row(cells, head = false) {
  return h('tr', {}, cells.map((c, i) => h(head ? 'th' : 'td', { class: i > 0 && typeof c !== 'object' ? 'num' : undefined }, c)));
}

function render(s) {
  $('state').textContent = `· ${s.state}, epoch ${s.epoch || '—'} of ${s.epochs}, version ${s.version}`;
  const sv = s.server ?? { compute_seconds: 0, classifier_seconds: 0, features_step_seconds: 0, idle_seconds: 0, bytes_to_clients: 0, bytes_from_clients: 0 };
  const sps = s.samples_per_second ?? { features: 0, classifier: 0, classifier_compute: 0 };
  summary.replaceChildren(
    stat('Clients', `${s.clients.filter((c) => c.state === 'active').length} active of ${s.joined}`, 'stat-clients'),
    stat('Samples', `${s.samples_done} / ${s.samples_total}`, 'stat-samples'),
    stat('Tickets', `${s.tickets ?? 0} (${s.reissued ?? 0} reissued)`, 'stat-tickets'),
    stat('Re-checks', `${s.rechecks ?? 0} (${s.recheck_failures ?? 0} failed)`, 'stat-rechecks'),
    stat('Features samples/s', rate(sps.features), 'stat-features'),
    stat('Classifier samples/s', `${rate(sps.classifier)} (its compute alone: ${rate(sps.classifier_compute)})`, 'stat-classifier'),
    stat('Bytes to / from clients', `${mb(sv.bytes_to_clients)} / ${mb(sv.bytes_from_clients)}`, 'stat-bytes'),
    stat('Wire, staleness', `${s.wire}, ${s.staleness}`, 'stat-wire'));

  const rows = [row(['', 'split', 'compute', 'transfer', 'idle'], true),
    row(['server', bar([['classifier', sv.classifier_seconds, '#2563eb'], ['features step', sv.features_step_seconds, '#0891b2'], ['idle', sv.idle_seconds, '#d1d5db']]),
      secs(sv.compute_seconds), '—', `${secs(sv.idle_seconds)} (${pct(sv.idle_seconds, sv.compute_seconds + sv.idle_seconds)})`])];
  for (const c of s.clients) {
    const busy = c.forward_seconds + c.backward_seconds;
    // Its turnarounds split into what it computed (its own report, clamped
    // by the server to each turnaround) and the rest: both transfers and
    // any queue on either side.
    rows.push(row([`client ${c.id}`, bar([['compute', c.compute_seconds ?? 0, '#16a34a'], ['transfer', c.transfer_seconds ?? busy, '#9333ea'], ['waiting', c.wait_seconds, '#d1d5db']]),
      secs(c.compute_seconds ?? 0), secs(c.transfer_seconds ?? busy), `${secs(c.wait_seconds)} (${pct(c.wait_seconds, busy + c.wait_seconds)})`]));
  }
  split.replaceChildren(...rows);

  clients.replaceChildren(row(['client', 'kind', 'state', 'tickets', 'done', 'reissued', 're-checks (failed)',
    'forward s', 'backward s', 'compute s', 'transfer s', 'waiting s', 'samples/s', 'to / from', 'last seen'], true),
  ...s.clients.map((c) => h('tr', { 'data-client': c.id, 'data-kind': c.kind },
    ...[c.id, c.kind, c.state, c.tickets, c.done, c.reissued, `${c.rechecks} (${c.recheck_failures})`,
      num(c.forward_seconds, 3), num(c.backward_seconds, 3), num(c.compute_seconds ?? 0, 3), num(c.transfer_seconds ?? 0, 3),
      num(c.wait_seconds, 3), rate(c.samples_per_second),
      `${mb(c.bytes_to)} / ${mb(c.bytes_from)}`, c.last_seen_ago === null ? '—' : `${c.last_seen_ago.toFixed(1)} s ago`]
      .map((v, i) => h('td', { class: i >= 3 ? 'num' : undefined }, String(v))))));

  const xs = s.curve.map((e) => e.epoch);
  const val = (k) => s.curve.map((e) => e[k]);
  if (xs.length) {
    loss.update([xs, val('train_loss'), val('val_loss')], [{ label: 'train loss' }, { label: 'validation loss' }]);
    acc.update([xs, val('train_acc'), val('val_acc')], [{ label: 'train accuracy' }, { label: 'validation accuracy' }], { yRange: [0, 1] });
  }
  loss.setNote(xs.length ? `${xs.length} epoch${xs.length > 1 ? 's' : ''}` : 'after the first epoch');
}

async function poll() {
  try {
    const res = await fetch('status', { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store' });
    if (!res.ok) throw new Error(`GET status: ${res.status} ${(await res.text()).trim()}`);
    const s = await res.json();
    view.status = s;
    view.polls += 1;
    view.error = '';
    render(s);
    if (s.state === 'finished') return;  // the run is over; its endpoint closes
  } catch (e) {
    // The run ended (its endpoint closed) or is unreachable: say so, keep trying.
    view.error = view.status?.state === 'finished' ? ''
      : view.status && e instanceof TypeError ? 'The run\'s endpoint does not answer: the run has ended (its results are in its metrics.json) or it is unreachable.'
        : String(e.message ?? e);
  }
  $('error').textContent = view.error;
  setTimeout(poll, POLL_MS);
}

if (!token) {
  view.error = 'No token: open the URL that `dnnlab train --distributed --listen` printed (…/hybrid/run#token=…).';
  $('error').textContent = view.error;
} else {
  poll();
}
