/* test_localfile.c — compute/array/localfile: the allowed directories, the textual
 * check, opening beneath a root with openat2 and with the component walk
 * (the same answers both ways), per-owner roots, outputs (unnamed while
 * written, checked: a header overwritten, a hole, a short file refused;
 * placed over an existing file; a directory moved out or replaced: nothing
 * written; the named fallback under .tessel-tmp and its sweep at start;
 * symlink refused), a mapped input truncated under a reader:
 * zeros, no crash, and the log's check fails naming the field; and pins
 * (a file touched, replaced or gone since its check: T_ECONFLICT).
 */
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/array/localfile.h"
#include "check.h"
#include "util/sigbus.h"

static char D[128];

static void put_npy(const char *name, int64_t n) {
  char p[300];
  snprintf(p, sizeof p, "%s/%s", D, name);
  int64_t shape[1] = {n};
  tarray *a = tarray_zeros(T_F64, 1, shape);
  for (int64_t i = 0; i < n; i++) ((double *)a->data)[i] = (double)i + 1;
  FILE *f = fopen(p, "wb");
  terr e;
  CHECK(f && npy_write(f, a, &e) == 0);
  if (f) fclose(f);
  tarray_free(a);
}

TEST(config) {
  tlocal *l = NULL;
  terr e;
  const char *bad[] = {"/nonexistent/x"};
  CHECK(tlocal_create(bad, 1, &l, &e) == T_EINVAL && !l);
  char file[300];
  snprintf(file, sizeof file, "%s/plain", D);
  FILE *f = fopen(file, "w");
  fclose(f);
  const char *notdir[] = {file};
  CHECK(tlocal_create(notdir, 1, &l, &e) == T_EINVAL && !l);
  CHECK(tlocal_create(NULL, 0, &l, &e) == 0 && !l); /* off */
  char messy[300];
  snprintf(messy, sizeof messy, "%s/./", D);
  const char *ok[] = {messy};
  CHECK(tlocal_create(ok, 1, &l, &e) == 0 && l && l->n == 1);
  if (l) CHECK_STR(l->dirs[0], D); /* canonical */
  tlocal_free(l);
  unlink(file);
}

TEST(text) {
  const char *r;
  CHECK(tlocal_path_below("/a/b", "/a/b/x.npy", &r) == 0 && strcmp(r, "x.npy") == 0);
  CHECK(tlocal_path_below("/a/b", "/a/b//c/x.npy", &r) == 0 && strcmp(r, "c/x.npy") == 0);
  CHECK(tlocal_path_below("/a/b", "/a/bc/x.npy", &r) == T_EFORBIDDEN);
  CHECK(tlocal_path_below("/a/b", "/a/b", &r) == T_EFORBIDDEN);
  CHECK(tlocal_path_below("/a/b", "/a/b/", &r) == T_EFORBIDDEN);
  CHECK(tlocal_path_below("/a/b", "/a/b/../b/x", &r) == T_EFORBIDDEN);
  CHECK(tlocal_path_below("/a/b", "/a/b/c/..", &r) == T_EFORBIDDEN);
  CHECK(tlocal_path_below("/a/b", "/a/b/..x/y", &r) == 0); /* a name */
  CHECK(tlocal_path_below("/a/b", "a/b/x", &r) == T_EFORBIDDEN);
  CHECK(tlocal_path_below("/", "/etc/passwd", &r) == 0 && strcmp(r, "etc/passwd") == 0);
  char longp[TLOCAL_PATH_MAX + 10];
  memset(longp, 'a', sizeof longp - 1);
  longp[0] = '/';
  longp[sizeof longp - 1] = 0;
  CHECK(tlocal_path_below("/a", longp, &r) == T_EINVAL);
}

