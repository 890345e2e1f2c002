/* overview.js — the first page: what this machine has and what it is doing.
 *
 * Devices (GET /v1/devices: CPU model and threads; each GPU with its memory
 * in use, or why CUDA is unavailable), the queue and jobs by status (GET
 * /v1/stats), throughput over the last 30 minutes (finished_at of the
 * newest jobs from GET /v1/jobs), the per kind/backend table of p50/p95 and
 * the latest jobs, and the queue depth sampled at each poll since the page
 * opened. Polls every 2 s (devices every 6 s); charts are updated
 * in place, not rebuilt, so they do not flicker.
 */
import {api, jobsApi} from '../api.js';
import {h, clear, card, fmtInt, fmtMs, fmtBytes, fmtAgo, statusBadge, poll, errorBox, STATUSES,
  backendText} from '../dom.js';
import {chartBox, statusChart, throughputChart, queueChart, chartsReady} from '../charts.js';

const WINDOW_MIN = 30;
const QUEUE_SAMPLES = 150; /* 5 minutes at one sample per 2 s */

export function mount(root) {
  const uptime = h('span', {class: 'sub'});
  const err = h('div');
  const devBody = h('div', {class: 'grid grid-3', id: 'devices'}, h('p', {class: 'muted'}, 'Loading…'));
  const queueBody = h('div', {class: 'stats-row', id: 'queue'});
  const qchart = chartBox('Queue depth', 130);
  const samples = [];
  const status = chartBox('Jobs by status', 200);
  const statusEmpty = h('p', {class: 'empty', hidden: true}, 'No jobs yet.');
  const thr = chartBox('Jobs finished per minute', 200);
  const thrStat = h('p', {class: 'muted'});
  const kindBody = h('div');
  const recentBody = h('div');

  root.append(
    h('div', {class: 'page-head'}, h('h1', null, 'Overview'), uptime,
      h('div', {class: 'actions'}, h('a', {class: 'btn btn-primary', href: '#/submit'}, 'Submit a job'))),
    err,
    h('div', {class: 'stack'},
      card('Devices', devBody),
      h('div', {class: 'grid grid-3'},
        card('Queue', queueBody, h('div', {style: 'margin-top:12px'}, qchart.box)),
        card('Jobs by status', status.box, statusEmpty),
        card(`Throughput, last ${WINDOW_MIN} minutes`, thr.box, thrStat)),
      card('By kind and backend', kindBody),
      card('Latest jobs', recentBody)));

  let charts = {};
  let tick = 0;

  async function refresh(signal) {
    const wantDevices = tick % 3 === 0;
    tick += 1;
    const [stats, list, devices] = await Promise.all([
      api.get('/v1/stats', {signal}),
      jobsApi.list({limit: 200}, {signal}),
      wantDevices ? api.get('/v1/devices', {signal}) : null,
    ]);
    clear(err);
    if (devices) renderDevices(devBody, devices);
    if (typeof stats.uptime_s === 'number') uptime.textContent = `up ${fmtUptime(stats.uptime_s)}`;
    const q = stats.queue || {};
    renderQueue(queueBody, q);
    samples.push({t: new Date(), queued: q.queued || 0, running: q.running || 0});
    if (samples.length > QUEUE_SAMPLES) samples.shift();
    if (chartsReady()) charts.queue = updateOrMake(charts.queue, () => queueChart(qchart.canvas, samples), (c) => {
      c.data.labels = samples.map((x) => x.t.toLocaleTimeString('en-GB'));
      c.data.datasets[0].data = samples.map((x) => x.running);
      c.data.datasets[1].data = samples.map((x) => x.queued);
    });
    const counts = {};
    for (const s of STATUSES) counts[s] = (stats.jobs_by_status || {})[s] || 0;
    const any = Object.values(counts).some((v) => v > 0);
    statusEmpty.hidden = any;
    status.box.hidden = !any;
    if (chartsReady() && any) charts.status = updateOrMake(charts.status, () => statusChart(status.canvas, counts),
      (c) => { c.data.datasets[0].data = Object.values(counts); });
    const buckets = throughput(list.jobs || []);
    const last5 = buckets.slice(-5).reduce((a, b) => a + b.n, 0) / 5;
    thrStat.textContent = `${last5.toFixed(1)} jobs/min over the last 5 minutes` +
      (typeof stats.finished_since_start === 'number' ? ` · ${fmtInt(stats.finished_since_start)} finished since start` : '');
    if (chartsReady()) charts.thr = updateOrMake(charts.thr, () => throughputChart(thr.canvas, buckets), (c) => {
      c.data.labels = buckets.map((b) => b.t.toLocaleTimeString('en-GB', {hour: '2-digit', minute: '2-digit'}));
      c.data.datasets[0].data = buckets.map((b) => b.n);
    });
    renderKinds(kindBody, stats.by_kind || []);
    renderRecent(recentBody, (list.jobs || []).slice(0, 8));
  }

  const stop = poll(refresh, 2000, (e) => { clear(err); err.append(errorBox(e)); });
  return () => { stop(); for (const c of Object.values(charts)) c && c.destroy(); charts = {}; };
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

function throughput(jobs) {
  const now = Date.now();
  const start = Math.floor(now / 60000) * 60000 - (WINDOW_MIN - 1) * 60000;
  const buckets = Array.from({length: WINDOW_MIN}, (_, i) => ({t: new Date(start + i * 60000), n: 0}));
  for (const j of jobs) {
    if (!j.finished_at) continue;
    const t = new Date(j.finished_at).getTime();
    const i = Math.floor((t - start) / 60000);
    if (i >= 0 && i < WINDOW_MIN) buckets[i].n += 1;
  }
  return buckets;
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
  el.append(h('div', {class: 'table-wrap'}, h('table', null,
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
  el.append(h('div', {class: 'table-wrap'}, h('table', null,
    h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'job'), h('th', {scope: 'col'}, 'kind'),
      h('th', {scope: 'col'}, 'backend'), h('th', {scope: 'col'}, 'status'), h('th', {scope: 'col'}, 'label'),
      h('th', {scope: 'col', class: 'num'}, 'total'), h('th', {scope: 'col'}, 'created'))),
    h('tbody', null, jobs.map((j) => h('tr', null,
      h('td', null, h('a', {href: `#/jobs/${encodeURIComponent(j.id)}`, class: 'mono'}, j.id)),
      h('td', null, j.kind), h('td', null, backendText(j)), h('td', null, statusBadge(j.status)),
      h('td', {class: 'label-cell muted'}, j.label || ''),
      h('td', {class: 'num'}, fmtMs((j.timings_ms || {}).total)),
      h('td', {title: j.created_at}, fmtAgo(j.created_at))))))));
}
