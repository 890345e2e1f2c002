/* mgpu.c — one job's row blocks over every lent GPU (mgpu.h says what and
 * why). The lanes share one mutex-guarded state: the next block of the
 * fixed cut, a stack of blocks given back by lanes whose device failed,
 * the lanes inside a block (busy) and the first error that ends all. A
 * lane with no block to take while others are inside one waits on the
 * condition: a block they give back must still find a lane. Lane 0 is
 * the caller's thread (the run's own device, never taken back); lanes 1..
 * are threads that borrow their device first and give it back last, on
 * their own thread (the device lock is the thread's). Before any block
 * every thread meets a barrier three times (borrows tried, lanes opened,
 * lanes prepared: mg_lane_run), so that prepare's shares are known and
 * done before anybody writes. A two-deep lane (ops.launch) launches its
 * first ops.prime blocks between the second barrier and prepare, then
 * holds the block it is writing and the one launched behind it (mg_held,
 * oldest first): it takes more without waiting (a lane holding a block
 * never waits for one), and a device error or a take-back gives back
 * what it holds unwritten.
 */
#include "compute/kinds/mgpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/tassert.h"
#include "util/util.h"

typedef struct mg_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const mgpu_lend *lend;
  const mgpu_ops *ops;
  int64_t rows, block_rows, nblocks, next;
  int64_t retry[MGPU_MAX * MGPU_PRIME_MAX]; /* blocks given back */
  int nretry, busy, fatal, dev_failed;
  int64_t retried;
  terr err;     /* fatal: the job's error */
  terr dev_err; /* the first device error, if no lane is left */
  mgpu_report rep; /* by slot: slot 0 is the own device */
  int ran[MGPU_MAX];  /* borrowed its device */
  int live[MGPU_MAX]; /* lane_begin answered 0 */
  int parties, arrived, phase; /* the barrier: parties 0 until all started */
} mg_state;

typedef struct mg_lane {
  mg_state *S;
  int slot, dev;
  pthread_t th;
  int started;
} mg_lane;

/* Every lane thread (borrowed or not) and lane 0 meet here three times
 * before any block: once the borrows are tried, once the lanes are open,
 * once they are prepared. */
static void mg_barrier(mg_state *S) {
  pthread_mutex_lock(&S->mu);
  int ph = S->phase;
  S->arrived++;
  if (S->parties > 0 && S->arrived == S->parties) {
    S->arrived = 0;
    S->phase++;
    pthread_cond_broadcast(&S->cv);
  }
  while (S->phase == ph) pthread_cond_wait(&S->cv, &S->mu);
  pthread_mutex_unlock(&S->mu);
}

int64_t mgpu_fold(int64_t t, int64_t nblocks) {
  return t % 2 == 0 ? t / 2 : nblocks - 1 - t / 2;
}

/* The next block for a lane, or -1 when none is left (or the job ended).
 * wait: a lane with nothing in hand waits while other lanes are inside a
 * block that may come back; a lane holding one never waits (it may be
 * the one whose block would come back). */
static int64_t mg_take(mg_state *S, int wait) {
  int64_t b = -1;
  pthread_mutex_lock(&S->mu);
  for (;;) {
    if (S->fatal) break;
    if (S->nretry > 0) {
      b = S->retry[--S->nretry];
      S->retried++;
      break;
    }
    if (S->next < S->nblocks) {
      b = S->next++;
      if (S->ops->fold) b = mgpu_fold(b, S->nblocks);
      break;
    }
    if (S->busy == 0 || !wait) break;
    pthread_cond_wait(&S->cv, &S->mu);
  }
  if (b >= 0) S->busy++;
  pthread_mutex_unlock(&S->mu);
  return b;
}

/* Ends the job with e (the first error wins). Under S->mu. */
static void mg_fatal_locked(mg_state *S, const terr *e) {
  if (!S->fatal) S->err = *e;
  S->fatal = 1;
}

/* A block in hand goes back unwritten (its lane stops: taken back, or
 * its device failed). Under S->mu. */
static void mg_give_locked(mg_state *S, int64_t b) {
  T_ASSERT(S->nretry < MGPU_MAX * MGPU_PRIME_MAX); /* what lanes hold */
  S->retry[S->nretry++] = b;
  S->busy--;
}

