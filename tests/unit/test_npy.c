/* test_npy.c — the .npy reader, writer and file-backed arrays.
 *
 * Round trips of every dtype and shape (0-d and empty dimensions included);
 * files written by real NumPy (/usr/bin/python3, when it has numpy) for every
 * integer, bool and float dtype, compared with NumPy's own float64 cast;
 * every strict refusal, on hand-made headers; tarray_create_npy +
 * tarray_map_npy read back by us and by NumPy.
 */
#include <stdint.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compute/array/tarray.h"

static char tmpdir[256];
static int have_numpy;

static int run_py(const char *code) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"%s\" 2>/dev/null", code);
  return system(cmd);
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) b[n] = 0;
  *len = (size_t)n;
  return b;
}

/* A .npy made by hand: version, raw header text (padded to 64 with '\n'
 * unless raw), then data_len bytes of 0x11. */
static size_t mk(char *out, size_t cap, int major, int minor, const char *dict,
                 size_t data_len) {
  size_t pre = major == 1 ? 10 : 12, n = strlen(dict);
  size_t total = (pre + n + 1 + 63) & ~(size_t)63;
  size_t hlen = total - pre;
  if (total + data_len > cap) return 0;
  memcpy(out, "\x93NUMPY", 6);
  out[6] = (char)major;
  out[7] = (char)minor;
  out[8] = (char)(hlen & 0xff);
  out[9] = (char)((hlen >> 8) & 0xff);
  if (major != 1) {
    out[10] = (char)((hlen >> 16) & 0xff);
    out[11] = (char)((hlen >> 24) & 0xff);
  }
  memcpy(out + pre, dict, n);
  memset(out + pre + n, ' ', hlen - n - 1);
  out[total - 1] = '\n';
  memset(out + total, 0x11, data_len);
  return total + data_len;
}

static int parse_dict(const char *dict, size_t data_len, terr *e) {
  static char buf[1 << 16];
  size_t n = mk(buf, sizeof buf, 1, 0, dict, data_len);
  tarray *a = NULL;
  int rc = npy_parse(buf, n, INT64_MAX, &a, e);
  tarray_free(a);
  return rc;
}

