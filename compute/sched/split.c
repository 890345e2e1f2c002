/* compute/sched/split.c — split jobs: one large job run as tile jobs, each
 * computing a band of its rows (API.md, "Split jobs").
 *
 * Which jobs split (sched_split_tiles, at submit): not one asked for cuda,
 * nor an auto one on a node with a usable GPU (one GPU beats its tiles:
 * their results are stored, then joined); one whose kind says it can run
 * as row tiles (kind_ops.split; today a geodesic matrix, or a query knn /
 * rowwise — not radius: its parts are not rows), whose rows x columns
 * (est.size x kind_split.cols) reach cfg.split_min_pairs (0: never), kept
 * in the service (no output.file) and run on one backend (not compare);
 * a kind whose bands run on the CPU only (kind_split.cpu_only: a query
 * without targets, the CUDA query engine takes no band) only on serial or
 * cpu. This file names no kind and reads no kind's params. The row is
 * inserted with tiles = T (cfg.tiles, else 2 x live nodes — on SQLite 2 —
 * at most n), so that a parent (tiles > 0, parent NULL) is told from any
 * other job wherever it is read again.
 *
 * A parent is not run by a worker: sched_add hands it to sched_split_run,
 * which starts its coordinator thread (one a parent, no worker slot). The
 * coordinator marks the parent running, inserts the tiles that are not in
 * the store yet (store_job_children: a resumed parent inserts only the
 * missing ones) — the parent's kind, params, owner, priority,
 * backend and timeout, parent = id, tile = i, tiles = T — and queues them
 * here (sched_add_claimed); tile i computes rows [n i / T, n (i + 1) / T)
 * (compute/sched/run.c sets job_ctx row0/row1; where the kind says tri, a
 * matrix without targets, the bands hold equal pairs instead,
 * sched_split_rows with tri). It then
 * follows them by reading the
 * store every SPLIT_POLL_MS: progress is the pairs of the tiles done and
 * the running tiles' stored progress (each tile an equal share); a
 * tile that failed or was canceled cancels the others and fails the parent
 * with "tile i: <its message>" and its code; past the job's timeout_s
 * (from the coordinator's start: the tiles' wait for a worker counts) it
 * cancels them and fails the parent deadline_exceeded; a parent canceled in the
 * store (DELETE /v1/jobs/{id}/cancel reaches the row, the parent being in
 * no queue) cancels its tiles. When every tile succeeded it writes the
 * parent's result — every part, the tiles' rows concatenated in tile order
 * (float64, float32 or int64 bytes as they are) — where the scheduler keeps
 * any result (a square matrix without targets: its tiles hold their rows'
 * upper parts, which join_square mirrors into the whole matrix; a tile that
 * the version before upper bands finished holds its rows whole, cut by
 * equal rows, which the join copies as they are, so that a parent resumed
 * across the upgrade still joins unless the two cuts leave rows in no
 * tile, sched_split_join_square): part 0 in
 * the row when it fits row_max, else
 * <results>/<id>.npy; part k as <results>/<id>.<name>.npy (compute/array/parts.h),
 * each through a temporary renamed when whole; and ends the parent
 * succeeded with its timings and the tiles' non-converged pairs. The tiles'
 * rows stay (tiles.by_node in the job's JSON) until the parent is deleted or
 * expires, which takes them with it (db/store.h).
 *
 * A restart: the parent is unfinished in the store, queued again by
 * sched_start (and so handed here again) with its unfinished tiles queued
 * as any job; the coordinator inserts only missing tiles and goes on.
 * A cluster store: a submit only inserts the row; a node's claimer claims
 * parents apart (store_job_claim with parents = 1, compute/sched/cluster.c) and
 * hands each to a coordinator here; the tiles it inserts are claimed by
 * any node's claimer ("queued" events). The parent's lease is renewed by
 * the node's heartbeat with its other claims; the coordinator stops
 * without writing when the row names another node (its lease went to
 * another node, whose coordinator resumes it: only missing tiles are
 * inserted), and a cancel that reached the row (cancel_requested) cancels
 * the tiles and ends the parent canceled. Its files are named per run
 * (<id>.r<attempt>...), as compute/sched/cluster.c names a claimed job's, so a
 * fenced coordinator never touches its successor's.
 *
 * Threads: each coordinator is a detached thread; s->split_threads counts
 * them and sched_shutdown sets s->split_quit and waits for none left (a
 * coordinator that quits leaves the parent running in the store: resumed
 * at the next start). They make [sync] store calls with no scheduler lock
 * held, and call sched_cancel for tiles.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/array/parts.h"
#include "compute/sched/cluster.h"
#include "compute/sched/sched_int.h"
#include "compute/sched/split.h"
#include "util/util.h"

#define SPLIT_POLL_MS 50

/* A GPU of this node that can run a job now. */
static int usable_gpu(const sched *s) {
  for (int d = 0; d < s->ngpu; d++)
    if (!s->gpu.healthy || s->gpu.healthy(d)) return 1;
  return 0;
}

