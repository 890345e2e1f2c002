/* dashboard.test.mjs — browser tests of the dashboard against the real server.
 *
 * run.sh starts tesseld (TESSEL_URL) and runs this file under node:test. One
 * headless Debian Chromium (CHROMIUM), driven by playwright-core, visits the
 * pages as a person would: the overview, a job submitted through the Submit
 * form and followed in the live jobs table, its detail page (charts drawn,
 * result preview, downloads), a distance matrix's heatmap, the message shown
 * for a bad expression (compared with what the API itself answers for the
 * same body), cancel and delete from the table, the filters, the performance
 * chart, an array uploaded from the form, keyboard labels, a second server
 * with tokens (the 401 as the API gives it, the token dialog, a download
 * that carries the token; TESSEL_BIN), and at the end: no console errors. Tests run in
 * order and share jobs. Screenshots go to ARTIFACTS (tests/browser/artifacts).
 * Issue 15 added: no view scrolls sideways at 390 or 1440 px (with a
 * 200-character label), axe-core finds nothing serious or critical on any
 * view in either scheme, the jobs page number survives Back and reload, the
 * total, search and sort, the overview's bytes per poll and its history
 * (from GET /v1/stats/history: jobs finished before the page was opened are
 * in its throughput chart; a failing history call leaves a message and the
 * rest of the page working),
 * the "canceling…" feedback, offline rows, the 413 in GiB, cuda disabled
 * without a GPU, a missing job's bare 404, focus after a keyboard delete,
 * compare's compute per backend and Measure's feedback.
 * Issue 13 added: the knn and radius presets (their requests carry
 * params.query, and they run), a knn job's page lists both parts with
 * downloads that work (npy '<i8' / '<f8', the index as integers in JSON
 * and CSV), its neighbour table equals the API's own rows of both parts
 * for the point asked (typed, and reached by selecting a neighbour), a bad
 * point is marked invalid; a radius job's first pairs equal the parts'
 * first rows; both pages in the 390 px and axe checks.
 * Nothing here asserts a time but one, asked for by issue 15: a job the API
 * reports canceled shows canceled in the page within 3 s (it polls every
 * 250 ms while canceling). Other waits have generous limits for a slow CI.
 *
 * axe-core is evaluated into the page with page.evaluate(source): that runs
 * through the DevTools protocol, which the page's Content-Security-Policy
 * (script-src 'self') does not govern, so no context needs bypassCSP.
 */
import {test, before, after} from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import fs from 'node:fs';
import os from 'node:os';
import net from 'node:net';
import {spawn} from 'node:child_process';
import {chromium} from 'playwright-core';
import {createRequire} from 'node:module';

const AXE_SRC = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const BASE = process.env.TESSEL_URL;
const ART = process.env.ARTIFACTS || 'artifacts';
const STAMP = Date.now().toString(36);
const LONG = {timeout: 120000};

let browser;
let page;
let hasGpu = false;
const consoleErrors = [];
/* Failed fetches Chromium logs for answers the tests provoke on purpose. */
const expectedStatuses = new Set();

async function api(method, p, body) {
  const res = await fetch(BASE + p, {method, headers: body ? {'Content-Type': 'application/json'} : {},
    body: body ? JSON.stringify(body) : undefined});
  const text = await res.text();
  return {status: res.status, body: text ? JSON.parse(text) : null};
}

async function waitJob(id, pred, ms = 90000) {
  const end = Date.now() + ms;
  for (;;) {
    const {body} = await api('GET', `/v1/jobs/${id}`);
    if (pred(body)) return body;
    if (Date.now() > end) throw new Error(`job ${id} stayed ${body.status}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/* How wide the document is against the viewport (no sideways scroll when
 * scrollWidth <= innerWidth). */
async function widths(p) {
  return p.evaluate(() => ({sw: document.documentElement.scrollWidth, iw: innerWidth,
    wide: [...document.querySelectorAll('main *')].filter((e) => e.getBoundingClientRect().right > innerWidth + 1)
      .slice(-3).map((e) => `${e.tagName}.${e.className}`)}));
}

/* axe-core's serious and critical violations on the page as it is now. */
async function axeSerious(p) {
  if (!(await p.evaluate(() => typeof window.axe === 'object'))) await p.evaluate(AXE_SRC);
  return p.evaluate(async () => {
    const r = await window.axe.run(document, {resultTypes: ['violations']});
    return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
  });
}

async function shot(name) {
  await page.evaluate(() => window.scrollTo(0, 0)); /* the sticky header at the top */
  await page.screenshot({path: path.join(ART, `${name}.png`), fullPage: true});
}

/* A fresh load of the page at hash (not a same-document hash change). */
async function go(hash) {
  await page.goto('about:blank');
  await page.goto(`${BASE}/${hash}`);
  await page.waitForSelector('main h1');
}

/* Choose a radio button the way a person does: by its label. */
async function pick(name, value) {
  const id = await page.getAttribute(`input[name="${name}"][value="${value}"]`, 'id');
  await page.click(`label[for="${id}"]`);
  assert.ok(await page.isChecked(`#${id}`), `${name} = ${value} is chosen`);
}

/* Pixels of a canvas that are not fully transparent, and how many colours. */
async function canvasInk(selector) {
  return page.$eval(selector, (c) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let ink = 0;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 0) { ink += 1; if (colours.size < 64) colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]); }
    }
    return {ink, colours: colours.size, w: c.width, h: c.height};
  });
}

before(async () => {
  assert.ok(BASE, 'TESSEL_URL is set by run.sh');
  const dev = await api('GET', '/v1/devices');
  hasGpu = !!(dev.body.cuda && dev.body.cuda.available && (dev.body.cuda.devices || []).length);
  browser = await chromium.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage']});
  const ctx = await browser.newContext({viewport: {width: 1366, height: 860}, colorScheme: 'light'});
  page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push('page error: ' + e.message));
});

after(async () => { if (browser) await browser.close(); });

test('the overview shows the CPU, the GPU or why there is none, and the queue', LONG, async () => {
  await go('#/');
  await page.waitForSelector('[data-device="cpu"] .v');
  const threads = Number((await page.textContent('[data-device="cpu"] .v')).replace(/,/g, ''));
  const dev = (await api('GET', '/v1/devices')).body;
  assert.equal(threads, dev.cpu.threads, 'threads shown = threads the API reports');
  if (hasGpu) {
    assert.ok(await page.$('[data-device="cuda:0"] [role="meter"]'), 'GPU memory meter');
  } else {
    const text = await page.textContent('[data-device="none"]');
    assert.match(text, /No GPU/);
  }
  await page.waitForSelector('[data-stat="queued"] .v');
  assert.ok(await page.$('#main h1:text("Overview")'));
  /* the Nodes card: on SQLite one live node, this process, named as
   * /v1/nodes names it, with its workers */
  await page.waitForSelector('#nodes tbody tr');
  const nodes = (await api('GET', '/v1/nodes')).body.nodes;
  const rows = await page.$$eval('#nodes tbody tr', (trs) => trs.map((tr) => ({name: tr.dataset.node,
    alive: tr.querySelector('[data-alive]').dataset.alive, workers: tr.children[2].textContent})));
  assert.equal(rows.length, 1, 'one node on SQLite');
  assert.equal(rows[0].name, nodes[0].name);
  assert.equal(rows[0].alive, 'true');
  assert.equal(rows[0].workers, String(nodes[0].threads));
  assert.match(await page.textContent('#nodes-summary'), /One node/);
  await shot('overview-empty');
});

test('the jobs table updates live, without a reload', LONG, async () => {
  await go('#/jobs');
  await page.evaluate(() => { window.__noReload = 1; });
  const label = `bt-live-${STAMP}`;
  const {status, body} = await api('POST', '/v1/jobs', {kind: 'map', backend: 'cpu', label,
    params: {expr: 'x*2', inputs: {x: {range: {start: 0, stop: 1000}}}}});
  assert.equal(status, 202);
  await page.waitForSelector(`tr[data-id="${body.id}"][data-status="succeeded"]`, {timeout: 30000});
  assert.equal(await page.evaluate(() => window.__noReload), 1, 'the page was not reloaded');
  assert.match(await page.textContent(`tr[data-id="${body.id}"]`), new RegExp(label));
});

