/* test_csv.c — the numbers-only CSV reader and writer.
 *
 * Shapes (1-D column, 1-D row, 2-D, empty), header detection, CRLF, blank
 * trailing lines, every refusal with its row/column and byte offset, the
 * element cap, non-finite handling, and write -> parse round trips that
 * must be bit-exact (%.17g / %.9g).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/array/tarray.h"

static tarray *parse(const char *s, int64_t cap, int nonfinite, int *rc,
                     terr *e) {
  tarray *a = NULL;
  terr_clear(e);
  *rc = csv_parse(s, strlen(s), cap, nonfinite, &a, e);
  return a;
}

TEST(shapes) {
  terr e;
  int rc;
  tarray *a = parse("1,2,3\n4,5,6\n", 100, 0, &rc, &e);
  CHECK(rc == 0 && a && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3);
  CHECK(a && a->dtype == T_F64 && tarray_get(a, 5) == 6 && tarray_get(a, 1) == 2);
  tarray_free(a);
  a = parse("1\n2\n3", 100, 0, &rc, &e); /* no final newline */
  CHECK(rc == 0 && a && a->ndim == 1 && a->shape[0] == 3 && tarray_get(a, 2) == 3);
  tarray_free(a);
  a = parse("1.5, -2e3 ,\t+.25\n", 100, 0, &rc, &e);
  CHECK(rc == 0 && a && a->ndim == 1 && a->shape[0] == 3);
  CHECK(a && tarray_get(a, 0) == 1.5 && tarray_get(a, 1) == -2000 &&
        tarray_get(a, 2) == 0.25);
  tarray_free(a);
  /* no values: an error, never an array of shape [0] */
  a = parse("", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && !a && strcmp(e.field, "body") == 0);
  a = parse("\r\n\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && !a);
  a = parse("x,y\n", 100, 0, &rc, &e); /* header only */
  CHECK_MSG(rc == T_EINVAL && !a && strstr(e.message, "no data rows"), "%s", e.message);
  a = parse("7", 100, 0, &rc, &e);
  CHECK(rc == 0 && a && a->ndim == 1 && a->shape[0] == 1 && tarray_get(a, 0) == 7);
  tarray_free(a);
}

