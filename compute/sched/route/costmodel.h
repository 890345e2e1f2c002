/* costmodel.h — the router's calibrated cost model: how long a job would
 * take on each backend from submit to stored (what the user waits for:
 * the job's timings_ms.total), from measured rates of this machine.
 *
 * Terms, per backend (cm_parts, in seconds; cm_model_parts gives them):
 *   fixed    what every job pays (queue hand-off, its start and end in the
 *            store) + the backend's own (waking the pool; a GPU launch);
 *   read     reading the inputs: an upload or a chained job's result is a
 *            fresh mapping of its file (page faults on page-cache pages:
 *            map_read rate), anything else heap memory (stream rate, only
 *            beyond the caches, 32 MiB); for cuda the staging gang's host
 *            side (mapped: map_read; heap: memcpy), 0 for an input
 *            resident on the device;
 *   h2d      cuda: the inputs not resident, over pinned PCIe (measured);
 *   compute  the kind's term (kind_cost.cpu_s, gpu_s in kinds.h: its work
 *            over the rate it is done at — VM instructions, flops, pairs
 *            weighed by the method — from the machine's figures and the
 *            kind's own calibrated rates);
 *   d2h      cuda: the result over pinned PCIe;
 *   store    keeping the result: 0 when its .npy fits the store row
 *            (row_max), else a file's fixed cost + the bytes over the rate
 *            of the way they are written — a CPU map's sink (pwrite by the
 *            pool threads), a heap result (one npy_write), or a fresh
 *            shared mapping (every other result, a GPU's included: the
 *            gang copies out of the pinned slots into it). The file's inode
 *            lock serialises writers, so the store rate is never taken
 *            above one thread's: more threads do not shrink it — except a
 *            GPU result's: the gang prefaults the whole mapping in parallel
 *            on a disk file system, or faults it in parallel on tmpfs
 *            (compute/gpu/stage.cu), so cuda's rate is the better of the two
 *            all-threads mapping rates (mwrite_pf, mwrite_n).
 * Combined (overlaps as the code runs them):
 *   serial   fixed + max(compute, read) + store
 *   cpu      a map: fixed + max(compute, read, store) (pool threads write
 *            their own chunks while others compute: KIND_COST_SINK);
 *            else as serial with all threads' rates
 *   cuda     fixed + max(h2d, d2h, read + store, device) + one chunk's
 *            latency for the chunked kinds (pinned slots overlap the
 *            stages; the gang does both host sides); a phased kind
 *            (KIND_COST_GPU_PHASED, matmul: copies in, then the product,
 *            then out): fixed + max(h2d, read) + device + max(d2h, store)
 * The rates come from a self-benchmark at start (calibrate.c: the VM on
 * one and on all threads, host memory, the result files in the data
 * dir's results folder; on a GPU the pinned and pageable PCIe rates,
 * device copy rate and launch cost; then each kind's own rates by its
 * kind_cost.calibrate, e.g. matmul's OpenBLAS and cuBLAS dgemm), cached as JSON
 * in the data dir so a restart does not measure again, and written to the
 * log at start. Recorded submit -> stored times correct it: per (kind,
 * backend) an exponential moving average of measured / estimated
 * multiplies later estimates. The model names no kind: it asks the kind's
 * kind_cost, and keeps a kind's rates and corrections at its place in the
 * kind table (kind_slot; a kind not in the table is estimated, never
 * corrected).
 *
 * Threads: cm_init once at start; cm_choose / cm_estimate / cm_observe from
 * any thread (one mutex guards the rates and the corrections).
 */
#ifndef TESSEL_SCHED_COSTMODEL_H
#define TESSEL_SCHED_COSTMODEL_H

#include <jansson.h>
#include <stddef.h>

#include "compute/kinds/kinds.h"
#include "util/err.h"
#include "util/buf.h"

typedef struct cm_rates {
  int threads;          /* CPU pool width the cpu figures are for */
  double vm_ops_1;      /* expression VM instructions/s, one thread */
  double vm_ops_n;      /* ... all `threads` threads together */
  double copy_n;        /* host memcpy bytes/s, all threads (GPU staging) */
  double stream_1, stream_n; /* host read bytes/s: one thread, all threads */
  double fault_1, fault_n;   /* first writes to fresh memory (page faults
                              * included), bytes/s: one thread, all */
  int gang;             /* host threads that stage a GPU job's copies */
  double serial_fixed_s, cpu_fixed_s;
  int gpus;             /* usable GPUs when measured (0: no cuda figures) */
  double h2d, d2h;      /* pinned PCIe bytes/s */
  double h2d_pageable, d2h_pageable;
  double dev_bw;        /* device copy bytes/s, read + write */
  double gpu_ops;       /* fused-kernel operations/s (nominal, corrected) */
  double gpu_fixed_s;   /* launch + synchronise + job set-up */
  double chunk_bytes;   /* bytes per pipeline chunk (latency term) */
  /* Result files and mapped inputs, measured in the results folder. */
  double write_1, write_n;       /* pwrite into a fallocated file, bytes/s */
  double map_read_1, map_read_n; /* reading a fresh mapping of a file */
  double mwrite_1, mwrite_n;     /* first writes via a fresh shared mapping */
  double mwrite_pf;              /* ... by all threads after each prefaulted
                                  * its part (MADV_POPULATE_WRITE): a GPU
                                  * result's way on disk file systems */
  double file_fixed_s;           /* create + fallocate + rename a result file */
  double job_fixed_s; /* every job's submit -> stored overhead (nominal) */
  /* The kinds' own rates (kind_cost.rates), by kind_slot; in the JSON
   * form under their own names beside the machine's. */
  double kind_rate[KIND_MAX][KIND_RATES];
} cm_rates;

