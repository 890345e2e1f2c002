/* jobs.js — the live jobs table.
 *
 * GET /v1/jobs with the filters (status, kind, backend, label) and a page
 * size, polled every 750 ms, so a change shows within a second without a
 * reload. Paging follows the API's cursors: a stack of the cursors of the
 * pages seen, "Older" pushes next_cursor, "Newer" pops. Rows are keyed by
 * job id and only cells whose content changed are rewritten, so a focused
 * button keeps its focus while the table updates. Cancel (queued/running)
 * and Delete (finished; asks for a second click) call the API and show its
 * error as given. The filters live in the hash (#/jobs?status=running), so a
 * reload or a shared link shows the same table. Status changes of the jobs in
 * view are announced to screen readers.
 */
import {jobsApi} from '../api.js';
import {h, clear, field, select, fmtMs, fmtAgo, fmtSize, statusBadge, isActive, backendText, poll,
  errorBox, announce, STATUSES, KINDS, BACKENDS} from '../dom.js';
import {replaceQuery} from '../route.js';

const PAGE_SIZES = ['10', '25', '50', '100'];

export function mount(root, {query}) {
  const f = {
    status: STATUSES.includes(query.status) ? query.status : '',
    kind: KINDS.includes(query.kind) ? query.kind : '',
    backend: BACKENDS.includes(query.backend) ? query.backend : '',
    label: query.label || '',
    limit: PAGE_SIZES.includes(query.limit) ? query.limit : '25',
  };
  let cursors = [null];
  const rows = new Map();
  const lastStatus = new Map();
  let first = true;

  const statusSel = select([['', 'any status'], ...STATUSES], f.status, {name: 'status'});
  const kindSel = select([['', 'any kind'], ...KINDS], f.kind, {name: 'kind'});
  const backendSel = select([['', 'any backend'], ...BACKENDS.filter((b) => b !== 'auto'), 'auto'], f.backend, {name: 'backend'});
  const labelIn = h('input', {type: 'text', name: 'label', value: f.label, placeholder: 'exact label', autocomplete: 'off'});
  const limitSel = select(PAGE_SIZES, f.limit, {name: 'limit'});
  const clearBtn = h('button', {type: 'button', class: 'btn'}, 'Clear filters');
  const msg = h('div', {id: 'jobs-error'});
  const tbody = h('tbody');
  const empty = h('p', {class: 'empty', hidden: true}, 'No jobs match these filters.');
  const pageInfo = h('span', {class: 'muted', 'aria-live': 'polite'});
  const newer = h('button', {type: 'button', class: 'btn', disabled: true}, '← Newer');
  const older = h('button', {type: 'button', class: 'btn', disabled: true}, 'Older →');
  const updated = h('span', {class: 'muted'});

  root.append(
    h('div', {class: 'page-head'}, h('h1', null, 'Jobs'), updated,
      h('div', {class: 'actions'}, h('a', {class: 'btn btn-primary', href: '#/submit'}, 'Submit a job'))),
    h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter jobs', onsubmit: (e) => e.preventDefault()},
      field('Status', statusSel), field('Kind', kindSel), field('Backend', backendSel),
      field('Label', labelIn), field('Per page', limitSel), h('div', {class: 'field'}, clearBtn)),
    msg,
    h('div', {class: 'table-wrap'}, h('table', {id: 'jobs-table'},
      h('caption', {class: 'sr-only'}, 'Jobs, newest first'),
      h('thead', null, h('tr', null, ['Job', 'Kind', 'Backend', 'Status', 'Progress / time', 'Size', 'Created', 'Actions']
        .map((t) => h('th', {scope: 'col', class: t === 'Size' ? 'num' : null}, t)))),
      tbody)),
    empty,
    h('nav', {class: 'pager', 'aria-label': 'Pages'}, pageInfo, newer, older));

  function onFilter() {
    f.status = statusSel.value; f.kind = kindSel.value; f.backend = backendSel.value;
    f.label = labelIn.value.trim(); f.limit = limitSel.value;
    cursors = [null];
    replaceQuery({status: f.status, kind: f.kind, backend: f.backend, label: f.label,
      limit: f.limit === '25' ? '' : f.limit});
    refreshNow();
  }
  for (const el of [statusSel, kindSel, backendSel, limitSel]) el.addEventListener('change', onFilter);
  let labelTimer = null;
  labelIn.addEventListener('input', () => { clearTimeout(labelTimer); labelTimer = setTimeout(onFilter, 300); });
  clearBtn.addEventListener('click', () => {
    statusSel.value = ''; kindSel.value = ''; backendSel.value = ''; labelIn.value = ''; onFilter();
  });
  newer.addEventListener('click', () => { if (cursors.length > 1) { cursors.pop(); refreshNow(); } });
  older.addEventListener('click', () => { if (older.dataset.next) { cursors.push(older.dataset.next); refreshNow(); } });

  let gen = 0;
  async function refresh(signal) {
    const my = ++gen;
    const page = await jobsApi.list({status: f.status, kind: f.kind, backend: f.backend, label: f.label,
      limit: f.limit, cursor: cursors[cursors.length - 1]}, {signal});
    if (my !== gen) return; /* a newer request (filter change) overtook this one */
    clear(msg);
    render(page.jobs || []);
    older.disabled = !page.next_cursor;
    older.dataset.next = page.next_cursor || '';
    newer.disabled = cursors.length <= 1;
    const start = (cursors.length - 1) * Number(f.limit);
    const n = (page.jobs || []).length;
    pageInfo.textContent = n ? `Page ${cursors.length} · jobs ${start + 1}–${start + n}` : `Page ${cursors.length}`;
    updated.textContent = 'updated ' + new Date().toLocaleTimeString('en-GB');
  }

  function render(jobs) {
    const seen = new Set();
    jobs.forEach((j, i) => {
      seen.add(j.id);
      let r = rows.get(j.id);
      if (!r) { r = makeRow(j.id); rows.set(j.id, r); }
      updateRow(r, j);
      if (tbody.children[i] !== r.tr) tbody.insertBefore(r.tr, tbody.children[i] || null);
      const prev = lastStatus.get(j.id);
      if (!first && prev && prev !== j.status) announce(`Job ${j.id} ${j.status}`);
      lastStatus.set(j.id, j.status);
    });
    for (const [id, r] of rows) if (!seen.has(id)) { r.tr.remove(); rows.delete(id); }
    empty.hidden = jobs.length > 0;
    first = false;
  }

  function makeRow(id) {
    const tds = Array.from({length: 8}, () => h('td'));
    tds[5].className = 'num';
    tds[0].append(h('a', {href: `#/jobs/${encodeURIComponent(id)}`, class: 'mono'}, id));
    const labelEl = h('div', {class: 'muted label-cell'});
    tds[0].append(labelEl);
    return {tr: h('tr', {dataset: {id}}, tds), tds, labelEl, sig: []};
  }

  function set(r, i, sig, fill) {
    if (r.sig[i] === sig) return;
    r.sig[i] = sig;
    clear(r.tds[i]);
    fill(r.tds[i]);
  }

  function updateRow(r, j) {
    r.tr.dataset.status = j.status;
    r.tr.dataset.kind = j.kind;
    if (r.labelEl.textContent !== (j.label || '')) r.labelEl.textContent = j.label || '';
    set(r, 1, j.kind, (td) => td.append(j.kind));
    set(r, 2, backendText(j), (td) => td.append(backendText(j)));
    set(r, 3, j.status, (td) => td.append(statusBadge(j.status)));
    const prog = progressText(j);
    set(r, 4, prog.sig, (td) => td.append(prog.node));
    const size = j.size ?? null;
    set(r, 5, String(size), (td) => td.append(size === null ? '—' : fmtSize(size)));
    const ago = fmtAgo(j.created_at);
    set(r, 6, ago, (td) => { td.title = j.created_at || ''; td.append(ago); });
    const act = isActive(j) ? 'cancel' : 'delete';
    set(r, 7, act, (td) => td.append(act === 'cancel' ? cancelButton(j.id) : deleteButton(j.id)));
  }

  function cancelButton(id) {
    return h('button', {type: 'button', class: 'btn btn-sm', 'aria-label': `Cancel job ${id}`, dataset: {action: 'cancel'},
      onclick: async (e) => {
        e.currentTarget.disabled = true;
        try { await jobsApi.cancel(id); announce(`Cancel asked for job ${id}`); } catch (err) { showError(err); }
        refreshNow();
      }}, 'Cancel');
  }

  function deleteButton(id) {
    let armed = null;
    const btn = h('button', {type: 'button', class: 'btn btn-sm btn-danger', 'aria-label': `Delete job ${id}`,
      dataset: {action: 'delete'}}, 'Delete');
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
      try { await jobsApi.remove(id); announce(`Deleted job ${id}`); } catch (err) { showError(err); }
      refreshNow();
    });
    return btn;
  }

  function showError(err) { clear(msg); msg.append(errorBox(err)); }

  let stop = poll(refresh, 750, showError);
  function refreshNow() { stop(); stop = poll(refresh, 750, showError); }
  return () => { stop(); clearTimeout(labelTimer); };
}

function progressText(j) {
  const t = j.timings_ms || {};
  if (j.status === 'running') {
    const p = j.progress || {};
    const frac = p.total ? Math.min(1, p.done / p.total) : 0;
    const pct = Math.round(frac * 100);
    return {sig: `run${pct}`, node: h('span', null,
      h('span', {class: 'mini-progress', role: 'progressbar', 'aria-label': 'progress', 'aria-valuemin': '0',
        'aria-valuemax': '100', 'aria-valuenow': String(pct)}, h('span', {style: `width:${pct}%`})), `${pct}%`)};
  }
  if (j.status === 'queued') return {sig: 'queued', node: h('span', {class: 'muted'}, 'waiting')};
  const total = typeof t.total === 'number' ? t.total : null;
  return {sig: `done${total}`, node: h('span', null, total === null ? '—' : fmtMs(total))};
}
