// The layer-design plots over every trial that reported a metric (finished,
// pruned and running ones, each at its last reported epoch): metric vs the x
// parameter per series (pruned trials marked), time per epoch vs x, learning
// curves of selected trials, parallel coordinates (brushing filters the other
// plots and the table) and best-so-far over time. Trials are fetched in pages
// of 1000 sorted by index; the first page is drawn at once, the rest filled in.
import { api, eventTrial } from './api.js';
import { h, num, throttle, toMillis } from './format.js';
import { Chart, describeX, groupByX, PALETTE } from './plots.js';
import { ParCoords } from './parcoords.js';

const PAGE = 1000;
const CURVE_METRICS = ['val_acc', 'train_acc', 'val_loss', 'train_loss'];

const select = (id, options, value, onchange) => {
  const s = h('select', { id, onchange }, options.map(([v, label]) => h('option', { value: v }, label)));
  s.value = value;
  return s;
};

export class Study {
  constructor({ exp, cap = 25000, onBrush = () => {} }) {
    this.exp = exp;
    this.metric = exp.metric || 'val_acc';
    this.mode = exp.mode || (/loss|error/.test(this.metric) ? 'min' : 'max');
    this.params = exp.parameters || [];
    this.cap = cap;
    this.trials = new Map(); // id -> trial with a metric
    this.brushed = null; // the trials the parallel coordinates' brush keeps (null: no brush)
    this.onBrush = onBrush;
    this.total = 0; // trials in the experiment
    this.offsetDone = 0; // of them read
    this.stopped = false;
    this.curves = new Map(); // id -> trial with curve
    this.selected = [];

    const pick = (pref, fallback) => (this.params.includes(pref) ? pref : fallback);
    this.xKey = pick('depth', this.params[0] || '');
    this.seriesKey = pick('activation', this.params.find((p) => p !== this.xKey) || '');
    this.agg = 'best';
    const paramOpts = this.params.map((p) => [p, p]);
    this.xSel = select('x-param', paramOpts, this.xKey, () => {
      this.xKey = this.xSel.value;
      // Grouping by the x parameter itself says nothing: drop the series.
      if (this.seriesKey === this.xKey) this.sSel.value = this.seriesKey = '';
      this.draw();
    });
    this.sSel = select('series-param', [['', '(none)'], ...paramOpts], this.seriesKey, () => { this.seriesKey = this.sSel.value; this.draw(); });
    this.aSel = select('agg', [['best', 'best'], ['mean', 'mean']], this.agg, () => { this.agg = this.aSel.value; this.draw(); });
    this.cSel = select('curve-metric', CURVE_METRICS.map((m) => [m, m]), CURVE_METRICS.includes(this.metric) ? this.metric : 'val_acc', () => this.drawCurves());

    this.acc = new Chart({ id: 'plot-metric-vs-x', title: `${this.metric} vs`, yLabel: this.metric,
      controls: [this.xSel, h('span', { class: 'muted' }, 'per'), this.sSel, this.aSel] });
    this.time = new Chart({ id: 'plot-time-vs-x', title: 'time per epoch vs x (mean)', yLabel: 's / epoch' });
    this.curve = new Chart({ id: 'plot-curves', title: 'learning curves', xLabel: 'epoch', xInt: true, controls: [this.cSel] });
    this.par = new ParCoords({ id: 'plot-parcoords', title: 'parallel coordinates', onBrush: (kept) => this.brush(kept) });
    this.best = new Chart({ id: 'plot-best', title: `best ${this.metric} so far`, xTime: true, xMinSpan: 60, yLabel: this.metric });
    this.loadMore = h('button', { class: 'hidden', onclick: () => { this.cap = Infinity; this.loadMore.classList.add('hidden'); this.load(); } }, 'load all');
    this.status = h('span', { class: 'muted', id: 'plot-status' }, 'loading trials…');
    this.el = h('div', { class: 'study' },
      h('div', { class: 'plot-status' }, this.status, this.loadMore),
      h('div', { class: 'plots' }, this.acc.el, this.time.el, this.curve.el, this.best.el, this.par.el));
    this.curve.setNote('click table rows to add trials');
    this.redraw = throttle(() => this.draw(), 1000);
    this.sync = throttle(() => this.syncNew(), 1500);
    this.pendingIds = new Set();
  }

  // Keeps every trial with a value of the metric (a running one's is its
  // last reported epoch's); queued and failed-before-an-epoch ones have none.
  merge(trials) {
    for (const t of trials) {
      if (typeof t[this.metric] === 'number') this.trials.set(String(t.id), t);
      else this.trials.delete(String(t.id));
    }
  }

