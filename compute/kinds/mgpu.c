/* mgpu.c — one job's row blocks over every lent GPU (mgpu.h says what and
 * why). The lanes share one mutex-guarded state: the next block of the
 * fixed cut, a stack of blocks given back by lanes whose device failed,
 * the lanes inside a block (busy) and the first error that ends all. A
 * lane with no block to take while others are inside one waits on the
 * condition: a block they give back must still find a lane. Lane 0 is
 * the caller's thread (the run's own device, never taken back); lanes 1..
 * are threads that borrow their device first and give it back last, on
 * their own thread (the device lock is the thread's).
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
  int64_t retry[MGPU_MAX]; /* blocks given back by failed lanes */
  int nretry, busy, fatal, dev_failed;
  int64_t retried;
  terr err;     /* fatal: the job's error */
  terr dev_err; /* the first device error, if no lane is left */
  mgpu_report rep; /* by slot: slot 0 is the own device */
  int ran[MGPU_MAX];
} mg_state;

typedef struct mg_lane {
  mg_state *S;
  int slot, dev;
  pthread_t th;
  int started;
} mg_lane;

/* The next block for a lane, or -1 when none is left (or the job ended).
 * Waits while other lanes are inside a block that may come back. */
static int64_t mg_take(mg_state *S) {
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
      break;
    }
    if (S->busy == 0) break;
    pthread_cond_wait(&S->cv, &S->mu);
  }
  if (b >= 0) S->busy++;
  pthread_mutex_unlock(&S->mu);
  return b;
}

/* A block's end: rc 0 counted; T_EDEVICE gives it back for another lane;
 * anything else ends the job. Returns 1 when the lane goes on. */
static int mg_done(mg_state *S, int slot, int64_t b, int64_t r0, int64_t r1,
                   int rc, const terr *e) {
  int go = 1;
  pthread_mutex_lock(&S->mu);
  S->busy--;
  if (rc == T_OK) {
    S->rep.rows[slot] += r1 - r0;
    S->rep.blocks[slot]++;
  } else if (rc == T_EDEVICE) {
    T_ASSERT(S->nretry < MGPU_MAX); /* one block a lane, one failure a lane */
    S->retry[S->nretry++] = b;
    S->rep.failed[slot] = 1;
    if (!S->dev_failed) S->dev_err = *e;
    S->dev_failed = 1;
    go = 0;
  } else {
    if (!S->fatal) S->err = *e;
    S->fatal = 1;
    go = 0;
  }
  pthread_cond_broadcast(&S->cv);
  pthread_mutex_unlock(&S->mu);
  return go;
}

/* One lane's loop on its thread, its device held. */
static void mg_lane_loop(mg_state *S, int slot, int dev) {
  const mgpu_lend *l = S->lend;
  int last = 0;
  for (;;) {
    if (slot > 0 && l->wanted && l->wanted(l->ctx, dev)) {
      S->rep.taken_back[slot] = 1; /* its own slot: no other writer */
      break;
    }
    int st = l->stopped ? l->stopped(l->ctx) : 0;
    if (st) {
      terr e;
      terr_set(&e, (terr_code)st, "", -1, "stopped");
      pthread_mutex_lock(&S->mu);
      if (!S->fatal) S->err = e;
      S->fatal = 1;
      pthread_cond_broadcast(&S->cv);
      pthread_mutex_unlock(&S->mu);
      last = st;
      break;
    }
    int64_t b = mg_take(S);
    if (b < 0) break;
    int64_t r0 = b * S->block_rows, r1 = r0 + S->block_rows;
    if (r1 > S->rows) r1 = S->rows;
    terr e;
    terr_clear(&e);
    last = S->ops->block(S->ops->u, slot, dev, r0, r1, &e);
    if (last == T_OK && l->progress) l->progress(l->ctx, r1 - r0);
    if (!mg_done(S, slot, b, r0, r1, last, &e)) break;
  }
  if (S->ops->lane_end) S->ops->lane_end(S->ops->u, slot, dev, last);
}

static void *mg_lane_main(void *arg) {
  mg_lane *x = arg;
  mg_state *S = x->S;
  const mgpu_lend *l = S->lend;
  if (l->borrow(l->ctx, x->dev) != 0) return NULL; /* busy: not a lane */
  S->ran[x->slot] = 1;
  mg_lane_loop(S, x->slot, x->dev);
  l->give_back(l->ctx, x->dev);
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
}

int mgpu_run(int own, int64_t rows, int64_t block_rows, int max_lanes,
             const mgpu_lend *lend, const mgpu_ops *ops, mgpu_report *rep,
             terr *e) {
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
  mg_lane_loop(S, 0, own);
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
static int ml_stopped(void *c) {
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
  out->stopped = ml_stopped;
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
  if (rep->retried) MG_PUT(", %lld again", (long long)rep->retried);
#undef MG_PUT
  if (o >= len && len > 4) memcpy(buf + len - 4, "...", 4);
}
