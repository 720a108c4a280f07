// The layer-design plots over an experiment's finished trials: metric vs the
// x parameter per series, time vs x, learning curves of selected trials,
// parallel coordinates and best-so-far over time. Trials are fetched in pages
// of 1000 sorted by index; the first page is drawn at once, the rest filled in.
import { api, eventTrial } from './api.js';
import { h, num, throttle, toMillis } from './format.js';
import { Chart, groupByX, PALETTE } from './plots.js';
import { ParCoords } from './parcoords.js';

const PAGE = 1000;
const CURVE_METRICS = ['val_acc', 'train_acc', 'val_loss', 'train_loss'];

const select = (id, options, value, onchange) => {
  const s = h('select', { id, onchange }, options.map(([v, label]) => h('option', { value: v }, label)));
  s.value = value;
  return s;
};

export class Study {
  constructor({ exp, cap = 25000 }) {
    this.exp = exp;
    this.metric = exp.metric || 'val_acc';
    this.mode = exp.mode || (/loss|error/.test(this.metric) ? 'min' : 'max');
    this.params = exp.parameters || [];
    this.cap = cap;
    this.trials = new Map(); // id -> finished trial
    this.finishedTotal = 0;
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
    this.time = new Chart({ id: 'plot-time-vs-x', title: 'training time vs x (mean)', yLabel: 'seconds' });
    this.curve = new Chart({ id: 'plot-curves', title: 'learning curves', xLabel: 'epoch', xInt: true, controls: [this.cSel] });
    this.par = new ParCoords({ id: 'plot-parcoords', title: 'parallel coordinates' });
    this.best = new Chart({ id: 'plot-best', title: `best ${this.metric} so far`, xTime: true, yLabel: this.metric });
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

  merge(trials) {
    for (const t of trials) if (t.status === 'finished' || t.status === undefined) this.trials.set(String(t.id), t);
  }

  // Progressive load by index; stops at the cap (the user can lift it).
  static firstPage(id) {
    return api.trials(id, { sort: 'index', order: 'asc', status: 'finished', limit: PAGE, offset: 0 });
  }

  async load(first = null) {
    let offset = this.trials.size ? this.offsetDone || 0 : 0;
    while (!this.stopped) {
      const r = first && offset === 0 ? await first
        : await api.trials(this.exp.id, { sort: 'index', order: 'asc', status: 'finished', limit: PAGE, offset });
      if (this.stopped) return;
      const page = r.trials || [];
      this.merge(page);
      this.finishedTotal = Math.max(r.total ?? 0, this.trials.size);
      offset += page.length;
      this.offsetDone = offset;
      if (!this.firstDrawn) {
        this.firstDrawn = true;
        this.draw(true);
      } else this.redraw();
      if (page.length < PAGE || offset >= r.total) break;
      if (this.trials.size >= this.cap) {
        this.loadMore.classList.remove('hidden');
        this.loadMore.textContent = `load all ${num(this.finishedTotal)}`;
        break;
      }
    }
    this.loaded = true;
    this.redraw.cancel();
    this.draw();
    performance.mark('dnnlab:plots-loaded');
  }

  // Live: a trial finished (or a poll saw counts change) -> fetch the newest
  // finished trials and merge them.
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
        const r = await api.trials(this.exp.id, { sort: 'finished_at', order: 'desc', status: 'finished', limit, offset });
        const page = r.trials || [];
        const fresh = page.filter((t) => !this.trials.has(String(t.id))).length;
        this.merge(page);
        this.finishedTotal = Math.max(r.total ?? 0, this.trials.size);
        if (this.stopped || fresh < page.length || page.length < limit || this.trials.size >= this.finishedTotal) break;
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
    const trials = [...this.trials.values()];
    const capped = this.finishedTotal > trials.length;
    this.status.textContent = `${num(trials.length)} finished trials plotted${capped ? ` of ${num(this.finishedTotal)}${this.loaded ? '' : ' (loading…)'}` : ''}`;
    if (!this.xKey) {
      this.status.textContent += ' · the experiment has no parameters';
      return;
    }
    let lo = Infinity;
    let hi = -Infinity;
    for (const t of trials) {
      const x = Number(t.params?.[this.xKey]);
      if (Number.isFinite(x)) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
    }
    const xLog2 = lo > 0 && hi / lo >= 4;
    const xInt = trials.every((t) => Number.isInteger(t.params?.[this.xKey]));
    const opts = { xKey: this.xKey, seriesKey: this.seriesKey, mode: this.mode };
    const a = groupByX(trials, { ...opts, y: (t) => t[this.metric], agg: this.agg });
    const series = (labels) => labels.map((l, i) => ({ label: this.seriesKey ? `${l}` : this.metric, color: PALETTE[i % PALETTE.length] }));
    this.acc.el.querySelector('h3').textContent = `${this.metric} vs`;
    this.acc.opts.xLabel = `${this.xKey}${xLog2 ? ' (log2)' : ''}`;
    this.acc.opts.xInt = this.time.opts.xInt = xInt;
    this.time.opts.xLabel = this.acc.opts.xLabel;
    this.time.el.querySelector('h3').textContent = `training time vs ${this.xKey} (mean)`;
    if (a.labels.length) this.acc.update(a.data, series(a.labels), { xLog2 });
    this.acc.el.dataset.series = JSON.stringify(a.stats);
    this.acc.setNote(`${a.labels.length} series`);
    if (first) {
      performance.mark('dnnlab:plot');
      setTimeout(() => this.drawRest(trials, opts, series, xLog2), 0);
    } else this.drawRest(trials, opts, series, xLog2);
  }

  drawRest(trials, opts, series, xLog2) {
    if (this.stopped) return;
    const b = groupByX(trials, { ...opts, y: (t) => t.seconds, agg: 'mean' });
    if (b.labels.length) this.time.update(b.data, series(b.labels), { xLog2 });
    this.time.el.dataset.series = JSON.stringify(b.stats);
    this.par.update(trials, this.params, this.metric, this.mode);
    this.drawBest(trials);
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
    const label = (t) => `#${t.index ?? t.id} ${this.params.map((p) => `${p}=${t.params?.[p]}`).join(' ')}`;
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
