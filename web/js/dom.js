/* dom.js — small helpers every view shares: building elements, formatting
 * numbers, times and sizes, status badges, the error box that shows an API
 * error as the API gave it, screen-reader announcements and a poller.
 *
 * h(tag, attrs, ...children) builds an element: attrs keys starting with
 * "on" become listeners, `class`, `text`, `html`, `style` are shortcuts, false/null
 * values are skipped; children may be strings, nodes, arrays or null.
 * Text is always set as text (never parsed as HTML) unless `html` is used,
 * and no view passes API data through `html`.
 *
 * errorBox() shows the API's error as given and, for byte counts in its
 * message (413's "about 38400000000 bytes"), a line in binary units
 * (35.8 GiB) above it. tableWrap() is the one scroll container for wide
 * tables: focusable and labelled, so a keyboard can scroll it (axe's
 * scrollable-region-focusable), and the page itself never scrolls sideways.
 * It is a named group, not a region: a region is a landmark, and a table
 * inside a card named as the table ("Nodes" in "Nodes") made two landmarks
 * of one name (axe's landmark-unique); the card is the landmark.
 */

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === false || v === null || v === undefined) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'html') el.innerHTML = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      // Through the CSSOM, which the Content-Security-Policy allows (a
      // style attribute would need style-src 'unsafe-inline').
      else if (k === 'style') el.style.cssText = v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'value') el.value = v;
      else if (k === 'checked' || k === 'disabled' || k === 'selected' || k === 'hidden') el[k] = !!v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el) { while (el.firstChild) el.firstChild.remove(); return el; }

let uid = 0;
export function nextId(prefix) { uid += 1; return `${prefix}-${uid}`; }

/* ---- formatting ---------------------------------------------------------- */
const nf = new Intl.NumberFormat('en');

export function fmtInt(n) { return n === null || n === undefined ? '—' : nf.format(n); }