/* The same answers with openat2 and with the walk. */
static void open_cases(const tlocal *l) {
  char p[400];
  int fd;
  terr e;
  snprintf(p, sizeof p, "%s/in/x.npy", D);
  CHECK(tlocal_open(l, "", p, "f", &fd, &e) == 0);
  if (fd >= 0) close(fd);
  snprintf(p, sizeof p, "%s/in//./x.npy", D);
  CHECK(tlocal_open(l, "", p, "f", &fd, &e) == 0);
  if (fd >= 0) close(fd);
  snprintf(p, sizeof p, "%s/in/link.npy", D); /* -> x.npy, inside */
  CHECK(tlocal_open(l, "", p, "f", &fd, &e) == T_EFORBIDDEN);
  CHECK_STR(e.field, "f");
  snprintf(p, sizeof p, "%s/dirlink/x.npy", D); /* dirlink -> in */
  CHECK(tlocal_open(l, "", p, "f", &fd, &e) == T_EFORBIDDEN);
  snprintf(p, sizeof p, "%s/in/nothere.npy", D);
  CHECK(tlocal_open(l, "", p, "f", &fd, &e) == T_ENOTFOUND);
  snprintf(p, sizeof p, "%s/in/x.npy/y", D);
  CHECK(tlocal_open(l, "", p, "f", &fd, &e) == T_ENOTFOUND);
  snprintf(p, sizeof p, "%s/in", D); /* a directory: not a regular file */
  CHECK(tlocal_open(l, "", p, "f", &fd, &e) == T_EINVAL);
  /* Owners: D/alice only. */
  snprintf(p, sizeof p, "%s/alice/a.npy", D);
  CHECK(tlocal_open(l, "alice", p, "f", &fd, &e) == 0);
  if (fd >= 0) close(fd);
  CHECK(tlocal_open(l, "bob", p, "f", &fd, &e) == T_EFORBIDDEN);
  CHECK(tlocal_open(l, "", p, "f", &fd, &e) == 0); /* open service: all of D */
  if (fd >= 0) close(fd);
  snprintf(p, sizeof p, "%s/in/x.npy", D);
  CHECK(tlocal_open(l, "alice", p, "f", &fd, &e) == T_EFORBIDDEN);
  snprintf(p, sizeof p, "%s/../x", D);
  CHECK(tlocal_open(l, "..", p, "f", &fd, &e) == T_EFORBIDDEN);
  snprintf(p, sizeof p, "%s/mallory/a.npy", D); /* mallory -> alice */
  CHECK(tlocal_open(l, "mallory", p, "f", &fd, &e) == T_EFORBIDDEN);
  CHECK(tlocal_open(NULL, "", p, "f", &fd, &e) == T_EFORBIDDEN);
  CHECK(strstr(e.message, "--local-dir") != NULL);
}

TEST(open_beneath_both_ways) {
  char p[400], q[400];
  snprintf(p, sizeof p, "%s/in", D);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/alice", D);
  mkdir(p, 0700);
  put_npy("in/x.npy", 4);
  put_npy("alice/a.npy", 4);
  snprintf(p, sizeof p, "%s/in/link.npy", D);
  CHECK(symlink("x.npy", p) == 0);
  snprintf(p, sizeof p, "%s/dirlink", D);
  snprintf(q, sizeof q, "%s/in", D);
  CHECK(symlink(q, p) == 0);
  snprintf(p, sizeof p, "%s/mallory", D);
  CHECK(symlink("alice", p) == 0);
  const char *dirs[] = {D};
  tlocal *l;
  terr e;
  CHECK(tlocal_create(dirs, 1, &l, &e) == 0);
  tlocal_test_no_openat2 = 0;
  open_cases(l);
  tlocal_test_no_openat2 = 1;
  open_cases(l);
  tlocal_test_no_openat2 = 0;
  tlocal_free(l);
}

/* Entries of dir (not . and ..); -1 when it cannot be read. */
static int entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
  closedir(d);
  return n;
}

/* An output of 3 float64 (0, 1, 2) made as a sink (sink 1) or a mapping,
 * complete; its length in *bytes. */
static tarray *out_three(tlocal_out *o, int sink, int64_t *bytes) {
  int64_t shape[1] = {3};
  double v[3] = {0, 1, 2};
  char hdr[NPY_HEADER_MAX];
  terr e;
  tarray *a = NULL;
  *bytes = (int64_t)npy_header(T_F64, 1, shape, hdr) + 24;
  CHECK(tlocal_out_create(o, T_F64, 1, shape, sink, &a, &e) == 0);
  if (a) CHECK(tarray_write(a, 0, 3, v, &e) == 0);
  return a;
}

