/* perf.js — the Performance page: the seeds' timing tables, made from this
 * machine's own history.
 *
 * Reads the succeeded jobs (GET /v1/jobs?status=succeeded, newest 2,000)
 * and, for each kind, plots run time against input size per backend on
 * log-log axes, one point per run, with a line through the median of each
 * size. A job run with backend "compare" gives one point per backend (its
 * compare[] entries); any other job gives one point for the backend it
 * used, its run time being compute + host→device + device→host, which is
 * what compare measures per backend. Size is the job's `size` (elements of
 * the largest input; m·k·n for matmul; points for geodesic), else derived
 * from params where a job carries them. A geodesic job with a query (knn,
 * radius, rowwise: issue 13) is left out: it never builds the matrix, so
 * its time does not belong on the matrix's curve. The list omits params,
 * so it is known by its result: parts (knn, radius), or one value per
 * point (rowwise: shape [size]; a condensed matrix of 3 points looks the
 * same and is left out too).
 * Under each chart, a table: median time per size and backend, and the
 * speedup against serial. "Measure" submits three compare jobs of growing
 * size so an empty history fills in: its status line says at once what
 * it is doing (submitting 1 of 3, then how many have finished, polled every
 * second) and the chart is redrawn when they have. Refreshes every 10 s.
 */
import {jobsApi, listAllJobs} from '../api.js';
import {h, clear, card, fmtMs, fmtSize, poll, errorBox, announce, backendFamily, tableWrap, KINDS} from '../dom.js';
import {chartBox, perfChart, chartsReady} from '../charts.js';

const UNIT = {map: 'elements', reduce: 'elements', matmul: 'm·k·n', geodesic: 'points'};
const ORDER = ['serial', 'cpu', 'cuda'];

const SWEEPS = {
  map: [1e4, 1e5, 1e6].map((n) => ({kind: 'map', label: 'perf sweep', backend: 'compare',
    params: {expr: 'sqrt(x**2 + 1) * sin(x)', inputs: {x: {random: {shape: [n], dist: 'uniform', low: 0, high: 1, seed: 1}}}}})),
  reduce: [1e4, 1e5, 1e6].map((n) => ({kind: 'reduce', label: 'perf sweep', backend: 'compare',
    params: {op: 'sum', expr: 'x**2', axis: null, inputs: {x: {random: {shape: [n], dist: 'uniform', low: 0, high: 1, seed: 1}}}}})),
  matmul: [100, 300, 600].map((n) => ({kind: 'matmul', label: 'perf sweep', backend: 'compare',
    params: {a: {random: {shape: [n, n], dist: 'normal', seed: 1}}, b: {random: {shape: [n, n], dist: 'normal', seed: 2}}}})),
  geodesic: [100, 300, 600].map((n) => ({kind: 'geodesic', label: 'perf sweep', backend: 'compare',
    params: {points: {random: {shape: [n, 2], dist: 'uniform', low: -90, high: 90, seed: 1}}, method: 'karney'}})),
};

function avElems(v) {
  if (typeof v === 'number') return 1;
  if (Array.isArray(v)) return v.length === 0 ? 0 : v.length * avElems(v[0]);
  if (v && v.random && Array.isArray(v.random.shape)) return v.random.shape.reduce((a, b) => a * b, 1);
  if (v && v.range) {
    const {start = 0, stop, step = 1} = v.range;
    return typeof stop === 'number' && step ? Math.max(0, Math.ceil((stop - start) / step)) : null;
  }
  return null; /* an uploaded array: its size is not in the params */
}

function avRows(v) {
  if (Array.isArray(v)) return v.length;
  if (v && v.random && Array.isArray(v.random.shape)) return v.random.shape[0];
  return null;
}

