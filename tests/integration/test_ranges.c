/* test_ranges.c — Range on downloads (api/results.c, server/range.c).
 *
 * Against the real daemon, on an uploaded array's data
 * (GET /v1/arrays/{id}/data?format=npy: a file sent with sendfile), on a
 * job's result stored as a file and on a small result kept in the job's
 * row (an in-memory answer):
 *  - "bytes=a-b" at several places (the first byte, the header's end, the
 *    middle, the last byte, a range running past the end): 206,
 *    Content-Range "bytes a-b/len", Accept-Ranges, and exactly the bytes
 *    of the whole answer's slice;
 *  - "bytes=a-" and "bytes=-n" (n larger than the file: all of it);
 *  - a first byte at or past the end, "bytes=-0": 416 with
 *    Content-Range "bytes * / len" (no spaces) and a JSON error naming Range;
 *  - several ranges in one header: 416 naming Range (Tessel sends no
 *    multipart/byteranges);
 *  - a header the parser cannot read (first > last, another unit, junk):
 *    ignored as RFC 9110 says, 200 and the whole;
 *  - format=json and format=csv, and a cut (limit_rows), with a readable
 *    Range: 416 naming Range; with an unreadable one: 200;
 *  - HEAD: 200, the whole length in Content-Length, Accept-Ranges, no body.
 */
#include "harness.h"

static srv S;

/* GET path with a Range header (NULL: none). */
static resp get_range(const char *path, const char *range) {
  char h[256];
  snprintf(h, sizeof h, "Range: %s", range ? range : "");
  return range ? reqx(&S, "GET", path, NULL, NULL, -1, h, NULL)
               : reqx(&S, "GET", path, NULL, NULL, -1, NULL);
}

static int status_of_head(const char *path, long *len, char *ar, size_t arlen) {
  CURL *c = curl_easy_init();
  char url[512];
  snprintf(url, sizeof url, "%s%s", S.base, path);
  resp r;
  memset(&r, 0, sizeof r);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, resp_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  long st = -1;
  curl_off_t cl = -1;
  if (curl_easy_perform(c) == CURLE_OK) {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
  }
  curl_easy_cleanup(c);
  *len = (long)cl;
  if (!resp_header_get(&r, "Accept-Ranges", ar, arlen)) ar[0] = 0;
  return (int)st;
}

/* One range a-b (inclusive; b < 0: "a-"), checked against whole. */
static void check_slice(const char *path, const resp *whole, long a, long b) {
  char range[64], cr[128], want[128], ar[32];
  if (b < 0) snprintf(range, sizeof range, "bytes=%ld-", a);
  else snprintf(range, sizeof range, "bytes=%ld-%ld", a, b);
  long last = b < 0 || b >= (long)whole->len ? (long)whole->len - 1 : b;
  resp r = get_range(path, range);
  CHECK_MSG(r.status == 206, "%s %s: %ld", path, range, r.status);
  snprintf(want, sizeof want, "bytes %ld-%ld/%zu", a, last, whole->len);
  CHECK_MSG(resp_header_get(&r, "Content-Range", cr, sizeof cr) &&
                strcmp(cr, want) == 0,
            "%s: Content-Range '%s', want '%s'", range, cr, want);
  CHECK(resp_header_get(&r, "Accept-Ranges", ar, sizeof ar) &&
        strcmp(ar, "bytes") == 0);
  CHECK_MSG(r.len == (size_t)(last - a + 1) &&
                memcmp(r.body, whole->body + a, r.len) == 0,
            "%s: %zu bytes, not the slice", range, r.len);
  resp_free(&r);
}

static void check_unsat(const char *path, size_t len, const char *range) {
  char cr[128], want[64];
  resp r = get_range(path, range);
  CHECK_MSG(is_error(&r, 416, "range_not_satisfiable", "Range"), "%s", range);
  snprintf(want, sizeof want, "bytes */%zu", len);
  CHECK_MSG(resp_header_get(&r, "Content-Range", cr, sizeof cr) &&
                strcmp(cr, want) == 0,
            "%s: Content-Range '%s'", range, cr);
  resp_free(&r);
}

