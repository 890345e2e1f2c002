/* bench_batch.h — bench_service's batch modes (--batch B,..): tiny jobs
 * submitted B at a time with POST /v1/jobs:batch and collected with POST
 * /v1/jobs:get {"ids": [...], "wait": 5}, from C client threads (one
 * keep-alive connection each, a closed loop: batch -> its results -> the
 * next batch), and a kill -9 round under that load.
 *
 * Per (B, C) cell: jobs/s end to end (submitted, succeeded, record read),
 * submit->start p50/p99 (the record's timings_ms.queue, the server's
 * measure of how long a job waited for a worker) and submit->end p50/p99
 * (the client's: from sending the batch to holding the job's record with
 * status succeeded), the daemon's CPU per job.
 *
 * Kill rounds (--kill-rounds R): on one data dir, R times: the batched load
 * runs, the daemon is killed with SIGKILL while batches are in flight, and
 * started again on the same dir; then every job of the round that was
 * acknowledged (its item in a 2xx jobs:batch answer had an id) is read with
 * jobs:get (wait 30 s): "lost" = acknowledged but unknown to the restarted
 * daemon; "twice" = seen succeeded before the kill with a finished_at that
 * changed after it (it ran to completion a second time); "unended" = not
 * final after the wait. The program's exit status is 1 when any is lost or
 * ran twice.
 *
 * The endpoints are another branch's work (issue 26 item 2/3); the bodies
 * are the documented ones: {"jobs":[job body,...]} -> {"jobs":[record |
 * {"error":{...}}]}, and {"ids":[...],"wait":S} -> {"jobs":[record |
 * {"error":{...}}]}. Where the daemon answers jobs:batch with 404 or 405,
 * the mode says so and exits 77.
 *
 * Included by bench_service.c only (static functions, its slot-free
 * blocking libcurl client; jansson parses the answers).
 */
#ifndef TESSEL_BENCH_BATCH_H
#define TESSEL_BENCH_BATCH_H

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#include "bench_daemon.h"

typedef struct bbuf {
  char *p;
  size_t n, cap;
} bbuf;

static size_t bb_write(char *p, size_t size, size_t nmemb, void *ud) {
  bbuf *b = ud;
  size_t n = size * nmemb;
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->n + n + 1) * 2;
    char *q = realloc(b->p, cap);
    if (!q) return 0;
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = 0;
  return n;
}

/* POST body to base+path; the answer in *out (parsed) and the status. */
static long bpost(CURL *h, const char *base, const char *path,
                  const char *body, json_t **out) {
  char url[256];
  snprintf(url, sizeof url, "%s%s", base, path);
  bbuf b = {0};
  struct curl_slist *hdrs =
      curl_slist_append(NULL, "Content-Type: application/json");
  hdrs = curl_slist_append(hdrs, "Expect:");
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, bb_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 60000L);
  long code = 0;
  *out = NULL;
  if (curl_easy_perform(h) == CURLE_OK) {
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    *out = b.p ? json_loads(b.p, 0, NULL) : NULL;
  }
  curl_slist_free_all(hdrs);
  free(b.p);
  return code;
}

/* {"jobs":[B tiny job bodies]} */
static char *batch_body(int B) {
  size_t one = strlen(job_body) + 1, cap = 16 + (size_t)B * one;
  char *s = malloc(cap), *p = s;
  if (!s) return NULL;
  p += sprintf(p, "{\"jobs\":[");
  for (int i = 0; i < B; i++)
    p += sprintf(p, "%s%s", i ? "," : "", job_body);
  sprintf(p, "]}");
  return s;
}

/* {"ids":[...],"wait":W} from the ids in `ids` (n of them). */
static char *get_body(char (*ids)[T_ID_MAX], int n, int wait) {
  char *s = malloc(64 + (size_t)n * (T_ID_MAX + 3)), *p = s;
  if (!s) return NULL;
  p += sprintf(p, "{\"ids\":[");
  for (int i = 0; i < n; i++) p += sprintf(p, "%s\"%s\"", i ? "," : "", ids[i]);
  sprintf(p, "],\"wait\":%d}", wait);
  return s;
}

