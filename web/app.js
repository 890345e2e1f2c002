/* app.js — the dashboard's entry point: hash routing, the header (connection
 * state, bearer-token dialog) and the life cycle of views.
 *
 * Routes: #/ overview, #/jobs (with ?status=&kind=&backend=&label=&limit=),
 * #/jobs/<id>, #/submit (with ?preset= or ?from=<job id>), #/perf. A view
 * module exports mount(root, {params, query}) and returns an unmount
 * function that stops its polling and destroys its charts. On every route
 * change the old view is unmounted, the new one mounted, the nav link marked
 * with aria-current and focus moved to the new page's heading so keyboard
 * and screen-reader users land on it. When the colour scheme changes the
 * view is mounted again so its charts pick up the new colours.
 */
import {getToken, setToken, onConnection, onAuthNeeded} from './js/api.js';
import {h, clear} from './js/dom.js';
import {parseHash} from './js/route.js';
import * as overview from './js/views/overview.js';
import * as jobs from './js/views/jobs.js';
import * as detail from './js/views/detail.js';
import * as submit from './js/views/submit.js';
import * as perf from './js/views/perf.js';

const ROUTES = [
  {re: /^\/?$/, view: overview, nav: 'overview', title: 'Overview'},
  {re: /^\/jobs\/?$/, view: jobs, nav: 'jobs', title: 'Jobs'},
  {re: /^\/jobs\/([^/]+)$/, view: detail, nav: 'jobs', title: 'Job', keys: ['id']},
  {re: /^\/submit\/?$/, view: submit, nav: 'submit', title: 'Submit'},
  {re: /^\/perf\/?$/, view: perf, nav: 'perf', title: 'Performance'},
];

const main = document.getElementById('main');
let unmount = null;
let currentKey = null;
let firstRoute = true;

function notFound(path) {
  return (root) => {
    root.append(h('div', {class: 'page-head'}, h('h1', {tabindex: '-1'}, 'Not found')),
      h('p', null, `There is no page ${path}. `, h('a', {href: '#/'}, 'Back to the overview.')));
    return () => {};
  };
}

function route(force) {
  const {path, query} = parseHash(location.hash);
  const key = location.hash;
  if (!force && key === currentKey) return;
  currentKey = key;
  let match = null;
  let params = {};
  for (const r of ROUTES) {
    const m = path.match(r.re);
    if (m) {
      match = r;
      (r.keys || []).forEach((k, i) => { params[k] = decodeURIComponent(m[i + 1]); });
      break;
    }
  }
  if (unmount) { try { unmount(); } catch (e) { console.warn(e); } }
  clear(main);
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (match && a.dataset.nav === match.nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const mount = match ? match.view.mount : notFound(path);
  document.title = (match ? match.title + (params.id ? ' ' + params.id : '') : 'Not found') + ' · Tessel';
  unmount = mount(main, {params, query}) || null;
  /* The first page load leaves focus alone (Tab then starts at the skip
   * link); later navigations move it to the new page's heading. */
  const h1 = main.querySelector('h1');
  if (h1) h1.setAttribute('tabindex', '-1');
  if (h1 && !force && !firstRoute) {
    h1.focus({preventScroll: true});
  }
  if (!force && !firstRoute) window.scrollTo(0, 0);
  firstRoute = false;
}

/* ---- header: connection state and token ---------------------------------- */
function setupHeader() {
  /* The skip link must not change the hash (that is the router's). */
  document.getElementById('skip-link').addEventListener('click', (e) => {
    e.preventDefault();
    const h1 = main.querySelector('h1');
    (h1 || main).focus();
  });
  const conn = document.getElementById('conn');
  onConnection((online) => {
    conn.textContent = online ? 'connected' : 'offline';
    conn.className = 'conn ' + (online ? 'online' : 'offline');
  });
  const dlg = document.getElementById('token-dialog');
  const input = document.getElementById('token-input');
  const btn = document.getElementById('token-btn');
  const banner = document.getElementById('banner');
  const label = () => { btn.textContent = getToken() ? 'Token ✓' : 'Token'; };
  label();
  btn.addEventListener('click', () => { input.value = getToken(); dlg.showModal(); input.focus(); });
  document.getElementById('token-cancel').addEventListener('click', () => dlg.close());
  document.getElementById('token-clear').addEventListener('click', () => {
    setToken(''); input.value = ''; label(); dlg.close(); route(true);
  });
  document.getElementById('token-form').addEventListener('submit', () => {
    setToken(input.value.trim()); label(); banner.hidden = true; route(true);
  });
  onAuthNeeded((err) => {
    clear(banner);
    banner.append(h('strong', null, 'The service asks for a bearer token. '), err.message + ' ',
      h('button', {type: 'button', class: 'btn btn-sm', onclick: () => btn.click()}, 'Enter token'));
    banner.hidden = false;
  });
}

setupHeader();
window.addEventListener('hashchange', () => route(false));
window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => route(true));

/* Chart.js loads with `defer` and so is ready before this module runs; the
 * check keeps a slow or missing vendor file from breaking the whole page. */
if (typeof window.Chart !== 'function') console.warn('Chart.js did not load: charts are off');
route(false);