  // Progressive load by index; stops at the cap (the user can lift it).
  static firstPage(id) {
    return api.trials(id, { sort: 'index', order: 'asc', limit: PAGE, offset: 0 });
  }

  // The parallel coordinates' brush: the trials it keeps, or null when cleared.
  brush(kept) {
    this.brushed = kept ? new Set(kept.map((t) => String(t.id))) : null;
    this.draw();
    this.onBrush(kept);
  }

  // What the plots other than the parallel coordinates show.
  shown() {
    const all = [...this.trials.values()];
    return this.brushed ? all.filter((t) => this.brushed.has(String(t.id))) : all;
  }

  async load(first = null) {
    let offset = this.trials.size ? this.offsetDone || 0 : 0;
    while (!this.stopped) {
      const r = first && offset === 0 ? await first
        : await api.trials(this.exp.id, { sort: 'index', order: 'asc', limit: PAGE, offset });
      if (this.stopped) return;
      const page = r.trials || [];
      this.merge(page);
      this.total = r.total ?? 0;
      offset += page.length;
      this.offsetDone = offset;
      if (!this.firstDrawn) {
        this.firstDrawn = true;
        this.draw(true);
      } else this.redraw();
      if (page.length < PAGE || offset >= r.total) break;
      if (offset >= this.cap) {
        this.loadMore.classList.remove('hidden');
        this.loadMore.textContent = `load all ${num(this.total)}`;
        break;
      }
    }
    this.loaded = true;
    this.redraw.cancel();
    this.draw();
    performance.mark('dnnlab:plots-loaded');
  }

  // Live: a trial ended (or a poll saw counts change) -> fetch the newest
  // ended trials and merge them.
  onFinished(ev) {
    const id = eventTrial(ev?.data);
    if (id !== undefined && id !== null) this.pendingIds.add(String(id));
    this.sync();
  }

  // Pages through the newest finished trials until one page holds trials it
  // already has: a burst of thousands of ends between two syncs is not lost.
  async syncNew() {
    if (this.stopped) return;
    const ids = [...this.pendingIds];
    this.pendingIds.clear();
    try {
      let offset = 0;
      let limit = 100;
      for (;;) {
        const r = await api.trials(this.exp.id, { sort: 'finished_at', order: 'desc', limit, offset });
        const page = (r.trials || []).filter((t) => t.finished_at !== null);
        const fresh = page.filter((t) => !this.trials.has(String(t.id))).length;
        this.merge(page);
        if (this.stopped || fresh < page.length || page.length < limit) break;
        offset += page.length;
        limit = PAGE;
      }
    } catch {
      // The server cannot sort by finished_at: fetch the announced trials one by one.
      const got = await Promise.all(ids.slice(0, 50).map((id) => api.trial(id).catch(() => null)));
      this.merge(got.filter(Boolean));
    }
    this.draw();
    for (const id of ids) if (this.selected.includes(id)) this.curves.delete(id);
    if (ids.some((id) => this.selected.includes(id))) this.setSelected(this.selected);
  }

  // The first draw paints the metric plot at once and the rest a frame later,
  // so that the page shows something before the heavier plots are built.
  draw(first = false) {
    if (this.stopped) return;
    const all = [...this.trials.values()];
    const trials = this.shown();
    const by = { finished: 0, pruned: 0, running: 0, other: 0 };
    for (const t of trials) by[t.status in by ? t.status : 'other']++;
    this.status.textContent = `${num(trials.length)} trials plotted${this.brushed ? ` (brushed, of ${num(all.length)})` : ''}`
      + ` · ${num(by.finished)} finished, ${num(by.pruned)} pruned (×), ${num(by.running)} running`
      + (this.offsetDone < this.total ? ` · ${num(this.offsetDone)} of ${num(this.total)} trials read${this.loaded ? '' : ' (loading…)'}` : '');
    this.status.dataset.statuses = JSON.stringify(by);
    if (!this.xKey) {
      this.status.textContent += ' · the experiment has no parameters';
      return;
    }
    // The x axis is described over every trial, so a brush does not move it.
    const x = describeX(all, this.xKey);
    const opts = { xOf: x.xOf, seriesKey: this.seriesKey, mode: this.mode };
    const a = groupByX(trials, { ...opts, y: (t) => t[this.metric], agg: this.agg });
    // Pruned trials marked: the best pruned value at each x, as points.
    const pruned = groupByX(trials.filter((t) => t.status === 'pruned'), { ...opts, seriesKey: '', y: (t) => t[this.metric], agg: 'best' });
    const px = new Map(pruned.data[0].map((v, i) => [v, pruned.data[1][i]]));
    const series = (labels) => labels.map((l, i) => ({ label: this.seriesKey ? `${l}` : this.metric, color: PALETTE[i % PALETTE.length] }));
    const yRange = /acc/.test(this.metric) ? [0, 1] : null;
    this.acc.el.querySelector('h3').textContent = `${this.metric} vs`;
    this.acc.opts.xLabel = `${this.xKey}${x.scale === 'lin' ? '' : ` (${x.scale})`}`;
    this.time.opts.xLabel = this.acc.opts.xLabel;
    this.time.el.querySelector('h3').textContent = `time per epoch vs ${this.xKey} (mean)`;
    if (a.labels.length && px.size) {
      this.acc.update([...a.data, a.data[0].map((v) => px.get(v) ?? null)],
        [...series(a.labels), { label: 'pruned (best)', color: '#111827', points: true }], { x, yRange });
    } else if (a.labels.length) this.acc.update(a.data, series(a.labels), { x, yRange });
    this.acc.el.dataset.series = JSON.stringify(a.stats);
    this.acc.el.dataset.pruned = String(by.pruned);
    this.acc.setNote(`${a.labels.length} series`);
    if (first) {
      performance.mark('dnnlab:plot');
      setTimeout(() => this.drawRest(trials, all, opts, series, x), 0);
    } else this.drawRest(trials, all, opts, series, x);
  }

