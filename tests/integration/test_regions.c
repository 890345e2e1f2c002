/* test_regions.c — registered shared-memory regions (/v1/regions,
 * compute/array/region.h): register, list, get, delete; {"region"} inputs
 * of map, reduce, matmul and geodesic and "output": {"region"} results,
 * bit for bit equal to the same job's result over HTTP; and the refusals:
 * a path outside, with "..", through a symlink (403 naming "path"), an
 * empty or missing file, a range past the region's end (400 naming the
 * offset, nothing written), an unknown or another token's region (404),
 * a delete while a queued job uses it (409 naming the job), the per-token
 * byte limit (413), a file truncated while a job is queued and while it
 * reads (the job fails naming the input, the daemon lives), and a file
 * grown or replaced after registration (the region is what was mapped).
 *
 * The test maps each file itself (MAP_SHARED), as a client does: it writes
 * inputs there and reads the results the daemon wrote, no byte over HTTP.
 */
#include <math.h>
#include <sys/mman.h>

#include "harness.h"

static srv S;
static char L[256], OUT[256]; /* the allowed dir; a dir outside it */

static const char *LONG_JOB = LONG_SERIAL_JOB;

/* A client's region file: created under L (size bytes), mapped shared. */
typedef struct cregion {
  char path[400];
  char id[64];
  void *p;
  size_t bytes;
} cregion;

static int cregion_make(cregion *c, const char *name, size_t bytes) {
  memset(c, 0, sizeof *c);
  snprintf(c->path, sizeof c->path, "%s/%s", L, name);
  int fd = open(c->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) return -1;
  c->p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  c->bytes = bytes;
  return c->p == MAP_FAILED ? -1 : 0;
}

static void cregion_unmap(cregion *c) {
  if (c->p && c->p != MAP_FAILED) munmap(c->p, c->bytes);
  c->p = NULL;
}

/* POST /v1/regions {"path"}: the status; the id into c->id on 201. */
static long register_path(srv *s, const char *path, char *id, size_t cap,
                          resp *keep) {
  char body[700];
  snprintf(body, sizeof body, "{\"path\":\"%s\"}", path);
  resp r = req(s, "POST", "/v1/regions", "application/json", body);
  long st = r.status;
  if (st == 201 && id) {
    json_t *o = resp_json(&r);
    snprintf(id, cap, "%s", o ? jstr(o, "id") : "");
    json_decref(o);
  }
  if (keep)
    *keep = r;
  else
    resp_free(&r);
  return st;
}

static json_t *run_job(srv *s, const char *body) {
  long st;
  json_t *j = submit(s, "?wait=60", body, &st);
  if (!j) return NULL;
  const char *status = jstr(j, "status");
  if (status && strcmp(status, "succeeded") && strcmp(status, "failed")) {
    char id[64];
    snprintf(id, sizeof id, "%s", jstr(j, "id"));
    json_decref(j);
    j = wait_job(s, id, 120);
  }
  return j;
}

static int succeeded(json_t *j) {
  int ok = j && strcmp(jstr(j, "status"), "succeeded") == 0;
  if (!ok && j) {
    char *t = json_dumps(j, JSON_COMPACT);
    fprintf(stderr, "job: %.600s\n", t ? t : "");
    free(t);
  }
  return ok;
}

/* The .npy data bytes of a job's result over HTTP (malloc'd, *n). */
static char *http_result(srv *s, json_t *job, size_t *n) {
  const char *href = jstr(json_object_get(job, "result"), "href");
  if (!href) return NULL;
  char path[256];
  snprintf(path, sizeof path, "%s?format=npy", href);
  resp r = req(s, "GET", path, NULL, NULL);
  char *out = NULL;
  if (r.status == 200 && r.len > 10) {
    size_t hl = (size_t)(unsigned char)r.body[8] |
                (size_t)(unsigned char)r.body[9] << 8;
    *n = r.len - 10 - hl;
    out = malloc(*n + 1);
    if (out) memcpy(out, r.body + 10 + hl, *n);
  }
  resp_free(&r);
  return out;
}