/* What a lane holds: blocks launched and not yet written, oldest first
 * (at most MGPU_PRIME_MAX, two once primed). */
typedef struct mg_held {
  int64_t b[MGPU_PRIME_MAX];
  int n;
} mg_held;

static void mg_rows(const mg_state *S, int64_t b, int64_t *r0, int64_t *r1) {
  *r0 = b * S->block_rows;
  *r1 = *r0 + S->block_rows < S->rows ? *r0 + S->block_rows : S->rows;
}

/* The end of the oldest held block (rc 0: counted, popped), or of the
 * lane: T_EDEVICE gives every held block back for another lane; anything
 * else ends the job. Returns 1 when the lane goes on. */
static int mg_done(mg_state *S, int slot, mg_held *h, int rc, const terr *e) {
  int go = 1;
  int64_t r0, r1;
  mg_rows(S, h->b[0], &r0, &r1);
  pthread_mutex_lock(&S->mu);
  if (rc == T_OK) {
    S->busy--;
    S->rep.rows[slot] += r1 - r0;
    S->rep.blocks[slot]++;
    memmove(h->b, h->b + 1, (size_t)(h->n - 1) * sizeof h->b[0]);
    h->n--;
  } else {
    if (rc == T_EDEVICE) {
      for (int i = 0; i < h->n; i++) mg_give_locked(S, h->b[i]);
      S->rep.failed[slot] = 1;
      if (!S->dev_failed) S->dev_err = *e;
      S->dev_failed = 1;
    } else {
      S->busy -= h->n;
      mg_fatal_locked(S, e);
    }
    h->n = 0;
    go = 0;
  }
  pthread_cond_broadcast(&S->cv);
  pthread_mutex_unlock(&S->mu);
  return go;
}

/* The run's stop, or the job's error met by another lane, seen by a
 * lane: what it holds is dropped (not written for nothing). Returns the
 * stop's or the error's code, 0 when the lane goes on. */
static int mg_check_stop(mg_state *S, mg_held *h) {
  const mgpu_lend *l = S->lend;
  int st = l->stopped ? l->stopped(l->ctx) : 0;
  terr e;
  pthread_mutex_lock(&S->mu);
  if (!st && !S->fatal) {
    pthread_mutex_unlock(&S->mu);
    return 0;
  }
  if (!st) st = S->err.code ? S->err.code : T_EINTERNAL;
  terr_set(&e, (terr_code)st, "", -1, "stopped");
  S->busy -= h->n;
  h->n = 0;
  mg_fatal_locked(S, &e); /* the first error stays the job's */
  pthread_cond_broadcast(&S->cv);
  pthread_mutex_unlock(&S->mu);
  return st;
}

/* Take (waiting, when asked, only if the lane holds nothing: a lane
 * holding a block may be the one whose block would come back; and never
 * before the last barrier, where the others wait) and launch one more
 * block. 1 launched, 0 none to take, -1 the launch failed (the lane
 * stops: every held block given back, or the job's error). */
static int mg_launch_one(mg_state *S, int slot, int dev, mg_held *h,
                         int wait, int *last) {
  const mgpu_ops *o = S->ops;
  int64_t b = mg_take(S, wait && h->n == 0), r0, r1;
  if (b < 0) return 0;
  T_ASSERT(h->n < MGPU_PRIME_MAX);
  h->b[h->n++] = b;
  if (!o->launch) return 1;
  mg_rows(S, b, &r0, &r1);
  terr e;
  terr_clear(&e);
  *last = o->launch(o->u, slot, dev, r0, r1, &e);
  if (*last == T_OK) return 1;
  /* the failed one first: mg_done gives back (or drops) them all */
  int64_t t = h->b[0];
  h->b[0] = b;
  h->b[h->n - 1] = t;
  mg_done(S, slot, h, *last, &e);
  return -1;
}

/* The blocks a two-deep lane launches before the lanes prepare (their
 * kernels run meanwhile): its depth, at most its fair share of the
 * blocks (nlive lanes), at least one. Returns 0 when a launch failed. */