  drawRest(trials, all, opts, series, x) {
    if (this.stopped) return;
    const perEpoch = (t) => (t.epochs_done > 0 && t.seconds > 0 ? t.seconds / t.epochs_done : null);
    const b = groupByX(trials, { ...opts, y: perEpoch, agg: 'mean' });
    if (b.labels.length) this.time.update(b.data, series(b.labels), { x });
    this.time.el.dataset.series = JSON.stringify(b.stats);
    // The parallel coordinates show every trial (their brush dims the rest).
    if (!this.brushed) this.par.update(all, this.params, this.metric, this.mode);
    this.drawBest(trials.filter((t) => t.status === 'finished'));
  }

  drawBest(trials) {
    // Unverified browser results (provisional) are shown, never ranked.
    const pts = trials.filter((t) => !t.provisional).map((t) => [toMillis(t.finished_at) / 1000, t[this.metric]])
      .filter(([x, y]) => Number.isFinite(x) && typeof y === 'number').sort((p, q) => p[0] - q[0]);
    if (!pts.length) { this.best.setNote('no finished trials with finished_at yet'); return; }
    let best = pts[0][1];
    const bestArr = pts.map(([, y]) => (best = this.mode === 'min' ? Math.min(best, y) : Math.max(best, y)));
    this.best.update([pts.map((p) => p[0]), pts.map((p) => p[1]), bestArr],
      [{ label: 'trial', color: '#9ca3af', points: true }, { label: 'best so far', color: '#dc2626' }]);
    this.best.el.dataset.points = String(pts.length);
    this.best.setNote(`best ${num(best)}`);
  }

  async setSelected(ids) {
    this.selected = ids;
    const missing = ids.filter((id) => !this.curves.has(id));
    const got = await Promise.all(missing.map((id) => api.trial(id).catch(() => null)));
    got.forEach((t, i) => { if (t) this.curves.set(missing[i], t); });
    this.drawCurves();
  }

  // Re-fetches the curve of a selected trial on trial.epoch (throttled by caller).
  refreshCurve(id) {
    if (!this.selected.includes(String(id))) return;
    this.curves.delete(String(id));
    this.setSelected(this.selected);
  }

  drawCurves() {
    const m = this.cSel.value;
    const sel = this.selected.map((id) => this.curves.get(id)).filter(Boolean);
    this.curve.el.dataset.trials = String(sel.length);
    if (!sel.length) { this.curve.setNote('click table rows to add trials'); return; }
    const epochs = [...new Set(sel.flatMap((t) => (t.curve || []).map((p) => p.epoch)))].sort((a, b) => a - b);
    const data = [epochs, ...sel.map((t) => {
      const by = new Map((t.curve || []).map((p) => [p.epoch, p[m]]));
      return epochs.map((e) => by.get(e) ?? null);
    })];
    const label = (t) => `trial ${t.id} ${this.params.map((p) => `${p}=${t.params?.[p]}`).join(' ')}`;
    this.curve.opts.yLabel = m;
    this.curve.update(data, sel.map((t, i) => ({ label: label(t), color: PALETTE[i % PALETTE.length] })));
    this.curve.setNote(`${sel.length} trial${sel.length > 1 ? 's' : ''}`);
  }

  destroy() {
    this.stopped = true;
    this.redraw.cancel();
    this.sync.cancel();
    for (const c of [this.acc, this.time, this.curve, this.par, this.best]) c.destroy();
  }
}
