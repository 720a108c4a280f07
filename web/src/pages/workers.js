// Workers: kind, status, last heartbeat, current trial, trials/s; queue depth
// over time sampled from /api/stats (kept across visits while the tab lives).
import { api, eventTrial, events } from '../api.js';
import { dateTime, h, num, relTime, statusBadge, throttle, toMillis } from '../format.js';
import { Chart } from '../plots.js';

// Per-worker trials/s from the event stream, over the last minute: the
// trial.started event names the worker, the end event names the trial.
const RATE_WINDOW_S = 60;
const startedBy = new Map(); // trial id -> worker id
const ends = []; // [seconds, worker id]
const bootS = Date.now() / 1000;
events.on((ev) => {
  const d = ev.data || {};
  const trial = String(eventTrial(d));
  if (ev.type === 'trial.started') startedBy.set(trial, String(d.worker));
  else if (ev.type === 'trial.finished' || ev.type === 'trial.pruned' || ev.type === 'trial.failed') {
    const w = d.worker ?? startedBy.get(trial);
    startedBy.delete(trial);
    if (w !== undefined) ends.push([ev.time ? toMillis(ev.time) / 1000 : Date.now() / 1000, String(w)]);
    if (ends.length > 10000) ends.splice(0, 5000);
  } else if (ev.type === 'trial.cancelled') {
    startedBy.delete(trial); // stopped, not done: no rate
  }
});

function workerRate(id) {
  const now = Date.now() / 1000;
  const span = Math.min(RATE_WINDOW_S, Math.max(1, now - bootS));
  let n = 0;
  for (const [t, w] of ends) if (w === String(id) && now - t <= span) n++;
  return n / span;
}

// Workers that left more than 10 minutes ago are not sent by the server
// unless asked for (?gone=all, the toggle); the page hides the ones that
// pass that age while shown.
const GONE_HIDDEN_AFTER_MS = 10 * 60_000;
let showDeparted = false;
let goneOmitted = 0;

const samples = { t: [], depth: [], rate: [] };
const MAX_SAMPLES = 1800; // one hour at 2 s

function addSample(stats) {
  samples.t.push(Date.now() / 1000);
  samples.depth.push(stats.queue_depth ?? null);
  samples.rate.push(stats.trials_per_second ?? null);
  if (samples.t.length > MAX_SAMPLES) for (const k of Object.keys(samples)) samples[k].shift();
}

const adapterText = (a) => (a ? [a.vendor, a.architecture].filter(Boolean).join(' / ') : '');

