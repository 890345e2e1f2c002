/* test_compare.c — backend "compare" with NaN and infinities (issue 9,
 * item 9), through the real scheduler and store (sched_fixture.h).
 *
 * A test kind "pairs" returns, on each backend, the values its params give
 * for that backend ({"serial": [...], "cpu": [...]}, numbers or the strings
 * "nan", "inf", "-inf"), so every pairing can be put to compare_chunk:
 *   agree     NaN with NaN in the same place, +inf with +inf, -inf with
 *             -inf, finite values within the tolerance next to them;
 *   disagree  NaN against a number, inf against a finite number (which
 *             rtol*|inf| would excuse), +inf against -inf, and a NaN that
 *             moved to another place.
 * Today's main fails every job whose result holds a NaN, even when both
 * sides agree (0 <= atol + rtol*|NaN| is false), and lets +inf pass for
 * -inf or for 1e308.
 */
#include "sched_fixture.h"

typedef struct pplan {
  int64_t n;
  double v[2][16]; /* [0] serial, [1] cpu */
} pplan;

static int pairs_value(const json_t *x, double *out) {
  const char *s = json_string_value(x);
  if (json_is_number(x)) *out = json_number_value(x);
  else if (s && !strcmp(s, "nan")) *out = NAN;
  else if (s && !strcmp(s, "inf")) *out = INFINITY;
  else if (s && !strcmp(s, "-inf")) *out = -INFINITY;
  else return -1;
  return 0;
}

static int pairs_parse(const json_t *params, pplan *p, terr *e) {
  const char *keys[2] = {"serial", "cpu"};
  memset(p, 0, sizeof *p);
  for (int b = 0; b < 2; b++) {
    const json_t *a = json_object_get(params, keys[b]);
    size_t n = json_array_size(a);
    if (!json_is_array(a) || n < 1 || n > 16 || (b && (int64_t)n != p->n))
      return terr_set(e, T_EINVAL, keys[b], -1, "1 to 16 values, both sides");
    p->n = (int64_t)n;
    for (size_t i = 0; i < n; i++)
      if (pairs_value(json_array_get(a, i), &p->v[b][i]))
        return terr_set(e, T_EINVAL, keys[b], (int64_t)i, "bad value");
  }
  return 0;
}

static int pairs_check(const json_t *params, const tenv *env,
                       job_estimate *est, terr *e) {
  pplan p;
  int rc = pairs_parse(params, &p, e);
  if (rc) return rc;
  est->out_dtype = T_F64;
  est->out_ndim = 1;
  est->out_shape[0] = p.n;
  est->out_bytes = est->mem_bytes = p.n * 8;
  est->work = (double)p.n;
  est->ops_per_elem = 1;
  est->size = p.n;
  return 0;
}

static int pairs_prepare(const json_t *params, const tenv *env, void **plan,
                         terr *e) {
  pplan *p = calloc(1, sizeof *p);
  *plan = p;
  if (!p) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  return pairs_parse(params, p, e);
}

static int pairs_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                     terr *e) {
  pplan *p = plan;
  tarray *res = NULL;
  int rc = ctx->result_alloc(ctx, T_F64, 1, &p->n, &res, e);
  if (rc) return rc;
  for (int64_t i = 0; i < p->n; i++)
    tarray_set(res, i, p->v[b == B_CPU ? 1 : 0][i]);
  atomic_store(&ctx->progress_total, 1);
  job_ctx_progress(ctx, 1);
  *result = res;
  return T_OK;
}

static const kind_ops k_pairs = {
    .name = "pairs", .rtol = 1e-9, .atol = 1e-12,
    .tolerance_doc = "test", .check = pairs_check, .prepare = pairs_prepare,
    .run = pairs_run, .release = plan_release};

static const kind_ops *pairs_lookup(const char *name) {
  return strcmp(name, "pairs") == 0 ? &k_pairs : NULL;
}

static int open_pairs(fx *f) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "%s/d%d", root, dir_seq++);
  terr e;
  int rc = store_open(f->dir, &f->st, &e);
  CHECK_MSG(rc == 0, "store_open: %s", e.message);
  if (rc) return rc;
  fx_config(f, 2);
  f->cfg.kind_lookup = pairs_lookup;
  return fx_start(f);
}

TEST(test_compare_nonfinite) {
  static const struct {
    const char *params;
    int agree;
    int64_t bad, first; /* when they disagree */
  } cases[] = {
      /* the sqrt(x) of [-1, 4] */
      {"{\"serial\":[\"nan\",2],\"cpu\":[\"nan\",2]}", 1, 0, 0},
      {"{\"serial\":[\"nan\",\"inf\",\"-inf\",1,0],"
       "\"cpu\":[\"nan\",\"inf\",\"-inf\",1.0000000000001,1e-13]}", 1, 0, 0},
      {"{\"serial\":[\"nan\",\"nan\",\"nan\"],\"cpu\":[\"nan\",\"nan\",\"nan\"]}",
       1, 0, 0},
      {"{\"serial\":[1,\"nan\"],\"cpu\":[1,2]}", 0, 1, 1},
      {"{\"serial\":[1,2],\"cpu\":[\"nan\",2]}", 0, 1, 0},
      {"{\"serial\":[\"nan\",2],\"cpu\":[2,\"nan\"]}", 0, 2, 0},
      {"{\"serial\":[5,\"inf\"],\"cpu\":[5,1e308]}", 0, 1, 1},
      {"{\"serial\":[5,1e308],\"cpu\":[5,\"inf\"]}", 0, 1, 1},
      {"{\"serial\":[\"inf\"],\"cpu\":[\"-inf\"]}", 0, 1, 0},
      {"{\"serial\":[\"-inf\",3],\"cpu\":[\"inf\",3]}", 0, 1, 0},
      {"{\"serial\":[\"inf\"],\"cpu\":[\"nan\"]}", 0, 1, 0},
      {"{\"serial\":[\"nan\",1],\"cpu\":[\"nan\",1.5]}", 0, 1, 1},
  };
  fx f;
  if (open_pairs(&f)) return;
  enum { NC = sizeof cases / sizeof cases[0] };
  char ids[NC][T_ID_MAX];
  for (int i = 0; i < NC; i++)
    CHECK(submit(&f, "pairs", cases[i].params, "compare", 5, 0, ids[i]) == 0);
  for (int i = 0; i < NC; i++) {
    store_job j;
    if (!wait_final(&f, ids[i], &j)) continue;
    const char *st = job_status_name(j.status);
    if (cases[i].agree) {
      CHECK_MSG(!strcmp(st, "succeeded"), "%s: %s %s", cases[i].params, st,
                j.error_message ? j.error_message : "");
      CHECK_MSG(j.max_abs_diff <= 1e-12, "%s: max_abs_diff %g",
                cases[i].params, j.max_abs_diff);
    } else {
      char want[96];
      snprintf(want, sizeof want,
               "disagree at %lld element(s) (first at index %lld)",
               (long long)cases[i].bad, (long long)cases[i].first);
      CHECK_MSG(!strcmp(st, "failed") && j.error_message &&
                    strstr(j.error_message, want),
                "%s: %s %s (want '%s')", cases[i].params, st,
                j.error_message ? j.error_message : "", want);
    }
    store_job_clear(&j);
  }
  fx_close(&f);
}

int main(void) {
  t_log_level = T_LOG_WARN;
  snprintf(root, sizeof root, "/tmp/tessel_cmp_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_compare_nonfinite);
  rm_tree(root);
  return check_summary();
}
