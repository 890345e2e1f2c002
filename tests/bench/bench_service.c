/* bench_service.c — the service's own overhead: tiny jobs per second over
 * HTTP, with submit-to-result latency, against two peers from the same run.
 *
 * It starts the real tesseld (the path given; --port 0, a temporary data
 * dir, --access-log 0) and drives it from one client thread through
 * libcurl's multi interface with C keep-alive connections, each carrying one
 * request at a time (a closed loop: a bounded load that stops by itself at
 * the time or count limit of each cell). Per concurrency C it measures:
 *   service — POST /v1/jobs?wait=5 with a tiny map job (x+1 over a 3-element
 *             inline array): each answer is the finished job (200,
 *             "succeeded"); latency is submit to result, measured by the
 *             client from handing the request to libcurl to the last byte;
 *   healthz — GET /healthz from the same client: the HTTP floor (libcurl,
 *             loopback, libmicrohttpd, our routing), no store, no job;
 *   store   — in this process, on a fresh store in the same kind of
 *             directory: the store calls the service makes per job (insert
 *             [sync], start [async], finish [sync] with the 3-value result
 *             in the row) from C threads: the floor of the durable
 *             bookkeeping alone, no HTTP, no scheduler.
 * The table shows the ratios service/healthz and service/store, the CPU
 * time per job of the daemon (from /proc/<pid>/stat) and of the client, and
 * the load average before and after (the machine is shared).
 *
 * Durability: at the end the daemon is killed with SIGKILL (no clean
 * shutdown to flush anything), the database is opened read-only with
 * SQLite, and every job id the client saw succeed must be there with status
 * 'succeeded'. The program exits 1 if one is not (or a request failed).
 *
 *   bench_service <tesseld> [--seconds S=2] [--conc 1,4,8,16,64]
 *                 [--max-jobs N=200000] [--threads T] [--http-threads H]
 *                 [--dir PARENT=/tmp] [--batch B,.. [--kill-rounds R=0]]
 * --batch runs the batch modes instead (bench_batch.h: B jobs per POST
 * /v1/jobs:batch at each concurrency of --conc, submit->start and
 * submit->end percentiles, then R kill -9 rounds under the last cell's
 * load counting acknowledged jobs lost and jobs run twice).
 * --threads / --http-threads are passed to the daemon (default: its own
 * defaults, one CPU worker per core and 4 HTTP threads). --rate R paces the
 * service cells: R jobs/s sent open loop (at most conc in flight), to
 * measure submit->start at a set load (issue 26: "at half load"); every
 * service row also shows submit->start p50/p99 (the answers'
 * timings_ms.queue).
 *
 * Threads: the client is one thread; the store peer runs C threads in this
 * process while the daemon is idle.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_daemon.h"
#include "db/store.h"
#include "util/util.h"

#define MAX_CONC 256
#define RESP_CAP (64 * 1024) /* a job answer is about 1 KiB */

static const char *const job_body =
    "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\","
    "\"inputs\":{\"x\":[1,2,3]}}}";
/* What the store peer stores: the params and end records of such a job. */
static const char *const peer_params =
    "{\"expr\":\"x+1\",\"inputs\":{\"x\":[1,2,3]}}";
static unsigned char peer_npy[152]; /* a 128-byte header + 3 float64 */

/* ---- the daemon (bench_daemon.h) ------------------------------------------ */

static double daemon_cpu_ms(pid_t pid) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* fields after the command name */
  if (!p) return 0;
  unsigned long long ut = 0, st = 0;
  /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
   * utime stime */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
             &ut, &st) != 2)
    return 0;
  return (double)(ut + st) * 1e3 / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static void loadavg(char *buf, size_t len) {
  FILE *f = fopen("/proc/loadavg", "r");
  buf[0] = 0;
  if (f) {
    if (fgets(buf, (int)len, f)) {
      /* keep the three averages */
      char *p = buf;
      for (int i = 0; i < 3 && p; i++) p = strchr(p + (i > 0), ' ');
      if (p) *p = 0;
    }
    fclose(f);
  }
}

