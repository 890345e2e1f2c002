/* overview.js — the first page: what this machine has and what it is doing.
 *
 * Devices (GET /v1/devices: CPU model and threads; each GPU with its memory
 * in use, or why CUDA is unavailable), the service's nodes (GET /v1/nodes:
 * one on SQLite; on PostgreSQL every node with its health, load and jobs),
 * the queue and jobs by status, the
 * throughput and the per kind/backend table of p50/p95 (all GET /v1/stats,
 * a few hundred bytes), the latest 8 jobs (GET /v1/jobs?limit=8) and a link
 * to /metrics. Polls every 2 s (devices and nodes every 6 s); charts are updated in
 * place, not rebuilt, so they do not flicker.
 *
 * History: GET /v1/stats/history, on load, when the range changes and
 * every 15 s (HISTORY_EVERY_MS; the live numbers stay on the 2 s /v1/stats
 * poll). The range (5 min … 7 days, kept in sessionStorage "tessel.range")
 * picks since and step so that there are at most 120 steps, since aligned
 * to a whole step; a refresh asks only from the newest step it has (the
 * same grid, so the steps are replaced in place and the answer is a few
 * hundred bytes) and drops what fell out of the range. Drawn from it: jobs
 * finished per step by status (the store: as far back as jobs are kept),
 * queue depth and CPU/memory over time (the daemon's load samples, every
 * 5 s for the last 2 hours, averaged per step; the steps before the daemon
 * started, or before those 2 hours, are gaps). When the call fails the
 * charts give way to a short message and the rest of the page goes on.
 * Nothing but the range is kept in the browser.
 */
import {api, jobsApi} from '../api.js';
import {h, clear, card, fmtInt, fmtMs, fmtBytes, fmtAgo, statusBadge, poll, errorBox, STATUSES,
  backendText, tableWrap} from '../dom.js';
import {chartBox, statusChart, throughputChart, throughputLabel, queueChart, usageChart, stepLabel, chartsReady,
  FINISHED} from '../charts.js';

/* [label, minutes, step in seconds]: at most 120 steps each. */
export const RANGES = [['5m', 5, 5], ['30m', 30, 30], ['2h', 120, 60], ['6h', 360, 300], ['24h', 1440, 900],
  ['7d', 10080, 7200]];
const HISTORY_EVERY_MS = 15000;

/* since (Unix seconds, a whole step) and step for a range, now in ms. */
export function historyWindow(minutes, stepS, now = Date.now()) {
  const n = Math.round((minutes * 60) / stepS);
  const since = (Math.floor(now / 1000 / stepS) - (n - 1)) * stepS;
  return {since, step: stepS, n};
}

/* Merge a newer answer into the steps and samples held (steps replaced
 * from the answer's first on, samples appended after the last held), then
 * drop those older than `from` (Unix seconds). */
export function mergeHistory(held, ans, from) {
  const first = ans.steps.length ? ans.steps[0].t : Infinity;
  const steps = held.steps.filter((x) => x.t < first).concat(ans.steps).filter((x) => x.t >= from);
  const last = held.samples.length ? held.samples[held.samples.length - 1].t : -Infinity;
  const samples = held.samples.concat(ans.samples.filter((x) => x.t > last)).filter((x) => x.t >= from);
  return {steps, samples, step: ans.step_s, every: ans.sample_every_s};
}

/* The load samples averaged per step: [{t: Date, queued, running, cpu,
 * machineCpu, memory}], null where no sample (or no value) fell in a step. */
export function samplesPerStep(steps, samples, stepS) {
  const out = steps.map((x) => ({t: new Date(x.t * 1000), acc: {}}));
  if (!steps.length) return [];
  const t0 = steps[0].t;
  const add = (acc, k, v) => {
    if (typeof v !== 'number' || !Number.isFinite(v)) return;
    const a = acc[k] || (acc[k] = {s: 0, n: 0});
    a.s += v; a.n += 1;
  };
  for (const x of samples) {
    const i = Math.floor((x.t - t0) / stepS);
    if (i < 0 || i >= out.length) continue;
    const acc = out[i].acc;
    add(acc, 'queued', x.queued);
    add(acc, 'running', x.running);
    add(acc, 'cpu', x.cpu_percent);
    add(acc, 'machineCpu', x.machine_cpu_percent);
    if (typeof x.memory_used === 'number' && x.memory_total) add(acc, 'memory', (100 * x.memory_used) / x.memory_total);
  }
  const mean = (acc, k) => (acc[k] ? acc[k].s / acc[k].n : null);
  return out.map(({t, acc}) => ({t, queued: mean(acc, 'queued'), running: mean(acc, 'running'), cpu: mean(acc, 'cpu'),
    machineCpu: mean(acc, 'machineCpu'), memory: mean(acc, 'memory')}));
}

