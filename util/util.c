/* util.c — clocks, ids, logging, number parsing, directories, SHA-256. */
#include "util/util.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <nettle/sha2.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>

int t_log_level = T_LOG_INFO;

double t_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t t_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The date part ("2026-11-29T") of the last day written by this thread:
 * a job's three times are nearly always on one day, and gmtime_r was most
 * of a time's cost. */
static _Thread_local int64_t rfc_day = -1;
static _Thread_local char rfc_date[12];

char *t_rfc3339(int64_t wall_ms, char *buf, size_t len) {
  if (wall_ms >= 0 && len >= 25) {
    int64_t secs = wall_ms / 1000, day = secs / 86400;
    if (day != rfc_day) {
      time_t ds = (time_t)(day * 86400);
      struct tm dt;
      gmtime_r(&ds, &dt);
      int y = dt.tm_year + 1900;
      if (y <= 9999) {
        const int f[3] = {y, dt.tm_mon + 1, dt.tm_mday}, w[3] = {4, 2, 2};
        char *p = rfc_date;
        for (int i = 0; i < 3; i++) {
          for (int d = w[i] - 1, v = f[i]; d >= 0; d--, v /= 10)
            p[d] = (char)('0' + v % 10);
          p += w[i];
          *p++ = i < 2 ? '-' : 'T';
        }
        rfc_day = day;
      }
    }
    if (day == rfc_day) {
      int sod = (int)(secs - day * 86400), ms = (int)(wall_ms % 1000);
      const int f[4] = {sod / 3600, sod / 60 % 60, sod % 60, ms};
      const char sep[4] = {':', ':', '.', 'Z'};
      memcpy(buf, rfc_date, 11);
      char *p = buf + 11;
      for (int i = 0; i < 4; i++) {
        int wd = i == 3 ? 3 : 2;
        for (int d = wd - 1, v = f[i]; d >= 0; d--, v /= 10)
          p[d] = (char)('0' + v % 10);
        p += wd;
        *p++ = sep[i];
      }
      *p = 0;
      return buf;
    }
  }
  time_t secs = (time_t)(wall_ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  int year = tm.tm_year + 1900, msec = (int)(wall_ms % 1000);
  if (len < 25 || year < 0 || year > 9999 || msec < 0) {
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", year,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             msec);
    return buf;
  }
  /* The same text without printf: every job record writes three of them
   * (tests/bench/README.md, where a tiny job's microseconds go). */
  const int f[7] = {year, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                    tm.tm_min, tm.tm_sec, msec};
  const int w[7] = {4, 2, 2, 2, 2, 2, 3};
  const char sep[7] = {'-', '-', 'T', ':', ':', '.', 'Z'};
  char *p = buf;
  for (int i = 0; i < 7; i++) {
    for (int d = w[i] - 1, v = f[i]; d >= 0; d--, v /= 10)
      p[d] = (char)('0' + v % 10);
    p += w[i];
    *p++ = sep[i];
  }
  *p = 0;
  return buf;
}

/* n decimal digits at *p into *v; advances p. 0, or -1. */
static int digits(const char **p, int n, int *v) {
  *v = 0;
  for (int i = 0; i < n; i++) {
    char c = (*p)[i];
    if (c < '0' || c > '9') return -1;
    *v = *v * 10 + (c - '0');
  }
  *p += n;
  return 0;
}

static int64_t days_from_civil(int y, int m, int d) { /* H. Hinnant's */
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int t_parse_time(const char *s, int64_t *wall_ms) {
  *wall_ms = 0;
  if (!s || !*s) return -1;
  const char *p = s;
  if (strlen(s) < 11 || s[4] != '-') { /* Unix seconds */
    int64_t sec = 0;
    int n = 0;
    for (; *p >= '0' && *p <= '9'; p++, n++) {
      if (n >= 12) return -1; /* beyond year 33658: not a time we keep */
      sec = sec * 10 + (*p - '0');
    }
    if (n == 0) return -1;
    int64_t ms = 0;
    if (*p == '.') {
      p++;
      int k = 0;
      for (; *p >= '0' && *p <= '9'; p++, k++)
        if (k < 3) ms = ms * 10 + (*p - '0');
      if (k == 0) return -1;
      for (; k < 3; k++) ms *= 10;
    }
    if (*p) return -1;
    *wall_ms = sec * 1000 + ms;
    return 0;
  }
  int y, mo, d, h, mi, se, ms = 0;
  if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) || *p++ != '-' ||
      digits(&p, 2, &d))
    return -1;
  if (*p != 'T' && *p != 't' && *p != ' ') return -1;
  p++;
  if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &mi) || *p++ != ':' ||
      digits(&p, 2, &se))
    return -1;
  static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 ||
      se > 60)
    return -1;
  if (mo == 2 && d == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
    return -1;
  if (*p == '.') {
    p++;
    int k = 0;
    for (; *p >= '0' && *p <= '9'; p++, k++)
      if (k < 3) ms = ms * 10 + (*p - '0');
    if (k == 0) return -1;
    for (; k < 3; k++) ms *= 10;
  }
  int off = 0; /* minutes east of UTC */
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int sign = *p++ == '-' ? -1 : 1, oh, om;
    if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) || oh > 23 ||
        om > 59)
      return -1;
    off = sign * (oh * 60 + om);
  } else {
    return -1;
  }
  if (*p) return -1;
  int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 +
                 (se > 59 ? 59 : se) - (int64_t)off * 60;
  *wall_ms = secs * 1000 + ms;
  return 0;
}

