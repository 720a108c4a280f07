// One experiment: header with counts, the live trial table and the study plots.
import { api, eventExperiment, eventTrial, events } from '../api.js';
import { countsBar, dateTime, h, num, STATUSES, statusBadge, throttle } from '../format.js';
import { Study } from '../study.js';
import { TrialTable } from '../trial_table.js';

const plotCap = () => {
  const m = location.hash.match(/[?&]plotcap=(\d+)/) || location.search.match(/[?&]plotcap=(\d+)/);
  return m ? Number(m[1]) : 25000;
};

export function experimentPage(id) {
  const head = h('div', { class: 'exp-head' }, h('h1', {}, 'Experiment'), h('p', { class: 'muted' }, 'Loading…'));
  const el = h('section', { class: 'page' }, head);
  let table = null;
  let study = null;
  let stopped = false;
  let lastFinished = null;

  function renderHead(x) {
    const c = x.counts || {};
    // Live refreshes re-render the header; opened <details> stay open.
    const opened = new Set([...head.querySelectorAll('details[open]')].map((d) => d.dataset.k));
    const details = (k, text) => h('details', { class: 'spec', 'data-k': k, open: opened.has(k) }, h('summary', {}, k), h('pre', {}, text));
    head.replaceChildren(
      h('div', { class: 'crumbs' }, h('a', { href: '#/' }, 'Experiments'), ' / '),
      h('h1', {}, x.name || x.id, ' ', statusBadge(x.status)),
      h('div', { class: 'meta' },
        h('span', {}, `method ${x.method || '—'}`),
        h('span', {}, `metric ${x.metric || 'val_acc'} (${x.mode || 'max'})`),
        h('span', {}, `created ${dateTime(x.created_at)}`),
        h('span', { id: 'exp-counts' }, STATUSES.filter((k) => c[k]).map((k) => `${k} ${num(c[k])}`).join(' · ') || 'no trials yet')),
      countsBar(c, x.planned),
      x.spec_text ? details('sweep spec', x.spec_text) : null,
      x.provenance ? details('provenance', typeof x.provenance === 'string' ? x.provenance : JSON.stringify(x.provenance, null, 2)) : null);
  }

  async function refreshHead() {
    try {
      const x = await api.experiment(id);
      if (stopped) return;
      renderHead(x);
      const fin = x.counts?.finished ?? 0;
      if (lastFinished !== null && fin !== lastFinished && study) study.onFinished({});
      lastFinished = fin;
    } catch { /* keep the last header */ }
  }

  const refreshTable = throttle(() => table && table.load(), 1000);
  const refreshCounts = throttle(refreshHead, 1000);
  const curveRefresh = new Map();

  const off = events.on((ev) => {
    if (!table) return;
    const d = ev.data || {};
    const exp = eventExperiment(d);
    if (exp !== undefined && String(exp) !== String(id)) return;
    switch (ev.type) {
      case 'trial.finished': case 'trial.pruned':
        study.onFinished(ev);
        // falls through
      case 'trial.started': case 'trial.failed': case 'trial.cancelled':
        refreshTable();
        refreshCounts();
        break;
      case 'trial.epoch': {
        refreshTable(); // a running trial's epochs and metrics (throttled)
        const tid = String(eventTrial(d));
        if (!study.selected.includes(tid)) break;
        if (!curveRefresh.has(tid)) curveRefresh.set(tid, throttle(() => study.refreshCurve(tid), 2000));
        curveRefresh.get(tid)();
        break;
      }
      case 'poll':
        refreshTable();
        refreshCounts(); // a change in finished counts syncs the plots
        break;
      default:
        if (ev.type.startsWith('experiment.')) refreshCounts();
    }
  });

  (async () => {
    // The first table page and the first plot page are requested together
    // with the experiment, not after it: the first paint waits on one round trip.
    const firstRows = TrialTable.firstPage(id);
    const firstPlot = Study.firstPage(id);
    firstRows.catch(() => {});
    firstPlot.catch(() => {});
    let x;
    try {
      x = await api.experiment(id);
    } catch (e) {
      head.replaceChildren(h('h1', {}, 'Experiment'), h('p', { class: 'error' }, e.message));
      return;
    }
    if (stopped) return;
    renderHead(x);
    lastFinished = x.counts?.finished ?? 0;
    study = new Study({ exp: { ...x, id: x.id ?? id }, cap: plotCap(), onBrush: (kept) => table.setLocal(kept) });
    table = new TrialTable({ experimentId: x.id ?? id, parameters: x.parameters || [], metric: x.metric || 'val_acc',
      onSelect: (ids) => study.setSelected(ids) });
    el.append(table.el, study.el);
    table.load(firstRows);
    study.load(firstPlot).catch((e) => { study.status.className = 'error'; study.status.textContent = e.message; });
  })();

  return {
    el,
    dispose: () => {
      stopped = true;
      off();
      refreshTable.cancel();
      refreshCounts.cancel();
      for (const t of curveRefresh.values()) t.cancel();
      if (study) study.destroy();
    },
  };
}
