/* test_spare.c — compute/array/codec/spare.c, the big result files made
 * ahead, and npyfile.c taking them:
 *  - a result of 64 MiB or more finds none at first (missed), then the
 *    keeper makes spares of its size rounded up to 64 MiB, as many as the
 *    budget holds and at most SPARE_MAX (waited for as a state);
 *  - the next such result takes one by rename: the file is at its path,
 *    zeros, 0600 (the caller sets its own mode); the keeper refills;
 *  - a result that finds none that fits removes the oldest spares until its
 *    own size has room, and the keeper makes spares of that size;
 *  - on a disk under 10 % free (a 512 MiB tmpfs, root only) a big result
 *    removes every spare and none is made until there is room again;
 *  - below SPARE_MIN nothing is asked or counted; a result whose size is
 *    over the budget (or more than a spare fits) finds none and none is
 *    made for it;
 *  - tarray_create_npy of a big result takes a spare: its header right,
 *    its length cut to the result's, 0644, data zeros, and its mapping
 *    marked map_warm (the pages are there: stage_prefault skips it); a
 *    small one is a fresh file as before, not warm;
 *  - start removes an earlier run's files; stop removes the spares;
 *  - budget 0: nothing made, nothing taken;
 *  - TESSEL_SPARE_FILL: "written" spares hold zeros over written blocks
 *    (FIEMAP shows no unwritten extent, where the file system answers
 *    FIEMAP), "read" spares zeros over unwritten ones; the stats say which;
 *    anything else is the default, "read".
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compute/array/codec/spare.h"
#include "compute/array/tarray.h"
#include "check.h"

static char dir[256];

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Wait up to 60 s for `ready` spares. */
static int wait_ready(int ready) {
  spare_stats st;
  for (int i = 0; i < 6000; i++) {
    spare_get_stats(&st);
    if (st.count == ready) return 1;
    sleep_ms(10);
  }
  return 0;
}

static int count_files(const char *d) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", d);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p && fscanf(p, "%d", &n) != 1) n = -1;
  if (p) pclose(p);
  return n;
}

static int all_zero(const char *path, off_t from) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  static char buf[1 << 20];
  ssize_t k;
  int ok = 1;
  off_t at = from;
  while (ok && (k = pread(fd, buf, sizeof buf, at)) > 0) {
    for (ssize_t i = 0; i < k; i++)
      if (buf[i]) ok = 0;
    at += k;
  }
  close(fd);
  return ok;
}

/* Of path's extents (FIEMAP): 1 when any is unwritten, 0 when none, -1
 * when the file system does not answer (tmpfs). */
static int any_unwritten(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  enum { N = 64 };
  struct fiemap *fm = calloc(1, sizeof *fm + N * sizeof(struct fiemap_extent));
  int got = -1;
  uint64_t at = 0;
  for (;;) {
    memset(fm, 0, sizeof *fm);
    fm->fm_start = at;
    fm->fm_length = FIEMAP_MAX_OFFSET - at;
    fm->fm_flags = FIEMAP_FLAG_SYNC;
    fm->fm_extent_count = N;
    if (ioctl(fd, FS_IOC_FIEMAP, fm) != 0) break;
    if (got < 0) got = 0;
    int last = fm->fm_mapped_extents == 0;
    for (unsigned i = 0; i < fm->fm_mapped_extents; i++) {
      struct fiemap_extent *x = &fm->fm_extents[i];
      if (x->fe_flags & FIEMAP_EXTENT_UNWRITTEN) got = 1;
      if (x->fe_flags & FIEMAP_EXTENT_LAST) last = 1;
      at = x->fe_logical + x->fe_length;
    }
    if (last) break;
  }
  free(fm);
  close(fd);
  return got;
}

/* One spare made with TESSEL_SPARE_FILL=mode, taken, checked. */
static void fill_case(const char *mode, int want_fill) {
  setenv("TESSEL_SPARE_FILL", mode, 1);
  terr e;
  CHECK(spare_start(dir, (int64_t)128 << 20, &e) == 0);
  spare_stats st;
  spare_get_stats(&st);
  CHECK(st.fill == want_fill);
  char path[300];
  snprintf(path, sizeof path, "%s/f_%s", dir, mode);
  CHECK(spare_take(path, (int64_t)100 << 20) == 0);
  CHECK(wait_ready(1));
  CHECK(spare_take(path, (int64_t)100 << 20) == 1);
  CHECK(all_zero(path, 0));
  int u = any_unwritten(path);
  if (u < 0)
    printf("  (%s: no FIEMAP on this file system; extents not checked)\n", mode);
  else
    CHECK(u == (want_fill == SPARE_FILL_READ));
  unlink(path);
  spare_stop();
  unsetenv("TESSEL_SPARE_FILL");
}

