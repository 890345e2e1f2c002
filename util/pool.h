/* pool.h — a fixed pool of worker threads shared by jobs and their chunks.
 *
 * Workers do two things: they help with any pool_for in progress (chunks
 * first: a running job finishes sooner), and when there are none they ask
 * the `idle` callback for a whole job to run (the scheduler's). A thread that
 * calls pool_for takes part in its own loop, so a job running on a worker
 * can split itself over the pool without deadlock, even when every other
 * worker is busy with a job of its own.
 *
 * Locks: one mutex guards the list of active loops and the sleep condvar;
 * chunk indices are handed out by an atomic counter per loop, outside it.
 * `idle` is called without the pool lock held and may block (it runs a job).
 */
#ifndef TESSEL_UTIL_POOL_H
#define TESSEL_UTIL_POOL_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct pool pool;

/* idle(ud): run one job if there is one and return 1, else return 0
 * (the worker then sleeps until pool_notify). May be NULL. */
typedef int (*pool_idle_fn)(void *ud);

/* Start nthreads workers (>= 1). NULL on failure. */
pool *pool_create(int nthreads, pool_idle_fn idle, void *ud);
/* Wake sleeping workers (new job queued). */
void pool_notify(pool *p);
/* Stop the workers once their current job returns, join them. NULL ok. */
void pool_destroy(pool *p);
int pool_threads(const pool *p);

/* Call fn(arg, chunk, slot) for every chunk in [0, nchunks), on at most
 * `width` threads including the caller; slot in [0, width) is unique among
 * the threads running this loop at once (index per-thread scratch with it).
 * Returns once every started chunk has finished. When *stop becomes non-zero
 * no further chunk starts, and pool_for returns that value (else 0). stop
 * may be NULL. Safe to call from any thread, workers included. */
typedef void (*pool_chunk_fn)(void *arg, int64_t chunk, int slot);
int pool_for(pool *p, int width, int64_t nchunks, pool_chunk_fn fn, void *arg,
             atomic_int *stop);

#endif
