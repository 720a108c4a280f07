// Parallel coordinates on a plain canvas: one axis per parameter plus the
// metric; numeric axes (log when the range spans >2 decades), categorical
// axes spaced evenly. Drag along an axis to brush a range; double-click clears.
// A brush redraws once per frame while dragging (25,000 lines stay smooth)
// and reports the trials it keeps when the drag ends (onBrush).
import { h, num } from './format.js';
import { paramTick as tick } from './plots.js';

const BUCKETS = 16;
const DRAG_LINES = 4000;
// From poor (warm) to good (cool); bucket colours for batching the strokes.
const RAMP = Array.from({ length: BUCKETS }, (_, i) => {
  const t = i / (BUCKETS - 1);
  return `hsl(${Math.round(10 + 200 * t)}, 75%, ${Math.round(52 - 10 * t)}%)`;
});

function describeAxis(name, values) {
  const present = values.filter((v) => v !== undefined && v !== null);
  const numeric = present.length > 0 && present.every((v) => typeof v === 'number' && Number.isFinite(v));
  if (numeric) {
    let min = Infinity;
    let max = -Infinity;
    for (const v of present) { if (v < min) min = v; if (v > max) max = v; }
    const log = min > 0 && max / min > 100;
    const f = log ? Math.log : (v) => v;
    const lo = f(min);
    const span = f(max) - lo || 1;
    return { name, kind: 'num', min, max, log, pos: (v) => (typeof v === 'number' ? (f(v) - lo) / span : NaN) };
  }
  const cats = [...new Set(present.map(String))].sort();
  const idx = new Map(cats.map((c, i) => [c, i]));
  return { name, kind: 'cat', cats, pos: (v) => (idx.has(String(v)) ? (cats.length === 1 ? 0.5 : idx.get(String(v)) / (cats.length - 1)) : NaN) };
}

export class ParCoords {
  constructor({ id, title, height = 300, onBrush = () => {} }) {
    this.height = height;
    this.onBrush = onBrush;
    this.count = h('span', { class: 'brush-count', id: 'brush-count' });
    this.canvas = h('canvas', { class: 'parcoords' });
    this.note = h('span', { class: 'note' });
    this.el = h('div', { class: 'card chart', id },
      h('div', { class: 'card-head' }, h('h3', {}, title), h('span', { class: 'muted small' }, 'drag on an axis to filter the table and plots · double-click to clear'), this.count, this.note),
      this.canvas);
    this.rows = [];
    this.axes = [];
    this.brush = new Map(); // axis index -> [lo, hi] in 0..1 (0 = bottom)
    this.drag = null;
    this.ro = new ResizeObserver(() => this.draw());
    this.ro.observe(this.el);
    this.canvas.addEventListener('mousedown', (e) => this.onDown(e));
    window.addEventListener('mousemove', (this.onMove = (e) => this.onDrag(e)));
    window.addEventListener('mouseup', (this.onUp = () => {
      if (!this.drag) return;
      this.drag = null;
      this.draw();
      this.report();
    }));
    this.canvas.addEventListener('dblclick', () => { this.brush.clear(); this.draw(); this.report(); });
  }

  // rows: [{values: [...per axis], metric}], names: axis names (last = metric).
  update(trials, params, metric, mode) {
    const names = [...params, metric];
    const get = (t, n, i) => (i === params.length ? t[metric] : t.params?.[n]);
    this.axes = names.map((n, i) => describeAxis(n, trials.map((t) => get(t, n, i))));
    if (this.axes.some((a, i) => a.name !== names[i])) this.brush.clear();
    this.trials = trials;
    this.rows = trials.map((t) => names.map((n, i) => this.axes[i].pos(get(t, n, i))));
    const m = this.axes[this.axes.length - 1];
    this.colorOf = (r) => {
      const p = r[r.length - 1];
      if (!Number.isFinite(p)) return 0;
      const good = mode === 'min' ? 1 - p : p;
      return Math.min(BUCKETS - 1, Math.max(0, Math.floor(good * BUCKETS)));
    };
    this.el.dataset.lines = String(this.rows.length);
    this.el.dataset.axes = names.join(',');
    this.setNote(`${this.rows.length.toLocaleString('en-US')} trials${m.kind === 'num' ? ` · ${metric} ${num(m.min)}–${num(m.max)}` : ''}`);
    this.draw();
  }

  setNote(t) { this.note.textContent = t; }

  kept(r) {
    for (const [i, [lo, hi]] of this.brush) if (!(r[i] >= lo && r[i] <= hi)) return false;
    return true;
  }

  // Tells the page which trials the brush keeps (null: no brush).
  report() {
    const kept = this.brush.size ? this.trials.filter((_, k) => this.kept(this.rows[k])) : null;
    this.count.textContent = kept ? `${kept.length.toLocaleString('en-US')} of ${this.rows.length.toLocaleString('en-US')} selected` : '';
    this.el.dataset.selected = kept ? String(kept.length) : '';
    this.onBrush(kept);
  }