let formJob = null;

test('a job submitted through the form finishes in the table', LONG, async () => {
  await go('#/submit');
  await page.click('[data-preset="square"]');
  assert.equal(await page.getAttribute('[data-preset="square"]', 'aria-pressed'), 'true');
  await pick('backend', 'compare');
  await page.fill('input[data-field="label"]', `bt-form-${STAMP}`);
  const sent = JSON.parse(await page.textContent('#request-json'));
  assert.equal(sent.kind, 'map');
  assert.equal(sent.backend, 'compare');
  assert.deepEqual(sent.params.inputs.x, {range: {start: 0, stop: 1000000, step: 1}});
  await shot('submit-form');
  await page.click('button[type="submit"]');
  await page.waitForURL(/#\/jobs\/j_/);
  formJob = decodeURIComponent(page.url().split('#/jobs/')[1]);
  await go('#/jobs');
  await page.waitForSelector(`tr[data-id="${formJob}"][data-status="succeeded"]`, {timeout: 90000});
  await shot('jobs-table');
});

test('the map form sends no dtype unless one is chosen (the API then promotes as NumPy)', async () => {
  await go('#/submit');
  let sent = JSON.parse(await page.textContent('#request-json'));
  assert.equal(sent.kind, 'map');
  assert.ok(!('dtype' in sent.params), `no dtype by default: ${JSON.stringify(sent.params)}`);
  await page.selectOption('select[data-field="params.dtype"] >> visible=true', 'float32');
  sent = JSON.parse(await page.textContent('#request-json'));
  assert.equal(sent.params.dtype, 'float32', 'a chosen dtype is sent');
});

test('the detail page draws the timings and the compare chart, previews and offers the result', LONG, async () => {
  assert.ok(formJob, 'the form test made a job');
  const job = await waitJob(formJob, (j) => j.status === 'succeeded');
  await go(`#/jobs/${formJob}`);
  await page.waitForSelector('#timings-chart');
  await page.waitForSelector('#compare-chart');
  await page.waitForSelector('#result-preview');
  await page.waitForTimeout(600); /* chart animations end */
  const t = await page.$eval('#timings-chart', (c) => window.Chart.getChart(c).data.datasets[0].data.length);
  assert.ok(t >= 2, 'at least two phases drawn');
  const cmp = await page.$eval('#compare-chart', (c) => {
    const ch = window.Chart.getChart(c);
    return {labels: ch.data.labels, values: ch.data.datasets[0].data, text: ch.data.datasets[0].valueLabels};
  });
  assert.equal(cmp.values.length, job.compare.length, 'one bar per backend compared');
  assert.ok(cmp.labels.some((l) => l.startsWith('serial')) && cmp.labels.some((l) => l.startsWith('cpu')));
  assert.ok(cmp.text.every((s) => /×$/.test(s)), 'speedups are written on the bars');
  /* compare's compute is shown per backend, not summed */
  const phases = await page.$eval('#timings-chart', (c) => window.Chart.getChart(c).data.labels);
  for (const c of job.compare) assert.ok(phases.includes(`compute · ${c.backend}`), `${c.backend} compute in ${phases}`);
  assert.ok(!phases.includes('compute'), 'no summed compute bar');
  for (const c of job.compare) assert.match(await page.textContent('#compute-split'), new RegExp(c.backend));
  for (const sel of ['#timings-chart', '#compare-chart']) {
    const ink = await canvasInk(sel);
    assert.ok(ink.ink > 500 && ink.colours > 3, `${sel} has drawn pixels (${JSON.stringify(ink)})`);
  }
  /* x = 0..999999 squared: the first values are 0, 1, 4, 9 */
  const cells = await page.$$eval('#result-preview td', (tds) => tds.slice(0, 4).map((td) => td.textContent));
  assert.deepEqual(cells, ['0', '1', '4', '9']);
  const href = await page.getAttribute('a[data-format="npy"]', 'href');
  const npy = await page.request.get(BASE + href);
  assert.equal(npy.status(), 200);
  const buf = await npy.body();
  assert.equal(buf.subarray(0, 6).toString('latin1'), '\x93NUMPY');
  for (const f of ['csv', 'json']) assert.ok(await page.$(`a[data-format="${f}"]`), `${f} download`);
  await shot('detail-compare');
});

test('a distance matrix shows a heatmap', LONG, async () => {
  const {status, body} = await api('POST', '/v1/jobs', {kind: 'geodesic', backend: 'cpu', label: `bt-geo-${STAMP}`,
    params: {points: {random: {shape: [240, 2], dist: 'uniform', low: -60, high: 60, seed: 3}}, units: 'km'}});
  assert.equal(status, 202, JSON.stringify(body));
  await waitJob(body.id, (j) => j.status === 'succeeded');
  await go(`#/jobs/${body.id}`);
  await page.waitForSelector('#heatmap[data-drawn="1"]', {timeout: 30000});
  const ink = await canvasInk('#heatmap');
  assert.ok(ink.ink === ink.w * ink.h, 'every heatmap pixel is painted');
  assert.ok(ink.colours > 16, `the heatmap has many colours (${ink.colours})`);
  /* the diagonal is zero: the first preview cell */
  assert.equal((await page.$$eval('#result-preview tbody td', (t) => t[0].textContent)), '0');
  await shot('detail-heatmap');
});

let distancesJob = null;
let knnJob = null;
let radiusJob = null;
let longLabelJob = null;
const LONG_LABEL = `bt-long-${STAMP}-` + 'x'.repeat(200);

test('every preset builds a request the API accepts and runs', LONG, async () => {
  await go('#/submit');
  const ids = await page.$$eval('[data-preset]', (b) => b.map((x) => x.dataset.preset));
  assert.ok(ids.length >= 7, 'the five seeds, knn and radius');
  assert.ok(ids.includes('knn') && ids.includes('radius'), 'the knn and radius presets');
  const jobs = [];
  for (const id of ids) {
    await page.click(`[data-preset="${id}"]`);
    const body = JSON.parse(await page.textContent('#request-json'));
    body.label = `bt-preset-${id}-${STAMP}`;
    if (id === 'knn' || id === 'radius') {
      /* the form keeps the query (and sends no layout with it) */
      assert.deepEqual(body.params.query, id === 'knn' ? {knn: {k: 10}} : {radius: {r: 50, max_pairs: 1000000}});
      assert.equal(body.params.layout, undefined, `${id}: no layout with a query`);
      assert.equal(body.backend, 'compare');
      assert.deepEqual(body.params.points.random.shape, [20000, 2]);
      assert.equal(body.params.units, 'km');
    }
    const res = await api('POST', '/v1/jobs', body);
    assert.equal(res.status, 202, `${id}: ${JSON.stringify(res.body)}`);
    jobs.push(res.body.id);
    if (id === 'distances') distancesJob = res.body.id;
    if (id === 'knn') knnJob = res.body.id;
    if (id === 'radius') radiusJob = res.body.id;
  }
  for (const id of jobs) {
    const j = await waitJob(id, (x) => x.status !== 'queued' && x.status !== 'running', 110000);
    assert.equal(j.status, 'succeeded', `${id}: ${JSON.stringify(j.error)}`);
  }
});

/* Row p of a part, as the API's JSON gives it. */
async function partRow(id, name, p) {
  const r = await api('GET', `/v1/jobs/${id}/result/${name}?format=json&limit_rows=${p + 1}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data[p];
}

/* The neighbour table as shown: rank, neighbour index, exact distance. */
async function shownNeighbours() {
  return page.$$eval('#nb-table tbody tr', (trs) => trs.map((tr) => ({
    rank: Number(tr.querySelector('th').textContent),
    index: Number(tr.querySelector('button').dataset.point),
    text: tr.querySelector('button').textContent,
    distance: Number(tr.querySelector('td.num').dataset.value),
    cell: tr.querySelector('td.num').textContent})));
}

async function assertNeighboursOf(p) {
  await page.waitForSelector(`#nb-table[data-point="${p}"]`, {timeout: 30000});
  const shown = await shownNeighbours();
  const idx = await partRow(knnJob, 'index', p);
  const dist = await partRow(knnJob, 'distance', p);
  assert.equal(shown.length, idx.length, `point ${p}: one row per neighbour`);
  shown.forEach((s, r) => {
    assert.equal(s.rank, r + 1);
    assert.equal(s.index, idx[r], `point ${p} rank ${r + 1}: the index part's value`);
    assert.ok(s.text.startsWith(String(idx[r])), 'the button shows the index');
    assert.equal(s.distance, dist[r], `point ${p} rank ${r + 1}: the distance part's value, exactly`);
    assert.match(s.cell, / km$/, 'the distance with its units');
  });
  assert.equal(await page.inputValue('#nb-point'), String(p));
  return idx;
}

test('a knn job lists both parts with working downloads and shows a point\'s neighbours as the API gives them', LONG, async () => {
  assert.ok(knnJob, 'the preset test ran the knn preset');
  const job = await waitJob(knnJob, (j) => j.status === 'succeeded', 120000);
  const parts = job.result.parts;
  assert.deepEqual(parts.map((x) => [x.name, x.dtype, x.shape]),
    [['distance', 'float64', [20000, 10]], ['index', 'int64', [20000, 10]]]);
  await go(`#/jobs/${knnJob}`);
  await page.waitForSelector('#parts-table');
  await page.waitForSelector('#compare-chart'); /* backend compare: the seeds' timing chart */
  assert.deepEqual(await page.$$eval('#parts-table tbody tr', (t) => t.map((r) => r.dataset.part)), ['distance', 'index']);
  const rowText = await page.$$eval('#parts-table tbody tr', (t) => t.map((r) => r.textContent));
  assert.match(rowText[0], /float64.*20,000 × 10/);
  assert.match(rowText[1], /int64.*20,000 × 10/);
  assert.equal(await page.$('#heatmap'), null, 'a knn result is no matrix: no heatmap');

  /* every download link of every part answers 200 with that part */
  const links = await page.$$eval('#parts-table a[data-part]', (as) => as.map((a) => ({
    part: a.dataset.part, format: a.dataset.format, href: a.getAttribute('href'), download: a.getAttribute('download'),
    name: a.getAttribute('aria-label')})));
  assert.equal(links.length, 6, 'npy, CSV and JSON for each of the two parts');
  for (const l of links) {
    assert.equal(l.download, `${knnJob}-${l.part}.${l.format}`);
    assert.match(l.name, new RegExp(`^${l.part} as `), 'the link names its part');
    const res = await fetch(BASE + l.href);
    assert.equal(res.status, 200, `${l.part} as ${l.format}`);
    const buf = Buffer.from(await res.arrayBuffer());
    if (l.format === 'npy') {
      assert.equal(buf.subarray(0, 6).toString('latin1'), '\x93NUMPY');
      const header = buf.subarray(10, 10 + buf.readUInt16LE(8)).toString('latin1');
      assert.match(header, l.part === 'index' ? /'descr': '<i8'/ : /'descr': '<f8'/);
      assert.equal(buf.length, 10 + buf.readUInt16LE(8) + 20000 * 10 * 8, 'the whole part');
    } else if (l.format === 'json') {
      const text = buf.toString('utf8');
      const body = JSON.parse(text);
      assert.deepEqual(body.shape, [20000, 10]);
      assert.equal(body.data.length, 20000);
      if (l.part === 'index') {
        assert.ok(body.data.every((r) => r.length === 10 && r.every((v) => Number.isInteger(v) && v >= 0 && v < 20000)),
          'the index part holds integers in 0 … n-1');
        assert.doesNotMatch(text.slice(text.indexOf('"data"')), /[.eE]/, 'written as integers (no 42.0)');
      }
    } else {
      const lines = buf.toString('utf8').trim().split('\n');
      assert.equal(lines.length, 20000);
      if (l.part === 'index') assert.ok(lines.every((x) => /^\d+(,\d+){9}$/.test(x)), 'CSV rows of 10 integers');
    }
  }

  /* point 0 first, then one typed, then one reached by selecting a neighbour */
  await assertNeighboursOf(0);
  await page.fill('#nb-point', '12345');
  const idx = await assertNeighboursOf(12345);
  await page.click(`#nb-table tbody tr:nth-child(3) button`);
  await assertNeighboursOf(idx[2]);
  assert.equal(await page.evaluate(() => document.activeElement.id), 'nb-point', 'focus goes to the point field');
  await page.fill('#nb-point', '19999');
  await assertNeighboursOf(19999);
  assert.equal(await page.getAttribute('#nb-point', 'aria-invalid'), null);
  /* out of range: marked invalid, said why, the table unchanged */
  for (const bad of ['20000', '-1', '2.5']) {
    await page.fill('#nb-point', bad);
    assert.equal(await page.getAttribute('#nb-point', 'aria-invalid'), 'true', `${bad} is invalid`);
    assert.match(await page.textContent('#nb-point-error'), /whole number from 0 to 19,999/);
    assert.equal(await page.getAttribute('#nb-table', 'data-point'), '19999');
  }
  await page.fill('#nb-point', '7');
  await assertNeighboursOf(7);
  assert.equal(await page.getAttribute('#nb-point', 'aria-invalid'), null, 'valid again');
  assert.equal(await page.textContent('#nb-point-error'), '');
  assert.ok(await page.$('#nb-table caption'), 'the table has a caption');
  await shot('detail-knn');
});

test('a radius job shows its first pairs as the API gives them', LONG, async () => {
  assert.ok(radiusJob, 'the preset test ran the radius preset');
  const job = await waitJob(radiusJob, (j) => j.status === 'succeeded', 120000);
  assert.deepEqual(job.result.parts.map((x) => x.name), ['i', 'j', 'distance']);
  const total = job.result.parts[0].shape[0];
  assert.ok(total > 20, `the preset finds pairs (${total})`);
  await go(`#/jobs/${radiusJob}`);
  await page.waitForSelector('#pairs-table tbody tr', {timeout: 30000});
  const shown = await page.$$eval('#pairs-table tbody tr', (trs) => trs.map((tr) => {
    const td = tr.querySelectorAll('td');
    return [Number(td[0].textContent), Number(td[1].textContent), Number(td[2].dataset.value)];
  }));
  const get = async (name) => (await api('GET', `/v1/jobs/${radiusJob}/result/${name}?format=json&limit_rows=20`)).body.data;
  const [i, j, d] = [await get('i'), await get('j'), await get('distance')];
  assert.equal(shown.length, 20);
  assert.deepEqual(shown, i.map((x, k) => [x, j[k], d[k]]), 'the first rows of i, j and distance');
  assert.ok(shown.every(([a, b, dist]) => a < b && dist <= 50), 'each pair once, i < j, within 50 km');
  assert.match(await page.textContent('#pairs-table caption'), new RegExp(`of ${total.toLocaleString('en')} pairs within 50 km`));
  assert.deepEqual(await page.$$eval('#parts-table tbody tr', (t) => t.map((r) => r.dataset.part)), ['i', 'j', 'distance']);
});

test('a rowwise job previews its values and is not taken for a matrix', LONG, async () => {
  const {status, body} = await api('POST', '/v1/jobs', {kind: 'geodesic', backend: 'cpu', label: `bt-rowwise-${STAMP}`,
    params: {points: {random: {shape: [300, 2], dist: 'uniform', low: -60, high: 60, seed: 4}}, query: {rowwise: {op: 'argmin'}}}});
  assert.equal(status, 202, JSON.stringify(body));
  await waitJob(body.id, (j) => j.status === 'succeeded');
  await go(`#/jobs/${body.id}`);
  await page.waitForSelector('#result-preview td', {timeout: 30000});
  assert.equal(await page.$('#heatmap'), null, 'no heatmap');
  assert.equal(await page.$('#result .error-box'), null, 'no error (it was asked for layout=square before)');
  const want = (await api('GET', `/v1/jobs/${body.id}/result?format=json&limit_rows=5`)).body.data;
  const shown = await page.$$eval('#result-preview tbody tr:first-child td', (t) => t.map((x) => Number(x.textContent)));
  assert.deepEqual(shown, want, 'the first argmin values as the API gives them');
});

test('no view scrolls sideways at 390 or 1440 px, a 200-character label included', LONG, async () => {
  const label = LONG_LABEL.slice(0, 200);
  const {status, body} = await api('POST', '/v1/jobs', {kind: 'map', backend: 'compare', label,
    params: {expr: 'x + 1', inputs: {x: {range: {start: 0, stop: 5000}}}}});
  assert.equal(status, 202, JSON.stringify(body));
  longLabelJob = body.id;
  await waitJob(longLabelJob, (j) => j.status === 'succeeded');
  assert.ok(distancesJob, 'the preset test ran the distances preset');
  await waitJob(distancesJob, (j) => j.status === 'succeeded', 120000);
  for (const [w, hgt] of [[390, 844], [1440, 900]]) {
    const ctx = await browser.newContext({viewport: {width: w, height: hgt}});
    const p = await ctx.newPage();
    const check = async (what) => {
      const r = await widths(p);
      assert.ok(r.sw <= r.iw, `${what} at ${w} px is ${r.sw} px wide (${r.wide.join(', ')})`);
    };
    const views = [['#/', '[data-device="cpu"] .v'], ['#/jobs', `tr[data-id="${longLabelJob}"]`],
      [`#/jobs/${longLabelJob}`, '#compare-chart'], [`#/jobs/${distancesJob}`, '#heatmap[data-drawn="1"]'],
      [`#/jobs/${knnJob}`, '#nb-table tbody tr'], [`#/jobs/${radiusJob}`, '#pairs-table tbody tr'],
      ['#/perf', '#perf-chart-map'], ['#/submit', '#request-json']];
    for (const [hash, sel] of views) {
      await p.goto('about:blank');
      await p.goto(`${BASE}/${hash}`);
      await p.waitForSelector(sel, {timeout: 30000});
      await p.waitForTimeout(400);
      await check(hash);
    }
    /* the Submit page after each preset (the distances one was 2,230 px) */
    for (const id of await p.$$eval('[data-preset]', (b) => b.map((x) => x.dataset.preset))) {
      await p.click(`[data-preset="${id}"]`);
      await check(`#/submit after the ${id} preset`);
      const btn = await p.$eval('form button[type="submit"]', (b) => b.getBoundingClientRect().right);
      assert.ok(btn <= w, `the Submit button is on screen after ${id} (${btn})`);
    }
    /* the jobs table: the label does not widen it, Status and the action are on screen */
    await p.goto(`${BASE}/#/jobs`);
    const row = `tr[data-id="${longLabelJob}"]`;
    await p.waitForSelector(row);
    const m = await p.evaluate((sel) => {
      const wrap = document.querySelector('#jobs-table').parentElement;
      const r = document.querySelector(sel);
      return {table: document.querySelector('#jobs-table').scrollWidth, wrap: wrap.clientWidth,
        status: r.querySelector('.badge').getBoundingClientRect().right,
        action: r.querySelector('button[data-action]').getBoundingClientRect().right,
        label: r.querySelector('.label-cell').getBoundingClientRect().width, full: r.querySelector('.label-cell').title.length};
    }, row);
    assert.ok(m.table <= m.wrap, `the jobs table fits its box at ${w} px (${m.table} > ${m.wrap})`);
    assert.ok(m.status <= w && m.action <= w, `Status and the action are on screen at ${w} px (${m.status}, ${m.action})`);
    assert.equal(m.full, 200, 'the whole label is in the title');
    assert.ok(m.label < w, 'the label is truncated');
    await p.screenshot({path: path.join(ART, `jobs-${w}.png`), fullPage: true});
    await ctx.close();
  }
});

test('axe-core: no serious or critical violations on any view, light and dark', LONG, async () => {
  assert.ok(formJob && distancesJob && knnJob && radiusJob, 'the jobs of the earlier tests');
  for (const scheme of ['light', 'dark']) {
    const ctx = await browser.newContext({viewport: {width: 1366, height: 860}, colorScheme: scheme});
    const p = await ctx.newPage();
    const views = [['#/', '[data-device="cpu"] .v'], ['#/jobs', '#jobs-table tbody tr'],
      [`#/jobs/${formJob}`, '#compare-chart'], [`#/jobs/${distancesJob}`, '#result-preview'],
      [`#/jobs/${knnJob}`, '#nb-table tbody tr'], [`#/jobs/${radiusJob}`, '#pairs-table tbody tr'],
      ['#/submit', '#request-json'], ['#/submit?preset=distances', '#request-json'], ['#/submit?preset=knn', '#request-json'],
      ['#/perf', '#perf-chart-map'],
      ['#/jobs/j_00000000000000000000000000', '#main .error-box']];
    const found = [];
    for (const [hash, sel] of views) {
      await p.goto('about:blank');
      await p.goto(`${BASE}/${hash}`);
      await p.waitForSelector(sel, {timeout: 30000});
      await p.waitForTimeout(400);
      for (const v of await axeSerious(p)) found.push(`${scheme} ${hash}: ${v}`);
    }
    /* the states the issue named: the confirm-delete button */
    await p.goto(`${BASE}/#/jobs`);
    await p.waitForSelector('button[data-action="delete"]');
    await p.click('button[data-action="delete"]');
    for (const v of await axeSerious(p)) found.push(`${scheme} #/jobs (confirm delete): ${v}`);
    /* the neighbour table's point marked invalid */
    await p.goto(`${BASE}/#/jobs/${knnJob}`);
    await p.waitForSelector('#nb-table tbody tr', {timeout: 30000});
    await p.fill('#nb-point', '-1');
    await p.waitForSelector('#nb-point[aria-invalid="true"]');
    for (const v of await axeSerious(p)) found.push(`${scheme} knn point invalid: ${v}`);
    await ctx.close();
    assert.deepEqual(found, [], 'axe violations');
  }
});

test('a saved token is sent as a bearer token', LONG, async () => {
  await go('#/jobs');
  await page.click('#token-btn');
  await page.fill('#token-input', 'bt-token-123');
  const req = page.waitForRequest((r) => r.url().includes('/v1/') && r.headers().authorization === 'Bearer bt-token-123');
  await page.click('#token-save');
  await req;
  assert.equal(await page.evaluate(() => localStorage.getItem('tessel.token')), 'bt-token-123');
  await page.click('#token-btn');
  await page.click('#token-clear');
  assert.equal(await page.evaluate(() => localStorage.getItem('tessel.token')), null);
});

test('an array uploaded from the form feeds a job', LONG, async () => {
  await go('#/submit');
  await pick('kind', 'map');
  await page.fill('input[data-field="params.expr"]', 'x * 10');
  const mode = page.locator('.input-row select').first();
  await mode.selectOption('array');
  const csv = path.join(ART, 'upload.csv');
  fs.writeFileSync(csv, 'v\n1\n2\n3\n');
  await page.setInputFiles('.input-row input[type="file"]', csv);
  await page.waitForSelector('text=/Uploaded upload.csv: a_/');
  const sent = JSON.parse(await page.textContent('#request-json'));
  assert.match(sent.params.inputs.x.array, /^a_/);
  await pick('backend', 'cpu');
  await page.click('button[type="submit"]');
  await page.waitForURL(/#\/jobs\/j_/);
  const id = decodeURIComponent(page.url().split('#/jobs/')[1]);
  await waitJob(id, (j) => j.status === 'succeeded');
  const res = await api('GET', `/v1/jobs/${id}/result?format=json`);
  assert.deepEqual(res.body.data, [10, 20, 30]);
});

test('a bad expression shows the message the API gives', LONG, async () => {
  await go('#/submit');
  await pick('kind', 'map');
  await page.fill('input[data-field="params.expr"]', 'x**2 + y');
  const body = JSON.parse(await page.textContent('#request-json'));
  const direct = await api('POST', '/v1/jobs', body);
  assert.equal(direct.status, 400);
  expectedStatuses.add(400);
  await page.click('button[type="submit"]');
  await page.waitForSelector('#submit-error .error-box');
  assert.equal((await page.textContent('#submit-error .error-message')).trim(), direct.body.error.message);
  assert.equal((await page.textContent('#submit-error .error-code')).trim(), direct.body.error.code);
  if (direct.body.error.field) assert.match(await page.textContent('#submit-error .error-meta'), new RegExp(direct.body.error.field.replace(/\./g, '\\.')));
  if (Number.isInteger(direct.body.error.position)) {
    const caret = await page.textContent('#submit-error pre.caret');
    assert.equal(caret.split('\n')[1].indexOf('^'), direct.body.error.position);
  }
  assert.equal(await page.getAttribute('input[data-field="params.expr"]', 'aria-invalid'), 'true');
  assert.ok(page.url().includes('#/submit'), 'stays on the form');
  await shot('submit-bad-expression');
});

test('without a GPU, backend cuda cannot be chosen and the page says why', LONG, async (t) => {
  if (hasGpu) { t.skip('this machine has a GPU'); return; }
  const reason = (await api('GET', '/v1/devices')).body.cuda.reason;
  await go('#/submit');
  await page.click('[data-preset="square"]');
  await page.waitForSelector('input[name="backend"][value="cuda"]:disabled');
  const hint = await page.getAttribute('input[name="backend"][value="cuda"]', 'aria-describedby');
  assert.ok((await page.textContent(`#${hint}`)).includes(reason), 'the reason /v1/devices gives');
  /* a recorded job that asked for cuda loads with auto instead */
  await go('#/submit?preset=square');
  await page.waitForSelector('input[name="backend"][value="cuda"]:disabled');
  assert.notEqual(JSON.parse(await page.textContent('#request-json')).backend, 'cuda');
});

test('a 413 says its sizes in GiB', LONG, async () => {
  await go('#/submit');
  await pick('kind', 'geodesic');
  await page.fill('input[data-field="params.points.random.shape"]', '40000, 2');
  const body = JSON.parse(await page.textContent('#request-json'));
  const direct = await api('POST', '/v1/jobs', body);
  assert.equal(direct.status, 413, JSON.stringify(direct.body));
  expectedStatuses.add(413);
  await page.click('button[type="submit"]');
  await page.waitForSelector('#submit-error .error-box');
  const human = await page.textContent('#submit-error [data-human]');
  assert.match(human, /\d GiB/, human);
  assert.doesNotMatch(human, /\d{7,}/, 'no raw byte counts left');
  assert.equal((await page.textContent('#submit-error .error-message')).trim(), direct.body.error.message, 'the API\'s own words stay');
});

test('a job that does not exist shows its 404 and no empty cards', LONG, async () => {
  expectedStatuses.add(404);
  await go('#/jobs/j_00000000000000000000000000');
  await page.waitForSelector('#main .error-box');
  assert.match(await page.textContent('#main .error-code'), /not_found/);
  assert.equal(await page.isVisible('#job-body'), false, 'the job\'s cards stay hidden');
  assert.equal(await page.$$eval('#main .card', (c) => c.filter((x) => x.offsetParent !== null).length), 0);
});

let longJob = null;

test('cancel from the table', LONG, async () => {
  /* a job long enough to be caught running: 8,000 points, one thread */
  const {status, body} = await api('POST', '/v1/jobs', {kind: 'geodesic', backend: 'serial', priority: 9,
    label: `bt-cancel-${STAMP}`, params: {points: {random: {shape: [8000, 2], dist: 'uniform', low: -60, high: 60, seed: 5}},
      layout: 'condensed', dtype: 'float32'}});
  assert.equal(status, 202, JSON.stringify(body));
  longJob = body.id;
  await go('#/jobs');
  const btn = `tr[data-id="${longJob}"] button[data-action="cancel"]`;
  await page.waitForSelector(btn);
  /* hold the cancel request a while: the feedback must not wait for it */
  let release;
  const held = new Promise((r) => { release = r; });
  await page.route('**/v1/jobs/*/cancel', async (route) => { await held; await route.continue(); });
  await page.click(btn);
  await page.waitForSelector(`tr[data-id="${longJob}"] .badge[data-status="canceling"]`, {timeout: 2000});
  assert.equal((await page.textContent(btn)).trim(), 'Canceling…');
  assert.equal(await page.getAttribute(btn, 'aria-disabled'), 'true');
  release();
  await waitJob(longJob, (j) => j.status === 'canceled', 60000);
  /* the page follows the API within 3 s (the one timing bound, issue 15) */
  await page.waitForSelector(`tr[data-id="${longJob}"][data-status="canceled"]`, {timeout: 3000});
  await page.unroute('**/v1/jobs/*/cancel');
});

test('filters change the table and the address', LONG, async () => {
  await go('#/jobs');
  await page.waitForSelector('#jobs-table tbody tr');
  await page.selectOption('select[name="kind"]', 'geodesic');
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('#jobs-table tbody tr')];
    return rows.length > 0 && rows.every((r) => r.dataset.kind === 'geodesic');
  });
  assert.match(page.url(), /kind=geodesic/);
  await page.selectOption('select[name="status"]', 'canceled');
  await page.waitForFunction((id) => {
    const rows = [...document.querySelectorAll('#jobs-table tbody tr')];
    return rows.length === 1 && rows[0].dataset.id === id;
  }, longJob);
  await shot('jobs-filtered');
  await page.selectOption('select[name="kind"]', 'map');
  await page.waitForFunction(() => document.querySelectorAll('#jobs-table tbody tr').length === 0);
  assert.ok(await page.isVisible('text=No jobs match these filters.'));
  /* a reload keeps the filters */
  await page.reload();
  await page.waitForSelector('select[name="kind"]');
  assert.equal(await page.inputValue('select[name="kind"]'), 'map');
  assert.equal(await page.inputValue('select[name="status"]'), 'canceled');
});