function fmtStep(s) { return s < 60 ? `${s} s` : s < 3600 ? `${s / 60} min` : `${s / 3600} h`; }

export function mount(root) {
  const uptime = h('span', {class: 'sub'});
  const err = h('div');
  const devBody = h('div', {class: 'grid grid-3', id: 'devices'}, h('p', {class: 'muted'}, 'Loading…'));
  const nodesBody = h('div', {id: 'nodes'}, h('p', {class: 'muted'}, 'Loading…'));
  const queueBody = h('div', {class: 'stats-row', id: 'queue'});
  const qchart = chartBox('Queue depth', 130);
  let range = RANGES[1];
  try {
    const saved = Number(sessionStorage.getItem('tessel.range'));
    range = RANGES.find((r) => r[1] === saved) || range;
    sessionStorage.removeItem('tessel.history'); /* the samples an older version kept */
  } catch { /* default */ }
  const status = chartBox('Jobs by status', 200);
  const statusEmpty = h('p', {class: 'empty', hidden: true}, 'No jobs yet.');
  const thr = chartBox('Jobs finished over time', 200);
  thr.canvas.id = 'throughput-chart';
  const thrStat = h('p', {class: 'muted', id: 'throughput'});
  const thrRange = h('p', {class: 'muted', id: 'throughput-range'});
  const histNote = h('p', {class: 'muted status-line', id: 'history-note'});
  const usageChartBox = chartBox('CPU and memory use over time', 160);
  /* shown instead of the history charts when GET /v1/stats/history fails */
  const histFail = () => h('p', {class: 'na', hidden: true, dataset: {historyError: ''}});
  const histErrs = [histFail(), histFail(), histFail()];
  const kindBody = h('div');
  const recentBody = h('div');
  const usageBody = h('div', {id: 'usage'});
  const rangeBtns = RANGES.map((r) => h('button', {type: 'button', class: 'btn btn-sm', 'aria-pressed': String(r === range),
    dataset: {range: r[0]}, onclick: () => {
      range = r;
      try { sessionStorage.setItem('tessel.range', String(r[1])); } catch { /* default next time */ }
      for (const [i, btn] of rangeBtns.entries()) btn.setAttribute('aria-pressed', String(RANGES[i] === r));
      held = null;
      destroyHistory();
      loadHistory();
    }}, r[0]));

  root.append(
    h('div', {class: 'page-head'}, h('h1', null, 'Overview'), uptime,
      h('div', {class: 'actions'}, h('a', {class: 'btn', href: '/metrics', id: 'metrics-link'}, 'Metrics (Prometheus)'),
        h('a', {class: 'btn btn-primary', href: '#/submit'}, 'Submit a job'))),
    err,
    h('div', {class: 'stack'},
      card('Devices', devBody),
      card('Nodes', nodesBody),
      h('div', {class: 'card-head'}, h('span', {class: 'muted', id: 'range-label'}, 'History:'),
        h('div', {class: 'range-pick', role: 'group', 'aria-labelledby': 'range-label'}, rangeBtns)),
      h('div', {class: 'grid grid-3'},
        card('Queue', queueBody, h('div', {style: 'margin-top:12px'}, qchart.box, histErrs[0])),
        card('Jobs by status', status.box, statusEmpty),
        card('Throughput', thr.box, histErrs[1], thrRange, thrStat, histNote)),
      card('CPU, memory and GPU use', usageBody, h('div', {style: 'margin-top:12px'}, usageChartBox.box, histErrs[2])),
      card('By kind and backend', kindBody),
      card('Latest jobs', recentBody)));

  let charts = {};
  let tick = 0;
  let held = null; /* {steps, samples, step, every} of the range shown */
  let histCtl = null;
  let histTimer = null;
  let stopped = false;

  function destroyHistory() {
    for (const k of ['queue', 'thr', 'usage']) if (charts[k]) { charts[k].destroy(); delete charts[k]; }
  }

  function showHistoryError(e) {
    const why = e && e.message ? e.message : String(e);
    for (const el of histErrs) {
      el.hidden = false;
      el.textContent = `History not available (GET /v1/stats/history: ${why}).`;
    }
    for (const b of [qchart.box, thr.box, usageChartBox.box]) b.hidden = true;
    thrRange.textContent = '';
    histNote.textContent = '';
  }

  function drawHistory() {
    for (const el of histErrs) el.hidden = true;
    for (const b of [qchart.box, thr.box, usageChartBox.box]) b.hidden = false;
    const [label, , stepS] = range;
    const steps = held.steps.map((x) => ({t: new Date(x.t * 1000), succeeded: x.succeeded, failed: x.failed,
      canceled: x.canceled}));
    const what = `the last ${label.replace(/(\d+)/, '$1 ').replace(/m$/, 'min').replace(/d$/, 'days')}, per ${fmtStep(stepS)}`;
    const points = samplesPerStep(held.steps, held.samples, stepS);
    const labels = steps.map((x) => stepLabel(x.t, stepS));
    if (chartsReady()) {
      charts.thr = updateOrMake(charts.thr, () => throughputChart(thr.canvas, steps, stepS, what), (c) => {
        c.data.labels = labels;
        FINISHED.forEach((st, i) => { c.data.datasets[i].data = steps.map((x) => x[st]); });
        throughputLabel(thr.canvas, steps, what);
      });
      charts.queue = updateOrMake(charts.queue, () => queueChart(qchart.canvas, points, stepS), (c) => {
        c.data.labels = labels;
        c.data.datasets[0].data = points.map((x) => x.running);
        c.data.datasets[1].data = points.map((x) => x.queued);
      });
      charts.usage = updateOrMake(charts.usage, () => usageChart(usageChartBox.canvas, points, stepS), (c) => {
        c.data.labels = labels;
        for (const [i, k] of ['cpu', 'machineCpu', 'memory'].entries()) c.data.datasets[i].data = points.map((x) => x[k]);
      });
    } else {
      throughputLabel(thr.canvas, steps, what);
    }
    const total = Number(thr.canvas.dataset.total);
    thrRange.dataset.total = String(total);
    thrRange.textContent = `${fmtInt(total)} finished over ${what}.`;
    const kept = held.samples.length ? Math.round((held.samples[held.samples.length - 1].t - held.samples[0].t) / 60) : 0;
    histNote.textContent = `Jobs finished per step from the service's store (as far back as jobs are kept); queue, ` +
      `CPU and memory from its load samples (one every ${held.every || 5} s, the last 2 hours, since it started: ` +
      `${kept < 1 ? 'under a minute' : kept + ' min'} of them in this range).`;
  }

  /* The whole range on load and on a change of range; later only from the
   * newest step held. */
  async function loadHistory() {
    clearTimeout(histTimer);
    if (histCtl) histCtl.abort();
    const ctl = new AbortController();
    histCtl = ctl;
    const [, minutes, stepS] = range;
    const win = historyWindow(minutes, stepS);
    const since = held && held.steps.length ? held.steps[held.steps.length - 1].t : win.since;
    try {
      const ans = await api.get(`/v1/stats/history?since=${since}&step=${stepS}`, {signal: ctl.signal});
      if (!ans || !Array.isArray(ans.steps) || !Array.isArray(ans.samples)) throw new Error('an answer without steps or samples');
      held = mergeHistory(held || {steps: [], samples: []}, ans, win.since);
      drawHistory();
    } catch (e) {
      if (e.name === 'AbortError') return;
      held = null;
      destroyHistory();
      showHistoryError(e);
    }
    if (!stopped && histCtl === ctl) histTimer = setTimeout(loadHistory, HISTORY_EVERY_MS);
  }

  async function refresh(signal) {
    const wantDevices = tick % 3 === 0;
    tick += 1;
    const [stats, list, devices, nodes] = await Promise.all([
      api.get('/v1/stats', {signal}),
      jobsApi.list({limit: 8}, {signal}),
      wantDevices ? api.get('/v1/devices', {signal}) : null,
      wantDevices ? api.get('/v1/nodes', {signal}) : null,
    ]);
    clear(err);
    if (devices) { renderDevices(devBody, devices); renderUsage(usageBody, stats, devices); }
    if (nodes) renderNodes(nodesBody, nodes);
    if (typeof stats.uptime_s === 'number') uptime.textContent = `up ${fmtUptime(stats.uptime_s)}`;
    const q = stats.queue || {};
    renderQueue(queueBody, q);
    const counts = {};
    for (const s of STATUSES) counts[s] = (stats.jobs_by_status || {})[s] || 0;
    const any = Object.values(counts).some((v) => v > 0);
    statusEmpty.hidden = any;
    status.box.hidden = !any;
    if (chartsReady() && any) charts.status = updateOrMake(charts.status, () => statusChart(status.canvas, counts),
      (c) => { c.data.datasets[0].data = Object.values(counts); });
    const rate = typeof stats.throughput_jobs_per_s === 'number' ? stats.throughput_jobs_per_s * 60 : null;
    const fin = stats.finished_since_start;
    clear(thrStat).append(
      h('span', {dataset: {finished: String(fin ?? '')}}, `${fmtInt(fin)} finished since the service started`),
      rate === null ? '' : ` · ${rate.toFixed(rate < 10 ? 2 : 1)} jobs/min on average`);
    renderKinds(kindBody, stats.by_kind || []);
    renderRecent(recentBody, (list.jobs || []).slice(0, 8));
  }

  loadHistory();
  const stop = poll(refresh, 2000, (e) => { clear(err); err.append(errorBox(e)); });
  return () => {
    stopped = true;
    clearTimeout(histTimer);
    if (histCtl) histCtl.abort();
    stop();
    for (const c of Object.values(charts)) c && c.destroy();
    charts = {};
  };
}

