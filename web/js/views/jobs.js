/* jobs.js — the live jobs table.
 *
 * Filled by the API, kept in the address (#/jobs?…) so Back, reload and a
 * shared link show the same page: GET /v1/jobs with the filters (status,
 * kind, backend, exact label), the search `q=` (part of an id or label,
 * matched by the service over every job), the order `order_by=` with
 * `desc=` and a page size, polled every 750 ms. Paging follows the API's
 * cursors, which hold the order; the cursors of the pages before this one
 * are in the address (`cursors=c2,c3`), and each page is a history entry,
 * so Back returns to the page before. The total is the list's own `total`
 * (every job that matches, search included), for any filter.
 *
 * Rows are keyed by job id and only cells whose content changed are
 * rewritten, so a focused button keeps its focus while the table updates.
 * Cancel shows "canceling…" at the click, applies the job the API answers
 * at once, and polls every 250 ms until the job has ended. When the service
 * cannot be reached the rows are marked stale and their buttons disabled.
 * Delete asks for a second click; after it, focus goes to the next row (or
 * the one before, or the table). Status changes are announced to screen
 * readers. Under 680 px the table is shown as cards (style.css); explicit
 * table roles keep its semantics when CSS changes its display.
 */
import {jobsApi} from '../api.js';
import {h, clear, field, select, fmtMs, fmtAgo, fmtSize, fmtInt, statusBadge, isActive, backendText, poll,
  errorBox, announce, etaMs, STATUSES, KINDS, BACKENDS} from '../dom.js';
import {replaceQuery, parseHash} from '../route.js';

const PAGE_SIZES = ['10', '25', '50', '100'];
const SORTS = {created: 'desc', status: 'asc', kind: 'asc', duration: 'desc'};
const COLS = [
  {key: 'job', title: 'Job', sort: 'created'}, {key: 'kind', title: 'Kind', sort: 'kind'},
  {key: 'backend', title: 'Backend'}, {key: 'status', title: 'Status', sort: 'status'},
  {key: 'progress', title: 'Progress / time', sort: 'duration'}, {key: 'size', title: 'Size', num: true},
  {key: 'created', title: 'Created'}, {key: 'actions', title: 'Actions'},
];