test('delete from the table asks twice, then the job is gone', LONG, async () => {
  await go('#/jobs?status=canceled');
  const btn = `tr[data-id="${longJob}"] button[data-action="delete"]`;
  await page.waitForSelector(btn);
  /* with the keyboard: Enter twice on the focused button */
  await page.focus(btn);
  await page.keyboard.press('Enter');
  assert.equal((await page.textContent(btn)).trim(), 'Confirm delete');
  assert.equal((await api('GET', `/v1/jobs/${longJob}`)).status, 200, 'one press deletes nothing');
  await page.keyboard.press('Enter');
  await page.waitForSelector(`tr[data-id="${longJob}"]`, {state: 'detached', timeout: 15000});
  assert.equal((await api('GET', `/v1/jobs/${longJob}`)).status, 404);
  /* focus went to the next row, or to the table when none is left, not to <body> */
  const focus = await page.evaluate(() => {
    const a = document.activeElement;
    return {tag: a.tagName, table: a.id === 'jobs-table', inRow: !!a.closest('#jobs-table tbody tr')};
  });
  assert.ok(focus.table || focus.inRow, `focus after the delete: ${JSON.stringify(focus)}`);
});

test('the page number survives Back and reload; total, search and sort', LONG, async () => {
  /* at least 12 jobs, so pages of 10 make two */
  let all = (await api('GET', '/v1/jobs?limit=1000')).body.jobs;
  for (let i = all.length; i < 12; i++) {
    await api('POST', '/v1/jobs?wait=10', {kind: 'map', label: `bt-fill-${i}`, params: {expr: 'x', inputs: {x: [i]}}});
  }
  all = (await api('GET', '/v1/jobs?limit=1000')).body.jobs;
  const page2 = (await api('GET', `/v1/jobs?limit=10&cursor=${(await api('GET', '/v1/jobs?limit=10')).body.next_cursor}`)).body.jobs;
  await go('#/jobs?limit=10');
  await page.waitForSelector(`#jobs-total[data-total="${all.length}"]`);
  const firstRow = () => page.$eval('#jobs-table tbody tr', (r) => r.dataset.id);
  assert.equal(await firstRow(), all[0].id);
  await page.click('#page-older');
  await page.waitForURL(/page=2/);
  await page.waitForFunction((id) => document.querySelector('#jobs-table tbody tr')?.dataset.id === id, page2[0].id);
  assert.match(await page.textContent('#page-info'), /Page 2/);
  await page.reload();
  await page.waitForFunction((id) => document.querySelector('#jobs-table tbody tr')?.dataset.id === id, page2[0].id);
  assert.match(await page.textContent('#page-info'), /Page 2/);
  await page.goBack();
  await page.waitForFunction((id) => document.querySelector('#jobs-table tbody tr')?.dataset.id === id, all[0].id);
  assert.match(await page.textContent('#page-info'), /Page 1/);
  assert.doesNotMatch(page.url(), /page=2/);

  /* search by part of a label, then by a whole id */
  await page.fill('input[name="q"]', `bt-long-${STAMP}`);
  await page.waitForFunction((id) => {
    const rows = [...document.querySelectorAll('#jobs-table tbody tr')];
    return rows.length === 1 && rows[0].dataset.id === id;
  }, longLabelJob);
  assert.match(page.url(), /q=bt-long-/);
  await page.fill('input[name="q"]', formJob);
  await page.waitForFunction((id) => {
    const rows = [...document.querySelectorAll('#jobs-table tbody tr')];
    return rows.length === 1 && rows[0].dataset.id === id;
  }, formJob);
  await page.fill('input[name="q"]', '');

  /* sort by status, then by duration (longest first), across all jobs */
  const order = ['queued', 'running', 'succeeded', 'failed', 'canceled'];
  await page.click('#jobs-table th button[data-sort="status"]');
  await page.waitForURL(/sort=status/);
  await page.waitForFunction((o) => {
    const st = [...document.querySelectorAll('#jobs-table tbody tr')].map((r) => o.indexOf(r.dataset.status));
    return st.length > 0 && st.every((x, i) => i === 0 || st[i - 1] <= x);
  }, order);
  assert.equal(await page.getAttribute('#jobs-table th[data-col="status"]', 'aria-sort'), 'ascending');
  all = (await api('GET', '/v1/jobs?limit=1000')).body.jobs;
  const longest = all.filter((j) => typeof (j.timings_ms || {}).total === 'number')
    .sort((a, b) => b.timings_ms.total - a.timings_ms.total)[0];
  await page.click('#jobs-table th button[data-sort="duration"]');
  await page.waitForURL(/sort=duration/);
  await page.waitForFunction((id) => document.querySelector('#jobs-table tbody tr')?.dataset.id === id, longest.id);
  assert.equal(await page.getAttribute('#jobs-table th[data-col="progress"]', 'aria-sort'), 'descending');
});