int sched_split_tiles(const sched *s, const kind_ops *k, const json_t *params,
                      const job_estimate *est, int backend, int output) {
  kind_split sp;
  if (!s || s->cfg.split_min_pairs <= 0 || !k || !k->split || !params ||
      !est || output || backend == B_COMPARE)
    return 0;
  /* One GPU computes a matrix faster than its tiles' results can be
   * stored and joined (bench_split.sh, H200: n = 30000 whole 0.76 s, in 4
   * tiles 3.1 s): a job asked for cuda is not split, nor an auto one
   * submitted to a node with a usable GPU (its router would pick it). */
  if (backend == B_CUDA || (backend == B_AUTO && usable_gpu(s))) return 0;
  if (!k->split(params, est, &sp)) return 0; /* its parts are not rows */
  if (sp.cpu_only && backend != B_SERIAL && backend != B_CPU) return 0;
  double n = (double)est->size;
  if (n < 2 || n * sp.cols < (double)s->cfg.split_min_pairs) return 0;
  int t = s->cfg.tiles > 0 ? s->cfg.tiles : 2 * sched_live_nodes((sched *)s);
  if (t < 2) t = 2;
  if (t > 256) t = 256;
  if (t > est->size) t = (int)est->size;
  return t;
}

int sched_split_held_locked(sched *s, const char *id) {
  SCHED_ASSERT_LOCKED(s);
  for (split_run *r = s->splits; r; r = r->next)
    if (strcmp(r->p.id, id) == 0) return 1;
  return 0;
}

static void kids_free(store_job *k, int n) {
  for (int i = 0; i < n; i++) store_job_clear(&k[i]);
  free(k);
}

/* Insert and queue the tiles the store does not have. */
static int insert_missing(split_run *r, terr *e) {
  store_job *kids = NULL;
  int nk = 0, T = r->p.tiles;
  int rc = store_job_children(r->s->cfg.st, r->p.id, &kids, &nk, e);
  if (rc) return rc;
  for (int i = 0; !rc && i < T; i++) {
    int have = 0;
    for (int k = 0; k < nk; k++) have |= kids[k].tile == i;
    if (have) continue;
    store_job c;
    memset(&c, 0, sizeof c);
    t_id_new('j', c.id);
    c.owner = r->p.owner;
    c.kind = r->p.kind;
    c.params = r->p.params;
    c.estimate = r->p.estimate; /* its "files": the pins a tile compares */
    c.status = JOB_QUEUED;
    c.backend_requested = r->p.backend_requested;
    c.priority = r->p.priority;
    c.timeout_s = r->p.timeout_s;
    c.created_at = t_wall_ms();
    c.max_abs_diff = NAN;
    c.parent = r->p.id;
    c.tile = i;
    c.tiles = T;
    int existing = 0;
    rc = store_job_insert(r->s->cfg.st, &c, &existing, e);
    if (!rc && !r->s->cluster) rc = r->s->up.add_claimed(r->s, &c, e);
  }
  if (r->s->cluster) sched_cluster_kick(r->s); /* claim tiles here too */
  kids_free(kids, nk);
  return rc;
}

