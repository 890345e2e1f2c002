/* wbehind.c — sequential writes done behind the producer by a thread
 * (wbehind.h); below, prefill: a parts upload's mapping populated ahead
 * of its parts by threads (its own head comment).
 *
 * Why (issue 11, "uploads at the hardware's speed"). An .npy upload is read
 * by libmicrohttpd in pieces of up to 32 KiB; each piece was hashed and then
 * pwritten into the array's file on the HTTP thread, so reading the socket
 * stopped for every page-cache copy and syscall. On the GPU machine (16
 * cores) a 1 GiB `curl -T` reached 1.40-1.61 GB/s against 2.23-2.54 GB/s
 * for the same curl into a socket sink written in Python (0.65x); buffered
 * writes into one file run at ~5 GB/s there (tests/bench/bench_d2h_store.cu)
 * and the 32 KiB pwrites cost a syscall each. Here the HTTP thread only
 * hashes the piece (hot in cache) and copies it into a 1 MiB buffer; a
 * writer thread pwrites full buffers in order, WBEHIND_BUFS of them in
 * flight, so receiving and writing overlap and the writes are 32x fewer.
 * A library does not do this: POSIX AIO (glibc's) is the same thread and a
 * copy behind a heavier interface, io_uring is not in Debian 12's base and
 * still needs the buffers to outlive the piece. Streams under WBEHIND_MIN
 * are written as before (a thread and 4 MiB of buffers are not worth it).
 *
 * Memory: WBEHIND_BUFS x WBEHIND_BUF (4 MiB) per stream, at most 12.5 % of
 * the smallest stream that gets one (32 MiB); the number of streams is
 * bounded by the HTTP layer's connection limit.
 *
 * The ring: buffers are filled in order 0, 1, ..., BUFS-1, 0, ... by the
 * producer and written in the same order by the writer. buf[i].len > 0 and
 * full: waiting for the writer; the producer waits for buffer i to be
 * written before it fills it again (backpressure: the socket is not read
 * faster than the disk takes it). A write error is kept (the first one);
 * the writer goes on marking buffers written without writing, so the
 * producer never blocks on it, and the producer reports it at its next call.
 *
 * Threads: mu guards every field below it in struct wbehind; the producer
 * fills buf[cur].p outside the lock (the writer does not touch a buffer that
 * is not full), the writer pwrites outside the lock (the producer does not
 * touch a full buffer).
 */
#include "compute/array/wbehind.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/util.h"

typedef struct wb_buf {
  char *p;
  size_t len;   /* bytes in it */
  uint64_t off; /* file offset of p[0] */
  int full;     /* handed to the writer, not yet written */
} wb_buf;

struct wbehind {
  int fd;
  uint64_t base, total, queued; /* queued: bytes given by the producer */
  int cur;                      /* the buffer the producer fills */
  pthread_t th;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t filled, emptied;
  wb_buf buf[WBEHIND_BUFS];
  int next_write; /* the buffer the writer takes next */
  int closing;    /* no more buffers will come */
  int err;        /* the first write error (an errno), 0 if none */
};

static void *writer_main(void *arg) {
  wbehind *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    wb_buf *b = &w->buf[w->next_write];
    while (!b->full && !w->closing) pthread_cond_wait(&w->filled, &w->mu);
    if (!b->full) break; /* closing and nothing left */
    int err = w->err;
    pthread_mutex_unlock(&w->mu);
    if (!err) err = t_pwrite_all(w->fd, b->p, b->len, (int64_t)b->off);
    pthread_mutex_lock(&w->mu);
    if (err && !w->err) w->err = err;
    b->full = 0;
    b->len = 0;
    w->next_write = (w->next_write + 1) % WBEHIND_BUFS;
    pthread_cond_signal(&w->emptied);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

static void wb_free(wbehind *w) {
  for (int i = 0; i < WBEHIND_BUFS; i++) free(w->buf[i].p);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->filled);
  pthread_cond_destroy(&w->emptied);
  free(w);
}

int wbehind_worth(void) {
  static atomic_int cpus; /* 0: not asked yet */
  int n = atomic_load(&cpus);
  if (n == 0) {
    long k = sysconf(_SC_NPROCESSORS_ONLN);
    n = k > 0 ? (int)k : 1;
    atomic_store(&cpus, n);
  }
  return n >= 4;
}