  // One redraw per frame however fast the mouse moves.
  drawSoon() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
  }

  layout() {
    const w = Math.max(300, this.el.clientWidth - 24);
    return { w, hgt: this.height, left: 30, right: 70, top: 24, bottom: 26 };
  }

  axisX(i, L) {
    const n = Math.max(1, this.axes.length - 1);
    return L.left + ((L.w - L.left - L.right) * i) / n;
  }

  draw() {
    const L = this.layout();
    const dpr = window.devicePixelRatio || 1;
    const c = this.canvas;
    c.style.width = `${L.w}px`;
    c.style.height = `${L.hgt}px`;
    c.width = Math.round(L.w * dpr);
    c.height = Math.round(L.hgt * dpr);
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, L.w, L.hgt);
    if (!this.axes.length) return;
    const H = L.hgt - L.top - L.bottom;
    const ys = (p) => L.top + (1 - p) * H;
    const xs = this.axes.map((_, i) => this.axisX(i, L));
    const paths = RAMP.map(() => new Path2D());
    const dimmed = new Path2D();
    let shown = 0;
    // While a brush is dragged, every k-th line is stroked (at most DRAG_LINES):
    // the full set is drawn when the drag ends.
    const step = this.drag ? Math.max(1, Math.ceil(this.rows.length / DRAG_LINES)) : 1;
    for (let k = 0; k < this.rows.length; k++) {
      const r = this.rows[k];
      const keep = this.kept(r);
      if (keep) shown++;
      if (k % step) continue;
      const p = keep ? paths[this.colorOf(r)] : dimmed;
      let started = false;
      for (let i = 0; i < r.length; i++) {
        if (!Number.isFinite(r[i])) { started = false; continue; }
        if (started) p.lineTo(xs[i], ys(r[i]));
        else p.moveTo(xs[i], ys(r[i]));
        started = true;
      }
    }
    const alpha = Math.max(0.04, Math.min(0.7, 40 / Math.sqrt(this.rows.length / step + 1) / 4));
    g.lineWidth = 1;
    g.globalAlpha = Math.min(0.15, alpha);
    g.strokeStyle = '#bbb';
    g.stroke(dimmed);
    g.globalAlpha = alpha;
    RAMP.forEach((col, i) => { g.strokeStyle = col; g.stroke(paths[i]); });
    g.globalAlpha = 1;
    this.el.dataset.shown = String(shown);
    g.font = '11px system-ui, sans-serif';
    this.axes.forEach((a, i) => {
      const x = xs[i];
      g.strokeStyle = '#333';
      g.beginPath(); g.moveTo(x, ys(0)); g.lineTo(x, ys(1)); g.stroke();
      g.fillStyle = '#111';
      g.textAlign = 'center';
      g.font = 'bold 11px system-ui, sans-serif';
      g.fillText(a.name, x, L.top - 10);
      g.font = '10px system-ui, sans-serif';
      g.fillStyle = '#444';
      // Tick labels sit right of the axis on a white halo (never clipped left).
      const label = (t, p) => {
        g.textAlign = 'left';
        g.lineWidth = 3;
        g.strokeStyle = 'rgba(255,255,255,0.9)';
        g.strokeText(t, x + 5, ys(p) + 3);
        g.fillText(t, x + 5, ys(p) + 3);
        g.lineWidth = 1;
      };
      if (a.kind === 'num') { label(tick(a.max), 1); label(tick(a.min), 0); }
      else if (a.cats.length <= 12) a.cats.forEach((cat) => label(cat, a.pos(cat)));
      const b = this.brush.get(i);
      if (b) {
        g.fillStyle = 'rgba(37,99,235,0.18)';
        g.fillRect(x - 6, ys(b[1]), 12, ys(b[0]) - ys(b[1]));
      }
    });
  }

  hit(e) {
    const L = this.layout();
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left;
    const p = 1 - (e.clientY - r.top - L.top) / (L.hgt - L.top - L.bottom);
    let best = -1;
    this.axes.forEach((_, i) => { if (Math.abs(this.axisX(i, L) - x) < 14) best = i; });
    return { axis: best, p: Math.max(0, Math.min(1, p)) };
  }

  onDown(e) {
    const { axis, p } = this.hit(e);
    if (axis < 0) return;
    this.drag = { axis, p0: p };
    e.preventDefault();
  }

  onDrag(e) {
    if (!this.drag) return;
    const { p } = this.hit(e);
    const { axis, p0 } = this.drag;
    if (Math.abs(p - p0) < 0.01) this.brush.delete(axis);
    else this.brush.set(axis, [Math.min(p, p0), Math.max(p, p0)]);
    this.drawSoon();
  }

  destroy() {
    this.ro.disconnect();
    cancelAnimationFrame(this.frame);
    window.removeEventListener('mousemove', this.onMove);
    window.removeEventListener('mouseup', this.onUp);
  }
}
