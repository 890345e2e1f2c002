/* test_sigbus.c — util/sigbus: a guarded mapping whose file is truncated
 * under it reads zeros and is marked torn (the process lives, also when the
 * fault is on another thread); an unguarded SIGBUS still kills (a forked
 * child dies of SIGBUS); slots are reused and unguard reports the tear.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util/sigbus.h"

#define PAGES 8

/* A temporary file of PAGES pages filled with 0x5a, unlinked at once. */
static int temp_file(size_t *len) {
  char path[] = "/tmp/tessel_sigbus_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  unlink(path);
  *len = (size_t)sysconf(_SC_PAGESIZE) * PAGES;
  char buf[4096];
  memset(buf, 0x5a, sizeof buf);
  for (size_t off = 0; off < *len; off += sizeof buf)
    if (pwrite(fd, buf, sizeof buf, (off_t)off) != (ssize_t)sizeof buf) return -1;
  return fd;
}

TEST(guarded_truncation_reads_zeros) {
  CHECK(sigbus_install() == 0);
  size_t len;
  int fd = temp_file(&len);
  CHECK(fd >= 0);
  if (fd < 0) return;
  volatile unsigned char *m =
      mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  CHECK(m != MAP_FAILED);
  if (m == MAP_FAILED) return;
  atomic_int torn = 0;
  int id = sigbus_guard((void *)m, len, PROT_READ | PROT_WRITE, &torn);
  CHECK(id > 0);
  CHECK(m[0] == 0x5a); /* page 0 is read in before the truncation */
  CHECK(sigbus_torn(id) == 0);
  CHECK(ftruncate(fd, 0) == 0);
  /* The last page is past the end now: without the guard, SIGBUS. */
  unsigned char v = m[len - 1];
  CHECK(v == 0);
  CHECK(sigbus_torn(id) == 1);
  CHECK(atomic_load(&torn) == 1);
  m[len - 1] = 7; /* writable as it was */
  CHECK(m[len - 1] == 7);
  CHECK(sigbus_unguard(id) == 1);
  CHECK(sigbus_torn(id) == 0); /* the slot is free again */
  munmap((void *)m, len);
  close(fd);
}

typedef struct reader_arg {
  volatile const unsigned char *m;
  size_t len;
  unsigned sum;
} reader_arg;

static void *reader(void *p) {
  reader_arg *r = p;
  for (size_t i = 0; i < r->len; i += 512) r->sum += r->m[i];
  return NULL;
}

TEST(fault_on_another_thread) {
  size_t len;
  int fd = temp_file(&len);
  CHECK(fd >= 0);
  if (fd < 0) return;
  const unsigned char *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(m != MAP_FAILED);
  if (m == MAP_FAILED) return;
  int id = sigbus_guard((void *)m, len, PROT_READ, NULL);
  CHECK(id > 0);
  CHECK(ftruncate(fd, (off_t)len / 2) == 0);
  reader_arg r = {m, len, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, reader, &r) == 0);
  pthread_join(t, NULL);
  CHECK(sigbus_unguard(id) == 1);
  /* Whole mapping replaced: every byte read after the tear was 0, the
   * bytes before it 0x5a; the sum is at most that of the first half. */
  CHECK(r.sum <= 0x5a * (unsigned)(len / 2 / 512));
  munmap((void *)m, len);
  close(fd);
}

TEST(unguarded_sigbus_still_kills) {
  size_t len;
  int fd = temp_file(&len);
  CHECK(fd >= 0);
  if (fd < 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    volatile const unsigned char *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) _exit(3);
    if (ftruncate(fd, 0) != 0) _exit(4);
    unsigned char v = m[len - 1]; /* not guarded: SIGBUS */
    _exit(v == 0 ? 5 : 6);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "status %#x", st);
  close(fd);
}

TEST(kill_sigbus_is_not_swallowed) {
  pid_t pid = fork();
  if (pid == 0) {
    raise(SIGBUS); /* si_code SI_TKILL: never a guarded fault */
    _exit(0);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
}

TEST(registry_full_and_reuse) {
  static char page[1];
  int ids[SIGBUS_MAX_GUARDS];
  int n = 0;
  for (; n < SIGBUS_MAX_GUARDS; n++) {
    ids[n] = sigbus_guard(page, 1, PROT_READ, NULL);
    if (!ids[n]) break;
  }
  CHECK(n == SIGBUS_MAX_GUARDS);
  CHECK(sigbus_guard(page, 1, PROT_READ, NULL) == 0); /* full */
  for (int i = 0; i < n; i++) CHECK(sigbus_unguard(ids[i]) == 0);
  CHECK(sigbus_guard(page, 1, PROT_READ, NULL) > 0);
  CHECK(sigbus_unguard(0) == 0);
}

int main(void) {
  RUN(guarded_truncation_reads_zeros);
  RUN(fault_on_another_thread);
  RUN(unguarded_sigbus_still_kills);
  RUN(kill_sigbus_is_not_swallowed);
  RUN(registry_full_and_reuse);
  return check_summary();
}