TEST(register_list_get_delete) {
  cregion c;
  CHECK(cregion_make(&c, "a.bin", 1 << 16) == 0);
  resp r;
  CHECK(register_path(&S, c.path, c.id, sizeof c.id, &r) == 201);
  json_t *o = resp_json(&r);
  CHECK(strncmp(c.id, "r_", 2) == 0);
  CHECK(json_integer_value(json_object_get(o, "bytes")) == 1 << 16);
  CHECK(strcmp(jstr(o, "path"), c.path) == 0);
  json_decref(o);
  resp_free(&r);
  r = req(&S, "GET", "/v1/regions", NULL, NULL);
  o = resp_json(&r);
  json_t *list = json_object_get(o, "regions");
  int seen = 0;
  for (size_t i = 0; i < json_array_size(list); i++)
    seen += strcmp(jstr(json_array_get(list, i), "id"), c.id) == 0;
  CHECK(r.status == 200 && seen == 1);
  json_decref(o);
  resp_free(&r);
  char path[128];
  snprintf(path, sizeof path, "/v1/regions/%s", c.id);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  cregion_unmap(&c);
  unlink(c.path);
}

TEST(paths_refused) {
  char p[600], q[600];
  resp r;
  snprintf(p, sizeof p, "%s/outside.bin", OUT);
  int fd = open(p, O_RDWR | O_CREAT, 0600);
  CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
  close(fd);
  CHECK(register_path(&S, p, NULL, 0, &r) == 403);
  CHECK(is_error(&r, 403, "permission_denied", "path"));
  resp_free(&r);
  snprintf(q, sizeof q, "%s/../%s/outside.bin", L, strrchr(OUT, '/') + 1);
  CHECK(register_path(&S, q, NULL, 0, &r) == 403);
  CHECK(is_error(&r, 403, "permission_denied", "path"));
  resp_free(&r);
  snprintf(q, sizeof q, "%s/link.bin", L);
  CHECK(symlink(p, q) == 0);
  CHECK(register_path(&S, q, NULL, 0, &r) == 403);
  CHECK(is_error(&r, 403, "permission_denied", "path"));
  resp_free(&r);
  unlink(q);
  snprintf(q, sizeof q, "%s/missing.bin", L);
  CHECK(register_path(&S, q, NULL, 0, &r) == 404);
  resp_free(&r);
  snprintf(q, sizeof q, "%s/empty.bin", L);
  fd = open(q, O_RDWR | O_CREAT, 0600);
  close(fd);
  CHECK(register_path(&S, q, NULL, 0, &r) == 400);
  CHECK(is_error(&r, 400, "invalid_argument", "path"));
  resp_free(&r);
  unlink(q);
  unlink(p);
  r = req(&S, "POST", "/v1/regions", "application/json", "{\"path\":1}");
  CHECK(is_error(&r, 400, "invalid_argument", "path"));
  resp_free(&r);
  r = req(&S, "POST", "/v1/regions", "application/json",
          "{\"path\":\"/x\",\"size\":1}");
  CHECK(is_error(&r, 400, "invalid_argument", "size"));
  resp_free(&r);
}

/* A job with and without region input/output: the region's output equals
 * the HTTP result byte for byte; no .npy header in the region. `params`
 * holds "%s" where the inputs go (the region form, then the inline one). */