TEST(outputs) {
  const char *dirs[] = {D};
  tlocal *l;
  terr e;
  CHECK(tlocal_create(dirs, 1, &l, &e) == 0);
  char p[400], in[400];
  tlocal_out o;
  snprintf(in, sizeof in, "%s/in", D);
  snprintf(p, sizeof p, "%s/in/link.npy", D);
  CHECK(tlocal_out_open(l, "", p, "output.file", &o, &e) == T_EFORBIDDEN);
  CHECK_STR(e.field, "output.file");
  snprintf(p, sizeof p, "%s/dirlink/o.npy", D);
  CHECK(tlocal_out_open(l, "", p, "output.file", &o, &e) == T_EFORBIDDEN);
  snprintf(p, sizeof p, "%s/in", D); /* a directory */
  CHECK(tlocal_out_open(l, "", p, "output.file", &o, &e) == T_EINVAL);
  snprintf(p, sizeof p, "%s/in/o.npy", D);
  int before = entries(in);
  CHECK(tlocal_out_open(l, "", p, "output.file", &o, &e) == 0);
  int64_t shape[1] = {3}, bytes;
  tarray *a = out_three(&o, 0, &bytes);
  /* unnamed: nothing new in the directory while it is written */
  CHECK(a && a->guard > 0 && o.fd >= 0 && o.tmp[0] == 0);
  CHECK(entries(in) == before);
  int torn = a ? sigbus_torn(a->guard) : 1;
  tarray_free(a);
  CHECK(tlocal_out_check(&o, T_F64, 1, shape, torn, &e) == 0);
  CHECK(tlocal_out_place(&o, &e) == 0);
  struct stat st;
  CHECK(stat(p, &st) == 0 && st.st_size == bytes);
  CHECK(entries(in) == before + 1);
  /* over an existing file (link beside it, renamed over): replaced */
  a = out_three(&o, 1, &bytes);
  tarray_free(a);
  CHECK(tlocal_out_check(&o, T_F64, 1, shape, 0, &e) == 0);
  CHECK(tlocal_out_place(&o, &e) == 0);
  CHECK(entries(in) == before + 1);
  ino_t old_ino = stat(p, &st) == 0 ? st.st_ino : 0;
  /* a header overwritten under the write: refused, the old file stays */
  a = out_three(&o, 1, &bytes);
  tarray_free(a);
  CHECK(pwrite(o.fd, "\0\0\0\0\0\0\0\0", 8, 0) == 8);
  CHECK(tlocal_out_check(&o, T_F64, 1, shape, 0, &e) == T_ECONFLICT);
  CHECK_STR(e.field, "output.file");
  CHECK(strstr(e.message, "header") != NULL);
  CHECK(o.fd < 0 && tlocal_out_place(&o, &e) == T_EINTERNAL);
  /* cut and written again past the cut: the header rewritten, the length
   * right, a hole where the data was: refused */
  int64_t big[1] = {8192};
  double *v = calloc(8192, sizeof *v);
  for (int i = 0; i < 8192; i++) v[i] = i + 1;
  CHECK(tlocal_out_create(&o, T_F64, 1, big, 1, &a, &e) == 0);
  if (a) CHECK(tarray_write(a, 0, 8192, v, &e) == 0);
  tarray_free(a);
  free(v);
  char hdr[NPY_HEADER_MAX];
  size_t hl = npy_header(T_F64, 1, big, hdr);
  CHECK(ftruncate(o.fd, 0) == 0 && pwrite(o.fd, hdr, hl, 0) == (ssize_t)hl &&
        ftruncate(o.fd, (off_t)hl + 8192 * 8) == 0);
  CHECK(tlocal_out_check(&o, T_F64, 1, big, 0, &e) == T_ECONFLICT);
  CHECK(strstr(e.message, "cut away") != NULL);
  CHECK(stat(p, &st) == 0 && st.st_ino == old_ino);
  /* too short */
  a = out_three(&o, 1, &bytes);
  tarray_free(a);
  CHECK(ftruncate(o.fd, bytes - 8) == 0);
  CHECK(tlocal_out_check(&o, T_F64, 1, shape, 0, &e) == T_ECONFLICT);
  tlocal_out_close(&o);
  CHECK(entries(in) == before + 1);
  tlocal_free(l);
}

/* The output's directory moved out of the allowed one (or replaced) while
 * the job wrote: nothing is written there, nor anywhere. */
TEST(output_dir_moved) {
  const char *dirs[] = {D};
  tlocal *l;
  terr e;
  CHECK(tlocal_create(dirs, 1, &l, &e) == 0);
  char mv[300], p[400], away[300], outside[300];
  snprintf(mv, sizeof mv, "%s/mv", D);
  snprintf(p, sizeof p, "%s/mv/o.npy", D);
  snprintf(outside, sizeof outside, "%s-outside", D);
  snprintf(away, sizeof away, "%s/mv", outside);
  CHECK(mkdir(mv, 0700) == 0 && mkdir(outside, 0700) == 0);
  for (int replaced = 0; replaced < 2; replaced++) {
    tlocal_out o;
    int64_t shape[1] = {3}, bytes;
    CHECK(tlocal_out_open(l, "", p, "output.file", &o, &e) == 0);
    tarray *a = out_three(&o, 1, &bytes);
    tarray_free(a);
    CHECK(rename(mv, away) == 0);
    if (replaced) CHECK(mkdir(mv, 0700) == 0); /* another one in its place */
    CHECK(tlocal_out_check(&o, T_F64, 1, shape, 0, &e) == 0);
    CHECK(tlocal_out_place(&o, &e) == T_ECONFLICT);
    CHECK_STR(e.field, "output.file");
    CHECK(strstr(e.message, "moved") != NULL);
    CHECK(entries(away) == 0);
    CHECK(access(p, F_OK) != 0);
    tlocal_out_close(&o);
    if (replaced) CHECK(rmdir(mv) == 0);
    CHECK(rename(away, mv) == 0);
  }
  CHECK(rmdir(mv) == 0 && rmdir(outside) == 0);
  tlocal_free(l);
}

