/* test_npyfile.c — compute/array/codec/npyfile.c: a .npy filled by slices from several
 * threads is byte for byte the file npy_write makes of the same array,
 * whatever the sizes (0, 1, sizes that no slice divides, float32 and
 * float64) and the order the slices land in; ranges outside the array are
 * refused; a write error of a full device is T_ENOSPACE; creation on a full
 * file system is T_ENOSPACE with nothing left at the path (a small tmpfs:
 * needs root; a CTest skip, with the reason, otherwise). A streamed upload's file
 * (shape given at the end, header padded to 256 bytes) maps back whole.
 *
 * The file under test is included, as h2o's tests do, to build a sink on
 * /dev/full (which no file creation could give).
 */
#include "compute/array/codec/npyfile.c"

#include <dirent.h>
#include <stdatomic.h>
#include <sys/mount.h>

#include "check.h"
#include "util/pool.h"

static char root[256];
static pool *g_pool;

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  *len = b ? fread(b, 1, (size_t)n, f) : 0;
  fclose(f);
  return b;
}

static int same_files(const char *p, const char *q) {
  size_t lp = 0, lq = 0;
  char *a = slurp(p, &lp), *b = slurp(q, &lq);
  int same = a && b && lp == lq && memcmp(a, b, lp) == 0;
  if (!same)
    fprintf(stderr, "  %s (%zu bytes) and %s (%zu bytes) differ\n", p, lp, q,
            lq);
  free(a);
  free(b);
  return same;
}

typedef struct fill {
  const tarray *from;
  tarray *to;
  int64_t chunk, nchunks;
  int reverse;
  atomic_int failed;
} fill;

/* Slice c of `from` into `to` with tarray_write, on a pool thread. */
static void fill_chunk(void *arg, int64_t c, int slot) {
  fill *f = arg;
  if (f->reverse) c = f->nchunks - 1 - c;
  int64_t s = c * f->chunk, n = f->from->size - s;
  if (n > f->chunk) n = f->chunk;
  terr e;
  size_t is = tdtype_size(f->from->dtype);
  if (tarray_write(f->to, s, n, (const char *)f->from->data + (size_t)s * is,
                   &e))
    atomic_store(&f->failed, 1);
}

static tarray *sample(tdtype dt, int64_t n) {
  int ndim = n == 6 ? 2 : 1; /* one 2-d shape too */
  int64_t shape[2] = {ndim == 2 ? 2 : n, 3};
  tarray *a = tarray_new(dt, ndim, shape);
  for (int64_t i = 0; a && i < a->size; i++)
    tarray_set(a, i, (double)i * 0.37 - 5.0);
  return a;
}

TEST(sink_matches_npy_write) {
  const int64_t sizes[] = {0, 1, 2, 6, 7, 4095, 4097, 65537, 300007};
  const int64_t chunks[] = {1, 1009, 65536};
  int case_no = 0;
  for (int dt = 0; dt < 2; dt++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      tarray *a = sample((tdtype)dt, sizes[k]);
      CHECK(a != NULL);
      if (!a) continue;
      char ref[300], out[300];
      snprintf(ref, sizeof ref, "%s/ref%d.npy", root, case_no);
      FILE *f = fopen(ref, "wb");
      terr e;
      CHECK(f && npy_write(f, a, &e) == 0);
      if (f) fclose(f);
      for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        if (chunks[c] == 1 && a->size > 5000) continue; /* slow, no news */
        for (int reverse = 0; reverse < 2; reverse++) {
          snprintf(out, sizeof out, "%s/out%d_%zu_%d.npy", root, case_no, c,
                   reverse);
          tarray *s = NULL;
          CHECK(tarray_create_npy_sink(out, a->dtype, a->ndim, a->shape, &s,
                                       &e) == 0);
          if (!s) continue;
          CHECK(s->data == NULL && s->sink != NULL && s->size == a->size);
          fill fl = {.from = a, .to = s, .chunk = chunks[c],
                     .nchunks = (a->size + chunks[c] - 1) / chunks[c],
                     .reverse = reverse};
          atomic_init(&fl.failed, 0);
          pool_for(g_pool, 3, fl.nchunks, fill_chunk, &fl, NULL);
          CHECK(atomic_load(&fl.failed) == 0);
          tarray_free(s);
          CHECK_MSG(same_files(ref, out), "%s n=%lld chunk=%lld reverse=%d",
                    tdtype_name(a->dtype), (long long)a->size,
                    (long long)chunks[c], reverse);
          unlink(out);
        }
      }
      /* read back through a mapping, as compare and the API do */
      tarray *m = NULL;
      CHECK(tarray_map_npy(ref, &m, &e) == 0 && m && m->size == a->size);
      for (int64_t i = 0; m && i < m->size; i += 97)
        CHECK(tarray_get(m, i) == tarray_get(a, i));
      tarray_free(m);
      unlink(ref);
      tarray_free(a);
      case_no++;
    }
}

TEST(write_ranges_checked) {
  int64_t n = 10;
  tarray *h = tarray_zeros(T_F64, 1, &n);
  double v[3] = {1, 2, 3};
  terr e;
  CHECK(tarray_write(h, 8, 2, v, &e) == 0 && ((double *)h->data)[9] == 2);
  CHECK(tarray_write(h, 8, 3, v, &e) == T_EINTERNAL);
  CHECK(tarray_write(h, -1, 1, v, &e) == T_EINTERNAL);
  CHECK(tarray_write(h, 11, 0, v, &e) == 0); /* nothing to write */
  CHECK(tarray_write(h, 10, 1, v, &e) == T_EINTERNAL);
  tarray_free(h);
}

