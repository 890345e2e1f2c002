/* map_lists.test.mjs — browser tests of issue 28's dashboard work, after
 * dashboard.test.mjs (run.sh runs the two files one after the other against
 * the same server; this one makes 1,000 jobs, which the other's totals must
 * not see, and dashboard.test.mjs is past 1,000 lines already).
 *
 * The world map of a geodesic job (web/js/worldmap.js): the coastlines are
 * real (the land path holds Paris and the Sahara and not the Atlantic or the
 * Pacific), each point is where the projection puts it (in the path and on
 * the screen), the heatmap of a matrix job sits beside it, the buttons, the
 * wheel (about the pointer), a drag and the keys zoom and move it; a knn
 * point clicked on the map shows its k neighbours as the API gives them
 * (and random points are generated in the page as the service does, bit for
 * bit); a radius job's pairs are lines; an upload's points are read too.
 * The jobs list at 1,000+ jobs: search and sort go to the API (q=,
 * order_by=) and find the oldest job, which the old page (newest 1,000
 * filtered in the browser) missed; a backend filter has its total. On a
 * phone the overview's tables show the status without scrolling. axe finds
 * no landmark-unique on any view. Waits are for states, never for a time.
 */
import {test, before, after} from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import fs from 'node:fs';
import {chromium} from 'playwright-core';
import {createRequire} from 'node:module';

const AXE_SRC = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
const BASE = process.env.TESSEL_URL;
const ART = process.env.ARTIFACTS || 'artifacts';
const STAMP = Date.now().toString(36);
const LONG = {timeout: 180000};

let browser;
let page;
const errors = [];

async function api(method, p, body, type) {
  const res = await fetch(BASE + p, {method, headers: body !== undefined ? {'Content-Type': type || 'application/json'} : {},
    body: body === undefined ? undefined : type ? body : JSON.stringify(body)});
  const text = await res.text();
  return {status: res.status, body: text ? JSON.parse(text) : null};
}

async function submit(body) {
  const r = await api('POST', '/v1/jobs?wait=60', body);
  assert.ok(r.status === 200 || r.status === 202, JSON.stringify(r.body));
  for (let j = r.body; ; j = (await api('GET', `/v1/jobs/${j.id}?wait=5`)).body) {
    if (j.status === 'succeeded') return j;
    assert.ok(j.status === 'queued' || j.status === 'running', `job ${j.id} ended ${j.status}: ${JSON.stringify(j.error)}`);
  }
}

async function go(hash, p = page) {
  await p.goto('about:blank');
  await p.goto(`${BASE}/${hash}`);
  await p.waitForSelector('main h1');
}

/* The screen position of (lat, lon) on the map, from the SVG's own matrix. */
function screenOf(p, lat, lon) {
  return p.$eval('#map-svg', (svg, [la, lo]) => {
    const q = new DOMPoint(lo + 180, 90 - la).matrixTransform(svg.getScreenCTM());
    return {x: q.x, y: q.y};
  }, [lat, lon]);
}

const viewOf = async (p = page) => (await p.getAttribute('#map-svg', 'data-view')).split(' ').map(Number);

/* The dots of a path ("M x yh0" each) as [x, y] pairs. */
const dotsOf = (d) => [...d.matchAll(/M([-\d.]+) ([-\d.]+)h0/g)].map((m) => [Number(m[1]), Number(m[2])]);

before(async () => {
  assert.ok(BASE, 'TESSEL_URL is set by run.sh');
  browser = await chromium.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage']});
  const ctx = await browser.newContext({viewport: {width: 1366, height: 860}, colorScheme: 'light'});
  page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push('page error: ' + e.message));
});

after(async () => { if (browser) await browser.close(); });

const CITIES = [[48.8566, 2.3522], [35.6762, 139.6503], [-33.8688, 151.2093], [40.7128, -74.006],
  [-22.9068, -43.1729], [64.1466, -21.9426], [1.3521, 103.8198], [-54.8019, -68.303], [30.0444, 31.2357],
  [61.2181, -149.9003], [-17.7134, 178.065]];
let matrixJob = null;

