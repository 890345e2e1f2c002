/* test_map.c — gpu_map on a real GPU against the CPU backend.
 *
 * The CPU backend's evaluator (expr_eval, what kind_map runs on the CPU) is
 * the reference; inputs are random and non-zero, outputs are NaN-poisoned,
 * and every element must match within the map kind's compare tolerance
 * (|gpu - cpu| <= atol + rtol*|cpu|: 1e-12/1e-12 for float64, 1e-5/1e-5 for
 * float32). Cases: the seeds' expressions, every function and operator,
 * float64 and float32 with mixed input dtypes, broadcasting (row, column,
 * scalar, both sides), inputs bigger than the pinned slots (chunked, with a
 * tail that is not a multiple of 4), resident uploads (the second run's h2d
 * is 0), a job's result kept on the device for a chain (the next job's h2d
 * is 0), a result in a fresh file mapping (prefaulted by the gang), every GPU of the host, the kernel cache (memory, then disk after
 * the memory table is dropped), the kind itself (kind_map_ops run with
 * B_CUDA vs B_CPU), cancellation in the middle of a chunked job, and out of
 * memory. Exits 77 ("SKIPPED: no CUDA device") without a GPU.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#if TESSEL_HAVE_CUDA
#include "compute/kinds/fuse.h"
#include "compute/expr/expr.h"
#include "compute/kinds/gpu_kernels.h"
#include "gpu_test_util.h"

static tarray *cpu_map(const expr *x, const tarray *const *in, tdtype dt,
                       int ndim, const int64_t *shape) {
  tarray *out = tarray_new(dt, ndim, shape);
  void *scratch = aligned_alloc(64, (expr_scratch_size(x) + 63) / 64 * 64);
  for (int64_t s = 0; s < out->size; s += EXPR_BLOCK) {
    int64_t n = out->size - s < EXPR_BLOCK ? out->size - s : EXPR_BLOCK;
    expr_eval(x, in, out, s, n, scratch);
  }
  free(scratch);
  return out;
}

/* Elements outside |g - c| <= atol + rtol*|c| (NaN must match NaN). */
static int64_t mismatches(const tarray *g, const tarray *c, double rtol,
                          double atol, int64_t *first) {
  int64_t bad = 0;
  *first = -1;
  for (int64_t i = 0; i < c->size; i++) {
    double a = tarray_get(g, i), b = tarray_get(c, i);
    int ok = (isnan(a) && isnan(b)) || a == b || fabs(a - b) <= atol + rtol * fabs(b);
    if (!ok && bad++ == 0) *first = i;
  }
  return bad;
}

/* One map: GPU vs CPU. in_shapes[i] / in_dt[i] per input (names in
 * expression order). Returns the job's h2d ms. */
static double check_map(int dev, const char *src, tdtype dt, int nin,
                        const int *nds, const int64_t (*shapes)[4],
                        const tdtype *in_dt, const char *const *ids,
                        uint64_t seed, double lo, double hi) {
  terr e;
  terr_clear(&e);
  expr *x = NULL;
  CHECK_MSG(expr_compile(src, &x, &e) == 0, "%s", e.message);
  if (!x) return -1;
  CHECK(expr_ninputs(x) == nin);
  tarray *in[8];
  int ond = 0;
  int64_t osh[T_MAXDIM];
  for (int i = 0; i < nin; i++) {
    in[i] = tu_random(in_dt[i], nds[i], shapes[i], seed + (uint64_t)i, lo, hi);
    if (nds[i] > ond) ond = nds[i];
  }
  for (int d = 0; d < ond; d++) osh[d] = 1;
  for (int i = 0; i < nin; i++)
    for (int k = 0; k < nds[i]; k++)
      if (shapes[i][k] != 1) osh[ond - nds[i] + k] = shapes[i][k];
  tarray *ref = cpu_map(x, (const tarray *const *)in, dt, ond, osh);
  tarray *out = tu_poisoned(dt, ond, osh);
  tu_job j;
  tu_job_init(&j, dev);
  int rc = gpu_map(dev, x, (const tarray *const *)in, ids, out, &j.ctx, &e);
  CHECK_MSG(rc == 0, "%s: %s", src, e.message);
  int64_t first;
  double rtol = dt == T_F64 ? 1e-12 : 1e-5, atol = rtol;
  int64_t bad = mismatches(out, ref, rtol, atol, &first);
  CHECK_MSG(bad == 0, "dev %d %s (%s): %lld bad, first [%lld] gpu %.17g cpu %.17g",
            dev, src, tdtype_name(dt), (long long)bad, (long long)first,
            first >= 0 ? tarray_get(out, first) : 0.0,
            first >= 0 ? tarray_get(ref, first) : 0.0);
  CHECK(atomic_load(&j.ctx.progress_done) == out->size);
  CHECK(atomic_load(&j.ctx.progress_total) == out->size);
  double h2d = j.ctx.t_h2d;
  for (int i = 0; i < nin; i++) tarray_free(in[i]);
  tarray_free(ref);
  tarray_free(out);
  expr_free(x);
  return h2d;
}

