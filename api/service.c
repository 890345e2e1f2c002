/* service.c — the service's own resources: /v1/devices, /v1/stats,
 * /v1/stats/history,
 * /healthz, /readyz, /openapi.json, and the route of /metrics (written by
 * api/metrics.c).
 *
 * /healthz and /readyz and /openapi.json need no token (probes and tools
 * must reach them); the /v1 routes and /metrics follow the server auth.
 * Threads: MHD worker threads; everything read here is either the store
 * (read connections), the scheduler's counters (its lock), the load
 * sampler's ring (its lock; compute/sched/stats/sampler.c) or constant.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "util/buf.h"
#include "util/util.h"

extern const char tessel_openapi_json[];
extern const size_t tessel_openapi_json_len;

/* The CPU model, read from /proc/cpuinfo once (it cannot change while the
 * process runs; the dashboard polls /v1/devices). */
static char cpu_model[256] = "unknown";
static pthread_once_t cpu_model_once = PTHREAD_ONCE_INIT;

static void cpu_model_read(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *colon = strchr(line, ':');
      if (colon) {
        snprintf(cpu_model, sizeof cpu_model, "%s", colon + 2);
        cpu_model[strcspn(cpu_model, "\n")] = 0;
      }
      break;
    }
  }
  fclose(f);
}

static json_t *cpu_json(void) {
  pthread_once(&cpu_model_once, cpu_model_read);
  return json_pack("{s:s, s:I}", "model", cpu_model, "threads",
                   (json_int_t)sysconf(_SC_NPROCESSORS_ONLN));
}

static void handle_devices(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  sched_stats ss;
  jobs_sched_stats(ctx->jobs, &ss);
  json_t *cpu = cpu_json();
  json_object_set_new(cpu, "workers", json_integer(ss.workers));
  json_t *cuda = jobs_devices_json();
  http_reply_json(r, 200, json_pack("{s:o, s:o}", "cpu", cpu, "cuda", cuda));
}

/* The store's groups as /v1/stats' by_kind. New reference. */
static json_t *groups_json(const jobs_stats *js) {
  json_t *out = json_array();
  for (int i = 0; i < js->ngroups; i++) {
    const store_stat *g = &js->groups[i];
    int ok = g->status == JOB_SUCCEEDED;
    json_array_append_new(
        out,
        json_pack("{s:s, s:o, s:s, s:I, s:o, s:o, s:o}", "kind", g->kind,
                  "backend", g->backend ? json_string(g->backend) : json_null(),
                  "status", job_status_name(g->status), "count",
                  (json_int_t)g->count, "p50_ms",
                  isnan(g->p50_ms) ? json_null() : json_real(g->p50_ms),
                  "p95_ms",
                  isnan(g->p95_ms) ? json_null() : json_real(g->p95_ms),
                  "result_bytes",
                  ok ? json_integer(g->result_bytes) : json_null()));
  }
  return out;
}

/* A percentage or null (NaN: not measured yet). */
static json_t *pct_json(double v) { return isnan(v) ? json_null() : json_real(v); }
/* Bytes or null (-1: unreadable). */
static json_t *bytes_json(int64_t v) { return v < 0 ? json_null() : json_integer(v); }

/* /v1/stats' `system`: the load now (compute/sched/stats/sampler.c). New reference. */
static json_t *system_json(api_ctx *ctx) {
  sched_sample x;
  jobs_sample_now(ctx->jobs, &x); /* no sampler: percentages NaN (null) */
  return json_pack("{s:o, s:o, s:o, s:o, s:o}", "cpu_percent", pct_json(x.cpu_percent),
                   "machine_cpu_percent", pct_json(x.machine_cpu_percent),
                   "memory_used", bytes_json(x.memory_used), "memory_total",
                   bytes_json(x.memory_total), "process_rss", bytes_json(x.process_rss));
}

static void handle_stats(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  jobs_stats js;
  if (jobs_stats_get(ctx->jobs, http_owner(r), &js, &e)) {
    http_reply_error(r, &e);
    return;
  }
  json_t *bk = groups_json(&js);
  const sched_stats ss = js.sched;
  json_t *status = json_object();
  for (int s = JOB_QUEUED; s <= JOB_CANCELED; s++)
    json_object_set_new(status, job_status_name((job_status)s),
                        json_integer(js.by_status[s]));
  jobs_stats_clear(&js);
  double uptime = (double)(t_wall_ms() - ctx->started_wall_ms) / 1000.0;
  int64_t finished = 0;
  for (int s = JOB_SUCCEEDED; s <= JOB_CANCELED; s++) finished += ss.finished_total[s];
  http_reply_json(
      r, 200,
      json_pack("{s:o, s:{s:i, s:i, s:i, s:i, s:b}, s:o, s:f, s:I, s:f, s:o}",
                "by_kind", bk ? bk : json_array(), "queue", "queued",
                ss.queued, "running", ss.running, "workers", ss.workers,
                "gpu_workers", ss.gpu_workers, "accepting", ss.accepting,
                "jobs_by_status", status, "uptime_s", uptime,
                "finished_since_start", (json_int_t)finished,
                "throughput_jobs_per_s", uptime > 0 ? (double)finished / uptime : 0.0,
                "system", system_json(ctx)));
}

/* GET /v1/stats/history's bounds: at most this many steps in one answer. */
#define HISTORY_MAX_STEPS 1000
#define HISTORY_DEFAULT_SPAN_S 3600
#define HISTORY_DEFAULT_STEP_S 60