test('cancel on the job page: canceling… at once; offline rows lose their buttons', LONG, async () => {
  /* its own page: the refused connections below log console errors */
  const ctx = await browser.newContext({viewport: {width: 1366, height: 860}});
  const p = await ctx.newPage();
  const {status, body} = await api('POST', '/v1/jobs', {kind: 'geodesic', backend: 'serial', priority: 9,
    label: `bt-cancel2-${STAMP}`, params: {points: {random: {shape: [8000, 2], dist: 'uniform', low: -60, high: 60, seed: 6}},
      layout: 'condensed', dtype: 'float32'}});
  assert.equal(status, 202, JSON.stringify(body));
  const id = body.id;
  try {
    /* offline: the table keeps the rows but not their buttons */
    await p.goto(`${BASE}/#/jobs`);
    await p.waitForSelector(`tr[data-id="${id}"] button[data-action="cancel"]:enabled`);
    const listUrl = (u) => u.pathname === '/v1/jobs';
    await p.route(listUrl, (route) => route.abort('connectionrefused'));
    await p.waitForSelector(`tr[data-id="${id}"].stale button[data-action="cancel"]:disabled`, {timeout: 15000});
    await p.unroute(listUrl);
    await p.waitForSelector(`tr[data-id="${id}"]:not(.stale) button[data-action="cancel"]:enabled`, {timeout: 15000});

    await p.goto(`${BASE}/#/jobs/${id}`);
    await p.waitForSelector('#cancel-job');
    let release;
    const held = new Promise((r) => { release = r; });
    await p.route('**/v1/jobs/*/cancel', async (route) => { await held; await route.continue(); });
    await p.click('#cancel-job');
    await p.waitForSelector('.page-head .badge[data-status="canceling"]', {timeout: 2000});
    assert.equal((await p.textContent('#cancel-job')).trim(), 'Canceling…');
    release();
    await waitJob(id, (j) => j.status === 'canceled', 60000);
    await p.waitForSelector('.page-head .badge[data-status="canceled"]', {timeout: 3000});
  } finally {
    await api('POST', `/v1/jobs/${id}/cancel`);
    await ctx.close();
  }
});

