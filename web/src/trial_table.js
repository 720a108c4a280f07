// The live trial table: server-side sort, status filter and paging, so only
// one page of rows is ever fetched or rendered (fast at 100,000 trials).
import { api } from './api.js';
import { dateTime, h, num, STATUSES, statusBadge } from './format.js';

// How a parameter column is named in ?sort=; the API sorts by params.<name>.
export const paramSortKey = (name) => `params.${name}`;

const METRIC_COLS = [
  ['val_acc', 'val acc'], ['val_loss', 'val loss'], ['train_acc', 'train acc'], ['train_loss', 'train loss'],
  ['test_acc', 'test acc'], ['epochs_done', 'epochs'], ['seconds', 'seconds'],
];

// Parameters print as written in the sweep file (0.0001, not 1.00e-4).
export const paramText = (v) => (v === null || v === undefined ? '—' : typeof v === 'number' ? String(+v.toPrecision(6)) : String(v));

export class TrialTable {
  constructor({ experimentId, parameters, metric, onSelect, pageSize = 50 }) {
    this.id = experimentId;
    this.state = { sort: 'index', order: 'asc', status: '', offset: 0, limit: pageSize };
    this.selected = new Set();
    this.onSelect = onSelect;
    this.seq = 0;
    this.total = 0;
    this.rows = [];
    this.columns = [
      { key: 'index', label: '#', get: (t) => t.index, cls: 'num' },
      { key: 'status', label: 'status', get: (t) => t.status, render: (t) => (t.provisional
        ? h('span', { title: 'a browser result no native re-run has checked: shown, never ranked' }, statusBadge(t.status), ' ', h('span', { class: 'muted small' }, 'unverified'))
        : statusBadge(t.status)) },
      ...parameters.map((p) => ({ key: paramSortKey(p), label: p, get: (t) => t.params?.[p], fmt: paramText, cls: 'param' })),
      ...METRIC_COLS.map(([k, label]) => ({ key: k, label: k === metric ? `${label} ★` : label, get: (t) => t[k], cls: 'num' })),
      { key: 'worker', label: 'worker', get: (t) => t.worker, cls: 'mono', unsortable: true },
      { key: 'finished_at', label: 'finished', get: (t) => t.finished_at, fmt: dateTime },
    ];

    this.filter = h('select', { id: 'status-filter', onchange: () => { this.state.status = this.filter.value; this.state.offset = 0; this.load(); } },
      h('option', { value: '' }, 'all statuses'), ...STATUSES.map((s) => h('option', { value: s }, s)));
    this.info = h('span', { class: 'muted', id: 'table-info' });
    this.pager = h('span', { class: 'pager' });
    this.head = h('tr');
    this.body = h('tbody');
    this.table = h('table', { class: 'grid trials', id: 'trials' }, h('thead', {}, this.head), this.body);
    this.el = h('div', { class: 'card' },
      h('div', { class: 'card-head' }, h('h3', {}, 'Trials'), this.filter, this.info, this.pager,
        h('span', { class: 'muted small' }, 'click rows to plot their learning curves')),
      h('div', { class: 'table-wrap' }, this.table));
    this.renderHead();
  }

  renderHead() {
    this.head.replaceChildren(...this.columns.map((c) => {
      const active = this.state.sort === c.key;
      if (c.unsortable || (c.cls === 'param' && this.paramSortRefused)) return h('th', { class: c.cls || '', 'data-key': c.key }, c.label);
      return h('th', {
        class: `sortable ${active ? `sorted ${this.state.order}` : ''} ${c.cls || ''}`,
        'data-key': c.key,
        title: `sort by ${c.label}`,
        onclick: () => this.sortBy(c.key),
      }, c.label, active ? (this.state.order === 'asc' ? ' ▲' : ' ▼') : '');
    }));
  }

  sortBy(key) {
    this.prevSort = { sort: this.state.sort, order: this.state.order };
    if (this.state.sort === key) this.state.order = this.state.order === 'asc' ? 'desc' : 'asc';
    else { this.state.sort = key; this.state.order = key === 'index' ? 'asc' : 'desc'; }
    this.state.offset = 0;
    this.renderHead();
    this.load();
  }

  page(delta) {
    const last = Math.max(0, Math.ceil(this.total / this.state.limit) - 1) * this.state.limit;
    this.state.offset = delta === 'first' ? 0 : delta === 'last' ? last
      : Math.min(last, Math.max(0, this.state.offset + delta * this.state.limit));
    this.load();
  }

  // Re-reads the current page; stale responses are dropped.
  static firstPage(id, pageSize = 50) {
    return api.trials(id, { sort: 'index', order: 'asc', offset: 0, limit: pageSize });
  }

  async load(first = null) {
    const seq = ++this.seq;
    try {
      const r = await (first || api.trials(this.id, this.state));
      if (seq !== this.seq) return;
      this.total = r.total ?? r.trials.length;
      this.rows = r.trials || [];
      this.render();
    } catch (e) {
      if (seq !== this.seq) return;
      // A server that cannot sort by parameters says 400: keep the old order.
      if (e.status === 400 && this.state.sort.startsWith('params.') && this.prevSort) {
        this.paramSortRefused = true;
        Object.assign(this.state, this.prevSort);
        this.renderHead();
        this.load();
        return;
      }
      this.info.className = 'error';
      this.info.textContent = e.message;
    }
  }

  render() {
    const { offset, limit } = this.state;
    this.body.replaceChildren(...this.rows.map((t) => {
      const tr = h('tr', { 'data-id': t.id, 'data-status': t.status, class: this.selected.has(String(t.id)) ? 'selected' : '' },
        ...this.columns.map((c) => {
          if (c.render) return h('td', {}, c.render(t));
          const v = c.get(t);
          return h('td', { class: c.cls || '' }, c.fmt ? c.fmt(v) : num(v));
        }));
      tr.addEventListener('click', () => this.toggle(String(t.id)));
      if (t.error) tr.title = t.error;
      return tr;
    }));
    const pages = Math.max(1, Math.ceil(this.total / limit));
    const pageNo = Math.floor(offset / limit) + 1;
    this.info.className = 'muted';
    this.info.textContent = this.total
      ? `${num(offset + 1)}–${num(offset + this.rows.length)} of ${num(this.total)}`
      : 'no trials match';
    const btn = (label, d, disabled) => h('button', { onclick: () => this.page(d), disabled }, label);
    this.pager.replaceChildren(btn('«', 'first', pageNo <= 1), btn('‹', -1, pageNo <= 1),
      h('span', {}, ` page ${num(pageNo)} / ${num(pages)} `), btn('›', 1, pageNo >= pages), btn('»', 'last', pageNo >= pages));
    this.table.dataset.rows = String(this.rows.length);
    this.table.dataset.total = String(this.total);
    if (!this.marked) {
      this.marked = true;
      performance.mark('dnnlab:table');
    }
  }

  // Selection is kept by id (as a string) across pages and refreshes.
  toggle(id) {
    if (this.selected.has(id)) this.selected.delete(id);
    else {
      if (this.selected.size >= 10) this.selected.delete(this.selected.values().next().value);
      this.selected.add(id);
    }
    for (const row of this.body.children) row.classList.toggle('selected', this.selected.has(row.dataset.id));
    this.onSelect([...this.selected]);
  }
}
