/* test_sched_parts.c — results of several named arrays (job_ctx.result_part)
 * through the scheduler, the store and the job's JSON, with a fake kind.
 *
 *   parts  {"n": rows, "nparts": 2|3, "mode": ...}: part 0 "distance"
 *          float64 [n, 2] = 0.5 + i; part 1 "index" int64 [n, 2] =
 *          2^60 + i (beyond 2^53: a float would lose the last bits); part 2
 *          "count" float32 [n]. Modes: "ok"; "int_off" (the cpu run's index
 *          is one larger at element 3: compare must see it exactly);
 *          "fail_after" (fails after naming part 1); "bad_name", "dup",
 *          "order", "too_many" (a refused result_part, returned); "ignore"
 *          (a refused result_part, ignored: the run still fails).
 *
 * Checked: the files (<id>.npy and <id>.<name>.npy, no temporaries left),
 * the int64 file read back exactly (mapped as int64), the store row's
 * parts document, the job's JSON ("parts" with href, no server paths),
 * GET .../result/{name} through jobs_result_part_get (404 naming the part,
 * 409 while running), delete and expiry returning every file, compare part
 * by part (agreeing; an int64 part off by one beyond 2^53 disagreeing,
 * named), failures leaving no file, result_part misuse failing the job with
 * the reason, part 0 kept in the row with parts 1.. in files, a start
 * removing the result files of a job whose end never committed, and an
 * "output" file job with parts failing naming output.file.
 */
#include "compute/array/parts.h"
#include "sched_fixture.h"

#define BIG ((int64_t)1 << 60)

typedef struct pplan {
  int64_t n;
  int nparts;
  char mode[16];
} pplan;

static int parts_check(const json_t *params, const tenv *env,
                       job_estimate *est, terr *e) {
  json_int_t n = 0;
  if (json_unpack((json_t *)params, "{s:I}", "n", &n) != 0 || n < 1)
    return terr_set(e, T_EINVAL, "params.n", -1, "must be a positive integer");
  est->out_dtype = T_F64;
  est->out_ndim = 2;
  est->out_shape[0] = n;
  est->out_shape[1] = 2;
  est->out_bytes = n * 16;
  est->mem_bytes = n * 48;
  est->work = (double)n;
  est->size = n;
  return T_OK;
}

static int parts_prepare(const json_t *params, const tenv *env, void **plan,
                         terr *e) {
  pplan *p = calloc(1, sizeof *p);
  json_int_t n = 0, np = 2;
  const char *mode = "ok";
  json_unpack((json_t *)params, "{s:I, s?I, s?s}", "n", &n, "nparts", &np,
              "mode", &mode);
  p->n = n;
  p->nparts = (int)np;
  snprintf(p->mode, sizeof p->mode, "%s", mode);
  *plan = p;
  return T_OK;
}