test('the map draws real coastlines and each point where the projection puts it, the heatmap beside it', LONG, async () => {
  matrixJob = (await submit({kind: 'geodesic', backend: 'cpu', label: `map-cities-${STAMP}`,
    params: {points: CITIES, units: 'km'}})).id;
  await go(`#/jobs/${matrixJob}`);
  await page.waitForSelector('#worldmap[data-ready="1"]');
  await page.waitForSelector(`#map-points[data-count="${CITIES.length}"]`);
  await page.waitForSelector('#heatmap[data-drawn="1"]');
  /* the coastlines: a long land path that holds land and not sea */
  const land = await page.$eval('#map-land', (el, tests) => ({len: el.getAttribute('d').length,
    inside: tests.map(([lat, lon]) => el.isPointInFill(new DOMPoint(lon + 180, 90 - lat)))}),
  [[48.8566, 2.3522], [23, 10], [-25, 134], [60, 100], [-5, -60], [30, -40], [0, -140], [-40, 80], [35, 18]]);
  assert.ok(land.len > 20000, `the land path is drawn (${land.len} characters)`);
  assert.deepEqual(land.inside, [true, true, true, true, true, false, false, false, false],
    'Paris, the Sahara, Australia, Siberia and the Amazon are land; the Atlantic, Pacific, Indian Ocean and Mediterranean are not');
  assert.ok((await page.$eval('#map-borders', (el) => el.getAttribute('d').length)) > 1000, 'the borders are drawn');
  /* the points: in the path at (lon + 180, 90 − lat) … */
  const dots = dotsOf(await page.getAttribute('#map-points', 'd'));
  assert.equal(dots.length, CITIES.length);
  dots.forEach(([x, y], i) => {
    assert.ok(Math.abs(x - (CITIES[i][1] + 180)) < 1e-3 && Math.abs(y - (90 - CITIES[i][0])) < 1e-3, `point ${i}: ${x} ${y}`);
  });
  /* … and on the screen at the equirectangular place in the map's box */
  const box = await page.$eval('#map-svg', (s) => s.getBoundingClientRect().toJSON());
  for (const [lat, lon] of CITIES) {
    const s = await screenOf(page, lat, lon);
    assert.ok(Math.abs(s.x - (box.left + (lon + 180) / 360 * box.width)) < 1, `x of ${lat},${lon}`);
    assert.ok(Math.abs(s.y - (box.top + (90 - lat) / 180 * box.height)) < 1, `y of ${lat},${lon}`);
  }
  /* the heatmap beside the map (same row, to its right) */
  const heat = await page.$eval('#heatmap', (c) => c.getBoundingClientRect().toJSON());
  assert.ok(heat.left >= box.right && heat.top < box.bottom, `heatmap beside the map: ${JSON.stringify([heat, box])}`);
  assert.match(await page.textContent('#map-note'), /11 points on the map/);
  await page.$eval('#map-section', (el) => el.scrollIntoView());
  await page.screenshot({path: path.join(ART, 'map-matrix.png'), fullPage: true});
});

test('zoom and pan: buttons, the wheel about the pointer, a drag, the keys', LONG, async () => {
  await go(`#/jobs/${matrixJob}`);
  await page.waitForSelector('#worldmap[data-ready="1"]');
  await page.$eval('#map-svg', (s) => s.scrollIntoView({block: 'center'}));
  assert.deepEqual(await viewOf(), [0, 0, 360, 180], 'the whole world first');
  await page.click('#map-zoom-in');
  await page.waitForFunction(() => document.querySelector('#map-svg').dataset.view.endsWith(' 180.0000 90.0000'));
  assert.equal(await page.textContent('#map-zoom'), '2×');
  /* the wheel over Cairo (in the 2× view) zooms about it: Cairo stays under the pointer */
  const cairo = await screenOf(page, 30.0444, 31.2357);
  await page.mouse.move(cairo.x, cairo.y);
  const before = await viewOf();
  await page.mouse.wheel(0, -120);
  await page.waitForFunction((w) => Number(document.querySelector('#map-svg').dataset.view.split(' ')[2]) < w, before[2]);
  const after1 = await screenOf(page, 30.0444, 31.2357);
  assert.ok(Math.hypot(after1.x - cairo.x, after1.y - cairo.y) < 1.5, `Cairo stays put: ${JSON.stringify([cairo, after1])}`);
  /* a drag to the right moves the view west (its x smaller) */
  const v1 = await viewOf();
  await page.mouse.move(cairo.x, cairo.y);
  await page.mouse.down();
  await page.mouse.move(cairo.x + 60, cairo.y + 5, {steps: 6});
  await page.mouse.up();
  await page.waitForFunction((x) => Number(document.querySelector('#map-svg').dataset.view.split(' ')[0]) < x - 1, v1[0]);
  /* keys on the focused map: → moves east, − zooms out, 0 shows the world */
  await page.focus('#map-svg');
  const v2 = await viewOf();
  await page.keyboard.press('ArrowRight');
  await page.waitForFunction((x) => Number(document.querySelector('#map-svg').dataset.view.split(' ')[0]) > x, v2[0]);
  await page.keyboard.press('-');
  await page.waitForFunction((w) => Number(document.querySelector('#map-svg').dataset.view.split(' ')[2]) > w, v2[2]);
  await page.click('#map-zoom-in');
  await page.click('#map-zoom-in');
  await page.screenshot({path: path.join(ART, 'map-zoomed.png'), fullPage: false});
  await page.click('#map-reset');
  await page.waitForFunction(() => document.querySelector('#map-svg').dataset.view === '0.0000 0.0000 360.0000 180.0000');
  await page.click('#map-zoom-out');
  assert.deepEqual(await viewOf(), [0, 0, 360, 180], 'no zoom out beyond the world');
});

