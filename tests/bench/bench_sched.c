/* bench_sched.c — what the pool and the scheduler cost around the work.
 *
 * Three tables, each a ratio against a peer measured in the same run:
 *   1. result files: a mapped .npy (tarray_create_npy, fill, unmap, rename)
 *      against a heap array written with npy_write then renamed — the two
 *      ways compute/sched/run.c stores a result; picks inline_result_max;
 *   2. pool_for on tiny loops against the same loop run inline;
 *   3. tiny jobs end to end (reserve, insert, enqueue, run, finish, wait)
 *      on serial against cpu, jobs per second.
 * Usage: bench_sched [dir]   (default: a new directory under /tmp)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/pool.h"
#include "compute/sched/sched.h"
#include "db/store.h"

/* ---- 1. result files ---------------------------------------------------- */
static void remove_results(const char *dir, const char *tag, int reps) {
  char fin[512];
  for (int r = 0; r < reps; r++) {
    snprintf(fin, sizeof fin, "%s/%s%d.npy", dir, tag, r);
    unlink(fin);
  }
}

static double bench_mapped(const char *dir, int64_t n, int reps) {
  char tmp[512], fin[512];
  double t0 = t_now_ms();
  for (int r = 0; r < reps; r++) {
    /* A new final name each time, as for jobs (renaming over an existing
     * file would make ext4 flush the data first). */
    snprintf(tmp, sizeof tmp, "%s/m%d.npy.tmp", dir, r);
    snprintf(fin, sizeof fin, "%s/m%d.npy", dir, r);
    tarray *a = NULL;
    terr e;
    if (tarray_create_npy(tmp, T_F64, 1, &n, &a, &e)) return -1;
    for (int64_t i = 0; i < n; i++) ((double *)a->data)[i] = (double)i;
    tarray_free(a);
    if (rename(tmp, fin)) return -1;
  }
  double ms = (t_now_ms() - t0) / reps;
  remove_results(dir, "m", reps);
  return ms;
}

static double bench_heap(const char *dir, int64_t n, int reps) {
  char tmp[512], fin[512];
  double t0 = t_now_ms();
  for (int r = 0; r < reps; r++) {
    /* A new final name each time, as for jobs (renaming over an existing
     * file would make ext4 flush the data first). */
    snprintf(tmp, sizeof tmp, "%s/h%d.npy.tmp", dir, r);
    snprintf(fin, sizeof fin, "%s/h%d.npy", dir, r);
    tarray *a = tarray_new(T_F64, 1, &n);
    for (int64_t i = 0; i < n; i++) ((double *)a->data)[i] = (double)i;
    FILE *f = fopen(tmp, "wb");
    terr e;
    if (!f || npy_write(f, a, &e)) return -1;
    fclose(f);
    tarray_free(a);
    if (rename(tmp, fin)) return -1;
  }
  double ms = (t_now_ms() - t0) / reps;
  remove_results(dir, "h", reps);
  return ms;
}

/* ---- 2. pool_for on tiny loops ------------------------------------------- */
static void chunk_add(void *arg, int64_t c, int slot) {
  atomic_fetch_add_explicit((atomic_long *)arg, c, memory_order_relaxed);
}

static double bench_loops(pool *p, int64_t nchunks, int reps) {
  atomic_long sum;
  atomic_init(&sum, 0);
  double t0 = t_now_ms();
  for (int r = 0; r < reps; r++)
    pool_for(p, p ? pool_threads(p) + 1 : 1, nchunks, chunk_add, &sum, NULL);
  return (t_now_ms() - t0) * 1e6 / reps; /* ns per loop */
}

/* ---- 3. tiny jobs end to end --------------------------------------------- */
static int tiny_check(const json_t *params, const tenv *env, job_estimate *est,
                      terr *e) {
  est->out_dtype = T_F64;
  est->out_ndim = 1;
  est->out_shape[0] = 4;
  est->out_bytes = est->mem_bytes = 32;
  est->work = 4;
  est->size = 4;
  return T_OK;
}
static int tiny_prepare(const json_t *params, const tenv *env, void **plan,
                        terr *e) {
  *plan = NULL;
  return T_OK;
}
static void chunk_fill(void *arg, int64_t c, int slot) {
  ((double *)((tarray *)arg)->data)[c] = (double)c;
}
static int tiny_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                    terr *e) {
  int64_t n = 4;
  int rc = ctx->result_alloc(ctx, T_F64, 1, &n, result, e);
  if (rc) return rc;
  pool_for(ctx->pool, ctx->threads, n, chunk_fill, *result, ctx->stop);
  return T_OK;
}
static void tiny_release(void *plan) {}
static const kind_ops k_tiny = {
    .name = "tiny", .tolerance_doc = "exact",
    .check = tiny_check, .prepare = tiny_prepare, .run = tiny_run,
    .release = tiny_release};