static int parts_run(void *plan, tbackend b, job_ctx *ctx, tarray **result,
                     terr *e) {
  pplan *p = plan;
  int64_t sh[2] = {p->n, 2};
  tarray *d = NULL, *ix = NULL, *c = NULL;
  int rc = ctx->result_alloc(ctx, T_F64, 2, sh, &d, e);
  if (rc) return rc;
  if ((rc = ctx->result_alloc(ctx, T_I64, 2, sh, &ix, e))) {
    tarray_free(d);
    return rc;
  }
  for (int64_t i = 0; i < d->size; i++) {
    ((double *)d->data)[i] = 0.5 + (double)i;
    ((int64_t *)ix->data)[i] = BIG + i;
  }
  if (!strcmp(p->mode, "int_off") && b == B_CPU && ix->size > 3)
    ((int64_t *)ix->data)[3] += 1;
  if (!ctx->result_part) {
    tarray_free(d);
    tarray_free(ix);
    return terr_set(e, T_EINTERNAL, "", -1, "no result_part hook");
  }
  const char *mode = p->mode;
  if ((rc = ctx->result_part(ctx, 0, "distance", d, e))) goto fail_both;
  if (!strcmp(mode, "order")) {
    rc = ctx->result_part(ctx, 2, "index", ix, e); /* skips 1: refused */
    goto fail_d;
  }
  rc = ctx->result_part(ctx, 1,
                        !strcmp(mode, "bad_name") ? "Index-1"
                        : !strcmp(mode, "dup")    ? "distance"
                                                  : "index",
                        ix, e);
  /* From here ix is the scheduler's, refused or not. */
  if (rc && strcmp(mode, "ignore") != 0) goto fail_d;
  if (!strcmp(mode, "fail_after")) {
    rc = terr_set(e, T_EINVAL, "params.mode", -1, "failing after a part");
    goto fail_d;
  }
  if (p->nparts >= 3 || !strcmp(mode, "too_many")) {
    int64_t n1 = p->n;
    if ((rc = ctx->result_alloc(ctx, T_F32, 1, &n1, &c, e))) goto fail_d;
    for (int64_t i = 0; i < p->n; i++) ((float *)c->data)[i] = (float)i;
    if ((rc = ctx->result_part(ctx, 2, "count", c, e))) goto fail_d;
  }
  if (!strcmp(mode, "too_many")) {
    for (int k = 3; k <= JOB_MAX_PARTS; k++) {
      int64_t one = 1;
      tarray *x = NULL;
      const char *name = k == 3 ? "extra_a" : "extra_b";
      if ((rc = ctx->result_alloc(ctx, T_F64, 1, &one, &x, e))) goto fail_d;
      if ((rc = ctx->result_part(ctx, k, name, x, e))) goto fail_d;
    }
  }
  if (!strcmp(mode, "ignore")) { /* a refusal the kind does not pass on */
    tarray *x = NULL;
    int64_t one = 1;
    if (ctx->result_alloc(ctx, T_F64, 1, &one, &x, e) == T_OK)
      (void)ctx->result_part(ctx, p->nparts >= 3 ? 3 : 2, "BAD", x, e);
  }
  *result = d;
  return T_OK;
fail_both:
  tarray_free(ix);
fail_d:
  tarray_free(d);
  return rc ? rc : terr_set(e, T_EINTERNAL, "", -1, "failed");
}

static void pplan_free(void *plan) { free(plan); }

static const kind_ops k_parts = {
    .name = "parts", .rtol = 1e-9, .atol = 0,
    .tolerance_doc = "test", .check = parts_check, .prepare = parts_prepare,
    .run = parts_run, .release = pplan_free};
static const kind_ops *parts_kinds(const char *name) {
  return strcmp(name, "parts") == 0 ? &k_parts : test_kinds(name);
}

static int fx_open_parts(fx *f, int64_t row_max) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "%s/d%d", root, dir_seq++);
  terr e;
  int rc = store_open(f->dir, &f->st, &e);
  CHECK_MSG(rc == 0, "store_open: %s", e.message);
  if (rc) return rc;
  fx_config(f, 2);
  f->cfg.kind_lookup = parts_kinds;
  f->cfg.row_result_max = row_max;
  return fx_start(f);
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* Files in <dir>/results whose name starts with id. */
static int count_job_files(const char *dir, const char *id) {
  char path[400];
  snprintf(path, sizeof path, "%s/results", dir);
  DIR *d = opendir(path);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (!strncmp(de->d_name, id, strlen(id))) n++;
  if (d) closedir(d);
  return n;
}

/* Run one parts job to its end; *j filled (caller clears). */
static int run_parts(fx *f, const char *params, const char *backend,
                     store_job *j, char id[T_ID_MAX]) {
  CHECK(submit(f, "parts", params, backend, 5, 0, id) == 0);
  int ok = wait_final(f, id, j);
  wait_idle(f);
  return ok;
}

