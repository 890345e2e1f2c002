/* npy.c — NumPy .npy files: a strict reader, a 1.0 writer, and an existing
 * .npy file mapped as an array (creating result files is npyfile.c).
 *
 * Format: 6 magic bytes "\x93NUMPY", major and minor version bytes, the
 * header length (u16 little-endian for 1.0, u32 for 2.0/3.0), then the
 * header: a Python dict literal such as
 *   {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw C-ordered data.
 *
 * The header is read by a small hand-written scanner, not an evaluator: it
 * walks the bytes once with an index that never passes the header's end,
 * accepts exactly the three keys (each once), a string for descr, True or
 * False for fortran_order, and a tuple of at most T_MAXDIM non-negative
 * integers for shape (`()`, `(5,)`, `(2, 3)`, with the spaces and trailing
 * commas NumPy writes, and Python 2's `3L`). No recursion, no allocation,
 * so a hostile header costs at most its (capped) length. Every error is
 * T_EINVAL with position = the byte offset in the file.
 *
 * The writer pads the header so that the data starts at a multiple of 64
 * bytes (NumPy does the same), which also makes mapped data aligned. A
 * file on the data directory's disk must first leave its reserve alone
 * (util/datadir.h: reserve_admit; ENOSPC otherwise, before a byte).
 *
 * Ownership: every tarray returned is the caller's (tarray_free). Thread
 * safety: no shared state; any thread may call anything here.
 */
#include "compute/array/tarray.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/datadir.h"
#include "util/util.h"
#include "util/sigbus.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c assumes a little-endian host"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_HDR_LIMIT 10000 /* API.md: no header over 10,000 bytes */

/* The element types a .npy may hold. */
typedef enum {
  NK_F8, NK_F4, NK_I8, NK_I4, NK_I2, NK_I1, NK_U8, NK_U4, NK_U2, NK_U1, NK_B1
} npy_kind;

static const struct {
  const char *descr;
  npy_kind kind;
  int itemsize;
} npy_descrs[] = {
    {"<f8", NK_F8, 8}, {"<f4", NK_F4, 4}, {"<i8", NK_I8, 8},
    {"<i4", NK_I4, 4}, {"<i2", NK_I2, 2}, {"<i1", NK_I1, 1},
    {"|i1", NK_I1, 1}, {"<u8", NK_U8, 8}, {"<u4", NK_U4, 4},
    {"<u2", NK_U2, 2}, {"<u1", NK_U1, 1}, {"|u1", NK_U1, 1},
    {"|b1", NK_B1, 1},
};

/* What the header says. */
typedef struct npy_meta {
  npy_kind kind;
  int itemsize;
  int ndim;
  int64_t shape[T_MAXDIM];
  size_t data_off; /* bytes before the data */
} npy_meta;

/* ---- header scanner ------------------------------------------------------ */

typedef struct scan {
  const unsigned char *s;
  size_t i, end; /* current index, one past the last header byte */
  size_t base;   /* file offset of s[0], for positions */
  terr *e;
} scan;

static int scan_fail(scan *sc, const char *what) {
  return terr_set(sc->e, T_EINVAL, "", (int64_t)(sc->base + sc->i),
                  "npy header: %s at byte %zu", what, sc->base + sc->i);
}