test('the overview reads /v1/stats, a few KB a poll, links /metrics and draws its history from /v1/stats/history', LONG, async () => {
  /* jobs that finished before the page was opened: a fresh tab (no
   * sessionStorage) must still show them, from the service's history */
  const ids = [];
  for (let i = 0; i < 5; i++) {
    const {status, body} = await api('POST', '/v1/jobs', {kind: 'map', backend: 'cpu', label: `hist-${STAMP}-${i}`,
      params: {expr: 'x + 1', inputs: {x: {range: {start: 0, stop: 100}}}}});
    assert.equal(status, 202, JSON.stringify(body));
    ids.push(body.id);
  }
  for (const id of ids) await waitJob(id, (j) => j.status === 'succeeded');
  const ctx = await browser.newContext({viewport: {width: 1366, height: 860}, colorScheme: 'light'});
  const p = await ctx.newPage();
  p.on('pageerror', (e) => consoleErrors.push('page error (history): ' + e.message));
  const seen = [];
  p.on('response', async (r) => {
    if (!r.url().includes('/v1/')) return;
    try {
      const text = await r.text();
      seen.push({url: r.url(), bytes: text.length, body: r.url().includes('/v1/stats/history') ? JSON.parse(text) : null});
    } catch { /* navigated away */ }
  });
  try {
    await p.goto(`${BASE}/#/`);
    await p.waitForSelector('#throughput [data-finished]');
    await p.waitForSelector('#throughput-range[data-total]');
    /* until the stats and the latest jobs were polled 3 times each (every 2 s) */
    const count = (re) => seen.filter((x) => re.test(x.url)).length;
    const [statsRe, listRe] = [/\/v1\/stats(\?|$)/, /\/v1\/jobs(\?|$)/];
    for (let i = 0; i < 600 && (count(statsRe) < 3 || count(listRe) < 3); i++) await new Promise((r) => setTimeout(r, 100));
    const fin = (await api('GET', '/v1/stats')).body.finished_since_start;
    assert.equal(await p.getAttribute('#throughput [data-finished]', 'data-finished'), String(fin), 'finished since start, from /v1/stats');
    const lists = seen.filter((x) => listRe.test(x.url));
    assert.ok(lists.length >= 2, 'the latest jobs are polled');
    for (const x of lists) assert.ok(Number(new URL(x.url).searchParams.get('limit')) <= 10, `small list: ${x.url}`);
    const polls = count(statsRe);
    assert.ok(polls >= 3, 'the stats are polled');
    const perPoll = seen.reduce((a, x) => a + x.bytes, 0) / polls;
    assert.ok(perPoll < 32 * 1024, `bytes per poll: ${perPoll}`);
    assert.equal(await p.getAttribute('#metrics-link', 'href'), '/metrics');
    assert.equal((await fetch(BASE + '/metrics')).status, 200);
    /* the history: asked on load, then every 15 s, not per poll (fewer
     * requests than stats polls); 30 minutes in 60 steps of 30 s */
    const hist = seen.filter((x) => x.url.includes('/v1/stats/history'));
    assert.ok(hist.length >= 1 && hist.length < polls, `history not per poll: ${hist.length} for ${polls} polls`);
    const q = new URL(hist[0].url).searchParams;
    assert.equal(q.get('step'), '30');
    assert.ok(Math.abs(Date.now() / 1000 - 1800 - Number(q.get('since'))) < 120, `since 30 min ago: ${q.get('since')}`);
    assert.ok(hist[0].body.steps.length <= 120, 'at most 120 steps');
    /* the chart holds what the service counted, the 5 jobs among them */
    const chart = await p.$eval('#throughput-chart', (c) => {
      const ch = window.Chart.getChart(c);
      return {sum: ch.data.datasets.reduce((a, d) => a + d.data.reduce((x, y) => x + y, 0), 0),
        bars: ch.data.labels.length, label: c.getAttribute('aria-label')};
    });
    const served = hist[0].body.steps.reduce((a, x) => a + x.succeeded + x.failed + x.canceled, 0);
    assert.equal(chart.sum, served, 'the chart sums to the history answer');
    assert.ok(chart.sum >= ids.length, `the ${ids.length} jobs finished before the page opened are in the chart (${chart.sum})`);
    assert.match(chart.label, new RegExp(`: ${served} in all \\(\\d+ succeeded`), chart.label);
    assert.equal(await p.getAttribute('#throughput-range', 'data-total'), String(served));
    /* each job of ours falls in the step the chart says it does */
    const steps = hist[0].body.steps;
    for (const id of ids) {
      const j = (await api('GET', `/v1/jobs/${id}`)).body;
      const t = Date.parse(j.finished_at) / 1000;
      const k = steps.findIndex((x) => t >= x.t && t < x.t + 30);
      assert.ok(k >= 0 && steps[k].succeeded >= 1, `job ${id} finished at ${j.finished_at} is in a step`);
    }
    assert.ok(await p.$eval('#main canvas[aria-label^="Queue depth"]', (c) => !!window.Chart.getChart(c)), 'queue chart drawn');
    assert.ok(await p.$eval('#main canvas[aria-label^="CPU and memory"]', (c) => !!window.Chart.getChart(c)), 'CPU chart drawn');
    /* other ranges: 7 days in steps of 2 h (the jobs still in), kept across a reload */
    const week = p.waitForResponse((r) => r.url().includes('/v1/stats/history'));
    await p.click('[data-range="7d"]');
    const last = await week;
    await p.waitForFunction(() => document.querySelector('#throughput-range').textContent.includes('7 days'));
    assert.equal(new URL(last.url()).searchParams.get('step'), '7200');
    assert.ok((await last.json()).steps.length <= 120);
    const sum7 = Number(await p.getAttribute('#throughput-range', 'data-total'));
    assert.ok(sum7 >= served, `7 days hold at least what 30 min do (${sum7} >= ${served})`);
    await p.reload();
    await p.waitForSelector('#throughput-range[data-total]');
    assert.equal(await p.getAttribute('[data-range="7d"]', 'aria-pressed'), 'true', 'the range outlives a reload');
    assert.equal(await p.evaluate(() => sessionStorage.getItem('tessel.history')), null, 'no samples kept in the browser');
    await p.click('[data-range="30m"]');
    await p.waitForFunction(() => document.querySelector('#throughput-range').textContent.includes('30 min'));
  } finally {
    await ctx.close();
  }
});

