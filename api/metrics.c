/* metrics.c — GET /metrics: the Prometheus text exposition format 0.0.4,
 * checked by `promtool check metrics` in make test
 * (tests/integration/test_metrics.c, when promtool is installed).
 *
 * Series (API.md, "Metrics", lists them with their labels):
 *   tessel_build_info                      gauge 1 with version, build type,
 *                                          cuda, compiler
 *   tessel_jobs                            jobs in the store by kind,
 *                                          backend used, status
 *   tessel_queue_depth, tessel_running_jobs, tessel_workers{type}
 *   tessel_jobs_finished_total{status}     since start
 *   tessel_job_duration_seconds            histogram of run time (start to
 *                                          end) by kind, backend, status —
 *                                          canceled and failed jobs apart
 *                                          from the latency of succeeded ones
 *   tessel_http_requests_total             counter by route pattern,
 *   tessel_http_request_duration_seconds   method and code (server/stats.c)
 *   process_cpu_seconds_total, process_resident_memory_bytes,
 *   process_virtual_memory_bytes, process_open_fds, process_max_fds,
 *   process_start_time_seconds             the standard process metrics
 * Units are base units (seconds, bytes) as the naming conventions ask;
 * every family has HELP and TYPE; label values are escaped.
 *
 * Threads: MHD worker threads; reads the store, the scheduler's and the
 * HTTP server's counters (each under its own lock) and /proc/self.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "api/api_int.h"
#include "util/buf.h"
#include "util/util.h"

/* A label value with \, " and newline escaped (format 0.0.4). */
static const char *esc(const char *v, char *buf, size_t len) {
  size_t o = 0;
  for (const char *p = v ? v : ""; *p && o + 3 < len; p++) {
    if (*p == '\\' || *p == '"') {
      buf[o++] = '\\';
      buf[o++] = *p;
    } else if (*p == '\n') {
      buf[o++] = '\\';
      buf[o++] = 'n';
    } else {
      buf[o++] = *p;
    }
  }
  buf[o] = 0;
  return buf;
}

static void family(tbuf *b, const char *name, const char *type,
                   const char *help) {
  tbuf_addf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void process_metrics(tbuf *b, const api_ctx *ctx) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    family(b, "process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.");
    tbuf_addf(b, "process_cpu_seconds_total %.6f\n", cpu);
  }
  long page = sysconf(_SC_PAGESIZE);
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long vm = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%llu %llu", &vm, &rss) == 2 && page > 0) {
      family(b, "process_virtual_memory_bytes", "gauge",
             "Virtual memory size in bytes.");
      tbuf_addf(b, "process_virtual_memory_bytes %llu\n", vm * (unsigned long long)page);
      family(b, "process_resident_memory_bytes", "gauge",
             "Resident memory size in bytes.");
      tbuf_addf(b, "process_resident_memory_bytes %llu\n", rss * (unsigned long long)page);
    }
    fclose(f);
  }
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    long n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
      if (de->d_name[0] != '.') n++;
    closedir(d);
    family(b, "process_open_fds", "gauge", "Number of open file descriptors.");
    tbuf_addf(b, "process_open_fds %ld\n", n - 1); /* less the DIR's own */
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    family(b, "process_max_fds", "gauge",
           "Maximum number of open file descriptors.");
    tbuf_addf(b, "process_max_fds %llu\n", (unsigned long long)rl.rlim_cur);
  }
  family(b, "process_start_time_seconds", "gauge",
         "Start time of the process since unix epoch in seconds.");
  tbuf_addf(b, "process_start_time_seconds %.3f\n",
            (double)ctx->started_wall_ms / 1e3);
}

static void job_histograms(tbuf *b, api_ctx *ctx) {
  family(b, "tessel_job_duration_seconds", "histogram",
         "Job run time, start to end, by kind, backend used and final status.");
  static const job_status st[] = {JOB_SUCCEEDED, JOB_FAILED, JOB_CANCELED};
  /* the backends used (a family: cuda for cuda:N), and a split job's */
  static const char *const bks[] = {"serial", "cpu", "cuda", "compare",
                                    "split"};
  for (int k = 0; k < kind_count(); k++)
    for (size_t bk = 0; bk < sizeof bks / sizeof bks[0]; bk++)
      for (size_t si = 0; si < sizeof st / sizeof st[0]; si++) {
        int64_t counts[SCHED_HIST_BUCKETS], count = 0;
        double sum = 0;
        jobs_histogram(ctx->jobs, kind_at(k)->name, bks[bk], (int)st[si], counts,
                       &sum, &count);
        if (count == 0) continue;
        char lab[160];
        snprintf(lab, sizeof lab, "kind=\"%s\",backend=\"%s\",status=\"%s\"",
                 kind_at(k)->name, bks[bk], job_status_name(st[si]));
        for (int h = 0; h < SCHED_HIST_BUCKETS; h++)
          tbuf_addf(b, "tessel_job_duration_seconds_bucket{%s,le=\"%g\"} %lld\n",
                    lab, sched_hist_bounds_ms[h] / 1e3, (long long)counts[h]);
        tbuf_addf(b,
                  "tessel_job_duration_seconds_bucket{%s,le=\"+Inf\"} %lld\n"
                  "tessel_job_duration_seconds_sum{%s} %.6f\n"
                  "tessel_job_duration_seconds_count{%s} %lld\n",
                  lab, (long long)count, lab, sum / 1e3, lab, (long long)count);
      }
}