/* The int64 part's file: mapped as int64, its values exact. */
static void check_index_file(const char *path, int64_t n) {
  tarray *m = NULL;
  terr e;
  CHECK_MSG(tarray_map_npy(path, &m, &e) == 0 && m, "%s", e.message);
  if (!m) return;
  CHECK(m->dtype == T_I64 && m->ndim == 2 && m->shape[0] == n &&
        m->shape[1] == 2);
  int bad = 0;
  for (int64_t i = 0; i < m->size; i++)
    bad += ((const int64_t *)m->data)[i] != BIG + i;
  CHECK_MSG(bad == 0, "%d int64 values differ", bad);
  tarray_free(m);
  size_t len = 0;
  char *buf = slurp(path, &len);
  CHECK(buf && len > 64 && strstr(buf + 10, "'descr': '<i8'") != NULL);
  free(buf);
}

TEST(test_parts_kept_listed_served_deleted) {
  fx f;
  if (fx_open_parts(&f, 0)) return;
  store_job j;
  char id[T_ID_MAX];
  if (!run_parts(&f, "{\"n\":50,\"nparts\":3}", "cpu", &j, id)) {
    fx_close(&f);
    return;
  }
  CHECK_MSG(j.status == JOB_SUCCEEDED, "%s", j.error_message);
  /* The job's result fields are part 0's. */
  CHECK_STR(j.result.dtype, "float64");
  CHECK(j.result.ndim == 2 && j.result.shape[0] == 50 && j.result.shape[1] == 2);
  char p0[400], p1[400], p2[400];
  snprintf(p0, sizeof p0, "%s/results/%s.npy", f.dir, id);
  snprintf(p1, sizeof p1, "%s/results/%s.index.npy", f.dir, id);
  snprintf(p2, sizeof p2, "%s/results/%s.count.npy", f.dir, id);
  CHECK_STR(j.result_path, p0);
  CHECK(file_exists(p0) && file_exists(p1) && file_exists(p2));
  CHECK(count_job_files(f.dir, id) == 3 && count_tmp_files(f.dir) == 0);
  check_index_file(p1, 50);
  /* The store's document. */
  tparts tp;
  terr e;
  CHECK_MSG(tparts_parse(j.result_parts, &tp, &e) == 0, "%s", e.message);
  CHECK(tp.n == 3);
  if (tp.n == 3) {
    CHECK_STR(tp.p[0].name, "distance");
    CHECK(tp.p[0].path == NULL && tp.p[0].dtype == T_F64 && tp.p[0].bytes == 800);
    CHECK_STR(tp.p[1].name, "index");
    CHECK(tp.p[1].dtype == T_I64 && tp.p[1].ndim == 2 && tp.p[1].bytes == 800);
    CHECK_STR(tp.p[1].path, p1);
    CHECK_STR(tp.p[2].name, "count");
    CHECK(tp.p[2].dtype == T_F32 && tp.p[2].ndim == 1 && tp.p[2].bytes == 200);
  }
  tparts_clear(&tp);
  /* The job's JSON: parts with href, never a path of the server's. */
  size_t len = 0;
  char *text = jobs_json(NULL, &j, 0, &len);
  json_t *doc = json_loads(text ? text : "", 0, NULL);
  json_t *parts = json_object_get(json_object_get(doc, "result"), "parts");
  CHECK(json_array_size(parts) == 3);
  char href[200];
  snprintf(href, sizeof href, "/v1/jobs/%s/result/index", id);
  json_t *ix = json_array_get(parts, 1);
  CHECK_STR(json_string_value(json_object_get(ix, "name")), "index");
  CHECK_STR(json_string_value(json_object_get(ix, "dtype")), "int64");
  CHECK_STR(json_string_value(json_object_get(ix, "href")), href);
  CHECK(json_integer_value(json_object_get(ix, "bytes")) == 800);
  CHECK(json_array_size(json_object_get(ix, "shape")) == 2);
  CHECK(text && !strstr(text, "\"path\"") && !strstr(text, f.dir));
  json_decref(doc);
  free(text);
  /* GET .../result/{name}: each part, 404 naming an unknown one. */
  jobs J = {.st = f.st, .sc = f.s};
  jobs_result r;
  CHECK(jobs_result_part_get(&J, id, NULL, "index", &r, &e) == 0);
  CHECK_STR(r.path, p1);
  CHECK(r.layout == NULL);
  jobs_result_clear(&r);
  CHECK(jobs_result_part_get(&J, id, NULL, "distance", &r, &e) == 0);
  CHECK_STR(r.path, p0);
  jobs_result_clear(&r);
  CHECK(jobs_result_part_get(&J, id, NULL, "nope", &r, &e) == T_ENOTFOUND);
  CHECK_STR(e.field, "name");
  CHECK_MSG(strstr(e.message, "'nope'") && strstr(e.message, "index"), "%s",
            e.message);
  CHECK(jobs_result_part_get(&J, id, NULL, "../x", &r, &e) == T_ENOTFOUND);
  CHECK(jobs_result_part_get(&J, id, NULL, NULL, &r, &e) == 0);
  CHECK_STR(r.path, p0);
  jobs_result_clear(&r);
  /* Chained: a map of {"result": id, "part": "index"} reads the int64
   * part as float64; without "part", the first part. */
  const char *chains[2] = {
      "{\"expr\":\"x\",\"inputs\":{\"x\":{\"result\":\"%s\",\"part\":\"index\"}}}",
      "{\"expr\":\"x\",\"inputs\":{\"x\":{\"result\":\"%s\"}}}"};
  for (int c = 0; c < 2; c++) {
    char params[300], cid[T_ID_MAX];
    snprintf(params, sizeof params, chains[c], id);
    CHECK(submit(&f, "map", params, "cpu", 5, 0, cid) == 0);
    store_job cj;
    if (!wait_final(&f, cid, &cj)) continue;
    CHECK_MSG(cj.status == JOB_SUCCEEDED, "%s", cj.error_message);
    CHECK_STR(cj.result.dtype, "float64");
    tarray *m = NULL;
    CHECK(cj.result_path && tarray_map_npy(cj.result_path, &m, &e) == 0 && m &&
          m->size == 100);
    int bad = 0;
    for (int64_t i = 0; m && i < m->size; i++)
      bad += tarray_get(m, i) != (c == 0 ? (double)(BIG + i) : 0.5 + (double)i);
    CHECK_MSG(bad == 0, "chain %d: %d values", c, bad);
    tarray_free(m);
    store_job_clear(&cj);
  }
  char params[300], cid[T_ID_MAX];
  snprintf(params, sizeof params,
           "{\"expr\":\"x\",\"inputs\":{\"x\":{\"result\":\"%s\",\"part\":\"nope\"}}}", id);
  CHECK(submit(&f, "map", params, "cpu", 5, 0, cid) == 0);
  store_job cj;
  if (wait_final(&f, cid, &cj)) {
    CHECK(cj.status == JOB_FAILED && cj.error_message &&
          strstr(cj.error_message, "no part 'nope'"));
    store_job_clear(&cj);
  }
  wait_idle(&f);
  /* Delete: every part's file is named for removal. */
  char **paths = NULL;
  int n = 0;
  CHECK(store_job_delete(f.st, id, NULL, &paths, &n, &e) == 0);
  CHECK(n == 3);
  int seen = 0;
  for (int i = 0; i < n; i++) {
    seen |= (!strcmp(paths[i], p0)) | (!strcmp(paths[i], p1)) << 1 |
            (!strcmp(paths[i], p2)) << 2;
    free(paths[i]);
  }
  free(paths);
  CHECK(seen == 7);
  store_job_clear(&j);
  fx_close(&f);
}

