/* util.h — small shared helpers: clocks, ids, logging, hashing.
 *
 * Thread safety: every function here may be called from any thread.
 */
#ifndef TESSEL_UTIL_UTIL_H
#define TESSEL_UTIL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Monotonic time in milliseconds (fractional), for durations. */
double t_now_ms(void);
/* Wall-clock time, milliseconds since the Unix epoch. */
int64_t t_wall_ms(void);
/* RFC 3339 UTC with milliseconds, "2026-11-21T07:20:00.123Z", into buf
 * (at least 32 bytes). Returns buf. */
char *t_rfc3339(int64_t wall_ms, char *buf, size_t len);
/* A time as a client gives it, into wall ms: Unix seconds ("1795000000",
 * a fraction allowed: "1795000000.5") or RFC 3339 with a zone
 * ("2026-11-21T07:20:00Z", "…:00.123+02:00"; 't' and 'z' too, a space for
 * the 'T'). 0, or -1 for anything else, trailing characters included. */
int t_parse_time(const char *s, int64_t *wall_ms);

/* A new id "<prefix>_<26 chars>": 48-bit millisecond time then a per-process
 * counter and randomness, Crockford base32, so ids sort by creation time.
 * buf must hold at least T_ID_MAX bytes. */
#define T_ID_MAX 40
char *t_id_new(char prefix, char *buf);
/* 1 when s looks like an id with this prefix (charset and length only). */
int t_id_valid(char prefix, const char *s);

/* SHA-256 of data, as 64 lowercase hex chars + NUL into hex[65]. */
void t_sha256_hex(const void *data, size_t len, char hex[65]);

/* Logging to stderr, one line each, with an RFC 3339 time and a level.
 * Text (the default): "TIME LEVEL message". With t_log_json set
 * (--log-format json): one JSON object per line, {"time", "level", "msg"}
 * for t_log, {"time", "level", "event", <fields>} for t_log_kv, strings
 * escaped as JSON (control characters as \u00XX), numbers as numbers. */
enum { T_LOG_DEBUG, T_LOG_INFO, T_LOG_WARN, T_LOG_ERROR };
extern int t_log_level; /* messages below this level are dropped */
extern int t_log_json;  /* 1: JSON lines; set once at start */
void t_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A structured line: `event` and its fields. Text: "event k=v k=v ..."
 * (a string value with a space, '"' or '=' is quoted, control characters
 * become '?'); JSON: each field a member. A NULL string field is left out;
 * a NaN number is null. */
typedef struct t_kv {
  const char *k;
  const char *s; /* the string value, or NULL with is_num */
  double num;
  int is_num;
} t_kv;
#define T_KV_S(key, val) ((t_kv){(key), (val), 0, 0})
#define T_KV_N(key, val) ((t_kv){(key), NULL, (double)(val), 1})
void t_log_kv(int level, const char *event, const t_kv *kv, int n);
/* t_log_kv in two steps, for a line whose write should not delay what
 * follows it (a job's end line after its waiters are woken): the line
 * formatted into out (cap bytes, 64 at least; T_LOG_LINE_MAX is enough), its length,
 * 0 when level is below the log level; then t_log_put writes it (one
 * write, with its newline; len 0 writes nothing). */
#define T_LOG_LINE_MAX 4096
size_t t_log_kv_line(int level, const char *event, const t_kv *kv, int n,
                     char *out, size_t cap);
void t_log_put(const char *line, size_t len);
#define log_debug(...) t_log(T_LOG_DEBUG, __VA_ARGS__)
#define log_info(...) t_log(T_LOG_INFO, __VA_ARGS__)
#define log_warn(...) t_log(T_LOG_WARN, __VA_ARGS__)
#define log_error(...) t_log(T_LOG_ERROR, __VA_ARGS__)

/* v as the shortest %g text (at most cap bytes) that reads back to the same
 * double (float32: the same float): "0.1", not "0.10000000000000001".
 * snprintf's return. The numbers of JSON and CSV results and of JSON logs. */
int t_fmt_shortest(char *buf, size_t cap, double v, int float32);

/* A number of the user's for a message: t_num(2000000).s is "2000000",
 * t_num(0.1).s "0.1" (t_fmt_shortest), never %g's "2e+06". The struct's
 * array lives to the end of the full expression (C11 6.2.4), so
 * terr_set(e, ..., "r = %s", t_num(r).s) needs no buffer of its own. */
typedef struct t_numtext {
  char s[32];
} t_numtext;
t_numtext t_num(double v);

/* snprintf(dst, cap, "%s", src) without printf (cap > 0): src cut to
 * cap - 1 bytes, dst always terminated. A tiny job made a dozen such
 * copies at ~1,000 instructions each (tests/bench/README.md). */
static inline void t_scopy(char *dst, size_t cap, const char *src) {
  size_t n = 0;
  while (n + 1 < cap && src[n]) n++;
  memmove(dst, src, n);
  dst[n] = 0;
}
/* v in decimal into out (room for 21 bytes; not terminated): its length.
 * snprintf's "%lld" without printf. */
size_t t_fmt_int(char *out, long long v);

/* Parse a whole string as a number; 0 on success, -1 on junk or overflow.
 * (Use these, never atoi.) */
int t_parse_i64(const char *s, int64_t *out);
int t_parse_f64(const char *s, double *out);

/* Create a directory and its parents (mode 0755); 0 or -1 (errno set). */
int t_mkdirs(const char *path);
/* pwrite all len bytes of buf at off (retrying EINTR and short writes):
 * 0 or an errno (EIO for a write that took nothing). */
int t_pwrite_all(int fd, const void *buf, size_t len, int64_t off);
/* Read a whole regular file of at most max bytes into *out (a new buffer,
 * NUL-terminated, *len bytes without the NUL; caller frees): 0, or an
 * errno (EFBIG: longer than max; EINVAL: not a regular file). For small
 * configuration files (a TLS certificate and key). */
int t_read_file(const char *path, size_t max, char **out, size_t *len);

#endif
