/* test_gang.c — a gang of tiny reduce jobs in one launch
 * (kind_reduce_ops.gang_run, gpu_reduce_rows) on a real GPU, against each
 * job run alone on cuda (kind_reduce_ops.run, B_CUDA): every result BIT
 * FOR BIT the same (memcmp), results NaN-poisoned first.
 *
 * Cases: the seeds' 100 datasets x sum(x**2) over 10^4 float64; mean, var,
 * std (ddof 1), norm, min, max of x*y+1 over two inputs; float32 inputs
 * with a float32 result; sizes from 2 to 2^15, the kind's gang_max (one
 * part per row, several), 256 jobs of 2^15 (64 MiB of stacked input: more
 * than one staging chunk);
 * a member canceled before the launch fails alone (canceled), the others
 * are right; plans of another expression or size get another key, one
 * with an axis or over gang_max none. The gang's members each get a share of
 * the launch's phase times. Exits 77 without a GPU.
 */
#include <stdio.h>
#include <stdlib.h>

#include "compute/array/arrayval.h"
#include "util/util.h"
#include "gpu_test_util.h"

static int alloc_heap(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  (void)ctx;
  *out = tu_poisoned(dt, ndim, shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

static tenv test_env(void) {
  tenv env;
  memset(&env, 0, sizeof env);
  env.owner = "";
  env.max_elems = INT64_MAX;
  return env;
}

/* params of job g: fmt with (len, seed) for each of its inputs */
static void *prepare(const char *params, terr *e) {
  tenv env = test_env();
  json_t *p = json_loads(params, 0, NULL);
  CHECK_MSG(p != NULL, "bad test params %s", params);
  if (!p) return NULL;
  job_estimate est;
  void *plan = NULL;
  CHECK_MSG(kind_reduce_ops.check(p, &env, &est, e) == 0, "%s", e->message);
  CHECK_MSG(kind_reduce_ops.prepare(p, &env, &plan, e) == 0, "%s", e->message);
  json_decref(p); /* the plan keeps what it needs */
  return plan;
}

/* n jobs of params made by fmt(g): the gang against each alone. cancel:
 * the member canceled before the launch (-1: none). Returns the number of
 * results that differ. */
static int run_case(const char *what, int n, const char *fmt, int len,
                    int cancel) {
  terr e;
  terr_clear(&e);
  void **plans = calloc((size_t)n, sizeof *plans);
  tu_job *jobs = calloc((size_t)n, sizeof *jobs);
  job_ctx **ctx = calloc((size_t)n, sizeof *ctx);
  tarray **gang = calloc((size_t)n, sizeof *gang), **alone = calloc((size_t)n, sizeof *alone);
  int *rc = calloc((size_t)n, sizeof *rc);
  terr *es = calloc((size_t)n, sizeof *es);
  char key0[8192], key[8192], params[1024];
  int bad = 0;
  for (int g = 0; g < n; g++) {
    snprintf(params, sizeof params, fmt, len, 1000 + g, len, 5000 + g);
    plans[g] = prepare(params, &e);
    if (!plans[g]) return n;
    CHECK_MSG(kind_reduce_ops.gang_key(plans[g], g ? key : key0, sizeof key),
              "%s: job %d has no gang key", what, g);
    if (g) CHECK_MSG(strcmp(key, key0) == 0, "%s: keys differ", what);
    tu_job_init(&jobs[g], 0);
    jobs[g].ctx.result_alloc = alloc_heap;
    ctx[g] = &jobs[g].ctx;
  }
  if (cancel >= 0) atomic_store(&jobs[cancel].stop, 1);
  double t0 = t_now_ms();
  kind_reduce_ops.gang_run(plans, n, ctx, gang, rc, es);
  double gang_ms = t_now_ms() - t0;
  double h2d = 0;
  for (int g = 0; g < n; g++) h2d += jobs[g].ctx.t_h2d;
  double alone_ms = 0;
  for (int g = 0; g < n; g++) {
    if (g == cancel) {
      CHECK_MSG(rc[g] == T_ECANCELED, "%s: canceled member rc %d", what, rc[g]);
      tarray_free(gang[g]);
      continue;
    }
    CHECK_MSG(rc[g] == 0, "%s: member %d: %s", what, g, es[g].message);
    tu_job j;
    tu_job_init(&j, 0);
    j.ctx.result_alloc = alloc_heap;
    terr_clear(&e);
    t0 = t_now_ms();
    CHECK_MSG(kind_reduce_ops.run(plans[g], B_CUDA, &j.ctx, &alone[g], &e) == 0,
              "%s: alone %d: %s", what, g, e.message);
    alone_ms += t_now_ms() - t0;
    if (rc[g] || !gang[g] || !alone[g]) {
      bad++;
      continue;
    }
    size_t bytes = (size_t)alone[g]->size * tdtype_size(alone[g]->dtype);
    if (gang[g]->dtype != alone[g]->dtype || gang[g]->size != alone[g]->size ||
        memcmp(gang[g]->data, alone[g]->data, bytes) != 0) {
      if (bad < 3)
        fprintf(stderr, "%s: job %d: gang %.17g, alone %.17g\n", what, g,
                tarray_get(gang[g], 0), tarray_get(alone[g], 0));
      bad++;
    }
    tarray_free(gang[g]);
    tarray_free(alone[g]);
  }
  CHECK_MSG(bad == 0, "%s: %d of %d results differ from the job alone", what,
            bad, n);
  printf("  %-34s %4d jobs x %8d: gang %7.2f ms, alone %8.2f ms (h2d shares "
         "%.3f ms)\n", what, n, len, gang_ms, alone_ms, h2d);
  for (int g = 0; g < n; g++) kind_reduce_ops.release(plans[g]);
  free(plans), free(jobs), free(ctx), free(gang), free(alone), free(rc), free(es);
  return bad;
}

#define RND(dt) "{\"random\": {\"shape\": [%d], \"seed\": %d}}"

TEST(seeds_sum_of_squares) {
  run_case("sum(x**2) float64 (the seeds)", 100,
           "{\"op\": \"sum\", \"expr\": \"x**2\", \"inputs\": {\"x\": " RND("float64")
           "}}", 10000, -1);
}

TEST(every_op_two_inputs) {
  static const char *const ops[] = {"sum", "mean", "var", "std", "norm", "min",
                                    "max", "prod"};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    char fmt[512], what[64];
    /* the inputs' %d (length, seed) stay for run_case */
    snprintf(fmt, sizeof fmt,
             "{\"op\": \"%s\", \"expr\": \"x*y + 1\", %s\"inputs\": {"
             "\"x\": {\"random\": {\"shape\": [%%d], \"seed\": %%d}}, "
             "\"y\": {\"random\": {\"shape\": [%%d], \"seed\": %%d}}}}",
             ops[k], strcmp(ops[k], "std") == 0 ? "\"ddof\": 1, " : "");
    snprintf(what, sizeof what, "%s(x*y+1)", ops[k]);
    run_case(what, 37, fmt, 5000, -1);
  }
}

TEST(float32_and_sizes) {
  run_case("sum(x) float32", 64,
           "{\"op\": \"sum\", \"dtype\": \"float32\", \"inputs\": {\"x\": "
           RND("float32") "}}", 10000, -1);
  static const int lens[] = {2, 3, 2047, 2048, 4097, 20000, 32768};
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
    char what[64];
    snprintf(what, sizeof what, "mean(x**2) n=%d", lens[k]);
    run_case(what, 50,
             "{\"op\": \"mean\", \"expr\": \"x**2\", \"inputs\": {\"x\": "
             RND("float64") "}}", lens[k], -1);
  }
  run_case("sum(x) 256 jobs of 2^15", 256,
           "{\"op\": \"sum\", \"inputs\": {\"x\": " RND("float64") "}}",
           32768, -1);
}

