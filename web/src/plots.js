// uPlot wrappers: a chart that follows its container's width, and the
// aggregations the layer-design plots need (group trials by x and series).
import uPlot from 'uplot';
import { h } from './format.js';

// Tick labels with as many decimals as the tick spacing needs (uPlot's
// default prints 0.0021 and 0.0022 both as "0.002").
// The decimals are those of the increment itself (0.25 -> 2: "0.25", not "0.3").
export function tickValues(u, splits, axisIdx, space, incr) {
  let d = 2;
  if (incr > 0) for (d = 0; d < 8 && Math.abs(Math.round(incr * 10 ** d) - incr * 10 ** d) > 1e-6; d++);
  return splits.map((v) => (v === null ? '' : Math.abs(v) >= 1e5 ? v.toExponential(1) : v.toFixed(d)));
}

// Time ticks as wall-clock times (12:04, 12:04:30 within ten minutes, the date
// past two days), never uPlot's bare ":30" or ":21.500".
function timeTicks(u, splits) {
  const span = splits.length > 1 ? splits[splits.length - 1] - splits[0] : 0;
  const p = (n) => String(n).padStart(2, '0');
  return splits.map((v) => {
    const d = new Date(v * 1000);
    if (span > 2 * 86400) return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
    const hm = `${p(d.getHours())}:${p(d.getMinutes())}`;
    return span < 600 ? `${hm}:${p(d.getSeconds())}` : hm;
  });
}

// A parameter value as a tick: 1e-3 for a power of ten below 1, else up to 4 digits.
export function paramTick(v) {
  if (v === null || !Number.isFinite(v)) return '';
  const e = Math.log10(Math.abs(v));
  if (v !== 0 && Math.abs(v) < 0.01 && Math.abs(e - Math.round(e)) < 1e-9) return `1e${Math.round(e)}`;
  if (v !== 0 && Math.abs(v) < 0.01) return v.toExponential(1).replace('.0e', 'e');
  return String(+v.toPrecision(4));
}

// How to draw a parameter on x over these trials: numbers (log2 for integers
// over a factor of 4, log10 for other positives over a factor of 100, ticks at
// the actual values when there are at most 12) or categories at 0..k-1.
// xOf(trial) gives the plotted x (NaN: no value).
export function describeX(trials, key) {
  const vals = [];
  for (const t of trials) { const v = t.params?.[key]; if (v !== undefined && v !== null) vals.push(v); }
  if (!vals.every((v) => typeof v === 'number' && Number.isFinite(v))) {
    const names = [...new Set(vals.map(String))].sort(naturalOrder);
    const at = new Map(names.map((c, i) => [c, i]));
    return { scale: 'lin', names, splits: names.map((_, i) => i), xOf: (t) => at.get(String(t.params?.[key])) ?? NaN };
  }
  const distinct = [...new Set(vals)].sort((a, b) => a - b);
  const lo = distinct[0];
  const hi = distinct[distinct.length - 1];
  const ints = distinct.every(Number.isInteger);
  const scale = lo > 0 && ints && hi / lo >= 4 ? 'log2' : lo > 0 && !ints && hi / lo >= 100 ? 'log10' : 'lin';
  return { scale, names: null, splits: distinct.length <= 12 ? distinct : null, xOf: (t) => Number(t.params?.[key] ?? NaN) };
}

export const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777', '#4b5563', '#65a30d'];

// A titled card holding one uPlot chart. update(data, seriesDefs, scales)
// rebuilds the chart when the series change and only sets data otherwise.
export class Chart {
  constructor({ id, title, height = 240, xLabel, yLabel, y2Label, xLog2 = false, xTime = false, xMinSpan = 0, xInt = false, yLog = false, controls = [] }) {
    this.opts = { height, xLabel, yLabel, y2Label, xLog2, xTime, xMinSpan, xInt, yLog };
    this.plot = null;
    this.key = '';
    this.note = h('span', { class: 'note' });
    this.box = h('div', { class: 'chart-box' });
    this.el = h('div', { class: 'card chart', id },
      h('div', { class: 'card-head' }, h('h3', {}, title), ...controls, this.note), this.box);
    this.ro = new ResizeObserver(() => {
      if (this.plot) this.plot.setSize({ width: this.width(), height: this.opts.height });
    });
    this.ro.observe(this.box);
  }

  width() { return Math.max(200, this.box.clientWidth || 400); }

  setNote(text) { this.note.textContent = text; }