/* What one client thread saw. */
typedef struct bthread {
  const char *base, *body;
  int B;
  double end_ms;
  atomic_int *stop;
  long ok, bad, absent;
  double *start_ms, *end_lat; /* per job */
  long nlat, cap;
  /* kill rounds: acknowledged ids, and the finished_at of those seen
   * succeeded ("" when not) */
  char (*ack)[T_ID_MAX];
  char (*fin)[40];
  long nack, capack;
} bthread;

static void bt_lat(bthread *t, double start, double end) {
  if (t->nlat == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 8192;
    t->start_ms = realloc(t->start_ms, (size_t)t->cap * sizeof(double));
    t->end_lat = realloc(t->end_lat, (size_t)t->cap * sizeof(double));
    if (!t->start_ms || !t->end_lat) exit(1);
  }
  t->start_ms[t->nlat] = start;
  t->end_lat[t->nlat++] = end;
}

static void *bthread_main(void *p) {
  bthread *t = p;
  CURL *h = curl_easy_init();
  char(*ids)[T_ID_MAX] = calloc((size_t)t->B, T_ID_MAX);
  long *ackat = calloc((size_t)t->B, sizeof *ackat);
  while (h && ids && !atomic_load(t->stop) && t_now_ms() < t->end_ms) {
    double t0 = t_now_ms();
    json_t *a;
    long code = bpost(h, t->base, "/v1/jobs:batch", t->body, &a);
    if (code == 404 || code == 405) {
      t->absent = 1;
      json_decref(a);
      break;
    }
    json_t *arr = json_object_get(a, "jobs");
    int n = 0;
    if (code >= 200 && code < 300 && json_is_array(arr)) {
      size_t i;
      json_t *it;
      json_array_foreach(arr, i, it) {
        const char *id = json_string_value(json_object_get(it, "id"));
        if (!id || strlen(id) >= T_ID_MAX || n >= t->B) {
          t->bad++;
          continue;
        }
        snprintf(ids[n], T_ID_MAX, "%s", id);
        if (t->ack && t->nack < t->capack) { /* acknowledged */
          snprintf(t->ack[t->nack], T_ID_MAX, "%s", id);
          t->fin[t->nack][0] = 0;
          ackat[n] = t->nack++;
        } else {
          ackat[n] = -1;
        }
        n++;
      }
    } else {
      t->bad++;
    }
    json_decref(a);
    if (!n) continue;
    char *gb = get_body(ids, n, 5);
    json_t *g;
    code = gb ? bpost(h, t->base, "/v1/jobs:get", gb, &g) : 0;
    free(gb);
    double t1 = t_now_ms();
    arr = json_object_get(g, "jobs");
    if (code == 200 && json_is_array(arr)) {
      for (int i = 0; i < n && i < (int)json_array_size(arr); i++) {
        json_t *r = json_array_get(arr, i);
        const char *st = json_string_value(json_object_get(r, "status"));
        if (!st || strcmp(st, "succeeded") != 0) {
          t->bad++;
          continue;
        }
        t->ok++;
        json_t *tm = json_object_get(r, "timings_ms");
        double q = json_number_value(json_object_get(tm, "queue"));
        bt_lat(t, q, t1 - t0);
        const char *f = json_string_value(json_object_get(r, "finished_at"));
        if (t->ack && ackat[i] >= 0 && f)
          snprintf(t->fin[ackat[i]], 40, "%s", f);
      }
    } else {
      t->bad += n;
    }
    json_decref(g);
  }
  free(ids);
  free(ackat);
  if (h) curl_easy_cleanup(h);
  return NULL;
}

typedef struct bcell {
  long ok, bad;
  int absent;
  double rate, s50, s99, e50, e99, cpu_us;
} bcell;

static double bq(double *v, long n, double q) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return quantile(v, n, q);
}

/* C threads for `seconds` (kill_after_ms > 0: SIGKILL the daemon then, the
 * threads' acknowledged ids appended to ack, fin). */