static int http_metrics(tbuf *b, api_ctx *ctx) {
  http_stat *v = NULL;
  size_t n = 0;
  if (http_stats_snapshot(ctx->srv, &v, &n) != T_OK) return T_ENOMEM;
  family(b, "tessel_http_requests_total", "counter",
         "HTTP requests answered, by route pattern, method and status code.");
  for (size_t i = 0; i < n; i++) {
    char r[256];
    tbuf_addf(b, "tessel_http_requests_total{route=\"%s\",method=\"%s\",code=\"%d\"} %lld\n",
              esc(v[i].route, r, sizeof r), v[i].method, v[i].code,
              (long long)v[i].count);
  }
  family(b, "tessel_http_request_duration_seconds", "histogram",
         "HTTP request duration, header received to answer sent, by route "
         "pattern, method and status code.");
  for (size_t i = 0; i < n; i++) {
    char r[256], lab[384];
    snprintf(lab, sizeof lab, "route=\"%s\",method=\"%s\",code=\"%d\"",
             esc(v[i].route, r, sizeof r), v[i].method, v[i].code);
    for (int h = 0; h < HTTP_STATS_BUCKETS; h++)
      tbuf_addf(b, "tessel_http_request_duration_seconds_bucket{%s,le=\"%g\"} %lld\n",
                lab, http_stats_bounds_s[h], (long long)v[i].counts[h]);
    tbuf_addf(b,
              "tessel_http_request_duration_seconds_bucket{%s,le=\"+Inf\"} %lld\n"
              "tessel_http_request_duration_seconds_sum{%s} %.6f\n"
              "tessel_http_request_duration_seconds_count{%s} %lld\n",
              lab, (long long)v[i].count, lab, v[i].sum_s, lab,
              (long long)v[i].count);
  }
  free(v);
  return T_OK;
}

void api_handle_metrics(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  terr e;
  tbuf b;
  tbuf_init(&b, 0);
  jobs_stats js;
  if (jobs_stats_get(ctx->jobs, http_owner(r), &js, &e)) {
    http_reply_error(r, &e);
    return;
  }
  char v1[64], v2[64];
  family(&b, "tessel_build_info", "gauge",
         "Always 1; the labels say which build of tesseld this is.");
  tbuf_addf(&b,
            "tessel_build_info{version=\"%s\",build_type=\"%s\",cuda=\"%s\","
            "compiler=\"%s\"} 1\n",
            esc(TESSEL_VERSION, v1, sizeof v1), TESSEL_BUILD_TYPE,
            TESSEL_HAVE_CUDA ? "true" : "false",
            esc(TESSEL_COMPILER, v2, sizeof v2));
  family(&b, "tessel_jobs", "gauge",
         "Jobs in the store by kind, backend used and status.");
  for (int i = 0; i < js.ngroups; i++) {
    const store_stat *g = &js.groups[i];
    char k[64], bk[64];
    tbuf_addf(&b, "tessel_jobs{kind=\"%s\",backend=\"%s\",status=\"%s\"} %lld\n",
              esc(g->kind, k, sizeof k), esc(g->backend ? g->backend : "none", bk, sizeof bk),
              job_status_name(g->status), (long long)g->count);
  }
  const sched_stats ss = js.sched;
  jobs_stats_clear(&js);
  family(&b, "tessel_queue_depth", "gauge", "Jobs waiting to run.");
  tbuf_addf(&b, "tessel_queue_depth %d\n", ss.queued);
  family(&b, "tessel_running_jobs", "gauge", "Jobs running now.");
  tbuf_addf(&b, "tessel_running_jobs %d\n", ss.running);
  family(&b, "tessel_workers", "gauge", "CPU and GPU workers.");
  tbuf_addf(&b, "tessel_workers{type=\"cpu\"} %d\ntessel_workers{type=\"gpu\"} %d\n",
            ss.workers, ss.gpu_workers);
  family(&b, "tessel_jobs_finished_total", "counter",
         "Jobs finished since start, by final status.");
  for (int s = JOB_SUCCEEDED; s <= JOB_CANCELED; s++)
    tbuf_addf(&b, "tessel_jobs_finished_total{status=\"%s\"} %lld\n",
              job_status_name((job_status)s), (long long)ss.finished_total[s]);
  job_histograms(&b, ctx);
  if (http_metrics(&b, ctx) != T_OK) {
    tbuf_free(&b);
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  process_metrics(&b, ctx);
  size_t len = 0;
  char *text = tbuf_take(&b, &len);
  if (!text) {
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  http_reply_buffer(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