/* ---- the HTTP client -------------------------------------------------------- */

typedef struct slot {
  CURL *h;
  double t0;
  size_t len;
  char buf[RESP_CAP];
} slot;

typedef struct cell {
  long ok, bad;
  double secs, p50, p99, rate;
  double s50, s99; /* submit->start: the answers' timings_ms.queue */
  double server_cpu_ms, client_cpu_ms;
} cell;

/* --rate R: the service cells send R jobs/s (open loop, at most conc in
 * flight) instead of a closed loop; 0: closed. */
static double g_rate;

/* The answer's timings_ms.queue (ms), or NAN. */
static double answer_queue_ms(const char *buf) {
  const char *t = strstr(buf, "\"timings_ms\":{");
  const char *q = t ? strstr(t, "\"queue\":") : NULL;
  return q ? strtod(q + 8, NULL) : NAN;
}

/* Where the service cells put the ids of the jobs the client saw succeed. */
typedef struct idlist {
  char (*v)[T_ID_MAX];
  long n, cap;
} idlist;

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud) {
  slot *s = ud;
  size_t n = size * nmemb;
  size_t room = RESP_CAP - 1 - s->len;
  size_t take = n < room ? n : room;
  memcpy(s->buf + s->len, p, take);
  s->len += take;
  return n; /* a longer answer is cut (checked below), not an error */
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of sorted v. */
static double quantile(const double *v, long n, double q) {
  if (n <= 0) return NAN;
  long i = (long)ceil(q * (double)n) - 1;
  if (i < 0) i = 0;
  if (i >= n) i = n - 1;
  return v[i];
}

/* A job answer is good when it is 200 and says succeeded; its id is then
 * appended to ids. A healthz answer when it is 200. */
static int check_answer(slot *s, long code, int is_job, idlist *ids) {
  if (code != 200) return 0;
  if (!is_job) return 1;
  s->buf[s->len] = 0;
  static const char pre[] = "{\"id\":\"";
  if (strncmp(s->buf, pre, sizeof pre - 1) != 0 ||
      !strstr(s->buf, "\"status\":\"succeeded\""))
    return 0;
  const char *id = s->buf + sizeof pre - 1;
  size_t n = strcspn(id, "\"");
  if (n == 0 || n >= T_ID_MAX) return 0;
  if (ids->n < ids->cap) {
    memcpy(ids->v[ids->n], id, n);
    ids->v[ids->n][n] = 0;
    ids->n++;
  }
  return 1;
}

/* Keep conc requests in flight for `seconds` (or until max requests were
 * sent), then let the ones in flight finish. */
static cell drive(const bench_daemon *d, int is_job, int conc, double seconds,
                  long max, idlist *ids) {
  cell c;
  memset(&c, 0, sizeof c);
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", d->port,
           is_job ? "/v1/jobs?wait=5" : "/healthz");
  double *lat = malloc((size_t)max * sizeof *lat);
  double *stl = malloc((size_t)max * sizeof *stl);
  slot *slots = calloc((size_t)conc, sizeof *slots);
  slot **idle = calloc((size_t)conc, sizeof *idle); /* paced: free slots */
  double rate = is_job ? g_rate : 0, next = 0;
  int nidle = 0;
  CURLM *m = curl_multi_init();
  struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
  hdrs = curl_slist_append(hdrs, "Expect:");
  if (!lat || !stl || !slots || !idle || !m || !hdrs) {
    fprintf(stderr, "bench_service: out of memory\n");
    c.bad = 1;
    goto out;
  }
  curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)conc + 4);
  for (int i = 0; i < conc; i++) {
    CURL *h = slots[i].h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &slots[i]);
    curl_easy_setopt(h, CURLOPT_PRIVATE, &slots[i]);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    if (is_job) {
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, job_body);
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(job_body));
    }
  }
  double c0 = self_cpu_ms(), s0 = daemon_cpu_ms(d->pid);
  double t0 = t_now_ms(), end = t0 + seconds * 1e3, last = t0;
  long sent = 0, nlat = 0, nst = 0;
  for (int i = 0; i < conc && sent < max; i++) {
    if (rate > 0) { /* sent when due */
      idle[nidle++] = &slots[i];
      continue;
    }
    slots[i].len = 0;
    slots[i].t0 = t_now_ms();
    curl_multi_add_handle(m, slots[i].h);
    sent++;
  }
  next = t0;
  int running = 1;
  while (running || (nidle && t_now_ms() < end && sent < max)) {
    for (double now = t_now_ms(); nidle && now >= next && now < end &&
                                  sent < max;
         next += 1e3 / rate, sent++) { /* paced: the sends due */
      slot *s = idle[--nidle];
      s->len = 0;
      s->t0 = now;
      curl_multi_add_handle(m, s->h);
    }
    curl_multi_perform(m, &running);
    CURLMsg *msg;
    int left;
    int readded = 0;
    while ((msg = curl_multi_info_read(m, &left))) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL *h = msg->easy_handle;
      CURLcode res = msg->data.result;
      slot *s;
      curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&s);
      long code = 0;
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
      double now = t_now_ms();
      last = now;
      if (res == CURLE_OK && check_answer(s, code, is_job, ids)) {
        c.ok++;
        lat[nlat++] = now - s->t0;
        double q = is_job ? answer_queue_ms(s->buf) : NAN;
        if (q == q) stl[nst++] = q;
      } else {
        if (c.bad++ < 3)
          fprintf(stderr, "bench_service: %s -> %s, HTTP %ld: %.200s\n", url,
                  curl_easy_strerror(res), code, s->buf);
      }
      curl_multi_remove_handle(m, h);
      if (rate > 0) {
        idle[nidle++] = s;
      } else if (now < end && sent < max) {
        s->len = 0;
        s->t0 = t_now_ms();
        curl_multi_add_handle(m, h);
        sent++;
        readded = 1;
      }
    }
    if (readded) running = 1;
    int wait_ms = 100;
    if (rate > 0 && nidle) {
      double due = next - t_now_ms();
      wait_ms = due <= 0 ? 0 : due < 100 ? (int)due + 1 : 100;
    }
    if (running || nidle) curl_multi_poll(m, NULL, 0, wait_ms, NULL);
  }
  c.secs = (last - t0) / 1e3;
  c.client_cpu_ms = self_cpu_ms() - c0;
  c.server_cpu_ms = daemon_cpu_ms(d->pid) - s0;
  c.rate = c.secs > 0 ? (double)c.ok / c.secs : 0;
  qsort(lat, (size_t)nlat, sizeof *lat, cmp_double);
  c.p50 = quantile(lat, nlat, 0.50);
  c.p99 = quantile(lat, nlat, 0.99);
  qsort(stl, (size_t)nst, sizeof *stl, cmp_double);
  c.s50 = quantile(stl, nst, 0.50);
  c.s99 = quantile(stl, nst, 0.99);