static void cancel_tiles(split_run *r, const store_job *kids, int nk) {
  for (int i = 0; i < nk; i++) {
    if (job_status_final(kids[i].status)) continue;
    terr e;
    terr_clear(&e);
    if (r->s->up.cancel(r->s, kids[i].id, NULL, &e) != T_OK && e.code != T_ECONFLICT)
      log_warn("split %s: cannot cancel tile %d (%s): %s", r->p.id,
               kids[i].tile, kids[i].id, e.message);
  }
}

/* A committed end of the parent: its job_end line (API.md, "Logs"), as
 * compute/sched/run.c writes one for every other job (backend "split", and the
 * tiles), and its count in /metrics (its tiles are not counted there). */
static void note_end(const split_run *r, job_status status, const char *code,
                    const char *msg, int64_t finished_at) {
  char self[T_ID_MAX], node[104] = "";
  if (r->s->cluster) sched_node_self(r->s, self, node, sizeof node);
  int64_t started = r->p.started_at ? r->p.started_at : r->p.created_at;
  double ms = (double)(finished_at - r->p.created_at);
  t_kv kv[] = {
      T_KV_S("id", r->p.id),
      T_KV_S("node", node[0] ? node : NULL),
      T_KV_N("started", started),
      T_KV_N("finished", finished_at),
      T_KV_S("kind", r->p.kind),
      T_KV_S("backend", "split"),
      T_KV_N("tiles", r->p.tiles),
      T_KV_S("status", job_status_name(status)),
      T_KV_N("ms", ms),
      T_KV_S("error", code),
      T_KV_S("message", code ? msg : NULL),
  };
  t_log_kv(status == JOB_FAILED ? T_LOG_WARN : T_LOG_INFO, "job_end", kv,
           (int)(sizeof kv / sizeof kv[0]));
  sched_count_split_end(r->s, r->p.kind, status,
                        (double)(finished_at - started));
}

/* End the parent (and log it). */
static int finish(split_run *r, store_job_end *end) {
  terr e;
  terr_clear(&e);
  double now = (double)t_wall_ms();
  int64_t started = r->p.started_at ? r->p.started_at : r->p.created_at;
  job_timings_put(&end->timings, JOB_T_QUEUE,
                  (double)(started - r->p.created_at));
  job_timings_put(&end->timings, JOB_T_TOTAL, now - (double)r->p.created_at);
  end->finished_at = (int64_t)now;
  end->held = 1; /* this node's coordinator run; not one the reaper took */
  int rc = store_job_finish(r->s->cfg.st, r->p.id, end, &e);
  if (rc != T_OK) {
    log_warn("split %s: cannot end the job: %s", r->p.id, e.message);
    return rc;
  }
  note_end(r, end->status, end->error_code, end->error_message,
          end->finished_at);
  return rc;
}

/* coordinate's state across its polls: the job's timeout from the
 * coordinator's start, and progress in pairs (the estimate's points —
 * rows — and pairs — work) */
typedef struct {
  double t0, timeout_s;
  int64_t n, pairs, last_done;
} coord_state;

/* Starts the parent (queued -> running: a resumed parent was put back to
 * queued by sched_start; a parent canceled meanwhile is seen by the loop)
 * and inserts its missing tiles. 0 to follow them, 1 when done here. */
