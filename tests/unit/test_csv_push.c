/* test_csv_push.c — the CSV push reader against the one-shot csv_parse.
 *
 * For every body of a list that walks csv_parse's rules (header or not,
 * BOM, CRLF and lone CR, quotes, blanks inside and around cells and at the
 * end, blank and empty lines, ragged rows, the element cap, NaN/Inf, long
 * cells and long blank runs, and every error csv_parse gives), the body is
 * fed to the push reader split at every point into two pieces, and one byte
 * at a time: the result must be csv_parse's — the same values bit for bit
 * and the same shape, or the same error code, field, position and message.
 * Then random bodies built from CSV's pieces, split at random points.
 * And the reader's restart: a header line whose cells read as values
 * (quoted numbers with blanks inside the quotes) drops what it wrote.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/array/tarray.h"
#include "push_mem.h"

/* Feed body in pieces ending at cuts[0..ncuts) (increasing), then end. */
static int push(const char *s, size_t len, const size_t *cuts, int ncuts,
                int64_t cap, int nonfinite, mem *m, int *ndim,
                int64_t *shape, terr *e) {
  tvals_out o = {mem_write, mem_restart, m};
  csv_push *p;
  terr_clear(e);
  int rc = csv_push_new(cap, nonfinite, &o, &p, e);
  size_t at = 0;
  for (int i = 0; !rc && i <= ncuts; i++) {
    size_t to = i < ncuts ? cuts[i] : len;
    rc = csv_push_feed(p, s + at, to - at, e);
    at = to;
  }
  if (!rc) rc = csv_push_end(p, ndim, shape, e);
  csv_push_free(p);
  return rc;
}

/* "" when push (these cuts) and csv_parse agree, else what differs. */
static const char *differ(const char *s, size_t len, const size_t *cuts,
                          int ncuts, int64_t cap, int nonfinite) {
  static char why[1024];
  terr e1, e2;
  terr_clear(&e1);
  tarray *a = NULL;
  int rc1 = csv_parse(s, len, cap, nonfinite, &a, &e1);
  mem m = {0};
  int ndim = -1;
  int64_t shape[T_MAXDIM];
  int rc2 = push(s, len, cuts, ncuts, cap, nonfinite, &m, &ndim, shape, &e2);
  why[0] = 0;
  if (rc1 != rc2) {
    snprintf(why, sizeof why, "rc %d (%s) vs push %d (%s)", rc1, e1.message,
             rc2, e2.message);
  } else if (rc1) {
    if (e1.code != e2.code || strcmp(e1.field, e2.field) ||
        e1.position != e2.position || strcmp(e1.message, e2.message))
      snprintf(why, sizeof why, "error %s @%lld vs push %s @%lld", e1.message,
               (long long)e1.position, e2.message, (long long)e2.position);
  } else if (a->ndim != ndim || a->shape[0] != shape[0] ||
             (ndim == 2 && a->shape[1] != shape[1]) ||
             m.n != (size_t)a->size * 8 ||
             (m.n && memcmp(m.b, a->data, m.n) != 0)) {
    snprintf(why, sizeof why, "values or shape differ (ndim %d/%d, %zu bytes)",
             a->ndim, ndim, m.n);
  }
  tarray_free(a);
  free(m.b);
  return why;
}

/* Every split in two, and one byte at a time. */
static int every_split(const char *s, size_t len, int64_t cap, int nonfinite) {
  const char *w = differ(s, len, NULL, 0, cap, nonfinite);
  for (size_t k = 0; !*w && k <= len; k++) w = differ(s, len, &k, 1, cap, nonfinite);
  size_t *cuts = malloc((len + 1) * sizeof *cuts);
  for (size_t k = 0; k < len; k++) cuts[k] = k + 1;
  if (!*w && len) w = differ(s, len, cuts, (int)len - 1, cap, nonfinite);
  free(cuts);
  if (*w) fprintf(stderr, "  body \"%.*s\": %s\n", (int)(len > 80 ? 80 : len), s, w);
  return !*w;
}

static const char *BODIES[] = {
    "1,2,3\n4,5,6\n", "1\n2\n3", "1.5, -2e3 ,\t+.25\n", "", "\n\n", "  \n \t\n",
    "x,y\n1,2\n3,4\n", "x\n1\n", "x,y\n", "x,y", "x,y\n\n  \n", "\"a\",\"b\"\n1,2",
    "\xEF\xBB\xBF" "1,2\n3,4", "\xEF\xBB\xBF", "\xEF\xBB", "\xEF", "\xEF\xBB" "1",
    "\xEF\xBB\xBF\n1", "1,2\r\n3,4\r\n", "1,2\r3,4\r", "1\r\r\n2", "1\n\n2",
    "1\n  \n2", "1\n \t \n", "1,\n2,3", "1,  \n", "1,2,  \n  \n", "1,  \n3,4",
    ",1\n", " ,1", "1,,2", "\"1.5\",\" 2 \"\n3,4", "\" 1\",\" 2\"\n3,4",
    "\" 1\",x\n3,4", "\"1,5\"\n", "\"\"", "\"", "\"\",1", "1;2", "0x10", ".",
    "1,2\n3\n", "1\n2,3\n", "x,y,z\n1,2\n", "nan,1", "inf", "-Infinity,2",
    "NaN", "+nan\n", "1e400", "1e-400", "1 2", "1\t\t2", "abc,def\nghi",
    "1,2\nx,y", "a,1\n2,3", "a,\"b\nc\"", "1\n\"2\n3\"", "\"1\n,2",
    "1,2,3,4,5,6,7,8,9,10,11", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11",
    "  1  ,  2  \n\t3\t,\t4\t", "1\r", "\r1", "\r\n\r\n1,2", "1,2\r\n\r\n",
    "1.,.5,5e+3,5E-3,-0,+0", "e5", "1e", "1e+", "--1", "+-1", "1.2.3",
    "infinity,nan", "infx", "x,\" 1\"\n1,2", "\" 1 \"\n", "\"1\"\"\n2",
};