TEST(round_trip_all_shapes) {
  int64_t shapes[][T_MAXDIM] = {{0}, {0}, {5}, {2, 3}, {2, 0, 3},
                                {1, 1, 1, 1, 1, 1, 1, 2}, {3, 1}};
  int ndims[] = {0, 1, 1, 2, 3, 8, 2};
  for (int dt = 0; dt < 2; dt++)
    for (size_t s = 0; s < sizeof ndims / sizeof ndims[0]; s++) {
      tarray *a = tarray_new((tdtype)dt, ndims[s], shapes[s]);
      CHECK(a);
      for (int64_t i = 0; i < a->size; i++) tarray_set(a, i, 0.1 * (double)i - 3);
      char *buf;
      size_t len;
      terr e;
      CHECK(npy_to_buffer(a, &buf, &len, &e) == 0);
      /* header: a multiple of 64 ending in '\n'; data right after */
      size_t h = (size_t)(unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8;
      CHECK((10 + h) % 64 == 0);
      CHECK(buf[10 + h - 1] == '\n');
      CHECK(len == 10 + h + (size_t)a->size * tdtype_size(a->dtype));
      tarray *b = NULL;
      CHECK(npy_parse(buf, len, INT64_MAX, &b, &e) == 0);
      CHECK(b && b->dtype == a->dtype && b->ndim == a->ndim && b->size == a->size);
      for (int d = 0; b && d < a->ndim; d++) CHECK(b->shape[d] == a->shape[d]);
      if (b)
        CHECK(memcmp(a->data, b->data, (size_t)a->size * tdtype_size(a->dtype)) == 0);
      /* npy_write gives the same bytes */
      char path[300];
      snprintf(path, sizeof path, "%s/w.npy", tmpdir);
      FILE *f = fopen(path, "wb");
      CHECK(npy_write(f, a, &e) == 0);
      fclose(f);
      size_t flen;
      char *fb = read_file(path, &flen);
      CHECK(fb && flen == len && memcmp(fb, buf, len) == 0);
      free(fb);
      free(buf);
      tarray_free(a);
      tarray_free(b);
    }
}

TEST(header_shape_forms) {
  terr e;
  /* the forms NumPy and Python 2 wrote */
  CHECK(parse_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", 8, &e) == 0);
  CHECK(parse_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }", 40, &e) == 0);
  CHECK(parse_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 48, &e) == 0);
  CHECK(parse_dict("{'descr':'<f8','fortran_order':False,'shape':(2,3)}", 48, &e) == 0);
  CHECK(parse_dict("{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3L), }", 48, &e) == 0);
  CHECK(parse_dict("{\"shape\": ( 2 , 3 , ), \"descr\": \"<f4\", \"fortran_order\": False}", 24, &e) == 0);
  CHECK(parse_dict("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", 3, &e) == 0);
}

TEST(strict_refusals) {
  terr e;
  struct { const char *dict; size_t data; const char *msg; } bad[] = {
      {"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8, "object"},
      {"{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }", 12, "string"},
      {"{'descr': '|S3', 'fortran_order': False, 'shape': (1,), }", 3, "string"},
      {"{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", 16, "complex"},
      {"{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", 8, "big-endian"},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", 2, "unsupported"},
      {"{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }", 8, "structured"},
      {"{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }", 32, "fortran_order"},
      {"{'descr': '<f8', 'fortran_order': 0, 'shape': (1,), }", 8, "fortran_order"},
      {"{'descr': '<f8', 'shape': (1,), }", 8, "missing key 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (1,), }", 8, "missing key 'descr'"},
      {"{'descr': '<f8', 'fortran_order': False, }", 8, "missing key 'shape'"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': 1}", 8, "unexpected key 'x'"},
      {"{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (1,)}", 8, "duplicate"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }", 8, "negative"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8, "too large"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 8, "too big"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,), }", 8, "too big"},
      /* NumPy refuses these although they hold nothing ("array is too
       * big": the non-zero dims times the itemsize overflow intp) */
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4611686018427387904), }", 0, "too big"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (0, 9223372036854775807), }", 0, "too big"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }", 0, "too big"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 0, 4294967296), }", 0, "too big"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 0, 1152921504606846976), }", 0, "too big"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (5), }", 40, "not a tuple"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 8, "more than 8"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2 3), }", 48, "expected"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': [2, 3], }", 48, "tuple"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), } x", 16, "after the dict"},
      {"{'descr': '<f8, 'fortran_order': False, 'shape': (2,), }", 16, "unsupported descr"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 16, "data is 16 bytes"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 32, "data is 32 bytes"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), ", 16, "expected"},
      {"", 0, "expected '{'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    terr_clear(&e);
    int rc = parse_dict(bad[i].dict, bad[i].data, &e);
    CHECK_MSG(rc == T_EINVAL, "case %zu rc %d", i, rc);
    CHECK_MSG(strstr(e.message, bad[i].msg) != NULL, "case %zu: '%s' lacks '%s'",
              i, e.message, bad[i].msg);
  }
  /* the position of an unexpected key is its byte offset in the file */
  const char *d = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': 1}";
  parse_dict(d, 8, &e);
  CHECK(e.position == 10 + (int64_t)(strstr(d, "'x'") - d));
}

