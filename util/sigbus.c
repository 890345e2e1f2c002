/* sigbus.c — the SIGBUS handler and the registry of guarded mappings (see
 * util/sigbus.h for what it is for).
 *
 * The registry is a fixed array of slots {addr, len, prot, torn, notify}.
 * A slot is free while addr is 0. sigbus_guard fills len, prot and notify,
 * clears torn, and only then publishes addr (release store), all under `mu`;
 * sigbus_unguard clears addr under `mu`. The handler takes no lock: it scans
 * the slots with acquire loads of addr, reads len, and re-reads addr to see
 * that the slot did not change in between (a slot is only unguarded once no
 * thread reads its mapping, so a fault inside a mapping cannot race with that
 * mapping's own unguard; the re-read covers a slot reused for another
 * mapping meanwhile, whose range then must hold the address too).
 *
 * Why the handler is async-signal-safe: it calls only mmap, sigaction and
 * raise, and touches only lock-free atomics (C11 7.14.1.1 allows lock-free
 * atomic objects in a handler; static asserts below check they are
 * lock-free) and errno, which it restores. mmap is not in POSIX's list of
 * async-signal-safe functions, but on Linux glibc's mmap is the bare system
 * call (no lock, no allocation, no stdio), and MAP_FIXED over the range
 * replaces the file pages atomically in the kernel. Only SIGBUS with
 * si_code BUS_ADRERR (an access past a file's end, what a truncation gives)
 * is taken as ours; BUS_ADRALN, BUS_OBJERR, a SIGBUS sent by kill() and an
 * address outside every guarded mapping restore SIG_DFL and raise SIGBUS
 * again (pending until the handler returns; a hardware fault also repeats
 * when the instruction is retried), so a real bug still ends the process
 * with SIGBUS and its core.
 *
 * No longjmp: the faulting access simply resumes on the zero pages, on
 * whichever thread it was (pool threads, BLAS threads, a GPU copy thread),
 * so no code between the fault and its owner has to be unwound. The owner
 * learns of the tear from the slot's flag afterwards.
 */
#include "util/sigbus.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "atomic_int must be lock-free");
_Static_assert(ATOMIC_POINTER_LOCK_FREE == 2, "pointers must be lock-free");
_Static_assert(ATOMIC_LONG_LOCK_FREE == 2 || ATOMIC_LLONG_LOCK_FREE == 2,
               "uintptr_t atomics must be lock-free");

typedef struct gslot {
  _Atomic(uintptr_t) addr; /* 0: free */
  _Atomic(size_t) len;
  atomic_int prot;
  atomic_int torn;
  _Atomic(atomic_int *) notify;
} gslot;

static gslot slots[SIGBUS_MAX_GUARDS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int installed;

static void die_as_before(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, NULL);
  raise(SIGBUS);
}

static void on_sigbus(int sig, siginfo_t *si, void *uctx) {
  (void)sig;
  (void)uctx;
  int saved = errno;
  if (si && si->si_code == BUS_ADRERR) {
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < SIGBUS_MAX_GUARDS; i++) {
      gslot *g = &slots[i];
      uintptr_t base = atomic_load_explicit(&g->addr, memory_order_acquire);
      if (!base) continue;
      size_t len = atomic_load_explicit(&g->len, memory_order_acquire);
      if (a < base || a - base >= len) continue;
      if (atomic_load_explicit(&g->addr, memory_order_acquire) != base)
        continue;
      int prot = atomic_load_explicit(&g->prot, memory_order_relaxed);
      void *p = mmap((void *)base, len, prot,
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) break; /* cannot repair: die as before */
      atomic_store(&g->torn, 1);
      atomic_int *n = atomic_load(&g->notify);
      if (n) atomic_store(n, 1);
      errno = saved;
      return;
    }
  }
  die_as_before();
  errno = saved;
}

int sigbus_install(void) {
  pthread_mutex_lock(&mu);
  int rc = 0;
  if (!atomic_load(&installed)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    rc = sigaction(SIGBUS, &sa, NULL);
    if (rc == 0) atomic_store(&installed, 1);
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

int sigbus_guard(void *addr, size_t len, int prot, atomic_int *torn) {
  if (!addr || !len) return 0;
  if (!atomic_load(&installed) && sigbus_install() != 0) return 0;
  int id = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < SIGBUS_MAX_GUARDS; i++) {
    gslot *g = &slots[i];
    if (atomic_load_explicit(&g->addr, memory_order_relaxed)) continue;
    atomic_store_explicit(&g->len, len, memory_order_relaxed);
    atomic_store_explicit(&g->prot, prot, memory_order_relaxed);
    atomic_store_explicit(&g->torn, 0, memory_order_relaxed);
    atomic_store_explicit(&g->notify, torn, memory_order_relaxed);
    atomic_store_explicit(&g->addr, (uintptr_t)addr, memory_order_release);
    id = i + 1;
    break;
  }
  pthread_mutex_unlock(&mu);
  return id;
}

int sigbus_torn(int id) {
  if (id <= 0 || id > SIGBUS_MAX_GUARDS) return 0;
  return atomic_load(&slots[id - 1].torn);
}

int sigbus_unguard(int id) {
  if (id <= 0 || id > SIGBUS_MAX_GUARDS) return 0;
  gslot *g = &slots[id - 1];
  pthread_mutex_lock(&mu);
  int t = atomic_exchange(&g->torn, 0);
  atomic_store_explicit(&g->notify, NULL, memory_order_relaxed);
  atomic_store_explicit(&g->addr, 0, memory_order_release);
  pthread_mutex_unlock(&mu);
  return t;
}
