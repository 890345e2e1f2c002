/* router.h — pick the backend for a job submitted with backend "auto".
 *
 * One entry point. Once router_init has run (the scheduler calls it at
 * start with the data dir's calibration file), the choice comes from the
 * calibrated cost model (compute/sched/route/costmodel.h: measured rates of this
 * machine, corrected by recorded job timings through router_observe);
 * before that, and in tests that never call it, from the size rule over
 * the kind's work estimate (router.c).
 *
 * Threads: router_init once, before the workers start; router_choose and
 * router_observe from any thread (the cost model has its own lock).
 */
#ifndef TESSEL_SCHED_ROUTER_H
#define TESSEL_SCHED_ROUTER_H

#include <jansson.h>
#include <stddef.h>

#include "compute/kinds/kinds.h"
#include "util/buf.h"

/* Choose B_SERIAL, B_CPU or B_CUDA (B_CUDA only when gpu_available) for a
 * job of kind k with estimate est. reason (reason_len bytes) gets the why
 * in words, e.g. "small job (1000 elements): serial avoids thread
 * hand-off". *estimates (may be NULL: not wanted) gets a new JSON object
 * with the model's figures, owned by the caller. Returns 0; T_ENOMEM when
 * the JSON cannot be built (*chosen and reason are still set). */
int router_choose(const kind_ops *k, const job_estimate *est,
                  int gpu_available, tbackend *chosen, char *reason,
                  size_t reason_len, json_t **estimates);
/* The same, the figures written straight to text (the scheduler's path: no
 * JSON tree per job): the members of that object, without braces,
 * appended to *figs (may be NULL), reals with `digits` significant digits
 * (util/buf.h's tbuf_json_real). T_ENOMEM when figs is in its error state
 * afterwards. The size rule's figures hold no "work": the job's estimate
 * has it. */
int router_choose_text(const kind_ops *k, const job_estimate *est,
                       int gpu_available, tbackend *chosen, char *reason,
                       size_t reason_len, tbuf *figs, int digits);

/* Load the cost model from calibration_path (JSON) when it was measured
 * for this many threads and GPUs, else run the self-benchmark (its result
 * files in results_dir) and save it there. row_max, inline_max: where the
 * scheduler keeps results (sched.h's row_result_max, inline_result_max).
 * 0, or the calibration's error (the size rule stays in use). */
int router_init(const char *calibration_path, const char *results_dir,
                int threads, int64_t row_max, int64_t inline_max, terr *e);
/* A finished run of k on b (B_SERIAL, B_CPU, B_CUDA) took ms in total:
 * corrects later estimates for (kind, backend). */
void router_observe(const kind_ops *k, const job_estimate *est, tbackend b,
                    double ms);
/* Save the corrections; back to the size rule. */
void router_shutdown(void);

#endif
