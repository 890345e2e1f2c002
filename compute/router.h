/* router.h — pick the backend for a job submitted with backend "auto".
 *
 * One entry point, so that the cost model behind it can be replaced (the
 * GPU work brings a calibrated one) without touching the scheduler. Today
 * it is a size rule over the kind's work estimate; see router.c.
 *
 * Threads: pure function of its arguments, callable from any thread.
 */
#ifndef TESSEL_COMPUTE_ROUTER_H
#define TESSEL_COMPUTE_ROUTER_H

#include <jansson.h>
#include <stddef.h>

#include "compute/kinds.h"

/* Choose B_SERIAL, B_CPU or B_CUDA (B_CUDA only when gpu_available) for a
 * job of kind k with estimate est. reason (reason_len bytes) gets the why
 * in words, e.g. "small job (1000 elements): serial avoids thread
 * hand-off". *estimates (may be NULL: not wanted) gets a new JSON object
 * with the model's figures, owned by the caller. Returns 0; T_ENOMEM when
 * the JSON cannot be built (*chosen and reason are still set). */
int router_choose(const kind_ops *k, const job_estimate *est,
                  int gpu_available, tbackend *chosen, char *reason,
                  size_t reason_len, json_t **estimates);

#endif
