/* detail.js — one job: what was asked, how it is going, where the time went,
 * what came out.
 *
 * GET /v1/jobs/{id} every 500 ms while the job is queued or running (a
 * progress bar and the elapsed time), then once more work when it ends: the
 * time per phase as a bar chart, for backend "compare" the serial vs cpu vs
 * cuda bar chart with the speedups written on the bars, and a preview of
 * the result from GET …/result?format=json&limit_rows=N (a table of the
 * first rows; for a distance matrix also a heatmap of its top-left block on
 * a canvas). Downloads (.npy, CSV, JSON) are links to the result route;
 * with a token they go through fetch so the Authorization header is sent.
 *
 * The cards appear with the first answer: a job that does not exist shows
 * its 404 and nothing else. Cancel shows "canceling…" at the click, applies
 * the job the API answers at once and polls every 150 ms until the job has
 * ended. A running job shows an ETA from its progress. For "compare" the
 * job's compute phase is the sum over the backends it ran, so the phase
 * chart shows each backend's compute apart (compare[].ms) and says so.
 *
 * A result of several arrays (result.parts, a geodesic knn or radius
 * query) lists its parts with downloads of each (GET …/result/{name}).
 * For knn, a table of one point's k neighbours: the API serves a part's
 * first rows only (?limit_rows, no row offset), so point p needs rows
 * 0 … p of both parts; they are read as .npy (8 bytes a value, not JSON's
 * ~20), grown by doubling as larger points are asked for and kept, up to
 * NB_CAP_BYTES per part; points beyond are refused and the page says why.
 * For radius, the first pairs (i, j, distance) as JSON.
 *
 * Every geodesic job that succeeded gets a world map of its points
 * (worldmap.js; the points read by geopoints.js from the params: inline,
 * generated like the service's {"random"}, or an upload's or a job's
 * .npy): a distance matrix's heatmap beside it; for knn, a click on a
 * point shows its neighbours in the table and on the map (and a point
 * chosen in the table is shown there too); for radius, the first
 * PAIR_LINES pairs as lines (two int64 parts read as .npy, 16 bytes a pair).
 */
import {api, jobsApi, download, getToken, getBytes} from '../api.js';
import {h, clear, card, fmtMs, fmtBytes, fmtNum, fmtShape, fmtTime, fmtInt, statusBadge, isActive, poll, devicesText,
  errorBox, announce, backendFamily, etaMs, tableWrap, field} from '../dom.js';
import {parseNpy} from '../npy.js';
import {worldMap} from '../worldmap.js';
import {readPoints} from '../geopoints.js';
import {chartBox, timingsChart, compareChart, drawHeatmap, drawColorbar, chartsReady, PHASES} from '../charts.js';

const PREVIEW_ROWS = 10;
const PREVIEW_COLS = 8;
const HEAT_MAX = 200;
const NB_CAP_BYTES = 8 * 1024 * 1024; /* rows of each knn part read for the neighbour table */
const NB_FIRST_ROWS = 1024;
const PAIRS_ROWS = 20;
const PAIR_LINES = 20000;