/* CPU, memory and GPU use: /v1/stats' `system` (the load now: the
 * daemon's CPU over the sampler's last interval, the machine's CPU and
 * memory) and each GPU's `utilization` of /v1/devices (through NVML; null
 * with `utilization_unavailable` when the driver's library cannot give it). */
function renderUsage(el, stats, devices) {
  clear(el);
  const sys = stats.system || null;
  const gpus = (((devices || {}).cuda || {}).devices || []);
  const rows = [];
  if (sys && typeof sys.cpu_percent === 'number') rows.push(['Tessel CPU', `${sys.cpu_percent.toFixed(0)} %`]);
  if (sys && typeof sys.machine_cpu_percent === 'number') rows.push(['machine CPU', `${sys.machine_cpu_percent.toFixed(0)} %`]);
  if (sys && typeof sys.memory_used === 'number') {
    rows.push(['machine memory in use', `${fmtBytes(sys.memory_used)}${sys.memory_total ? ` of ${fmtBytes(sys.memory_total)}` : ''}`]);
  }
  if (sys && typeof sys.process_rss === 'number') rows.push(['Tessel resident memory', fmtBytes(sys.process_rss)]);
  for (const g of gpus) {
    const u = g.utilization;
    if (u && typeof u.gpu_percent === 'number') {
      rows.push([`GPU cuda:${g.index} busy`, `${u.gpu_percent.toFixed(0)} %`]);
      rows.push([`GPU cuda:${g.index} memory in use`, `${fmtBytes(u.memory_used)} of ${fmtBytes(u.memory_total)}`]);
    } else if (g.utilization_unavailable) {
      rows.push([`GPU cuda:${g.index} busy`, `not available: ${g.utilization_unavailable}`]);
    }
  }
  if (!rows.length) {
    el.append(h('p', {class: 'na', id: 'usage-na'}, 'Not available: this server reports no CPU, memory or GPU ' +
      'use (an older version?). The process’s own CPU time and resident memory are in ',
    h('a', {href: '/metrics'}, '/metrics'), ' (process_cpu_seconds_total, process_resident_memory_bytes).'));
    return;
  }
  el.append(h('dl', {class: 'kv'}, rows.flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)])));
}