TEST(fill_written_or_read) {
  fill_case("written", SPARE_FILL_WRITTEN);
  fill_case("read", SPARE_FILL_READ);
  fill_case("bogus", SPARE_FILL_DEFAULT);
  CHECK(SPARE_FILL_DEFAULT == SPARE_FILL_READ);
}

TEST(take_and_refill) {
  char sp[300], junk[320];
  snprintf(sp, sizeof sp, "%s/spare", dir);
  mkdir(sp, 0700);
  snprintf(junk, sizeof junk, "%s/.s77", sp);
  FILE *f = fopen(junk, "w");
  if (f) fclose(f);
  terr e;
  CHECK(spare_start(dir, (int64_t)256 << 20, &e) == 0);
  CHECK(count_files(sp) == 0); /* the earlier run's file is gone */
  char path[300];
  snprintf(path, sizeof path, "%s/r1", dir);
  int64_t len = (int64_t)70 << 20;
  CHECK(spare_take(path, len) == 0); /* none yet */
  CHECK(access(path, F_OK) != 0);
  CHECK(wait_ready(2)); /* two of 128 MiB in 256 MiB */
  spare_stats st;
  spare_get_stats(&st);
  CHECK(st.held == (int64_t)256 << 20 && st.missed == 1 && st.taken == 0);
  CHECK(spare_take(path, len) == 1);
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && sb.st_size == (off_t)128 << 20);
  CHECK((sb.st_mode & 0777) == 0600);
  CHECK(all_zero(path, 0));
  spare_get_stats(&st);
  CHECK(st.taken == 1);
  CHECK(wait_ready(2)); /* refilled */
  /* Small results are not counted; one over the budget finds none and
   * none is made for it. */
  char p2[300];
  snprintf(p2, sizeof p2, "%s/r2", dir);
  CHECK(spare_take(p2, (int64_t)10 << 20) == 0);
  CHECK(spare_take(p2, (int64_t)300 << 20) == 0);
  spare_get_stats(&st);
  CHECK(st.missed == 2 && st.count == 2 && st.held == (int64_t)256 << 20);
  /* A spare more than twice the result (plus 64 MiB) is not spent on it:
   * 128 MiB spares against 30 MiB... is below SPARE_MIN; 64 MiB takes one
   * (128 <= 2 x 64 + 64). */
  CHECK(spare_take(p2, SPARE_MIN) == 1);
  unlink(path);
  unlink(p2);
  CHECK(wait_ready(2));
  spare_stop();
  CHECK(count_files(sp) == 0);
}

TEST(npy_result_from_a_spare) {
  terr e;
  CHECK(spare_start(dir, (int64_t)256 << 20, &e) == 0);
  char path[300];
  snprintf(path, sizeof path, "%s/big.npy", dir);
  int64_t shape[1] = {(int64_t)10 << 20}; /* 80 MiB of float64 */
  tarray *a = NULL;
  CHECK(tarray_create_npy(path, T_F64, 1, shape, &a, &e) == 0);
  CHECK(a && a->map_prefault == 1 && a->map_warm == 0); /* none ready: fresh */
  tarray_free(a);
  unlink(path);
  CHECK(wait_ready(2));
  a = NULL;
  CHECK(tarray_create_npy(path, T_F64, 1, shape, &a, &e) == 0);
  CHECK(a && a->map_warm == 1); /* from a spare: its pages are there */
  spare_stats st;
  spare_get_stats(&st);
  CHECK(st.taken == 1);
  if (a) {
    double *d = a->data;
    CHECK(d[0] == 0.0 && d[shape[0] - 1] == 0.0);
    d[5] = 2.5;
  }
  tarray_free(a);
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0644);
  tarray *b = NULL;
  CHECK(tarray_map_npy(path, &b, &e) == 0);
  if (b) {
    CHECK(b->size == shape[0] && b->dtype == T_F64);
    CHECK(((double *)b->data)[5] == 2.5 && ((double *)b->data)[6] == 0.0);
    CHECK(sb.st_size == (off_t)((char *)b->data - (char *)b->map_base) +
                            shape[0] * 8);
  }
  tarray_free(b);
  unlink(path);
  /* A small result: a fresh file, as before. */
  int64_t small[1] = {1000};
  a = NULL;
  CHECK(tarray_create_npy(path, T_F64, 1, small, &a, &e) == 0);
  CHECK(a && a->map_prefault == 1 && a->map_warm == 0);
  tarray_free(a);
  unlink(path);
  spare_stop();
}