static int mg_prime(mg_state *S, int slot, int dev, int depth, int nlive,
                    mg_held *h, int *last) {
  const mgpu_lend *l = S->lend;
  if (!S->ops->launch || (l->stopped && l->stopped(l->ctx))) return 1;
  int64_t fair = S->nblocks / (nlive > 0 ? nlive : 1);
  if (fair < 1) fair = 1;
  for (int i = 0; i < depth && i < fair; i++) {
    int r = mg_launch_one(S, slot, dev, h, 0, last);
    if (r < 0) return 0;
    if (r == 0) break;
  }
  return 1;
}

/* One lane's blocks on its thread, its device held: h holds what it
 * launched (primed). Returns the last result. */
static int mg_lane_loop(mg_state *S, int slot, int dev, mg_held *h) {
  const mgpu_lend *l = S->lend;
  const mgpu_ops *o = S->ops;
  int last = 0;
  for (;;) {
    if ((last = mg_check_stop(S, h)) != 0) break;
    if (slot > 0 && l->wanted && l->wanted(l->ctx, dev)) {
      S->rep.taken_back[slot] = 1; /* its own slot: no other writer */
      pthread_mutex_lock(&S->mu); /* launched, unwritten: another lane's */
      for (int i = 0; i < h->n; i++) mg_give_locked(S, h->b[i]);
      h->n = 0;
      pthread_cond_broadcast(&S->cv);
      pthread_mutex_unlock(&S->mu);
      break;
    }
    int r = 1;
    if (h->n == 0) r = mg_launch_one(S, slot, dev, h, 1, &last);
    while (r > 0 && o->launch && h->n < 2)
      r = mg_launch_one(S, slot, dev, h, 0, &last);
    if (r < 0 || h->n == 0) break; /* a launch failed; or nothing left */
    int64_t r0, r1;
    terr e;
    terr_clear(&e);
    mg_rows(S, h->b[0], &r0, &r1);
    last = o->block(o->u, slot, dev, r0, r1, &e);
    if (last == T_OK && l->progress) l->progress(l->ctx, r1 - r0);
    if (!mg_done(S, slot, h, last, &e)) break;
  }
  return last;
}

/* A lane from the barriers to its end: opened (lane_begin, which may
 * lower its depth), its first blocks launched, prepared, then its loop;
 * lane_end on every path. borrowed: 0 for a thread whose device was busy
 * (it only meets the barriers). */
static void mg_lane_run(mg_state *S, int slot, int dev, int borrowed) {
  const mgpu_ops *o = S->ops;
  int last = 0, go = 1;
  int depth = o->prime < 1 ? 1 : o->prime > MGPU_PRIME_MAX ? MGPU_PRIME_MAX
                                                           : o->prime;
  mg_held h;
  h.n = 0;
  terr e;
  terr_clear(&e);
  mg_barrier(S); /* every borrow tried */
  if (borrowed && o->lane_begin &&
      (last = o->lane_begin(o->u, slot, dev, &depth, &e)) != 0) {
    pthread_mutex_lock(&S->mu);
    if (last == T_EDEVICE) {
      S->rep.failed[slot] = 1;
      if (!S->dev_failed) S->dev_err = e;
      S->dev_failed = 1;
    } else {
      mg_fatal_locked(S, &e);
    }
    pthread_mutex_unlock(&S->mu);
  } else if (borrowed) {
    S->live[slot] = 1; /* read by others after the next barrier only */
  }
  if (depth < 1 || depth > MGPU_PRIME_MAX) depth = 1;
  mg_barrier(S); /* the lanes open */
  if (S->live[slot]) {
    int rank = 0, nlive = 0;
    for (int k = 0; k < MGPU_MAX; k++) {
      nlive += S->live[k];
      if (k < slot) rank += S->live[k];
    }
    go = mg_prime(S, slot, dev, depth, nlive, &h, &last);
    if (o->prepare) o->prepare(o->u, slot, dev, rank, nlive);
  }
  mg_barrier(S); /* prepared: blocks may be written */
  if (S->live[slot] && go) last = mg_lane_loop(S, slot, dev, &h);
  if (borrowed && o->lane_end) o->lane_end(o->u, slot, dev, last);
}

