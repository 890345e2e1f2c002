/* worldmap.js — a world map in SVG for a geodesic job: its points on the
 * coastlines, a kNN point's neighbours, a radius job's pairs.
 *
 * The coastlines and borders are Natural Earth's 1:110m countries from the
 * npm package world-atlas (vendor/countries-110m.json, 108 KB, fetched from
 * this dashboard once per page load: no tile server, nothing from outside).
 * The file is TopoJSON; it is decoded here rather than with topojson-client
 * because the map needs only a sliver of that library — arcs un-delta'd and
 * scaled, rings joined from arcs (a negative index ~i is arc i reversed), and
 * the borders as the arcs that two countries share — about 40 lines against
 * a 7 KB script that would be one more global, licence and version to keep.
 *
 * Projection: equirectangular (plate carrée), in the SVG's own units: x =
 * lon + 180, y = 90 − lat, the world 360 × 180. Zoom and pan change only the
 * viewBox (zoom 1× to 64×): the buttons, the wheel (about the pointer), a
 * drag, and on the focused map the arrow keys, + and − and 0. Dots and lines
 * keep their size in pixels (vector-effect: non-scaling-stroke); each dot is
 * a zero-length segment with a round cap, so 100,000 points are one <path>.
 * A click (a press that did not drag) picks the nearest point within 12 px
 * and calls onPick(i). A line between two points that are more than 180° of
 * longitude apart is drawn across the antimeridian (twice, shifted by
 * ±360°; the SVG clips what falls outside the world).
 *
 * worldMap({label}) -> {el, setPoints(pts, targets), highlight(p, nbrs),
 * setPairs(i, j), onPick(fn), zoomBy(f), view()}; el shows "Loading the
 * map…" until the atlas is in. Test hooks: #map-land, #map-points,
 * #map-highlight[data-point][data-neighbours], #map-pairs[data-pairs],
 * svg[data-view] (the viewBox), data-ready="1" once the coastlines are drawn.
 */
import {api} from './api.js';
import {h} from './dom.js';

const ATLAS_URL = 'vendor/countries-110m.json';
const NS = 'http://www.w3.org/2000/svg';
const W = 360;
const H = 180;
const MAX_ZOOM = 64;
const PICK_PX = 12;

let atlas = null;

function svgEl(tag, attrs = {}) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, v);
  return el;
}

const px = (lon) => Math.round((lon + 180) * 1000) / 1000;
const py = (lat) => Math.round((90 - lat) * 1000) / 1000;

/* The atlas as two SVG path strings: land (filled, even-odd) and borders. */
export function loadAtlas() {
  if (!atlas) {
    atlas = api.get(ATLAS_URL).then(decodeAtlas);
    atlas.catch(() => { atlas = null; });
  }
  return atlas;
}

function decodeAtlas(topo) {
  const [sx, sy] = topo.transform.scale;
  const [tx, ty] = topo.transform.translate;
  const arcs = topo.arcs.map((arc) => {
    let x = 0;
    let y = 0;
    return arc.map(([dx, dy]) => { x += dx; y += dy; return [x * sx + tx, y * sy + ty]; });
  });
  const line = (pts, close) => unwrap(pts).map((q) => 'M' + q.map(([lon, lat]) => `${px(lon)} ${py(lat)}`).join('L') +
    (close ? 'Z' : '')).join('');
  const ring = (idx) => {
    const pts = [];
    for (const i of idx) {
      const a = i >= 0 ? arcs[i] : [...arcs[~i]].reverse();
      pts.push(...(pts.length ? a.slice(1) : a));
    }
    return line(pts, true);
  };
  const polygons = (g) => (g.type === 'Polygon' ? [g.arcs] : g.type === 'MultiPolygon' ? g.arcs : []);
  const land = topo.objects.land.geometries.flatMap(polygons).map((poly) => poly.map(ring).join('')).join('');
  /* a border is an arc of two different countries */
  const owners = new Map();
  topo.objects.countries.geometries.forEach((g, gi) => {
    for (const poly of polygons(g)) {
      for (const r of poly) {
        for (const i of r) {
          const a = i >= 0 ? i : ~i;
          const s = owners.get(a) || new Set();
          s.add(gi);
          owners.set(a, s);
        }
      }
    }
  });
  const borders = [...owners].filter(([, s]) => s.size > 1).map(([a]) => line(arcs[a])).join('');
  return {land, borders};
}

/* A ring or line that crosses the antimeridian (Russia's east, Fiji) jumps
 * by ~360° of longitude; drawn as it is, it streaks across the world. Its
 * longitudes are made continuous instead (reaching past ±180°), and it is
 * drawn twice, the copy shifted by ∓360°, each showing its own side. */