static const tdtype F64[4] = {T_F64, T_F64, T_F64, T_F64};
static const tdtype F32[4] = {T_F32, T_F32, T_F32, T_F32};
static const tdtype MIX[4] = {T_F32, T_F64, T_F32, T_F64};

TEST(seed_expressions) {
  const int64_t s1[4][4] = {{100003}, {100003}, {100003}};
  const int nd1[3] = {1, 1, 1};
  for (int dt = 0; dt < 2; dt++) {
    tdtype t = dt ? T_F32 : T_F64;
    const tdtype *idt = dt ? F32 : F64;
    check_map(0, "x**2 + 2*x + 1", t, 1, nd1, s1, idt, NULL, 1, -3, 3);
    check_map(0, "w*x + b", t, 3, nd1, s1, idt, NULL, 2, -3, 3);
    check_map(0, "-b / a", t, 2, nd1, s1, idt, NULL, 3, 0.5, 3);
    check_map(0, "x * x", t, 1, nd1, s1, idt, NULL, 4, -3, 3);
  }
}

TEST(every_function) {
  const int64_t s[4][4] = {{4099}, {4099}};
  const int nd[2] = {1, 1};
  static const char *const ex[] = {
      "sqrt(abs(x)) + cbrt(y) + exp(x) + exp2(y) + expm1(x) + log(abs(x)+1) "
      "+ log2(abs(y)+1) + log10(abs(x)+1) + log1p(abs(y))",
      "sin(x) + cos(y) + tan(x/2) + asin(x/4) + acos(y/4) + atan(x) + "
      "atan2(x, y) + sinh(x) + cosh(y) + tanh(x) + asinh(x) + "
      "acosh(abs(y)+1) + atanh(x/4)",
      "floor(x) + ceil(y) + round(x*3) + trunc(y) + min(x, y) + max(x, y) + "
      "pow(abs(x), y) + hypot(x, y) + fmod(x, y) + x % y",
      "where(x > y and not (x == 0), x, y) + (x <= y or x != y) + (x >= 1) + "
      "(x < pi*e)",
      "x ** 3 - y ** 0.5 * 0 + 1 / (x * y)",
  };
  for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
    check_map(0, ex[k], T_F64, 2, nd, s, F64, NULL, 10 + k, -3, 3);
    check_map(0, ex[k], T_F32, 2, nd, s, MIX, NULL, 20 + k, -3, 3);
  }
}

TEST(broadcasting) {
  /* [300, 257] + [257]; [300, 1] * [1, 257]; scalar; 3-D with a middle 1. */
  const int64_t a[4][4] = {{300, 257}, {257}};
  const int nda[2] = {2, 1};
  check_map(0, "x + 2*y", T_F64, 2, nda, a, F64, NULL, 31, -2, 2);
  check_map(0, "x + 2*y", T_F32, 2, nda, a, MIX, NULL, 32, -2, 2);
  const int64_t b[4][4] = {{300, 1}, {1, 257}};
  const int ndb[2] = {2, 2};
  check_map(0, "x * y - x", T_F64, 2, ndb, b, F64, NULL, 33, -2, 2);
  const int64_t c[4][4] = {{1}, {40, 1, 33}, {40, 7, 33}};
  const int ndc[3] = {1, 3, 3};
  check_map(0, "s * u + v", T_F64, 3, ndc, c, F64, NULL, 34, -2, 2);
  check_map(0, "s * u + v", T_F32, 3, ndc, c, MIX, NULL, 35, -2, 2);
}

TEST(chunked) {
  /* 9 M elements: more than a pinned slot holds; tail of 3. */
  const int64_t s[4][4] = {{9000003}, {9000003}};
  const int nd[2] = {1, 1};
  check_map(0, "x**2 + 2*x + 1", T_F64, 1, nd, s, F64, NULL, 41, -3, 3);
  check_map(0, "w*x + 0.5", T_F32, 2, nd, s, MIX, NULL, 42, -3, 3);
  /* a full-size input beside a broadcast one */
  const int64_t b[4][4] = {{3000, 3001}, {3001}};
  const int ndb[2] = {2, 1};
  check_map(0, "sin(x) * y", T_F64, 2, ndb, b, F64, NULL, 43, -3, 3);
}