TEST(full_device_is_enospace) {
  /* A sink whose file is /dev/full: every write fails with ENOSPC. */
  int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (fd < 0) SKIP_TEST("no /dev/full: %s", strerror(errno));
  int64_t n = 4;
  tarray *a = array_shell(T_F64, 1, &n, n);
  struct tarray_sink *s = malloc(sizeof *s);
  s->fd = fd;
  s->data_off = 128;
  a->sink = s;
  double v[4] = {0};
  terr e;
  CHECK(tarray_write(a, 0, 4, v, &e) == T_ENOSPACE);
  CHECK(e.code == T_ENOSPACE);
  tarray_free(a); /* closes fd */
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (de->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

TEST(create_on_a_full_file_system) {
  terr e;
  tarray *a = NULL;
  char path[400];
  int64_t n = 4;
  snprintf(path, sizeof path, "%s/no/such/dir/x.npy", root);
  CHECK(tarray_create_npy_sink(path, T_F64, 1, &n, &a, &e) == T_EIO && !a);

  char mnt[300];
  snprintf(mnt, sizeof mnt, "%s/tiny", root);
  mkdir(mnt, 0755);
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=8m") != 0) {
    int err = errno;
    rmdir(mnt);
    SKIP_TEST("cannot mount a tmpfs (%s; needs root): full-disk part not run", strerror(err));
  }
  int64_t big = 2000000; /* 16 MB of float64 on an 8 MiB file system */
  for (int mapped = 0; mapped < 2; mapped++) {
    snprintf(path, sizeof path, "%s/r%d.npy.tmp", mnt, mapped);
    int rc = mapped ? tarray_create_npy(path, T_F64, 1, &big, &a, &e)
                    : tarray_create_npy_sink(path, T_F64, 1, &big, &a, &e);
    CHECK_MSG(rc == T_ENOSPACE && !a, "rc %d: %s", rc, e.message);
    CHECK(access(path, F_OK) != 0); /* nothing left behind */
  }
  CHECK(count_files(mnt) == 0);
  /* what fits is written and complete */
  int64_t fits = 100000;
  snprintf(path, sizeof path, "%s/ok.npy", mnt);
  CHECK(tarray_create_npy_sink(path, T_F64, 1, &fits, &a, &e) == 0 && a);
  double v = 2.5;
  for (int64_t i = 0; a && i < fits; i += 9999)
    CHECK(tarray_write(a, i, 1, &v, &e) == 0);
  tarray_free(a);
  tarray *m = NULL;
  CHECK(tarray_map_npy(path, &m, &e) == 0 && m && tarray_get(m, 9999) == 2.5);
  tarray_free(m);
  umount2(mnt, MNT_DETACH);
  rmdir(mnt);
}

/* A streamed upload's file: the data written first after a 256-byte area,
 * the shape last. Every shape fits the area (T_MAXDIM dimensions of 19
 * digits; a shorter area is refused), and the file maps back with its
 * shape and data. */
TEST(stream_file_shape_at_the_end) {
  int64_t big[T_MAXDIM];
  for (int i = 0; i < T_MAXDIM; i++) big[i] = INT64_MAX;
  char h[NPY_HEADER_MAX];
  for (int dt = 0; dt < 2; dt++)
    for (int nd = 0; nd <= T_MAXDIM; nd++)
      CHECK(npy_header_pad((tdtype)dt, nd, big, h, NPY_HEADER_MAX) == NPY_HEADER_MAX &&
            h[NPY_HEADER_MAX - 1] == '\n');
  CHECK(npy_header_pad(T_F64, T_MAXDIM, big, h, 128) == 0); /* too short: refused */
  static const int64_t shapes[][3] = {{0, 0, 0}, {1, 0, 0}, {7, 0, 0}, {3, 5, 0}, {2, 0, 4}};
  static const int nds[] = {1, 0, 1, 2, 3};
  for (size_t k = 0; k < sizeof nds / sizeof *nds; k++) {
    char path[300];
    snprintf(path, sizeof path, "%s/stream%zu.npy", root, k);
    terr e;
    tarray *a = NULL;
    tdtype dt = k % 2 ? T_F32 : T_F64;
    CHECK(tarray_create_npy_stream(path, dt, &a, &e) == 0 && a);
    int64_t n = tshape_size(nds[k], shapes[k], INT64_MAX);
    size_t isz = tdtype_size(dt);
    unsigned char buf[64 * 8];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 + k);
    for (int64_t i = 0; a && i < n; i++) /* element by element */
      CHECK(tarray_write_bytes(a, (uint64_t)i * isz, buf + i * (int64_t)isz, isz, &e) == 0);
    CHECK(tarray_stream_finish(a, nds[k], shapes[k], &e) == 0);
    tarray_free(a);
    tarray *m = NULL;
    CHECK_MSG(tarray_map_npy(path, &m, &e) == 0 && m, "%s", e.message);
    CHECK(m && m->ndim == nds[k] && m->dtype == dt && m->size == n &&
          (n == 0 || memcmp(m->data, buf, (size_t)n * isz) == 0));
    for (int i = 0; m && i < nds[k]; i++) CHECK(m->shape[i] == shapes[k][i]);
    tarray_free(m);
    unlink(path);
  }
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/tessel_npyfile_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  g_pool = pool_create(3, NULL, NULL);
  if (!g_pool) SKIP_ALL("no pool");
  RUN(sink_matches_npy_write);
  RUN(write_ranges_checked);
  RUN(full_device_is_enospace);
  RUN(create_on_a_full_file_system);
  RUN(stream_file_shape_at_the_end);
  pool_destroy(g_pool);
  rmdir(root);
  return check_summary();
}
