/* stats.c — answered requests counted by route, method and status code,
 * with a histogram of their durations (header in to answer sent), for
 * /metrics (api/metrics.c formats them).
 *
 * A request is observed once, when libmicrohttpd completes it
 * (http_on_completed): its route is the registered pattern it matched
 * ("/v1/jobs/{id}", never the raw path, so the label set stays bounded by
 * the route table), "static" for a dashboard file lookup (any path no route
 * knows: 200 or 404), or "unrouted" for a request refused before routing
 * (a bad path, a foreign Host, 503 while quiescing, 405). The method is one
 * of the standard ones or "OTHER". Codes are the real ones (200, 404, ...).
 * So the series are at most (routes + 2) x 8 methods x the codes the
 * server answers; past HTTP_STATS_MAX series the rest are counted in one
 * overflow series (route "other"), never dropped.
 *
 * Threads: observed from any MHD worker under stats_mu (a short scan of a
 * small table); snapshots copy the table under the same lock.
 */
#include <stdlib.h>
#include <string.h>

#include "server/http_int.h"
#include "util/vec.h"

const double http_stats_bounds_s[HTTP_STATS_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25,   0.5,   1,      2.5,   5,     10,   30,    60};

static const char *const methods[] = {"GET",  "HEAD",    "POST",  "PUT",
                                      "DELETE", "PATCH", "OPTIONS", NULL};

static const char *method_label(const char *m) {
  for (int i = 0; m && methods[i]; i++)
    if (strcmp(m, methods[i]) == 0) return methods[i];
  return "OTHER";
}

void http_stats_observe(http_server *s, const http_req *r, int status,
                        double seconds) {
  if (status < 100 || status > 599) return; /* never answered */
  const char *route;
  if (r->match.route) route = r->match.route->pattern;
  else if (r->routed) route = "static";
  else route = "unrouted";
  const char *method = method_label(r->method);
  pthread_mutex_lock(&s->stats_mu);
  http_stat *st = NULL;
  for (size_t i = 0; i < s->nstats && !st; i++) {
    http_stat *x = &s->stats[i];
    /* route and method point at static or route-table strings: compared by
     * address first, by text for the route (the same pattern registered
     * for two methods is two strings). */
    if (x->code == status && x->method == method && strcmp(x->route, route) == 0)
      st = x;
  }
  if (!st) {
    if (s->nstats >= HTTP_STATS_MAX) {
      st = &s->stats_overflow;
      st->route = "other";
      st->method = "OTHER";
      st->code = 0;
    } else if (tvec_grow(&s->stats, &s->capstats, sizeof *s->stats,
                         s->nstats + 1, HTTP_STATS_MAX) == 0) {
      st = &s->stats[s->nstats++];
      memset(st, 0, sizeof *st);
      st->route = route;
      st->method = method;
      st->code = status;
    } else {
      st = &s->stats_overflow; /* no memory: counted, not lost */
      st->route = "other";
      st->method = "OTHER";
    }
  }
  for (int b = 0; b < HTTP_STATS_BUCKETS; b++)
    if (seconds <= http_stats_bounds_s[b]) {
      st->counts[b]++;
      break;
    }
  st->sum_s += seconds;
  st->count++;
  pthread_mutex_unlock(&s->stats_mu);
}

int http_stats_snapshot(http_server *s, http_stat **out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (!s) return T_OK;
  pthread_mutex_lock(&s->stats_mu);
  size_t total = s->nstats + (s->stats_overflow.count ? 1 : 0);
  http_stat *v = total ? malloc(total * sizeof *v) : NULL;
  if (total && !v) {
    pthread_mutex_unlock(&s->stats_mu);
    return T_ENOMEM;
  }
  if (s->nstats) memcpy(v, s->stats, s->nstats * sizeof *v);
  if (s->stats_overflow.count) v[s->nstats] = s->stats_overflow;
  pthread_mutex_unlock(&s->stats_mu);
  /* Cumulative buckets, as Prometheus counts them. */
  for (size_t i = 0; i < total; i++)
    for (int b = 1; b < HTTP_STATS_BUCKETS; b++) v[i].counts[b] += v[i].counts[b - 1];
  *out = v;
  *n = total;
  return T_OK;
}
