/* service.c — the service's own resources: /v1/devices, /v1/stats,
 * /healthz, /readyz, /metrics (Prometheus text) and /openapi.json.
 *
 * /healthz and /readyz and /openapi.json need no token (probes and tools
 * must reach them); the /v1 routes and /metrics follow the server auth.
 * Threads: MHD worker threads; everything read here is either the store
 * (read connections), the scheduler's counters (its lock) or constant.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_int.h"
#include "gpu/gpu.h"
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
  http_reply_json(r, 200, json_pack("{s:o, s:o}", "cpu", cpu, "cuda",
                                    gpu_devices_json()));
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
      json_pack("{s:o, s:{s:i, s:i, s:i, s:i, s:b}, s:o, s:f, s:I, s:f}",
                "by_kind", bk ? bk : json_array(), "queue", "queued",
                ss.queued, "running", ss.running, "workers", ss.workers,
                "gpu_workers", ss.gpu_workers, "accepting", ss.accepting,
                "jobs_by_status", status, "uptime_s", uptime,
                "finished_since_start", (json_int_t)finished,
                "throughput_jobs_per_s", uptime > 0 ? (double)finished / uptime : 0.0));
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

/* ---- /metrics ---------------------------------------------------------- */

static void handle_metrics(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  tbuf b;
  tbuf_init(&b, 0);
  jobs_stats js;
  if (jobs_stats_get(ctx->jobs, http_owner(r), &js, &e)) {
    http_reply_error(r, &e);
    return;
  }
  tbuf_addf(&b, "# HELP tessel_jobs Jobs in the store by kind, backend used and status.\n"
                "# TYPE tessel_jobs gauge\n");
  for (int i = 0; i < js.ngroups; i++) {
    const store_stat *g = &js.groups[i];
    tbuf_addf(&b, "tessel_jobs{kind=\"%s\",backend=\"%s\",status=\"%s\"} %lld\n",
              g->kind, g->backend ? g->backend : "none",
              job_status_name(g->status), (long long)g->count);
  }
  const sched_stats ss = js.sched;
  jobs_stats_clear(&js);
  tbuf_addf(&b, "# HELP tessel_queue_depth Jobs waiting to run.\n"
                "# TYPE tessel_queue_depth gauge\ntessel_queue_depth %d\n"
                "# HELP tessel_running_jobs Jobs running now.\n"
                "# TYPE tessel_running_jobs gauge\ntessel_running_jobs %d\n"
                "# HELP tessel_workers CPU and GPU workers.\n"
                "# TYPE tessel_workers gauge\n"
                "tessel_workers{type=\"cpu\"} %d\ntessel_workers{type=\"gpu\"} %d\n",
            ss.queued, ss.running, ss.workers, ss.gpu_workers);
  tbuf_addf(&b, "# HELP tessel_jobs_finished_total Jobs finished since start.\n"
                "# TYPE tessel_jobs_finished_total counter\n");
  for (int s = JOB_SUCCEEDED; s <= JOB_CANCELED; s++)
    tbuf_addf(&b, "tessel_jobs_finished_total{status=\"%s\"} %lld\n",
              job_status_name((job_status)s), (long long)ss.finished_total[s]);

  tbuf_addf(&b, "# HELP tessel_job_duration_ms Job run time (start to end).\n"
                "# TYPE tessel_job_duration_ms histogram\n");
  for (int k = 0; k < K__COUNT; k++) {
    for (int bk = B_SERIAL; bk <= B_COMPARE; bk++) {
      int64_t counts[SCHED_HIST_BUCKETS], count = 0;
      double sum = 0;
      jobs_histogram(ctx->jobs, (tkind)k, (tbackend)bk, counts, &sum, &count);
      const char *kn = tkind_name((tkind)k), *bn = tbackend_name((tbackend)bk);
      if (count == 0) continue;
      for (int h = 0; h < SCHED_HIST_BUCKETS; h++)
        tbuf_addf(&b, "tessel_job_duration_ms_bucket{kind=\"%s\",backend=\"%s\",le=\"%g\"} %lld\n",
                  kn, bn, sched_hist_bounds_ms[h], (long long)counts[h]);
      tbuf_addf(&b, "tessel_job_duration_ms_bucket{kind=\"%s\",backend=\"%s\",le=\"+Inf\"} %lld\n"
                    "tessel_job_duration_ms_sum{kind=\"%s\",backend=\"%s\"} %.3f\n"
                    "tessel_job_duration_ms_count{kind=\"%s\",backend=\"%s\"} %lld\n",
                kn, bn, (long long)count, kn, bn, sum, kn, bn, (long long)count);
    }
  }
  int64_t by_status[6] = {0};
  http_status_counts(ctx->srv, by_status);
  tbuf_addf(&b, "# HELP tessel_http_requests_total HTTP requests answered, by status class.\n"
                "# TYPE tessel_http_requests_total counter\n");
  static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
  for (int c = 0; c < 5; c++)
    tbuf_addf(&b, "tessel_http_requests_total{code=\"%s\"} %lld\n", classes[c],
              (long long)by_status[c + 1]);
  size_t len = 0;
  char *text = tbuf_take(&b, &len);
  if (!text) {
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  http_reply_buffer(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

int api_service_register(http_server *srv, api_ctx *ctx, terr *e) {
  int rc = 0;
  rc |= http_route(srv, "GET", "/v1/devices", handle_devices, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/v1/stats", handle_stats, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/healthz", handle_healthz, ctx, 0);
  rc |= http_route(srv, "GET", "/readyz", handle_readyz, ctx, 0);
  rc |= http_route(srv, "GET", "/metrics", handle_metrics, ctx, HTTP_AUTH);
  rc |= http_route(srv, "GET", "/openapi.json", handle_openapi, ctx, 0);
  if (rc) return terr_set(e, T_EINTERNAL, "", -1, "cannot register service routes");
  return T_OK;
}