TEST(push_equals_one_shot_at_every_split) {
  for (size_t i = 0; i < sizeof BODIES / sizeof *BODIES; i++) {
    const char *s = BODIES[i];
    for (int nf = 0; nf < 2; nf++)
      CHECK_MSG(every_split(s, strlen(s), 1000, nf), "body %zu nonfinite %d", i, nf);
    CHECK_MSG(every_split(s, strlen(s), 3, 0), "body %zu cap 3", i);
  }
}

/* Cells past CELL_KEEP (512) and blank runs past RUN_KEEP (64). */
TEST(long_cells_and_blank_runs) {
  char buf[4096];
  const char *fmt[] = {"%s\n1", "x,%s\n1,2", "1,%s", "\"%s\"", "%s,1\n2,3"};
  for (int f = 0; f < 5; f++) {
    for (int kind = 0; kind < 6; kind++) {
      char cell[1200];
      size_t n = 0;
      switch (kind) {
        case 0: memset(cell, '7', 900); n = 900; break;          /* long digits */
        case 1: memset(cell, 'q', 700); n = 700; break;          /* long text */
        case 2: cell[0] = '"'; memset(cell + 1, ' ', 800);       /* " <800> 1" */
                memcpy(cell + 801, "1\"", 2); n = 803; break;
        case 3: cell[0] = '1'; memset(cell + 1, '\t', 300);      /* 1 <300> 2 */
                cell[301] = '2'; n = 302; break;
        case 4: cell[0] = '"'; cell[1] = '5';                    /* "5 <600> " */
                memset(cell + 2, ' ', 600); cell[602] = '"'; n = 603; break;
        case 5: memset(cell, '1', 255); n = 255; break;          /* 255 digits */
      }
      cell[n] = 0;
      int len = snprintf(buf, sizeof buf, fmt[f], cell);
      CHECK_MSG(every_split(buf, (size_t)len, 1000, 0), "format %d cell %d", f, kind);
    }
  }
}

/* Random tables from CSV's pieces, split at random points. */
TEST(random_bodies_random_splits) {
  static const char *piece[] = {"1", "-2.5", "3e2", " ", "\t", ",", ",", "\n",
                                "\r\n", "\r", "\"", "x", "nan", "", ".", "0",
                                "\xEF\xBB\xBF", "  ", "e", "7"};
  unsigned seed = 12345;
  char s[256];
  size_t cuts[16];
  int bad = 0;
  for (int t = 0; t < 40000 && !bad; t++) {
    size_t len = 0;
    int np = rand_r(&seed) % 24;
    for (int i = 0; i < np; i++) {
      const char *pc = piece[rand_r(&seed) % (sizeof piece / sizeof *piece)];
      size_t l = strlen(pc);
      if (len + l >= sizeof s) break;
      memcpy(s + len, pc, l);
      len += l;
    }
    int nc = len ? rand_r(&seed) % 8 : 0;
    for (int i = 0; i < nc; i++) cuts[i] = (size_t)rand_r(&seed) % (len + 1);
    for (int i = 1; i < nc; i++) /* sort */
      for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
        size_t x = cuts[j];
        cuts[j] = cuts[j - 1];
        cuts[j - 1] = x;
      }
    const char *w = differ(s, len, cuts, nc, 1 + t % 7, t & 1);
    if (*w) {
      bad = 1;
      fprintf(stderr, "  body \"%.*s\" (%zu bytes): %s\n", (int)len, s, len, w);
    }
  }
  CHECK(!bad);
}

/* A header line that reads as values (only quoted numbers with blanks
 * inside the quotes do): what was written is dropped, even when it was
 * already handed over (more than one write buffer of such cells). */
TEST(header_restart_drops_written_values) {
  size_t n = 9000;
  char *s = malloc(n * 8 + 64);
  size_t len = 0;
  for (size_t i = 0; i < n; i++) len += (size_t)sprintf(s + len, "%s\" 1\"", i ? "," : "");
  len += (size_t)sprintf(s + len, ",x\n");
  for (size_t i = 0; i <= n; i++) len += (size_t)sprintf(s + len, "%s%zu", i ? "," : "", i % 10);
  mem m = {0};
  int ndim;
  int64_t shape[T_MAXDIM];
  terr e;
  int rc = push(s, len, NULL, 0, 100000, 0, &m, &ndim, shape, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  CHECK(m.restarts == 1 && ndim == 1 && shape[0] == (int64_t)n + 1 &&
        m.n == (n + 1) * 8);
  double v;
  memcpy(&v, m.b + 8 * 13, 8);
  CHECK(v == 3);
  CHECK(every_split("\" 1\",x\n3,4", 10, 100, 0));
  free(m.b);
  free(s);
}

int main(void) {
  RUN(push_equals_one_shot_at_every_split);
  RUN(long_cells_and_blank_runs);
  RUN(random_bodies_random_splits);
  RUN(header_restart_drops_written_values);
  return check_summary();
}
