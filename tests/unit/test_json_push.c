/* test_json_push.c — the JSON push reader against jansson + jarray_parse.
 *
 * Each body of a list (scalars, nested lists of every depth to the cap,
 * empty lists at each level, numbers at the edges of Jansson's grammar and
 * of int64 and double, -0, float32 rounding, and every refusal
 * jarray_parse words: too deep, not a number or an array, ragged longer,
 * shorter, a number where a list was expected, a list where a number was,
 * strings / objects / booleans / null as elements, the element cap) is
 * fed to the push reader split at every point into two pieces and one
 * byte at a time, as float64 and float32. Accepted: the same shape and the
 * same bytes as jarray_parse's array. Refused: the same code, field,
 * position and message where the body has one problem; a syntax error is
 * "invalid JSON at line L column C: ..." naming "body" for both (the
 * words differ). The documented differences (the first problem in the
 * text is reported) are checked as such. Then random documents, split at
 * random points: both accept with equal arrays, or both refuse.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/array/tarray.h"
#include "push_mem.h"

static int push(const char *s, size_t len, const size_t *cuts, int ncuts,
                tdtype dt, int64_t cap, mem *m, int *ndim, int64_t *shape,
                terr *e) {
  tvals_out o = {mem_write, NULL, m};
  json_push *p;
  terr_clear(e);
  int rc = json_push_new(dt, cap, &o, &p, e);
  size_t at = 0;
  for (int i = 0; !rc && i <= ncuts; i++) {
    size_t to = i < ncuts ? cuts[i] : len;
    rc = json_push_feed(p, s + at, to - at, e);
    at = to;
  }
  if (!rc) rc = json_push_end(p, ndim, shape, e);
  json_push_free(p);
  return rc;
}

/* The service's one-shot path before streaming: jansson, then jarray. */
static int one_shot(const char *s, size_t len, tdtype dt, int64_t cap,
                    tarray **a, terr *e) {
  *a = NULL;
  terr_clear(e);
  json_error_t je;
  json_t *v = json_loadb(s, len, JSON_DECODE_ANY, &je);
  if (!v)
    return terr_set(e, T_EINVAL, "body", je.position,
                    "invalid JSON at line %d column %d: %s", je.line,
                    je.column, je.text);
  int rc = jarray_parse(v, dt, cap, "body", a, e);
  json_decref(v);
  return rc;
}

/* "" when they agree; strict: the same error message and position too. */
static const char *differ(const char *s, size_t len, const size_t *cuts,
                          int ncuts, tdtype dt, int64_t cap, int strict) {
  static char why[1024];
  terr e1, e2;
  tarray *a;
  int rc1 = one_shot(s, len, dt, cap, &a, &e1);
  mem m = {0};
  int ndim = -1;
  int64_t shape[T_MAXDIM];
  int rc2 = push(s, len, cuts, ncuts, dt, cap, &m, &ndim, shape, &e2);
  why[0] = 0;
  int syntax1 = rc1 && strncmp(e1.message, "body: invalid JSON", 18) == 0;
  int syntax2 = rc2 && strncmp(e2.message, "body: invalid JSON", 18) == 0;
  if (!rc1 != !rc2) {
    snprintf(why, sizeof why, "rc %d (%s) vs push %d (%s)", rc1,
             rc1 ? e1.message : "ok", rc2, rc2 ? e2.message : "ok");
  } else if (rc1) {
    if (strict && (e1.code != e2.code || strcmp(e1.field, e2.field) ||
                   syntax1 != syntax2 ||
                   (!syntax1 && (e1.position != e2.position ||
                                 strcmp(e1.message, e2.message)))))
      snprintf(why, sizeof why, "error %s @%lld vs push %s @%lld", e1.message,
               (long long)e1.position, e2.message, (long long)e2.position);
  } else {
    size_t bytes = (size_t)a->size * tdtype_size(dt);
    int same = a->ndim == ndim && m.n == bytes &&
               (!bytes || memcmp(m.b, a->data, bytes) == 0);
    for (int i = 0; same && i < ndim; i++) same = a->shape[i] == shape[i];
    if (!same)
      snprintf(why, sizeof why, "arrays differ (ndim %d/%d, %zu/%zu bytes)",
               a->ndim, ndim, bytes, m.n);
  }
  tarray_free(a);
  free(m.b);
  return why;
}