static const kind_ops *lookup(const char *name) {
  return strcmp(name, "tiny") == 0 ? &k_tiny : NULL;
}

typedef struct done_t {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int left;
} done_t;
static void on_done(void *arg, const char *id) {
  done_t *d = arg;
  pthread_mutex_lock(&d->mu);
  if (--d->left == 0) pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* Jobs per second for `njobs` tiny jobs on `backend`, or -1. */
static double bench_jobs(const char *dir, const char *backend, int njobs,
                         int64_t inline_max) {
  store *st = NULL;
  sched *s = NULL;
  terr e;
  if (store_open(dir, &st, &e)) return -1;
  sched_config cfg = {.st = st, .data_dir = dir, .threads = 2,
                      .queue_limit = 0, .inline_result_max = inline_max,
                      .kind_lookup = lookup};
  if (sched_create(&cfg, &s, &e) || sched_start(s, &e)) return -1;
  done_t d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, njobs};
  double t0 = t_now_ms();
  for (int i = 0; i < njobs; i++) {
    store_job j;
    memset(&j, 0, sizeof j);
    j.owner = strdup("");
    j.kind = strdup("tiny");
    j.params = strdup("{}");
    j.backend_requested = strdup(backend);
    j.body_hash = strdup("x");
    int existing, retry;
    uint64_t tok;
    if (sched_reserve(s, &retry, &e) || store_job_insert(st, &j, &existing, &e) ||
        sched_enqueue(s, &j, &e))
      return -1;
    if (sched_wait(s, j.id, on_done, &d, &tok) == 1) on_done(&d, j.id);
    store_job_clear(&j);
  }
  pthread_mutex_lock(&d.mu);
  while (d.left > 0) pthread_cond_wait(&d.cv, &d.mu);
  pthread_mutex_unlock(&d.mu);
  double secs = (t_now_ms() - t0) / 1e3;
  sched_destroy(s);
  store_close(st);
  return njobs / secs;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median5(double *v) {
  qsort(v, 5, sizeof v[0], cmp_double);
  return v[2];
}

int main(int argc, char **argv) {
  char dir[256];
  if (argc > 1)
    snprintf(dir, sizeof dir, "%s", argv[1]);
  else {
    snprintf(dir, sizeof dir, "/tmp/bench_sched_XXXXXX");
    if (!mkdtemp(dir)) return 1;
  }
  t_log_level = T_LOG_WARN;

  printf("## result file: mapped .npy vs heap + npy_write (per result, "
         "median of 5 alternating runs)\n\n");
  printf("| bytes | mapped us | heap+write us | heap/mapped |\n|---|---|---|---|\n");
  int64_t sizes[] = {1, 16, 512, 8192, 131072, 1048576, 8388608};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int reps = sizes[i] >= 1048576 ? 2 : sizes[i] >= 131072 ? 10 : 100;
    double m[5], h[5];
    for (int k = 0; k < 5; k++) {
      m[k] = bench_mapped(dir, sizes[i], reps);
      h[k] = bench_heap(dir, sizes[i], reps);
    }
    double mm = median5(m), hm = median5(h);
    printf("| %lld | %.1f | %.1f | %.2f |\n", (long long)sizes[i] * 8,
           mm * 1e3, hm * 1e3, hm / mm);
  }

  printf("\n## pool_for on tiny loops vs the loop inline (per loop)\n\n");
  pool *p = pool_create(2, NULL, NULL);
  printf("| chunks | inline ns | pool_for ns | pool/inline |\n|---|---|---|---|\n");
  int64_t chunks[] = {1, 2, 8, 64};
  for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
    double in = bench_loops(NULL, chunks[i], 20000);
    double po = bench_loops(p, chunks[i], 20000);
    printf("| %lld | %.0f | %.0f | %.2f |\n", (long long)chunks[i], in, po,
           po / in);
  }
  pool_destroy(p);

  printf("\n## tiny jobs end to end (2 workers, store commit included)\n\n");
  printf("| backend | results | jobs/s | vs serial, heap |\n|---|---|---|---|\n");
  const char *bk[] = {"serial", "cpu", "serial"};
  int64_t inl[] = {65536, 65536, 1}; /* 1: every result mapped */
  double rate[3][3];
  for (int k = 0; k < 3; k++) /* alternate, so drift hits all alike */
    for (int i = 0; i < 3; i++) {
      char sub[300];
      snprintf(sub, sizeof sub, "%s/jobs%d_%d", dir, i, k);
      rate[i][k] = bench_jobs(sub, bk[i], 200, inl[i]);
    }
  for (int i = 0; i < 3; i++) {
    double a = rate[i][0], b = rate[i][1], c = rate[i][2];
    rate[i][0] = a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
  }
  for (int i = 0; i < 3; i++)
    printf("| %s | %s | %.0f | %.2f |\n", bk[i], inl[i] > 1 ? "heap" : "mapped",
           rate[i][0], rate[i][0] / rate[0][0]);
  return 0;
}