static void *mg_lane_main(void *arg) {
  mg_lane *x = arg;
  mg_state *S = x->S;
  const mgpu_lend *l = S->lend;
  int borrowed = l->borrow(l->ctx, x->dev) == 0; /* busy: not a lane */
  if (borrowed) S->ran[x->slot] = 1; /* read after the joins */
  mg_lane_run(S, x->slot, x->dev, borrowed);
  if (borrowed) l->give_back(l->ctx, x->dev);
  return NULL;
}

/* The report by lanes that ran, in slot order (own device first). */
static void mg_report(mg_state *S, mgpu_report *rep) {
  const mgpu_report *s = &S->rep;
  memset(rep, 0, sizeof *rep);
  for (int k = 0; k < MGPU_MAX; k++) {
    if (!S->ran[k]) continue;
    int n = rep->lanes++;
    rep->dev[n] = s->dev[k];
    rep->rows[n] = s->rows[k];
    rep->blocks[n] = s->blocks[k];
    rep->failed[n] = s->failed[k];
    rep->taken_back[n] = s->taken_back[k];
  }
  rep->block_rows = S->block_rows;
  rep->nblocks = S->nblocks;
  rep->retried = S->retried;
  rep->depth = S->ops->launch ? 2 : 1;
  rep->prime = S->ops->launch && S->ops->prime > 1 ? S->ops->prime : 1;
}

int mgpu_run(int own, int64_t rows, int64_t block_rows, int max_lanes,
             const mgpu_lend *lend, const mgpu_ops *ops, mgpu_report *rep,
             terr *e) {
  if (rep) memset(rep, 0, sizeof *rep); /* no lane, whatever the error */
  if (rows < 0 || block_rows <= 0 || !lend || !ops || !ops->block)
    return terr_set(e, T_EINVAL, "", -1, "mgpu_run: bad arguments");
  if (max_lanes <= 0 || max_lanes > MGPU_MAX) max_lanes = MGPU_MAX;
  mg_state *S = calloc(1, sizeof *S);
  mg_lane *lane = calloc(MGPU_MAX, sizeof *lane);
  if (!S || !lane) {
    free(S);
    free(lane);
    return terr_set(e, T_ENOMEM, "", -1, "no memory for the lanes");
  }
  pthread_mutex_init(&S->mu, NULL);
  pthread_cond_init(&S->cv, NULL);
  S->lend = lend;
  S->ops = ops;
  S->rows = rows;
  S->block_rows = block_rows;
  S->nblocks = (rows + block_rows - 1) / block_rows;
  S->rep.dev[0] = own;
  S->ran[0] = 1;
  int slots = 1;
  /* Lanes 1..: a thread per other device, each borrowing its own. */
  for (int d = 0; lend->borrow && lend->give_back && d < lend->ngpu &&
                  d < MGPU_MAX && slots < max_lanes;
       d++) {
    if (d == own) continue;
    mg_lane *x = &lane[slots];
    x->S = S;
    x->slot = slots;
    x->dev = d;
    S->rep.dev[slots] = d;
    if (pthread_create(&x->th, NULL, mg_lane_main, x) == 0) {
      x->started = 1;
      slots++;
    }
  }
  pthread_mutex_lock(&S->mu); /* every thread made: the barrier's size */
  S->parties = slots;
  if (S->arrived == slots) {
    S->arrived = 0;
    S->phase++;
    pthread_cond_broadcast(&S->cv);
  }
  pthread_mutex_unlock(&S->mu);
  mg_lane_run(S, 0, own, 1);
  for (int k = 1; k < slots; k++)
    if (lane[k].started) pthread_join(lane[k].th, NULL);
  int rc = T_OK;
  if (S->fatal) {
    *e = S->err;
    rc = S->err.code ? S->err.code : T_EINTERNAL;
  } else if (S->next < S->nblocks || S->nretry > 0) {
    /* every lane failed or left: the first device error is the job's */
    if (S->dev_failed) {
      *e = S->dev_err;
      rc = T_EDEVICE;
    } else {
      rc = terr_set(e, T_EINTERNAL, "", -1, "mgpu: blocks left, no lane");
    }
  }
  if (rep) mg_report(S, rep);
  pthread_cond_destroy(&S->cv);
  pthread_mutex_destroy(&S->mu);
  free(S);
  free(lane);
  return rc;
}