test('the overview goes on when /v1/stats/history fails', LONG, async () => {
  /* a page of its own: the 500 it provokes is expected */
  const ctx = await browser.newContext({viewport: {width: 390, height: 844}, colorScheme: 'light'});
  const p = await ctx.newPage();
  const errors = [];
  p.on('pageerror', (e) => errors.push(e.message));
  await p.route('**/v1/stats/history*', (r) => r.fulfill({status: 500, contentType: 'application/json',
    body: JSON.stringify({error: {code: 'internal', message: 'history broke'}})}));
  try {
    await p.goto(`${BASE}/#/`);
    await p.waitForSelector('[data-history-error]:not([hidden])');
    assert.match(await p.textContent('[data-history-error]:not([hidden])'), /History not available.*history broke/);
    assert.equal(await p.$eval('#throughput-chart', (c) => !!window.Chart.getChart(c)), false, 'no throughput chart');
    assert.ok(await p.$eval('#throughput-chart', (c) => c.closest('.chart-box').hidden), 'its box hidden');
    /* the live numbers are still there */
    await p.waitForSelector('#throughput [data-finished]');
    await p.waitForSelector('[data-stat="queued"] .v');
    assert.equal(await p.$('#main .error-box'), null, 'no error box for the whole page');
    const w = await widths(p);
    assert.ok(w.sw <= w.iw, `no sideways scroll at 390 px: ${JSON.stringify(w)}`);
    assert.deepEqual(await axeSerious(p), []);
    assert.deepEqual(errors, [], 'no exception');
  } finally {
    await ctx.close();
  }
});