export function mount(root, {params}) {
  const id = params.id;
  const badge = h('span');
  const labelEl = h('span', {class: 'sub'});
  const actions = h('div', {class: 'actions'});
  const err = h('div');
  const progressHost = h('div');
  const summary = h('dl', {class: 'kv', id: 'job-summary'});
  const timingsHost = h('div', {id: 'timings'});
  const compareHost = h('div', {class: 'span-all', id: 'compare'});
  const resultHost = h('div', {class: 'span-all', id: 'result'});
  const errorHost = h('div', {class: 'span-all'});
  const paramsHost = h('div', {class: 'span-all'});
  const body = h('div', {class: 'grid grid-2', id: 'job-body', hidden: true},
      h('div', {class: 'span-all'}, progressHost),
      card('Summary', summary),
      card('Time per phase', timingsHost),
      errorHost, compareHost, resultHost, paramsHost);
  root.append(
    h('div', {class: 'page-head'}, h('h1', null, 'Job ', h('span', {class: 'mono'}, id)), badge, labelEl, actions),
    err, body);

  const charts = [];
  let canceling = false;
  let finalDone = false;
  let lastStatus = null;
  let stop = () => {};
  let actionSig = '';

  function renderHeader(j) {
    if (!isActive(j)) canceling = false;
    clear(badge).append(canceling ? h('span', {class: 'badge st-canceling', dataset: {status: 'canceling'}}, 'canceling…')
      : statusBadge(j.status));
    labelEl.textContent = j.label || '';
    const sig = isActive(j) ? 'active' : 'final';
    if (sig === actionSig) return;
    actionSig = sig;
    clear(actions);
    if (isActive(j)) {
      const btn = h('button', {type: 'button', class: 'btn', id: 'cancel-job', onclick: async () => {
        if (canceling) return;
        canceling = true;
        btn.textContent = 'Canceling…';
        btn.setAttribute('aria-disabled', 'true');
        clear(badge).append(h('span', {class: 'badge st-canceling', dataset: {status: 'canceling'}}, 'canceling…'));
        announce('Canceling the job');
        restart(); /* poll fast until it has ended */
        try {
          const j = await jobsApi.cancel(id);
          if (j) apply(j);
        } catch (x) {
          canceling = false;
          btn.textContent = 'Cancel job';
          btn.removeAttribute('aria-disabled');
          showErr(x);
        }
      }}, 'Cancel job');
      actions.append(btn);
    } else {
      let armed = null;
      const del = h('button', {type: 'button', class: 'btn btn-danger', id: 'delete-job'}, 'Delete');
      del.addEventListener('click', async () => {
        if (!armed) {
          del.textContent = 'Confirm delete';
          del.classList.add('confirm');
          armed = setTimeout(() => { armed = null; del.textContent = 'Delete'; del.classList.remove('confirm'); }, 4000);
          return;
        }
        clearTimeout(armed);
        try { await jobsApi.remove(id); announce(`Deleted job ${id}`); location.hash = '#/jobs'; } catch (x) { showErr(x); }
      });
      actions.append(del);
    }
    actions.prepend(h('a', {class: 'btn', href: `#/submit?from=${encodeURIComponent(id)}`}, 'Run again…'));
  }

  function renderProgress(j) {
    clear(progressHost);
    if (!isActive(j)) return;
    const p = j.progress || {};
    const frac = p.total ? Math.min(1, p.done / p.total) : 0;
    const since = j.started_at || j.created_at;
    const elapsed = since ? Date.now() - new Date(since).getTime() : null;
    const eta = etaMs(j);
    const pid = 'progress-label';
    progressHost.append(h('section', {class: 'card', 'aria-labelledby': pid},
      h('h2', {class: 'card-title', id: pid}, j.status === 'queued' ? 'Waiting in the queue' : 'Running'),
      h('progress', {id: 'job-progress', max: '1', value: j.status === 'queued' ? null : String(frac),
        'aria-labelledby': pid, 'aria-valuetext': `${Math.round(frac * 100)} percent`}),
      h('p', {class: 'muted', style: 'margin-top:8px'},
        j.status === 'queued' ? 'queued' : `${fmtInt(p.done)} of ${fmtInt(p.total)} chunks · ${Math.round(frac * 100)}%`,
        elapsed !== null ? ` · ${fmtMs(elapsed)} elapsed` : '',
        eta !== null ? h('span', {id: 'job-eta'}, ` · about ${eta < 1500 ? 'a second' : fmtMs(Math.round(eta / 1000) * 1000)} left`) : '')));
  }

  function renderTimingsPending(j) {
    if (finalDone || timingsHost.dataset.pending === j.status) return;
    timingsHost.dataset.pending = j.status;
    clear(timingsHost).append(h('p', {class: 'empty'}, j.status === 'queued'
      ? 'Waiting for a worker; the time of each phase is shown when the job ends.'
      : 'Running; the time of each phase is shown when the job ends.'));
  }

  function renderSummary(j) {
    const b = j.backend || {};
    const t = j.timings_ms || {};
    const rows = [
      ['kind', j.kind], ['status', j.status], ['backend asked', b.requested], ['backend used', b.used || '—'],
      ['why', b.reason || '—'], ['priority', j.priority], ['input size', j.size != null ? fmtInt(j.size) : '—'],
      ['created', fmtTime(j.created_at)], ['started', fmtTime(j.started_at)], ['finished', fmtTime(j.finished_at)],
      ['total time', fmtMs(t.total)],
    ];
    const gpus = devicesText(b.devices); /* a cuda run's, once it ended */
    if (gpus) rows.splice(4, 0, ['devices', gpus]);
    if (j.result && Array.isArray(j.result.parts)) {
      rows.push(['result', j.result.parts.map((pt) => `${pt.name} ${pt.dtype} ${fmtShape(pt.shape)}`).join('; ')]);
    } else if (j.result) rows.push(['result', `${j.result.dtype}, ${fmtShape(j.result.shape)}, ${fmtBytes(j.result.bytes)}`]);
    clear(summary);
    for (const [k, v] of rows) summary.append(h('dt', null, k), h('dd', null, v ?? '—'));
  }

  function renderFinal(j) {
    const t = j.timings_ms || {};
    clear(timingsHost);
    const split = Array.isArray(j.compare) ? j.compare.filter((x) => typeof x.ms === 'number') : [];
    if (PHASES.some((p) => typeof t[p] === 'number') && chartsReady()) {
      const c = chartBox('Time per phase', split.length > 1 ? 230 + 30 * split.length : 230);
      c.canvas.id = 'timings-chart';
      timingsHost.append(c.box, h('p', {class: 'muted'}, `total ${fmtMs(t.total)}`));
      if (split.length > 1) {
        timingsHost.append(h('p', {class: 'muted', id: 'compute-split'},
          `Compare ran ${split.length} backends one after the other, so compute is shown per backend, ` +
          `not as their sum (${fmtMs(t.compute)}): `,
          split.map((x, i) => `${i ? ', ' : ''}${x.backend} ${fmtMs(x.ms)}`).join('')));
      }
      charts.push(timingsChart(c.canvas, t, split.length > 1 ? split : null));
    } else {
      timingsHost.append(h('p', {class: 'empty'}, 'No timings were recorded for this job.'));
    }
    if (Array.isArray(j.compare) && j.compare.length) renderCompare(j);
    if (j.error && j.status !== 'succeeded') {
      clear(errorHost).append(card(j.status === 'canceled' ? 'Canceled' : 'Error', errorBox(j.error)));
    }
    if (j.status === 'succeeded' && j.result) renderResult(j);
  }

  function renderCompare(j) {
    const c = chartBox('Compute time by backend', 280);
    c.canvas.id = 'compare-chart';
    const diff = typeof j.max_abs_diff === 'number'
      ? `The results agree: largest absolute difference between backends ${fmtNum(j.max_abs_diff, 3)}.` : '';
    const rows = j.compare.filter((x) => typeof x.ms === 'number');
    const serial = rows.find((x) => backendFamily(x.backend) === 'serial');
    const heads = serial ? rows.filter((x) => x !== serial).map((x) => h('div', {class: 'stat'},
      h('span', {class: 'v'}, `${(serial.ms / x.ms).toFixed(serial.ms / x.ms >= 10 ? 0 : 1)}×`),
      h('span', {class: 'l'}, `${x.backend}${x.threads ? ` (${x.threads} threads)` : ''} ` +
        `${x.ms <= serial.ms ? 'faster' : 'slower'} than serial: ${fmtMs(x.ms)} vs ${fmtMs(serial.ms)}`))) : [];
    clear(compareHost).append(card('Serial vs parallel vs GPU', h('div', {class: 'speedups'}, heads), c.box,
      h('p', {class: 'muted'}, `The same inputs on every backend; speedups against serial are written on the bars. ${diff}`)));
    if (chartsReady()) charts.push(compareChart(c.canvas, j.compare));
  }

  async function renderResult(j) {
    const r = j.result;
    if (Array.isArray(r.parts) && r.parts.length) { renderParts(j); return; }
    const shape = r.shape || [];
    const body = h('div', {class: 'stack'});
    const dl = h('div', {class: 'row'}, h('span', {class: 'muted'}, 'Download:'),
      dlLink(j, 'npy', '.npy'), dlLink(j, 'csv', 'CSV', shape.length > 2 ? 'CSV holds 1-D or 2-D results' : null),
      dlLink(j, 'json', 'JSON'));
    clear(resultHost).append(card('Result', h('p', null, `${r.dtype}, shape ${fmtShape(shape)}, ${fmtBytes(r.bytes)}`),
      dl, body));
    /* A distance matrix gets a heatmap; a condensed one is asked for in
     * the square layout (the API offers it for results without targets). */
    const p = j.params || {};
    const n = j.size || 0;
    /* a query's result (rowwise: one value per point) is no matrix */
    const condensed = j.kind === 'geodesic' && !p.query && shape.length === 1 && !p.targets && n > 1;
    const isMatrix = j.kind === 'geodesic' && !p.query && (shape.length === 2 || condensed);
    const full = condensed ? [n, n] : shape;
    const cols = full.length >= 2 ? full[1] : 1;
    const rows = isMatrix ? Math.min(full[0], HEAT_MAX, Math.max(16, Math.floor(300000 / Math.max(1, cols))))
      : full.length === 1 ? 20 : PREVIEW_ROWS;
    body.append(h('p', {class: 'muted'}, 'Loading a preview…'));
    let res;
    try {
      res = await api.get(jobsApi.resultUrl(id, {format: 'json', limit_rows: rows, layout: condensed ? 'square' : ''}));
    } catch (x) { clear(body).append(errorBox(x)); return; }
    clear(body);
    if (isMatrix) body.append(h('div', {class: 'map-heat'}, jobMap(j).el, heatmap(res.data, full, j)));
    else if (j.kind === 'geodesic') body.append(jobMap(j).el);
    body.append(previewTable(res.data, full));
  }

  function renderParts(j) {
    const parts = j.result.parts;
    const p = j.params || {};
    const units = p.units || 'm';
    const byName = Object.fromEntries(parts.map((pt) => [pt.name, pt]));
    /* explicit roles: under 680 px the rows become cards (style.css), and a
     * display change would otherwise drop the table's semantics */
    const col = (text, cls) => h('th', {scope: 'col', role: 'columnheader', class: cls}, text);
    const cell = (label, text, cls) => h('td', {role: 'cell', class: cls, dataset: {label}}, text);
    const table = tableWrap('Parts of the result', h('table', {id: 'parts-table', role: 'table'},
      h('caption', {class: 'sr-only'}, `The ${parts.length} arrays of the result`),
      h('thead', {role: 'rowgroup'}, h('tr', {role: 'row'}, col('part'), col('dtype'), col('shape'), col('size', 'num'),
        col('download'))),
      h('tbody', {role: 'rowgroup'}, parts.map((pt) => h('tr', {role: 'row', dataset: {part: pt.name}},
        h('th', {scope: 'row', role: 'rowheader', class: 'mono'}, pt.name), cell('dtype', pt.dtype),
        cell('shape', fmtShape(pt.shape)), cell('size', fmtBytes(pt.bytes), 'num'),
        h('td', {role: 'cell', class: 'c-dl'}, h('div', {class: 'row'}, dlLink(j, 'npy', '.npy', null, pt),
          dlLink(j, 'csv', 'CSV', (pt.shape || []).length > 2 ? 'CSV holds 1-D or 2-D results' : null, pt),
          dlLink(j, 'json', 'JSON', null, pt))))))));
    const body = h('div', {class: 'stack'});
    clear(resultHost).append(card('Result', h('p', null, `${parts.length} arrays; `, h('code', null, '/result'),
      ` is the first (${parts[0].name}).`), table, body));
    body.append(...queryViews(j, byName, units));
  }

  async function refresh(signal) {
    apply(await jobsApi.get(id, {signal}));
  }

  function apply(j) {
    clear(err);
    body.hidden = false;
    renderHeader(j);
    renderProgress(j);
    renderSummary(j);
    if (isActive(j)) renderTimingsPending(j);
    if (!paramsHost.firstChild) {
      paramsHost.append(card('Params', j.params ? h('pre', {class: 'json', tabindex: '0', 'aria-label': 'Params as JSON'},
        JSON.stringify(j.params, null, 2)) : h('p', {class: 'muted'}, 'The API did not include the params.')));
    }
    if (lastStatus && lastStatus !== j.status) announce(`Job ${j.status}`);
    lastStatus = j.status;
    if (!isActive(j) && !finalDone) {
      finalDone = true;
      stop();
      renderFinal(j);
    }
  }
  function restart() { stop(); stop = poll(refresh, () => (canceling ? 150 : 500), showErr); }

  function showErr(x) {
    clear(err).append(errorBox(x));
    if (x.status === 404) { /* deleted, or never was: nothing more to follow */
      stop();
      err.append(h('p', null, h('a', {href: '#/jobs'}, 'Back to the jobs.')));
    }
  }
  stop = poll(refresh, () => (canceling ? 150 : 500), showErr);
  return () => { stop(); charts.forEach((c) => c.destroy()); };
}

