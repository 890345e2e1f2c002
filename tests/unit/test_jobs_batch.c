/* test_jobs_batch.c — jobs_submit_batch (compute/jobs/batch.c) with its
 * items checked on checker threads (jobs.checkers, util/pool.h) beside the
 * calling thread, against a real store and scheduler; in make test-tsan
 * too, where ThreadSanitizer watches the checks run at once.
 *
 * Checked, for 3 checkers and for none (the calling thread alone), round
 * after round: a batch of 240 items, each bad in one of four ways at
 * positions drawn from a fixed seed (not an object, an unknown kind, an
 * expression that does not parse, an unknown field) or good, answers
 * every item in order: a bad one with its own field "jobs[i]..." and no
 * id, a good one with an id that rises with its index (ids are made in
 * item order, not in the order the checks end) and a committed row whose
 * params are its own; every good job ends succeeded; both ways give the
 * same outcome for every item.
 *
 * The checkers help one request at a time (jobs_checkers_take): a second
 * take while one holds them finds none, a give frees them, none without a
 * pool; 4 threads taking and giving 20,000 times each never hold them two
 * at once (under TSan too).
 *
 * A batch of 100 tiny cuda reduce items, with one fake GPU, runs as one
 * gang: every record's "launch" says 100 shared it, the first item first.
 */
#include "sched_fixture.h"
#include "util/buf.h"

#define N 240
#define ROUNDS 3

static char *batch_text(int *how, int *good) {
  size_t cap = N * 160 + 32, at = 0;
  char *b = malloc(cap);
  uint32_t seed = 777;
  *good = 0;
  at += (size_t)snprintf(b + at, cap - at, "[");
  for (int i = 0; i < N; i++) {
    seed = seed * 1103515245u + 12345u;
    int r = (int)((seed >> 16) % 8);
    how[i] = r < 4 ? r : 4;
    const char *sep = i ? "," : "";
    if (how[i] == 0)
      at += (size_t)snprintf(b + at, cap - at, "%s%d", sep, i);
    else if (how[i] == 1)
      at += (size_t)snprintf(b + at, cap - at,
                             "%s{\"kind\":\"nope\",\"params\":{}}", sep);
    else if (how[i] == 2)
      at += (size_t)snprintf(b + at, cap - at,
                             "%s{\"kind\":\"map\",\"params\":{\"expr\":"
                             "\"x+(\",\"inputs\":{\"x\":[1]}}}", sep);
    else if (how[i] == 3)
      at += (size_t)snprintf(b + at, cap - at,
                             "%s{\"kind\":\"map\",\"bogus\":1,\"params\":{}}",
                             sep);
    else
      at += (size_t)snprintf(b + at, cap - at,
                             "%s{\"kind\":\"map\",\"backend\":\"serial\","
                             "\"params\":{\"expr\":\"x+%d\",\"inputs\":"
                             "{\"x\":[1,2]}}}", sep, i);
    *good += how[i] == 4;
  }
  snprintf(b + at, cap - at, "]");
  return b;
}

/* One batch through J; out[i] the outcome of item i. */
static void run_batch(fx *f, jobs *J, json_t *items, const int *how,
                      jobs_batch_item *out) {
  static const char *const tail[] = {"", ".kind", ".params.expr", ".bogus"};
  terr e;
  CHECK(jobs_submit_batch(J, "", items, out, &e) == 0);
  char prev[T_ID_MAX] = "";
  for (int i = 0; i < N; i++) {
    jobs_batch_item *it = &out[i];
    if (how[i] < 4) {
      char want[64];
      snprintf(want, sizeof want, "jobs[%d]%s", i, tail[how[i]]);
      CHECK_MSG(it->rc == T_EINVAL && strcmp(it->err.field, want) == 0,
                "item %d: rc %d field %s, want %s", i, it->rc, it->err.field,
                want);
      CHECK(it->id[0] == 0);
      continue;
    }
    CHECK_MSG(it->rc == 0, "item %d: rc %d %s", i, it->rc, it->err.message);
    CHECK_MSG(strcmp(prev, it->id) < 0, "item %d: id %s after %s", i, it->id,
              prev);
    t_scopy(prev, sizeof prev, it->id);
    char expr[32];
    snprintf(expr, sizeof expr, "\"x+%d\"", i);
    CHECK_MSG(it->row.params && strstr(it->row.params, expr),
              "item %d: params %s", i, it->row.params ? it->row.params : "-");
  }
  for (int i = 0; i < N; i++) {
    if (out[i].rc) continue;
    store_job j;
    if (wait_final(f, out[i].id, &j)) {
      CHECK_MSG(j.status == JOB_SUCCEEDED, "item %d: status %d", i, j.status);
      store_job_clear(&j);
    }
  }
}

