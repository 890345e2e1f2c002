/* test_buf.c — util/buf.h: growth, the cap and the sticky error state, and
 * the JSON writers against jansson (the oracle: text written here must
 * equal what json_dumps writes for the same value).
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "util/buf.h"
#include "util/util.h"
#include "util/err.h"

TEST(growth) {
  tbuf b;
  tbuf_init(&b, 0);
  for (int i = 0; i < 10000; i++) tbuf_addf(&b, "%d,", i % 10);
  CHECK(b.err == 0);
  CHECK(b.len == 20000);
  CHECK(b.p[b.len] == 0);
  size_t len = 0;
  char *t = tbuf_take(&b, &len);
  CHECK(t != NULL && len == 20000 && strncmp(t, "0,1,2,", 6) == 0);
  CHECK(b.p == NULL && b.len == 0); /* empty afterwards, reusable */
  free(t);
  tbuf_adds(&b, "again");
  t = tbuf_take(&b, &len);
  CHECK_STR(t, "again");
  free(t);
  tbuf_free(&b);
  tbuf_free(NULL); /* a no-op */
  /* A zeroed tbuf works, and an empty one takes as "". */
  tbuf z = {0};
  t = tbuf_take(&z, &len);
  CHECK(t != NULL && len == 0 && t[0] == 0);
  free(t);
  /* A long formatted append (past the small stack buffer). */
  tbuf_init(&b, 0);
  tbuf_addf(&b, "%0600d|", 7);
  CHECK(b.len == 601 && b.p[599] == '7' && b.p[600] == '|');
  tbuf_free(&b);
}

TEST(cap) {
  tbuf b;
  tbuf_init(&b, 10);
  tbuf_adds(&b, "0123456789"); /* exactly the cap */
  CHECK(b.err == 0 && b.len == 10);
  tbuf_add(&b, "x", 1); /* one past */
  CHECK(b.err == T_ETOOLARGE);
  tbuf_adds(&b, "more"); /* sticky: no-op */
  CHECK(b.len == 10);
  CHECK(tbuf_take(&b, NULL) == NULL);
  CHECK(b.err == 0 && b.max == 10); /* reset, same cap */
  tbuf_addf(&b, "%s", "01234567890"); /* formatted, past the cap */
  CHECK(b.err == T_ETOOLARGE);
  tbuf_free(&b);
  /* A string with nothing to escape (one copy) stops at the cap too,
   * whole: 8 bytes fit, quoted, and the next one does not. */
  tbuf_init(&b, 10);
  tbuf_json_str(&b, "abcdef");
  CHECK(b.err == 0 && b.len == 8);
  tbuf_json_str(&b, "g");
  CHECK(b.err == T_ETOOLARGE && b.len == 8);
  tbuf_free(&b);
  /* A size that would overflow len + more is refused, not wrapped. */
  tbuf_init(&b, 0);
  tbuf_adds(&b, "ab");
  CHECK(tbuf_reserve(&b, SIZE_MAX - 1) == T_ETOOLARGE);
  tbuf_free(&b);
}

static void same_as_jansson(json_t *v, const char *mine, int prec) {
  char *ref = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY |
                                (prec ? JSON_REAL_PRECISION(prec) : 0));
  CHECK_MSG(ref && strcmp(ref, mine) == 0, "mine %s, jansson %s", mine,
            ref ? ref : "(null)");
  free(ref);
  json_decref(v);
}