/* ?step: whole seconds, 1 .. a year. 0, or -1. */
static int parse_step(const char *v, int64_t *step_s) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno || x < 1 || x > 366LL * 86400) return -1;
  *step_s = x;
  return 0;
}

static json_t *sample_json(const sched_sample *x) {
  return json_pack("{s:f, s:o, s:o, s:o, s:o, s:i, s:i}", "t",
                   (double)x->t_wall_ms / 1e3, "cpu_percent", pct_json(x->cpu_percent),
                   "machine_cpu_percent", pct_json(x->machine_cpu_percent),
                   "memory_used", bytes_json(x->memory_used), "memory_total",
                   bytes_json(x->memory_total), "queued", x->queued, "running",
                   x->running);
}

/* GET /v1/stats/history?since=&step=: jobs finished per step by status
 * (the store, the caller's own jobs with tokens) and the load samples the
 * sampler kept since `since` (compute/sched/stats/sampler.c: every 5 s, 2 hours). */
static void handle_history(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  int64_t now = t_wall_ms();
  int64_t since = now - (int64_t)HISTORY_DEFAULT_SPAN_S * 1000;
  int64_t step_s = HISTORY_DEFAULT_STEP_S;
  const char *v = http_query(r, "since");
  if (v && t_parse_time(v, &since) != 0) {
    api_reply_terr(r, T_EINVAL, "since",
                   "not Unix seconds nor an RFC 3339 time with a zone");
    return;
  }
  if (since > now) {
    api_reply_terr(r, T_EINVAL, "since", "in the future");
    return;
  }
  v = http_query(r, "step");
  if (v && parse_step(v, &step_s) != 0) {
    api_reply_terr(r, T_EINVAL, "step", "whole seconds, 1 to 31622400");
    return;
  }
  int64_t step_ms = step_s * 1000;
  int64_t nsteps = (now - since + step_ms - 1) / step_ms;
  if (nsteps < 1) nsteps = 1;
  if (nsteps > HISTORY_MAX_STEPS) {
    api_reply_terr(r, T_EINVAL, "step",
                   "%lld steps of %llds since then: at most %d (a larger step or a later since)",
                   (long long)nsteps, (long long)step_s, HISTORY_MAX_STEPS);
    return;
  }
  int64_t *counts = malloc((size_t)nsteps * 5 * sizeof *counts);
  sched_sample *smp = malloc(SCHED_SAMPLES * sizeof *smp);
  terr e;
  if (!counts || !smp) {
    free(counts);
    free(smp);
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  if (jobs_finished_by_step(ctx->jobs, http_owner(r), since, step_ms, (int)nsteps,
                            counts, &e)) {
    free(counts);
    free(smp);
    http_reply_error(r, &e);
    return;
  }
  json_t *steps = json_array();
  for (int64_t i = 0; i < nsteps; i++) {
    const int64_t *c = counts + i * 5;
    json_array_append_new(
        steps, json_pack("{s:f, s:I, s:I, s:I}", "t",
                         (double)(since + i * step_ms) / 1e3, "succeeded",
                         (json_int_t)c[JOB_SUCCEEDED], "failed",
                         (json_int_t)c[JOB_FAILED], "canceled",
                         (json_int_t)c[JOB_CANCELED]));
  }
  int n = jobs_samples(ctx->jobs, since, smp, SCHED_SAMPLES);
  json_t *samples = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(samples, sample_json(&smp[i]));
  free(counts);
  free(smp);
  http_reply_json(r, 200,
                  json_pack("{s:f, s:f, s:I, s:o, s:i, s:o}", "since",
                            (double)since / 1e3, "until", (double)now / 1e3,
                            "step_s", (json_int_t)step_s, "steps", steps,
                            "sample_every_s", SCHED_SAMPLE_EVERY_MS / 1000,
                            "samples", samples));
}

static void handle_healthz(http_req *r, void *ud) {
  http_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
}

static void handle_readyz(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  sched_stats ss;
  jobs_sched_stats(ctx->jobs, &ss);
  int store_ok = jobs_store_ready(ctx->jobs);
  int ready = store_ok && ss.accepting && ss.workers > 0;
  json_t *body = json_pack("{s:s, s:b, s:b, s:i}", "status",
                           ready ? "ready" : "not_ready", "store", store_ok,
                           "accepting", ss.accepting, "workers", ss.workers);
  http_reply_json(r, ready ? 200 : 503, body);
}

static void handle_openapi(http_req *r, void *ud) {
  char *copy = malloc(tessel_openapi_json_len);
  if (!copy) {
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  memcpy(copy, tessel_openapi_json, tessel_openapi_json_len);
  http_reply_buffer(r, 200, "application/json; charset=utf-8", copy,
                    tessel_openapi_json_len);
}

int api_service_register(http_server *srv, api_ctx *ctx, terr *e) {
  int rc = 0;
  rc |= http_route(srv, "GET", "/v1/devices", handle_devices, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/stats", handle_stats, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/stats/history", handle_history, ctx, HTTP_AUTH);
  static const char *const history[] = {"since", "step", NULL};
  rc |= http_route_query(srv, "GET", "/v1/stats/history", history);
  rc |= http_route(srv, "GET", "/healthz", handle_healthz, ctx, 0);
  rc |= http_route(srv, "GET", "/readyz", handle_readyz, ctx, 0);
  rc |= http_route(srv, "GET", "/metrics", api_handle_metrics, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/openapi.json", handle_openapi, ctx, 0);
  if (rc) return terr_set(e, T_EINTERNAL, "", -1, "cannot register service routes");
  return T_OK;
}