/* A download of the result (or of its part `part`) in `format`. */
function dlLink(j, format, text, disabledWhy, part) {
  const href = part ? jobsApi.partUrl(j.id, part.name, {format}) : jobsApi.resultUrl(j.id, {format});
  const name = part ? `${j.id}-${part.name}.${format}` : `${j.id}.${format}`;
  const label = part ? `${part.name} as ${text}` : null;
  if (disabledWhy) {
    return h('button', {type: 'button', class: 'btn btn-sm', disabled: true, title: disabledWhy, 'aria-label': label}, text);
  }
  return h('a', {class: 'btn btn-sm', href, download: name, 'aria-label': label,
    dataset: part ? {format, part: part.name} : {format}, onclick: (e) => {
    if (!getToken()) return; /* a plain link streams big results straight to disk */
    e.preventDefault();
    download(href, name).catch((x) => e.target.after(errorBox(x)));
  }}, text);
}

function heatmap(data, shape, j) {
  const rows = Array.isArray(data) ? data : [];
  const k = Math.min(rows.length, shape[1]);
  const block = rows.slice(0, k).map((r) => r.slice(0, k));
  const canvas = h('canvas', {class: 'heatmap', id: 'heatmap', role: 'img'});
  const bar = h('canvas');
  const lo = h('span');
  const hi = h('span');
  const units = (j.params && j.params.units) || 'm';
  const caption = k < shape[0] ? `The first ${fmtInt(k)} of ${fmtInt(shape[0])} points` : `All ${fmtInt(k)} points`;
  const wrap = h('figure', {class: 'heatmap-wrap', style: 'margin:0'}, canvas,
    h('div', {class: 'colorbar'}, lo, bar, hi),
    h('figcaption', {class: 'muted'}, `${caption}: distance from row point to column point (${units}).`));
  requestAnimationFrame(() => {
    const range = drawHeatmap(canvas, block);
    drawColorbar(bar);
    lo.textContent = fmtNum(range.lo, 3);
    hi.textContent = fmtNum(range.hi, 3);
    canvas.setAttribute('aria-label', `Heatmap of a ${k} by ${k} distance matrix, from ${fmtNum(range.lo, 3)} to ${fmtNum(range.hi, 3)} ${units}`);
    canvas.dataset.drawn = '1';
  });
  return wrap;
}