static int coord_begin(split_run *r) {
  sched *s = r->s;
  terr e;
  terr_clear(&e);
  int64_t now = t_wall_ms();
  char reason[96];
  snprintf(reason, sizeof reason, "split into %d tiles", r->p.tiles);
  if (store_job_start(s->cfg.st, r->p.id, now, "split", reason, r->p.estimate,
                      &e) != T_OK)
    log_warn("split %s: cannot start: %s", r->p.id, e.message);
  if (!r->p.started_at) r->p.started_at = now;
  if (insert_missing(r, &e) == T_OK) return 0;
  if (e.code == T_EUNAVAIL || atomic_load(&s->split_quit)) {
    /* shutting down: the tiles inserted stay queued in the store, and
     * the parent running: the next start resumes it */
    log_info("split %s: left to the next start (%s)", r->p.id, e.message);
    return 1;
  }
  store_job_end end = {.status = JOB_FAILED, .max_abs_diff = NAN,
                       .error_code = terr_code_name((terr_code)e.code),
                       .error_message = e.message};
  finish(r, &end);
  return 1;
}

/* The job's timeout bounds the whole job, from this coordinator's start
 * (as a run's does from its start; a resumed parent starts again): its
 * tiles waiting for a worker count, not only their runs (each tile has
 * the same timeout_s too). */
static void coord_state_init(split_run *r, coord_state *c) {
  memset(c, 0, sizeof *c);
  c->t0 = t_now_ms();
  c->timeout_s = r->p.timeout_s > 0 ? r->p.timeout_s
                                    : r->s->cfg.default_timeout_s;
  c->last_done = -1;
  if (r->p.estimate) {
    json_t *est = json_loads(r->p.estimate, 0, NULL);
    c->n = (int64_t)json_integer_value(json_object_get(est, "size"));
    c->pairs = (int64_t)json_number_value(json_object_get(est, "work"));
    json_decref(est);
  }
}

/* Reads the parent: -1 to poll again (store error), 1 when this
 * coordinator is done (deleted, or its lease went to another node), else 0
 * with *ended (final in the store: a cancel on SQLite, sched_cancel) and
 * *cancel (a cluster cancel request). */
static int coord_parent(split_run *r, int *ended, int *cancel) {
  sched *s = r->s;
  store_job p;
  terr e;
  terr_clear(&e);
  memset(&p, 0, sizeof p);
  if (store_job_get(s->cfg.st, r->p.id, NULL, &p, &e) != T_OK)
    return e.code == T_ENOTFOUND ? 1 : -1;
  int pfinal = job_status_final(p.status);
  int lost = 0;
  *cancel = 0;
  if (s->cluster && !pfinal) {
    char self[T_ID_MAX], name[8];
    sched_node_self(s, self, name, sizeof name);
    lost = !p.node || strcmp(p.node, self) != 0;
    *cancel = p.cancel_requested;
  }
  if (pfinal)
    note_end(r, p.status, p.error_code, p.error_message,
             p.finished_at ? p.finished_at : t_wall_ms());
  store_job_clear(&p);
  *ended = pfinal;
  if (lost) { /* another node's coordinator has it now: write nothing */
    log_warn("split %s: its lease went to another node; stopping", r->p.id);
    return 1;
  }
  return 0;
}

static void coord_timed_out(split_run *r, store_job *kids, int nk,
                            double timeout_s) {
  cancel_tiles(r, kids, nk);
  int ended = 0;
  for (int i = 0; i < nk; i++) ended += kids[i].status == JOB_SUCCEEDED;
  char msg[200];
  snprintf(msg, sizeof msg,
           "the job ran past its timeout of %s s (%d of its %d tiles done)",
           t_num(timeout_s).s, ended, r->p.tiles);
  store_job_end end = {.status = JOB_FAILED, .max_abs_diff = NAN,
                       .error_code = terr_code_name(T_ETIMEOUT),
                       .error_message = msg};
  finish(r, &end);
}