function updateOrMake(chart, make, update) {
  if (!chart) return make();
  update(chart);
  chart.update('none');
  return chart;
}

function fmtUptime(s) {
  if (s < 120) return `${Math.round(s)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} days`;
}

function renderDevices(el, d) {
  clear(el);
  const cpu = d.cpu || {};
  el.append(h('div', {class: 'device', dataset: {device: 'cpu'}},
    h('span', {class: 'muted'}, 'CPU'),
    h('span', {class: 'name'}, cpu.model || 'unknown model'),
    h('div', {class: 'stat'}, h('span', {class: 'v'}, fmtInt(cpu.threads)), h('span', {class: 'l'}, 'threads'))));
  const cuda = d.cuda || {};
  const devs = cuda.devices || [];
  if (!cuda.available || devs.length === 0) {
    el.append(h('div', {class: 'device', dataset: {device: 'none'}},
      h('span', {class: 'muted'}, 'GPU'),
      h('span', {class: 'name'}, 'No GPU in use'),
      h('span', {class: 'muted'}, cuda.reason || 'CUDA is not available on this machine.'),
      h('span', {class: 'muted'}, 'Jobs run on the CPU; backend "cuda" is refused with 503.')));
    return;
  }
  for (const g of devs) {
    const used = (g.memory_total || 0) - (g.memory_free || 0);
    const pct = g.memory_total ? (100 * used) / g.memory_total : 0;
    const id = `gpu-mem-${g.index}`;
    el.append(h('div', {class: 'device', dataset: {device: `cuda:${g.index}`}},
      h('span', {class: 'muted'}, `GPU cuda:${g.index}${g.healthy === false ? ' · unhealthy' : ''}`),
      h('span', {class: 'name'}, g.name || 'GPU'),
      h('span', {class: 'muted'}, `compute capability ${g.compute_capability ?? '?'} · ${fmtInt(g.multiprocessors)} SMs`),
      h('span', {id}, `memory in use ${fmtBytes(used)} of ${fmtBytes(g.memory_total)} (${pct.toFixed(0)}%)`),
      h('div', {class: 'meter', role: 'meter', 'aria-labelledby': id, 'aria-valuemin': '0', 'aria-valuemax': '100',
        'aria-valuenow': pct.toFixed(0)}, h('span', {style: `width:${pct.toFixed(1)}%`}))));
  }
  el.append(h('p', {class: 'muted span-all'}, `CUDA driver ${cuda.driver_version ?? '?'}, runtime ${cuda.runtime_version ?? '?'}`));
}