static const char b32[] = "0123456789abcdefghjkmnpqrstvwxyz"; /* Crockford, lower */

char *t_id_new(char prefix, char *buf) {
  static atomic_uint_fast64_t counter;
  uint64_t ms = (uint64_t)t_wall_ms() & ((1ULL << 48) - 1);
  uint64_t seq = atomic_fetch_add(&counter, 1);
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != sizeof rnd)
    rnd = seq * 0x9E3779B97F4A7C15ULL;
  /* 10 chars of time (50 bits), 6 of counter (30 bits), 10 of randomness. */
  char *p = buf;
  *p++ = prefix;
  *p++ = '_';
  for (int i = 9; i >= 0; i--) p[9 - i] = b32[(ms >> (5 * i)) & 31];
  p += 10;
  for (int i = 5; i >= 0; i--) p[5 - i] = b32[(seq >> (5 * i)) & 31];
  p += 6;
  for (int i = 9; i >= 0; i--) p[9 - i] = b32[(rnd >> (5 * i)) & 31];
  p += 10;
  *p = 0;
  return buf;
}

int t_id_valid(char prefix, const char *s) {
  if (!s || s[0] != prefix || s[1] != '_') return 0;
  size_t n = strlen(s);
  if (n != 28) return 0;
  for (size_t i = 2; i < n; i++)
    if (!strchr(b32, s[i])) return 0;
  return 1;
}

void t_sha256_hex(const void *data, size_t len, char hex[65]) {
  struct sha256_ctx ctx;
  uint8_t digest[SHA256_DIGEST_SIZE];
  sha256_init(&ctx);
  sha256_update(&ctx, len, data);
  sha256_digest(&ctx, sizeof digest, digest);
  for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
    snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};
int t_log_json;

/* Append s to out[*o .. cap) as a JSON string body (no quotes). */
static void json_esc(char *out, size_t cap, size_t *o, const char *s) {
  static const char hex[] = "0123456789abcdef";
  for (const unsigned char *p = (const unsigned char *)s; *p && *o + 7 < cap; p++) {
    if (*p == '"' || *p == '\\') {
      out[(*o)++] = '\\';
      out[(*o)++] = (char)*p;
    } else if (*p < 0x20 || *p == 0x7f) {
      out[(*o)++] = '\\';
      out[(*o)++] = 'u';
      out[(*o)++] = '0';
      out[(*o)++] = '0';
      out[(*o)++] = hex[*p >> 4];
      out[(*o)++] = hex[*p & 15];
    } else {
      out[(*o)++] = (char)*p;
    }
  }
  out[*o] = 0;
}

static void addf(char *out, size_t cap, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void addf(char *out, size_t cap, size_t *o, const char *fmt, ...) {
  if (*o >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + *o, cap - *o, fmt, ap);
  va_end(ap);
  if (n > 0) *o = (size_t)n < cap - *o ? *o + (size_t)n : cap - 1;
}

void t_log(int level, const char *fmt, ...) {
  if (level < t_log_level) return;
  char when[32], line[2048];
  t_rfc3339(t_wall_ms(), when, sizeof when);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One write per line so that lines from threads do not interleave. */
  if (!t_log_json) {
    fprintf(stderr, "%s %-5s %s\n", when, level_names[level & 3], line);
    return;
  }
  char out[4096];
  size_t o = 0;
  addf(out, sizeof out, &o, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"", when,
       level_names[level & 3]);
  json_esc(out, sizeof out - 3, &o, line);
  addf(out, sizeof out, &o, "\"}");
  fprintf(stderr, "%s\n", out);
}

size_t t_log_kv_line(int level, const char *event, const t_kv *kv, int n,
                     char *out, size_t cap) {
  if (level < t_log_level || cap < 64) return 0;
  char when[32];
  size_t o = 0;
  t_rfc3339(t_wall_ms(), when, sizeof when);
  if (t_log_json) {
    addf(out, cap, &o, "{\"time\":\"%s\",\"level\":\"%s\",\"event\":\"",
         when, level_names[level & 3]);
    json_esc(out, cap - 3, &o, event);
    addf(out, cap, &o, "\"");
    for (int i = 0; i < n; i++) {
      if (!kv[i].is_num && !kv[i].s) continue;
      addf(out, cap, &o, ",\"");
      json_esc(out, cap - 3, &o, kv[i].k);
      addf(out, cap, &o, "\":");
      if (kv[i].is_num) {
        if (isfinite(kv[i].num)) {
          char num[32];
          t_fmt_shortest(num, sizeof num, kv[i].num, 0);
          addf(out, cap, &o, "%s", num);
        }
        else addf(out, cap, &o, "null");
      } else {
        addf(out, cap, &o, "\"");
        json_esc(out, cap - 3, &o, kv[i].s);
        addf(out, cap, &o, "\"");
      }
    }
    addf(out, cap, &o, "}");
  } else {
    addf(out, cap, &o, "%s %-5s %s", when, level_names[level & 3], event);
    for (int i = 0; i < n; i++) {
      if (kv[i].is_num) {
        addf(out, cap, &o, " %s=%.10g", kv[i].k, kv[i].num);
        continue;
      }
      if (!kv[i].s) continue;
      char v[512];
      size_t j = 0;
      int quote = kv[i].s[0] == 0;
      for (const char *p = kv[i].s; *p && j + 1 < sizeof v; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == ' ' || c == '=' || c == '"') quote = 1;
        v[j++] = (c < 0x20 || c == 0x7f) ? '?' : c == '"' ? '\'' : (char)c;
      }
      v[j] = 0;
      addf(out, cap, &o, quote ? " %s=\"%s\"" : " %s=%s", kv[i].k, v);
    }
  }
  return o;
}