TEST(header_crlf_blank) {
  terr e;
  int rc;
  tarray *a = parse("a,b\r\n1,2\r\n3,4\r\n\r\n\n", 100, 0, &rc, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  CHECK(a && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 2 &&
        tarray_get(a, 3) == 4);
  tarray_free(a);
  /* pandas' index header: an empty first cell */
  a = parse(",x\n0,1.5\n1,2.5\n", 100, 0, &rc, &e);
  CHECK(rc == 0 && a && a->shape[0] == 2 && tarray_get(a, 3) == 2.5);
  tarray_free(a);
  /* a quoted header name with a comma inside counts as one column */
  a = parse("\"lat, deg\",lon\n1,2\n", 100, 0, &rc, &e);
  CHECK(rc == 0 && a && a->size == 2);
  tarray_free(a);
  /* header with the wrong column count */
  a = parse("a,b,c\n1,2\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && !a && strstr(e.message, "header has 3"));
  /* nan in the first line is a number, not a header */
  a = parse("nan,1\n2,3\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && strstr(e.message, "row 1, column 1: NaN/Inf"));
}

TEST(errors_name_row_column) {
  terr e;
  int rc;
  tarray *a = parse("1,2\n3,x\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && !a);
  CHECK_MSG(strstr(e.message, "row 2, column 2: 'x' is not a number"), "%s", e.message);
  CHECK(e.position == 6);
  a = parse("1,2\n3,\"x\"\n", 100, 0, &rc, &e); /* quoted, still not a number */
  CHECK(rc == T_EINVAL && strstr(e.message, "row 2, column 2: 'x' is not a number"));
  a = parse("1,2\n3,4,5\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && strstr(e.message, "row 2: 3 columns, expected 2"));
  CHECK(e.position == 4);
  a = parse("1,2\n\n3,4\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && strstr(e.message, "row 2: empty line"));
  a = parse("1,,2\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && strstr(e.message, "row 1, column 2: empty cell"));
  a = parse("1,2\n3,4\r5\n", 100, 0, &rc, &e); /* a lone CR ends a line */
  CHECK_MSG(rc == T_EINVAL && strstr(e.message, "row 3: 1 columns, expected 2"), "%s", e.message);
  /* (junk on the first line would be a header: put it on the second) */
  const char *junk[] = {"1\n0x10\n", "1\n1e\n", "1\n1.2.3\n", "1\n--1\n", "1\n1 2\n",
                        "1\n.\n", "1\ne5\n", "1\n1e5x\n", "1,2\n3,1e999\n"};
  for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
    a = parse(junk[i], 100, 1, &rc, &e);
    CHECK_MSG(rc == T_EINVAL && !a, "'%s' accepted", junk[i]);
  }
  /* the overflow case names the cell */
  a = parse("1,2\n3,1e999\n", 100, 1, &rc, &e);
  CHECK(strstr(e.message, "row 2, column 2") && strstr(e.message, "out of range"));
}

TEST(nonfinite_and_cap) {
  terr e;
  int rc;
  tarray *a = parse("nan,inf\n-Infinity,1\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && !a && strstr(e.message, "row 1, column 1"));
  a = parse("nan,inf\n-Infinity,1\n", 100, 1, &rc, &e);
  CHECK(rc == 0 && a && isnan(tarray_get(a, 0)) && isinf(tarray_get(a, 1)) &&
        tarray_get(a, 2) < 0);
  tarray_free(a);
  a = parse("1,2\n3,4\n5,6\n", 5, 0, &rc, &e);
  CHECK(rc == T_ETOOLARGE && !a && strstr(e.message, "row 3, column 2"));
  a = parse("1,2\n3,4\n5,6\n", 6, 0, &rc, &e);
  CHECK(rc == 0 && a && a->size == 6);
  tarray_free(a);
  /* a long column, past the first buffer growth */
  size_t n = 5000;
  char *big = malloc(n * 8 + 1), *p = big;
  for (size_t i = 0; i < n; i++) p += snprintf(p, 9, "%zu\n", i);
  a = parse(big, 100000, 0, &rc, &e);
  CHECK(rc == 0 && a && a->shape[0] == (int64_t)n && tarray_get(a, 4999) == 4999);
  tarray_free(a);
  a = parse(big, 4999, 0, &rc, &e);
  CHECK(rc == T_ETOOLARGE && !a);
  free(big);
}

/* Issue 9, item 10: bodies that main turned into fewer values or shape [0]
 * with a 201. Each now gives every value it holds, or a 400 naming the row
 * (field "body"). */
TEST(silent_loss_examples) {
  terr e;
  int rc;
  /* Excel's "CSV UTF-8": a byte-order mark before the first number */
  tarray *a = parse("\xEF\xBB\xBF" "1,2\n3,4\n5,6\n", 100, 0, &rc, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  CHECK(a && a->ndim == 2 && a->shape[0] == 3 && a->shape[1] == 2 &&
        tarray_get(a, 0) == 1 && tarray_get(a, 5) == 6);
  tarray_free(a);
  /* a BOM before a header */
  a = parse("\xEF\xBB\xBF" "x,y\r\n1,2\r\n", 100, 0, &rc, &e);
  CHECK(rc == 0 && a && a->size == 2 && tarray_get(a, 0) == 1);
  tarray_free(a);
  /* CR-only line endings (old Mac exports) */
  a = parse("1,2\r3,4\r5,6\r", 100, 0, &rc, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  CHECK(a && a->ndim == 2 && a->shape[0] == 3 && a->shape[1] == 2 &&
        tarray_get(a, 4) == 5);
  tarray_free(a);
  a = parse("a,b\r1,2\r3,4", 100, 0, &rc, &e);
  CHECK(rc == 0 && a && a->ndim == 2 && a->shape[0] == 2 && tarray_get(a, 3) == 4);
  tarray_free(a);
  /* quoted numbers, as Python's csv module writes them with QUOTE_ALL */
  a = parse("\"1\",2\n", 100, 0, &rc, &e);
  CHECK_MSG(rc == 0 && a && a->size == 2 && tarray_get(a, 0) == 1 &&
                tarray_get(a, 1) == 2, "%s", e.message);
  tarray_free(a);
  a = parse("\"a\",\"b\"\n\" 1.5 \",\"-2\"\n", 100, 0, &rc, &e);
  CHECK(rc == 0 && a && a->size == 2 && tarray_get(a, 0) == 1.5 && tarray_get(a, 1) == -2);
  tarray_free(a);
  /* one line that is not numbers: a 400 naming row 1, not shape [0] */
  const char *bad[] = {"0x10", "1;2", ".", "0x10\n", "1;2\r\n", "abc\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    a = parse(bad[i], 100, 0, &rc, &e);
    CHECK_MSG(rc == T_EINVAL && !a && strcmp(e.field, "body") == 0 &&
                  strstr(e.message, "row 1"),
              "'%s': rc %d, %s", bad[i], rc, e.message);
  }
  /* a first line with a number in it is data, not a header */
  a = parse("1,x\n2,3\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && !a && strstr(e.message, "row 1, column 2"));
  /* ';' as the separator is refused, not read as one column of text */
  a = parse("x;y\n1;2\n", 100, 0, &rc, &e);
  CHECK(rc == T_EINVAL && !a && strstr(e.message, "row 2, column 1"));
}

/* Property: random float64 matrices written in several dialects read back
 * bit-exactly with the right shape. */
TEST(dialects_round_trip) {
  unsigned seed = 12345;
  for (int trial = 0; trial < 200; trial++) {
    int rows = 1 + (int)(rand_r(&seed) % 9), cols = 1 + (int)(rand_r(&seed) % 5);
    int bom = rand_r(&seed) % 2, hdr = rand_r(&seed) % 2, quote = rand_r(&seed) % 2;
    int eol = rand_r(&seed) % 3, trail = rand_r(&seed) % 2, space = rand_r(&seed) % 2;
    const char *nl = eol == 0 ? "\n" : eol == 1 ? "\r\n" : "\r";
    double v[45];
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (bom) fputs("\xEF\xBB\xBF", f);
    if (hdr) {
      for (int c = 0; c < cols; c++) fprintf(f, "%scol%d", c ? "," : "", c);
      fputs(nl, f);
    }
    for (int r = 0; r < rows; r++) {
      for (int c = 0; c < cols; c++) {
        double x;
        switch (rand_r(&seed) % 5) {
          case 0: x = -0.0; break;
          case 1: x = 4.9e-324 * (double)(1 + rand_r(&seed) % 1000); break; /* subnormal */
          case 2: x = ((double)rand_r(&seed) / RAND_MAX - 0.5) * 1e300; break;
          default: x = ((double)rand_r(&seed) / RAND_MAX - 0.5) * 1e3; break;
        }
        v[r * cols + c] = x;
        fprintf(f, quote ? "%s%s\"%.17g\"" : "%s%s%.17g", c ? "," : "",
                c && space ? " " : "", x);
      }
      if (r + 1 < rows || trail) fputs(nl, f);
    }
    fclose(f);
    terr e;
    terr_clear(&e);
    tarray *a = NULL;
    int rc = csv_parse(buf, len, 1000, 0, &a, &e);
    int ok = rc == 0 && a && a->size == rows * cols;
    if (ok && rows > 1 && cols > 1)
      ok = a->ndim == 2 && a->shape[0] == rows && a->shape[1] == cols;
    for (int i = 0; ok && i < rows * cols; i++) {
      double got = tarray_get(a, i);
      ok = memcmp(&got, &v[i], sizeof got) == 0;
    }
    CHECK_MSG(ok, "trial %d (bom %d hdr %d quote %d eol %d trail %d): rc %d %s",
              trial, bom, hdr, quote, eol, trail, rc, e.message);
    tarray_free(a);
    free(buf);
    if (!ok) break;
  }
}

static tarray *round_trip(const tarray *a) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  terr e;
  int rc = csv_write(f, a, &e);
  fclose(f);
  tarray *b = NULL;
  if (rc == 0) csv_parse(buf, len, INT64_MAX, 1, &b, &e);
  free(buf);
  return b;
}

TEST(write_round_trip) {
  int64_t sh2[2] = {4, 3}, sh1[1] = {6};
  tarray *a = tarray_new(T_F64, 2, sh2);
  double vals[12] = {0.1, -1e-300, 1e300, 1.0 / 3, -0.0, 123456789.123456789,
                     5e-324, 2.5, -7, NAN, INFINITY, -INFINITY};
  memcpy(a->data, vals, sizeof vals);
  tarray *b = round_trip(a);
  CHECK(b && b->ndim == 2 && b->shape[0] == 4 && b->shape[1] == 3);
  for (int i = 0; b && i < 9; i++) CHECK(tarray_get(b, i) == vals[i]);
  CHECK(b && isnan(tarray_get(b, 9)) && tarray_get(b, 10) == INFINITY &&
        tarray_get(b, 11) == -INFINITY);
  tarray_free(b);
  tarray *c = tarray_convert(a, T_F32);
  b = round_trip(c);
  for (int i = 0; b && i < 9; i++)
    CHECK((float)tarray_get(b, i) == (float)tarray_get(c, i));
  tarray_free(b);
  tarray_free(c);
  tarray_free(a);
  a = tarray_new(T_F64, 1, sh1);
  for (int i = 0; i < 6; i++) tarray_set(a, i, i * 0.7);
  b = round_trip(a);
  CHECK(b && b->ndim == 1 && b->shape[0] == 6 && tarray_get(b, 5) == 5 * 0.7);
  tarray_free(b);
  tarray_free(a);
  /* 3-D is not CSV */
  int64_t sh3[3] = {2, 2, 2};
  a = tarray_zeros(T_F64, 3, sh3);
  terr e;
  FILE *f = fopen("/dev/null", "w");
  CHECK(csv_write(f, a, &e) == T_ENOTACCEPT);
  fclose(f);
  tarray_free(a);
}

/* An int64 result as CSV: integers, exact beyond 2^53 (never 1.1529e+18
 * or 42.0). */
TEST(write_int64) {
  int64_t sh[2] = {2, 2};
  tarray *a = tarray_new(T_I64, 2, sh);
  int64_t v[4] = {42, -7, ((int64_t)1 << 60) + 3, INT64_MAX};
  memcpy(a->data, v, sizeof v);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  terr e;
  CHECK(csv_write(f, a, &e) == 0);
  fclose(f);
  CHECK_STR(buf, "42,-7\n1152921504606846979,9223372036854775807\n");
  free(buf);
  tarray_free(a);
}

int main(void) {
  RUN(shapes);
  RUN(header_crlf_blank);
  RUN(errors_name_row_column);
  RUN(nonfinite_and_cap);
  RUN(write_round_trip);
  RUN(write_int64);
  RUN(silent_loss_examples);
  RUN(dialects_round_trip);
  return check_summary();
}