/* GET /v1/nodes: one row per node, live ones first. */
function renderNodes(el, d) {
  clear(el);
  const nodes = [...(d.nodes || [])].sort((a, b) => (b.alive - a.alive) || a.name.localeCompare(b.name));
  const live = nodes.filter((n) => n.alive).length;
  el.append(h('p', {class: 'muted', id: 'nodes-summary'}, d.store === 'postgresql'
    ? `${live} of ${nodes.length} node${nodes.length === 1 ? '' : 's'} live on one PostgreSQL store`
    : 'One node (SQLite store): this process.'));
  el.append(tableWrap('Nodes', h('table', null,
    h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'node'), h('th', {scope: 'col'}, 'state'),
      h('th', {scope: 'col', class: 'num'}, 'CPU workers'), h('th', {scope: 'col', class: 'num'}, 'GPUs'),
      h('th', {scope: 'col', class: 'num'}, 'running'), h('th', {scope: 'col', class: 'num'}, 'queued'),
      h('th', {scope: 'col', class: 'num'}, 'CPU load'), h('th', {scope: 'col', class: 'num'}, 'jobs done'),
      h('th', {scope: 'col'}, 'heartbeat'))),
    h('tbody', null, nodes.map((n) => h('tr', {dataset: {node: n.name}},
      h('td', {title: `${n.id} · ${n.url} · ${n.version}`}, n.name),
      h('td', null, h('span', {class: `badge st-${n.alive ? 'succeeded' : 'failed'}`, dataset: {alive: String(n.alive)}}, n.alive ? 'live' : 'gone')),
      h('td', {class: 'num'}, fmtInt(n.threads)), h('td', {class: 'num'}, fmtInt(n.gpus)),
      h('td', {class: 'num'}, fmtInt(n.running)), h('td', {class: 'num'}, fmtInt(n.queued)),
      h('td', {class: 'num'}, typeof n.load === 'number' ? `${n.load.toFixed(0)}%` : '—'),
      h('td', {class: 'num'}, fmtInt(n.jobs_done)),
      h('td', {title: n.heartbeat_at || ''}, n.heartbeat_at ? fmtAgo(n.heartbeat_at) : '—')))))));
}