function previewTable(data, shape) {
  if (!Array.isArray(data)) {
    return h('div', {class: 'stat preview', id: 'result-preview'}, h('span', {class: 'v'}, fmtNum(data, 8)),
      h('span', {class: 'l'}, 'the result (a scalar)'));
  }
  const nd = shape.length;
  const rows = data.slice(0, nd === 1 ? 20 : PREVIEW_ROWS);
  const moreRows = (shape[0] || 0) > rows.length;
  if (nd === 1) {
    /* 1-D: rows of five values, each row labelled with its first index */
    const per = 5;
    const lines = [];
    for (let i = 0; i < rows.length; i += per) lines.push(rows.slice(i, i + per));
    return tableWrap('Result preview', h('table', null,
      h('caption', {class: 'sr-only'}, 'First values of the result'),
      h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'index'),
        Array.from({length: per}, (_, c) => h('th', {scope: 'col', class: 'num'}, `+${c}`)))),
      h('tbody', null, lines.map((line, r) => h('tr', null, h('th', {scope: 'row'}, `[${r * per}]`),
        line.map((v) => h('td', {class: 'num'}, fmtNum(v, 8))))),
      moreRows ? h('tr', null, h('th', {scope: 'row', class: 'muted'}, '…'),
        h('td', {class: 'muted', colspan: String(per)}, `${fmtInt(shape[0] - rows.length)} more values`)) : null)),
    {class: 'table-wrap preview values-grid', id: 'result-preview'});
  }
  const ncol = Math.min(PREVIEW_COLS, shape[1] || 0);
  const moreCols = (shape[1] || 0) > ncol;
  const cell = (v) => (Array.isArray(v) ? JSON.stringify(v).slice(0, 40) + '…' : fmtNum(v, 6));
  return tableWrap('Result preview', h('table', null,
    h('caption', {class: 'sr-only'}, 'First rows and columns of the result'),
    h('thead', null, h('tr', null, h('th', {scope: 'col'}, h('span', {class: 'sr-only'}, 'row')),
      Array.from({length: ncol}, (_, c) => h('th', {scope: 'col', class: 'num'}, `[:, ${c}]`)), moreCols ? h('th', null, '…') : null)),
    h('tbody', null, rows.map((r, i) => h('tr', null, h('th', {scope: 'row'}, `[${i}]`),
      r.slice(0, ncol).map((v) => h('td', {class: 'num'}, cell(v))), moreCols ? h('td', {class: 'muted'}, '…') : null)),
    moreRows ? h('tr', null, h('th', {scope: 'row', class: 'muted'}, '…'),
      h('td', {class: 'muted', colspan: String(ncol + (moreCols ? 1 : 0))}, `${fmtInt(shape[0] - rows.length)} more rows`)) : null)),
  {class: 'table-wrap preview', id: 'result-preview'});
}

