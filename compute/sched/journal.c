/* compute/sched/journal.c — the in-flight journal: which jobs are running, kept
 * where a dying process cannot lose it, for the cost of a few stores.
 *
 * <data>/inflight is a small file of one 64-byte slot per worker (CPU and
 * GPU; a GPU worker's a gang's worth, SCHED_GANG_MAX), mapped MAP_SHARED: what a worker writes into it is in the kernel's
 * page cache at once and outlives the process however it dies (abort,
 * SIGSEGV, the OOM killer, kill -9); only a power loss drops it (as it drops
 * SQLite's last commits under synchronous=NORMAL). Before a job runs, its
 * worker takes a free slot and writes the job's id and the number of this
 * start (attempts + 1); the slot is freed when the run is over. The store's
 * own start write stays lazy (it commits with the job's end), so a tiny job
 * pays no commit of its own for being counted.
 *
 * At the next start (sched_journal_open, before the unfinished jobs are
 * read) every slot still in use names a job the process died running:
 * store_job_note_start raises its attempts to that start's number, the
 * file is cleared, and the scheduler fails a job whose attempts reached
 * max_attempts ("crashed") instead of running it (compute/sched/run.c). So the cap
 * holds for a job that kills the process the very first time it runs.
 *
 * The file's blocks are reserved (posix_fallocate) before it is mapped: a
 * full disk can not turn a write into SIGBUS. When the journal cannot be
 * set up (or every slot is taken, which a worker never sees), the start is
 * committed to the store before the job runs instead ([sync]; slower).
 *
 * Slot: magic (written last, cleared first), start number, id. A slot torn
 * by a crash of another thread mid-write has no magic or names no job.
 *
 * Threads: open/close on the thread that starts/stops the scheduler; take
 * and put on any worker (a lock-free claim of a slot).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/sched/sched_int.h"
#include "util/tassert.h"

#define SJ_MAGIC 0x544a4e4cu /* "TJNL" */
#define SJ_SLOT 64

typedef struct jslot {
  _Atomic uint32_t magic;
  int32_t attempt;
  char id[T_ID_MAX];
  char pad[SJ_SLOT - 8 - T_ID_MAX];
} jslot;
_Static_assert(sizeof(jslot) == SJ_SLOT, "journal slot size");

static int reserve(int fd, off_t len) {
  int err;
  do err = posix_fallocate(fd, 0, len);
  while (err == EINTR);
  if (err == EOPNOTSUPP || err == EINVAL) { /* write the bytes instead */
    char zero[SJ_SLOT] = {0};
    for (off_t off = 0; off < len; off += SJ_SLOT)
      if (pwrite(fd, zero, SJ_SLOT, off) != SJ_SLOT) return errno ? errno : EIO;
    err = 0;
  }
  return err;
}

void sched_journal_open(sched *s) {
  /* A slot for every job that may run at once: one per CPU worker, and
   * per GPU worker a whole gang (sched_take_gang: SCHED_GANG_MAX members,
   * each started as any job). With a slot per GPU worker (nthreads + 16:
   * 32 on the H200) the members of a gang of 100 beyond them committed
   * their starts [sync], each waiting for a commit (the H200: the 100
   * starts spread over ~3 ms before the launch; a unit test here: 224 µs
   * a start against 6.7 µs with a slot). */
  int n = s->nthreads + GPU_MAX_DEVICES + s->ngpu * (SCHED_GANG_MAX - 1);
  size_t len = (size_t)n * SJ_SLOT;
  char path[4200];
  snprintf(path, sizeof path, "%s/inflight", s->data_dir);
  s->journal = NULL;
  s->journal_slots = 0;
  /* 1. What a previous process left: starts it died in. A failure to
   * record one is logged, not fatal (the service must come up); that
   * crash then goes uncounted. */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    jslot slot;
    for (off_t off = 0; pread(fd, &slot, sizeof slot, off) == sizeof slot;
         off += SJ_SLOT) {
      if (slot.magic != SJ_MAGIC || slot.attempt <= 0) continue;
      slot.id[T_ID_MAX - 1] = 0;
      terr ne;
      if (store_job_note_start(s->cfg.st, slot.id, slot.attempt, &ne) != T_OK)
        log_error("scheduler: cannot record the crashed start of %s: %s",
                  slot.id, ne.message);
      else
        log_warn("scheduler: job %s was running (start %d) when the process "
                 "died", slot.id, (int)slot.attempt);
    }
    close(fd);
  }
  /* 2. A fresh journal for this process. */
  fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) goto off;
  if (ftruncate(fd, (off_t)len) != 0 || reserve(fd, (off_t)len) != 0) {
    close(fd);
    goto off;
  }
  void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) goto off;
  s->journal = base;
  s->journal_slots = n;
  s->journal_used = calloc((size_t)n, sizeof *s->journal_used);
  if (!s->journal_used) {
    sched_journal_close(s);
    goto off;
  }
  return;
off:
  log_warn("scheduler: no in-flight journal at %s (%s): starts are committed "
           "before each job runs", path, strerror(errno));
}

void sched_journal_close(sched *s) {
  if (s->journal)
    munmap(s->journal, (size_t)s->journal_slots * SJ_SLOT);
  free(s->journal_used);
  s->journal = NULL;
  s->journal_used = NULL;
  s->journal_slots = 0;
}

int sched_journal_take(sched *s, const char *id, int attempt) {
  for (int i = 0; i < s->journal_slots; i++) {
    int zero = 0;
    T_ASSERT(s->journal != NULL); /* slots exist only with the mapping */
    if (!atomic_compare_exchange_strong(&s->journal_used[i], &zero, 1))
      continue;
    jslot *sl = (jslot *)((char *)s->journal + (size_t)i * SJ_SLOT);
    atomic_store_explicit(&sl->magic, 0, memory_order_relaxed);
    sl->attempt = attempt;
    t_scopy(sl->id, sizeof sl->id, id);
    atomic_store_explicit(&sl->magic, SJ_MAGIC, memory_order_release);
    return i;
  }
  return -1;
}

void sched_journal_put(sched *s, int slot) {
  if (slot < 0 || slot >= s->journal_slots) return;
  jslot *sl = (jslot *)((char *)s->journal + (size_t)slot * SJ_SLOT);
  /* the slot is the caller's: taken by sched_journal_take, not yet put */
  T_ASSERT(atomic_load(&s->journal_used[slot]) == 1);
  atomic_store_explicit(&sl->magic, 0, memory_order_release);
  atomic_store(&s->journal_used[slot], 0);
}
