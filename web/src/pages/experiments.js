// The experiments list: status, counts bar, best, created.
import { api, events } from '../api.js';
import { countsBar, dateTime, h, num, relTime, STATUSES, statusBadge, throttle } from '../format.js';

export function experimentsPage() {
  const body = h('tbody');
  const msg = h('p', { class: 'muted' }, 'Loading experiments…');
  const el = h('section', { class: 'page' },
    h('h1', {}, 'Experiments'),
    msg,
    h('table', { class: 'grid', id: 'experiments' },
      h('thead', {}, h('tr', {}, ['Name', 'Status', 'Method', 'Trials', 'Progress', 'Best', 'Created'].map((c) => h('th', {}, c)))),
      body));

  let stopped = false;
  async function load() {
    try {
      const { experiments = [] } = await api.experiments();
      if (stopped) return;
      msg.textContent = experiments.length ? '' : 'No experiments yet — submit one with `dnnlab submit SWEEP`.';
      body.replaceChildren(...experiments.map(row));
    } catch (e) {
      msg.className = 'error';
      msg.textContent = e.message;
    }
  }
  const refresh = throttle(load, 1000);
  const off = events.on((ev) => {
    if (ev.type.startsWith('trial.') && ev.type !== 'trial.epoch') refresh();
    else if (ev.type.startsWith('experiment.') || ev.type === 'poll') refresh();
  });
  load();
  return { el, dispose: () => { stopped = true; off(); refresh.cancel(); } };
}

function row(x) {
  const c = x.counts || {};
  const done = (c.finished || 0) + (c.pruned || 0) + (c.failed || 0) + (c.cancelled || 0);
  const total = x.planned || c.total || STATUSES.reduce((s, k) => s + (c[k] || 0), 0);
  const best = x.best && typeof x.best === 'object' ? x.best.value ?? x.best.val_acc : x.best;
  const tr = h('tr', { class: 'link', 'data-id': x.id, onclick: () => { location.hash = `#/experiments/${encodeURIComponent(x.id)}`; } },
    h('td', {}, h('a', { href: `#/experiments/${encodeURIComponent(x.id)}` }, x.name || x.id)),
    h('td', {}, statusBadge(x.status)),
    h('td', {}, x.method || '—'),
    h('td', { class: 'num' }, `${num(done)} / ${num(total)}`),
    h('td', { class: 'bar-cell' }, countsBar(c, x.planned)),
    h('td', { class: 'num' }, num(best)),
    h('td', { title: dateTime(x.created_at) }, relTime(x.created_at)));
  return tr;
}