/* Spares of another size do not hold the budget for good: a result that
 * finds none that fits removes the oldest until its own size has room,
 * and the keeper then makes spares of that size. */
TEST(spares_follow_the_size) {
  terr e;
  CHECK(spare_start(dir, (int64_t)256 << 20, &e) == 0);
  char path[300];
  snprintf(path, sizeof path, "%s/f1", dir);
  CHECK(spare_take(path, (int64_t)70 << 20) == 0);
  CHECK(wait_ready(2)); /* 2 x 128 MiB */
  CHECK(spare_take(path, (int64_t)200 << 20) == 0); /* none fits: both go */
  CHECK(wait_ready(1));                            /* one of 256 MiB */
  spare_stats st;
  spare_get_stats(&st);
  CHECK(st.held == (int64_t)256 << 20 && st.missed == 2);
  CHECK(spare_take(path, (int64_t)200 << 20) == 1);
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && sb.st_size == (off_t)256 << 20);
  unlink(path);
  spare_stop();
  char sp[300];
  snprintf(sp, sizeof sp, "%s/spare", dir);
  CHECK(count_files(sp) == 0);
}

/* On a disk under SPARE_DISK_FREE % free, a big result removes every
 * spare (their blocks go back) and takes none, and none is made while it
 * stays short. A 512 MiB tmpfs of its own (root only: a mount). */
TEST(short_disk_drops_spares) {
  if (geteuid() != 0) SKIP_TEST("mounting a tmpfs needs root");
  char mnt[320];
  snprintf(mnt, sizeof mnt, "%s/small", dir);
  mkdir(mnt, 0700);
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=512m") != 0)
    SKIP_TEST("cannot mount a tmpfs: %s", strerror(errno));
  terr e;
  CHECK(spare_start(mnt, (int64_t)256 << 20, &e) == 0);
  char path[400], filler[400], sp[400];
  snprintf(path, sizeof path, "%s/r", mnt);
  snprintf(filler, sizeof filler, "%s/filler", mnt);
  snprintf(sp, sizeof sp, "%s/spare", mnt);
  CHECK(spare_take(path, (int64_t)70 << 20) == 0);
  CHECK(wait_ready(2)); /* 256 MiB of the 512 MiB */
  /* Fill the disk to under 10 % free. */
  int fd = open(filler, O_RDWR | O_CREAT, 0600);
  CHECK(fd >= 0 && posix_fallocate(fd, 0, (off_t)220 << 20) == 0);
  CHECK(spare_take(path, (int64_t)70 << 20) == 0);
  spare_stats st;
  spare_get_stats(&st);
  CHECK(st.count == 0 && st.held == 0 && st.taken == 0);
  CHECK(count_files(sp) == 0);
  sleep_ms(200);
  spare_get_stats(&st);
  CHECK(st.count == 0); /* none made while the disk stays short */
  /* Room again: the next big result's size is made again. */
  if (fd >= 0) close(fd);
  unlink(filler);
  CHECK(spare_take(path, (int64_t)70 << 20) == 0);
  CHECK(wait_ready(2));
  spare_stop();
  umount2(mnt, MNT_DETACH);
  rmdir(mnt);
}

TEST(budget_zero_is_off) {
  terr e;
  CHECK(spare_start(dir, 0, &e) == 0);
  char path[300];
  snprintf(path, sizeof path, "%s/r0", dir);
  CHECK(spare_take(path, (int64_t)100 << 20) == 0);
  sleep_ms(50);
  spare_stats st;
  spare_get_stats(&st);
  CHECK(st.budget == 0 && st.count == 0 && st.held == 0);
  spare_stop();
}

int main(void) {
  /* Beside the build, not /tmp (a small tmpfs on some machines): 256 MiB
   * of spares live here for a moment. */
  snprintf(dir, sizeof dir, "tessel-spare-%d", (int)getpid());
  mkdir(dir, 0700);
  RUN(take_and_refill);
  RUN(npy_result_from_a_spare);
  RUN(spares_follow_the_size);
  RUN(short_disk_drops_spares);
  RUN(budget_zero_is_off);
  RUN(fill_written_or_read);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  return check_summary();
}