export function fmtNum(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return '—';
  if (typeof x !== 'number') return String(x);
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e9 || a < 1e-4) return x.toExponential(digits - 1);
  return Number(x.toPrecision(digits + 2)).toLocaleString('en', {maximumFractionDigits: 6});
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  if (ms < 1) return ms.toFixed(3) + ' ms';
  if (ms < 10) return ms.toFixed(2) + ' ms';
  if (ms < 1000) return ms.toFixed(1) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  const m = Math.floor(ms / 60000);
  return `${m} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function fmtBytes(b) {
  if (b === null || b === undefined) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let x = b;
  while (x >= 1024 && i < u.length - 1) { x /= 1024; i += 1; }
  return (i === 0 ? x : x.toFixed(x < 10 ? 2 : 1)) + ' ' + u[i];
}

export function fmtSize(n) {
  if (n === null || n === undefined) return '—';
  if (n >= 1e9 && n % 1e8 === 0) return (n / 1e9) + ' G';
  if (n >= 1e6 && n % 1e5 === 0) return (n / 1e6) + ' M';
  if (n >= 1e4 && n % 1e3 === 0) return (n / 1e3) + ' k';
  return nf.format(n);
}

export function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString('en-GB', {hour12: false, year: 'numeric', month: 'short', day: '2-digit',
    hour: '2-digit', minute: '2-digit', second: '2-digit'});
}

export function fmtAgo(iso, now = Date.now()) {
  if (!iso) return '—';
  const s = Math.round((now - new Date(iso).getTime()) / 1000);
  if (!Number.isFinite(s)) return '—';
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

export function fmtShape(shape) {
  if (!Array.isArray(shape)) return '—';
  return shape.length === 0 ? 'scalar' : shape.map((d) => nf.format(d)).join(' × ');
}

/* ---- status ------------------------------------------------------------- */
export const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'canceled'];
export const KINDS = ['map', 'reduce', 'matmul', 'geodesic'];
export const BACKENDS = ['auto', 'serial', 'cpu', 'cuda', 'compare'];

export function isActive(job) { return job.status === 'queued' || job.status === 'running'; }

export function statusBadge(status) {
  return h('span', {class: `badge st-${status}`, dataset: {status}}, status);
}

/* What is left of a running job, from its progress: elapsed × (1 − f) / f,
 * once a few per cent are done (earlier guesses swing too much); null when
 * it cannot be said. */
export function etaMs(job, now = Date.now()) {
  if (job.status !== 'running') return null;
  const p = job.progress || {};
  if (!p.total || !(p.done > 0)) return null;
  const f = Math.min(1, p.done / p.total);
  if (f < 0.03 || f >= 1) return null;
  const t0 = new Date(job.started_at || job.created_at).getTime();
  if (!Number.isFinite(t0)) return null;
  const elapsed = Math.max(0, now - t0);
  return (elapsed * (1 - f)) / f;
}

/* A wide table in its own horizontal scroller. */
export function tableWrap(label, table, attrs = {}) {
  return h('div', {class: 'table-wrap', role: 'group', 'aria-label': label, tabindex: '0', ...attrs}, table);
}

/* "38400000000 bytes" -> "35.8 GiB" (binary units, as fmtBytes). */
export function humanBytesText(msg) {
  const re = /(\d{4,}) bytes|(the limit is )(\d{7,})/g;
  if (!re.test(String(msg))) return null;
  return String(msg).replace(re, (m, a, pre, b) => (a ? fmtBytes(Number(a)) : pre + fmtBytes(Number(b))));
}

/* The backend family of a used backend name ("cuda:0" -> "cuda"). */
export function backendFamily(name) {
  if (!name) return '';
  return String(name).split(':')[0];
}

/* A cuda run's backend.devices as words, for its detail page: null when
 * there are none; "GPU 2" for a run on one; over several GPUs each with
 * the rows and blocks it wrote, and whether it failed or was taken back
 * ("GPU 0: 600 rows in 6 blocks; GPU 1: 0 rows, failed"). */
export function devicesText(devices) {
  if (!Array.isArray(devices) || !devices.length) return null;
  return devices.map((d) => {
    let s = `GPU ${d.device}`;
    if (d.rows != null) {
      s += `: ${Number(d.rows).toLocaleString('en-US')} row${d.rows === 1 ? '' : 's'}`;
      if (d.blocks) s += ` in ${d.blocks} block${d.blocks === 1 ? '' : 's'}`;
    }
    if (d.failed) s += ', failed';
    if (d.taken_back) s += ', taken back';
    return s;
  }).join('; ');
}

export function backendText(job) {
  const b = job.backend || {};
  if (!b.used || b.used === b.requested) return b.requested || '—';
  return `${b.requested} → ${b.used}`;
}

/* ---- errors --------------------------------------------------------------- */
/* The API's error, shown as given: code, HTTP status, message, field and
 * position, the request id; with `source` (the text the position points
 * into) a caret marks the position. */
export function errorBox(err, source) {
  const box = h('div', {class: 'error-box', role: 'alert'});
  const head = h('div', {class: 'error-head'},
    h('strong', {class: 'error-code'}, err.code || 'error'),
    err.status ? h('span', {class: 'muted'}, ` HTTP ${err.status}`) : null);
  const human = err.code === 'payload_too_large' || err.status === 413 ? humanBytesText(err.message) : null;
  if (human) box.append(head, h('p', {class: 'error-human', dataset: {human: '1'}}, human),
    h('p', {class: 'error-message muted'}, err.message));
  else box.append(head, h('p', {class: 'error-message'}, err.message || String(err)));
  const meta = [];
  if (err.field) meta.push(h('span', null, 'field ', h('code', null, err.field)));
  if (err.position !== null && err.position !== undefined) meta.push(h('span', null, 'position ', h('code', null, String(err.position))));
  if (err.retryAfter) meta.push(h('span', null, `retry after ${err.retryAfter} s`));
  if (err.requestId) meta.push(h('span', null, 'request ', h('code', null, err.requestId)));
  if (meta.length) box.append(h('p', {class: 'error-meta muted'}, meta.flatMap((m, i) => (i ? [' · ', m] : [m]))));
  if (typeof source === 'string' && Number.isInteger(err.position) && err.position >= 0 && err.position <= source.length) {
    box.append(h('pre', {class: 'caret', 'aria-label': `position ${err.position} in the expression`},
      source + '\n' + ' '.repeat(err.position) + '^'));
  }
  return box;
}

/* ---- announcements ------------------------------------------------------ */
export function announce(text) {
  const el = document.getElementById('announcer');
  if (!el) return;
  el.textContent = '';
  setTimeout(() => { el.textContent = text; }, 30);
}

/* ---- polling ------------------------------------------------------------ */
/* Run fn now and then every `ms` after each run ends (never two at once);
 * `ms` may be a function, asked after each run (a view polls faster while a
 * cancel is under way). Returns stop(). A hidden tab polls every 5 s
 * instead, and after an error every 3 s at most. Errors go to onError. */
export function poll(fn, ms, onError) {
  let timer = null;
  let stopped = false;
  const ctl = new AbortController();
  async function tick() {
    if (stopped) return;
    let failed = false;
    try { await fn(ctl.signal); } catch (e) {
      failed = e.name !== 'AbortError';
      if (failed && onError) onError(e);
    }
    /* after an error (offline, 401) ask again less often */
    const every = typeof ms === 'function' ? ms() : ms;
    const wait = document.hidden ? Math.max(every, 5000) : failed ? Math.max(every, 3000) : every;
    if (!stopped) timer = setTimeout(tick, wait);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); ctl.abort(); };
}

export function card(title, ...children) {
  const id = nextId('card');
  return h('section', {class: 'card', 'aria-labelledby': id},
    h('h2', {id, class: 'card-title'}, title), ...children);
}

export function field(labelText, control, hint) {
  if (!control.id) control.id = nextId('f');
  const hintId = hint ? control.id + '-hint' : null;
  if (hintId) control.setAttribute('aria-describedby', hintId);
  return h('div', {class: 'field'},
    h('label', {for: control.id}, labelText), control,
    hint ? h('small', {id: hintId, class: 'hint'}, hint) : null);
}

export function select(options, value, attrs = {}) {
  return h('select', attrs, options.map((o) => {
    const [v, t] = Array.isArray(o) ? o : [o, o];
    return h('option', {value: v, selected: v === value}, t);
  }));
}
