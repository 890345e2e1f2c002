/* buf.h — the one growable byte buffer, with a cap (after curl's dynbuf).
 *
 * A tbuf grows by doubling up to `max` bytes; an append that would pass the
 * cap, or a failed allocation, puts the buffer in its error state: every
 * later append is a no-op and tbuf_take hands back NULL, so a writer can
 * append a whole document and check once at the end. The text is always
 * NUL-terminated (the terminator is not counted in len and fits in max).
 *
 * The JSON writers append values as jansson's dumps writes them (strings
 * escaped as its default, reals with `prec` significant digits, ".0" on a
 * real that reads as an integer, exponents without '+' or leading zeros, a
 * non-finite real as null): text written here and text jansson wrote for
 * the same value are equal.
 *
 * Ownership: the buffer owns p until tbuf_take, which hands it to the
 * caller (free()). tbuf_free(NULL) and tbuf_free of a taken buffer are
 * no-ops. Threads: a tbuf is used by one thread at a time.
 */
#ifndef TESSEL_UTIL_BUF_H
#define TESSEL_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TBUF_MAX_DEFAULT ((size_t)1 << 30) /* 1 GiB */

typedef struct tbuf {
  char *p;
  size_t len, cap, max;
  int err; /* 0, T_ENOMEM or T_ETOOLARGE (util/err.h): the first failure */
} tbuf;

/* An empty buffer whose contents may not pass max bytes (0: the default). */
void tbuf_init(tbuf *b, size_t max);
/* Room for `more` bytes beyond len: 0, or the error state's code. */
int tbuf_reserve(tbuf *b, size_t more);
void tbuf_add_grow(tbuf *b, const void *s, size_t n);
/* Inline when the room is there (cap <= max + 1, so within the cap too):
 * a tiny job makes ~300 adds, most of a few bytes. */
static inline void tbuf_add(tbuf *b, const void *s, size_t n) {
  if (!b->err && n < b->cap - b->len) {
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
  } else {
    tbuf_add_grow(b, s, n);
  }
}
void tbuf_adds(tbuf *b, const char *s);
/* tbuf_adds of a string literal, its length known at compile time (a job
 * record is ~35 literal pieces: no strlen for each). */
#define tbuf_addl(b, lit) tbuf_add((b), "" lit, sizeof(lit) - 1)
void tbuf_addf(tbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tbuf_vaddf(tbuf *b, const char *fmt, va_list ap);
/* The text (NUL-terminated, *len bytes; len may be NULL) handed to the
 * caller, or NULL when the buffer is in its error state (then freed). The
 * buffer is empty afterwards. */
char *tbuf_take(tbuf *b, size_t *len);
void tbuf_free(tbuf *b);

/* JSON values, as jansson writes them (see above). */
void tbuf_json_str(tbuf *b, const char *s);         /* NULL: null */
/* prec 17 is jansson's default; prec 0 writes the fewest significant
 * digits (15 to 17) that read back as v: "823.754", not jansson's
 * "823.75400000000002" (then the text differs from jansson's, not the
 * value). */
void tbuf_json_real(tbuf *b, double v, int prec);
void tbuf_json_int(tbuf *b, long long v);
/* JSON text s (jansson's) with each real written as tbuf_json_real(.., 0)
 * writes it; a new malloc()ed string (the caller's), *len its length (len
 * may be NULL), NULL when out of memory. */
char *tjson_short_reals(const char *s, size_t *len);

#endif