function unwrap(pts) {
  let shift = 0;
  let lo = Infinity;
  let hi = -Infinity;
  let prev = null;
  const out = pts.map(([lon, lat]) => {
    if (prev !== null && lon + shift - prev > 180) shift -= 360;
    else if (prev !== null && lon + shift - prev < -180) shift += 360;
    const x = lon + shift;
    prev = x;
    lo = Math.min(lo, x);
    hi = Math.max(hi, x);
    return [x, lat];
  });
  if (hi > 180) return [out, out.map(([x, y]) => [x - 360, y])];
  if (lo < -180) return [out, out.map(([x, y]) => [x + 360, y])];
  return [out];
}

function graticule() {
  let d = '';
  for (let lon = -150; lon <= 150; lon += 30) d += `M${px(lon)} 0V${H}`;
  for (let lat = -60; lat <= 60; lat += 30) d += `M0 ${py(lat)}H${W}`;
  return d;
}

const dots = (lat, lon, idx) => idx.map((i) => `M${px(lon[i])} ${py(lat[i])}h0`).join('');

/* Segments a–b, across the antimeridian when that is shorter. */
function segment(la1, lo1, la2, lo2) {
  const d = lo2 - lo1;
  if (Math.abs(d) <= 180) return `M${px(lo1)} ${py(la1)}L${px(lo2)} ${py(la2)}`;
  const s = d > 0 ? -360 : 360;
  return `M${px(lo1)} ${py(la1)}L${px(lo2 + s)} ${py(la2)}M${px(lo1 - s)} ${py(la1)}L${px(lo2)} ${py(la2)}`;
}

/* The index of the point nearest to map position (x, y) within r, or -1. */
function nearest(pts, x, y, r) {
  let best = -1;
  let bd = r * r;
  for (let i = 0; i < pts.n; i += 1) {
    const dx = px(pts.lon[i]) - x;
    const dy = py(pts.lat[i]) - y;
    const d = dx * dx + dy * dy;
    if (d < bd) { bd = d; best = i; }
  }
  return best;
}

/* Wheel, drag, click and keys on the map; c: {view(), setView, zoomBy,
 * toMap, click(ev)} (a press that moved less than 4 px is a click). */
function bindControls(svg, c) {
  svg.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const m = c.toMap(ev);
    if (m) c.zoomBy(ev.deltaY < 0 ? 1.5 : 1 / 1.5, m.x, m.y);
  }, {passive: false});
  let drag = null;
  svg.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 0) return;
    drag = {sx: ev.clientX, sy: ev.clientY, x: c.view().x, y: c.view().y, moved: false, id: ev.pointerId};
  });
  svg.addEventListener('pointermove', (ev) => {
    if (!drag || ev.pointerId !== drag.id) return;
    const dx = ev.clientX - drag.sx;
    const dy = ev.clientY - drag.sy;
    if (!drag.moved && Math.hypot(dx, dy) < 4) return;
    if (!drag.moved) { drag.moved = true; svg.setPointerCapture(ev.pointerId); svg.classList.add('dragging'); }
    const k = c.view().k;
    const unit = (W / k) / svg.getBoundingClientRect().width;
    c.setView(drag.x - dx * unit, drag.y - dy * unit, k);
  });
  const endDrag = (ev) => {
    if (!drag) return;
    const clicked = !drag.moved && ev.type === 'pointerup';
    drag = null;
    svg.classList.remove('dragging');
    if (clicked) c.click(ev);
  };
  svg.addEventListener('pointerup', endDrag);
  svg.addEventListener('pointercancel', endDrag);
  svg.addEventListener('keydown', (ev) => {
    const v = c.view();
    const step = (W / v.k) / 8;
    const keys = {ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step]};
    if (keys[ev.key]) c.setView(v.x + keys[ev.key][0], v.y + keys[ev.key][1], v.k);
    else if (ev.key === '+' || ev.key === '=') c.zoomBy(2);
    else if (ev.key === '-' || ev.key === '_') c.zoomBy(0.5);
    else if (ev.key === '0') c.setView(0, 0, 1);
    else return;
    ev.preventDefault();
  });
}