TEST(resident) {
  const int64_t s[4][4] = {{6000001}};
  const int nd[1] = {1};
  const char *ids[1] = {"a_TESTMAPRESIDENT0"};
  double h1 = check_map(0, "x*x + 1", T_F64, 1, nd, s, F64, ids, 51, -3, 3);
  double h2 = check_map(0, "x*x + 1", T_F64, 1, nd, s, F64, ids, 51, -3, 3);
  CHECK(h1 > 0);
  CHECK_MSG(h2 == 0, "second run h2d %.3f ms", h2);
  gpu_resident_drop(ids[0]);
}

/* One float64 map x*x + 1 of `in` (resident under in_id when given) into
 * out, as the job job_id whose result is final (keep) or not. Returns its
 * h2d ms; checks every element against the CPU. */
static double map_into(const tarray *in, const char *in_id, tarray *out,
                       const char *job_id, int keep) {
  terr e;
  terr_clear(&e);
  expr *x = NULL;
  CHECK(expr_compile("x*x + 1", &x, &e) == 0);
  if (!x) return -1;
  const tarray *ins[1] = {in};
  const char *ids[1] = {in_id};
  tarray *ref = cpu_map(x, ins, T_F64, in->ndim, in->shape);
  tu_job j;
  tu_job_init(&j, 0);
  j.ctx.job_id = job_id;
  j.ctx.result_is_final = keep;
  CHECK_MSG(gpu_map(0, x, ins, ids, out, &j.ctx, &e) == 0, "%s", e.message);
  int64_t first;
  int64_t bad = mismatches(out, ref, 1e-12, 1e-12, &first);
  CHECK_MSG(bad == 0, "%lld bad, first [%lld]", (long long)bad, (long long)first);
  tarray_free(ref);
  expr_free(x);
  return j.ctx.t_h2d;
}

/* A chain: a job's result computed whole on the device stays there under
 * the job's id, and the next job that names it copies nothing up; a
 * compare run's result (not final) is not kept; a dropped id is gone. */
TEST(result_stays_for_a_chain) {
  const int64_t n[1] = {3000001};
  tarray *in = tu_random(T_F64, 1, n, 91, -2, 2);
  tarray *a = tu_poisoned(T_F64, 1, n), *b = tu_poisoned(T_F64, 1, n),
         *c = tu_poisoned(T_F64, 1, n);
  const char *ja = "j_TESTCHAINA000000000000", *jc = "j_TESTCHAINC000000000000";
  /* a: uploaded input (resident), whole path, result kept as ja */
  CHECK(map_into(in, "a_TESTCHAININPUT00000000", a, ja, 1) > 0);
  /* b reads a's result by id: on the device already */
  /* the router sees it there (its estimate drops the copy) */
  CHECK(gpu_resident_mask(ja, T_F64, (size_t)n[0] * 8) == 1u);
  CHECK(gpu_resident_mask(ja, T_F32, (size_t)n[0] * 8) == 0);
  double h = map_into(a, ja, b, "j_TESTCHAINB000000000000", 1);
  CHECK_MSG(h == 0, "b's h2d %.3f ms, want 0", h);
  /* c, not final (a compare run): its result is not kept */
  map_into(a, ja, c, jc, 0);
  h = map_into(c, jc, b, "j_TESTCHAIND000000000000", 0);
  CHECK_MSG(h > 0, "c's result was kept although not final: h2d %.3f", h);
  gpu_resident_drop(ja);
  CHECK(gpu_resident_mask(ja, T_F64, (size_t)n[0] * 8) == 0);
  h = map_into(a, ja, b, "j_TESTCHAINE000000000000", 0);
  CHECK_MSG(h > 0, "after the drop a's result must be copied up again");
  gpu_resident_drop(jc);
  gpu_resident_drop("a_TESTCHAININPUT00000000");
  gpu_resident_drop("j_TESTCHAINB000000000000");
  tarray_free(in);
  tarray_free(a);
  tarray_free(b);
  tarray_free(c);
}

/* A result in a fresh file mapping (as compute/sched/run.c creates big results) on
 * a disk file system is prefaulted by the gang before it is filled; its
 * every element is right and the flag is spent. */
