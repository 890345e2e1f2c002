/* test_wbehind.c — compute/array/wbehind.c: a stream given in pieces of every size
 * (1 byte to several buffers, sizes that no buffer divides) lands in the
 * file byte for byte at base + its offset, nothing before base touched;
 * more than the stream's total is refused; a write error (/dev/full: ENOSPC)
 * reaches the producer as T_ENOSPACE — at a later write or at finish — and
 * the producer never blocks on a writer that failed; abort in the middle
 * returns (no thread left waiting). Run under ThreadSanitizer by
 * `make test-tsan`.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/array/wbehind.h"
#include "check.h"

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Write `total` pattern bytes in random pieces (at most maxpiece) through a
 * wbehind at `base` of a fresh file; check the file. */
static void stream_once(uint64_t total, uint64_t base, size_t maxpiece) {
  char path[] = "/tmp/tessel-wb-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  unlink(path);
  char *src = malloc(total ? total : 1);
  for (uint64_t i = 0; i < total; i++) src[i] = (char)(next() >> 56);
  CHECK(pwrite(fd, "HEADER", 6, 0) == 6);
  wbehind *w = NULL;
  terr e;
  CHECK(wbehind_open(fd, base, total, &w, &e) == 0);
  uint64_t off = 0;
  while (w && off < total) {
    size_t n = (size_t)(next() % maxpiece) + 1;
    if (n > total - off) n = (size_t)(total - off);
    CHECK_MSG(wbehind_write(w, src + off, n, &e) == 0, "%s", e.message);
    off += n;
  }
  if (w) {
    CHECK(wbehind_write(w, "x", 1, &e) == T_EINTERNAL); /* past the total */
    CHECK(wbehind_finish(w) == 0);
  }
  char *got = malloc(total ? total : 1), hdr[6];
  CHECK(pread(fd, hdr, 6, 0) == 6 && memcmp(hdr, "HEADER", 6) == 0);
  CHECK((uint64_t)pread(fd, got, total, (off_t)base) == total);
  CHECK_MSG(memcmp(got, src, total) == 0, "total %llu base %llu piece %zu",
            (unsigned long long)total, (unsigned long long)base, maxpiece);
  free(src);
  free(got);
  close(fd);
}

TEST(streams_land_in_order) {
  stream_once(0, 64, 10);
  stream_once(1, 64, 10);
  stream_once(WBEHIND_BUF, 128, 32768);              /* exactly one buffer */
  stream_once(WBEHIND_BUF * WBEHIND_BUFS, 128, 7);    /* one ring, tiny pieces */
  stream_once(WBEHIND_BUF * 9 + 12345, 4096, 32768);  /* many rings, a tail */
  stream_once(WBEHIND_BUF * 6 + 1, 64, 3 * WBEHIND_BUF); /* pieces > buffers */
}

/* /dev/full fails every write with ENOSPC: the producer hears it. */
TEST(write_error_reaches_the_producer) {
  int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (fd < 0) SKIP_TEST("no /dev/full: %s", strerror(errno));
  uint64_t total = WBEHIND_BUF * 20;
  char *piece = calloc(1, 65536);
  wbehind *w = NULL;
  terr e;
  CHECK(wbehind_open(fd, 0, total, &w, &e) == 0);
  int rc = 0;
  uint64_t off = 0;
  for (; w && off < total && rc == 0; off += 65536)
    rc = wbehind_write(w, piece, 65536, &e);
  if (rc) /* heard at a write: the rest is refused, never blocks */
    CHECK_MSG(rc == T_ENOSPACE, "rc %d: %s", rc, e.message);
  int err = w ? wbehind_finish(w) : 0;
  CHECK_MSG(err == ENOSPC, "finish: %d", err);
  free(piece);
  close(fd);
}

TEST(abort_midway_returns) {
  char path[] = "/tmp/tessel-wb-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  char *piece = calloc(1, 100000);
  wbehind *w = NULL;
  terr e;
  CHECK(wbehind_open(fd, 0, (uint64_t)WBEHIND_BUF * 50, &w, &e) == 0);
  for (int i = 0; w && i < 60; i++) CHECK(wbehind_write(w, piece, 100000, &e) == 0);
  wbehind_abort(w);
  wbehind_abort(NULL);
  free(piece);
  close(fd);
}

int main(void) {
  RUN(streams_land_in_order);
  RUN(write_error_reaches_the_producer);
  RUN(abort_midway_returns);
  return check_summary();
}
