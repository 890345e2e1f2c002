/* api.js — the dashboard's only way to the service: the public /v1 API.
 *
 * Every call goes through request(), which adds the bearer token when one is
 * saved (localStorage "tessel.token"), parses the JSON answer and turns every
 * non-2xx answer into an ApiError that carries the API's own error object
 * ({code, message, field, position}) plus the HTTP status and X-Request-Id,
 * so views can show errors exactly as the API gives them. Network failures
 * become an ApiError with code "network". Listeners registered with
 * onConnection() hear whether the last request reached the service, and
 * onAuthNeeded() hears 401s (the header shows the token dialog then).
 */

const TOKEN_KEY = 'tessel.token';

export class ApiError extends Error {
  constructor(status, body, requestId) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
    this.code = err.code || (status === 0 ? 'network' : 'http_' + status);
    this.field = err.field ?? null;
    this.position = err.position ?? null;
    this.requestId = requestId || null;
    this.retryAfter = null;
  }
}

export function getToken() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

export function setToken(t) {
  try {
    if (t) localStorage.setItem(TOKEN_KEY, t); else localStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lasts for this page only */ }
}

const connListeners = new Set();
const authListeners = new Set();
let lastOnline = null;

export function onConnection(fn) { connListeners.add(fn); return () => connListeners.delete(fn); }
export function onAuthNeeded(fn) { authListeners.add(fn); return () => authListeners.delete(fn); }

function setOnline(v) {
  if (v === lastOnline) return;
  lastOnline = v;
  for (const fn of connListeners) fn(v);
}

function authHeaders(extra) {
  const h = new Headers(extra || {});
  const t = getToken();
  if (t) h.set('Authorization', 'Bearer ' + t);
  return h;
}

/* request(method, path, {body, headers, raw, signal}) -> parsed JSON, or the
 * Response itself when raw is true. body: an object (sent as JSON) or a
 * Blob/File (sent as is, with the headers given). */
export async function request(method, path, opts = {}) {
  const headers = authHeaders(opts.headers);
  let body;
  if (opts.body !== undefined) {
    if (opts.body instanceof Blob) {
      body = opts.body;
    } else {
      body = JSON.stringify(opts.body);
      headers.set('Content-Type', 'application/json');
    }
  }
  if (!opts.raw) headers.set('Accept', 'application/json');
  let res;
  try {
    res = await fetch(path, {method, headers, body, signal: opts.signal, cache: 'no-store'});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    setOnline(false);
    const err = new ApiError(0, {error: {code: 'network', message: 'cannot reach the service: ' + e.message}});
    throw err;
  }
  setOnline(true);
  const rid = res.headers.get('X-Request-Id');
  if (!res.ok) {
    let parsed = null;
    const text = await res.text();
    try { parsed = JSON.parse(text); } catch { parsed = {error: {message: text.trim() || res.statusText}}; }
    const err = new ApiError(res.status, parsed, rid);
    err.retryAfter = res.headers.get('Retry-After');
    if (res.status === 401) for (const fn of authListeners) fn(err);
    throw err;
  }
  if (opts.raw) return res;
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

export const api = {
  get: (path, opts) => request('GET', path, opts),
  post: (path, body, opts = {}) => request('POST', path, {...opts, body}),
  del: (path, opts) => request('DELETE', path, opts),
};

/* Query string from an object, leaving out empty values. */
export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') u.set(k, String(v));
  }
  const s = u.toString();
  return s ? '?' + s : '';
}

export const jobsApi = {
  list: (filter, opts) => api.get('/v1/jobs' + qs(filter), opts),
  get: (id, opts) => api.get('/v1/jobs/' + encodeURIComponent(id), opts),
  submit: (body) => api.post('/v1/jobs', body),
  cancel: (id) => api.post('/v1/jobs/' + encodeURIComponent(id) + '/cancel', undefined),
  remove: (id) => api.del('/v1/jobs/' + encodeURIComponent(id)),
  resultUrl: (id, params) => '/v1/jobs/' + encodeURIComponent(id) + '/result' + qs(params || {}),
  /* part `name` of a result of several arrays (GET /v1/jobs/{id}/result/{name}) */
  partUrl: (id, name, params) => '/v1/jobs/' + encodeURIComponent(id) + '/result/' + encodeURIComponent(name) +
    qs(params || {}),
};

/* The bytes of an answer (a .npy), as an ArrayBuffer. */
export async function getBytes(path, opts = {}) {
  const res = await request('GET', path, {...opts, raw: true});
  return res.arrayBuffer();
}

/* Walk the pages of GET /v1/jobs (newest first) until `max` jobs or the end. */
export async function listAllJobs(filter, max, signal) {
  const out = [];
  let cursor = null;
  while (out.length < max) {
    const page = await jobsApi.list({...filter, limit: Math.min(200, max - out.length), cursor}, {signal});
    out.push(...(page.jobs || []));
    cursor = page.next_cursor;
    if (!cursor || !(page.jobs || []).length) break;
  }
  return out;
}

/* Save a response as a file: a plain link when no token is needed, else a
 * fetch with the Authorization header and a blob URL. */
export async function download(path, filename) {
  const res = await request('GET', path, {raw: true});
  const blob = await res.blob();
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
