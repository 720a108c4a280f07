// Small formatting and DOM helpers shared by the pages.

// Seconds or milliseconds since the epoch, or an ISO string -> ms (or NaN).
export function toMillis(t) {
  if (t === null || t === undefined || t === '') return NaN;
  if (typeof t === 'number') return t < 1e12 ? t * 1000 : t;
  const n = Number(t);
  if (!Number.isNaN(n)) return toMillis(n);
  return Date.parse(t);
}

export function relTime(t, now = Date.now()) {
  const ms = toMillis(t);
  if (Number.isNaN(ms)) return '—';
  const s = Math.round((now - ms) / 1000);
  if (s < 0) return 'just now';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function dateTime(t) {
  const ms = toMillis(t);
  if (Number.isNaN(ms)) return '—';
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function num(v, digits = 4) {
  if (v === null || v === undefined || v === '') return '—';
  if (typeof v !== 'number') return String(v);
  if (Number.isInteger(v)) return v.toLocaleString('en-US');
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return v.toFixed(digits);
}

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

// Calls fn at most once per `ms`, always running the last call.
export function throttle(fn, ms) {
  let timer = null;
  let pending = false;
  let last = 0;
  const run = () => {
    timer = null;
    last = Date.now();
    pending = false;
    fn();
  };
  const wrapped = () => {
    pending = true;
    if (timer) return;
    timer = setTimeout(run, Math.max(0, last + ms - Date.now()));
  };
  wrapped.cancel = () => { clearTimeout(timer); timer = null; pending = false; };
  wrapped.pending = () => pending;
  return wrapped;
}

export const STATUSES = ['queued', 'running', 'finished', 'pruned', 'failed', 'cancelled'];

// A stacked bar of trial counts by status.
export function countsBar(counts = {}, planned) {
  const total = Math.max(planned || 0, STATUSES.reduce((s, k) => s + (counts[k] || 0), 0));
  const bar = h('div', { class: 'counts-bar', title: STATUSES.map((k) => `${k}: ${counts[k] || 0}`).join(', ') });
  for (const k of STATUSES) {
    const n = counts[k] || 0;
    if (n > 0 && total > 0) bar.append(h('span', { class: `seg st-${k}`, style: `width:${(100 * n) / total}%` }));
  }
  return bar;
}

export function statusBadge(status) {
  return h('span', { class: `badge st-${status}` }, status ?? '—');
}