function renderQueue(el, q) {
  clear(el);
  const stat = (v, l, key) => h('div', {class: 'stat', dataset: {stat: key}},
    h('span', {class: 'v'}, fmtInt(v ?? 0)), h('span', {class: 'l'}, l));
  el.append(stat(q.queued, 'queued', 'queued'), stat(q.running, 'running', 'running'),
    stat(q.workers, 'CPU workers', 'workers'), stat(q.gpu_workers, 'GPU workers', 'gpu_workers'));
}

function renderKinds(el, rows) {
  clear(el);
  const agg = new Map();
  for (const r of rows) {
    const k = `${r.kind}|${r.backend}`;
    const a = agg.get(k) || {kind: r.kind, backend: r.backend || '—', ok: 0, bad: 0, p50: null, p95: null};
    if (r.status === 'succeeded') { a.ok += r.count; a.p50 = r.p50_ms; a.p95 = r.p95_ms; }
    else if (r.status === 'failed' || r.status === 'canceled') a.bad += r.count;
    agg.set(k, a);
  }
  if (agg.size === 0) { el.append(h('p', {class: 'empty'}, 'No finished jobs yet.')); return; }
  const list = [...agg.values()].sort((a, b) => a.kind.localeCompare(b.kind) || a.backend.localeCompare(b.backend));
  el.append(tableWrap('Jobs by kind and backend', h('table', null,
    h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'kind'), h('th', {scope: 'col'}, 'backend'),
      h('th', {scope: 'col', class: 'num'}, 'succeeded'), h('th', {scope: 'col', class: 'num'}, 'failed or canceled'),
      h('th', {scope: 'col', class: 'num'}, 'p50 compute'), h('th', {scope: 'col', class: 'num'}, 'p95 compute'))),
    h('tbody', null, list.map((a) => h('tr', null, h('td', null, a.kind), h('td', null, a.backend),
      h('td', {class: 'num'}, fmtInt(a.ok)), h('td', {class: 'num'}, fmtInt(a.bad)),
      h('td', {class: 'num'}, fmtMs(a.p50)), h('td', {class: 'num'}, fmtMs(a.p95))))))));
}

function renderRecent(el, jobs) {
  clear(el);
  if (!jobs.length) {
    el.append(h('p', {class: 'empty'}, 'No jobs yet. ', h('a', {href: '#/submit'}, 'Submit the first one.')));
    return;
  }
  /* status right after the id: on a phone the table scrolls sideways
   * inside its box, and the status must be in view without scrolling */
  el.append(tableWrap('Latest jobs', h('table', {id: 'recent-table'},
    h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'job'), h('th', {scope: 'col'}, 'status'),
      h('th', {scope: 'col'}, 'kind'), h('th', {scope: 'col'}, 'backend'), h('th', {scope: 'col'}, 'label'),
      h('th', {scope: 'col', class: 'num'}, 'total'), h('th', {scope: 'col'}, 'created'))),
    h('tbody', null, jobs.map((j) => h('tr', {dataset: {id: j.id}},
      h('td', {class: 'c-id'}, h('a', {href: `#/jobs/${encodeURIComponent(j.id)}`, class: 'mono', title: j.id}, j.id)),
      h('td', {class: 'c-status'}, statusBadge(j.status)), h('td', null, j.kind), h('td', null, backendText(j)),
      h('td', null, h('div', {class: 'label-cell muted', title: j.label || ''}, j.label || '')),
      h('td', {class: 'num'}, fmtMs((j.timings_ms || {}).total)),
      h('td', {title: j.created_at}, fmtAgo(j.created_at))))))));
}
