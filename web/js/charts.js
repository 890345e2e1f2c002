/* charts.js — every chart of the dashboard, over the vendored Chart.js
 * (window.Chart, loaded by index.html) plus one hand-drawn canvas: the
 * heatmap of a distance matrix, which Chart.js has no type for.
 *
 * Colours come from the CSS custom properties of style.css, so the charts
 * follow the light/dark scheme; app.js re-mounts the view when the scheme
 * changes. Each chart sits in a .chart-box of fixed height (Chart.js then
 * fills it) and its canvas gets role="img" and an aria-label that says in
 * words what the chart shows. valueLabels (an inline plugin) writes a text
 * on each bar: used for "42 ms · 21.4×" on the compare chart.
 */
import {h, fmtMs, fmtSize, backendFamily} from './dom.js';

export function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

export function backendColor(name) {
  const fam = backendFamily(name);
  return css(`--c-${fam}`) || css('--c-other');
}

export function statusColor(status) { return css(`--st-${status}`) || css('--c-other'); }

const valueLabels = {
  id: 'valueLabels',
  afterDatasetsDraw(chart) {
    const ds = chart.data.datasets[0];
    const texts = ds && ds.valueLabels;
    if (!texts) return;
    const {ctx} = chart;
    const meta = chart.getDatasetMeta(0);
    const horizontal = chart.options.indexAxis === 'y';
    ctx.save();
    ctx.fillStyle = css('--fg');
    ctx.font = `600 12px ${css('--font')}`;
    meta.data.forEach((bar, i) => {
      const t = texts[i];
      if (!t) return;
      if (horizontal) {
        ctx.textAlign = 'left';
        ctx.textBaseline = 'middle';
        ctx.fillText(t, bar.x + 6, bar.y);
      } else {
        ctx.textAlign = 'center';
        ctx.textBaseline = 'bottom';
        ctx.fillText(t, bar.x, bar.y - 4);
      }
    });
    ctx.restore();
  },
};

function baseOptions() {
  const grid = css('--grid');
  const muted = css('--muted');
  return {
    responsive: true,
    maintainAspectRatio: false,
    animation: {duration: 250},
    color: muted,
    font: {family: css('--font')},
    plugins: {
      legend: {labels: {color: muted, boxWidth: 10, boxHeight: 10, usePointStyle: true}},
      tooltip: {backgroundColor: css('--tooltip-bg'), titleColor: css('--tooltip-fg'),
        bodyColor: css('--tooltip-fg'), borderColor: grid, borderWidth: 1},
    },
    scales: {},
  };
}

function axis(extra) {
  const grid = css('--grid');
  const muted = css('--muted');
  return {grid: {color: grid}, border: {color: grid}, ticks: {color: muted}, title: {color: muted}, ...extra};
}

/* A chart in a fixed-height box; the returned element holds the canvas. */
export function chartBox(label, height = 240) {
  const canvas = h('canvas', {role: 'img', 'aria-label': label});
  const box = h('div', {class: 'chart-box', style: `height:${height}px`}, canvas);
  return {box, canvas};
}

function make(canvas, config) {
  const prev = window.Chart.getChart(canvas);
  if (prev) prev.destroy();
  config.plugins = [...(config.plugins || []), valueLabels];
  return new window.Chart(canvas, config);
}

export function chartsReady() { return typeof window.Chart === 'function'; }

/* Phases of one job, one horizontal bar each, total in the aria-label. */
export const PHASES = ['queue', 'prepare', 'h2d', 'compute', 'd2h', 'store'];
const PHASE_TEXT = {queue: 'queue', prepare: 'prepare', h2d: 'host → device', compute: 'compute',
  d2h: 'device → host', store: 'store'};

/* split: for a compare job, [{backend, ms}]: its compute phase is drawn as
 * one bar per backend ("compute · cpu") instead of their sum. */