/* One point's k nearest neighbours, from rows 0 … p of the knn job's
 * `distance` and `index` parts (read as .npy, see the file's opening). */
function neighbourExplorer(j, distPart, idxPart, units, gm) {
  const n = idxPart.shape[0];
  const kk = idxPart.shape[1];
  const rowBytes = Math.max(kk * 8, 1);
  const cap = Math.min(n, Math.max(1, Math.floor(NB_CAP_BYTES / rowBytes)));
  const loaded = {rows: 0, dist: null, idx: null};
  let seq = 0;
  const input = h('input', {type: 'number', id: 'nb-point', min: '0', max: String(cap - 1), step: '1', value: '0',
    inputmode: 'numeric', autocomplete: 'off'});
  const errId = 'nb-point-error';
  const err = h('p', {class: 'field-error', id: errId, role: 'alert'});
  const note = cap < n
    ? `The API gives a part's first rows only (limit_rows, no row offset), so this page reads at most the first ` +
      `${fmtInt(cap)} rows of each part (${fmtBytes(cap * rowBytes)} each): points 0 … ${fmtInt(cap - 1)}. ` +
      'Download the parts for the others.'
    : 'Read from the first rows of both parts as .npy (the API has no row offset: point p needs rows 0 … p).';
  const pointField = field(`Point (0 … ${fmtInt(n - 1)})`, input, note);
  input.setAttribute('aria-describedby', `${input.getAttribute('aria-describedby')} ${errId}`);
  const host = h('div', {id: 'nb-host'});
  const el = h('section', {class: 'stack', 'aria-labelledby': 'nb-title', id: 'neighbours'},
    h('h3', {id: 'nb-title'}, 'Neighbours of one point'), pointField, err, host);

  async function ensure(p) {
    if (p < loaded.rows) return;
    const want = Math.min(cap, Math.max(p + 1, 2 * loaded.rows, NB_FIRST_ROWS));
    const [db, ib] = await Promise.all([
      getBytes(jobsApi.partUrl(j.id, distPart.name, {format: 'npy', limit_rows: want})),
      getBytes(jobsApi.partUrl(j.id, idxPart.name, {format: 'npy', limit_rows: want}))]);
    const d = parseNpy(db);
    const x = parseNpy(ib);
    if (d.shape[0] !== want || x.shape[0] !== want || d.shape[1] !== kk || x.shape[1] !== kk) {
      throw new Error(`the parts came back ${d.shape.join('×')} and ${x.shape.join('×')}, ${want}×${kk} expected`);
    }
    if (want > loaded.rows) Object.assign(loaded, {rows: want, dist: d.data, idx: x.data});
  }

  function invalid(msg) {
    input.setAttribute('aria-invalid', 'true');
    err.textContent = msg;
  }

  async function show(p) {
    const my = ++seq;
    input.removeAttribute('aria-invalid');
    err.textContent = '';
    if (!Number.isInteger(p) || p < 0 || p >= n) { invalid(`The point is a whole number from 0 to ${fmtInt(n - 1)}.`); return; }
    if (p >= cap) { invalid(`Only points 0 … ${fmtInt(cap - 1)} are read here (see above).`); return; }
    host.dataset.loading = '1';
    try { await ensure(p); } catch (x) {
      if (my === seq) { delete host.dataset.loading; clear(host).append(errorBox(x)); }
      return;
    }
    if (my !== seq) return;
    delete host.dataset.loading;
    const rows = [];
    for (let c = 0; c < kk; c += 1) rows.push([loaded.idx[p * kk + c], loaded.dist[p * kk + c]]);
    if (gm) gm.ready.then((m) => { if (m && my === seq) m.highlight(p, rows.map(([idx]) => idx)); });
    clear(host).append(kk === 0 ? h('p', {class: 'empty', id: 'nb-empty'}, `Point ${p} has no candidates.`)
      : h('div', {class: 'stack'},
        h('p', {class: 'muted'}, 'Select a neighbour to show its own neighbours.'),
        tableWrap(`Neighbours of point ${p}`, h('table', {id: 'nb-table', dataset: {point: String(p)}},
          h('caption', null, `The ${kk} nearest neighbours of point ${fmtInt(p)}, nearest first`),
          h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'rank'), h('th', {scope: 'col'}, 'neighbour'),
            h('th', {scope: 'col', class: 'num'}, `distance (${units})`))),
          h('tbody', null, rows.map(([idx, d], r) => h('tr', null,
            h('th', {scope: 'row'}, String(r + 1)),
            h('td', null, h('button', {type: 'button', class: 'linkbtn', dataset: {point: String(idx)},
              onclick: () => { input.value = String(idx); show(idx); input.focus(); announce(`Neighbours of point ${idx}`); }},
            String(idx), h('span', {class: 'sr-only'}, ' (show its neighbours)'))),
            h('td', {class: 'num', dataset: {value: String(d)}}, `${fmtNum(d, 6)} ${units}`))))))));
  }

  input.addEventListener('input', () => {
    const t = input.value.trim();
    show(t === '' ? NaN : Number(t));
  });
  if (gm) {
    gm.ready.then((m) => {
      if (!m) return;
      m.onPick((i) => { input.value = String(i); show(i); announce(`Neighbours of point ${i}`); });
      gm.hint(' Click a point to show its neighbours.');
    });
  }
  show(0);
  return el;
}