static void test_checked_apart_admitted_in_order(void) {
  fx f;
  if (fx_prepare(&f, 2)) return;
  f.cfg.queue_limit = 4 * N;
  if (fx_start(&f)) return;
  int how[N], good = 0;
  char *text = batch_text(how, &good);
  CHECK(good > 40 && good < N - 40); /* the seed mixes them */
  json_t *items = json_loads(text, 0, NULL);
  CHECK(json_array_size(items) == N);
  jobs par = {.st = f.st, .sc = f.s, .max_elems = 1 << 20,
              .default_timeout_s = 60, .checkers = pool_create(3, NULL, NULL)};
  jobs one = par;
  one.checkers = NULL;
  CHECK(par.checkers != NULL);
  jobs_batch_item *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b);
  for (int r = 0; r < ROUNDS && a && b; r++) {
    run_batch(&f, &par, items, how, a);
    run_batch(&f, &one, items, how, b);
    for (int i = 0; i < N; i++) {
      CHECK_MSG(a[i].rc == b[i].rc && strcmp(a[i].err.field, b[i].err.field) == 0,
                "item %d: %d %s apart, %d %s alone", i, a[i].rc, a[i].err.field,
                b[i].rc, b[i].err.field);
      jobs_batch_item_clear(&a[i]);
      jobs_batch_item_clear(&b[i]);
    }
  }
  wait_idle(&f);
  fx_close(&f);
  jobs_checkers_free(par.checkers);
  json_decref(items);
  free(a);
  free(b);
  free(text);
}

/* One fake GPU (sched_fixture.h's locks) for the gang test. */
static int one_count(void) { return 1; }
static int one_healthy(int dev) { return dev == 0; }
static void one_note(int dev, int rc) { (void)dev, (void)rc; }
static const char *one_reason(void) { return ""; }
static const sched_gpu_ops one_gpu = {one_count, one_healthy, one_note,
                                      fake_lock, fake_unlock, one_reason,
                                      fake_trylock};

/* The seeds' shape, small: a batch of 100 tiny cuda reduce items
 * (sum(x**2) over 16 values each) is queued as one unit, so the GPU
 * worker, free from the first item on, takes them as one gang: every
 * record says "launch": {"shared": 100, "first": the first item's id}.
 * Without CUDA built the launch fails each member (unavailable); with it,
 * each succeeds with its own sum. */