export function timingsChart(canvas, timings, split) {
  /* host<->device phases only when they took time (a GPU run) */
  const phases = PHASES.filter((p) => typeof timings[p] === 'number' && (timings[p] > 0 || (p !== 'h2d' && p !== 'd2h')));
  const bars = phases.flatMap((p) => (p === 'compute' && split
    ? split.map((x) => ({label: `compute · ${x.backend}`, v: x.ms, c: backendColor(x.backend)}))
    : [{label: PHASE_TEXT[p], v: timings[p], c: css(`--ph-${p}`)}]));
  const values = bars.map((b) => b.v);
  const colors = bars.map((b) => b.c);
  canvas.setAttribute('aria-label', 'Time per phase: ' +
    bars.map((b) => `${b.label} ${fmtMs(b.v)}`).join(', ') +
    (typeof timings.total === 'number' ? `; total ${fmtMs(timings.total)}` : ''));
  const opts = baseOptions();
  opts.indexAxis = 'y';
  opts.plugins.legend.display = false;
  opts.plugins.tooltip.callbacks = {label: (c) => fmtMs(c.raw)};
  opts.layout = {padding: {right: 70}};
  opts.scales = {x: axis({beginAtZero: true, title: {display: true, text: 'milliseconds', color: css('--muted')}}),
    y: axis({grid: {display: false}})};
  return make(canvas, {type: 'bar', data: {labels: bars.map((b) => b.label),
    datasets: [{data: values, backgroundColor: colors, borderRadius: 4, maxBarThickness: 26,
      valueLabels: values.map((v) => fmtMs(v))}]}, options: opts});
}

/* compare: [{backend, ms, threads?}] -> bars with "ms · speedup" written on
 * them; the speedup is against serial (or the slowest when no serial). */
export function compareChart(canvas, compare) {
  const rows = compare.filter((c) => typeof c.ms === 'number');
  const serial = rows.find((c) => backendFamily(c.backend) === 'serial');
  const ref = serial ? serial.ms : Math.max(...rows.map((c) => c.ms));
  const refName = serial ? 'serial' : 'the slowest';
  const labels = rows.map((c) => (c.threads ? `${c.backend} (${c.threads} threads)` : c.backend));
  const speed = rows.map((c) => ref / c.ms);
  canvas.setAttribute('aria-label', `Compute time by backend, speedup against ${refName}: ` +
    rows.map((c, i) => `${labels[i]} ${fmtMs(c.ms)}, ${speed[i].toFixed(1)} times`).join('; '));
  const opts = baseOptions();
  opts.plugins.legend.display = false;
  opts.plugins.tooltip.callbacks = {label: (c) => `${fmtMs(c.raw)} · ${speed[c.dataIndex].toFixed(2)}× vs ${refName}`};
  opts.layout = {padding: {top: 24}};
  opts.scales = {y: axis({beginAtZero: true, grace: '12%', title: {display: true, text: 'milliseconds', color: css('--muted')}}),
    x: axis({grid: {display: false}})};
  return make(canvas, {type: 'bar', data: {labels, datasets: [{data: rows.map((c) => c.ms),
    backgroundColor: rows.map((c) => backendColor(c.backend)), borderRadius: 6, maxBarThickness: 90,
    valueLabels: rows.map((c, i) => `${fmtMs(c.ms)} · ${speed[i] >= 10 ? speed[i].toFixed(0) : speed[i].toFixed(1)}×`)}]},
  options: opts});
}

export function statusChart(canvas, counts) {
  const names = Object.keys(counts);
  const values = names.map((n) => counts[n]);
  canvas.setAttribute('aria-label', 'Jobs by status: ' + names.map((n, i) => `${n} ${values[i]}`).join(', '));
  const opts = baseOptions();
  opts.cutout = '62%';
  opts.plugins.legend.position = 'right';
  return make(canvas, {type: 'doughnut', data: {labels: names, datasets: [{data: values,
    backgroundColor: names.map(statusColor), borderColor: css('--card'), borderWidth: 2}]}, options: opts});
}

/* One label per step of a history chart: the time of day, with seconds
 * for steps under a minute and the date for steps of an hour or more. */
export function stepLabel(d, stepS) {
  if (stepS >= 3600) return d.toLocaleString('en-GB', {day: '2-digit', month: 'short', hour: '2-digit', minute: '2-digit'});
  return d.toLocaleTimeString('en-GB', stepS < 60 ? undefined : {hour: '2-digit', minute: '2-digit'});
}

/* steps: [{t: Date, succeeded, failed, canceled}] — jobs finished per step
 * (GET /v1/stats/history), one stacked bar per step; `what` says the range
 * and step in words ("the last 30 min, per 30 s"). The aria-label gives the
 * totals, so the chart's content is there in words. */