static void coord_tile_failed(split_run *r, store_job *kids, int nk, int bad) {
  cancel_tiles(r, kids, nk);
  char msg[1200];
  snprintf(msg, sizeof msg, "tile %d: %s", kids[bad].tile,
           kids[bad].error_message ? kids[bad].error_message
                                   : job_status_name(kids[bad].status));
  store_job_end end = {.status = JOB_FAILED, .max_abs_diff = NAN,
                       .error_code = kids[bad].error_code
                                         ? kids[bad].error_code
                                         : "internal",
                       .error_message = msg};
  finish(r, &end);
}

/* Every tile done: joins their results into the parent's and ends it; a
 * parent canceled meanwhile keeps nothing. */
static void coord_join(split_run *r, store_job *kids, int nk, int64_t ptotal) {
  store_job_end end = {.status = JOB_SUCCEEDED, .max_abs_diff = NAN,
                       .progress_done = ptotal, .progress_total = ptotal};
  char final[SPLIT_PATH_MAX] = "";
  char *doc = NULL;
  void *npy = NULL;
  terr je;
  terr_clear(&je);
  char msg[1200];
  if (sched_split_join_result(r, kids, nk, &end, final, &doc, &npy, &je) != T_OK) {
    memset(&end.result, 0, sizeof end.result);
    end.result_path = NULL;
    end.result_npy = NULL;
    end.result_parts = NULL;
    end.status = JOB_FAILED;
    end.error_code = terr_code_name((terr_code)je.code);
    snprintf(msg, sizeof msg, "joining the tiles: %s", je.message);
    end.error_message = msg;
  }
  if (finish(r, &end) != T_OK) { /* canceled meanwhile: keep nothing */
    if (end.result_path) unlink(end.result_path);
    tparts tp;
    terr pe;
    if (doc && tparts_parse(doc, &tp, &pe) == T_OK) {
      for (int k = 1; k < tp.n; k++)
        if (tp.p[k].path) unlink(tp.p[k].path);
      tparts_clear(&tp);
    }
  }
  free(doc);
  free(npy);
}

/* Tiles done, the first ended badly (-1 if none), and the fraction done:
 * the done ones and the running ones' stored progress, each tile an equal
 * share of the pairs (sched_split_rows). */
static void coord_tally(const store_job *kids, int nk, int *done, int *bad,
                        double *frac) {
  *done = 0;
  *bad = -1;
  *frac = 0;
  for (int i = 0; i < nk; i++) {
    if (kids[i].status == JOB_SUCCEEDED) {
      (*done)++;
      *frac += 1;
    } else if (job_status_final(kids[i].status) && *bad < 0) {
      *bad = i;
    } else if (kids[i].progress_total > 0 && kids[i].progress_done > 0) {
      double f = (double)kids[i].progress_done / (double)kids[i].progress_total;
      *frac += f < 1 ? f : 1;
    }
  }
}

/* Decides on the tiles read: 1 when the parent ended here, else 0 with its
 * progress stored. */
static int coord_decide(split_run *r, coord_state *c, store_job *kids, int nk,
                        int ended, int cancel) {
  if (ended || cancel) { /* canceled (or ended elsewhere): so are its tiles */
    cancel_tiles(r, kids, nk);
    if (cancel) {
      store_job_end end = {.status = JOB_CANCELED, .max_abs_diff = NAN,
                           .error_code = "canceled",
                           .error_message = "canceled by request"};
      finish(r, &end);
    }
    return 1;
  }
  if (c->timeout_s > 0 && t_now_ms() - c->t0 > c->timeout_s * 1e3) {
    coord_timed_out(r, kids, nk, c->timeout_s);
    return 1;
  }
  int done, bad;
  double frac;
  coord_tally(kids, nk, &done, &bad, &frac);
  if (bad >= 0) {
    coord_tile_failed(r, kids, nk, bad);
    return 1;
  }
  int64_t pdone =
      c->n > 0 ? (int64_t)((double)c->pairs * frac / r->p.tiles) : done;
  int64_t ptotal = c->n > 0 ? c->pairs : r->p.tiles;
  if (done == r->p.tiles && nk == r->p.tiles) {
    coord_join(r, kids, nk, ptotal);
    return 1;
  }
  if (pdone != c->last_done) {
    store_job_progress(r->s->cfg.st, r->p.id, pdone, ptotal);
    c->last_done = pdone;
  }
  return 0;
}