/* A result of parts: the map of a geodesic job, and the query's own view
 * (a knn point's neighbours, a radius job's first pairs and its lines). */
function queryViews(j, byName, units) {
  const q = (j.params || {}).query || {};
  const gm = j.kind === 'geodesic' ? jobMap(j) : null;
  const out = gm ? [gm.el] : [];
  if (q.knn && byName.distance && byName.index) out.push(neighbourExplorer(j, byName.distance, byName.index, units, gm));
  else if (q.radius && byName.i && byName.j && byName.distance) {
    out.push(pairsTable(j, byName, q.radius.r, units));
    if (gm) pairLines(j, byName.i.shape[0], gm);
  }
  return out;
}

/* The world map of a geodesic job's points; ready resolves to the map once
 * the points are on it (null when the page cannot read them: the note
 * says why). */
function jobMap(j) {
  const p = j.params || {};
  const m = worldMap({label: 'World map of the job\'s points'});
  const note = h('span', {id: 'map-note'}, 'Reading the points…');
  const extra = h('span');
  const el = h('section', {class: 'stack', 'aria-labelledby': 'map-title', id: 'map-section'},
    h('h3', {id: 'map-title'}, 'Map'), m.el, h('p', {class: 'muted map-note'}, note, extra));
  const ready = Promise.all([readPoints(p.points), p.targets ? readPoints(p.targets) : null]).then(([a, b]) => {
    if (a.why) { note.textContent = `No points on the map: ${a.why}.`; return null; }
    const t = b && !b.why ? b : null;
    m.setPoints(a, t);
    const what = `${fmtInt(a.n)} point${a.n === 1 ? '' : 's'}${t ? ` (blue) and ${fmtInt(t.n)} targets (green)` : ''}`;
    m.el.querySelector('svg').setAttribute('aria-label', `World map of the job's ${what}`);
    note.textContent = `${what} on the map` + (a.cut ? `: the first ${fmtInt(a.n)} of ${fmtInt(a.n + a.cut)}.` : '.') +
      (b && b.why ? ` No targets: ${b.why}.` : '');
    return m;
  }).catch((x) => { note.textContent = `No points on the map: ${x.message}`; return null; });
  return {el, map: m, ready, hint: (text) => { extra.textContent = text; }};
}