/* Every rule on one npy download path. */
static void check_npy_path(const char *path) {
  resp whole = get_range(path, NULL);
  CHECK_MSG(whole.status == 200 && whole.len > 128, "%s: %ld", path, whole.status);
  if (whole.status != 200) return;
  long n = (long)whole.len;
  check_slice(path, &whole, 0, 0);
  check_slice(path, &whole, 0, 127);
  check_slice(path, &whole, 100, 200);
  check_slice(path, &whole, n / 2, n / 2 + 4095);
  check_slice(path, &whole, n - 1, n - 1);
  check_slice(path, &whole, n - 10, n + 1000); /* clamped to the end */
  check_slice(path, &whole, n / 3, -1);        /* a- */
  /* -n: the last n bytes; more than the file: the whole. */
  resp r = get_range(path, "bytes=-17");
  CHECK(r.status == 206 && r.len == 17 &&
        memcmp(r.body, whole.body + n - 17, 17) == 0);
  resp_free(&r);
  r = get_range(path, "bytes=-99999999");
  CHECK(r.status == 206 && r.len == whole.len &&
        memcmp(r.body, whole.body, whole.len) == 0);
  resp_free(&r);
  check_unsat(path, whole.len, "bytes=99999999-");
  char past[64];
  snprintf(past, sizeof past, "bytes=%ld-%ld", n, n + 5);
  check_unsat(path, whole.len, past);
  check_unsat(path, whole.len, "bytes=-0");
  check_unsat(path, whole.len, "bytes=99999999999999999999999-");
  check_unsat(path, whole.len, "bytes=0-1,4-5"); /* several: refused */
  check_unsat(path, whole.len, "bytes=0-1, -3");
  /* Unreadable: ignored, the whole (RFC 9110 14.2). */
  const char *bad[] = {"bytes=5-2", "items=0-1", "bytes 0-1", "bytes=a-b",
                       "bytes=-", "bytes=", "bytes=0-1;x", "bytes=+1-2", NULL};
  for (int i = 0; bad[i]; i++) {
    r = get_range(path, bad[i]);
    CHECK_MSG(r.status == 200 && r.len == whole.len &&
                  memcmp(r.body, whole.body, whole.len) == 0,
              "'%s': %ld, %zu bytes", bad[i], r.status, r.len);
    resp_free(&r);
  }
  resp_free(&whole);
}

/* The same path as JSON / CSV / a cut: a readable Range is 416. */
static void check_refused(const char *base) {
  const char *q[] = {"?format=json", "?format=csv", "?format=npy&limit_rows=1",
                     NULL};
  char path[300];
  for (int i = 0; q[i]; i++) {
    snprintf(path, sizeof path, "%s%s", base, q[i]);
    resp r = get_range(path, "bytes=0-9");
    CHECK_MSG(is_error(&r, 416, "range_not_satisfiable", "Range"), "%s", path);
    resp_free(&r);
    r = get_range(path, "bytes=9-0"); /* unreadable: ignored */
    CHECK_MSG(r.status == 200, "%s unreadable range: %ld", path, r.status);
    resp_free(&r);
  }
}

static char *upload(long n) {
  /* A 2-D float64 array n x 4, .npy v1, built here. */
  char hdr[128];
  int hl = snprintf(hdr, sizeof hdr,
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (%ld, 4), }",
                    n);
  while ((hl + 11) % 64) hdr[hl++] = ' ';
  hdr[hl - 1] = '\n';
  size_t len = 10 + (size_t)hl + (size_t)n * 32;
  char *b = malloc(len);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (char)(hl & 0xff);
  b[9] = (char)(hl >> 8);
  memcpy(b + 10, hdr, (size_t)hl);
  for (long i = 0; i < n * 4; i++) { /* unaligned data: memcpy */
    double v = (double)i * 0.5 - 3.0;
    memcpy(b + 10 + hl + (size_t)i * 8, &v, 8);
  }
  resp r = reqx(&S, "POST", "/v1/arrays", "application/x-npy", b, (long)len, NULL);
  free(b);
  json_t *j = resp_json(&r);
  char *id = j && jstr(j, "id") ? strdup(jstr(j, "id")) : NULL;
  CHECK_MSG(r.status == 201 && id, "upload: %ld %.200s", r.status, r.body);
  json_decref(j);
  resp_free(&r);
  return id;
}

TEST(array_data) {
  char *id = upload(50000); /* 1.6 MB */
  if (!id) return;
  char path[256];
  snprintf(path, sizeof path, "/v1/arrays/%s/data?format=npy", id);
  check_npy_path(path);
  snprintf(path, sizeof path, "/v1/arrays/%s/data", id);
  check_refused(path);
  /* HEAD: the length, no body. */
  long len = -1;
  char ar[32];
  snprintf(path, sizeof path, "/v1/arrays/%s/data?format=npy", id);
  CHECK(status_of_head(path, &len, ar, sizeof ar) == 200);
  CHECK_MSG(len == 128 + 50000 * 32, "HEAD Content-Length %ld", len);
  CHECK(strcmp(ar, "bytes") == 0);
  free(id);
}

TEST(job_results) {
  char *id = upload(40000);
  if (!id) return;
  char body[512];
  /* A result stored as a file. */
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"x*2+1\","
           "\"inputs\":{\"x\":{\"array\":\"%s\"}}}}", id);
  json_t *j = submit(&S, "?wait=30", body, NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  const char *href = j ? jstr(json_object_get(j, "result"), "href") : NULL;
  char path[300];
  if (href) {
    snprintf(path, sizeof path, "%s?format=npy", href);
    check_npy_path(path);
    check_refused(href);
  }
  json_decref(j);
  /* A small result kept in the job's row: answered from memory. */
  j = submit(&S, "?wait=30",
             "{\"kind\":\"map\",\"params\":{\"expr\":\"x+1\","
             "\"inputs\":{\"x\":[[1,2,3,4],[5,6,7,8],[9,10,11,12]]}}}", NULL);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  href = j ? jstr(json_object_get(j, "result"), "href") : NULL;
  if (href) {
    snprintf(path, sizeof path, "%s?format=npy", href);
    check_npy_path(path);
  }
  json_decref(j);
  free(id);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_ranges <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) return 1;
  RUN(array_data);
  RUN(job_results);
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