test('the performance page plots time against size', LONG, async () => {
  await go('#/perf');
  await page.waitForSelector('#perf-chart-map', {timeout: 30000});
  await page.waitForTimeout(300);
  const pts = await page.$eval('#perf-chart-map', (c) => {
    const ch = window.Chart.getChart(c);
    return {types: [ch.options.scales.x.type, ch.options.scales.y.type],
      n: ch.data.datasets.filter((d) => d.type === 'scatter').reduce((a, d) => a + d.data.length, 0),
      backends: ch.data.datasets.filter((d) => d.type === 'scatter').map((d) => d.label)};
  });
  assert.deepEqual(pts.types, ['logarithmic', 'logarithmic']);
  assert.ok(pts.n >= 3, `points from the recorded jobs (${pts.n})`);
  assert.ok(pts.backends.includes('serial') && pts.backends.includes('cpu'), 'the compare job gave serial and cpu');
  const ink = await canvasInk('#perf-chart-map');
  assert.ok(ink.ink > 500);
  assert.ok(await page.$('#perf-geodesic canvas'), 'geodesic chart from the heatmap job');
  const geoIds = await page.$eval('#perf-chart-geodesic', (c) => window.Chart.getChart(c).data.datasets
    .filter((d) => d.type === 'scatter').flatMap((d) => d.data.map((pt) => pt.id)));
  assert.ok(geoIds.includes(distancesJob), 'the distances preset is on the geodesic chart');
  assert.ok(!geoIds.includes(knnJob) && !geoIds.includes(radiusJob), 'the knn and radius queries are not on the matrix curve');
  await shot('performance');
});

test('Measure says at once what it does, then when its jobs are done', LONG, async () => {
  await go('#/perf');
  await page.waitForSelector('#perf-reduce button');
  await page.click('#perf-reduce button');
  const first = await page.textContent('#measure-reduce');
  assert.match(first, /Submitting job \d of 3|of 3 jobs finished/, `feedback at the click: "${first}"`);
  /* The button says so while its jobs run; tiny jobs may all be done by
   * the time the label is read, and then the status line says so. */
  const label = (await page.textContent('#perf-reduce button')).trim();
  const doneAlready = /3 of 3 jobs finished/.test(await page.textContent('#measure-reduce'));
  assert.ok(label === 'Measuring…' || doneAlready, `button "${label}" while its jobs run`);
  await page.waitForSelector('#measure-reduce:text("3 of 3 jobs finished")', {timeout: 110000});
});

test('ETA of a running job from its progress', LONG, async () => {
  await go('#/');
  const eta = await page.evaluate(async () => {
    const {etaMs} = await import('/js/dom.js');
    const now = Date.parse('2026-01-01T00:00:10Z');
    const job = (done, status = 'running') => ({status, started_at: '2026-01-01T00:00:00Z', progress: {done, total: 100}});
    return [etaMs(job(25), now), etaMs(job(50), now), etaMs(job(1), now), etaMs(job(50, 'queued'), now)];
  });
  assert.deepEqual(eta, [30000, 10000, null, null]);
});