void t_log_put(const char *line, size_t len) {
  /* One write per line so that lines from threads do not interleave. */
  if (len) fprintf(stderr, "%.*s\n", (int)len, line);
}

void t_log_kv(int level, const char *event, const t_kv *kv, int n) {
  char out[T_LOG_LINE_MAX];
  t_log_put(out, t_log_kv_line(level, event, kv, n, out, sizeof out));
}

/* A finite v with the fewest significant digits that read back to the
 * same value (as float when dt is T_F32), as Python's repr and JavaScript
 * choose them, in %g's notation at 15 digits (float32: 6): 100, 598140,
 * 0.1, 1e+300. A value that reads back from p < 15 (6) digits is within
 * half an ulp of that p-digit decimal, far less than half a unit of the
 * 15th digit, so %.15g (%.6g) prints those same digits, its trailing
 * zeros stripped: trying 15, 16, 17 (6 .. 9) in turn finds them. Not so
 * for a subnormal, whose ulp is large beside it: those try from 1. */
int t_fmt_shortest(char *buf, size_t cap, double v, int float32) {
  int lo = float32 ? 6 : 15, hi = float32 ? 9 : 17, n = 0;
  /* A subnormal has fewer digits of precision: from 1 up (5e-324). */
  if (v != 0 && fabs(v) < (float32 ? FLT_MIN : DBL_MIN)) lo = 1;
  for (int p = lo; p <= hi; p++) {
    n = snprintf(buf, cap, "%.*g", p, v);
    if (p == hi || n < 0 || (size_t)n >= cap) break;
    if (float32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
  }
  return n;
}

t_numtext t_num(double v) {
  t_numtext t;
  t_fmt_shortest(t.s, sizeof t.s, v, 0);
  return t;
}

int t_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

int t_parse_f64(const char *s, double *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno == ERANGE && isinf(v)) return -1;
  if (*end) return -1;
  *out = v;
  return 0;
}

int t_mkdirs(const char *path) {
  char tmp[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(tmp, path, n + 1);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

int t_pwrite_all(int fd, const void *buf, size_t len, int64_t off) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = pwrite(fd, p, len, (off_t)off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    len -= (size_t)n;
    off += n;
  }
  return 0;
}

int t_read_file(const char *path, size_t max, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat st;
  int err = 0;
  char *buf = NULL;
  size_t have = 0;
  if (fstat(fd, &st) != 0) {
    err = errno;
  } else if (!S_ISREG(st.st_mode)) {
    err = EINVAL;
  } else if ((uint64_t)st.st_size > max) {
    err = EFBIG;
  } else if (!(buf = malloc(max + 1))) {
    err = ENOMEM;
  } else {
    for (;;) { /* to EOF: the size may have changed since fstat */
      if (have == max) {
        char c;
        ssize_t n = read(fd, &c, 1);
        if (n > 0) err = EFBIG;
        else if (n < 0) err = errno;
        break;
      }
      ssize_t n = read(fd, buf + have, max - have);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        err = errno;
        break;
      }
      if (n == 0) break;
      have += (size_t)n;
    }
  }
  close(fd);
  if (err) {
    free(buf);
    return err;
  }
  buf[have] = 0;
  *out = buf;
  *len = have;
  return 0;
}

size_t t_fmt_int(char *out, long long v) {
  char tmp[24];
  size_t n = 0;
  unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v
                               : (unsigned long long)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  size_t o = 0;
  if (v < 0) out[o++] = '-';
  while (n) out[o++] = tmp[--n];
  return o;
}