TEST(json) {
  const double reals[] = {0.0, 1.0, -2.0, 0.1, 1.0 / 3.0, 1e20, 1e-7,
                          6e-6, 123456789.125, -1.5e300, 5e-324, 0.012,
                          1e16, 1e17, 12345678901234567.0, 2.5e-7};
  const int precs[] = {17, 9};
  for (size_t p = 0; p < 2; p++) {
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
      tbuf b;
      tbuf_init(&b, 0);
      tbuf_json_real(&b, reals[i], precs[p]);
      char *t = tbuf_take(&b, NULL);
      same_as_jansson(json_real(reals[i]), t, precs[p] == 17 ? 0 : precs[p]);
      free(t);
    }
  }
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_json_real(&b, NAN, 17);
  tbuf_add(&b, ",", 1);
  tbuf_json_real(&b, -INFINITY, 9);
  char *t = tbuf_take(&b, NULL);
  CHECK_STR(t, "null,null");
  free(t);
  const char *strs[] = {"", "plain", "q\"uote", "back\\slash", "nl\nta\tb",
                        "\x01\x1f ctl", "utf-8 \xc3\xa9 \xe2\x82\xac", "/"};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    tbuf_init(&b, 0);
    tbuf_json_str(&b, strs[i]);
    t = tbuf_take(&b, NULL);
    same_as_jansson(json_string(strs[i]), t, 0);
    free(t);
  }
  tbuf_init(&b, 0);
  tbuf_json_str(&b, NULL);
  tbuf_add(&b, ",", 1);
  tbuf_json_int(&b, -9223372036854775807LL - 1);
  tbuf_add(&b, ",", 1);
  tbuf_json_int(&b, 9223372036854775807LL);
  tbuf_add(&b, ",", 1);
  tbuf_json_int(&b, 0);
  tbuf_add(&b, ",", 1);
  tbuf_json_int(&b, -10);
  t = tbuf_take(&b, NULL);
  CHECK_STR(t, "null,-9223372036854775808,9223372036854775807,0,-10");
  free(t);
}

/* Integer-valued doubles take a path without printf: at every precision
 * and at the edges of that path (10^p - 1, 10^p, -0.0) the text is what
 * %g writes, read back as the same double. */
TEST(json_integers) {
  const double ints[] = {0.0,  -0.0, 1.0, -1.0, 9.0, 10.0, 99.0, 100.0,
                         999999999.0, 1e9, -1e9, 123456789012345.0,
                         999999999999999.0, 1e15, -1e15, 4503599627370497.0,
                         9007199254740993.0, 1e22};
  const int precs[] = {0, 1, 2, 9, 15, 16, 17};
  for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++)
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
      tbuf b;
      tbuf_init(&b, 0);
      tbuf_json_real(&b, ints[i], precs[p]);
      char *t = tbuf_take(&b, NULL);
      /* the reference: %g at that precision (prec 0: the shortest that
       * reads back from 15 digits on, as tbuf_json_real searches) */
      char ref[48];
      int rp = precs[p];
      if (rp == 0)
        for (rp = 15; rp < 17; rp++) {
          snprintf(ref, sizeof ref, "%.*g", rp, ints[i]);
          if (strtod(ref, NULL) == ints[i]) break;
        }
      snprintf(ref, sizeof ref, "%.*g", rp, ints[i]);
      if (!strchr(ref, 'e') && !strchr(ref, '.')) strcat(ref, ".0");
      if (!strchr(ref, 'e'))
        CHECK_MSG(t && strcmp(t, ref) == 0, "%.17g prec %d: %s, want %s",
                  ints[i], precs[p], t ? t : "(null)", ref);
      else /* the exponent form: not the integer path's, and reads back */
        CHECK_MSG(t && strchr(t, 'e'), "%.17g prec %d: %s", ints[i],
                  precs[p], t ? t : "(null)");
      if (precs[p] == 0 || precs[p] == 17)
        CHECK(t && strtod(t, NULL) == ints[i] &&
              signbit(strtod(t, NULL)) == signbit(ints[i]));
      free(t);
    }
}

/* prec 0: the fewest digits that read back as the same double, and JSON
 * text from jansson rewritten that way outside strings only. */
TEST(json_shortest) {
  const double reals[] = {823.754,     1e-6, 89.289289289289286, 0.1, 1.0 / 3.0,
                          1e16,        -2.0, 5e-324, 1.7976931348623157e308,
                          123456789.125, 0.30000000000000004};
  const char *want[] = {"823.754", "1e-6", "89.28928928928929", "0.1",
                        "0.3333333333333333", "1e16", "-2.0", "5e-324",
                        "1.7976931348623157e308", "123456789.125",
                        "0.30000000000000004"};
  for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
    tbuf b;
    tbuf_init(&b, 0);
    tbuf_json_real(&b, reals[i], 0);
    char *t = tbuf_take(&b, NULL);
    CHECK_STR(t, want[i]);
    CHECK(t && strtod(t, NULL) == reals[i]);
    free(t);
  }
  json_t *doc = json_pack("{s:f, s:s, s:i, s:[f, f, b, n], s:f}", "a", 823.754,
                          "s", "x 1.50000000000000001 \"q\\\" 2.0", "n", -12,
                          "b", 1e-6, 1.0, 1, "t", 9.9999999999999995e-7);
  char *raw = json_dumps(doc, JSON_COMPACT);
  CHECK(raw && strstr(raw, "823.75400000000002")); /* what jansson writes */
  size_t len = 0;
  char *t = raw ? tjson_short_reals(raw, &len) : NULL;
  CHECK_STR(t, "{\"a\":823.754,\"s\":\"x 1.50000000000000001 \\\"q\\\\\\\" 2.0\","
               "\"n\":-12,\"b\":[1e-6,1.0,true,null],\"t\":1e-6}");
  CHECK(t && len == strlen(t));
  json_t *back = t ? json_loads(t, 0, NULL) : NULL;
  CHECK(back && json_equal(back, doc)); /* the same values */
  json_decref(back);
  json_decref(doc);
  free(raw);
  free(t);
}

