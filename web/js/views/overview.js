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
 * History: the API keeps no time series, so this page records one sample
 * per poll (queued, running, finished_since_start) in sessionStorage
 * ("tessel.history", up to HISTORY_H hours, thinned to one sample per 30 s
 * beyond the last 30 minutes), so it outlives going to another page and a
 * reload, and draws the queue depth and the jobs finished per minute (the
 * difference of finished_since_start between samples; a server restart,
 * seen as a smaller uptime, starts a new series) over 5 min, 30 min, 2 h or
 * 6 h. It covers the time a dashboard was open; CPU, memory and GPU use
 * over time are shown when the API gives them (it does not yet: see
 * web/README.md).
 */
import {api, jobsApi} from '../api.js';
import {h, clear, card, fmtInt, fmtMs, fmtBytes, fmtAgo, statusBadge, poll, errorBox, STATUSES,
  backendText, tableWrap} from '../dom.js';
import {chartBox, statusChart, throughputChart, queueChart, chartsReady} from '../charts.js';

const HISTORY_KEY = 'tessel.history';
const HISTORY_H = 6;
const FINE_MS = 30 * 60000; /* full resolution for the last 30 minutes */
const COARSE_MS = 30000; /* one sample per 30 s before that */
const RANGES = [['5m', 5], ['30m', 30], ['2h', 120], ['6h', 360]];

/* samples: [{t: ms, q: queued, r: running, f: finished_since_start, u: uptime_s}] */
export function loadHistory() {
  try {
    const v = JSON.parse(sessionStorage.getItem(HISTORY_KEY) || '[]');
    return Array.isArray(v) ? v.filter((x) => x && typeof x.t === 'number') : [];
  } catch { return []; }
}

export function addSample(hist, s, now = s.t) {
  hist.push(s);
  const oldest = now - HISTORY_H * 3600000;
  const out = [];
  let lastCoarse = -Infinity;
  for (const x of hist) {
    if (x.t < oldest) continue;
    if (x.t < now - FINE_MS) {
      if (x.t - lastCoarse < COARSE_MS) continue;
      lastCoarse = x.t;
    }
    out.push(x);
  }
  return out;
}

function saveHistory(hist) {
  try { sessionStorage.setItem(HISTORY_KEY, JSON.stringify(hist)); } catch { /* full or off: memory only */ }
}

/* Jobs finished per minute over the last `minutes`, from the differences of
 * finished_since_start; a drop of uptime (a restart) is not counted. */
export function finishedPerMinute(hist, minutes, now = Date.now()) {
  const step = minutes <= 30 ? 60000 : minutes <= 120 ? 300000 : 900000;
  const n = Math.ceil((minutes * 60000) / step);
  const start = Math.floor(now / step) * step - (n - 1) * step;
  const buckets = Array.from({length: n}, (_, i) => ({t: new Date(start + i * step), n: 0}));
  for (let i = 1; i < hist.length; i++) {
    const a = hist[i - 1];
    const b = hist[i];
    if (b.u < a.u || b.f < a.f) continue; /* the server restarted */
    const k = Math.floor((b.t - start) / step);
    if (k >= 0 && k < n) buckets[k].n += b.f - a.f;
  }
  const perMin = step / 60000;
  return {buckets: buckets.map((x) => ({t: x.t, n: x.n / perMin})), step};
}