/* One poll of the parent and its tiles: 1 when the coordinator is done. */
static int coord_step(split_run *r, coord_state *c) {
  int ended = 0, cancel = 0;
  int pr = coord_parent(r, &ended, &cancel);
  if (pr != 0) return pr > 0;
  store_job *kids = NULL;
  int nk = 0;
  terr e;
  terr_clear(&e);
  if (store_job_children(r->s->cfg.st, r->p.id, &kids, &nk, &e) != T_OK)
    return 0;
  int stop = coord_decide(r, c, kids, nk, ended, cancel);
  kids_free(kids, nk);
  return stop;
}

static void coordinate(split_run *r) {
  if (coord_begin(r)) return;
  coord_state c;
  coord_state_init(r, &c);
  while (!atomic_load(&r->s->split_quit)) {
    if (coord_step(r, &c)) return;
    usleep(SPLIT_POLL_MS * 1000);
  }
}

static void *split_main(void *arg) {
  split_run *r = arg;
  coordinate(r);
  sched *s = r->s;
  /* ended (or left running at a shutdown): its waiters read the store */
  tmutex_lock(&s->mu);
  for (split_run **pp = &s->splits; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      break;
    }
  tmutex_unlock(&s->mu);
  sched_fire_remote(s, r->p.id, NULL);
  store_job_clear(&r->p);
  free(r);
  atomic_fetch_sub(&s->split_threads, 1);
  return NULL;
}

static char *dup_s(const char *x) { return x ? strdup(x) : NULL; }

int sched_split_run(sched *s, const store_job *parent, terr *e) {
  split_run *r = calloc(1, sizeof *r);
  if (!r) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  r->s = s;
  store_job *p = &r->p;
  snprintf(p->id, sizeof p->id, "%s", parent->id);
  p->owner = dup_s(parent->owner ? parent->owner : "");
  p->kind = dup_s(parent->kind);
  p->params = dup_s(parent->params);
  p->backend_requested = dup_s(parent->backend_requested ? parent->backend_requested : "auto");
  p->status = parent->status;
  p->priority = parent->priority;
  p->timeout_s = parent->timeout_s;
  p->created_at = parent->created_at;
  p->started_at = parent->status == JOB_RUNNING ? parent->started_at : 0;
  p->tiles = parent->tiles;
  p->attempts = parent->attempts;
  p->estimate = dup_s(parent->estimate);
  if (!p->owner || !p->kind || !p->params || !p->backend_requested) {
    store_job_clear(p);
    free(r);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  tmutex_lock(&s->mu);
  if (sched_split_held_locked(s, p->id)) { /* already run here */
    tmutex_unlock(&s->mu);
    store_job_clear(p);
    free(r);
    return T_OK;
  }
  r->next = s->splits;
  s->splits = r;
  tmutex_unlock(&s->mu);
  atomic_fetch_add(&s->split_threads, 1);
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&th, &at, split_main, r);
  pthread_attr_destroy(&at);
  if (err) {
    atomic_fetch_sub(&s->split_threads, 1);
    tmutex_lock(&s->mu);
    for (split_run **pp = &s->splits; *pp; pp = &(*pp)->next)
      if (*pp == r) {
        *pp = r->next;
        break;
      }
    tmutex_unlock(&s->mu);
    store_job_clear(p);
    free(r);
    return terr_set(e, T_EINTERNAL, "", -1, "cannot start a split thread");
  }
  return T_OK;
}

void sched_split_stop(sched *s) {
  atomic_store(&s->split_quit, 1);
  while (atomic_load(&s->split_threads) > 0) usleep(10 * 1000);
}