export function mount(root, {query}) {
  const f = {
    status: STATUSES.includes(query.status) ? query.status : '',
    kind: KINDS.includes(query.kind) ? query.kind : '',
    backend: BACKENDS.includes(query.backend) ? query.backend : '',
    label: query.label || '',
    q: query.q || '',
    limit: PAGE_SIZES.includes(query.limit) ? query.limit : '25',
    sort: SORTS[query.sort] ? query.sort : 'created',
    dir: query.dir === 'asc' || query.dir === 'desc' ? query.dir : '',
  };
  if (!f.dir) f.dir = SORTS[f.sort];
  /* cursors[i] opens page i + 1; cursors[0] is null (the first page) */
  let cursors = [null, ...String(query.cursors || '').split(',').filter((c) => /^[A-Za-z0-9_-]{1,256}$/.test(c))];
  const rows = new Map();
  const lastStatus = new Map();
  const canceling = new Set();
  let first = true;
  let stale = false;

  const statusSel = select([['', 'any status'], ...STATUSES], f.status, {name: 'status'});
  const kindSel = select([['', 'any kind'], ...KINDS], f.kind, {name: 'kind'});
  const backendSel = select([['', 'any backend'], ...BACKENDS.filter((b) => b !== 'auto'), 'auto'], f.backend, {name: 'backend'});
  const searchIn = h('input', {type: 'search', name: 'q', value: f.q, placeholder: 'j_… or part of a label', maxlength: '100',
    autocomplete: 'off', spellcheck: 'false'});
  const limitSel = select(PAGE_SIZES, f.limit, {name: 'limit'});
  const clearBtn = h('button', {type: 'button', class: 'btn'}, 'Clear filters');
  const msg = h('div', {id: 'jobs-error'});
  const tbody = h('tbody', {role: 'rowgroup'});
  const empty = h('p', {class: 'empty', hidden: true}, 'No jobs match these filters.');
  const pageInfo = h('span', {class: 'muted', id: 'page-info', 'aria-live': 'polite'});
  const total = h('span', {class: 'total', id: 'jobs-total'});
  const newer = h('button', {type: 'button', class: 'btn', id: 'page-newer', disabled: true}, '← Newer');
  const older = h('button', {type: 'button', class: 'btn', id: 'page-older', disabled: true}, 'Older →');
  const updated = h('span', {class: 'muted', id: 'jobs-updated'});
  const ths = COLS.map((c) => {
    const th = h('th', {scope: 'col', role: 'columnheader', class: c.num ? 'num' : null, dataset: {col: c.key}});
    if (c.sort) {
      th.append(h('button', {type: 'button', class: 'sort', dataset: {sort: c.sort},
        onclick: () => setSort(c.sort)}, c.title, h('span', {'aria-hidden': 'true', class: 'arrow'})));
    } else th.append(c.title);
    return th;
  });
  const table = h('table', {id: 'jobs-table', role: 'table', tabindex: '-1'},
    h('caption', {class: 'sr-only'}, 'Jobs'),
    h('thead', {role: 'rowgroup'}, h('tr', {role: 'row'}, ths)), tbody);

  root.append(
    h('div', {class: 'page-head'}, h('h1', null, 'Jobs'), updated,
      h('div', {class: 'actions'}, h('a', {class: 'btn btn-primary', href: '#/submit'}, 'Submit a job'))),
    h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter jobs', onsubmit: (e) => { e.preventDefault(); onFilter(); }},
      field('Status', statusSel), field('Kind', kindSel), field('Backend', backendSel),
      field('Search', searchIn, f.label ? `and the exact label "${f.label}"` : null), field('Per page', limitSel),
      h('div', {class: 'field'}, clearBtn)),
    msg,
    h('div', {class: 'table-wrap'}, table),
    empty,
    h('nav', {class: 'pager', 'aria-label': 'Pages'}, total, pageInfo, newer, older));

  function pageNo() { return cursors.length; }

  function queryObj(page) {
    return {status: f.status, kind: f.kind, backend: f.backend, label: f.label, q: f.q,
      sort: f.sort === 'created' ? '' : f.sort, dir: f.dir === SORTS[f.sort] ? '' : f.dir,
      limit: f.limit === '25' ? '' : f.limit, page: page > 1 ? String(page) : '',
      cursors: page > 1 ? cursors.slice(1, page).join(',') : ''};
  }

  function markSort() {
    for (const th of ths) {
      const b = th.querySelector('.sort');
      if (!b) continue;
      const on = b.dataset.sort === f.sort;
      if (on) th.setAttribute('aria-sort', f.dir === 'asc' ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
      b.querySelector('.arrow').textContent = on ? (f.dir === 'asc' ? ' ↑' : ' ↓') : '';
    }
    table.querySelector('caption').textContent = `Jobs, sorted by ${f.sort === 'created' ? 'creation time' : f.sort}, ` +
      `${f.dir === 'asc' ? 'ascending' : 'descending'}`;
  }
  markSort();

  /* Filters and sort change the page in place (replaceState); paging makes
   * a history entry (the router mounts the view again on Back). */
  function resetPaging() { cursors = [null]; }
  function onFilter() {
    f.status = statusSel.value; f.kind = kindSel.value; f.backend = backendSel.value;
    f.q = searchIn.value.trim(); f.limit = limitSel.value;
    resetPaging();
    replaceQuery(queryObj(1));
    refreshNow();
  }
  function setSort(key) {
    if (f.sort === key) f.dir = f.dir === 'asc' ? 'desc' : 'asc';
    else { f.sort = key; f.dir = SORTS[key]; }
    resetPaging();
    markSort();
    replaceQuery(queryObj(1));
    refreshNow();
  }
  function goPage(page, focusId) {
    const {path} = parseHash(location.hash);
    const q = new URLSearchParams(Object.entries(queryObj(page)).filter(([, v]) => v !== '')).toString();
    try { sessionStorage.setItem('tessel.jobs.focus', focusId); } catch { /* no storage: focus stays on the heading */ }
    location.hash = '#' + path + (q ? '?' + q : '');
  }
  for (const el of [statusSel, kindSel, backendSel, limitSel]) el.addEventListener('change', onFilter);
  let searchTimer = null;
  searchIn.addEventListener('input', () => { clearTimeout(searchTimer); searchTimer = setTimeout(onFilter, 300); });
  clearBtn.addEventListener('click', () => {
    statusSel.value = ''; kindSel.value = ''; backendSel.value = ''; searchIn.value = ''; f.label = ''; onFilter();
  });
  newer.addEventListener('click', () => {
    if (pageNo() <= 1) return;
    cursors.pop();
    goPage(pageNo(), 'page-newer');
  });
  older.addEventListener('click', () => {
    if (older.disabled) return;
    cursors.push(older.dataset.next);
    goPage(pageNo(), 'page-older');
  });

  let gen = 0;
  async function refresh(signal) {
    const my = ++gen;
    const page = await jobsApi.list({status: f.status, kind: f.kind, backend: f.backend, label: f.label, q: f.q,
      order_by: f.sort, desc: String(f.dir === 'desc'),
      limit: f.limit, cursor: cursors[cursors.length - 1]}, {signal});
    const jobs = page.jobs || [];
    const next = page.next_cursor;
    const count = typeof page.total === 'number' ? page.total : null;
    if (my !== gen) return; /* a newer request (filter change) overtook this one */
    clear(msg);
    setStale(false);
    render(jobs);
    older.disabled = !next;
    older.dataset.next = next || '';
    newer.disabled = pageNo() <= 1;
    const start = (pageNo() - 1) * Number(f.limit);
    pageInfo.textContent = jobs.length ? `Page ${pageNo()} · jobs ${fmtInt(start + 1)}–${fmtInt(start + jobs.length)}`
      : `Page ${pageNo()}`;
    total.textContent = count === null ? '' : `${fmtInt(count)} job${count === 1 ? '' : 's'}`;
    total.dataset.total = count === null ? '' : String(count);
    updated.textContent = 'updated ' + new Date().toLocaleTimeString('en-GB');
    if (first) {
      first = false;
      let want = null;
      try { want = sessionStorage.getItem('tessel.jobs.focus'); sessionStorage.removeItem('tessel.jobs.focus'); } catch { /* none */ }
      const el = want && document.getElementById(want);
      if (el) (el.disabled ? table : el).focus();
    }
  }

  function render(jobs) {
    const seen = new Set();
    jobs.forEach((j, i) => {
      seen.add(j.id);
      let r = rows.get(j.id);
      if (!r) { r = makeRow(j.id); rows.set(j.id, r); }
      if (!isActive(j)) canceling.delete(j.id);
      updateRow(r, j);
      if (tbody.children[i] !== r.tr) tbody.insertBefore(r.tr, tbody.children[i] || null);
      const prev = lastStatus.get(j.id);
      if (!first && prev && prev !== j.status) announce(`Job ${j.id} ${j.status}`);
      lastStatus.set(j.id, j.status);
    });
    for (const [id, r] of rows) if (!seen.has(id)) { r.tr.remove(); rows.delete(id); }
    empty.hidden = jobs.length > 0;
  }

  function makeRow(id) {
    const tds = COLS.map((c) => h('td', {role: 'cell', class: `c-${c.key}${c.num ? ' num' : ''}`,
      dataset: ['kind', 'backend', 'size', 'created'].includes(c.key) ? {label: c.title} : null}));
    tds[0].append(h('a', {href: `#/jobs/${encodeURIComponent(id)}`, class: 'mono'}, id));
    const labelEl = h('div', {class: 'muted label-cell'});
    tds[0].append(labelEl);
    return {tr: h('tr', {role: 'row', dataset: {id}}, tds), tds, labelEl, sig: [], job: null};
  }

  /* Rewrite cell i when its signature changed; a button that had the focus
   * hands it to the cell's new button (Cancel becomes Delete in place). */
  function set(r, i, sig, fill) {
    if (r.sig[i] === sig) return;
    r.sig[i] = sig;
    const focused = r.tds[i].contains(document.activeElement);
    clear(r.tds[i]);
    fill(r.tds[i]);
    const b = focused && r.tds[i].querySelector('button, a');
    if (b) b.focus();
  }

  function updateRow(r, j) {
    r.job = j;
    const cx = canceling.has(j.id) && isActive(j);
    r.tr.dataset.status = j.status;
    r.tr.dataset.kind = j.kind;
    if (cx) r.tr.dataset.canceling = '1'; else delete r.tr.dataset.canceling;
    if (r.labelEl.textContent !== (j.label || '')) { r.labelEl.textContent = j.label || ''; r.labelEl.title = j.label || ''; }
    set(r, 1, j.kind, (td) => td.append(j.kind));
    set(r, 2, backendText(j), (td) => td.append(backendText(j)));
    const shown = cx ? 'canceling' : j.status;
    set(r, 3, shown, (td) => td.append(cx ? h('span', {class: 'badge st-canceling', dataset: {status: 'canceling'}}, 'canceling…')
      : statusBadge(j.status)));
    const prog = progressText(j);
    set(r, 4, prog.sig, (td) => td.append(prog.node));
    const size = j.size ?? null;
    set(r, 5, String(size), (td) => td.append(size === null ? '—' : fmtSize(size)));
    const ago = fmtAgo(j.created_at);
    set(r, 6, ago, (td) => { td.title = j.created_at || ''; td.append(ago); });
    const act = `${isActive(j) ? 'cancel' : 'delete'}|${stale ? 'stale' : 'live'}`;
    set(r, 7, act, (td) => td.append(isActive(j) ? cancelButton(j.id) : deleteButton(j.id)));
    const cb = r.tds[7].querySelector('button[data-action="cancel"]');
    if (cb && (cb.dataset.pending === '1') !== cx) {
      /* the same button, so a keyboard user keeps the focus on it */
      cb.dataset.pending = cx ? '1' : '';
      cb.textContent = cx ? 'Canceling…' : 'Cancel';
      cb.setAttribute('aria-label', cx ? `Canceling job ${j.id}` : `Cancel job ${j.id}`);
      if (cx) cb.setAttribute('aria-disabled', 'true'); else cb.removeAttribute('aria-disabled');
    }
  }

  /* Offline: the rows may be old, so their buttons must not act on them. */
  function setStale(v) {
    if (v === stale) return;
    stale = v;
    for (const r of rows.values()) {
      r.tr.classList.toggle('stale', v);
      if (r.job) updateRow(r, r.job);
    }
  }

  function cancelButton(id) {
    return h('button', {type: 'button', class: 'btn btn-sm', 'aria-label': `Cancel job ${id}`,
      dataset: {action: 'cancel'}, disabled: stale, title: stale ? 'offline: this row may be out of date' : null,
      onclick: async () => {
        if (canceling.has(id)) return;
        const r = rows.get(id);
        canceling.add(id);
        if (r && r.job) updateRow(r, r.job);
        announce(`Canceling job ${id}`);
        refreshNow(); /* the faster polling starts now */
        try {
          const j = await jobsApi.cancel(id);
          const r2 = rows.get(id);
          if (j && r2) { if (!isActive(j)) canceling.delete(id); updateRow(r2, j); lastStatus.set(id, j.status); }
          if (j && j.status === 'canceled') announce(`Job ${id} canceled`);
        } catch (err) {
          canceling.delete(id);
          const r2 = rows.get(id);
          if (r2 && r2.job) updateRow(r2, r2.job);
          showError(err);
        }
      }}, 'Cancel');
  }

  function deleteButton(id) {
    let armed = null;
    const btn = h('button', {type: 'button', class: 'btn btn-sm btn-danger', 'aria-label': `Delete job ${id}`,
      dataset: {action: 'delete'}, disabled: stale, title: stale ? 'offline: this row may be out of date' : null}, 'Delete');
    btn.addEventListener('click', async () => {
      if (!armed) {
        btn.textContent = 'Confirm delete';
        btn.classList.add('confirm');
        btn.setAttribute('aria-label', `Confirm: delete job ${id} and its result`);
        armed = setTimeout(() => {
          armed = null; btn.textContent = 'Delete'; btn.classList.remove('confirm');
          btn.setAttribute('aria-label', `Delete job ${id}`);
        }, 4000);
        return;
      }
      clearTimeout(armed);
      btn.disabled = true;
      const r = rows.get(id);
      const nextTr = r && (r.tr.nextElementSibling || r.tr.previousElementSibling);
      const hadFocus = document.activeElement === btn;
      try {
        await jobsApi.remove(id);
        announce(`Deleted job ${id}`);
        if (r) { r.tr.remove(); rows.delete(id); }
        empty.hidden = rows.size > 0;
        if (hadFocus || document.activeElement === document.body) {
          const target = nextTr && nextTr.isConnected ? nextTr.querySelector('td.c-job a') : null;
          (target || table).focus();
        }
      } catch (err) { btn.disabled = false; showError(err); }
      refreshNow();
    });
    return btn;
  }

  function showError(err) {
    clear(msg);
    msg.append(errorBox(err));
    if (err.code === 'network' || err.status >= 500) setStale(true);
  }

  const every = () => (canceling.size ? 250 : 750);
  let stop = poll(refresh, every, showError);
  function refreshNow() { stop(); stop = poll(refresh, every, showError); }
  return () => { stop(); clearTimeout(searchTimer); };
}

function progressText(j) {
  const t = j.timings_ms || {};
  if (j.status === 'running') {
    const p = j.progress || {};
    const frac = p.total ? Math.min(1, p.done / p.total) : 0;
    const pct = Math.round(frac * 100);
    const eta = etaMs(j);
    const etaText = eta === null ? '' : eta < 1500 ? ' · about a second left' : ` · about ${fmtMs(Math.round(eta / 1000) * 1000)} left`;
    return {sig: `run${pct}${etaText}`, node: h('span', null,
      h('span', {class: 'mini-progress', role: 'progressbar', 'aria-label': 'progress', 'aria-valuemin': '0',
        'aria-valuemax': '100', 'aria-valuenow': String(pct)}, h('span', {style: `width:${pct}%`})), `${pct}%`,
      etaText ? h('span', {class: 'eta'}, etaText) : null)};
  }
  if (j.status === 'queued') return {sig: 'queued', node: h('span', {class: 'muted'}, 'waiting')};
  const total = typeof t.total === 'number' ? t.total : null;
  return {sig: `done${total}`, node: h('span', null, total === null ? '—' : fmtMs(total))};
}