export function mount(root) {
  const uptime = h('span', {class: 'sub'});
  const err = h('div');
  const devBody = h('div', {class: 'grid grid-3', id: 'devices'}, h('p', {class: 'muted'}, 'Loading…'));
  const nodesBody = h('div', {id: 'nodes'}, h('p', {class: 'muted'}, 'Loading…'));
  const queueBody = h('div', {class: 'stats-row', id: 'queue'});
  const qchart = chartBox('Queue depth', 130);
  let hist = loadHistory();
  let range = 30;
  try { range = Number(sessionStorage.getItem('tessel.range')) || 30; } catch { /* default */ }
  const status = chartBox('Jobs by status', 200);
  const statusEmpty = h('p', {class: 'empty', hidden: true}, 'No jobs yet.');
  const thr = chartBox('Jobs finished per minute', 200);
  const thrStat = h('p', {class: 'muted', id: 'throughput'});
  const histNote = h('p', {class: 'muted status-line', id: 'history-note'});
  const kindBody = h('div');
  const recentBody = h('div');
  const usageBody = h('div', {id: 'usage'});
  const rangeBtns = RANGES.map(([label, min]) => h('button', {type: 'button', class: 'btn btn-sm', 'aria-pressed': String(min === range),
    dataset: {range: label}, onclick: () => {
      range = min;
      try { sessionStorage.setItem('tessel.range', String(min)); } catch { /* default next time */ }
      for (const b of rangeBtns) b.setAttribute('aria-pressed', String(b === rangeBtns[RANGES.findIndex((r) => r[1] === min)]));
      drawHistory(true);
    }}, label));

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
        card('Queue', queueBody, h('div', {style: 'margin-top:12px'}, qchart.box)),
        card('Jobs by status', status.box, statusEmpty),
        card('Throughput', thr.box, thrStat, histNote)),
      card('CPU, memory and GPU use', usageBody),
      card('By kind and backend', kindBody),
      card('Latest jobs', recentBody)));

  let charts = {};
  let tick = 0;

  function drawHistory(rebuild) {
    const now = Date.now();
    const from = now - range * 60000;
    const shown = hist.filter((x) => x.t >= from);
    const samples = shown.map((x) => ({t: new Date(x.t), queued: x.q, running: x.r}));
    const fmtT = (d) => d.toLocaleTimeString('en-GB', range > 30 ? {hour: '2-digit', minute: '2-digit'} : undefined);
    if (rebuild) { for (const k of ['queue', 'thr']) if (charts[k]) { charts[k].destroy(); delete charts[k]; } }
    if (chartsReady()) charts.queue = updateOrMake(charts.queue, () => queueChart(qchart.canvas, samples), (c) => {
      c.data.labels = samples.map((x) => fmtT(x.t));
      c.data.datasets[0].data = samples.map((x) => x.running);
      c.data.datasets[1].data = samples.map((x) => x.queued);
    });
    const {buckets} = finishedPerMinute(hist, range, now);
    if (chartsReady()) charts.thr = updateOrMake(charts.thr, () => throughputChart(thr.canvas, buckets, range), (c) => {
      c.data.labels = buckets.map((b) => b.t.toLocaleTimeString('en-GB', {hour: '2-digit', minute: '2-digit'}));
      c.data.datasets[0].data = buckets.map((b) => b.n);
    });
    const since = hist.length ? Math.round((now - hist[0].t) / 60000) : 0;
    histNote.textContent = `Recorded by this browser tab while the overview was open: ${since < 1 ? 'under a minute' : since + ' min'} ` +
      `of history (kept up to ${HISTORY_H} h). The service keeps no time series of its own.`;
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
    const now = Date.now();
    hist = addSample(hist, {t: now, q: q.queued || 0, r: q.running || 0, f: stats.finished_since_start || 0,
      u: stats.uptime_s || 0}, now);
    saveHistory(hist);
    drawHistory(false);
    const counts = {};
    for (const s of STATUSES) counts[s] = (stats.jobs_by_status || {})[s] || 0;
    const any = Object.values(counts).some((v) => v > 0);
    statusEmpty.hidden = any;
    status.box.hidden = !any;
    if (chartsReady() && any) charts.status = updateOrMake(charts.status, () => statusChart(status.canvas, counts),
      (c) => { c.data.datasets[0].data = Object.values(counts); });
    const rate = typeof stats.throughput_jobs_per_s === 'number' ? stats.throughput_jobs_per_s * 60 : null;
    const fin = stats.finished_since_start;
    const last5 = finishedPerMinute(hist, 5, now).buckets.reduce((a, b) => a + b.n, 0) / 5;
    clear(thrStat).append(
      h('span', {dataset: {finished: String(fin ?? '')}}, `${fmtInt(fin)} finished since the service started`),
      rate === null ? '' : ` · ${rate.toFixed(rate < 10 ? 2 : 1)} jobs/min on average`,
      ` · ${last5.toFixed(1)} jobs/min over the last 5 minutes`);
    renderKinds(kindBody, stats.by_kind || []);
    renderRecent(recentBody, (list.jobs || []).slice(0, 8));
  }

  drawHistory(false);
  const stop = poll(refresh, 2000, (e) => { clear(err); err.append(errorBox(e)); });
  return () => { stop(); for (const c of Object.values(charts)) c && c.destroy(); charts = {}; };
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
  el.append(tableWrap('Latest jobs', h('table', null,
    h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'job'), h('th', {scope: 'col'}, 'kind'),
      h('th', {scope: 'col'}, 'backend'), h('th', {scope: 'col'}, 'status'), h('th', {scope: 'col'}, 'label'),
      h('th', {scope: 'col', class: 'num'}, 'total'), h('th', {scope: 'col'}, 'created'))),
    h('tbody', null, jobs.map((j) => h('tr', null,
      h('td', null, h('a', {href: `#/jobs/${encodeURIComponent(j.id)}`, class: 'mono'}, j.id)),
      h('td', null, j.kind), h('td', null, backendText(j)), h('td', null, statusBadge(j.status)),
      h('td', null, h('div', {class: 'label-cell muted', title: j.label || ''}, j.label || '')),
      h('td', {class: 'num'}, fmtMs((j.timings_ms || {}).total)),
      h('td', {title: j.created_at}, fmtAgo(j.created_at))))))));
}