/* Where O_TMPFILE is refused: a named temporary under .tessel-tmp, never
 * in the user's directory; those of dead processes are swept at start. */
TEST(output_fallback_and_sweep) {
  const char *dirs[] = {D};
  tlocal *l;
  terr e;
  CHECK(tlocal_create(dirs, 1, &l, &e) == 0);
  char p[400], in[400], tmpd[400], dead[500], live[500];
  snprintf(in, sizeof in, "%s/in", D);
  snprintf(p, sizeof p, "%s/in/fb.npy", D);
  snprintf(tmpd, sizeof tmpd, "%s/.tessel-tmp", D);
  int before = entries(in);
  tlocal_test_no_tmpfile = 1;
  tlocal_out o;
  int64_t shape[1] = {3}, bytes;
  CHECK(tlocal_out_open(l, "", p, "output.file", &o, &e) == 0);
  tarray *a = out_three(&o, 1, &bytes);
  tarray_free(a);
  CHECK(o.tmp[0] == 't' && entries(tmpd) == 1 && entries(in) == before);
  CHECK(tlocal_out_check(&o, T_F64, 1, shape, 0, &e) == 0);
  CHECK(tlocal_out_place(&o, &e) == 0);
  struct stat st;
  CHECK(stat(p, &st) == 0 && st.st_size == bytes && entries(tmpd) == 0);
  /* dropped: removed */
  a = out_three(&o, 1, &bytes);
  tarray_free(a);
  CHECK(entries(tmpd) == 1);
  tlocal_out_close(&o);
  CHECK(entries(tmpd) == 0);
  tlocal_test_no_tmpfile = 0;
  tlocal_free(l);
  snprintf(dead, sizeof dead, "%s/t2147483646.00ab", tmpd); /* no such pid */
  snprintf(live, sizeof live, "%s/t%ld.00cd", tmpd, (long)getpid());
  FILE *f = fopen(dead, "w");
  if (f) fclose(f);
  f = fopen(live, "w");
  if (f) fclose(f);
  CHECK(tlocal_create(dirs, 1, &l, &e) == 0);
  CHECK(access(dead, F_OK) != 0 && access(live, F_OK) == 0);
  unlink(live);
  tlocal_free(l);
}

TEST(truncated_under_a_reader) {
  CHECK(sigbus_install() == 0);
  const char *dirs[] = {D};
  tlocal *l;
  terr e;
  CHECK(tlocal_create(dirs, 1, &l, &e) == 0);
  put_npy("in/big.npy", 100000);
  char p[400];
  snprintf(p, sizeof p, "%s/in/big.npy", D);
  tdtype dt;
  int ndim;
  int64_t shape[T_MAXDIM];
  CHECK(tlocal_npy_meta(l, "", p, "x.file", 1000000, NULL, &dt, &ndim, shape, &e) == 0);
  CHECK(ndim == 1 && shape[0] == 100000 && dt == T_F64);
  CHECK(tlocal_npy_meta(l, "", p, "x.file", 10, NULL, &dt, &ndim, shape, &e) == T_ETOOLARGE);
  tlocal_log *g = tlocal_log_new();
  tarray *a = NULL;
  CHECK(tlocal_map(l, "", p, "x.file", 1000000, NULL, g, &a, &e) == 0);
  CHECK(a && a->guard > 0);
  CHECK(tlocal_log_check(g, &e) == 0);
  if (a) {
    volatile double *v = a->data;
    CHECK(v[0] == 1.0);
    CHECK(truncate(p, 4096) == 0);
    CHECK(v[99999] == 0.0); /* past the end now: zeros, not SIGBUS */
  }
  tarray_free(a);
  CHECK(tlocal_log_check(g, &e) == T_ECONFLICT);
  CHECK_STR(e.field, "x.file");
  CHECK(strstr(e.message, "truncated") != NULL);
  tlocal_log_free(g);
  /* Now shorter than its header says: refused at the header. */
  CHECK(tlocal_npy_meta(l, "", p, "x.file", 1000000, NULL, &dt, &ndim, shape, &e) == T_EINVAL);
  CHECK(tlocal_map(l, "", p, "x.file", 1000000, NULL, NULL, &a, &e) == T_EINVAL);
  CHECK_STR(e.field, "x.file");
  tlocal_free(l);
}