const RND = {shape: [400, 2], dist: 'uniform', low: -60, high: 60, seed: 11};

test('random points are generated in the page as the service makes them', LONG, async () => {
  await go('#/');
  for (const spec of [RND, {shape: [9, 2], dist: 'normal', mean: 5, std: 20, seed: 2 ** 40 + 3}]) {
    const j = await submit({kind: 'map', backend: 'cpu', params: {expr: 'x', inputs: {x: {random: spec}}}});
    const want = (await api('GET', `/v1/jobs/${j.id}/result?format=json`)).body.data.flat();
    const got = await page.evaluate(async ([s, n]) => Array.from((await import('/js/geopoints.js')).randomValues(s, n)),
      [spec, want.length]);
    if (spec.dist === 'uniform') assert.deepEqual(got, want, 'uniform: the same bits');
    else got.forEach((v, i) => assert.ok(Math.abs(v - want[i]) <= 1e-12 * Math.max(1, Math.abs(want[i])), `normal ${i}: ${v} ${want[i]}`));
  }
});

let knnJob = null;

test('a knn point clicked on the map shows its k neighbours, as the API gives them', LONG, async () => {
  const k = 5;
  const job = await submit({kind: 'geodesic', backend: 'cpu', label: `map-knn-${STAMP}`,
    params: {points: {random: RND}, units: 'km', query: {knn: {k}}}});
  knnJob = job.id;
  const pts = (await submit({kind: 'map', backend: 'cpu', params: {expr: 'x', inputs: {x: {random: RND}}}})).id;
  const coords = (await api('GET', `/v1/jobs/${pts}/result?format=json`)).body.data;
  await go(`#/jobs/${job.id}`);
  await page.waitForSelector('#worldmap[data-ready="1"]');
  await page.waitForSelector('#map-points[data-count="400"]');
  await page.waitForSelector('#map-highlight[data-point="0"]'); /* the table's point 0 */
  await page.$eval('#map-svg', (s) => s.scrollIntoView({block: 'center'}));
  for (const p of [123, 377]) {
    const s = await screenOf(page, coords[p][0], coords[p][1]);
    await page.mouse.click(s.x, s.y);
    await page.waitForSelector(`#map-highlight[data-point="${p}"]`);
    const want = (await api('GET', `/v1/jobs/${job.id}/result/index?format=json&limit_rows=${p + 1}`)).body.data[p];
    assert.equal(want.length, k);
    assert.equal(await page.getAttribute('#map-highlight', 'data-neighbours'), want.join(','), `the neighbours of ${p}`);
    assert.equal(dotsOf(await page.$eval('#map-highlight .map-nb', (e) => e.getAttribute('d'))).length, k, `${k} dots`);
    await page.waitForSelector(`#nb-table[data-point="${p}"]`);
    assert.equal(await page.inputValue('#nb-point'), String(p), 'the table follows the map');
  }
  /* and the map follows the table */
  await page.fill('#nb-point', '42');
  await page.waitForSelector('#map-highlight[data-point="42"]');
  await page.$eval('#map-section', (el) => el.scrollIntoView());
  await page.screenshot({path: path.join(ART, 'map-knn.png'), fullPage: false});
});