TEST(preamble_refusals) {
  static char buf[20000];
  terr e;
  tarray *a = NULL;
  const char *ok = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }";
  size_t n = mk(buf, sizeof buf, 1, 0, ok, 8);
  CHECK(npy_parse(buf, n, INT64_MAX, &a, &e) == 0);
  tarray_free(a);
  /* versions 2.0 and 3.0 read too */
  n = mk(buf, sizeof buf, 2, 0, ok, 8);
  CHECK(npy_parse(buf, n, INT64_MAX, &a, &e) == 0);
  tarray_free(a);
  n = mk(buf, sizeof buf, 3, 0, ok, 8);
  CHECK(npy_parse(buf, n, INT64_MAX, &a, &e) == 0);
  tarray_free(a);
  /* bad magic */
  n = mk(buf, sizeof buf, 1, 0, ok, 8);
  buf[1] = 'n';
  CHECK(npy_parse(buf, n, INT64_MAX, &a, &e) == T_EINVAL && !a);
  CHECK(strstr(e.message, "magic") != NULL);
  /* bad versions */
  int vers[][2] = {{0, 0}, {4, 0}, {1, 1}, {2, 5}};
  for (int i = 0; i < 4; i++) {
    n = mk(buf, sizeof buf, 1, 0, ok, 8);
    buf[6] = (char)vers[i][0];
    buf[7] = (char)vers[i][1];
    CHECK(npy_parse(buf, n, INT64_MAX, &a, &e) == T_EINVAL);
    CHECK(strstr(e.message, "version") != NULL);
  }
  /* header over 10,000 bytes (version 2 lets the length say so) */
  char big[10100];
  snprintf(big, sizeof big, "%s", ok);
  memset(big + strlen(ok), ' ', 10050 - strlen(ok));
  big[10050] = 0;
  n = mk(buf, sizeof buf, 2, 0, big, 8);
  CHECK(n > 0 && npy_parse(buf, n, INT64_MAX, &a, &e) == T_EINVAL);
  CHECK(strstr(e.message, "10000") != NULL);
  /* header length pointing past the end, and tiny files */
  n = mk(buf, sizeof buf, 1, 0, ok, 0);
  CHECK(npy_parse(buf, 40, INT64_MAX, &a, &e) == T_EINVAL);
  CHECK(npy_parse(buf, 9, INT64_MAX, &a, &e) == T_EINVAL);
  CHECK(npy_parse(buf, 0, INT64_MAX, &a, &e) == T_EINVAL);
  buf[6] = 2;
  CHECK(npy_parse(buf, 11, INT64_MAX, &a, &e) == T_EINVAL);
  /* max_elems */
  n = mk(buf, sizeof buf, 1, 0,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 10), }", 400);
  CHECK(npy_parse(buf, n, 99, &a, &e) == T_ETOOLARGE && !a);
  CHECK(npy_parse(buf, n, 100, &a, &e) == 0 && a && a->dtype == T_F32);
  tarray_free(a);
}

TEST(integer_conversion_by_hand) {
  static char buf[4096];
  terr e;
  tarray *a = NULL;
  size_t n = mk(buf, sizeof buf, 1, 0,
                "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", 6);
  int16_t v[3] = {-32768, 7, 32767};
  memcpy(buf + n - 6, v, 6);
  CHECK(npy_parse(buf, n, INT64_MAX, &a, &e) == 0);
  CHECK(a && a->dtype == T_F64 && tarray_get(a, 0) == -32768 &&
        tarray_get(a, 1) == 7 && tarray_get(a, 2) == 32767);
  tarray_free(a);
  n = mk(buf, sizeof buf, 1, 0,
         "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", 3);
  buf[n - 3] = 0;
  buf[n - 2] = 1;
  buf[n - 1] = 1;
  CHECK(npy_parse(buf, n, INT64_MAX, &a, &e) == 0);
  CHECK(a && tarray_get(a, 0) == 0 && tarray_get(a, 1) == 1);
  tarray_free(a);
}