out:
  for (int i = 0; slots && i < conc; i++) curl_easy_cleanup(slots[i].h);
  if (m) curl_multi_cleanup(m);
  curl_slist_free_all(hdrs);
  free(slots);
  free(idle);
  free(stl);
  free(lat);
  return c;
}

#include "bench_batch.h" /* --batch: the batch modes and kill rounds */

/* ---- the store peer ----------------------------------------------------------- */

typedef struct peer_arg {
  store *s;
  double end_ms;
  long jobs, errors;
  pthread_barrier_t *go;
} peer_arg;

/* One job's store calls, as compute/sched/run.c and api/jobs.c make them. */
static void *peer_worker(void *p) {
  peer_arg *a = p;
  pthread_barrier_wait(a->go);
  while (t_now_ms() < a->end_ms) {
    store_job j;
    memset(&j, 0, sizeof j);
    j.owner = "";
    j.kind = "map";
    j.params = (char *)peer_params;
    j.backend_requested = "auto";
    j.body_hash = "0123456789abcdef0123456789abcdef";
    j.max_abs_diff = NAN;
    j.timeout_s = 600;
    terr e;
    /* The strings are ours: insert copies them; no request_id, so *j is
     * never replaced. */
    if (store_job_insert(a->s, &j, NULL, &e) != 0) {
      a->errors++;
      continue;
    }
    store_job_start_async(a->s, j.id, t_wall_ms(), "serial", "bench", NULL);
    store_job_end x = {.status = JOB_SUCCEEDED, .finished_at = t_wall_ms(),
                       .result = {.dtype = "float64", .ndim = 1, .shape = {3},
                                  .bytes = 24},
                       .max_abs_diff = NAN, .progress_done = 3,
                       .progress_total = 3, .result_npy = peer_npy,
                       .result_npy_len = sizeof peer_npy};
    static const double peer_ms[JOB_T__COUNT] = {0.05, 0.01, 0, 0.001, 0,
                                                 0.02, 0.1};
    for (int t = 0; t < JOB_T__COUNT; t++)
      job_timings_put(&x.timings, (job_timing)t, peer_ms[t]);
    if (store_job_finish(a->s, j.id, &x, &e) != 0)
      a->errors++;
    else
      a->jobs++;
  }
  return NULL;
}