TEST(test_batch_of_tiny_cuda_jobs_is_one_gang) {
  enum { G = 100, LEN = 16 };
  fx f;
  if (fx_prepare(&f, 2)) return;
  f.cfg.gpu_ops = &one_gpu;
  f.cfg.queue_limit = 4 * G;
  if (fx_start(&f)) return;
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_adds(&b, "[");
  for (int i = 0; i < G; i++) {
    tbuf_addf(&b, "%s{\"kind\":\"reduce\",\"backend\":\"cuda\",\"params\":"
                  "{\"op\":\"sum\",\"expr\":\"x**2\",\"inputs\":{\"x\":[",
              i ? "," : "");
    for (int v = 0; v < LEN; v++) tbuf_addf(&b, "%s%d", v ? "," : "", i + v);
    tbuf_adds(&b, "]}}}");
  }
  tbuf_adds(&b, "]");
  json_t *items = json_loadb(b.p, b.len, 0, NULL);
  tbuf_free(&b);
  CHECK(json_array_size(items) == G);
  jobs J = {.st = f.st, .sc = f.s, .max_elems = 1 << 20,
            .default_timeout_s = 60};
  jobs_batch_item *out = calloc(G, sizeof *out);
  terr e;
  CHECK(out && jobs_submit_batch(&J, "", items, out, &e) == 0);
  char launch[160];
  snprintf(launch, sizeof launch, "\"launch\":{\"shared\":%d,\"first\":\"%s\"}",
           G, out ? out[0].id : "");
  for (int i = 0; out && i < G; i++) {
    store_job j;
    CHECK_MSG(out[i].rc == 0, "item %d: %s", i, out[i].err.message);
    if (out[i].rc || !wait_final(&f, out[i].id, &j)) continue;
    CHECK_MSG(j.estimate && strstr(j.estimate, launch),
              "item %d: estimate %s", i, j.estimate ? j.estimate : "(none)");
    CHECK_MSG(j.status == JOB_SUCCEEDED ||
                  (j.status == JOB_FAILED && j.error_code &&
                   strcmp(j.error_code, "unavailable") == 0),
              "item %d: status %d %s", i, (int)j.status,
              j.error_message ? j.error_message : "");
    if (j.status == JOB_SUCCEEDED) {
      double want = 0;
      for (int v = 0; v < LEN; v++) want += (double)(i + v) * (i + v);
      void *npy = NULL;
      size_t len = 0;
      CHECK(store_job_result_npy(f.st, out[i].id, "", &npy, &len, &e) == 0);
      double got = NAN; /* a 0-d float64 .npy: the value is its last 8 bytes */
      if (npy && len >= 8) memcpy(&got, (char *)npy + len - 8, 8);
      CHECK_MSG(got == want, "item %d: %g, want %g", i, got, want);
      free(npy);
    }
    store_job_clear(&j);
    jobs_batch_item_clear(&out[i]);
  }
  free(out);
  wait_idle(&f);
  fx_close(&f); /* the jobs' references to their params are gone */
  json_decref(items);
}

typedef struct taker {
  jobs *J;
  _Atomic int *holding, *overlap, *took;
} taker;

static void *take_loop(void *arg) {
  taker *t = arg;
  for (int i = 0; i < 20000; i++) {
    struct pool *p = jobs_checkers_take(t->J);
    if (!p) continue;
    if (atomic_fetch_add(t->holding, 1) != 0) atomic_fetch_add(t->overlap, 1);
    atomic_fetch_add(t->took, 1);
    atomic_fetch_sub(t->holding, 1);
    jobs_checkers_give(t->J, p);
  }
  return NULL;
}

TEST(test_checkers_one_request_at_a_time) {
  jobs none = {0};
  CHECK(jobs_checkers_take(&none) == NULL);
  jobs J = {.checkers = pool_create(2, NULL, NULL)};
  CHECK(J.checkers != NULL);
  struct pool *p = jobs_checkers_take(&J);
  CHECK(p == J.checkers);
  CHECK(jobs_checkers_take(&J) == NULL); /* another request: none */
  jobs_checkers_give(&J, p);
  p = jobs_checkers_take(&J);
  CHECK(p == J.checkers);
  jobs_checkers_give(&J, p);
  jobs_checkers_give(&J, NULL); /* a request that had none gives nothing */
  CHECK((p = jobs_checkers_take(&J)) != NULL);
  jobs_checkers_give(&J, p);
  _Atomic int holding = 0, overlap = 0, took = 0;
  taker t = {&J, &holding, &overlap, &took};
  pthread_t th[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, take_loop, &t) == 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  CHECK_MSG(atomic_load(&overlap) == 0, "held by two at once %d times",
            atomic_load(&overlap));
  CHECK(atomic_load(&took) > 0);
  jobs_checkers_free(J.checkers);
}

int main(void) {
  t_log_level = T_LOG_ERROR;
  snprintf(root, sizeof root, "/tmp/tessel_jbatch_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_checked_apart_admitted_in_order);
  RUN(test_checkers_one_request_at_a_time);
  RUN(test_batch_of_tiny_cuda_jobs_is_one_gang);
  rm_tree(root);
  return check_summary();
}