  // series: [{label, color, dash, points, y2}] (x excluded); data: [xs, ...ys].
  // A series with y2 uses a second y axis on the right (o.y2Label).
  // x: an axis from describeX (scale, ticks at actual values, category names);
  // yRange: fixed y limits ([0, 1] for accuracies).
  update(data, series, { xLog2 = this.opts.xLog2, x = null, yRange = null } = {}) {
    // uPlot spreads a single time point over years: give it a minute before.
    if (this.opts.xTime && data[0].length === 1) data = data.map((a, i) => (i === 0 ? [a[0] - 60, a[0]] : [null, a[0]]));
    const xScale = x ? x.scale : xLog2 ? 'log2' : 'lin';
    const key = JSON.stringify([series.map((s) => [s.label, s.color, s.dash, s.points, s.y2]), xScale, x?.splits, x?.names,
      yRange, this.opts.xLabel, this.opts.yLabel, this.opts.xInt]);
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    this.key = key;
    if (this.plot) this.plot.destroy();
    // For tests and readers of the DOM: the x scale, its fixed ticks, the y limits.
    this.el.dataset.xscale = x ? x.scale : xLog2 ? 'log2' : 'lin';
    this.el.dataset.xticks = x?.splits ? x.splits.map((v) => (x.names ? x.names[v] : paramTick(v))).join(',') : '';
    this.el.dataset.yrange = yRange ? yRange.join(',') : '';
    const o = this.opts;
    // A time axis over a few seconds of samples would otherwise span years.
    const xRange = o.xMinSpan ? (u, min, max) => [Math.min(min, max - o.xMinSpan), max] : undefined;
    const axis = { stroke: '#555', grid: { stroke: '#eee' } };
    // Ticks at the values the trials have (widths 32/64, not 40/50/60), named
    // for categories; a log10 axis reads 1e-3.
    const xTicks = x?.splits ? {
      splits: () => x.splits,
      filter: (u, splits) => splits, // a log axis would label only every other power
      values: (u, splits) => splits.map((v) => (x.names ? x.names[v] ?? '' : paramTick(v))),
    } : xScale === 'log10' ? { values: (u, splits) => splits.map(paramTick) } : null;
    const xScaleOpts = o.xTime ? { time: true, range: xRange }
      : xScale === 'log2' ? { time: false, distr: 3, log: 2 }
        : xScale === 'log10' ? { time: false, distr: 3, log: 10 }
          : x?.names ? { time: false, range: () => [-0.5, x.names.length - 0.5] } : { time: false };
    const xAxis = { ...axis, label: o.xLabel, ...(o.xTime ? { space: 70, values: timeTicks } : xTicks || (xScale === 'log2' ? {} : { values: tickValues })),
      ...(o.xInt && !xTicks ? { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] } : {}) };
    this.plot = new uPlot({
      width: this.width(),
      height: o.height,
      scales: {
        x: xScaleOpts,
        y: o.yLog ? { distr: 3 } : yRange ? { range: () => yRange } : {},
        y2: {},
      },
      axes: [
        xAxis,
        { ...axis, label: o.yLabel, size: 60, values: tickValues },
        ...(series.some((s) => s.y2) ? [{ ...axis, scale: 'y2', label: o.y2Label, side: 1, size: 56, values: tickValues, grid: { show: false } }] : []),
      ],
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
      series: [
        { label: o.xLabel || 'x' },
        ...series.map((s, i) => ({
          label: s.label,
          scale: s.y2 ? 'y2' : 'y',
          stroke: s.color || PALETTE[i % PALETTE.length],
          width: s.points ? 0 : 2,
          dash: s.dash,
          spanGaps: true,
          points: s.points ? { show: true, size: 4, width: 0, fill: s.color || PALETTE[i % PALETTE.length] } : { show: data[0].length < 60 },
        })),
      ],
    }, data, this.box);
    this.el.dataset.drawn = '1';
  }

  destroy() {
    this.ro.disconnect();
    if (this.plot) this.plot.destroy();
  }
}

// Groups trials into series by `seriesKey` and aggregates `y` per x value.
// agg: 'best' (max, or min if mode is 'min') | 'mean'. Returns uPlot data,
// the series labels and per-series trial/point counts (for tests and notes).
export function groupByX(trials, { xKey, xOf = (t) => Number(t.params?.[xKey]), seriesKey, y, agg = 'mean', mode = 'max' }) {
  const groups = new Map(); // series -> Map(x -> {sum, n, best})
  const xs = new Set();
  for (const t of trials) {
    const x = xOf(t);
    const v = y(t);
    if (!Number.isFinite(x) || typeof v !== 'number' || !Number.isFinite(v)) continue;
    const s = seriesKey ? String(t.params?.[seriesKey]) : 'all';
    let g = groups.get(s);
    if (!g) groups.set(s, (g = { byX: new Map(), trials: 0 }));
    g.trials++;
    let c = g.byX.get(x);
    if (!c) g.byX.set(x, (c = { sum: 0, n: 0, best: v }));
    c.sum += v;
    c.n++;
    c.best = mode === 'min' ? Math.min(c.best, v) : Math.max(c.best, v);
    xs.add(x);
  }
  const xArr = [...xs].sort((a, b) => a - b);
  const labels = [...groups.keys()].sort(naturalOrder);
  const data = [xArr];
  const stats = {};
  for (const s of labels) {
    const g = groups.get(s);
    data.push(xArr.map((x) => {
      const c = g.byX.get(x);
      return c ? (agg === 'best' ? c.best : c.sum / c.n) : null;
    }));
    stats[s] = { trials: g.trials, points: g.byX.size };
  }
  return { data, labels, stats };
}

// Numbers by value, everything else alphabetically.
export function naturalOrder(a, b) {
  const x = Number(a);
  const y = Number(b);
  if (a !== '' && b !== '' && Number.isFinite(x) && Number.isFinite(y)) return x - y;
  return String(a).localeCompare(String(b));
}
