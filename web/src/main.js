// Dashboard entry: hash routing between pages; each page returns a dispose().
import 'uplot/dist/uPlot.min.css';
import './app.css';
import { events } from './api.js';
import { h } from './format.js';
import { experimentsPage } from './pages/experiments.js';
import { experimentPage } from './pages/experiment.js';
import { workersPage } from './pages/workers.js';
import { comparePage, trialPage } from './pages/trial.js';

const routes = [
  [/^#?\/?$/, 'experiments', () => experimentsPage()],
  [/^#\/experiments\/([^/]+)$/, 'experiments', (m) => experimentPage(decodeURIComponent(m[1]))],
  [/^#\/workers$/, 'workers', () => workersPage()],
  [/^#\/trials\/(\d+)$/, 'experiments', (m) => trialPage(m[1])],
  [/^#\/compare$/, 'experiments', () => comparePage((location.hash.match(/[?&]ids=([\d,]+)/)?.[1] || '').split(',').filter(Boolean))],
];

let dispose = null;

function route() {
  const view = document.getElementById('view');
  if (dispose) dispose();
  dispose = null;
  view.replaceChildren();
  const hash = (location.hash || '#/').split('?')[0];
  for (const [re, nav, page] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.dataset.nav === nav);
    const { el, dispose: d } = page(m);
    view.append(el);
    dispose = d;
    return;
  }
  view.append(h('p', { class: 'error' }, `No page at ${hash}. `, h('a', { href: '#/' }, 'Experiments')));
}

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', () => {
  events.start();
  route();
});