TEST(result_in_a_file) {
  char dir[] = "/var/tmp/tessel-gpu-XXXXXX", path[256];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/r.npy", dir);
  const int64_t n[1] = {20000003}; /* chunked: more than the slots hold */
  tarray *in = tu_random(T_F64, 1, n, 92, -2, 2);
  tarray *out = NULL;
  terr e;
  CHECK(tarray_create_npy(path, T_F64, 1, n, &out, &e) == 0);
  if (!out) return;
  printf("result mapping prefault: %d\n", out->map_prefault);
  map_into(in, NULL, out, "j_TESTFILE00000000000000", 0);
  CHECK(out->map_prefault == 0);
  tarray_free(out);
  /* whole path: the input resident, the result written after the kernel */
  CHECK(tarray_create_npy(path, T_F64, 1, n, &out, &e) == 0);
  if (out) {
    map_into(in, "a_TESTFILEINPUT000000000", out, "j_TESTFILE00000000000001", 0);
    tarray_free(out);
  }
  gpu_resident_drop("a_TESTFILEINPUT000000000");
  unlink(path);
  rmdir(dir);
  tarray_free(in);
}

TEST(every_gpu) {
  const int64_t s[4][4] = {{5000000}};
  const int nd[1] = {1};
  for (int d = 0; d < gpu_count(); d++)
    check_map(d, "exp(-x*x) + 1", T_F64, 1, nd, s, F64, NULL, 60 + d, -2, 2);
}

TEST(kernel_cache) {
  kcache_stats a, b, c;
  const int64_t s[4][4] = {{1000}};
  const int nd[1] = {1};
  kcache_get_stats(&a);
  check_map(0, "x*7.25 - 3", T_F64, 1, nd, s, F64, NULL, 71, -2, 2);
  kcache_get_stats(&b);
  CHECK(b.compiles == a.compiles + 1);
  check_map(0, "(x * 7.25) - 3.0", T_F64, 1, nd, s, F64, NULL, 72, -2, 2);
  kcache_get_stats(&c);
  CHECK(c.compiles == b.compiles); /* same tree: no compile */
  CHECK(c.module_hits > b.module_hits);
  kcache_reset_memory();
  check_map(0, "x*7.25 - 3", T_F64, 1, nd, s, F64, NULL, 73, -2, 2);
  kcache_get_stats(&a);
  CHECK(a.compiles == c.compiles);
  CHECK(a.disk_hits == c.disk_hits + 1);
}

static int alloc_heap(job_ctx *ctx, tdtype dt, int ndim, const int64_t *shape,
                      tarray **out, terr *e) {
  *out = tu_poisoned(dt, ndim, shape);
  return *out ? 0 : terr_set(e, T_ENOMEM, "", -1, "no memory");
}

/* The kind end to end: the same plan run on the CPU and on the GPU. */
TEST(kind_map_cpu_vs_cuda) {
  static const char *const params[] = {
      "{\"expr\": \"x**2 + 2*x + 1\", \"dtype\": \"float64\", \"inputs\": "
      "{\"x\": {\"random\": {\"shape\": [1000, 1003], \"dist\": \"normal\", "
      "\"seed\": 5}}}}",
      "{\"expr\": \"w*x + b\", \"dtype\": \"float32\", \"inputs\": {"
      "\"w\": {\"random\": {\"shape\": [1003], \"seed\": 6}}, "
      "\"x\": {\"random\": {\"shape\": [1000, 1003], \"seed\": 7}}, "
      "\"b\": 0.25}}",
  };
  tenv env;
  memset(&env, 0, sizeof env);
  env.owner = "";
  env.max_elems = INT64_MAX;
  for (size_t k = 0; k < sizeof params / sizeof params[0]; k++) {
    json_t *p = json_loads(params[k], 0, NULL);
    CHECK(p != NULL);
    terr e;
    terr_clear(&e);
    job_estimate est;
    CHECK_MSG(kind_map_ops.check(p, &env, &est, &e) == 0, "%s", e.message);
    void *plan = NULL;
    CHECK_MSG(kind_map_ops.prepare(p, &env, &plan, &e) == 0, "%s", e.message);
    tarray *r[2] = {NULL, NULL};
    for (int b = 0; b < 2; b++) {
      tu_job j;
      tu_job_init(&j, 0);
      j.ctx.result_alloc = alloc_heap;
      terr_clear(&e);
      CHECK_MSG(kind_map_ops.run(plan, b ? B_CUDA : B_CPU, &j.ctx, &r[b], &e) == 0,
                "%s", e.message);
    }
    double rtol = kind_map_ops.rtol, atol = kind_map_ops.atol;
    if (kind_map_ops.tolerance) kind_map_ops.tolerance(plan, &rtol, &atol);
    int64_t first;
    CHECK(r[0] && r[1] && mismatches(r[1], r[0], rtol, atol, &first) == 0);
    tarray_free(r[0]);
    tarray_free(r[1]);
    kind_map_ops.release(plan);
    json_decref(p);
  }
}

