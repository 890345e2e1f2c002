/* test_upload_errors.c — refused uploads say what is wrong with the body.
 *
 * Every refusal of an .npy or CSV upload is a 400 whose error names the
 * field "body" (as JSON uploads already did) and, for CSV, the row; bodies
 * that main stored with fewer values or shape [0] (a UTF-8 byte-order mark,
 * CR-only line endings, a quoted number, a line of junk) either keep every
 * value or are refused, and a refused upload leaves no array behind.
 */
#include "harness.h"

static srv S;

/* POST a body to /v1/arrays; 400 invalid_argument with field "body" and
 * `needle` in the message. */
static int refused(const char *ctype, const char *body, long len, const char *needle) {
  resp r = reqx(&S, "POST", "/v1/arrays", ctype, body, len, NULL);
  int ok = is_error(&r, 400, "invalid_argument", "body");
  if (ok && needle && !strstr(r.body, needle)) {
    fprintf(stderr, "message lacks '%s': %s\n", needle, r.body);
    ok = 0;
  }
  resp_free(&r);
  return ok;
}

/* Upload CSV, expect 201/200 with the shape text `shape` (e.g. "[3, 2]"). */
static int stored(const char *body, const char *shape) {
  resp r = req(&S, "POST", "/v1/arrays", "text/csv", body);
  json_t *j = r.status / 100 == 2 ? resp_json(&r) : NULL;
  char got[128] = "";
  json_t *sh = j ? json_object_get(j, "shape") : NULL;
  size_t i;
  json_t *v;
  size_t n = 0;
  n += (size_t)snprintf(got + n, sizeof got - n, "[");
  json_array_foreach(sh, i, v)
    n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", i ? ", " : "",
                          (long long)json_integer_value(v));
  snprintf(got + n, sizeof got - n, "]");
  int ok = j && strcmp(got, shape) == 0;
  if (!ok) fprintf(stderr, "'%s': status %ld, shape %s, want %s: %s\n", body, r.status,
                   got, shape, r.body);
  json_decref(j);
  resp_free(&r);
  return ok;
}

TEST(csv_examples) {
  CHECK(stored("\xEF\xBB\xBF" "1,2\n3,4\n5,6\n", "[3, 2]"));
  CHECK(stored("1,2\r3,4\r5,6\r", "[3, 2]"));
  CHECK(stored("\"1\",2\n", "[2]"));
  CHECK(refused("text/csv", "0x10", -1, "row 1"));
  CHECK(refused("text/csv", "1;2", -1, "row 1"));
  CHECK(refused("text/csv", ".", -1, "row 1"));
  CHECK(refused("text/csv", "x,y\n", -1, "no data rows"));
  CHECK(refused("text/csv", "1,2\n3,x\n", -1, "row 2, column 2"));
  CHECK(refused("text/csv", "1,2\n3,4,5\n", -1, "row 2"));
}

TEST(npy_refusals_name_body) {
  static const char hdr[] = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  char buf[256];
  /* bad magic */
  CHECK(refused("application/x-npy", "NOTNUMPY........", 16, NULL));
  /* a header that runs past the body */
  memcpy(buf, "\x93NUMPY\x01\x00\xff\x00", 10);
  CHECK(refused("application/x-npy", buf, 10, NULL));
  /* data shorter than the shape says */
  size_t h = strlen(hdr);
  size_t total = (10 + h + 1 + 63) & ~(size_t)63;
  memset(buf, ' ', sizeof buf);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (char)(total - 10);
  buf[9] = 0;
  memcpy(buf + 10, hdr, h);
  buf[total - 1] = '\n';
  memset(buf + total, 0, 8); /* one float64 of the two */
  CHECK(refused("application/x-npy", buf, (long)(total + 8), "data is"));
  /* fortran order */
  static const char fhdr[] = "{'descr': '<f8', 'fortran_order': True, 'shape': (1,), }";
  h = strlen(fhdr);
  memcpy(buf + 10, fhdr, h);
  memset(buf + 10 + h, ' ', total - 10 - h - 1);
  buf[total - 1] = '\n';
  CHECK(refused("application/x-npy", buf, (long)(total + 8), NULL));
}

TEST(refusals_store_nothing) {
  resp r = req(&S, "GET", "/v1/arrays", NULL, NULL);
  json_t *j = resp_json(&r);
  json_t *items = j ? json_object_get(j, "arrays") : NULL;
  /* the three CSV bodies stored above hold two distinct arrays (the BOM and
   * the CR-only one are the same [3, 2] values: one id); nothing else */
  CHECK_MSG(items && json_array_size(items) == 2, "%s", r.body);
  json_decref(j);
  resp_free(&r);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_upload_errors <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "2", NULL) != 0) return 1;
  RUN(csv_examples);
  RUN(npy_refusals_name_body);
  RUN(refusals_store_nothing);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