TEST(test_parts_expiry_and_row) {
  fx f;
  /* Part 0 small enough for the row; parts 1.. are files anyway. */
  if (fx_open_parts(&f, 4096)) return;
  store_job j;
  char id[T_ID_MAX];
  if (!run_parts(&f, "{\"n\":4}", "serial", &j, id)) {
    fx_close(&f);
    return;
  }
  CHECK_MSG(j.status == JOB_SUCCEEDED, "%s", j.error_message);
  CHECK(j.result_path == NULL); /* in the row */
  char p1[400];
  snprintf(p1, sizeof p1, "%s/results/%s.index.npy", f.dir, id);
  CHECK(file_exists(p1));
  check_index_file(p1, 4);
  void *npy = NULL;
  size_t len = 0;
  terr e;
  CHECK(store_job_result_npy(f.st, id, NULL, &npy, &len, &e) == 0);
  tarray *a = NULL;
  CHECK(npy && npy_parse_result(npy, len, 1000, &a, &e) == 0 && a &&
        a->dtype == T_F64 && tarray_get(a, 1) == 1.5);
  tarray_free(a);
  free(npy);
  store_job_clear(&j);
  /* Expiry names the part files too. */
  char **paths = NULL;
  int n = 0;
  CHECK(store_expire(f.st, t_wall_ms() + 1000000, &paths, &n, &e) == 0);
  int found = 0;
  for (int i = 0; i < n; i++) {
    found += !strcmp(paths[i], p1);
    free(paths[i]);
  }
  free(paths);
  CHECK_MSG(found == 1, "%d paths, part file listed %d times", n, found);
  fx_close(&f);
}