static void scan_ws(scan *sc) {
  while (sc->i < sc->end && (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t'))
    sc->i++;
}

static int scan_peek(scan *sc) {
  return sc->i < sc->end ? sc->s[sc->i] : -1;
}

static int scan_char(scan *sc, int c, const char *what) {
  scan_ws(sc);
  if (scan_peek(sc) != c) return scan_fail(sc, what);
  sc->i++;
  return 0;
}

/* A quoted string without escapes into out (cap bytes incl. NUL). */
static int scan_string(scan *sc, char *out, size_t cap, const char *what) {
  scan_ws(sc);
  int q = scan_peek(sc);
  if (q != '\'' && q != '"') return scan_fail(sc, what);
  sc->i++;
  size_t n = 0;
  for (;;) {
    int c = scan_peek(sc);
    if (c < 0) return scan_fail(sc, "unterminated string");
    if (c == q) break;
    if (c == '\\' || c < 0x20 || c > 0x7e)
      return scan_fail(sc, "unexpected character in string");
    if (n + 1 >= cap) return scan_fail(sc, "string too long");
    out[n++] = (char)c;
    sc->i++;
  }
  sc->i++;
  out[n] = 0;
  return 0;
}

static int scan_word(scan *sc, const char *w) {
  size_t n = strlen(w);
  if (sc->end - sc->i < n || memcmp(sc->s + sc->i, w, n) != 0) return 0;
  size_t j = sc->i + n;
  if (j < sc->end) {
    unsigned char c = sc->s[j];
    if (c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'))
      return 0;
  }
  sc->i = j;
  return 1;
}

/* A non-negative decimal integer (optionally suffixed L) into *v. */
static int scan_dim(scan *sc, int64_t *v) {
  scan_ws(sc);
  if (scan_peek(sc) == '-') return scan_fail(sc, "negative dimension in shape");
  int c = scan_peek(sc);
  if (c < '0' || c > '9') return scan_fail(sc, "expected an integer in shape");
  int64_t x = 0;
  while ((c = scan_peek(sc)) >= '0' && c <= '9') {
    if (x > (INT64_MAX - (c - '0')) / 10)
      return scan_fail(sc, "dimension too large in shape");
    x = x * 10 + (c - '0');
    sc->i++;
  }
  if (scan_peek(sc) == 'L') sc->i++;
  *v = x;
  return 0;
}

/* '(' [dim (',' dim)* [',']] ')'; a one-element tuple needs its comma. */
static int scan_shape(scan *sc, npy_meta *m) {
  int rc;
  if ((rc = scan_char(sc, '(', "shape must be a tuple"))) return rc;
  m->ndim = 0;
  scan_ws(sc);
  if (scan_peek(sc) == ')') {
    sc->i++;
    return 0;
  }
  int comma = 0;
  for (;;) {
    if (m->ndim == T_MAXDIM) return scan_fail(sc, "more than 8 dimensions");
    if ((rc = scan_dim(sc, &m->shape[m->ndim]))) return rc;
    m->ndim++;
    scan_ws(sc);
    comma = 0;
    if (scan_peek(sc) == ',') {
      sc->i++;
      comma = 1;
      scan_ws(sc);
    }
    if (scan_peek(sc) == ')') break;
    if (!comma) return scan_fail(sc, "expected ',' or ')' in shape");
  }
  if (m->ndim == 1 && !comma)
    return scan_fail(sc, "shape (n) is not a tuple; write (n,)");
  sc->i++;
  return 0;
}

static int descr_lookup(scan *sc, const char *d, npy_meta *m) {
  for (size_t k = 0; k < sizeof npy_descrs / sizeof npy_descrs[0]; k++)
    if (strcmp(npy_descrs[k].descr, d) == 0) {
      m->kind = npy_descrs[k].kind;
      m->itemsize = npy_descrs[k].itemsize;
      return 0;
    }
  const char *why = "unsupported descr";
  if (d[0] == '>') why = "big-endian descr not supported";
  else if (strchr(d, 'O')) why = "object dtype refused";
  else if (strchr(d, 'c')) why = "complex dtype not supported";
  else if (strchr(d, 'U') || strchr(d, 'S') || strchr(d, 'a'))
    why = "string dtype not supported";
  return terr_set(sc->e, T_EINVAL, "", (int64_t)(sc->base + sc->i),
                  "npy header: %s ('%s') at byte %zu", why, d,
                  sc->base + sc->i);
}

/* Parse the dict in s[0..end) (which starts at file offset base). */
static int scan_dict(scan *sc, npy_meta *m) {
  int rc;
  int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
  if ((rc = scan_char(sc, '{', "expected '{'"))) return rc;
  for (;;) {
    scan_ws(sc);
    if (scan_peek(sc) == '}') break;
    char key[32], val[32];
    size_t key_at = sc->i;
    if ((rc = scan_string(sc, key, sizeof key, "expected a quoted key")))
      return rc;
    if ((rc = scan_char(sc, ':', "expected ':'"))) return rc;
    if (strcmp(key, "descr") == 0) {
      if (seen_descr++) goto dup;
      scan_ws(sc);
      if (scan_peek(sc) == '[')
        return scan_fail(sc, "structured dtype not supported");
      size_t at = sc->i;
      if ((rc = scan_string(sc, val, sizeof val, "descr must be a string")))
        return rc;
      size_t after = sc->i;
      sc->i = at;
      if ((rc = descr_lookup(sc, val, m))) return rc;
      sc->i = after;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (seen_fortran++) goto dup;
      scan_ws(sc);
      if (scan_word(sc, "False")) {
      } else if (scan_word(sc, "True")) {
        return scan_fail(sc, "fortran_order True not supported (C order only)");
      } else {
        return scan_fail(sc, "fortran_order must be True or False");
      }
    } else if (strcmp(key, "shape") == 0) {
      if (seen_shape++) goto dup;
      if ((rc = scan_shape(sc, m))) return rc;
    } else {
      sc->i = key_at;
      return terr_set(sc->e, T_EINVAL, "", (int64_t)(sc->base + key_at),
                      "npy header: unexpected key '%s' at byte %zu", key,
                      sc->base + key_at);
    }
    scan_ws(sc);
    if (scan_peek(sc) == ',') {
      sc->i++;
      continue;
    }
    scan_ws(sc);
    if (scan_peek(sc) != '}') return scan_fail(sc, "expected ',' or '}'");
  }
  sc->i++; /* '}' */
  if (!seen_descr || !seen_fortran || !seen_shape)
    return scan_fail(sc, !seen_descr     ? "missing key 'descr'"
                         : !seen_fortran ? "missing key 'fortran_order'"
                                         : "missing key 'shape'");
  /* Only padding may follow. */
  while (sc->i < sc->end) {
    int c = sc->s[sc->i];
    if (c != ' ' && c != '\t' && c != '\n')
      return scan_fail(sc, "unexpected text after the dict");
    sc->i++;
  }
  return 0;
dup:
  return scan_fail(sc, "duplicate key");
}

/* Read the preamble and header of a file of `len` bytes at buf. */
static int npy_read_header(const unsigned char *buf, size_t len, npy_meta *m,
                           terr *e) {
  memset(m, 0, sizeof *m);
  if (len < 10 || memcmp(buf, NPY_MAGIC, 6) != 0)
    return terr_set(e, T_EINVAL, "", 0, "npy: bad magic (not a .npy file)");
  int major = buf[6], minor = buf[7];
  if (major < 1 || major > 3 || minor != 0)
    return terr_set(e, T_EINVAL, "", 6, "npy: unsupported version %d.%d",
                    major, minor);
  size_t pre = major == 1 ? 10 : 12;
  if (len < pre)
    return terr_set(e, T_EINVAL, "", (int64_t)len, "npy: truncated preamble");
  size_t hlen = major == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                           : (size_t)buf[8] | (size_t)buf[9] << 8 |
                                 (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
  if (hlen > NPY_HDR_LIMIT)
    return terr_set(e, T_EINVAL, "", 8,
                    "npy: header of %zu bytes is over the 10000 limit", hlen);
  if (len - pre < hlen)
    return terr_set(e, T_EINVAL, "", (int64_t)len,
                    "npy: header runs past the end of the file");
  scan sc = {.s = buf + pre, .i = 0, .end = hlen, .base = pre, .e = e};
  int rc = scan_dict(&sc, m);
  if (rc) return rc;
  m->data_off = pre + hlen;
  return 0;
}

/* The element count of m's shape, capped by max_elems. */
static int npy_count(const npy_meta *m, int64_t max_elems, int64_t *size,
                     terr *e) {
  /* NumPy's own rule (see T_EXTENT_MAX): zeros do not excuse the rest */
  int64_t n = tshape_size(m->ndim, m->shape, INT64_MAX);
  if (n < 0) {
    char sh[T_MAXDIM * 22];
    return terr_set(e, T_EINVAL, "body", -1,
                    "npy: shape %s is too big: its non-zero dimensions "
                    "multiply to 2^60 or more (NumPy: \"array is "
                    "too big\")",
                    tshape_str(m->ndim, m->shape, sh, sizeof sh));
  }
  if (n > max_elems)
    return terr_set(e, T_ETOOLARGE, "", -1,
                    "npy: %lld elements is over the limit of %lld",
                    (long long)n, (long long)max_elems);
  *size = n;
  return 0;
}

/* Element count and data length, checked against the bytes present. */
static int npy_check_data(const npy_meta *m, size_t len, int64_t max_elems,
                          int64_t *size, terr *e) {
  int64_t n = 0;
  int rc = npy_count(m, max_elems, &n, e);
  if (rc) return rc;
  uint64_t want = (uint64_t)n * (uint64_t)m->itemsize;
  uint64_t have = (uint64_t)(len - m->data_off);
  if (have != want)
    return terr_set(e, T_EINVAL, "", (int64_t)len,
                    "npy: data is %llu bytes, shape x itemsize needs %llu",
                    (unsigned long long)have, (unsigned long long)want);
  *size = n;
  return 0;
}

/* n integer or bool elements of kind k (any alignment) as float64. */
static void npy_to_f64(npy_kind k, int itemsize, const unsigned char *src,
                       int64_t n, double *d) {
  for (int64_t i = 0; i < n; i++) {
    const unsigned char *p = src + (size_t)i * (size_t)itemsize;
    switch (k) {
      case NK_I8: { int64_t v; memcpy(&v, p, 8); d[i] = (double)v; break; }
      case NK_I4: { int32_t v; memcpy(&v, p, 4); d[i] = v; break; }
      case NK_I2: { int16_t v; memcpy(&v, p, 2); d[i] = v; break; }
      case NK_I1: d[i] = (int8_t)p[0]; break;
      case NK_U8: { uint64_t v; memcpy(&v, p, 8); d[i] = (double)v; break; }
      case NK_U4: { uint32_t v; memcpy(&v, p, 4); d[i] = v; break; }
      case NK_U2: { uint16_t v; memcpy(&v, p, 2); d[i] = v; break; }
      case NK_U1: d[i] = p[0]; break;
      case NK_B1: d[i] = p[0] != 0; break;
      default: d[i] = 0; break;
    }
  }
}

/* Copy n elements of kind k from src (any alignment) into dst. */
static void npy_convert(const npy_meta *m, const unsigned char *src, int64_t n,
                        tarray *dst) {
  if (m->kind == NK_F8 || m->kind == NK_F4) {
    memcpy(dst->data, src, (size_t)n * (size_t)m->itemsize);
    return;
  }
  npy_to_f64(m->kind, m->itemsize, src, n, dst->data);
}

/* ---- a header read as the bytes arrive ------------------------------------ */

size_t npy_head_need(const void *buf, size_t len) {
  const unsigned char *b = buf;
  if (len < 10) return 10;
  if (memcmp(b, NPY_MAGIC, 6) != 0 || b[6] < 1 || b[6] > 3 || b[7] != 0)
    return len; /* not a .npy: npy_head_read says what is wrong */
  size_t pre = b[6] == 1 ? 10 : 12;
  if (len < pre) return pre;
  size_t hlen = b[6] == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                          : (size_t)b[8] | (size_t)b[9] << 8 |
                                (size_t)b[10] << 16 | (size_t)b[11] << 24;
  if (hlen > NPY_HDR_LIMIT) return len; /* refused by npy_head_read */
  return pre + hlen;
}

int npy_head_read(const void *buf, size_t len, int64_t max_elems,
                  npy_head *h, terr *e) {
  memset(h, 0, sizeof *h);
  npy_meta m;
  int rc = npy_read_header(buf, len, &m, e);
  if (rc) return rc;
  int64_t n = 0;
  if ((rc = npy_count(&m, max_elems, &n, e))) return rc;
  h->src_kind = (int)m.kind;
  h->src_itemsize = m.itemsize;
  h->dtype = m.kind == NK_F4 ? T_F32 : T_F64;
  h->ndim = m.ndim;
  memcpy(h->shape, m.shape, sizeof h->shape);
  h->size = n;
  h->data_off = m.data_off;
  h->src_bytes = (uint64_t)n * (uint64_t)m.itemsize;
  return 0;
}

int npy_head_native(const npy_head *h) {
  return h->src_kind == NK_F8 || h->src_kind == NK_F4;
}

void npy_head_convert(const npy_head *h, const void *src, int64_t n,
                      double *dst) {
  npy_to_f64((npy_kind)h->src_kind, h->src_itemsize, src, n, dst);
}

/* npy_parse and npy_parse_result: keep_i64 keeps '<i8' as T_I64 (a
 * result's integers), else every integer kind becomes float64. */
static int npy_parse_as(const void *buf, size_t len, int64_t max_elems,
                        int keep_i64, tarray **out, terr *e) {
  *out = NULL;
  npy_meta m;
  int64_t n = 0;
  int rc = npy_read_header(buf, len, &m, e);
  if (rc) return rc;
  if ((rc = npy_check_data(&m, len, max_elems, &n, e))) return rc;
  int i64 = keep_i64 && m.kind == NK_I8;
  tdtype dt = i64 ? T_I64 : m.kind == NK_F4 ? T_F32 : T_F64;
  tarray *a = tarray_new(dt, m.ndim, m.shape);
  if (!a) return terr_set(e, T_ENOMEM, "", -1, "npy: out of memory");
  if (i64)
    memcpy(a->data, (const unsigned char *)buf + m.data_off, (size_t)n * 8);
  else
    npy_convert(&m, (const unsigned char *)buf + m.data_off, n, a);
  *out = a;
  return 0;
}

int npy_parse(const void *buf, size_t len, int64_t max_elems, tarray **out,
              terr *e) {
  return npy_parse_as(buf, len, max_elems, 0, out, e);
}

int npy_parse_result(const void *buf, size_t len, int64_t max_elems,
                     tarray **out, terr *e) {
  return npy_parse_as(buf, len, max_elems, 1, out, e);
}

/* ---- writer -------------------------------------------------------------- */

size_t npy_header(tdtype dt, int ndim, const int64_t *shape, char *hdr) {
  return npy_header_pad(dt, ndim, shape, hdr, 0);
}

size_t npy_header_pad(tdtype dt, int ndim, const int64_t *shape, char *hdr,
                      size_t len) {
  /* Written without printf (a tiny result's header took three snprintf
   * calls). With T_MAXDIM 19-digit dimensions the dict is under 240
   * bytes. */
  char dict[NPY_HEADER_MAX];
  static const char head[] = "{'descr': '<f8', 'fortran_order': False, 'shape': (";
  size_t n = sizeof head - 1;
  memcpy(dict, head, n);
  if (dt == T_F32) dict[12] = 'f', dict[13] = '4';
  else if (dt == T_I64) dict[12] = 'i', dict[13] = '8';
  for (int i = 0; i < ndim && i < T_MAXDIM; i++) {
    if (i) dict[n++] = ',', dict[n++] = ' ';
    n += t_fmt_int(dict + n, (long long)shape[i]);
  }
  if (ndim == 1) dict[n++] = ',';
  memcpy(dict + n, "), }", 5);
  n += 4;
  size_t total = (10 + n + 1 + 63) & ~(size_t)63;
  if (len) {
    if (len < total || len % 64 || len > NPY_HEADER_MAX) return 0;
    total = len;
  }
  memcpy(hdr, NPY_MAGIC, 6);
  hdr[6] = 1;
  hdr[7] = 0;
  size_t hlen = total - 10;
  hdr[8] = (char)(hlen & 0xff);
  hdr[9] = (char)(hlen >> 8);
  memcpy(hdr + 10, dict, n);
  memset(hdr + 10 + n, ' ', total - 10 - n - 1);
  hdr[total - 1] = '\n';
  return total;
}

int npy_write(FILE *f, const tarray *a, terr *e) {
  char hdr[NPY_HEADER_MAX];
  size_t h = npy_header(a->dtype, a->ndim, a->shape, hdr);
  size_t bytes = (size_t)a->size * tdtype_size(a->dtype);
  /* On the data disk: not on the store's room (util/datadir.h); errno
   * says ENOSPC as a failed write would. */
  int err = reserve_admit(fileno(f), (int64_t)(h + bytes));
  if (err) {
    errno = err;
    return terr_set(e, T_EIO, "", -1, "npy: write failed: %s", strerror(err));
  }
  if (fwrite(hdr, 1, h, f) != h ||
      (bytes && fwrite(a->data, 1, bytes, f) != bytes))
    return terr_set(e, T_EIO, "", -1, "npy: write failed: %s",
                    strerror(errno));
  return 0;
}

int npy_to_buffer(const tarray *a, char **buf, size_t *len, terr *e) {
  *buf = NULL;
  *len = 0;
  char hdr[NPY_HEADER_MAX];
  size_t h = npy_header(a->dtype, a->ndim, a->shape, hdr);
  size_t bytes = (size_t)a->size * tdtype_size(a->dtype);
  char *b = malloc(h + bytes);
  if (!b) return terr_set(e, T_ENOMEM, "", -1, "npy: out of memory");
  memcpy(b, hdr, h);
  if (bytes) memcpy(b + h, a->data, bytes);
  *buf = b;
  *len = h + bytes;
  return 0;
}

/* ---- mapping an existing file ------------------------------------------- */

/* tarray_map_npy_fd, and with i64 '<i8' mapped as T_I64 (results). */
static int map_npy_fd(int fd, const char *name, int guard, atomic_int *torn,
                      int i64, tarray **out, terr *e) {
  *out = NULL;
  int rc, gid = 0;
  void *base = MAP_FAILED;
  size_t len = 0;
  tarray *a = NULL;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = terr_set(e, T_EIO, "", -1, "npy: %s is not a regular file", name);
    goto fail;
  }
  len = (size_t)st.st_size;
  if (len < 10) {
    rc = terr_set(e, T_EINVAL, "", 0, "npy: %s is too short", name);
    goto fail;
  }
  /* Private + writable: a job may scribble on its copy; the file never
   * sees it (pages are copied on write). */
  base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) {
    rc = terr_set(e, T_EIO, "", -1, "npy: cannot map %s: %s", name,
                  strerror(errno));
    goto fail;
  }
  /* Guarded before the first read: the header may be cut off too. */
  if (guard && !(gid = sigbus_guard(base, len, PROT_READ | PROT_WRITE, torn))) {
    rc = terr_set(e, T_EUNAVAIL, "", -1,
                  "npy: too many same-host files mapped at once (%d)",
                  SIGBUS_MAX_GUARDS);
    goto fail;
  }
  npy_meta m;
  int64_t n = 0;
  if ((rc = npy_read_header(base, len, &m, e))) goto fail;
  if (m.kind != NK_F8 && m.kind != NK_F4 && !(i64 && m.kind == NK_I8)) {
    rc = terr_set(e, T_EINVAL, "", -1,
                  "npy: %s holds integers; only float32/float64 map", name);
    goto fail;
  }
  if ((rc = npy_check_data(&m, len, INT64_MAX, &n, e))) goto fail;
  if (m.data_off % (size_t)m.itemsize != 0) {
    rc = terr_set(e, T_EINVAL, "", (int64_t)m.data_off,
                  "npy: data of %s is not aligned", name);
    goto fail;
  }
  if (gid && sigbus_torn(gid)) {
    rc = terr_set(e, T_ECONFLICT, "", -1, "npy: %s changed while it was read",
                  name);
    goto fail;
  }
  a = calloc(1, sizeof *a);
  if (!a) {
    rc = terr_set(e, T_ENOMEM, "", -1, "npy: out of memory");
    goto fail;
  }
  a->dtype = m.kind == NK_I8 ? T_I64 : m.kind == NK_F4 ? T_F32 : T_F64;
  a->ndim = m.ndim;
  for (int i = 0; i < m.ndim; i++) a->shape[i] = m.shape[i];
  a->size = n;
  a->data = (char *)base + m.data_off;
  a->map_base = base;
  a->map_len = len;
  a->guard = gid;
  *out = a;
  return 0;
fail:
  sigbus_unguard(gid);
  if (base != MAP_FAILED) munmap(base, len);
  return rc;
}

int tarray_map_npy_fd(int fd, const char *name, int guard, atomic_int *torn,
                      tarray **out, terr *e) {
  return map_npy_fd(fd, name, guard, torn, 0, out, e);
}

int tarray_map_npy(const char *path, tarray **out, terr *e) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return terr_set(e, errno == ENOENT ? T_ENOTFOUND : T_EIO, "", -1,
                    "npy: cannot open %s: %s", path, strerror(errno));
  int rc = map_npy_fd(fd, path, 0, NULL, 1, out, e);
  close(fd);
  return rc;
}
