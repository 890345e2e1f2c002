/* costmodel.h — the router's calibrated cost model: how long a job would
 * take on each backend, from measured rates of this machine.
 *
 * A backend's time is fixed overheads + the larger of the pipelined stages
 * (bytes over measured copy rates, work over measured compute rates):
 *   serial  fixed + max(work / VM rate, input bytes / read rate)
 *           + output bytes / first-touch rate (one thread's rates; the
 *           byte terms only for data beyond the caches, 32 MiB)
 *   cpu     the same with all threads' rates
 *   cuda    fixed + max(PCIe in, PCIe out, host staging, on-device time)
 *           + one chunk's latency (the pipeline's fill and drain); host
 *           staging = input bytes / copy rate + output bytes / first-touch
 *           rate, at the staging gang's share of the threads
 * where work is the kind's unit (map/reduce: VM instructions; matmul:
 * flops; geodesic: pairs). The rates come from a self-benchmark of a few
 * tens of milliseconds at start (calibrate.c: the expression VM on one and
 * on all threads, host copy rate, OpenBLAS dgemm; on a GPU the pinned and
 * pageable PCIe rates, device copy rate, launch cost and cuBLAS dgemm),
 * cached as JSON in the data dir so a restart does not measure again.
 * Recorded job timings correct it: per (kind, backend) an exponential
 * moving average of measured / estimated multiplies later estimates.
 *
 * Threads: cm_init once at start; cm_choose / cm_estimate / cm_observe from
 * any thread (one mutex guards the rates and the corrections).
 */
#ifndef TESSEL_SCHED_COSTMODEL_H
#define TESSEL_SCHED_COSTMODEL_H

#include <jansson.h>
#include <stddef.h>

#include "kinds/kinds.h"
#include "util/err.h"

typedef struct cm_rates {
  int threads;          /* CPU pool width the cpu figures are for */
  double vm_ops_1;      /* expression VM instructions/s, one thread */
  double vm_ops_n;      /* ... all `threads` threads together */
  double copy_n;        /* host memcpy bytes/s, all threads (GPU staging) */
  double stream_1, stream_n; /* host read bytes/s: one thread, all threads */
  double fault_1, fault_n;   /* first writes to fresh memory (page faults
                              * included), bytes/s: one thread, all */
  int gang;             /* host threads that stage a GPU job's copies */
  double gemm_1;        /* OpenBLAS dgemm flops/s, one thread */
  double serial_fixed_s, cpu_fixed_s;
  int gpus;             /* usable GPUs when measured (0: no cuda figures) */
  double h2d, d2h;      /* pinned PCIe bytes/s */
  double h2d_pageable, d2h_pageable;
  double dev_bw;        /* device copy bytes/s, read + write */
  double gpu_flops;     /* cuBLAS dgemm flops/s */
  double gpu_ops;       /* fused-kernel operations/s (nominal, corrected) */
  double gpu_fixed_s;   /* launch + synchronise + job set-up */
  double chunk_bytes;   /* bytes per pipeline chunk (latency term) */
} cm_rates;

/* Correction factors, one per kind and backend (B_SERIAL..B_CUDA). */
#define CM_ALPHA 0.2 /* weight of a new observation in the average */
typedef struct cm_model {
  cm_rates r;
  double corr[K__COUNT][B__COUNT];
  int nobs[K__COUNT][B__COUNT];
} cm_model;

/* ---- pure model (no global state) -------------------------------------- */
void cm_model_init(cm_model *m, const cm_rates *r);
/* Estimated ms of the job on b (B_SERIAL, B_CPU or B_CUDA), corrected. */
double cm_model_ms(const cm_model *m, tkind kind, const job_estimate *est,
                   tbackend b);
/* Fold a measured run into the correction of (kind, b). */
void cm_model_observe(cm_model *m, tkind kind, const job_estimate *est,
                      tbackend b, double measured_ms);
/* The fastest of serial, cpu and (when gpu_ok) cuda; reason gets
 * "estimate cuda 12 ms, cpu 840 ms, serial 1600 ms"; *estimates (may be
 * NULL) a new object with every figure. */
int cm_model_choose(const cm_model *m, tkind kind, const job_estimate *est,
                    int gpu_ok, tbackend *chosen, char *reason, size_t len,
                    json_t **estimates);
/* JSON form (rates and corrections) and back. cm_model_from_json fails
 * with T_EINVAL when a rate is missing or not a positive number. */
json_t *cm_model_to_json(const cm_model *m);
int cm_model_from_json(const json_t *j, cm_model *m, terr *e);

/* ---- calibrate.c ------------------------------------------------------- */
/* Measure this machine (threads: the CPU pool's width). GPU figures when
 * gpu_count() > 0. A few tens of milliseconds. */
int cm_calibrate(cm_rates *r, int threads, terr *e);

/* ---- the process-wide model (the router's) ----------------------------- */
/* Load the model from `path` when it was measured for the same threads and
 * GPU count, else calibrate and save it there (path NULL: calibrate only).
 * Before cm_init, cm_ready() is 0 and the router keeps its size rule. */
int cm_init(const char *path, int threads, terr *e);
int cm_ready(void);
/* Record a finished run (total ms on backend b), and every 16 records
 * rewrite the cache file so that corrections survive a restart. */
void cm_observe(tkind kind, const job_estimate *est, tbackend b, double ms);
int cm_choose(tkind kind, const job_estimate *est, int gpu_ok,
              tbackend *chosen, char *reason, size_t len, json_t **estimates);
/* A copy of the current model (tests, /v1/devices). */
void cm_get(cm_model *out);
void cm_shutdown(void);

#endif