static void same_as_http(const char *kind, const char *params_region,
                         const char *params_http, cregion *c,
                         int64_t out_off) {
  char body[4096];
  snprintf(body, sizeof body,
           "{\"kind\":\"%s\",\"backend\":\"cpu\",\"params\":%s,"
           "\"output\":{\"region\":\"%s\",\"offset\":%lld}}",
           kind, params_region, c->id, (long long)out_off);
  json_t *a = run_job(&S, body);
  CHECK(succeeded(a));
  json_t *out = a ? json_object_get(a, "output") : NULL;
  CHECK(out && strcmp(jstr(out, "region"), c->id) == 0 &&
        json_integer_value(json_object_get(out, "offset")) == out_off);
  json_t *res = a ? json_object_get(a, "result") : NULL;
  CHECK(res && jstr(res, "region") && !jstr(res, "href"));
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/result", a ? jstr(a, "id") : "");
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 409, "conflict", "id") && strstr(r.body, c->id));
  resp_free(&r);
  snprintf(body, sizeof body,
           "{\"kind\":\"%s\",\"backend\":\"cpu\",\"params\":%s}", kind,
           params_http);
  json_t *b = run_job(&S, body);
  CHECK(succeeded(b));
  size_t n = 0;
  char *want = b ? http_result(&S, b, &n) : NULL;
  CHECK(want && n > 0);
  CHECK(res && json_integer_value(json_object_get(res, "bytes")) == (int64_t)n);
  CHECK_MSG(want && memcmp((char *)c->p + out_off, want, n) == 0,
            "%s: the region's bytes differ from the HTTP result", kind);
  free(want);
  json_decref(a);
  json_decref(b);
}

/* Upload n float64 at x as an array of shape rows x cols (cols 0: 1-D);
 * its id into id. */
static void upload_f64(const double *x, int64_t rows, int64_t cols, char *id,
                       size_t cap) {
  char *npy = NULL;
  size_t nl = 0;
  FILE *m = open_memstream(&npy, &nl);
  char hdr[128];
  int hn = cols ? snprintf(hdr, sizeof hdr,
                           "{'descr': '<f8', 'fortran_order': False, "
                           "'shape': (%lld, %lld), }",
                           (long long)rows, (long long)cols)
                : snprintf(hdr, sizeof hdr,
                           "{'descr': '<f8', 'fortran_order': False, "
                           "'shape': (%lld,), }", (long long)rows);
  int pad = (64 - (10 + hn + 1) % 64) % 64;
  unsigned short hl = (unsigned short)(hn + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, m);
  fwrite(&hl, 2, 1, m);
  fwrite(hdr, 1, (size_t)hn, m);
  for (int i = 0; i < pad; i++) fputc(' ', m);
  fputc('\n', m);
  fwrite(x, 8, (size_t)(rows * (cols ? cols : 1)), m);
  fclose(m);
  resp r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", npy, (long)nl,
                NULL);
  json_t *o = resp_json(&r);
  CHECK(r.status == 201 || r.status == 200);
  snprintf(id, cap, "%s", o && jstr(o, "id") ? jstr(o, "id") : "");
  json_decref(o);
  resp_free(&r);
  free(npy);
}

/* The .npy data bytes at an href (+ ?format=npy). */
static char *http_npy(srv *s, const char *href, size_t *n) {
  json_t *fake = json_pack("{s:{s:s}}", "result", "href", href);
  char *out = http_result(s, fake, n);
  json_decref(fake);
  return out;
}

/* A kNN (two parts) into the region: each part at the offset the job
 * record states (the first at the output's offset, the next at the next
 * multiple of 64), bit-equal to the parts over HTTP. */