static bcell batch_cell(bench_daemon *d, int B, int C, double seconds,
                        double kill_after_ms, char (**ack)[T_ID_MAX],
                        char (**fin)[40], long *nack) {
  bcell c;
  memset(&c, 0, sizeof c);
  char *body = batch_body(B);
  bthread *t = calloc((size_t)C, sizeof *t);
  pthread_t *th = calloc((size_t)C, sizeof *th);
  atomic_int stop = 0;
  if (!body || !t || !th) exit(1);
  double s0 = daemon_cpu_ms(d->pid), t0 = t_now_ms();
  long capack = ack ? 500000 / C + B : 0;
  for (int i = 0; i < C; i++) {
    t[i] = (bthread){.base = d->base, .body = body, .B = B,
                     .end_ms = t0 + seconds * 1e3, .stop = &stop};
    if (ack) {
      t[i].ack = calloc((size_t)capack, T_ID_MAX);
      t[i].fin = calloc((size_t)capack, 40);
      t[i].capack = capack;
    }
    pthread_create(&th[i], NULL, bthread_main, &t[i]);
  }
  if (kill_after_ms > 0) {
    usleep((useconds_t)(kill_after_ms * 1e3));
    bench_daemon_kill9(d);
    atomic_store(&stop, 1);
  }
  double s1 = d->pid > 0 ? daemon_cpu_ms(d->pid) : s0;
  long nl = 0;
  for (int i = 0; i < C; i++) {
    pthread_join(th[i], NULL);
    c.ok += t[i].ok;
    c.bad += t[i].bad;
    c.absent |= t[i].absent;
    nl += t[i].nlat;
  }
  if (d->pid > 0) s1 = daemon_cpu_ms(d->pid);
  double secs = (t_now_ms() - t0) / 1e3;
  double *st = malloc((size_t)(nl + 1) * sizeof *st),
         *en = malloc((size_t)(nl + 1) * sizeof *en);
  long k = 0;
  for (int i = 0; i < C; i++) {
    for (long j = 0; j < t[i].nlat; j++, k++) {
      st[k] = t[i].start_ms[j];
      en[k] = t[i].end_lat[j];
    }
    free(t[i].start_ms);
    free(t[i].end_lat);
    if (ack) {
      *ack = realloc(*ack, (size_t)(*nack + t[i].nack + 1) * T_ID_MAX);
      *fin = realloc(*fin, (size_t)(*nack + t[i].nack + 1) * 40);
      memcpy(*ack + *nack, t[i].ack, (size_t)t[i].nack * T_ID_MAX);
      memcpy(*fin + *nack, t[i].fin, (size_t)t[i].nack * 40);
      *nack += t[i].nack;
      free(t[i].ack);
      free(t[i].fin);
    }
  }
  c.rate = secs > 0 ? (double)c.ok / secs : 0;
  c.s50 = bq(st, nl, 0.5);
  c.s99 = bq(st, nl, 0.99);
  c.e50 = bq(en, nl, 0.5);
  c.e99 = bq(en, nl, 0.99);
  c.cpu_us = c.ok ? (s1 - s0) * 1e3 / (double)c.ok : 0;
  free(st);
  free(en);
  free(body);
  free(t);
  free(th);
  return c;
}