TEST(numpy_files) {
  if (!have_numpy) SKIP_TEST("/usr/bin/python3 has no numpy (Debian's python3-numpy)");
  const char *dts[] = {"f8", "f4", "i8", "i4", "i2", "i1", "u8", "u4", "u2", "u1", "?"};
  const char *shapes[] = {"()", "(0,)", "(7,)", "(3, 4)", "(2, 0, 3)", "(2, 1, 3, 1)"};
  size_t nd = sizeof dts / sizeof dts[0], ns = sizeof shapes / sizeof shapes[0];
  /* one NumPy process writes every file (each start costs ~0.2 s) */
  char code[3000];
  int off = snprintf(code, sizeof code, "import numpy as np\nfor d, t in enumerate([");
  for (size_t d = 0; d < nd; d++) off += snprintf(code + off, sizeof code - (size_t)off, "'%s',", dts[d]);
  off += snprintf(code + off, sizeof code - (size_t)off, "]):\n for s, sh in enumerate([");
  for (size_t k = 0; k < ns; k++) off += snprintf(code + off, sizeof code - (size_t)off, "%s,", shapes[k]);
  snprintf(code + off, sizeof code - (size_t)off,
           "]):\n  n=int(np.prod(sh)); x=(np.arange(n)*37 %% 251 - 120).astype(t).reshape(sh)\n"
           "  np.save('%s/np_%%d_%%d.npy' %% (d, s), x)\n"
           "  np.save('%s/np_%%d_%%d_ref.npy' %% (d, s), x.astype(np.float64))\n",
           tmpdir, tmpdir);
  CHECK(run_py(code) == 0);
  for (size_t d = 0; d < nd; d++)
    for (size_t s = 0; s < ns; s++) {
      char p1[300], p2[300];
      snprintf(p1, sizeof p1, "%s/np_%zu_%zu.npy", tmpdir, d, s);
      snprintf(p2, sizeof p2, "%s/np_%zu_%zu_ref.npy", tmpdir, d, s);
      size_t l1, l2;
      char *b1 = read_file(p1, &l1), *b2 = read_file(p2, &l2);
      tarray *a = NULL, *r = NULL;
      terr e;
      terr_clear(&e);
      CHECK_MSG(b1 && npy_parse(b1, l1, INT64_MAX, &a, &e) == 0, "%s %s: %s",
                dts[d], shapes[s], e.message);
      CHECK(b2 && npy_parse(b2, l2, INT64_MAX, &r, &e) == 0);
      if (a && r) {
        CHECK(a->ndim == r->ndim && a->size == r->size);
        CHECK(a->dtype == (strcmp(dts[d], "f4") == 0 ? T_F32 : T_F64));
        for (int64_t i = 0; i < a->size; i++)
          CHECK(tarray_get(a, i) == tarray_get(r, i));
      }
      tarray_free(a);
      tarray_free(r);
      free(b1);
      free(b2);
    }
  /* what NumPy writes that we refuse */
  struct { const char *make; const char *msg; } bad[] = {
      {"np.save(p, np.zeros((2, 3)).T)", "fortran_order"},
      {"np.save(p, np.arange(3, dtype='>f8'))", "big-endian"},
      {"np.save(p, np.array([1, 'a'], dtype=object), allow_pickle=True)", "object"},
      {"np.save(p, np.array(['ab', 'c']))", "string"},
      {"np.save(p, np.arange(3) + 1j)", "complex"},
      {"np.save(p, np.zeros(3, dtype=[('a', '<f8')]))", "structured"},
  };
  size_t nb = sizeof bad / sizeof bad[0];
  off = snprintf(code, sizeof code, "import numpy as np\n");
  for (size_t i = 0; i < nb; i++)
    off += snprintf(code + off, sizeof code - (size_t)off, "p='%s/bad_%zu.npy'; %s\n",
                    tmpdir, i, bad[i].make);
  CHECK(run_py(code) == 0);
  for (size_t i = 0; i < nb; i++) {
    char p[300];
    snprintf(p, sizeof p, "%s/bad_%zu.npy", tmpdir, i);
    size_t l;
    char *b = read_file(p, &l);
    tarray *a = NULL;
    terr e;
    terr_clear(&e);
    CHECK(b && npy_parse(b, l, INT64_MAX, &a, &e) == T_EINVAL && !a);
    CHECK_MSG(strstr(e.message, bad[i].msg) != NULL, "'%s' lacks '%s'", e.message,
              bad[i].msg);
    free(b);
  }
}

