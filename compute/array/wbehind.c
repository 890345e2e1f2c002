/* wbehind.c — sequential writes done behind the producer by a thread
 * (wbehind.h).
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