/* Sets the stop flag once the job has made progress. */
static void *canceller(void *p) {
  tu_job *j = p;
  for (int i = 0; i < 200000; i++) {
    if (atomic_load(&j->ctx.progress_done) > 0) break;
    usleep(50);
  }
  atomic_store(&j->stop, 1);
  return NULL;
}

TEST(cancel_mid_job) {
  int64_t n = 100000000; /* 800 MB in, many chunks */
  terr e;
  terr_clear(&e);
  expr *x = NULL;
  CHECK(expr_compile("x*2 + 1", &x, &e) == 0);
  tarray *in = tu_random(T_F64, 1, &n, 81, -1, 1);
  tarray *out = tu_poisoned(T_F64, 1, &n);
  tu_job j;
  tu_job_init(&j, 0);
  pthread_t th;
  pthread_create(&th, NULL, canceller, &j);
  const tarray *ins[1] = {in};
  int rc = gpu_map(0, x, ins, NULL, out, &j.ctx, &e);
  pthread_join(th, NULL);
  CHECK_MSG(rc == T_ECANCELED, "rc %d: %s", rc, e.message);
  int64_t done = atomic_load(&j.ctx.progress_done);
  CHECK_MSG(done > 0 && done < n, "done %lld of %lld", (long long)done, (long long)n);
  CHECK(gpu_healthy(0));
  tarray_free(in);
  tarray_free(out);
  expr_free(x);
  /* The device still works. */
  const int64_t s[4][4] = {{1000}};
  const int nd[1] = {1};
  check_map(0, "x + 1", T_F64, 1, nd, s, F64, NULL, 82, -2, 2);
}

TEST(out_of_memory) {
  /* A broadcast input is uploaded whole: 2 TB of it cannot be. The data
   * pointer is never read (allocation comes first). */
  terr e;
  terr_clear(&e);
  expr *x = NULL;
  CHECK(expr_compile("x + y", &x, &e) == 0);
  tarray big, small, out;
  memset(&big, 0, sizeof big);
  big.dtype = T_F64;
  big.ndim = 2;
  big.shape[0] = 1 << 19;
  big.shape[1] = 1 << 19;
  big.size = big.shape[0] * big.shape[1];
  big.data = &big; /* never read */
  out = big;
  out.shape[0] = 2;
  out.ndim = 3;
  out.shape[1] = 1 << 19;
  out.shape[2] = 1 << 19;
  out.size = 2 * big.size;
  small = out;
  small.ndim = 3;
  small.shape[1] = small.shape[2] = 1;
  small.size = 2;
  tarray *sm = tu_random(T_F64, 3, small.shape, 91, 1, 2);
  const tarray *ins[2] = {&big, sm};
  tu_job j;
  tu_job_init(&j, 0);
  int rc = gpu_map(0, x, ins, NULL, &out, &j.ctx, &e);
  CHECK_MSG(rc == T_ENOMEM, "rc %d: %s", rc, e.message);
  CHECK(gpu_healthy(0));
  tarray_free(sm);
  expr_free(x);
}

int main(void) {
  char dir[] = "/tmp/tessel-gpu-test-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  gpu_config cfg = {dir, 0.5, 0};
  gpu_configure(&cfg);
  CHECK(gpu_init() == 0);
  if (gpu_count() == 0) SKIP_ALL_NO_GPU("no CUDA device (%s)", gpu_unavailable_reason());
  RUN(seed_expressions);
  RUN(every_function);
  RUN(broadcasting);
  RUN(chunked);
  RUN(resident);
  RUN(result_stays_for_a_chain);
  RUN(result_in_a_file);
  RUN(every_gpu);
  RUN(kernel_cache);
  RUN(kind_map_cpu_vs_cuda);
  RUN(cancel_mid_job);
  RUN(out_of_memory);
  gpu_shutdown();
  return check_summary();
}

#else /* !TESSEL_HAVE_CUDA: the fused-kernel layer is not built */
#include "check.h"
int main(void) { SKIP_ALL("CUDA support not built"); }
#endif