TEST(create_and_map) {
  char path[300];
  snprintf(path, sizeof path, "%s/created.npy", tmpdir);
  int64_t shape[2] = {300, 7};
  for (int dt = 0; dt < 2; dt++) {
    tarray *a = NULL;
    terr e;
    CHECK(tarray_create_npy(path, (tdtype)dt, 2, shape, &a, &e) == 0);
    CHECK(a && ((uintptr_t)a->data % 64) == 0);
    for (int64_t i = 0; a && i < a->size; i++) tarray_set(a, i, (double)i * 0.5 - 7);
    tarray_free(a);
    tarray *m = NULL;
    CHECK(tarray_map_npy(path, &m, &e) == 0);
    CHECK(m && m->dtype == (tdtype)dt && m->ndim == 2 && m->shape[0] == 300 &&
          m->shape[1] == 7);
    for (int64_t i = 0; m && i < m->size; i++)
      CHECK(tarray_get(m, i) == (double)i * 0.5 - 7);
    /* writes to the private mapping never reach the file */
    if (m) tarray_set(m, 0, 12345);
    tarray_free(m);
    CHECK(tarray_map_npy(path, &m, &e) == 0 && m && tarray_get(m, 0) == -7);
    tarray_free(m);
    if (have_numpy) {
      char code[1024], out[300];
      snprintf(out, sizeof out, "%s/np_said.txt", tmpdir);
      snprintf(code, sizeof code,
               "import numpy as np; x=np.load('%s'); "
               "open('%s','w').write('%%s %%s %%r' %% (x.dtype, x.shape, float(x.sum())))",
               path, out);
      CHECK(run_py(code) == 0);
      size_t l;
      char *said = read_file(out, &l);
      double sum = 0;
      for (int64_t i = 0; i < 2100; i++) sum += (double)i * 0.5 - 7;
      char want[200];
      snprintf(want, sizeof want, "%s (300, 7) %.1f", dt ? "float32" : "float64", sum);
      CHECK_MSG(said && strcmp(said, want) == 0, "numpy said '%s', want '%s'",
                said ? said : "", want);
      free(said);
    }
  }
  /* 0-d and empty arrays map too */
  tarray *a = NULL, *m = NULL;
  terr e;
  CHECK(tarray_create_npy(path, T_F64, 0, shape, &a, &e) == 0);
  if (a) tarray_set(a, 0, 2.5);
  tarray_free(a);
  CHECK(tarray_map_npy(path, &m, &e) == 0 && m && m->ndim == 0 && tarray_get(m, 0) == 2.5);
  tarray_free(m);
  int64_t zero[2] = {0, 4};
  CHECK(tarray_create_npy(path, T_F32, 2, zero, &a, &e) == 0);
  tarray_free(a);
  CHECK(tarray_map_npy(path, &m, &e) == 0 && m && m->size == 0);
  tarray_free(m);
  /* A big mapping freed behind (tarray_free_behind: its unmap on a thread
   * of its own) leaves every byte in the file; a small one and a heap
   * array are freed at once. */
  {
    int64_t big[1] = {(int64_t)(80 << 20) / 8}; /* 80 MiB: over the 64 */
    CHECK(tarray_create_npy(path, T_F64, 1, big, &a, &e) == 0);
    if (a) {
      CHECK(a->map_base != NULL);
      for (int64_t i = 0; i < a->size; i += 4096) tarray_set(a, i, (double)i);
      tarray_set(a, a->size - 1, -1.5);
    }
    tarray_free_behind(a);
    for (int i = 0; i < 10000 && tarray_unmapping() > 0; i++) usleep(1000);
    CHECK(tarray_unmapping() == 0);
    CHECK(tarray_map_npy(path, &m, &e) == 0 && m && m->size == big[0]);
    int ok = m != NULL;
    for (int64_t i = 0; ok && i < m->size - 1; i += 4096) ok = tarray_get(m, i) == (double)i;
    CHECK(ok && tarray_get(m, m->size - 1) == -1.5);
    tarray_free(m);
    CHECK(tarray_create_npy(path, T_F64, 2, shape, &a, &e) == 0);
    tarray_free_behind(a); /* small: unmapped here */
    CHECK(tarray_unmapping() == 0);
    tarray_free_behind(tarray_new(T_F64, 2, shape));
    tarray_free_behind(NULL);
  }
  /* refusals: missing file, integer file, junk */
  char p2[300];
  snprintf(p2, sizeof p2, "%s/nope.npy", tmpdir);
  CHECK(tarray_map_npy(p2, &m, &e) == T_ENOTFOUND && !m);
  static char buf[4096];
  size_t n = mk(buf, sizeof buf, 1, 0,
                "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8);
  FILE *f = fopen(p2, "wb");
  fwrite(buf, 1, n, f);
  fclose(f);
  CHECK(tarray_map_npy(p2, &m, &e) == T_EINVAL && !m);
  f = fopen(p2, "wb");
  fwrite("hello", 1, 5, f);
  fclose(f);
  CHECK(tarray_map_npy(p2, &m, &e) == T_EINVAL && !m);
  /* create in a missing directory fails cleanly */
  snprintf(p2, sizeof p2, "%s/no/such/dir.npy", tmpdir);
  CHECK(tarray_create_npy(p2, T_F64, 2, shape, &a, &e) == T_EIO && !a);
}

/* int64 results: '<i8' written, read back bit for bit as a result
 * (npy_parse_result, tarray_map_npy, a created file), converted to
 * float64 as an upload (npy_parse), refused on the same-host mapping; and
 * NumPy reads the file as int64 with the same values. */
TEST(int64_results) {
  const int64_t v[6] = {INT64_MIN, -1, 0, ((int64_t)1 << 53) + 1, INT64_MAX,
                        ((int64_t)1 << 60) + 3};
  int64_t sh[2] = {2, 3};
  tarray *a = tarray_new(T_I64, 2, sh);
  memcpy(a->data, v, sizeof v);
  char *buf = NULL;
  size_t len = 0;
  terr e;
  CHECK(npy_to_buffer(a, &buf, &len, &e) == 0);
  CHECK(buf && strstr(buf + 10, "'descr': '<i8'") != NULL);
  CHECK(buf && len == 10 + ((size_t)(unsigned char)buf[8] |
                            (size_t)(unsigned char)buf[9] << 8) + 48);
  tarray *b = NULL;
  CHECK(npy_parse_result(buf, len, 100, &b, &e) == 0);
  CHECK(b && b->dtype == T_I64 && b->ndim == 2 && memcmp(b->data, v, 48) == 0);
  tarray_free(b);
  CHECK(npy_parse(buf, len, 100, &b, &e) == 0); /* an upload: float64 */
  CHECK(b && b->dtype == T_F64 && tarray_get(b, 3) == 9007199254740992.0);
  tarray_free(b);
  char path[300];
  snprintf(path, sizeof path, "%s/i8.npy", tmpdir);
  FILE *f = fopen(path, "wb");
  CHECK(f && npy_write(f, a, &e) == 0);
  if (f) fclose(f);
  tarray *m = NULL;
  CHECK(tarray_map_npy(path, &m, &e) == 0);
  CHECK(m && m->dtype == T_I64 && memcmp(m->data, v, 48) == 0);
  tarray_free(m);
  int fd = open(path, O_RDONLY);
  CHECK(tarray_map_npy_fd(fd, path, 0, NULL, &m, &e) == T_EINVAL && !m);
  close(fd);
  /* Created (as the scheduler's result files are), filled, mapped back. */
  char p2[300];
  snprintf(p2, sizeof p2, "%s/i8c.npy", tmpdir);
  CHECK(tarray_create_npy(p2, T_I64, 2, sh, &m, &e) == 0);
  if (m) memcpy(m->data, v, sizeof v);
  tarray_free(m);
  m = NULL;
  CHECK(tarray_map_npy(p2, &m, &e) == 0 && m && m->dtype == T_I64 &&
        memcmp(m->data, v, 48) == 0);
  tarray_free(m);
  /* The element text: integers, exact. */
  char t[TNUM_FMT_MAX];
  tnum_fmt(t, sizeof t, T_I64, &v[0], 1);
  CHECK_STR(t, "-9223372036854775808");
  tnum_fmt(t, sizeof t, T_I64, &v[5], 0);
  CHECK_STR(t, "1152921504606846979");
  tnum_fmt(t, sizeof t, T_I64, &v[3], 1);
  CHECK_STR(t, "9007199254740993"); /* 2^53 + 1: no double holds it */
  if (have_numpy) {
    char code[800];
    snprintf(code, sizeof code,
             "import numpy as np\nx = np.load('%s')\n"
             "assert x.dtype == np.int64 and x.shape == (2, 3)\n"
             "assert x.ravel().tolist() == [-2**63, -1, 0, 2**53 + 1, 2**63 - 1,"
             " 2**60 + 3]\n", path);
    CHECK(run_py(code) == 0);
  }
  free(buf);
  tarray_free(a);
}

/* Floats as the fewest digits that read back (API.md's Conventions), in
 * %g's notation at 15 digits (float32 6); NaN and Inf as JSON or CSV. */
TEST(shortest_numbers) {
  static const struct { double v; const char *want; } d[] = {
      {0.1, "0.1"}, {1.0 / 3.0, "0.3333333333333333"}, {1e-300, "1e-300"},
      {2.5, "2.5"}, {100, "100"}, {598140, "598140"}, {-0.0, "-0"},
      {1e22, "1e+22"}, {5e-324, "5e-324"}, {0.1 + 0.2, "0.30000000000000004"},
      {9007199254740993.0, "9007199254740992"}, {1.7976931348623157e308,
      "1.7976931348623157e+308"}, {123456789012345678.0, "1.2345678901234568e+17"}};
  char t[TNUM_FMT_MAX];
  for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
    tnum_fmt(t, sizeof t, T_F64, &d[i].v, 1);
    CHECK_STR(t, d[i].want);
    CHECK(strtod(t, NULL) == d[i].v);
  }
  static const struct { float v; const char *want; } f[] = {
      {0.1f, "0.1"}, {1.0f / 3.0f, "0.33333334"}, {16777217.0f, "16777216"},
      {1e-45f, "1e-45"}, {3.4028235e38f, "3.4028235e+38"}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    tnum_fmt(t, sizeof t, T_F32, &f[i].v, 0);
    CHECK_STR(t, f[i].want);
    CHECK(strtof(t, NULL) == f[i].v);
  }
  double nan = NAN, inf = -INFINITY;
  tnum_fmt(t, sizeof t, T_F64, &nan, 1);
  CHECK_STR(t, "null");
  tnum_fmt(t, sizeof t, T_F64, &inf, 0);
  CHECK_STR(t, "-inf");
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tessel_npy_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  have_numpy = access("/usr/bin/python3", X_OK) == 0 &&
               run_py("import numpy") == 0;
  RUN(round_trip_all_shapes);
  RUN(header_shape_forms);
  RUN(strict_refusals);
  RUN(preamble_refusals);
  RUN(integer_conversion_by_hand);
  RUN(numpy_files);
  RUN(create_and_map);
  RUN(int64_results);
  RUN(shortest_numbers);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  return check_summary();
}