export function worldMap({label}) {
  const svg = svgEl('svg', {id: 'map-svg', class: 'map-svg', viewBox: `0 0 ${W} ${H}`, role: 'img',
    tabindex: '0', 'aria-label': label, 'aria-describedby': 'map-hint'});
  const layer = (id, cls) => svg.appendChild(svgEl('path', {id, class: cls, d: ''}));
  svg.appendChild(svgEl('rect', {class: 'map-sea', x: 0, y: 0, width: W, height: H}));
  layer('map-graticule', 'map-graticule').setAttribute('d', graticule());
  const land = layer('map-land', 'map-land');
  land.setAttribute('fill-rule', 'evenodd');
  const borders = layer('map-borders', 'map-borders');
  const pairs = layer('map-pairs', 'map-pairs');
  const tpath = layer('map-targets', 'map-targets');
  const ppath = layer('map-points', 'map-points');
  const hl = svg.appendChild(svgEl('g', {id: 'map-highlight'}));
  const status = h('span', {class: 'muted', id: 'map-status'}, 'Loading the map…');
  const zoomText = h('span', {class: 'muted map-zoom', id: 'map-zoom'}, '1×');
  const btn = (text, aria, fn, id) => h('button', {type: 'button', class: 'btn btn-sm', id, 'aria-label': aria, onclick: fn}, text);
  const el = h('figure', {class: 'worldmap', id: 'worldmap'},
    h('div', {class: 'map-tools', role: 'group', 'aria-label': 'Map zoom'},
      btn('+', 'Zoom in', () => zoomBy(2), 'map-zoom-in'), btn('−', 'Zoom out', () => zoomBy(0.5), 'map-zoom-out'),
      btn('World', 'Show the whole world', () => setView(0, 0, 1), 'map-reset'), zoomText, status),
    h('div', {class: 'map-frame'}, svg),
    h('figcaption', {class: 'muted', id: 'map-hint'}, 'Coastlines: Natural Earth 1:110m. Drag or arrow keys to move, ' +
      'wheel or + and − to zoom.'));

  let pts = null;
  let tgt = null;
  let pick = null;
  let v = {x: 0, y: 0, k: 1};

  function setView(x, y, k) {
    k = Math.min(MAX_ZOOM, Math.max(1, k));
    const vw = W / k;
    const vh = H / k;
    v = {x: Math.min(W - vw, Math.max(0, x)), y: Math.min(H - vh, Math.max(0, y)), k};
    const box = `${v.x.toFixed(4)} ${v.y.toFixed(4)} ${vw.toFixed(4)} ${vh.toFixed(4)}`;
    svg.setAttribute('viewBox', box);
    svg.dataset.view = box;
    zoomText.textContent = `${Number(k.toFixed(2))}×`;
  }
  /* zoom by f keeping the map point (cx, cy) where it is on screen */
  function zoomBy(f, cx = v.x + W / v.k / 2, cy = v.y + H / v.k / 2) {
    const k = Math.min(MAX_ZOOM, Math.max(1, v.k * f));
    const r = v.k / k;
    setView(cx - (cx - v.x) * r, cy - (cy - v.y) * r, k);
  }
  function toMap(ev) {
    const m = svg.getScreenCTM();
    if (!m) return null;
    const p = new DOMPoint(ev.clientX, ev.clientY).matrixTransform(m.inverse());
    return {x: p.x, y: p.y, unit: 1 / m.a};
  }
  function pickAt(ev) {
    const m = pts && pick ? toMap(ev) : null;
    const best = m ? nearest(pts, m.x, m.y, PICK_PX * m.unit) : -1;
    if (best >= 0) pick(best);
  }
  bindControls(svg, {view: () => v, setView, zoomBy, toMap, click: pickAt});

  loadAtlas().then((a) => {
    land.setAttribute('d', a.land);
    borders.setAttribute('d', a.borders);
    status.textContent = '';
    el.dataset.ready = '1';
  }, (x) => { status.textContent = `The coastlines could not be loaded: ${x.message}`; });
  setView(0, 0, 1);

  const all = (n) => Array.from({length: n}, (_, i) => i);
  return {
    el,
    zoomBy,
    view: () => ({...v}),
    onPick(fn) { pick = fn; svg.classList.toggle('pickable', !!fn); },
    setPoints(p, t) {
      pts = p;
      tgt = t || null;
      ppath.setAttribute('d', dots(p.lat, p.lon, all(p.n)));
      ppath.dataset.count = String(p.n);
      ppath.classList.toggle('dense', p.n > 1000);
      tpath.setAttribute('d', tgt ? dots(tgt.lat, tgt.lon, all(tgt.n)) : '');
      tpath.dataset.count = String(tgt ? tgt.n : 0);
    },
    /* point p and its neighbours nbrs (indices into the targets when the
     * job has them, else into the points) */
    highlight(p, nbrs) {
      while (hl.firstChild) hl.firstChild.remove();
      if (!pts || p < 0 || p >= pts.n) return;
      const to = tgt || pts;
      const ok = nbrs.filter((i) => i >= 0 && i < to.n);
      hl.appendChild(svgEl('path', {class: 'map-nb-lines', d: ok.map((i) =>
        segment(pts.lat[p], pts.lon[p], to.lat[i], to.lon[i])).join('')}));
      hl.appendChild(svgEl('path', {class: 'map-nb', d: dots(to.lat, to.lon, ok)}));
      hl.appendChild(svgEl('path', {class: 'map-sel', d: dots(pts.lat, pts.lon, [p])}));
      hl.dataset.point = String(p);
      hl.dataset.neighbours = ok.join(',');
    },
    setPairs(ii, jj) {
      const to = tgt || pts;
      let d = '';
      let n = 0;
      for (let k = 0; k < ii.length; k += 1) {
        const a = ii[k];
        const b = jj[k];
        if (a < 0 || a >= pts.n || b < 0 || b >= to.n) continue;
        d += segment(pts.lat[a], pts.lon[a], to.lat[b], to.lon[b]);
        n += 1;
      }
      pairs.setAttribute('d', d);
      pairs.dataset.pairs = String(n);
    },
  };
}