export const FINISHED = ['succeeded', 'failed', 'canceled'];
export function throughputChart(canvas, steps, stepS, what) {
  throughputLabel(canvas, steps, what);
  const opts = baseOptions();
  opts.animation = false;
  opts.plugins.legend.position = 'bottom';
  opts.scales = {y: axis({stacked: true, beginAtZero: true, ticks: {precision: 0, color: css('--muted')},
    title: {display: true, text: 'jobs per step', color: css('--muted')}}), x: axis({stacked: true, grid: {display: false},
    ticks: {maxTicksLimit: 6, maxRotation: 0, color: css('--muted')}})};
  return make(canvas, {type: 'bar', data: {labels: steps.map((x) => stepLabel(x.t, stepS)),
    datasets: FINISHED.map((st) => ({label: st, data: steps.map((x) => x[st]), backgroundColor: statusColor(st),
      borderRadius: 2, stack: 'finished'}))}, options: opts});
}

/* The words of the throughput chart, also used when it is updated in place. */
export function throughputLabel(canvas, steps, what) {
  const sum = (st) => steps.reduce((a, x) => a + x[st], 0);
  const total = FINISHED.reduce((a, st) => a + sum(st), 0);
  canvas.setAttribute('aria-label', `Jobs finished over ${what}: ${total} in all (` +
    FINISHED.map((st) => `${sum(st)} ${st}`).join(', ') + ')');
  canvas.dataset.total = String(total);
}

/* points: [{t: Date, queued, running}] (null where no sample fell in a
 * step) — queue depth over time, from the daemon's load samples. */
export function queueChart(canvas, points, stepS) {
  canvas.setAttribute('aria-label', 'Queue depth over time: queued and running jobs');
  const opts = baseOptions();
  opts.animation = false;
  opts.plugins.legend.position = 'bottom';
  opts.elements = {point: {radius: 0}};
  opts.scales = {y: axis({beginAtZero: true, suggestedMax: 2, ticks: {precision: 0, color: css('--muted')}}),
    x: axis({grid: {display: false}, ticks: {maxTicksLimit: 4, maxRotation: 0, color: css('--muted')}})};
  const labels = points.map((s) => stepLabel(s.t, stepS));
  return make(canvas, {type: 'line', data: {labels, datasets: [
    {label: 'running', data: points.map((s) => s.running), borderColor: css('--st-running'),
      backgroundColor: css('--st-running') + '33', fill: true, tension: 0.25, borderWidth: 2},
    {label: 'queued', data: points.map((s) => s.queued), borderColor: css('--st-queued'),
      backgroundColor: css('--st-queued') + '33', fill: true, tension: 0.25, borderWidth: 2},
  ]}, options: opts});
}

/* points: [{t: Date, cpu, machineCpu, memory}] in percent (null where
 * unknown) — the daemon's CPU, the machine's CPU and memory over time. */
export const USAGE_SERIES = [['cpu', 'Tessel CPU', '--c-cpu'], ['machineCpu', 'machine CPU', '--c-auto'],
  ['memory', 'machine memory', '--c-other']];
export function usageChart(canvas, points, stepS) {
  canvas.setAttribute('aria-label', 'CPU and memory use over time, in percent: Tessel CPU, machine CPU, machine memory');
  const opts = baseOptions();
  opts.animation = false;
  opts.plugins.legend.position = 'bottom';
  opts.elements = {point: {radius: 0}};
  opts.scales = {y: axis({beginAtZero: true, suggestedMax: 100, title: {display: true, text: '%', color: css('--muted')}}),
    x: axis({grid: {display: false}, ticks: {maxTicksLimit: 6, maxRotation: 0, color: css('--muted')}})};
  return make(canvas, {type: 'line', data: {labels: points.map((s) => stepLabel(s.t, stepS)),
    datasets: USAGE_SERIES.map(([k, label, colour]) => ({label, data: points.map((s) => s[k]),
      borderColor: css(colour) || css('--c-other'), backgroundColor: css(colour) || css('--c-other'),
      tension: 0.25, borderWidth: 2}))}, options: opts});
}

/* series: {backend: [{x: size, y: ms, id}]}; medians: {backend: [{x, y}]}.
 * A log-log scatter of every recorded run, with a line through the medians. */