/* After a restart: read the acknowledged ids back. */
static void kill_check(bench_daemon *d, char (*ack)[T_ID_MAX],
                       char (*fin)[40], long n, long *lost, long *twice,
                       long *unended) {
  CURL *h = curl_easy_init();
  for (long i = 0; i < n; i += 500) {
    int k = n - i < 500 ? (int)(n - i) : 500;
    char *gb = get_body(ack + i, k, 30);
    json_t *g;
    long code = bpost(h, d->base, "/v1/jobs:get", gb, &g);
    free(gb);
    json_t *arr = json_object_get(g, "jobs");
    if (code != 200 || !json_is_array(arr) || (int)json_array_size(arr) != k) {
      fprintf(stderr, "bench_service: jobs:get after the restart: HTTP %ld\n",
              code);
      *lost += k; /* unknown: counted against us */
      json_decref(g);
      continue;
    }
    for (int j = 0; j < k; j++) {
      json_t *r = json_array_get(arr, j);
      const char *id = json_string_value(json_object_get(r, "id"));
      const char *st = json_string_value(json_object_get(r, "status"));
      if (!id || strcmp(id, ack[i + j]) != 0) {
        (*lost)++;
        continue;
      }
      if (!st || !(strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0 ||
                   strcmp(st, "canceled") == 0)) {
        (*unended)++;
        continue;
      }
      const char *f = json_string_value(json_object_get(r, "finished_at"));
      if (fin[i + j][0] && (!f || strcmp(f, fin[i + j]) != 0)) (*twice)++;
    }
    json_decref(g);
  }
  curl_easy_cleanup(h);
}

static int batch_main(const char *exe, const char *parent,
                      const char *const *extra, const int *bs, int nb,
                      const int *conc, int nconc, double seconds, int rounds) {
  bench_daemon d;
  if (bench_daemon_start(&d, exe, parent, "bench_batch", extra) != 0) return 1;
  char la0[64], la1[64];
  loadavg(la0, sizeof la0);
  printf("batch modes: tiny map jobs (x+1 over 3 inline values), B per POST "
         "/v1/jobs:batch, then POST /v1/jobs:get {ids, wait 5}; C client "
         "threads, one keep-alive connection each; %.1f s per cell; "
         "%ld cores; load average %s before\n",
         seconds, sysconf(_SC_NPROCESSORS_ONLN), la0);
  printf("%6s | %5s | %8s | %9s | %9s | %9s | %9s | %10s | %s\n", "batch",
         "conc", "jobs/s", "start p50", "start p99", "end p50", "end p99",
         "daemon cpu", "errors");
  long errors = 0;
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < nconc; i++) {
      bcell c = batch_cell(&d, bs[b], conc[i], seconds, 0, NULL, NULL, NULL);
      if (c.absent) {
        printf("  POST /v1/jobs:batch is not in this daemon (404/405): "
               "skipped\n");
        bench_daemon_remove(&d);
        return 77;
      }
      errors += c.bad;
      printf("%6d | %5d | %8.0f | %6.2f ms | %6.2f ms | %6.2f ms | %6.2f ms "
             "| %7.0f us | %ld\n",
             bs[b], conc[i], c.rate, c.s50, c.s99, c.e50, c.e99, c.cpu_us,
             c.bad);
      fflush(stdout);
    }
  loadavg(la1, sizeof la1);
  printf("  load average %s after; start = timings_ms.queue (server), end = "
         "client, batch sent -> record read\n", la1);
  long tl = 0, tt = 0;
  for (int r = 0; r < rounds; r++) {
    char (*ack)[T_ID_MAX] = NULL;
    char (*fin)[40] = NULL;
    long nack = 0, lost = 0, twice = 0, unended = 0;
    int B = bs[nb - 1], C = conc[nconc - 1];
    bcell c = batch_cell(&d, B, C, 60, 1000 + 150 * r, &ack, &fin, &nack);
    long seen = 0;
    for (long i = 0; i < nack; i++) seen += fin[i][0] != 0;
    if (bench_daemon_start(&d, exe, NULL, NULL, extra) != 0) return 1;
    kill_check(&d, ack, fin, nack, &lost, &twice, &unended);
    printf("  kill -9 round %d (batch %d, conc %d, killed after %d ms): %ld "
           "acknowledged (%ld seen succeeded): %ld lost, %ld ran twice, %ld "
           "not ended 30 s after the restart\n",
           r + 1, B, C, 1000 + 150 * r, nack, seen, lost, twice, unended);
    (void)c;
    tl += lost;
    tt += twice;
    free(ack);
    free(fin);
  }
  bench_daemon_remove(&d);
  return tl || tt ? 1 : errors ? 1 : 0;
}

#endif