TEST(test_parts_compare) {
  fx f;
  if (fx_open_parts(&f, 0)) return;
  store_job j;
  char id[T_ID_MAX];
  if (run_parts(&f, "{\"n\":20,\"nparts\":3}", "compare", &j, id)) {
    CHECK_MSG(j.status == JOB_SUCCEEDED, "%s", j.error_message);
    CHECK(j.compare && strstr(j.compare, "\"cpu\""));
    CHECK(j.max_abs_diff == 0);
    CHECK(count_job_files(f.dir, id) == 3 && count_tmp_files(f.dir) == 0);
    store_job_clear(&j);
  }
  /* The cpu run's int64 part is 2^60 + 4 instead of 2^60 + 3: as doubles
   * they are equal, exactly they are not. */
  if (run_parts(&f, "{\"n\":20,\"mode\":\"int_off\"}", "compare", &j, id)) {
    CHECK(j.status == JOB_FAILED);
    CHECK_MSG(j.error_message && strstr(j.error_message, "part 'index'") &&
                  strstr(j.error_message, "at 1 element(s) (first at index 3)") &&
                  strstr(j.error_message, "int64 parts exactly") &&
                  !strstr(j.error_message, "part 'distance'"),
              "%s", j.error_message);
    CHECK(count_job_files(f.dir, id) == 0 && count_tmp_files(f.dir) == 0);
    store_job_clear(&j);
  }
  fx_close(&f);
}