export function workersPage() {
  const summary = h('div', { class: 'cards' });
  const body = h('tbody');
  const msg = h('p', { class: 'muted' });
  const departed = h('input', { type: 'checkbox', id: 'show-departed', checked: showDeparted,
    onchange: () => { showDeparted = departed.checked; renderTable(); loadWorkers(); } });
  const departedNote = h('span', { class: 'muted' });
  const chart = new Chart({ id: 'queue-depth', title: 'Queue depth and trials/s', height: 180, xTime: true, xMinSpan: 120,
    yLabel: 'queued trials', y2Label: 'trials/s' });
  const el = h('section', { class: 'page' },
    h('h1', {}, 'Workers'),
    summary,
    chart.el,
    msg,
    h('div', { class: 'card table-wrap' },
      h('label', {}, departed, ' show workers that left over 10 min ago ', departedNote),
      h('table', { class: 'grid', id: 'workers' },
        h('thead', {}, h('tr', {}, ['Worker', 'Kind', 'Backend', 'Host', 'Status', 'Last heartbeat', 'Current trial', 'Trials/s', 'Started'].map((c) => h('th', {}, c)))),
        body)));

  let workers = [];
  let stopped = false;

  function renderSummary(s) {
    const c = s.counts || {};
    const card = (label, value) => h('div', { class: 'card stat' }, h('div', { class: 'stat-value' }, value), h('div', { class: 'muted' }, label));
    summary.replaceChildren(
      card('trials/s', num(s.trials_per_second, 2)),
      card('queue depth', num(s.queue_depth)),
      card('workers active', num(s.workers_active)),
      card('running', num(c.running ?? 0)),
      card('finished', num(c.finished ?? 0)),
      card('pruned / failed', `${num(c.pruned ?? 0)} / ${num(c.failed ?? 0)}`));
  }

  function renderChart() {
    // One sample gives uPlot no time span to scale: wait for the second.
    if (samples.t.length < 2) { chart.setNote('collecting samples…'); return; }
    chart.update([samples.t, samples.depth, samples.rate], [{ label: 'queue depth' }, { label: 'trials/s', color: '#16a34a', y2: true }]);
    chart.setNote(`${samples.t.length} samples`);
  }

  function renderTable() {
    const now = Date.now();
    const old = (w) => w.gone && now - toMillis(w.last_seen) > GONE_HIDDEN_AFTER_MS;
    const hidden = (showDeparted ? 0 : workers.filter(old).length) + goneOmitted;
    departedNote.textContent = hidden ? `(${hidden} hidden)` : '';
    body.replaceChildren(...workers.filter((w) => showDeparted || !old(w)).map((w) => {
      const silent = now - toMillis(w.last_seen) > 30_000;
      const status = w.gone ? 'gone' : silent ? 'silent' : w.current_trial ? 'busy' : 'idle';
      const rate = w.gone ? undefined : w.trials_per_second ?? workerRate(w.id);
      return h('tr', { 'data-id': w.id },
        h('td', { class: 'mono' }, String(w.id)),
        h('td', {}, h('span', { class: `kind kind-${w.kind}` }, w.kind || '—')),
        // A browser's own word (webgpu, wasm, webgpu→wasm; its adapter on
        // hover): shown, never trusted (docs/security.md).
        h('td', { class: 'backend', title: adapterText(w.adapter) }, w.backend ?? (w.kind === 'browser' ? '—' : 'native')),
        // host is given to token holders only (docs/security.md).
        w.host === undefined
          ? h('td', { class: 'muted', title: 'shown with the write or read token' }, '—')
          : h('td', {}, `${w.host}${w.pid ? `:${w.pid}` : ''}`),
        h('td', {}, statusBadge(status)),
        h('td', { title: dateTime(w.last_seen) }, relTime(w.last_seen, now)),
        // The store-wide trial id, as the trial table's "trial" column shows it.
        h('td', { class: 'mono' }, w.current_trial ? h('a', { href: `#/trials/${w.current_trial}` }, String(w.current_trial)) : '—'),
        h('td', { class: 'num', title: `trials ended per second over the last ${RATE_WINDOW_S} s` }, rate === undefined ? '—' : num(rate, 2)),
        h('td', { title: dateTime(w.started_at) }, relTime(w.started_at, now)));
    }));
    msg.textContent = workers.length ? '' : 'No workers have joined yet.';
  }

  async function loadWorkers() {
    try {
      const r = await api.workers(showDeparted ? 'all' : 'recent');
      if (stopped) return;
      workers = r.workers || [];
      goneOmitted = r.gone_omitted ?? 0;
      renderTable();
    } catch (e) {
      msg.className = 'error';
      msg.textContent = e.message;
    }
  }

  async function sampleStats() {
    try {
      const s = await api.stats();
      if (stopped) return;
      addSample(s);
      renderSummary(s);
      renderChart();
    } catch { /* shown by the worker list */ }
  }

  const refreshWorkers = throttle(loadWorkers, 1000);
  const off = events.on((ev) => {
    if (ev.type.startsWith('worker.') || ev.type === 'trial.started' || ev.type === 'trial.finished') refreshWorkers();
  });
  // Heartbeats age in place; the list and stats are re-read every 2 s.
  const timer = setInterval(() => { sampleStats(); loadWorkers(); }, 2000);
  sampleStats();
  loadWorkers();
  renderChart();
  return {
    el,
    dispose: () => { stopped = true; off(); clearInterval(timer); refreshWorkers.cancel(); chart.destroy(); },
  };
}