static cell store_peer(const char *parent, int threads, double seconds) {
  cell c;
  memset(&c, 0, sizeof c);
  char dir[300];
  snprintf(dir, sizeof dir, "%s/tessel_bench_store_XXXXXX", parent);
  store *s = NULL;
  terr e;
  terr_clear(&e);
  if (!mkdtemp(dir) || store_open(dir, &s, &e) != 0) {
    fprintf(stderr, "bench_service: store peer in %s: %s\n", dir,
            e.message[0] ? e.message : strerror(errno));
    c.bad = 1;
    return c;
  }
  peer_arg *a = calloc((size_t)threads, sizeof *a);
  pthread_t *th = calloc((size_t)threads, sizeof *th);
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
  double end = t_now_ms() + seconds * 1e3 + 1; /* set before the barrier */
  for (int i = 0; i < threads; i++) {
    a[i] = (peer_arg){s, end, 0, 0, &go};
    pthread_create(&th[i], NULL, peer_worker, &a[i]);
  }
  pthread_barrier_wait(&go);
  double t0 = t_now_ms(), c0 = self_cpu_ms();
  for (int i = 0; i < threads; i++) {
    pthread_join(th[i], NULL);
    c.ok += a[i].jobs;
    c.bad += a[i].errors;
  }
  c.secs = (t_now_ms() - t0) / 1e3;
  c.client_cpu_ms = self_cpu_ms() - c0;
  c.rate = c.secs > 0 ? (double)c.ok / c.secs : 0;
  store_close(s);
  pthread_barrier_destroy(&go);
  free(a);
  free(th);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return c;
}

/* ---- durability ------------------------------------------------------------------ */

/* How many of ids are 'succeeded' in <dir>/tessel.db; -1 when it cannot be
 * read. *rows gets the number of succeeded rows in all. */
static long count_durable(const char *dir, const idlist *ids, long *rows) {
  char path[400];
  snprintf(path, sizeof path, "%s/tessel.db", dir);
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL, *cnt = NULL;
  long found = -1;
  *rows = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "SELECT status FROM jobs WHERE id = ?1", -1, &st,
                         NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db,
                         "SELECT count(*) FROM jobs WHERE status = 'succeeded'",
                         -1, &cnt, NULL) != SQLITE_OK) {
    fprintf(stderr, "bench_service: %s: %s\n", path,
            db ? sqlite3_errmsg(db) : "cannot open");
    goto out;
  }
  sqlite3_exec(db, "BEGIN", NULL, NULL, NULL); /* one snapshot for all */
  found = 0;
  for (long i = 0; i < ids->n; i++) {
    sqlite3_bind_text(st, 1, ids->v[i], -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    const char *status =
        step == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    if (status && strcmp(status, "succeeded") == 0)
      found++;
    else if (i - found < 3) /* name the first few */
      fprintf(stderr, "bench_service: job %s is %s in the store\n", ids->v[i],
              status ? status : "missing");
    sqlite3_reset(st);
  }
  if (sqlite3_step(cnt) == SQLITE_ROW) *rows = sqlite3_column_int64(cnt, 0);
  sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
out:
  sqlite3_finalize(st);
  sqlite3_finalize(cnt);
  sqlite3_close(db);
  return found;
}

