// The live trial table: server-side sort, status filter and paging, so only
// one page of rows is ever fetched or rendered (fast at 100,000 trials).
// While the parallel coordinates are brushed it shows the brushed trials
// instead, sorted and paged here. Downloads (CSV, JSON) hold every row the
// table's sort and filter give, not only the page.
import { api } from './api.js';
import { dateTime, h, num, STATUSES, statusBadge } from './format.js';
import { naturalOrder } from './plots.js';

// How a parameter column is named in ?sort=; the API sorts by params.<name>.
export const paramSortKey = (name) => `params.${name}`;

const METRIC_COLS = [
  ['val_acc', 'val acc'], ['val_loss', 'val loss'], ['train_acc', 'train acc'], ['train_loss', 'train loss'],
  ['test_acc', 'test acc'], ['epochs_done', 'epochs'], ['seconds', 'seconds'],
];

// A trial's value of a sort key (a column or params.NAME), for local sorting and downloads.
const valueOf = (t, key) => (key.startsWith('params.') ? t.params?.[key.slice(7)] : t[key]);

function toCsv(rows, params) {
  const cols = ['id', 'index', 'status', ...params.map((p) => `params.${p}`), 'seed', 'attempt', 'worker',
    ...METRIC_COLS.map(([k]) => k), 'started_at', 'finished_at', 'error'];
  const cell = (v) => {
    const s = v === null || v === undefined ? '' : String(v);
    return /[",\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
  };
  return [cols.join(','), ...rows.map((t) => cols.map((c) => cell(valueOf(t, c))).join(','))].join('\n') + '\n';
}

function save(name, type, text) {
  const a = h('a', { href: URL.createObjectURL(new Blob([text], { type })), download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

// Parameters print as written in the sweep file (0.0001, not 1.00e-4).
export const paramText = (v) => (v === null || v === undefined ? '—' : typeof v === 'number' ? String(+v.toPrecision(6)) : String(v));

export class TrialTable {
  constructor({ experimentId, parameters, metric, onSelect, pageSize = 50 }) {
    this.id = experimentId;
    this.parameters = parameters;
    this.local = null; // the brushed trials, when the parallel coordinates are brushed
    this.state = { sort: 'index', order: 'asc', status: '', offset: 0, limit: pageSize };
    this.selected = new Set();
    this.onSelect = onSelect;
    this.seq = 0;
    this.total = 0;
    this.rows = [];
    this.columns = [
      // The store-wide trial id, as the workers page and /api/trials/{id} name it.
      { key: 'id', label: 'trial', get: (t) => t.id, cls: 'num', render: (t) => h('a', { href: `#/trials/${t.id}`, onclick: (e) => e.stopPropagation() }, String(t.id)) },
      { key: 'index', label: 'index', get: (t) => t.index, cls: 'num' },
      { key: 'status', label: 'status', get: (t) => t.status, render: (t) => h('span', {},
        statusBadge(t.status),
        t.provisional ? h('span', { class: 'muted small', title: 'a browser result no native re-run has checked: shown, never ranked' }, ' unverified') : null,
        t.error ? h('div', { class: 'error-text small' }, t.error) : null) },
      ...parameters.map((p) => ({ key: paramSortKey(p), label: p, get: (t) => t.params?.[p], fmt: paramText, cls: 'param' })),
      ...METRIC_COLS.map(([k, label]) => ({ key: k, label: k === metric ? `${label} ★` : label,
        // A trial that ended before its first epoch has no time, not 0 s.
        get: (t) => (k === 'seconds' && !(t.seconds > 0) ? null : t[k]), cls: 'num' })),
      { key: 'worker', label: 'worker', get: (t) => t.worker, cls: 'mono' },
      { key: 'finished_at', label: 'finished', get: (t) => t.finished_at, fmt: dateTime },
    ];

    this.filter = h('select', { id: 'status-filter', onchange: () => { this.state.status = this.filter.value; this.state.offset = 0; this.load(); } },
      h('option', { value: '' }, 'all statuses'), ...STATUSES.map((s) => h('option', { value: s }, s)));
    this.info = h('span', { class: 'muted', id: 'table-info' });
    this.pager = h('span', { class: 'pager' });
    this.head = h('tr');
    this.body = h('tbody');
    this.table = h('table', { class: 'grid trials', id: 'trials' }, h('thead', {}, this.head), this.body);
    this.compare = h('a', { class: 'button hidden', id: 'compare' }, 'compare');
    this.el = h('div', { class: 'card' },
      h('div', { class: 'card-head' }, h('h3', {}, 'Trials'), this.filter, this.info, this.pager,
        h('span', { class: 'muted small' }, 'click rows to plot and compare them'), this.compare,
        h('span', { class: 'downloads' }, 'download ',
          h('button', { id: 'download-csv', onclick: () => this.download('csv') }, 'CSV'),
          h('button', { id: 'download-json', onclick: () => this.download('json') }, 'JSON'))),
      h('div', { class: 'table-wrap' }, this.table));
    this.renderHead();
  }

  renderHead() {
    this.head.replaceChildren(...this.columns.map((c) => {
      const active = this.state.sort === c.key;
      if (c.unsortable || (c.cls === 'param' && this.paramSortRefused)) {
        return h('th', { class: c.cls || '', 'data-key': c.key, title: `not sortable here: ${this.paramSortRefused}` }, c.label);
      }
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

  // Shows only these trials (the brushed ones), or the server's pages again (null).
  setLocal(trials) {
    this.local = trials;
    this.state.offset = 0;
    this.load();
  }

  // The table's rows under its sort and filter: all brushed ones, or the server's.
  sortedLocal() {
    const { sort, order, status } = this.state;
    const dir = order === 'desc' ? -1 : 1;
    return this.local.filter((t) => !status || t.status === status).sort((a, b) => {
      const x = valueOf(a, sort);
      const y = valueOf(b, sort);
      if (x === y) return a.index - b.index;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return naturalOrder(x, y) * dir;
    });
  }

  async allRows() {
    if (this.local) return this.sortedLocal();
    const out = [];
    for (let offset = 0; ; offset += 1000) {
      const r = await api.trials(this.id, { ...this.state, offset, limit: 1000 });
      out.push(...(r.trials || []));
      if (!r.trials?.length || out.length >= r.total) return out;
    }
  }

  async download(kind) {
    let rows;
    try {
      rows = await this.allRows();
    } catch (e) {
      this.info.className = 'error';
      this.info.textContent = `download failed: ${e.message}`;
      return;
    }
    const name = `experiment-${this.id}-trials.${kind}`;
    if (kind === 'csv') save(name, 'text/csv', toCsv(rows, this.parameters));
    else save(name, 'application/json', JSON.stringify(rows, null, 1));
  }

  async load(first = null) {
    const seq = ++this.seq;
    if (this.local) {
      const rows = this.sortedLocal();
      this.total = rows.length;
      this.rows = rows.slice(this.state.offset, this.state.offset + this.state.limit);
      this.rowsSort = `${this.state.sort} ${this.state.order}`;
      this.render();
      return;
    }
    // The order these rows come in (the header changes at the click, the rows
    // when the server answers): the table's data-sort says which one is shown.
    const asked = first ? 'index asc' : `${this.state.sort} ${this.state.order}`;
    try {
      const r = await (first || api.trials(this.id, this.state));
      if (seq !== this.seq) return;
      this.total = r.total ?? r.trials.length;
      this.rows = r.trials || [];
      this.rowsSort = asked;
      this.render();
    } catch (e) {
      if (seq !== this.seq) return;
      // A server that cannot sort by parameters says 400: keep the old order,
      // and say why (never a silent failure).
      if (e.status === 400 && this.state.sort.startsWith('params.') && this.prevSort) {
        this.paramSortRefused = e.message;
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
          if (c.render) return h('td', { class: c.cls || '' }, c.render(t));
          const v = c.get(t);
          return h('td', { class: c.cls || '' }, c.fmt ? c.fmt(v) : num(v));
        }));
      tr.addEventListener('click', () => this.toggle(String(t.id)));
      return tr;
    }));
    const pages = Math.max(1, Math.ceil(this.total / limit));
    const pageNo = Math.floor(offset / limit) + 1;
    this.info.className = 'muted';
    this.info.textContent = this.total
      ? `${num(offset + 1)}–${num(offset + this.rows.length)} of ${num(this.total)}${this.local ? ' brushed' : ''}`
      : 'no trials match';
    if (this.paramSortRefused) this.info.title = `parameter columns cannot be sorted: ${this.paramSortRefused}`;
    const btn = (label, d, disabled) => h('button', { onclick: () => this.page(d), disabled }, label);
    this.pager.replaceChildren(btn('«', 'first', pageNo <= 1), btn('‹', -1, pageNo <= 1),
      h('span', {}, ` page ${num(pageNo)} / ${num(pages)} `), btn('›', 1, pageNo >= pages), btn('»', 'last', pageNo >= pages));
    this.table.dataset.rows = String(this.rows.length);
    this.table.dataset.sort = this.rowsSort || '';
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
    this.compare.classList.toggle('hidden', this.selected.size < 2);
    this.compare.href = `#/compare?ids=${[...this.selected].join(',')}`;
    this.compare.textContent = `compare ${this.selected.size}`;
    this.onSelect([...this.selected]);
  }
}