static int every_split(const char *s, tdtype dt, int64_t cap, int strict) {
  size_t len = strlen(s);
  const char *w = differ(s, len, NULL, 0, dt, cap, strict);
  for (size_t k = 0; !*w && k <= len; k++) w = differ(s, len, &k, 1, dt, cap, strict);
  size_t *cuts = malloc((len + 1) * sizeof *cuts);
  for (size_t k = 0; k < len; k++) cuts[k] = k + 1;
  if (!*w && len) w = differ(s, len, cuts, (int)len - 1, dt, cap, strict);
  free(cuts);
  if (*w) fprintf(stderr, "  body %.80s: %s\n", s, w);
  return !*w;
}

static const char *BODIES[] = {
    "5", " -0 ", "-0.0", "[]", "[[]]", "[[],[]]", "[[[]],[[]]]", "[1]",
    "[1,2,3]", "[[1,2],[3,4],[5,6]]", " [ [ 1 , 2 ] ,\n[ 3 , 4 ] ] \r\n\t",
    "[[[1],[2]],[[3],[4]]]", "[[[[[[[[1]]]]]]]]", "[[[[[[[[[1]]]]]]]]]",
    "[0.1, 1e308, -1e-320, 4.9e-324, 1.7976931348623157e308, 123456789012345678]",
    "[9223372036854775807, -9223372036854775808]", "[9223372036854775808]",
    "[-9223372036854775809]", "[1e400]", "[-1e400]", "[1e-400]",
    "[3.4028235e38, 3.5e38, -1e39, 1e-46, 0.1]", "[1E2, 1e+2, 1e-2, 0e0, -0E-0]",
    "[01]", "[-]", "[1.]", "[.5]", "[+1]", "[1e]", "[1e+]", "[1.5.3]",
    "[0x10]", "[1,]", "[,1]", "[1 2]", "[1,2", "[", "", "   ", "[]]",
    "[1] x", "[1][2]", "[NaN]", "[Infinity]", "[-Infinity]",
    "[[1,2],[3]]", "[[1,2],[3,4,5]]", "[[1,2],3]", "[1,[2]]", "[[1],[[2]]]",
    "[[[1,2]],[[3,4],[5,6]]]", "[[], [1]]", "[[1], []]", "[1, \"2\"]",
    "[\"x\"]", "\"x\"", "{}", "[{}]", "[1, {\"a\": 1}]", "[true]", "[1, false]",
    "[null]", "null", "true", "[[1, null], [2, 3]]", "[[1, 2], null]",
    "[[1, 2], [3, \"4\"]]", "[[1,2],[3,4],[5,6],[7,8]]", "[1,2,3,4,5]",
    "[[1,2,3],[4,5,6]]", "[tru]", "[nul]", "[truex]", "[1]\n\n\n  ]",
    "\xEF\xBB\xBF[1]", "[1\x00]",
};

TEST(push_equals_jansson_jarray_at_every_split) {
  for (size_t i = 0; i < sizeof BODIES / sizeof *BODIES; i++) {
    CHECK_MSG(every_split(BODIES[i], T_F64, 1000, 1), "body %zu", i);
    CHECK_MSG(every_split(BODIES[i], T_F32, 1000, 1), "body %zu f32", i);
    CHECK_MSG(every_split(BODIES[i], T_F64, 4, 1), "body %zu cap 4", i);
  }
}

/* Where the first problem in the text is reported (jsonpush.c's opening
 * says why): both refuse, and the push reader names the earlier one. */