export function perfChart(canvas, kind, series, medians, unit) {
  const datasets = [];
  for (const [b, pts] of Object.entries(series)) {
    const color = backendColor(b);
    datasets.push({type: 'scatter', label: b, data: pts, backgroundColor: color + '99',
      borderColor: color, pointRadius: 3.5, pointHoverRadius: 6});
    if (medians[b] && medians[b].length > 1) {
      datasets.push({type: 'line', label: `${b} median`, data: medians[b], borderColor: color,
        backgroundColor: color, borderWidth: 2, pointRadius: 0, tension: 0, showInLegend: false});
    }
  }
  const n = Object.values(series).reduce((a, p) => a + p.length, 0);
  canvas.setAttribute('aria-label', `${kind}: job time against input size, log-log, ${n} runs on ` +
    Object.keys(series).join(', '));
  const opts = baseOptions();
  opts.animation = false;
  opts.plugins.legend.labels.filter = (item, data) => !data.datasets[item.datasetIndex].label.endsWith(' median');
  opts.plugins.tooltip.callbacks = {label: (c) => `${c.dataset.label}: ${fmtSize(c.raw.x)} ${unit} in ${fmtMs(c.raw.y)}`};
  /* Label 1, 2 and 5 times a power of ten over a few decades, only the
   * powers of ten over many; leave the other log ticks bare. */
  const logLabeler = (lo, hi) => {
    const marks = Math.log10(hi / lo) > 3 ? [1] : [1, 2, 5];
    return (v) => {
      const m = v / 10 ** Math.floor(Math.log10(v) + 1e-9);
      return marks.some((k) => Math.abs(m - k) < 1e-6);
    };
  };
  /* Whole decades on both axes, so there is always a labelled tick. */
  const all = Object.values(series).flat();
  const dec = (v, f) => 10 ** f(Math.log10(v) + (f === Math.floor ? -0.05 : 0.05));
  const xs = all.map((p) => p.x);
  const ys = all.map((p) => p.y);
  const msTick = (v) => (v >= 1000 ? `${v / 1000} s` : `${v} ms`);
  const xLo = dec(Math.min(...xs), Math.floor);
  const xHi = dec(Math.max(...xs), Math.ceil);
  const yLo = dec(Math.min(...ys), Math.floor);
  const yHi = dec(Math.max(...ys), Math.ceil);
  const xMark = logLabeler(xLo, xHi);
  const yMark = logLabeler(yLo, yHi);
  opts.scales = {
    x: axis({type: 'logarithmic', min: xLo, max: xHi, title: {display: true, text: `input size (${unit})`, color: css('--muted')},
      ticks: {color: css('--muted'), maxRotation: 0, autoSkip: false, callback: (v) => (xMark(v) ? fmtSize(v) : '')}}),
    y: axis({type: 'logarithmic', min: yLo, max: yHi, title: {display: true, text: 'milliseconds', color: css('--muted')},
      ticks: {color: css('--muted'), autoSkip: false, callback: (v) => (yMark(v) ? msTick(v) : '')}}),
  };
  return make(canvas, {type: 'scatter', data: {datasets}, options: opts});
}

/* ---- heatmap ------------------------------------------------------------- */
/* Viridis, sampled at 9 stops and interpolated. */
const VIRIDIS = [[68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37]];

export function viridis(t) {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const a = VIRIDIS[i];
  const b = VIRIDIS[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}

/* Draw rows (an array of equal-length number arrays) onto canvas, one cell
 * per value, scaled to the canvas' CSS size without smoothing. Returns the
 * value range. */
export function drawHeatmap(canvas, rows) {
  const nr = rows.length;
  const nc = nr ? rows[0].length : 0;
  let lo = Infinity;
  let hi = -Infinity;
  for (const r of rows) for (const v of r) { if (v < lo) lo = v; if (v > hi) hi = v; }
  const img = new ImageData(Math.max(1, nc), Math.max(1, nr));
  const span = hi > lo ? hi - lo : 1;
  for (let i = 0; i < nr; i++) {
    for (let j = 0; j < nc; j++) {
      const v = rows[i][j];
      const [r, g, b] = Number.isFinite(v) ? viridis((v - lo) / span) : [128, 128, 128];
      const k = (i * nc + j) * 4;
      img.data[k] = r; img.data[k + 1] = g; img.data[k + 2] = b; img.data[k + 3] = 255;
    }
  }
  const off = document.createElement('canvas');
  off.width = img.width;
  off.height = img.height;
  off.getContext('2d').putImageData(img, 0, 0);
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 360;
  const hgt = canvas.clientHeight || w;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(hgt * dpr);
  const ctx = canvas.getContext('2d');
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, 0, 0, canvas.width, canvas.height);
  return {lo, hi};
}

/* A horizontal colour bar for the heatmap legend. */
export function drawColorbar(canvas) {
  const w = 256;
  canvas.width = w;
  canvas.height = 1;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(w, 1);
  for (let i = 0; i < w; i++) {
    const [r, g, b] = viridis(i / (w - 1));
    img.data.set([r, g, b, 255], i * 4);
  }
  ctx.putImageData(img, 0, 0);
}
