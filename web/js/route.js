/* route.js — reading and rewriting the location hash ("#/jobs?status=running").
 *
 * parseHash splits the hash into a path and a query object. replaceQuery
 * rewrites the query of the current page with history.replaceState, which
 * fires no hashchange: a view that keeps its filters in the address (so a
 * reload or a shared link shows the same table) is not mounted again.
 */
export function parseHash(hash) {
  const raw = (hash || '').replace(/^#/, '') || '/';
  const i = raw.indexOf('?');
  const path = i < 0 ? raw : raw.slice(0, i);
  const q = i < 0 ? '' : raw.slice(i + 1);
  return {path, query: Object.fromEntries(new URLSearchParams(q))};
}

export function replaceQuery(query) {
  const {path} = parseHash(location.hash);
  const s = new URLSearchParams(Object.entries(query)
    .filter(([, v]) => v !== '' && v !== null && v !== undefined)).toString();
  history.replaceState(null, '', '#' + path + (s ? '?' + s : ''));
}