test('a cuda run\'s devices in words (backend.devices)', LONG, async () => {
  await go('#/');
  const words = await page.evaluate(async () => {
    const {devicesText} = await import('/js/dom.js');
    return [devicesText(null), devicesText([]), devicesText([{device: 2}]),
      devicesText([{device: 0, rows: 20480, blocks: 13}, {device: 1, rows: 0, blocks: 0, failed: true},
        {device: 3, rows: 1, blocks: 1, taken_back: true}])];
  });
  assert.deepEqual(words, [null, null, 'GPU 2',
    'GPU 0: 20,480 rows in 13 blocks; GPU 1: 0 rows, failed; GPU 3: 1 row in 1 block, taken back']);
});

test('every control has a label and the keyboard reaches the pages', LONG, async () => {
  for (const hash of ['#/', '#/jobs', '#/submit', '#/perf']) {
    await go(hash);
    await page.waitForTimeout(300);
    const unlabelled = await page.$$eval('input, select, textarea, button', (els) => els
      .filter((e) => e.offsetParent !== null && e.type !== 'hidden')
      .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') &&
        !e.getAttribute('aria-labelledby') && !(e.tagName === 'BUTTON' && e.textContent.trim()))
      .map((e) => e.outerHTML.slice(0, 80)));
    assert.deepEqual(unlabelled, [], `unlabelled controls on ${hash}`);
  }
  await go('#/');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'skip-link');
  /* Tab to the "Jobs" link and follow it with Enter */
  for (let i = 0; i < 10; i++) {
    await page.keyboard.press('Tab');
    if (await page.evaluate(() => document.activeElement.dataset && document.activeElement.dataset.nav === 'jobs')) break;
  }
  await page.keyboard.press('Enter');
  await page.waitForURL(/#\/jobs$/);
  await page.waitForSelector('main h1:text("Jobs")');
  assert.equal(await page.evaluate(() => document.activeElement.tagName), 'H1', 'focus moves to the new page');
});

/* A second server, started with a token file: the 401 is shown as the API
 * gives it, the token dialog fixes it, and downloads carry the token. */
test('with tokens: the 401 banner, the token dialog, a download', LONG, async (t) => {
  if (!process.env.TESSEL_BIN || !process.env.WEB_DIR) { t.skip('TESSEL_BIN or WEB_DIR not set'); return; }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessel-bt-token-'));
  fs.writeFileSync(path.join(dir, 'tokens'), 'alice:bt-secret-1-0123456\n');
  const port = await new Promise((res) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); }); });
  const log = fs.openSync(path.join(ART, 'server-token.log'), 'w');
  const srv = spawn(process.env.TESSEL_BIN, [], {stdio: ['ignore', log, log], env: {...process.env,
    TESSEL_LISTEN: '127.0.0.1', TESSEL_PORT: String(port), TESSEL_DATA_DIR: dir,
    TESSEL_TOKEN_FILE: path.join(dir, 'tokens'), TESSEL_WEB_DIR: process.env.WEB_DIR}});
  const url = `http://127.0.0.1:${port}`;
  const ctx = await browser.newContext({viewport: {width: 1366, height: 860}, acceptDownloads: true});
  try {
    for (let i = 0; ; i++) {
      try { if ((await fetch(url + '/readyz')).ok) break; } catch { /* not yet */ }
      if (i > 300) throw new Error('token server not ready');
      await new Promise((r) => setTimeout(r, 100));
    }
    const p2 = await ctx.newPage();
    p2.on('pageerror', (e) => consoleErrors.push('page error (token): ' + e.message));
    const direct = await fetch(url + '/v1/jobs');
    const want = (await direct.json()).error;
    assert.equal(direct.status, 401);
    await p2.goto(`${url}/#/jobs`);
    await p2.waitForSelector('#banner:not([hidden])');
    await p2.waitForSelector('#jobs-error .error-box');
    assert.equal((await p2.textContent('#jobs-error .error-message')).trim(), want.message);
    assert.equal((await p2.textContent('#jobs-error .error-code')).trim(), want.code);
    await p2.screenshot({path: path.join(ART, 'token-401.png')});
    await p2.click('#banner button');
    await p2.fill('#token-input', 'bt-secret-1-0123456');
    await p2.click('#token-save');
    await p2.waitForSelector('#banner', {state: 'hidden'});
    await p2.waitForSelector('text=No jobs match these filters.');
    const sub = await fetch(url + '/v1/jobs?wait=30', {method: 'POST', headers: {'Content-Type': 'application/json',
      Authorization: 'Bearer bt-secret-1-0123456'}, body: JSON.stringify({kind: 'map', params: {expr: 'x + 1', inputs: {x: [1, 2]}}})});
    const job = await sub.json();
    assert.equal(job.status, 'succeeded');
    await p2.waitForSelector(`tr[data-id="${job.id}"]`);
    await p2.goto(`${url}/#/jobs/${job.id}`);
    await p2.waitForSelector('a[data-format="csv"]');
    const dl = p2.waitForEvent('download');
    await p2.click('a[data-format="csv"]');
    const file = await (await dl).path();
    assert.deepEqual(fs.readFileSync(file, 'utf8').trim().split(/\r?\n/).map(Number), [2, 3]);
  } finally {
    await ctx.close();
    srv.kill('SIGTERM');
    await new Promise((r) => { if (srv.exitCode !== null) r(); else srv.once('exit', r); });
    fs.closeSync(log);
    fs.rmSync(dir, {recursive: true, force: true});
  }
});

test('dark scheme screenshots', LONG, async () => {
  const ctx = await browser.newContext({viewport: {width: 1366, height: 860}, colorScheme: 'dark'});
  const p2 = await ctx.newPage();
  p2.on('pageerror', (e) => consoleErrors.push('page error (dark): ' + e.message));
  await p2.goto(`${BASE}/#/jobs/${formJob}`);
  await p2.waitForSelector('#compare-chart');
  await p2.waitForTimeout(600);
  const bg = await p2.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.notEqual(bg, 'rgb(245, 246, 248)', 'the dark scheme applies');
  await p2.screenshot({path: path.join(ART, 'detail-compare-dark.png'), fullPage: true});
  await p2.goto(`${BASE}/#/`);
  await p2.waitForSelector('[data-device="cpu"] .v');
  await p2.waitForTimeout(2500);
  await p2.screenshot({path: path.join(ART, 'overview-dark.png'), fullPage: true});
  await ctx.close();
});

test('the Content-Security-Policy is enforced: an injected inline script does not run', LONG, async () => {
  // A page of its own: the violation it provokes is expected, so its
  // console stays out of the "no console errors" check below.
  const ctx = await browser.newContext({viewport: {width: 1366, height: 860}});
  const p2 = await ctx.newPage();
  const violations = [];
  await p2.exposeFunction('__noteViolation', (d) => violations.push(d));
  await p2.addInitScript(() => document.addEventListener('securitypolicyviolation',
    (ev) => window.__noteViolation(ev.violatedDirective)));
  await p2.goto(`${BASE}/#/`);
  await p2.waitForSelector('[data-device="cpu"] .v');
  const ran = await p2.evaluate(() => {
    const s = document.createElement('script');
    s.textContent = 'window.__inlineRan = true';
    document.head.append(s);
    const d = document.createElement('div');
    d.setAttribute('style', 'color: red');   // an inline style attribute
    document.body.append(d);
    return window.__inlineRan === true;
  });
  await p2.waitForTimeout(300);
  assert.equal(ran, false, 'an inline script ran despite the CSP');
  assert.ok(violations.some((v) => v.startsWith('script-src')), `script violation seen: ${violations}`);
  assert.ok(violations.some((v) => v.startsWith('style-src')), `style violation seen: ${violations}`);
  await ctx.close();
});

test('no console errors', async () => {
  const unexpected = consoleErrors.filter((m) => {
    const s = /status of (\d{3})/.exec(m);
    return !(s && m.startsWith('Failed to load resource') && expectedStatuses.has(Number(s[1])));
  });
  assert.deepEqual(unexpected, []);
});