TEST(test_parts_failures_leave_nothing) {
  fx f;
  if (fx_open_parts(&f, 0)) return;
  static const struct {
    const char *mode, *want;
  } cases[] = {
      {"fail_after", "failing after a part"},
      {"bad_name", "result part 1 ('Index-1'): the name is not"},
      {"dup", "result part 1 ('distance'): the name is taken"},
      {"order", "result part 2 ('index'): parts are named in order"},
      {"too_many", "result part 4 ('extra_b'): a job has at most 4 parts"},
      {"ignore", "('BAD'): the name is not"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char params[100];
    snprintf(params, sizeof params, "{\"n\":30,\"mode\":\"%s\"}", cases[c].mode);
    store_job j;
    char id[T_ID_MAX];
    if (!run_parts(&f, params, "cpu", &j, id)) continue;
    CHECK_MSG(j.status == JOB_FAILED, "%s: %s", cases[c].mode,
              job_status_name(j.status));
    CHECK_MSG(j.error_message && strstr(j.error_message, cases[c].want),
              "%s: %s", cases[c].mode, j.error_message);
    CHECK(j.result_parts == NULL && j.result_path == NULL);
    CHECK_MSG(count_job_files(f.dir, id) == 0 && count_tmp_files(f.dir) == 0,
              "%s: files left", cases[c].mode);
    store_job_clear(&j);
  }
  fx_close(&f);
}

TEST(test_parts_while_running_and_one_array) {
  fx f;
  if (fx_open_parts(&f, 0)) return;
  jobs J = {.st = f.st, .sc = f.s};
  jobs_result r;
  terr e;
  char gid[T_ID_MAX];
  CHECK(submit(&f, "gate", "{\"n\":1}", "cpu", 5, 0, gid) == 0);
  CHECK(jobs_result_part_get(&J, gid, NULL, "index", &r, &e) == T_ECONFLICT);
  atomic_store(&gate_open, 1);
  store_job j;
  if (wait_final(&f, gid, &j)) store_job_clear(&j);
  wait_idle(&f);
  atomic_store(&gate_open, 0);
  /* A one-array result has no parts: 404 naming the part. */
  CHECK(jobs_result_part_get(&J, gid, NULL, "index", &r, &e) == T_ENOTFOUND);
  CHECK_MSG(strstr(e.message, "'index'") && strstr(e.message, "one array"),
            "%s", e.message);
  CHECK(jobs_result_part_get(&J, gid, NULL, NULL, &r, &e) == 0);
  jobs_result_clear(&r);
  fx_close(&f);
}

/* A job whose end never committed (the process died after renaming its
 * files): its result files are removed at the next start, others stay. */
TEST(test_parts_unfinished_swept_at_start) {
  fx f;
  memset(&f, 0, sizeof f);
  snprintf(f.dir, sizeof f.dir, "%s/d%d", root, dir_seq++);
  terr e;
  CHECK(store_open(f.dir, &f.st, &e) == 0);
  char id[T_ID_MAX], done[T_ID_MAX];
  CHECK(insert_job(f.st, "gate", "{\"n\":1}", "cpu", 5, 0, id) == 0);
  CHECK(insert_job(f.st, "gate", "{\"n\":1}", "cpu", 5, 0, done) == 0);
  store_job_end end = {.status = JOB_CANCELED, .finished_at = 1,
                       .max_abs_diff = NAN, .error_code = "canceled"};
  CHECK(store_job_finish(f.st, done, &end, &e) == 0);
  char res[400], a[500], b[500], c[500];
  snprintf(res, sizeof res, "%s/results", f.dir);
  mkdir(res, 0755);
  snprintf(a, sizeof a, "%s/%s.npy", res, id);
  snprintf(b, sizeof b, "%s/%s.index.npy", res, id);
  snprintf(c, sizeof c, "%s/%s.index.npy", res, done);
  const char *files[] = {a, b, c};
  for (int i = 0; i < 3; i++) {
    FILE *fp = fopen(files[i], "wb");
    if (fp) fclose(fp);
  }
  fx_config(&f, 1);
  f.cfg.kind_lookup = parts_kinds;
  if (fx_start(&f)) return;
  CHECK(!file_exists(a) && !file_exists(b)); /* before any job runs */
  CHECK(file_exists(c));
  fx_close(&f);
}

/* "output": {"file"} holds one array: a job whose run gives several parts
 * fails naming output.file, and leaves nothing in the directory. */
TEST(test_parts_output_file_refused) {
  char out[400];
  snprintf(out, sizeof out, "%s/out%d", root, dir_seq);
  CHECK(mkdir(out, 0755) == 0);
  const char *dirs[1] = {out};
  struct tlocal *local = NULL;
  terr e;
  CHECK_MSG(jobs_local_open(dirs, 1, 0, &local, &e) == 0, "%s", e.message);
  fx f;
  memset(&f, 0, sizeof f);
  snprintf(f.dir, sizeof f.dir, "%s/d%d", root, dir_seq++);
  CHECK(store_open(f.dir, &f.st, &e) == 0);
  fx_config(&f, 2);
  f.cfg.kind_lookup = parts_kinds;
  f.cfg.local = local;
  if (fx_start(&f)) return;
  store_job j;
  memset(&j, 0, sizeof j);
  char file[500];
  snprintf(file, sizeof file, "%s/r.npy", out);
  j.owner = strdup("");
  j.kind = strdup("parts");
  j.params = strdup("{\"n\":40}");
  j.backend_requested = strdup("cpu");
  j.body_hash = strdup("0");
  j.output_file = strdup(file);
  j.max_abs_diff = NAN;
  int existing, retry = 0;
  CHECK(sched_reserve(f.s, &retry, &e) == 0);
  CHECK(store_job_insert(f.st, &j, &existing, &e) == 0);
  CHECK(sched_enqueue(f.s, &j, &e) == 0);
  char id[T_ID_MAX];
  snprintf(id, sizeof id, "%s", j.id);
  store_job_clear(&j);
  if (wait_final(&f, id, &j)) {
    CHECK(j.status == JOB_FAILED);
    CHECK_STR(j.error_code, "invalid_argument");
    CHECK_MSG(j.error_message && strstr(j.error_message, "output.file") &&
                  strstr(j.error_message, "distance, index"),
              "%s", j.error_message);
    store_job_clear(&j);
  }
  wait_idle(&f);
  DIR *d = opendir(out);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
  if (d) closedir(d);
  CHECK_MSG(n == 0, "%d files left in the output directory", n);
  CHECK(count_job_files(f.dir, id) == 0 && count_tmp_files(f.dir) == 0);
  fx_close(&f);
  jobs_local_free(local);
}

/* The document of a result written into an output region: offsets, no
 * paths; read back the same; a mix of offsets and paths refused. */
TEST(test_parts_region_offsets) {
  tparts p;
  memset(&p, 0, sizeof p);
  p.n = 2;
  snprintf(p.p[0].name, sizeof p.p[0].name, "distance");
  snprintf(p.p[1].name, sizeof p.p[1].name, "index");
  p.p[1].dtype = T_I64;
  for (int i = 0; i < 2; i++) {
    p.p[i].ndim = 1;
    p.p[i].shape[0] = 3;
    p.p[i].bytes = 24;
    p.p[i].in_region = 1;
    p.p[i].offset = i ? 128 : 40;
  }
  char *doc = tparts_text(&p);
  tparts q;
  terr e;
  CHECK_MSG(doc && tparts_parse(doc, &q, &e) == 0, "%s", e.message);
  CHECK(q.n == 2 && q.p[0].in_region && q.p[0].offset == 40 &&
        q.p[1].in_region && q.p[1].offset == 128 && !q.p[1].path);
  tparts_clear(&q);
  free(doc);
  const char *mixed =
      "[{\"name\":\"a\",\"dtype\":\"float64\",\"shape\":[1],\"bytes\":8,"
      "\"offset\":0},{\"name\":\"b\",\"dtype\":\"float64\",\"shape\":[1],"
      "\"bytes\":8,\"path\":\"/x.npy\"}]";
  CHECK(tparts_parse(mixed, &q, &e) == T_EIO);
  const char *both =
      "[{\"name\":\"a\",\"dtype\":\"float64\",\"shape\":[1],\"bytes\":8,"
      "\"offset\":0,\"path\":\"/x.npy\"}]";
  CHECK(tparts_parse(both, &q, &e) == T_EIO);
}

int main(void) {
  t_log_level = T_LOG_ERROR;
  snprintf(root, sizeof root, "/tmp/tessel_parts_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  RUN(test_parts_kept_listed_served_deleted);
  RUN(test_parts_expiry_and_row);
  RUN(test_parts_compare);
  RUN(test_parts_failures_leave_nothing);
  RUN(test_parts_while_running_and_one_array);
  RUN(test_parts_unfinished_swept_at_start);
  RUN(test_parts_output_file_refused);
  RUN(test_parts_region_offsets);
  rm_tree(root);
  return check_summary();
}