/* ---- the scheduler's hooks ------------------------------------------------ */
static int ml_borrow(void *c, int dev) {
  job_ctx *ctx = c;
  return ctx->gpu_borrow(ctx, dev);
}
static void ml_give_back(void *c, int dev) {
  job_ctx *ctx = c;
  if (ctx->gpu_return) ctx->gpu_return(ctx, dev);
}
static int ml_wanted(void *c, int dev) {
  job_ctx *ctx = c;
  return ctx->gpu_wanted(ctx, dev);
}
int mgpu_stopped(void *c) {
  job_ctx *ctx = c;
  return job_ctx_stopped(ctx) ? job_ctx_stop_code(ctx) : 0;
}
static void ml_progress(void *c, int64_t rows) { job_ctx_progress(c, rows); }

void mgpu_lend_of(job_ctx *ctx, mgpu_lend *out) {
  memset(out, 0, sizeof *out);
  out->ctx = ctx;
  out->ngpu = ctx->ngpu;
  out->borrow = ctx->gpu_borrow ? ml_borrow : NULL;
  out->give_back = ml_give_back;
  out->wanted = ctx->gpu_wanted ? ml_wanted : NULL;
  out->stopped = mgpu_stopped;
  out->progress = ml_progress;
}

void mgpu_describe(const mgpu_report *rep, char *buf, size_t len) {
  size_t o = 0;
  if (len == 0) return;
  buf[0] = 0;
#define MG_PUT(...)                                                   \
  do {                                                                \
    if (o < len) {                                                    \
      int w_ = snprintf(buf + o, len - o, __VA_ARGS__);               \
      o += w_ > 0 ? (size_t)w_ : 0;                                   \
    }                                                                 \
  } while (0)
  MG_PUT("cuda");
  for (int k = 0; k < rep->lanes; k++) MG_PUT("%s%d", k ? "+" : ":", rep->dev[k]);
  MG_PUT(" rows");
  for (int k = 0; k < rep->lanes; k++)
    MG_PUT("%s%d:%lld%s%s", k ? "," : " ", rep->dev[k],
           (long long)rep->rows[k], rep->failed[k] ? " failed" : "",
           rep->taken_back[k] ? " taken back" : "");
  MG_PUT(" blocks of %lld", (long long)rep->block_rows);
  if (rep->depth > 1) MG_PUT(", %d deep", rep->depth);
  if (rep->prime > 1) MG_PUT(", %d primed", rep->prime);
  if (rep->retried) MG_PUT(", %lld again", (long long)rep->retried);
#undef MG_PUT
  if (o >= len && len > 4) memcpy(buf + len - 4, "...", 4);
}

void mgpu_note(const mgpu_report *rep, job_ctx *ctx) {
  int n = rep->lanes < 32 ? rep->lanes : 32;
  ctx->lanes.n = n;
  for (int k = 0; k < n; k++) {
    ctx->lanes.lane[k].dev = rep->dev[k];
    ctx->lanes.lane[k].rows = rep->rows[k];
    ctx->lanes.lane[k].blocks = rep->blocks[k];
    ctx->lanes.lane[k].failed = rep->failed[k];
    ctx->lanes.lane[k].taken_back = rep->taken_back[k];
  }
  if (rep->lanes > 1) mgpu_describe(rep, ctx->spread, sizeof ctx->spread);
}

int mgpu_open_rc(int rc, int lane, terr *e) {
  if (rc == T_ENOMEM && lane > 0) rc = e->code = T_EDEVICE;
  return rc;
}

void mgpu_slowest(const lane_times *t, int n, lane_times *T) {
  memset(T, 0, sizeof *T);
  for (int k = 0; k < n; k++) {
    if (t[k].h2d > T->h2d) T->h2d = t[k].h2d;
    if (t[k].compute > T->compute) T->compute = t[k].compute;
    if (t[k].d2h > T->d2h) T->d2h = t[k].d2h;
  }
}

void mgpu_note_times(const lane_times *T, job_ctx *ctx) {
  ctx->t_h2d += T->h2d;
  ctx->t_compute += T->compute;
  ctx->t_d2h += T->d2h;
}