static void knn_parts_in_a_region(cregion *c, const char *pa) {
  char body[2048];
  snprintf(body, sizeof body,
           "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":{\"points\":"
           "{\"region\":\"%s\",\"offset\":8192,\"dtype\":\"float64\","
           "\"shape\":[50,2]},\"query\":{\"knn\":{\"k\":3}}},\"output\":"
           "{\"region\":\"%s\",\"offset\":300000}}", c->id, c->id);
  json_t *a = run_job(&S, body);
  CHECK(succeeded(a));
  json_t *parts = json_object_get(json_object_get(a, "result"), "parts");
  CHECK(json_array_size(parts) == 2);
  json_t *p0 = json_array_get(parts, 0), *p1 = json_array_get(parts, 1);
  CHECK(p0 && strcmp(jstr(p0, "name"), "distance") == 0 &&
        json_integer_value(json_object_get(p0, "offset")) == 300000);
  CHECK(p1 && strcmp(jstr(p1, "name"), "index") == 0 &&
        json_integer_value(json_object_get(p1, "offset")) == 301248);
  snprintf(body, sizeof body,
           "{\"kind\":\"geodesic\",\"backend\":\"cpu\",\"params\":{\"points\":"
           "{\"array\":\"%s\"},\"query\":{\"knn\":{\"k\":3}}}}", pa);
  json_t *b = run_job(&S, body);
  CHECK(succeeded(b));
  char href[128];
  size_t n0 = 0, n1 = 0;
  snprintf(href, sizeof href, "/v1/jobs/%s/result/distance", jstr(b, "id"));
  char *d = http_npy(&S, href, &n0);
  snprintf(href, sizeof href, "/v1/jobs/%s/result/index", jstr(b, "id"));
  char *ix = http_npy(&S, href, &n1);
  CHECK(d && ix && n0 == 1200 && n1 == 1200);
  CHECK(d && memcmp((char *)c->p + 300000, d, n0) == 0);
  CHECK(ix && memcmp((char *)c->p + 301248, ix, n1) == 0);
  free(d);
  free(ix);
  json_decref(a);
  json_decref(b);
}

TEST(every_kind_reads_and_writes_a_region) {
  cregion c;
  CHECK(cregion_make(&c, "k.bin", 1 << 20) == 0);
  CHECK(register_path(&S, c.path, c.id, sizeof c.id, NULL) == 201);
  double *x = c.p;
  for (int i = 0; i < 1000; i++) x[i] = i * 0.25 - 7;
  /* geodesic points [50, 2] at byte 8192 */
  double *pts = (double *)((char *)c.p + 8192);
  for (int i = 0; i < 50; i++)
    pts[2 * i] = -40 + i * 1.5, pts[2 * i + 1] = -120 + i * 4.75;
  char a1[64], a2[64], a3[64], pa[64];
  upload_f64(x, 1000, 0, a1, sizeof a1);
  upload_f64(x, 10, 100, a2, sizeof a2);
  upload_f64(x, 100, 10, a3, sizeof a3);
  upload_f64(pts, 50, 2, pa, sizeof pa);
  char pr[2048], ph[2048];
  snprintf(pr, sizeof pr,
           "{\"expr\":\"x*x+2*x+1\",\"inputs\":{\"x\":{\"region\":\"%s\","
           "\"offset\":0,\"dtype\":\"float64\",\"shape\":[1000]}}}", c.id);
  snprintf(ph, sizeof ph,
           "{\"expr\":\"x*x+2*x+1\",\"inputs\":{\"x\":{\"array\":\"%s\"}}}",
           a1);
  same_as_http("map", pr, ph, &c, 65536);
  snprintf(pr, sizeof pr,
           "{\"op\":\"sum\",\"expr\":\"x*x\",\"axis\":1,\"inputs\":{\"x\":"
           "{\"region\":\"%s\",\"dtype\":\"float64\",\"shape\":[10,100]}}}",
           c.id);
  snprintf(ph, sizeof ph,
           "{\"op\":\"sum\",\"expr\":\"x*x\",\"axis\":1,\"inputs\":{\"x\":"
           "{\"array\":\"%s\"}}}", a2);
  same_as_http("reduce", pr, ph, &c, 131072);
  snprintf(pr, sizeof pr,
           "{\"a\":{\"region\":\"%s\",\"dtype\":\"float64\",\"shape\":"
           "[10,100]},\"b\":{\"region\":\"%s\",\"dtype\":\"float64\","
           "\"shape\":[100,10]}}", c.id, c.id);
  snprintf(ph, sizeof ph, "{\"a\":{\"array\":\"%s\"},\"b\":{\"array\":"
           "\"%s\"}}", a2, a3);
  same_as_http("matmul", pr, ph, &c, 196608);
  snprintf(pr, sizeof pr,
           "{\"points\":{\"region\":\"%s\",\"offset\":8192,\"dtype\":"
           "\"float64\",\"shape\":[50,2]}}", c.id);
  snprintf(ph, sizeof ph, "{\"points\":{\"array\":\"%s\"}}", pa);
  same_as_http("geodesic", pr, ph, &c, 262144);
  knn_parts_in_a_region(&c, pa);
  /* the inputs were read in place, never written */
  CHECK(x[999] == 999 * 0.25 - 7 && pts[99] == -120 + 49 * 4.75);
  cregion_unmap(&c);
}

/* A body mapping x from region id at offset with n elements, into the
 * output region at out_off (-1: no output). */
static void region_map_body(char *buf, size_t cap, const char *id,
                            int64_t off, int64_t n, int64_t out_off,
                            const char *backend, const char *expr) {
  char o[200] = "";
  if (out_off >= 0)
    snprintf(o, sizeof o, ",\"output\":{\"region\":\"%s\",\"offset\":%lld}",
             id, (long long)out_off);
  snprintf(buf, cap,
           "{\"kind\":\"map\",\"backend\":\"%s\",\"params\":{\"expr\":"
           "\"%s\",\"inputs\":{\"x\":{\"region\":\"%s\",\"offset\":%lld,"
           "\"dtype\":\"float64\",\"shape\":[%lld]}}}%s}",
           backend, expr, id, (long long)off, (long long)n, o);
}

/* A result too big for the heap is allocated in the output region itself
 * (compute/sched/run_result.c): computed in place, every element right. */
TEST(big_result_computed_in_place) {
  cregion c;
  size_t n = 2000000;
  CHECK(cregion_make(&c, "big.bin", 2 * n * 8 + 4096) == 0);
  double *x = c.p, *y = (double *)((char *)c.p + n * 8 + 4096);
  for (size_t i = 0; i < n; i++) x[i] = (double)i * 0.5, y[i] = -1;
  CHECK(register_path(&S, c.path, c.id, sizeof c.id, NULL) == 201);
  const char *backends[] = {"cpu", "serial"};
  for (int b = 0; b < 2; b++) {
    char body[2048];
    region_map_body(body, sizeof body, c.id, 0, (int64_t)n,
                    (int64_t)(n * 8 + 4096), backends[b], "x*2+1");
    json_t *j = run_job(&S, body);
    CHECK(succeeded(j));
    json_decref(j);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += y[i] != x[i] * 2 + 1;
    CHECK_MSG(bad == 0, "%s: %zu wrong elements", backends[b], bad);
    for (size_t i = 0; i < n; i++) y[i] = -1;
  }
  char path[128];
  snprintf(path, sizeof path, "/v1/regions/%s", c.id);
  resp r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  cregion_unmap(&c);
  unlink(c.path);
}

TEST(ranges_past_the_end_and_unknown_ids) {
  cregion c;
  CHECK(cregion_make(&c, "r.bin", 8192) == 0);
  CHECK(register_path(&S, c.path, c.id, sizeof c.id, NULL) == 201);
  memset(c.p, 0x5a, 8192);
  char body[2048];
  region_map_body(body, sizeof body, c.id, 4096, 513, -1, "cpu", "x+1");
  resp r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 400, "invalid_argument", "params.inputs.x.offset"));
  resp_free(&r);
  region_map_body(body, sizeof body, c.id, 4, 10, -1, "cpu", "x+1");
  r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 400, "invalid_argument", "params.inputs.x.offset"));
  resp_free(&r);
  /* output past the end: 400 at submit, nothing written */
  region_map_body(body, sizeof body, c.id, 0, 512, 4096 + 8, "cpu", "x+1");
  r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 400, "invalid_argument", "output.offset"));
  resp_free(&r);
  int untouched = 1;
  for (int i = 0; i < 8192; i++)
    untouched &= ((unsigned char *)c.p)[i] == 0x5a;
  CHECK(untouched);
  region_map_body(body, sizeof body, "r_0123456789abcdef", 0, 1, -1, "cpu",
                  "x+1");
  r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 404, "not_found", "params.inputs.x.region"));
  resp_free(&r);
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":1}},"
           "\"output\":{\"region\":\"r_nope\"}}");
  r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 404, "not_found", "output.region"));
  resp_free(&r);
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":"
           "{\"region\":\"%s\",\"dtype\":\"int8\",\"shape\":[1]}}}}", c.id);
  r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 400, "invalid_argument", "params.inputs.x.dtype"));
  resp_free(&r);
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":"
           "{\"region\":\"%s\",\"dtype\":\"float64\",\"shape\":[1],"
           "\"extra\":1}}}}", c.id);
  r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(r.status == 400);
  resp_free(&r);
  char path[128];
  snprintf(path, sizeof path, "/v1/regions/%s", c.id);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  cregion_unmap(&c);
  unlink(c.path);
}