TEST(canceled_member) {
  run_case("sum(x**2), member 3 canceled", 20,
           "{\"op\": \"sum\", \"expr\": \"x**2\", \"inputs\": {\"x\": " RND("float64")
           "}}", 10000, 3);
}

TEST(keys_apart) {
  terr e;
  char k1[8192], k2[8192];
  void *a = prepare("{\"op\": \"sum\", \"expr\": \"x**2\", \"inputs\": {\"x\": "
                    "{\"random\": {\"shape\": [100], \"seed\": 1}}}}", &e);
  void *b = prepare("{\"op\": \"sum\", \"expr\": \"x**3\", \"inputs\": {\"x\": "
                    "{\"random\": {\"shape\": [100], \"seed\": 1}}}}", &e);
  void *c = prepare("{\"op\": \"sum\", \"expr\": \"x**2\", \"inputs\": {\"x\": "
                    "{\"random\": {\"shape\": [101], \"seed\": 1}}}}", &e);
  void *d = prepare("{\"op\": \"sum\", \"expr\": \"x**2\", \"axis\": 0, "
                    "\"inputs\": {\"x\": {\"random\": {\"shape\": [100], "
                    "\"seed\": 1}}}}", &e);
  void *big = prepare("{\"op\": \"sum\", \"inputs\": {\"x\": {\"random\": "
                      "{\"shape\": [65536], \"seed\": 1}}}}", &e);
  CHECK(a && b && c && d && big);
  if (!a || !b || !c || !d || !big) return;
  CHECK(!kind_reduce_ops.gang_key(big, k2, sizeof k2)); /* over gang_max */
  kind_reduce_ops.release(big);
  CHECK(kind_reduce_ops.gang_key(a, k1, sizeof k1));
  CHECK(kind_reduce_ops.gang_key(b, k2, sizeof k2) && strcmp(k1, k2) != 0);
  CHECK(kind_reduce_ops.gang_key(c, k2, sizeof k2) && strcmp(k1, k2) != 0);
  CHECK(!kind_reduce_ops.gang_key(d, k2, sizeof k2)); /* an axis: alone */
  kind_reduce_ops.release(a), kind_reduce_ops.release(b);
  kind_reduce_ops.release(c), kind_reduce_ops.release(d);
}

int main(void) {
  CHECK(gpu_init() == 0);
  if (gpu_count() == 0) SKIP_ALL_NO_GPU("no CUDA device (%s)", gpu_unavailable_reason());
  RUN(seeds_sum_of_squares);
  RUN(every_op_two_inputs);
  RUN(float32_and_sizes);
  RUN(canceled_member);
  RUN(keys_apart);
  gpu_shutdown();
  return check_summary();
}