/* Pins: recorded by the first check, compared by every later open; kept
 * through their stored text; a touched or replaced file is T_ECONFLICT
 * naming the field, before anything of it is mapped. */
TEST(pins) {
  const char *dirs[] = {D};
  tlocal *l;
  terr e;
  CHECK(tlocal_create(dirs, 1, &l, &e) == 0);
  put_npy("in/p.npy", 100);
  put_npy("in/q.npy", 100);
  char p[400], q[400];
  snprintf(p, sizeof p, "%s/in/p.npy", D);
  snprintf(q, sizeof q, "%s/in/q.npy", D);
  tdtype dt;
  int ndim;
  int64_t shape[T_MAXDIM];
  tlocal_pins *pins = tlocal_pins_new();
  CHECK(tlocal_npy_meta(l, "", p, "x.file", 1000, pins, &dt, &ndim, shape, &e) == 0);
  CHECK(tlocal_pins_count(pins) == 1);
  CHECK(tlocal_npy_meta(l, "", p, "x.file", 1000, pins, &dt, &ndim, shape, &e) == 0);
  CHECK(tlocal_pins_count(pins) == 1);
  tarray *a = NULL;
  CHECK(tlocal_map(l, "", p, "x.file", 1000, pins, NULL, &a, &e) == 0);
  CHECK(a && a->size == 100);
  tarray_free(a);
  /* Through the stored text (a restart), the same answers. */
  char *t = tlocal_pins_text(pins);
  json_t *jv = t ? json_loads(t, 0, NULL) : NULL;
  tlocal_pins *back = tlocal_pins_from_json(jv);
  CHECK(back && tlocal_pins_count(back) == 1);
  CHECK(tlocal_map(l, "", p, "x.file", 1000, back, NULL, &a, &e) == 0);
  tarray_free(a);
  json_decref(jv);
  free(t);
  CHECK(!tlocal_pins_from_json(NULL));
  json_t *bad = json_loads("[{\"field\":\"x\"}]", 0, NULL);
  CHECK(!tlocal_pins_from_json(bad));
  json_decref(bad);
  /* Touched in place (same inode, same size): refused. */
  struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
  CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
  a = NULL;
  CHECK(tlocal_map(l, "", p, "x.file", 1000, back, NULL, &a, &e) == T_ECONFLICT && !a);
  CHECK_STR(e.field, "x.file");
  CHECK(strstr(e.message, "changed since the job was accepted") != NULL);
  /* Another file renamed over it: refused, by header read or map. */
  CHECK(rename(q, p) == 0);
  CHECK(tlocal_npy_meta(l, "", p, "x.file", 1000, pins, &dt, &ndim, shape, &e) == T_ECONFLICT);
  CHECK(strstr(e.message, "another file") != NULL);
  CHECK(tlocal_map(l, "", p, "x.file", 1000, pins, NULL, &a, &e) == T_ECONFLICT && !a);
  /* Gone: a change too. Another field is pinned as it is now. */
  CHECK(tlocal_map(l, "", q, "x.file", 1000, pins, NULL, &a, &e) == T_ECONFLICT);
  CHECK(tlocal_map(l, "", p, "y.file", 1000, pins, NULL, &a, &e) == 0);
  CHECK(tlocal_pins_count(pins) == 2);
  tarray_free(a);
  tlocal_pins_free(back);
  tlocal_pins_free(pins);
  tlocal_free(l);
}

int main(void) {
  snprintf(D, sizeof D, "/tmp/tessel-lf-XXXXXX");
  if (!mkdtemp(D)) return 1;
  char *c = realpath(D, NULL);
  if (c) {
    snprintf(D, sizeof D, "%s", c);
    free(c);
  }
  RUN(config);
  RUN(text);
  RUN(open_beneath_both_ways);
  RUN(outputs);
  RUN(output_dir_moved);
  RUN(output_fallback_and_sweep);
  RUN(truncated_under_a_reader);
  RUN(pins);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", D);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", D);
  return check_summary();
}