int wbehind_open(int fd, uint64_t base, uint64_t total, wbehind **out,
                 terr *e) {
  *out = NULL;
  wbehind *w = calloc(1, sizeof *w);
  if (!w) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  w->fd = fd;
  w->base = base;
  w->total = total;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->filled, NULL);
  pthread_cond_init(&w->emptied, NULL);
  for (int i = 0; i < WBEHIND_BUFS; i++)
    if (!(w->buf[i].p = malloc(WBEHIND_BUF))) {
      wb_free(w);
      return terr_set(e, T_ENOMEM, "", -1, "out of memory for write buffers");
    }
  if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
    wb_free(w);
    return terr_set(e, T_ENOMEM, "", -1, "cannot start a writer thread");
  }
  w->started = 1;
  *out = w;
  return T_OK;
}

static int error_of(int err, terr *e) {
  int rc = terr_set(e, T_EIO, "", -1, "cannot write the array: %s",
                    strerror(err));
  return terr_nospace(e, rc, err);
}

/* Hand buf[cur] to the writer and wait until the next one is free. */
static void hand_over(wbehind *w) {
  pthread_mutex_lock(&w->mu);
  w->buf[w->cur].full = 1;
  pthread_cond_signal(&w->filled);
  w->cur = (w->cur + 1) % WBEHIND_BUFS;
  while (w->buf[w->cur].full) pthread_cond_wait(&w->emptied, &w->mu);
  pthread_mutex_unlock(&w->mu);
}

int wbehind_write(wbehind *w, const void *p, size_t n, terr *e) {
  if (n > w->total - w->queued)
    return terr_set(e, T_EINTERNAL, "", -1,
                    "wbehind: %zu bytes past the stream's %llu", n,
                    (unsigned long long)w->total);
  pthread_mutex_lock(&w->mu);
  int err = w->err;
  pthread_mutex_unlock(&w->mu);
  if (err) return error_of(err, e);
  const char *s = p;
  while (n > 0) {
    wb_buf *b = &w->buf[w->cur];
    if (b->len == 0) b->off = w->base + w->queued;
    size_t k = WBEHIND_BUF - b->len < n ? WBEHIND_BUF - b->len : n;
    memcpy(b->p + b->len, s, k);
    b->len += k;
    w->queued += k;
    s += k;
    n -= k;
    if (b->len == WBEHIND_BUF) hand_over(w);
  }
  return T_OK;
}

/* Close the ring (after handing over a partial buffer when flush), join. */
static int stop(wbehind *w, int flush) {
  pthread_mutex_lock(&w->mu);
  if (flush && w->buf[w->cur].len > 0) {
    w->buf[w->cur].full = 1;
    pthread_cond_signal(&w->filled);
  }
  if (!flush) w->err = w->err ? w->err : ECANCELED; /* write no more */
  w->closing = 1;
  pthread_cond_signal(&w->filled);
  pthread_mutex_unlock(&w->mu);
  if (w->started) pthread_join(w->th, NULL);
  return w->err;
}

int wbehind_finish(wbehind *w) {
  int err = stop(w, 1);
  wb_free(w);
  return err;
}

void wbehind_abort(wbehind *w) {
  if (!w) return;
  stop(w, 0);
  wb_free(w);
}

/* ---- prefill: a parts upload's mapping populated ahead of its parts
 * (wbehind.h).
 *
 * Why (issue 25: the client's upload over parallel parts was slower than
 * over one stream on the 16-core H200 host: 8 parts 0.305 s, one stream
 * 0.227 s for 800 MB). Parts sent at once are copied into a MAP_SHARED
 * mapping of the array's file (arrays.c), and each page of it is new to
 * the page cache: the copy faults, and the kernel allocates, zeroes and
 * maps the page before the copy lands. 16 threads take fresh ext4 pages
 * that way at 14-16 GB/s on that host (tests/bench/bench_fill.c), about
 * 1 GB/s a thread, and the parts are copied by the daemon's few HTTP
 * threads (--http-threads, 4 then) that also receive them. So the
 * faults are taken ahead, by threads of the upload's own
 * (MADV_POPULATE_WRITE, 4 MiB at a time, the parts' ranges in turn, each
 * from its front where its bytes arrive first), and the HTTP threads only
 * receive and copy into pages already there. Only ranges a part announced
 * (its Content-Length, checked) are filled, when the part begins: an
 * upload created and never sent costs no memory.
 *
 * Off by default: TESSEL_PARTS_PREFILL=N turns it on with N threads. On
 * the 2-core VM the fillers only compete with the receiving thread; on the
 * 16-core H200 host (2026-11-29, bench_upload.py, 800 MB) it lost too:
 * one 800 MB part 0.538 s filled ahead by 8 threads against 0.380 s
 * pwritten, the client over 8 parts 0.432 s against 0.404 s (one stream,
 * POST /v1/arrays, 0.227-0.269 s: still the fastest way up).
 *
 * Threads: mu guards every field below it; madvise runs outside it on a
 * chunk the thread claimed. free sets stop and waits until running is 0.
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels: EINVAL, skipped */
#endif

