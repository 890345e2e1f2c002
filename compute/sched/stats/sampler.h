/* compute/sched/stats/sampler.h — the daemon's load over time for /v1/stats and
 * /v1/stats/history (compute/sched/stats/sampler.c; what it answers is
 * declared in sched.h: sched_sample_now, sched_history).
 */
#ifndef TESSEL_SCHED_STATS_SAMPLER_H
#define TESSEL_SCHED_STATS_SAMPLER_H

#include "compute/sched/sched.h"

/* compute/sched/stats/sampler.c: the sampler thread (started by sched_create, stopped by
 * sched_destroy); a failed start leaves s->sampler NULL. */
typedef struct sched_sampler sched_sampler;
int sched_sampler_start(sched *s);
void sched_sampler_stop(sched *s);

#endif