/* A kind's rate by its name (kind_cost.rates, any kind in the table):
 * its value, 0 when no kind owns it; set: 0, or -1 when no kind owns it. */
double cm_rate_get(const cm_rates *r, const char *name);
int cm_rate_set(cm_rates *r, const char *name, double v);

/* One backend's estimate in parts (seconds, uncorrected); total combines
 * them as the opening comment says (INFINITY: no such backend here). */
typedef struct cm_parts {
  double fixed, read, h2d, compute, d2h, store, total;
} cm_parts;

/* Correction factors, one per kind (kind_slot) and backend
 * (B_SERIAL..B_CUDA). */
#define CM_ALPHA 0.2 /* weight of a new observation in the average */
typedef struct cm_model {
  cm_rates r;
  /* Where results go (the scheduler's settings, not measured): a result
   * whose .npy fits row_max bytes stays in the store row (0: never);
   * other results of up to inline_max bytes from result_alloc are heap
   * memory written with one npy_write. */
  int64_t row_max, inline_max;
  double corr[KIND_MAX][B__COUNT];
  int nobs[KIND_MAX][B__COUNT];
} cm_model;

/* ---- pure model (no global state) -------------------------------------- */
/* row_max 0, inline_max 16 MiB (the scheduler's defaults). */
void cm_model_init(cm_model *m, const cm_rates *r);
/* The terms of the job on b, uncorrected. */
void cm_model_parts(const cm_model *m, const kind_ops *k, const job_estimate *est,
                    tbackend b, cm_parts *out);
/* Estimated ms of the job on b (B_SERIAL, B_CPU or B_CUDA), corrected. */
double cm_model_ms(const cm_model *m, const kind_ops *k, const job_estimate *est,
                   tbackend b);
/* Fold a measured run (submit -> stored less the queue wait: prepare +
 * run + store) into the correction of (kind, b). */
void cm_model_observe(cm_model *m, const kind_ops *k, const job_estimate *est,
                      tbackend b, double measured_ms);
/* The fastest of serial, cpu and (when gpu_ok) cuda; reason gets
 * "estimate cuda 12 ms, cpu 840 ms, serial 1600 ms"; *estimates (may be
 * NULL) a new object with every figure: {"model", "serial_ms", "cpu_ms",
 * "cuda_ms", "choice", "corrections", "parts_ms": {"serial": {"fixed",
 * "read", "compute", "store"}, "cpu": ..., "cuda": {... "h2d", "d2h"}}}
 * (parts uncorrected; cuda's only when it is estimated). */
int cm_model_choose(const cm_model *m, const kind_ops *k, const job_estimate *est,
                    int gpu_ok, tbackend *chosen, char *reason, size_t len,
                    json_t **estimates);
/* The same choice with its figures written straight to text: the members
 * of that object, without braces, appended to *figs (may be NULL), reals
 * with `digits` significant digits (tbuf_json_real's prec: 9 for the
 * stored estimate, 0 for every digit). T_ENOMEM when figs is in its error
 * state afterwards. The scheduler's path: no tree per job. */
int cm_model_choose_text(const cm_model *m, const kind_ops *k,
                         const job_estimate *est, int gpu_ok,
                         tbackend *chosen, char *reason, size_t len,
                         tbuf *figs, int digits);
/* Members text (as cm_model_choose_text writes it) as a new JSON object,
 * NULL when it does not parse or out of memory; frees *members. */
json_t *cm_figures_json(tbuf *members);
/* JSON form (rates and corrections) and back. cm_model_from_json fails
 * with T_EINVAL when a rate is missing or not a positive number — a kind's
 * too (a kind added since the file was written: measured again). */
json_t *cm_model_to_json(const cm_model *m);
int cm_model_from_json(const json_t *j, cm_model *m, terr *e);

/* ---- calibrate.c ------------------------------------------------------- */
/* Measure this machine (threads: the CPU pool's width). GPU figures when
 * gpu_count() > 0; the file figures in dir (cm_calibrate, or dir NULL:
 * nominal ones); then every kind in the table that has rates measures
 * them (kind_cost.calibrate). A few tens to hundreds of milliseconds. */
int cm_calibrate(cm_rates *r, int threads, terr *e);
int cm_calibrate_in(cm_rates *r, int threads, const char *dir, terr *e);

/* ---- the process-wide model (the router's) ----------------------------- */
/* Load the model from `path` when it was measured for the same threads and
 * GPU count, else calibrate (files in dir, see cm_calibrate_in) and save it
 * there (path NULL: calibrate only). row_max, inline_max: cm_model's.
 * Before cm_init, cm_ready() is 0 and the router keeps its size rule. */
int cm_init(const char *path, const char *dir, int threads, int64_t row_max,
            int64_t inline_max, terr *e);
int cm_ready(void);
/* Record a finished run (total ms on backend b), and every 16 records (at
 * most once a second; cm_shutdown writes the rest) rewrite the cache file
 * so that corrections survive a restart. */
void cm_observe(const kind_ops *k, const job_estimate *est, tbackend b, double ms);
int cm_choose(const kind_ops *k, const job_estimate *est, int gpu_ok,
              tbackend *chosen, char *reason, size_t len, json_t **estimates);
int cm_choose_text(const kind_ops *k, const job_estimate *est, int gpu_ok,
                   tbackend *chosen, char *reason, size_t len, tbuf *figs,
                   int digits);
/* A copy of the current model (tests, /v1/devices). */
void cm_get(cm_model *out);
void cm_shutdown(void);

#endif