#define CHUNK ((uint64_t)4 << 20)
#define MAX_RANGES 64

typedef struct pf_range {
  uint64_t next, end;
} pf_range;

struct prefill {
  char *base;
  size_t len;
  int max_threads;
  pthread_mutex_t mu;
  pthread_cond_t idle;
  pf_range r[MAX_RANGES];
  int nr;
  int turn;    /* the range the next chunk comes from */
  int running; /* threads started and not yet gone */
  int stop;
};

int prefill_threads(void) {
  static atomic_int cached = -1;
  int n = atomic_load(&cached);
  if (n >= 0) return n;
  n = 0; /* off unless asked: measured slower (above) */
  const char *knob = getenv("TESSEL_PARTS_PREFILL");
  if (knob && *knob) {
    long k = strtol(knob, NULL, 10);
    n = k < 0 ? 0 : k > 64 ? 64 : (int)k;
  }
  atomic_store(&cached, n);
  return n;
}

/* Under mu: claim the next chunk, the ranges taken in turn; 0 when none. */
static int claim(prefill *p, uint64_t *off, uint64_t *n) {
  while (p->nr > 0) {
    if (p->turn >= p->nr) p->turn = 0;
    pf_range *r = &p->r[p->turn];
    if (r->next >= r->end) { /* done: drop it */
      *r = p->r[--p->nr];
      continue;
    }
    *off = r->next;
    *n = r->end - r->next < CHUNK ? r->end - r->next : CHUNK;
    r->next += *n;
    p->turn++;
    return 1;
  }
  return 0;
}

static void *filler(void *arg) {
  prefill *p = arg;
  pthread_mutex_lock(&p->mu);
  uint64_t off, n;
  while (!p->stop && claim(p, &off, &n)) {
    pthread_mutex_unlock(&p->mu);
    (void)madvise(p->base + off, (size_t)n, MADV_POPULATE_WRITE);
    pthread_mutex_lock(&p->mu);
  }
  if (--p->running == 0) pthread_cond_broadcast(&p->idle);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

prefill *prefill_new(char *base, size_t len) {
  int t = prefill_threads();
  if (t <= 0 || !base || len == 0) return NULL;
  prefill *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->base = base;
  p->len = len;
  p->max_threads = t;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->idle, NULL);
  return p;
}

void prefill_range(prefill *p, uint64_t off, uint64_t n) {
  if (!p || off >= p->len) return;
  if (n > p->len - off) n = p->len - off;
  /* Page-aligned: madvise wants its start aligned; the page before the
   * range's first full page is the neighbour's or filled by the copy. */
  uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t a = (off + pg - 1) / pg * pg, b = off + n;
  if (b <= a + CHUNK / 4) return; /* small parts: the copy's faults do */
  pthread_mutex_lock(&p->mu);
  if (!p->stop && p->nr < MAX_RANGES) {
    p->r[p->nr++] = (pf_range){a, b};
    int want = p->max_threads;
    while (p->running < want) {
      pthread_t th;
      pthread_attr_t at;
      pthread_attr_init(&at);
      pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
      int err = pthread_create(&th, &at, filler, p);
      pthread_attr_destroy(&at);
      if (err) break; /* fewer threads, or none: the copy faults */
      p->running++;
    }
  }
  pthread_mutex_unlock(&p->mu);
}

void prefill_free(prefill *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  while (p->running > 0) pthread_cond_wait(&p->idle, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->idle);
  free(p);
}