/* Reals that %g writes in fixed notation at 1-9 digits take a path without
 * printf (fixed_real in buf.c): the text is jansson's at every precision,
 * for values spread over the decades it covers and past them, and at its
 * edges: ties (printf rounds the exact binary value, half to even), a
 * rounding that carries into a new digit, the 1e-4 and 10^prec bounds. */
TEST(json_fixed) {
  const double edges[] = {0.125,       2.5,          0.5,
                          9.9999999996, 99999.99995, 0.0001,
                          0.00009999999999, 123456789.5, 1e-4,
                          0.00012345678949, 999999999.4, 0.1,
                          1.0 / 3.0,   -2.0 / 3.0,   1.05,
                          0.015,       1234.5678,   -0.0625};
  unsigned long long r = 88172645463325252ULL;
  for (int p = 1; p <= 9; p++) {
    for (int i = 0; i < 3000; i++) {
      double v;
      if (i < (int)(sizeof edges / sizeof edges[0])) {
        v = edges[i];
      } else { /* a mantissa in [1, 10), a decade from 1e-6 to 1e10 */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        v = (1.0 + (double)(r >> 11) / 9007199254740992.0 * 9.0) *
            pow(10.0, (double)((int)(r % 17) - 6));
        if (r & 1) v = -v;
        if (i % 7 == 0) v = round(v * 1000.0) / 1000.0; /* short decimals */
      }
      tbuf b;
      tbuf_init(&b, 0);
      tbuf_json_real(&b, v, p);
      char *t = tbuf_take(&b, NULL);
      same_as_jansson(json_real(v), t, p);
      free(t);
    }
  }
}

/* util.h's printf-free copy and integer: what snprintf writes. */
TEST(scopy_and_int) {
  char a[8], b[8];
  const char *srcs[] = {"", "abc", "1234567", "12345678", "123456789012"};
  for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
    for (size_t cap = 1; cap <= sizeof a; cap++) {
      memset(a, 'x', sizeof a);
      memset(b, 'x', sizeof b);
      t_scopy(a, cap, srcs[i]);
      snprintf(b, cap, "%s", srcs[i]);
      CHECK(memcmp(a, b, sizeof a) == 0);
    }
  }
  const long long vs[] = {0, 7, -7, 10, 99, 100, 123456789, -1000000000000LL,
                          9223372036854775807LL, -9223372036854775807LL - 1};
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
    char got[24], want[24];
    size_t n = t_fmt_int(got, vs[i]);
    got[n] = 0;
    snprintf(want, sizeof want, "%lld", vs[i]);
    CHECK_STR(got, want);
  }
}

/* t_rfc3339 with its day cache: what gmtime and printf write, across day,
 * month and year ends and back and forth between days. */
TEST(rfc3339_days) {
  const int64_t base[] = {0, 86399999, 86400000, 951782399999LL,
                          951782400000LL, 1795000000123LL, 1798761599999LL,
                          1798761600000LL, 253402300799999LL};
  for (int round = 0; round < 2; round++)
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
      for (int64_t d = -1; d <= 1; d++) {
        int64_t ms = base[i] + d * (round ? 1 : 86400000);
        if (ms < 0) continue;
        char got[40], want[40];
        t_rfc3339(ms, got, sizeof got);
        time_t s = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&s, &tm);
        snprintf(want, sizeof want, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                 tm.tm_min, tm.tm_sec, (int)(ms % 1000));
        CHECK_STR(got, want);
      }
}

int main(void) {
  RUN(growth);
  RUN(cap);
  RUN(json);
  RUN(json_integers);
  RUN(json_shortest);
  RUN(json_fixed);
  RUN(scopy_and_int);
  RUN(rfc3339_days);
  return check_summary();
}