/* Elements of the largest input, or the number of points. */
export function jobSize(j) {
  if (typeof j.size === 'number' && j.size > 0) return j.size;
  const p = j.params || {};
  if (j.kind === 'geodesic') return avRows(p.points);
  if (j.kind === 'matmul') {
    const a = p.a && p.a.random && p.a.random.shape;
    const b = p.b && p.b.random && p.b.random.shape;
    return a && b && a.length === 2 ? a[0] * a[1] * (b.length === 2 ? b[1] : 1) : null;
  }
  const vals = Object.values(p.inputs || {});
  const sizes = vals.map(avElems).filter((x) => typeof x === 'number');
  return sizes.length ? Math.max(...sizes) : null;
}

export function isGeodesicQuery(j) {
  if (j.kind !== 'geodesic') return false;
  if (j.params && j.params.query) return true;
  const r = j.result || {};
  if (Array.isArray(r.parts)) return true;
  return Array.isArray(r.shape) && r.shape.length === 1 && r.shape[0] === j.size;
}

function runMs(j) {
  const t = j.timings_ms || {};
  if (typeof t.compute !== 'number') return typeof t.total === 'number' ? t.total : null;
  return t.compute + (t.h2d || 0) + (t.d2h || 0);
}

/* -> {kind: {backend: [{x, y, id}]}} */
export function collect(jobs) {
  const out = Object.fromEntries(KINDS.map((k) => [k, {}]));
  for (const j of jobs) {
    if (j.status !== 'succeeded' || !out[j.kind] || isGeodesicQuery(j)) continue;
    const x = jobSize(j);
    if (!x) continue;
    const add = (b, y) => {
      if (typeof y !== 'number' || !(y > 0)) return;
      (out[j.kind][b] = out[j.kind][b] || []).push({x, y, id: j.id});
    };
    if (Array.isArray(j.compare) && j.compare.length) {
      for (const c of j.compare) add(backendFamily(c.backend), c.ms);
    } else {
      add(backendFamily((j.backend || {}).used), runMs(j));
    }
  }
  return out;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function medians(series) {
  const out = {};
  for (const [b, pts] of Object.entries(series)) {
    const by = new Map();
    for (const p of pts) by.set(p.x, [...(by.get(p.x) || []), p.y]);
    out[b] = [...by.entries()].map(([x, ys]) => ({x, y: median(ys), n: ys.length})).sort((a, b2) => a.x - b2.x);
  }
  return out;
}

function sortBackends(names) {
  return [...names].sort((a, b) => {
    const ia = ORDER.indexOf(a) < 0 ? 9 : ORDER.indexOf(a);
    const ib = ORDER.indexOf(b) < 0 ? 9 : ORDER.indexOf(b);
    return ia - ib || a.localeCompare(b);
  });
}

function table(kind, med) {
  const backends = sortBackends(Object.keys(med));
  const sizes = [...new Set(backends.flatMap((b) => med[b].map((p) => p.x)))].sort((a, b) => a - b);
  const get = (b, x) => (med[b] || []).find((p) => p.x === x);
  const others = backends.filter((b) => b !== 'serial');
  return tableWrap(`${kind}: median run time per size`, h('table', {dataset: {kind}},
    h('caption', {class: 'sr-only'}, `${kind}: median run time per input size and backend`),
    h('thead', null, h('tr', null, h('th', {scope: 'col', class: 'num'}, `size (${UNIT[kind]})`),
      backends.map((b) => h('th', {scope: 'col', class: 'num'}, b)),
      med.serial ? others.map((b) => h('th', {scope: 'col', class: 'num'}, `${b} speedup`)) : null)),
    h('tbody', null, sizes.map((x) => {
      const s = get('serial', x);
      return h('tr', null, h('td', {class: 'num'}, fmtSize(x)),
        backends.map((b) => { const p = get(b, x); return h('td', {class: 'num'}, p ? fmtMs(p.y) : '—', p && p.n > 1 ? h('span', {class: 'muted'}, ` (${p.n})`) : null); }),
        med.serial ? others.map((b) => { const p = get(b, x); return h('td', {class: 'num'}, p && s ? `${(s.y / p.y).toFixed(1)}×` : '—'); }) : null);
    }))));
}

export function mount(root) {
  const err = h('div');
  const info = h('span', {class: 'sub'});
  const hosts = {};
  const charts = {};
  const sigs = {};
  root.append(h('div', {class: 'page-head'}, h('h1', null, 'Performance'), info), err,
    h('p', {class: 'muted'}, 'Run time against input size for every succeeded job on this machine, per backend, log-log. ' +
      'Jobs run with backend "compare" give one point per backend. The line joins the median of each size. ' +
      'Geodesic: distance matrices only (neighbour, radius and rowwise queries never build the matrix).'));
  const grid = h('div', {class: 'grid grid-2'});
  root.append(grid);
  for (const k of KINDS) {
    hosts[k] = h('div', {class: 'stack', dataset: {kind: k}});
    const btn = h('button', {type: 'button', class: 'btn btn-sm', 'aria-label': `Measure ${k}: submit three compare jobs of growing size`},
      'Measure');
    const line = h('p', {class: 'status-line', role: 'status', id: `measure-${k}`});
    let busy = false;
    btn.addEventListener('click', async () => {
      if (busy) return;
      busy = true;
      btn.setAttribute('aria-disabled', 'true');
      btn.textContent = 'Measuring…';
      const ids = [];
      try {
        for (const [i, body] of SWEEPS[k].entries()) {
          line.textContent = `Submitting job ${i + 1} of ${SWEEPS[k].length}…`;
          ids.push((await jobsApi.submit(body)).id);
        }
        announce(`Submitted three ${k} compare jobs`);
        for (;;) {
          const js = await Promise.all(ids.map((id) => jobsApi.get(id)));
          const done = js.filter((j) => j.status !== 'queued' && j.status !== 'running');
          const bad = done.filter((j) => j.status !== 'succeeded');
          line.textContent = `${done.length} of ${ids.length} jobs finished` +
            (bad.length ? ` (${bad.length} did not succeed)` : '') + (done.length < ids.length ? '; the chart updates when they have' : '.');
          if (done.length === ids.length) break;
          await new Promise((r) => setTimeout(r, 1000));
          if (!line.isConnected) return;
        }
        refreshNow();
      } catch (x) { line.textContent = ''; clear(err).append(errorBox(x)); }
      busy = false;
      btn.removeAttribute('aria-disabled');
      btn.textContent = 'Measure';
    });
    const sec = card(k, h('div', {class: 'row', style: 'justify-content:space-between;margin-bottom:8px'},
      h('span', {class: 'muted'}, `size in ${UNIT[k]}`), btn), line, hosts[k]);
    sec.id = `perf-${k}`;
    grid.append(sec);
  }

  async function refresh(signal) {
    const jobs = await listAllJobs({status: 'succeeded'}, 2000, signal);
    clear(err);
    info.textContent = `from ${jobs.length} succeeded job${jobs.length === 1 ? '' : 's'}`;
    const data = collect(jobs);
    for (const k of KINDS) {
      const series = data[k];
      const sig = JSON.stringify(series);
      if (sig === sigs[k]) continue;
      sigs[k] = sig;
      if (charts[k]) { charts[k].destroy(); delete charts[k]; }
      clear(hosts[k]);
      if (!Object.keys(series).length) {
        hosts[k].append(h('p', {class: 'empty'}, `No ${k} jobs have succeeded yet. "Measure" runs three.`));
        continue;
      }
      const med = medians(series);
      const c = chartBox(`${k}: run time against input size`, 260);
      c.canvas.id = `perf-chart-${k}`;
      hosts[k].append(c.box, table(k, med));
      const ordered = Object.fromEntries(sortBackends(Object.keys(series)).map((b) => [b, series[b]]));
      if (chartsReady()) charts[k] = perfChart(c.canvas, k, ordered, med, UNIT[k]);
    }
  }

  const onErr = (x) => clear(err).append(errorBox(x));
  let stop = poll(refresh, 10000, onErr);
  function refreshNow() { stop(); stop = poll(refresh, 10000, onErr); }
  return () => { stop(); for (const c of Object.values(charts)) c.destroy(); };
}