TEST(first_problem_in_the_text) {
  static const struct {
    const char *body, *push_msg;
  } cases[] = {
      /* a shape error before a syntax error */
      {"[[1,2],[3]] x", "ragged array at [1]: a different length"},
      /* a list's contents read before it is found short */
      {"[[1,2,3],[4,\"5\"]]", "element [1, 1] is a string"},
      /* the cap: met by the 5th number before the short row */
      {"[[1,2],[3,4],[5]]", "more than 4 elements"},
      /* a long row is found at its element past the length */
      {"[[1,2],[3,4,\"x\"]]", "ragged array at [1]: a different length"},
      /* a string is refused at its '"', before its bytes are read */
      {"[\"\xff\"]", "element [0] is a string"},
      /* a number longer than 512 characters */
      {NULL, "a number longer than 512 characters"},
  };
  char longnum[700];
  memcpy(longnum, "[0.", 3);
  memset(longnum + 3, '0', 600);
  strcpy(longnum + 603, "1]"); /* 1e-601: Jansson reads 0 */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *s = cases[i].body ? cases[i].body : longnum;
    tarray *a;
    terr e1, e2;
    mem m = {0};
    int ndim;
    int64_t shape[T_MAXDIM];
    int rc1 = one_shot(s, strlen(s), T_F64, 4, &a, &e1);
    int rc2 = push(s, strlen(s), NULL, 0, T_F64, 4, &m, &ndim, shape, &e2);
    if (!cases[i].body) { /* Jansson reads it */
      CHECK(rc1 == 0);
    } else {
      CHECK_MSG(rc1 != 0, "%s", s);
    }
    CHECK_MSG(rc2 != 0 && strcmp(e2.field, "body") == 0 &&
                  strstr(e2.message, cases[i].push_msg),
              "%s: push said %s", s, e2.message);
    if (cases[i].body) CHECK(every_split(s, T_F64, 4, 0));
    tarray_free(a);
    free(m.b);
  }
}

/* Random documents from JSON's pieces: both accept equal arrays, or both
 * refuse. */
TEST(random_documents_random_splits) {
  static const char *piece[] = {"[", "[", "[", "]", "]", "]", ",", ",", "1",
                                "-2.5", "0", "3e2", " ", "\n", "[]", "null",
                                "\"s\"", "-", ".", "e", "7", "01", "[1,2]"};
  unsigned seed = 4242;
  char s[256];
  size_t cuts[16];
  int bad = 0, accepted = 0;
  for (int t = 0; t < 60000 && !bad; t++) {
    size_t len = 0;
    int np = 1 + rand_r(&seed) % 20;
    for (int i = 0; i < np; i++) {
      const char *pc = piece[rand_r(&seed) % (sizeof piece / sizeof *piece)];
      size_t l = strlen(pc);
      if (len + l >= sizeof s - 1) break;
      memcpy(s + len, pc, l);
      len += l;
    }
    s[len] = 0;
    int nc = len ? rand_r(&seed) % 8 : 0;
    for (int i = 0; i < nc; i++) cuts[i] = (size_t)rand_r(&seed) % (len + 1);
    for (int i = 1; i < nc; i++)
      for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
        size_t x = cuts[j];
        cuts[j] = cuts[j - 1];
        cuts[j - 1] = x;
      }
    tdtype dt = t & 1 ? T_F32 : T_F64;
    const char *w = differ(s, len, cuts, nc, dt, 1 + t % 9, 0);
    if (*w) {
      bad = 1;
      fprintf(stderr, "  body %s: %s\n", s, w);
    }
    tarray *a;
    terr e;
    if (one_shot(s, len, dt, 1 + t % 9, &a, &e) == 0) accepted++;
    tarray_free(a);
  }
  CHECK(!bad);
  CHECK(accepted > 100); /* the generator makes valid documents too */
}

int main(void) {
  RUN(push_equals_jansson_jarray_at_every_split);
  RUN(first_problem_in_the_text);
  RUN(random_documents_random_splits);
  return check_summary();
}