test('a radius job draws its pairs as lines; points from an upload are read', LONG, async () => {
  const job = await submit({kind: 'geodesic', backend: 'cpu', label: `map-radius-${STAMP}`,
    params: {points: {random: {...RND, seed: 12, shape: [300, 2]}}, units: 'km', query: {radius: {r: 800}}}});
  const total = job.result.parts[0].shape[0];
  assert.ok(total > 10, `pairs found (${total})`);
  await go(`#/jobs/${job.id}`);
  await page.waitForSelector(`#map-pairs[data-pairs="${total}"]`);
  const d = await page.getAttribute('#map-pairs', 'd');
  const first = /^M([-\d.]+) ([-\d.]+)L([-\d.]+) ([-\d.]+)/.exec(d).slice(1).map(Number);
  const pts = (await submit({kind: 'map', backend: 'cpu', params: {expr: 'x',
    inputs: {x: {random: {...RND, seed: 12, shape: [300, 2]}}}}})).id;
  const coords = (await api('GET', `/v1/jobs/${pts}/result?format=json`)).body.data;
  const [i0, j0] = [(await api('GET', `/v1/jobs/${job.id}/result/i?format=json&limit_rows=1`)).body.data[0],
    (await api('GET', `/v1/jobs/${job.id}/result/j?format=json&limit_rows=1`)).body.data[0]];
  const want = [coords[i0][1] + 180, 90 - coords[i0][0], coords[j0][1] + 180, 90 - coords[j0][0]];
  first.forEach((v, k) => assert.ok(Math.abs(v - want[k]) < 1e-3, `the first line joins pair (${i0}, ${j0})`));
  assert.match(await page.textContent('#map-section'), new RegExp(`all ${total.toLocaleString('en')} pairs within r`));
  await page.$eval('#map-section', (el) => el.scrollIntoView());
  await page.screenshot({path: path.join(ART, 'map-radius.png'), fullPage: false});

  /* points that are an upload: read from /v1/arrays/{id}/data */
  const up = await api('POST', '/v1/arrays', JSON.stringify(CITIES.slice(0, 4)), 'application/json');
  assert.equal(up.status, 201, JSON.stringify(up.body));
  const uj = await submit({kind: 'geodesic', backend: 'cpu', params: {points: {array: up.body.id}, query: {rowwise: {op: 'min'}}}});
  await go(`#/jobs/${uj.id}`);
  await page.waitForSelector('#map-points[data-count="4"]');
  const dots = dotsOf(await page.getAttribute('#map-points', 'd'));
  assert.equal(dots.length, 4);
  dots.forEach(([x, y], i) => assert.ok(Math.abs(x - (CITIES[i][1] + 180)) < 1e-3 && Math.abs(y - (90 - CITIES[i][0])) < 1e-3,
    `uploaded point ${i}`));
});

test('on a phone the overview\'s tables show the status without scrolling', LONG, async () => {
  const ctx = await browser.newContext({viewport: {width: 390, height: 844}});
  const p = await ctx.newPage();
  p.on('pageerror', (e) => errors.push('page error (phone): ' + e.message));
  try {
    await go('#/', p);
    const recent = '[aria-label="Latest jobs"] tbody tr .badge';
    await p.waitForSelector(recent);
    await p.waitForSelector('#nodes tbody tr [data-alive]');
    const seen = await p.evaluate((sel) => [...document.querySelectorAll(`${sel}, #nodes tbody tr [data-alive]`)]
      .map((b) => {
        const wrap = b.closest('.table-wrap').getBoundingClientRect();
        const r = b.getBoundingClientRect();
        return {text: b.textContent, left: r.left, right: r.right, wl: wrap.left, wr: wrap.right};
      }), recent);
    assert.ok(seen.length >= 2, 'the latest jobs and the node');
    for (const s of seen) assert.ok(s.left >= s.wl && s.right <= s.wr, `"${s.text}" in view: ${JSON.stringify(s)}`);
    await p.screenshot({path: path.join(ART, 'overview-390.png'), fullPage: true});
  } finally {
    await ctx.close();
  }
});