/* The first PAIR_LINES pairs of a radius job as lines on its map. */
function pairLines(j, total, gm) {
  const rows = Math.min(total, PAIR_LINES);
  if (!rows) return;
  const get = (name) => getBytes(jobsApi.partUrl(j.id, name, {format: 'npy', limit_rows: rows})).then(parseNpy);
  Promise.all([gm.ready, get('i'), get('j')]).then(([m, i, jj]) => {
    if (!m) return;
    m.setPairs(i.data, jj.data);
    gm.hint(` Lines: ${rows < total ? `the first ${fmtInt(rows)} of ${fmtInt(total)}` : `all ${fmtInt(total)}`} pairs within r.`);
  }).catch((x) => gm.hint(` The pairs could not be read: ${x.message}`));
}

/* The first pairs of a radius job: rows 0 … PAIRS_ROWS-1 of i, j, distance. */
function pairsTable(j, byName, r, units) {
  const total = byName.i.shape[0];
  const host = h('div', {id: 'pairs-host'}, h('p', {class: 'muted'}, 'Loading the first pairs…'));
  const el = h('section', {class: 'stack', 'aria-labelledby': 'pairs-title'}, h('h3', {id: 'pairs-title'}, 'Pairs'), host);
  if (total === 0) {
    clear(host).append(h('p', {class: 'empty', id: 'pairs-empty'}, `No pair lies within ${fmtNum(r)} ${units}.`));
    return el;
  }
  const get = (name) => api.get(jobsApi.partUrl(j.id, name, {format: 'json', limit_rows: PAIRS_ROWS}));
  Promise.all([get('i'), get('j'), get('distance')]).then(([ri, rj, rd]) => {
    const shown = Math.min(ri.data.length, rj.data.length, rd.data.length);
    clear(host).append(tableWrap('First pairs', h('table', {id: 'pairs-table'},
      h('caption', null, `The first ${fmtInt(shown)} of ${fmtInt(total)} pairs within ${fmtNum(r)} ${units}, by (i, j)`),
      h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'pair'), h('th', {scope: 'col', class: 'num'}, 'i'),
        h('th', {scope: 'col', class: 'num'}, 'j'), h('th', {scope: 'col', class: 'num'}, `distance (${units})`))),
      h('tbody', null, Array.from({length: shown}, (_, k) => h('tr', null, h('th', {scope: 'row'}, String(k)),
        h('td', {class: 'num'}, String(ri.data[k])), h('td', {class: 'num'}, String(rj.data[k])),
        h('td', {class: 'num', dataset: {value: String(rd.data[k])}}, `${fmtNum(rd.data[k], 6)} ${units}`)))))));
  }).catch((x) => clear(host).append(errorBox(x)));
  return el;
}