/* Start LONG_JOB (one thread: everything after it queues); its id. */
static void start_long(char *lid, size_t cap) {
  long st;
  json_t *l = submit(&S, "", LONG_JOB, &st);
  snprintf(lid, cap, "%s", l ? jstr(l, "id") : "");
  json_decref(l);
  CHECK(wait_running(&S, lid));
}

static void cancel(const char *id) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", id);
  resp r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
}

TEST(delete_while_queued_is_409) {
  cregion c;
  CHECK(cregion_make(&c, "d.bin", 8192) == 0);
  CHECK(register_path(&S, c.path, c.id, sizeof c.id, NULL) == 201);
  char lid[64], qid[64], body[2048], path[128];
  start_long(lid, sizeof lid);
  region_map_body(body, sizeof body, c.id, 0, 512, 4096, "cpu", "x+1");
  long st;
  json_t *q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  snprintf(qid, sizeof qid, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
  snprintf(path, sizeof path, "/v1/regions/%s", c.id);
  resp r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(is_error(&r, 409, "conflict", "id"));
  CHECK(strstr(r.body, qid) != NULL);
  resp_free(&r);
  cancel(lid);
  json_t *j = wait_job(&S, qid, 120);
  CHECK(succeeded(j));
  json_decref(j);
  CHECK(((double *)c.p)[512 + 3] == ((double *)c.p)[3] + 1);
  r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  cregion_unmap(&c);
  unlink(c.path);
}

/* The job failed naming field, its message holding why; daemon alive. */
static void fails_naming(json_t *j, const char *field, const char *why) {
  CHECK(j && strcmp(jstr(j, "status"), "failed") == 0);
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *m = err ? jstr(err, "message") : NULL;
  CHECK_MSG(m && strstr(m, field) && strstr(m, why), "message %s",
            m ? m : "-");
  CHECK(srv_healthy(&S));
}

TEST(truncated_while_queued_and_while_read) {
  cregion c;
  size_t n = 4000000, bytes = n * 8;
  CHECK(cregion_make(&c, "t.bin", bytes) == 0);
  for (size_t i = 0; i < n; i++) ((double *)c.p)[i] = (double)i * 1e-6;
  CHECK(register_path(&S, c.path, c.id, sizeof c.id, NULL) == 201);
  char lid[64], qid[64], body[2048];
  start_long(lid, sizeof lid);
  region_map_body(body, sizeof body, c.id, 0, 1000, -1, "cpu", "x+1");
  long st;
  json_t *q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  snprintf(qid, sizeof qid, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
  cregion_unmap(&c);
  CHECK(truncate(c.path, 4096) == 0);
  cancel(lid);
  json_t *j = wait_job(&S, qid, 120);
  fails_naming(j, "params.inputs.x", "shorter than when it was registered");
  json_decref(j);
  /* sized again: usable, the mapping is the one registered */
  CHECK(truncate(c.path, (off_t)bytes) == 0);
  j = run_job(&S, body);
  CHECK(succeeded(j));
  json_decref(j);
  /* cut while a slow serial job reads it: the guard's zeros, a failure */
  region_map_body(body, sizeof body, c.id, 0, (int64_t)n, -1, "serial",
                  "sin(x)*cos(x)*exp(-abs(x))*log(abs(x)+2)*sqrt(abs(x)+1)*"
                  "tanh(x)*atan(x)*sin(x*2)*cos(x*3)*exp(sin(x))");
  q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  snprintf(qid, sizeof qid, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
  CHECK(wait_reading(&S, qid));
  CHECK(truncate(c.path, 4096) == 0);
  j = wait_job(&S, qid, 120);
  fails_naming(j, "params.inputs.x", "truncated");
  json_decref(j);
  /* an output region cut short before the run: the job fails naming
   * "output", nothing said to be written */
  {
    cregion o;
    CHECK(cregion_make(&o, "o.bin", 1 << 16) == 0);
    CHECK(register_path(&S, o.path, o.id, sizeof o.id, NULL) == 201);
    cregion_unmap(&o);
    CHECK(truncate(o.path, 100) == 0);
    char ob[1024];
    snprintf(ob, sizeof ob,
             "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\",\"inputs\":{\"x\":"
             "{\"range\":{\"stop\":1000}}}},\"output\":{\"region\":\"%s\","
             "\"offset\":0}}", o.id);
    j = run_job(&S, ob);
    fails_naming(j, "output", "shorter than when it was registered");
    json_decref(j);
    unlink(o.path);
  }
  /* torn for good: a later job fails, saying to register again */
  CHECK(truncate(c.path, (off_t)bytes) == 0);
  region_map_body(body, sizeof body, c.id, 0, 10, -1, "cpu", "x+1");
  j = run_job(&S, body);
  fails_naming(j, "params.inputs.x", "register the file again");
  json_decref(j);
  char path[128];
  snprintf(path, sizeof path, "/v1/regions/%s", c.id);
  resp r = req(&S, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  unlink(c.path);
}

TEST(grown_or_replaced_after_register) {
  cregion c;
  CHECK(cregion_make(&c, "g.bin", 4096) == 0);
  for (int i = 0; i < 512; i++) ((double *)c.p)[i] = i;
  CHECK(register_path(&S, c.path, c.id, sizeof c.id, NULL) == 201);
  CHECK(truncate(c.path, 8192) == 0); /* grown: the region stays 4096 */
  char body[2048];
  region_map_body(body, sizeof body, c.id, 4096, 1, -1, "cpu", "x+1");
  resp r = req(&S, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 400, "invalid_argument", "params.inputs.x.offset"));
  resp_free(&r);
  /* replaced (os.replace): the region is still the inode it mapped */
  char tmp[500];
  snprintf(tmp, sizeof tmp, "%s.new", c.path);
  int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
  close(fd);
  CHECK(rename(tmp, c.path) == 0);
  region_map_body(body, sizeof body, c.id, 0, 4, 64, "cpu", "x+1");
  json_t *j = run_job(&S, body);
  CHECK(succeeded(j));
  json_decref(j);
  CHECK(((double *)c.p)[8 + 3] == 4); /* written into the registered inode */
  cregion_unmap(&c);
  unlink(c.path);
}

TEST(tokens_and_limits) {
  char base[300], d[400], tokens[300];
  snprintf(base, sizeof base, "/tmp/tessel-it-regtok-XXXXXX");
  CHECK(mkdtemp(base) != NULL);
  snprintf(tokens, sizeof tokens, "%s/tokens", base);
  FILE *f = fopen(tokens, "w");
  fprintf(f, "alice:alice-secret-01234\nbob:bob-secret-0123456\n");
  fclose(f);
  snprintf(d, sizeof d, "%s/alice", base);
  CHECK(mkdir(d, 0700) == 0);
  snprintf(d, sizeof d, "%s/bob", base);
  CHECK(mkdir(d, 0700) == 0);
  srv t;
  CHECK(srv_start(&t, S.daemon, "--threads", "1", "--token-file", tokens,
                  "--local-dir", base, "--region-bytes", "1048576",
                  NULL) == 0);
  char p1[500], p2[500], pb[500], id[64], body[2048], path[128];
  snprintf(p1, sizeof p1, "%s/alice/one.bin", base);
  snprintf(p2, sizeof p2, "%s/alice/two.bin", base);
  snprintf(pb, sizeof pb, "%s/bob/b.bin", base);
  CHECK(truncate(p1, 0) != 0 || 1);
  int fd = open(p1, O_RDWR | O_CREAT, 0600);
  CHECK(fd >= 0 && ftruncate(fd, 600000) == 0);
  close(fd);
  fd = open(p2, O_RDWR | O_CREAT, 0600);
  CHECK(fd >= 0 && ftruncate(fd, 600000) == 0);
  close(fd);
  fd = open(pb, O_RDWR | O_CREAT, 0600);
  CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
  close(fd);
  t.token = "alice-secret-01234";
  CHECK(register_path(&t, p1, id, sizeof id, NULL) == 201);
  resp r;
  CHECK(register_path(&t, p2, NULL, 0, &r) == 413); /* past 1 MiB */
  CHECK(strstr(r.body, "region-bytes") != NULL);
  resp_free(&r);
  CHECK(register_path(&t, pb, NULL, 0, &r) == 403); /* bob's directory */
  resp_free(&r);
  t.token = "bob-secret-0123456";
  snprintf(path, sizeof path, "/v1/regions/%s", id);
  r = req(&t, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  r = req(&t, "DELETE", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  r = req(&t, "GET", "/v1/regions", NULL, NULL);
  CHECK(r.status == 200 && strstr(r.body, id) == NULL);
  resp_free(&r);
  region_map_body(body, sizeof body, id, 0, 10, -1, "cpu", "x+1");
  r = req(&t, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 404, "not_found", "params.inputs.x.region"));
  resp_free(&r);
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":1}},"
           "\"output\":{\"region\":\"%s\"}}", id);
  r = req(&t, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 404, "not_found", "output.region"));
  resp_free(&r);
  t.token = "alice-secret-01234";
  r = req(&t, "GET", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  /* per-token count: 16 small ones fit, the 17th is refused */
  r = req(&t, "DELETE", path, NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  long last = 0;
  for (int i = 0; i < 17; i++) {
    char pi[500];
    snprintf(pi, sizeof pi, "%s/alice/n%d.bin", base, i);
    fd = open(pi, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
    close(fd);
    last = register_path(&t, pi, NULL, 0, NULL);
    if (i < 16) CHECK(last == 201);
  }
  CHECK(last == 413);
  srv_cleanup(&t);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  CHECK(system(cmd) == 0);
}

TEST(dropped_at_restart) {
  cregion c;
  CHECK(cregion_make(&c, "s.bin", 4096) == 0);
  CHECK(register_path(&S, c.path, c.id, sizeof c.id, NULL) == 201);
  srv_kill(&S, SIGTERM);
  CHECK(srv_restart(&S) == 0);
  char path[128];
  snprintf(path, sizeof path, "/v1/regions/%s", c.id);
  resp r = req(&S, "GET", path, NULL, NULL);
  CHECK(is_error(&r, 404, "not_found", "id"));
  resp_free(&r);
  cregion_unmap(&c);
  unlink(c.path);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_regions <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  snprintf(L, sizeof L, "/tmp/tessel-it-regions-XXXXXX");
  snprintf(OUT, sizeof OUT, "/tmp/tessel-it-regout-XXXXXX");
  if (!mkdtemp(L) || !mkdtemp(OUT)) return 1;
  if (srv_start(&S, argv[1], "--threads", "1", "--local-dir", L, NULL) != 0)
    return 1;
  RUN(register_list_get_delete);
  RUN(paths_refused);
  RUN(every_kind_reads_and_writes_a_region);
  RUN(big_result_computed_in_place);
  RUN(ranges_past_the_end_and_unknown_ids);
  RUN(delete_while_queued_is_409);
  RUN(truncated_while_queued_and_while_read);
  RUN(grown_or_replaced_after_register);
  RUN(tokens_and_limits);
  RUN(dropped_at_restart);
  CHECK(srv_healthy(&S));
  srv_cleanup(&S);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", L, OUT);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", L);
  curl_global_cleanup();
  return check_summary();
}
