// One trial (#/trials/{id}): parameters, seed, status, its error, provenance
// and learning curve; and the comparison of several (#/compare?ids=1,2,3):
// their curves overlaid and a table of parameters with differences marked.
import { api } from '../api.js';
import { dateTime, h, num, statusBadge } from '../format.js';
import { Chart, PALETTE } from '../plots.js';
import { paramText } from '../trial_table.js';

const CURVE_METRICS = ['val_acc', 'train_acc', 'val_loss', 'train_loss'];
const kv = (rows) => h('table', { class: 'grid kv' }, h('tbody', {}, rows.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v)))));

function curveChart(id, trials, metric) {
  const chart = new Chart({ id, title: 'learning curves', xLabel: 'epoch', xInt: true, yLabel: metric });
  const epochs = [...new Set(trials.flatMap((t) => (t.curve || []).map((p) => p.epoch)))].sort((a, b) => a - b);
  const data = [epochs, ...trials.map((t) => {
    const by = new Map((t.curve || []).map((p) => [p.epoch, p[metric]]));
    return epochs.map((e) => by.get(e) ?? null);
  })];
  requestAnimationFrame(() => {
    if (!epochs.length) { chart.setNote('no epochs reported'); return; }
    chart.update(data, trials.map((t, i) => ({ label: `trial ${t.id}`, color: PALETTE[i % PALETTE.length] })),
      { yRange: /acc/.test(metric) ? [0, 1] : null });
    chart.el.dataset.trials = String(trials.length);
  });
  return chart;
}

// A page that loads then renders; `build` returns [elements, charts].
function page(load, build) {
  const el = h('section', { class: 'page' }, h('p', { class: 'muted' }, 'Loading…'));
  let charts = [];
  load().then((x) => { const [els, cs] = build(x); charts = cs; el.replaceChildren(...els.filter(Boolean)); })
    .catch((e) => el.replaceChildren(h('p', { class: 'error' }, e.message)));
  return { el, dispose: () => charts.forEach((c) => c.destroy()) };
}

export function trialPage(id) {
  return page(() => api.trial(id), (t) => {
    const chart = curveChart('trial-curve', [t], CURVE_METRICS.find((m) => (t.curve || []).some((p) => p[m] !== null)) || 'val_acc');
    const params = Object.entries(t.params || {});
    return [[
      h('div', { class: 'crumbs' }, h('a', { href: '#/' }, 'Experiments'), ' / ',
        h('a', { href: `#/experiments/${t.experiment_id}` }, `experiment ${t.experiment_id}`), ' / '),
      h('h1', {}, `Trial ${t.id} `, statusBadge(t.status)),
      t.error ? h('pre', { class: 'error-box', id: 'trial-error' }, t.error) : null,
      h('div', { class: 'trial-grid' },
      h('div', { class: 'card', id: 'trial-params' }, h('h3', {}, 'parameters'),
        kv(params.map(([k, v]) => [k, paramText(v)]))),
      h('div', { class: 'card', id: 'trial-facts' }, h('h3', {}, 'run and results'), kv([
        ['index in sweep', String(t.index)], ['seed', t.seed], ['attempt', String(t.attempt)], ['worker', t.worker || '—'],
        ['started', dateTime(t.started_at)], ['finished', dateTime(t.finished_at)],
        ['epochs', num(t.epochs_done)], ['seconds', t.seconds > 0 ? num(t.seconds) : '—'],
        ...['val_acc', 'val_loss', 'train_acc', 'train_loss', 'test_acc'].map((k) => [k, num(t[k])]),
        // Kept for the best trials of the experiment and pinned ones (docs/sweep.md, "Weights").
        ['weights', t.weights
          ? h('a', { id: 'trial-weights', href: t.weights.url, download: `trial-${t.id}.safetensors` },
            `safetensors, ${num(t.weights.size / 1024)} KiB`)
          : (t.pinned ? 'pinned, none kept yet' : 'not kept')],
      ])),
      chart.el),
      h('details', { class: 'spec', open: true }, h('summary', {}, 'provenance'), h('pre', {}, JSON.stringify(t.provenance ?? {}, null, 2))),
    ], [chart]];
  });
}

export function comparePage(ids) {
  return page(() => Promise.all(ids.map((id) => api.trial(id))), (trials) => {
    const names = [...new Set(trials.flatMap((t) => Object.keys(t.params || {})))];
    const rows = [
      ...names.map((n) => [n, (t) => paramText(t.params?.[n])]),
      ['seed', (t) => t.seed], ['status', (t) => t.status], ['epochs', (t) => num(t.epochs_done)],
      ...['val_acc', 'val_loss', 'test_acc'].map((k) => [k, (t) => num(t[k])]),
      ['s / epoch', (t) => (t.seconds > 0 && t.epochs_done > 0 ? num(t.seconds / t.epochs_done) : '—')],
      ['error', (t) => t.error || ''],
    ];
    const diff = h('table', { class: 'grid diff', id: 'compare-diff' },
      h('thead', {}, h('tr', {}, h('th', {}, ''), trials.map((t, i) => h('th', { style: `color:${PALETTE[i % PALETTE.length]}` },
        h('a', { href: `#/trials/${t.id}` }, `trial ${t.id}`))))),
      h('tbody', {}, rows.map(([k, f]) => {
        const vals = trials.map(f);
        const differs = new Set(vals).size > 1;
        return h('tr', { 'data-differs': differs ? '1' : '0' }, h('th', {}, k), vals.map((v) => h('td', { class: differs ? 'differs' : '' }, v)));
      })));
    const charts = CURVE_METRICS.slice(0, 2).map((m) => curveChart(`compare-${m}`, trials, m));
    charts.forEach((c, i) => c.el.querySelector('h3').textContent = `${CURVE_METRICS[i]} per epoch`);
    return [[
      h('div', { class: 'crumbs' }, h('a', { href: `#/experiments/${trials[0]?.experiment_id}` }, `experiment ${trials[0]?.experiment_id}`), ' / '),
      h('h1', {}, `Comparing ${trials.length} trials`),
      h('div', { class: 'card table-wrap' }, h('h3', {}, 'parameters and results (differences marked)'), diff),
      h('div', { class: 'plots' }, charts.map((c) => c.el)),
    ], charts];
  });
}