test('axe: no landmark-unique on any view', LONG, async () => {
  assert.ok(matrixJob && knnJob, 'the jobs of the earlier tests');
  const found = [];
  for (const [hash, sel] of [['#/', '[aria-label="Latest jobs"] tbody tr'], ['#/jobs', '#jobs-table tbody tr'],
    [`#/jobs/${matrixJob}`, '#heatmap[data-drawn="1"]'], [`#/jobs/${knnJob}`, '#nb-table tbody tr'],
    ['#/submit', '#request-json'], ['#/perf', '#perf-chart-map']]) {
    await go(hash);
    await page.waitForSelector(sel);
    await page.waitForSelector('#nodes tbody tr, #main:not(:has(#nodes))');
    if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(AXE_SRC);
    const v = await page.evaluate(async () => (await window.axe.run(document, {runOnly: {type: 'rule', values: ['landmark-unique']}}))
      .violations.map((x) => `${x.id}: ${x.nodes.map((n) => n.target.join(' ')).join(', ')}`));
    for (const x of v) found.push(`${hash}: ${x}`);
  }
  assert.deepEqual(found, []);
});

test('past 1,000 jobs, search, sort and totals are the API\'s: the oldest job is found', LONG, async () => {
  const needle = `needle-${STAMP}`;
  const old = await submit({kind: 'map', backend: 'serial', label: needle, params: {expr: 'x', inputs: {x: [1]}}});
  /* 1,000 newer jobs: the old page read the newest 1,000 and filtered them */
  const one = () => api('POST', '/v1/jobs', {kind: 'map', backend: 'cpu', label: `filler-${STAMP}`,
    params: {expr: 'x', inputs: {x: [1]}}});
  for (let made = 0; made < 1000; made += 25) {
    for (const r of await Promise.all(Array.from({length: 25}, one))) assert.equal(r.status, 202, JSON.stringify(r.body));
  }
  const all = (await api('GET', '/v1/jobs?limit=1')).body.total;
  assert.ok(all > 1001, `more than 1,000 jobs (${all})`);
  const sent = [];
  page.on('request', (r) => { const u = new URL(r.url()); if (u.pathname === '/v1/jobs') sent.push(u.searchParams); });

  /* search: the needle, older than the newest 1,000 */
  await go('#/jobs');
  await page.waitForSelector(`#jobs-total[data-total="${all}"]`);
  await page.fill('input[name="q"]', needle.toUpperCase());
  await page.waitForFunction((id) => {
    const rows = [...document.querySelectorAll('#jobs-table tbody tr')];
    return rows.length === 1 && rows[0].dataset.id === id;
  }, old.id);
  await page.waitForSelector('#jobs-total[data-total="1"]');
  assert.ok(sent.some((q) => q.get('q') === needle.toUpperCase()), 'the search is the API\'s q=');
  await page.fill('input[name="q"]', '');
  await page.waitForSelector(`#jobs-total[data-total="${all}"]`);

  /* oldest first: the store's very first job, not the oldest of the newest 1,000 */
  const oldest = (await api('GET', '/v1/jobs?order_by=created&desc=false&limit=1')).body.jobs[0];
  await page.click('#jobs-table th button[data-sort="created"]');
  await page.waitForURL(/dir=asc/);
  await page.waitForFunction((id) => document.querySelector('#jobs-table tbody tr')?.dataset.id === id, oldest.id);
  assert.ok(sent.some((q) => q.get('order_by') === 'created' && q.get('desc') === 'false'), 'order_by=created&desc=false');
  /* by status: asked of the API, and paged by its cursor */
  await page.click('#jobs-table th button[data-sort="status"]');
  await page.waitForURL(/sort=status/);
  await page.waitForFunction(() => [...document.querySelectorAll('#jobs-table tbody tr')].length > 0);
  assert.ok(sent.some((q) => q.get('order_by') === 'status'), 'order_by=status');
  await page.click('#page-older');
  await page.waitForURL(/page=2/);
  await page.waitForFunction(() => document.querySelector('#page-info').textContent.startsWith('Page 2'));
  assert.ok(sent.some((q) => q.get('order_by') === 'status' && q.get('cursor')), 'page 2 by the cursor of that order');

  /* a backend filter has the API's total, not "not counted" */
  const serial = (await api('GET', '/v1/jobs?backend=serial&limit=1')).body.total;
  await go('#/jobs?backend=serial');
  await page.waitForSelector(`#jobs-total[data-total="${serial}"]`);
  assert.match(await page.textContent('#jobs-total'), new RegExp(`^${serial.toLocaleString('en')} jobs?$`));
});

test('no console errors', () => {
  assert.deepEqual(errors, []);
});