/* ---- main ------------------------------------------------------------------------ */

static int parse_list(const char *s, int *v, int *n, int max) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  *n = 0;
  for (char *p = buf; *p && *n < 16;) {
    size_t len = strcspn(p, ",");
    char save = p[len];
    p[len] = 0;
    int64_t x;
    if (t_parse_i64(p, &x) != 0 || x < 1 || x > max) return -1;
    v[(*n)++] = (int)x;
    p += len + (save ? 1 : 0);
  }
  return *n ? 0 : -1;
}

int main(int argc, char **argv) {
  const char *exe = NULL, *threads = NULL, *http_threads = NULL,
             *parent = "/tmp";
  double seconds = 2;
  int64_t max_jobs = 200000;
  int conc[16] = {1, 4, 8, 16, 64}, nconc = 5;
  int bs[16], nb = 0;
  int64_t rounds = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (strcmp(a, "--seconds") == 0 && v)
      bad = t_parse_f64(v, &seconds) || !(seconds > 0 && seconds <= 600), i++;
    else if (strcmp(a, "--conc") == 0 && v)
      bad = parse_list(v, conc, &nconc, MAX_CONC), i++;
    else if (strcmp(a, "--max-jobs") == 0 && v)
      bad = t_parse_i64(v, &max_jobs) || max_jobs < 1 || max_jobs > 10000000,
      i++;
    else if (strcmp(a, "--threads") == 0 && v)
      threads = v, i++;
    else if (strcmp(a, "--http-threads") == 0 && v)
      http_threads = v, i++;
    else if (strcmp(a, "--dir") == 0 && v)
      parent = v, i++;
    else if (strcmp(a, "--batch") == 0 && v)
      bad = parse_list(v, bs, &nb, 10000), i++;
    else if (strcmp(a, "--rate") == 0 && v)
      bad = t_parse_f64(v, &g_rate) || !(g_rate >= 0 && g_rate <= 1e6), i++;
    else if (strcmp(a, "--kill-rounds") == 0 && v)
      bad = t_parse_i64(v, &rounds) || rounds < 0 || rounds > 100, i++;
    else if (a[0] != '-' && !exe)
      exe = a;
    else
      bad = 1;
    if (bad) exe = NULL, i = argc;
  }
  if (!exe) {
    fprintf(stderr,
            "usage: %s <tesseld> [--seconds S] [--conc 1,4,8,16,64] [--max-jobs N]"
            " [--threads T] [--http-threads H] [--dir PARENT] [--rate R]"
            " [--batch B,.. [--kill-rounds R]]\n",
            argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  t_log_level = T_LOG_WARN;
  curl_global_init(CURL_GLOBAL_ALL);
  bench_daemon d;
  memset(&d, 0, sizeof d);
  const char *extra[5];
  int ne = 0;
  if (threads) {
    extra[ne++] = "--threads";
    extra[ne++] = threads;
  }
  if (http_threads) {
    extra[ne++] = "--http-threads";
    extra[ne++] = http_threads;
  }
  extra[ne] = NULL;
  if (nb) {
    int rc = batch_main(exe, parent, extra, bs, nb, conc, nconc, seconds,
                        (int)rounds);
    curl_global_cleanup();
    return rc;
  }
  if (bench_daemon_start(&d, exe, parent, "bench_service", extra) != 0) return 1;

  idlist ids = {calloc((size_t)max_jobs * (size_t)nconc + 4096, T_ID_MAX), 0,
                max_jobs * nconc + 4096};
  idlist warm_ids = ids;
  if (!ids.v) {
    fprintf(stderr, "bench_service: out of memory\n");
    bench_daemon_kill9(&d);
    return 1;
  }
  /* Warm-up: the first jobs create the results directory, prepare the
   * statements and fault in the code paths. Their ids are checked too. */
  cell w = drive(&d, 1, 4, 0.5, 4096, &warm_ids);
  ids.n = warm_ids.n;

  char la0[64], la1[64];
  loadavg(la0, sizeof la0);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("service overhead: tiny map jobs (x+1 over 3 inline values) as POST "
         "/v1/jobs?wait=5 (each answer is the finished job), one libcurl "
         "multi client with C keep-alive connections, loopback; %.1f s per "
         "cell; daemon --threads %s --http-threads %s; %ld cores; "
         "load average %s before\n",
         seconds, threads ? threads : "(cores)",
         http_threads ? http_threads : "(4)", ncpu, la0);
  printf("  peers, same run: healthz = GET /healthz from the same client (the "
         "HTTP floor); store = the store calls per job (insert [sync], start "
         "[async], finish [sync]) from C threads in-process, no HTTP\n");
  if (g_rate > 0)
    printf("  --rate %.0f: the service cells send %.0f jobs/s (open loop, at "
           "most conc in flight)\n", g_rate, g_rate);
  printf("%5s | %8s | %7s | %7s | %9s | %7s | %6s | %8s | %6s | %10s | %10s | "
         "%s | %s\n",
         "conc", "jobs/s", "p50 ms", "p99 ms", "healthz/s", "hz p50", "svc/hz",
         "store/s", "svc/st", "daemon cpu", "client cpu", "errors",
         "start p50/p99 ms");
  printf("------+----------+---------+---------+-----------+---------+--------+"
         "----------+--------+------------+------------+-------+-----------\n");
  long errors = w.bad;
  for (int i = 0; i < nconc; i++) {
    int c = conc[i];
    cell hz = drive(&d, 0, c, seconds, max_jobs, &ids);
    cell sv = drive(&d, 1, c, seconds, max_jobs, &ids);
    cell st = store_peer(parent, c, seconds);
    errors += hz.bad + sv.bad + st.bad;
    printf("%5d | %8.0f | %7.3f | %7.3f | %9.0f | %7.3f | %5.2fx | %8.0f | "
           "%5.2fx | %7.0f us | %7.0f us | %ld/%ld/%ld | %.3f/%.3f\n",
           c, sv.rate, sv.p50, sv.p99, hz.rate, hz.p50,
           hz.rate > 0 ? sv.rate / hz.rate : 0, st.rate,
           st.rate > 0 ? sv.rate / st.rate : 0,
           sv.ok ? sv.server_cpu_ms * 1e3 / (double)sv.ok : 0,
           sv.ok ? sv.client_cpu_ms * 1e3 / (double)sv.ok : 0, sv.bad, hz.bad,
           st.bad, sv.s50, sv.s99);
    fflush(stdout);
  }
  loadavg(la1, sizeof la1);

  bench_daemon_kill9(&d);
  long rows;
  long durable = count_durable(d.dir, &ids, &rows);
  printf("  load average %s after; errors: service/healthz/store.\n", la1);
  printf("  durability: after kill -9, %ld of the %ld jobs the client saw "
         "succeed are 'succeeded' in SQLite (%ld succeeded rows in all)\n",
         durable, ids.n, rows);
  printf("  daemon/client cpu: CPU time per service job (user + system, all "
         "threads); on %ld cores they share, so jobs/s <= %ld s / (daemon + "
         "client cpu per job)\n",
         ncpu, ncpu);
  bench_daemon_remove(&d);
  free(ids.v);
  curl_global_cleanup();
  return durable == ids.n && errors == 0 ? 0 : 1;
}
