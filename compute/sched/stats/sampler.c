/* compute/sched/stats/sampler.c — the daemon's load over time: a sampler thread and a
 * bounded ring of samples, for /v1/stats' `system` and /v1/stats/history.
 *
 * Every SCHED_SAMPLE_EVERY_MS the sampler thread reads the raw counters —
 * the process's CPU time (getrusage: user + system, all threads), the
 * machine's CPU ticks (the "cpu" line of /proc/stat: busy = all − idle −
 * iowait), the machine's memory (/proc/meminfo: used = MemTotal −
 * MemAvailable, the machine's and not this process's cgroup), the
 * process's resident set (/proc/self/statm) — and the scheduler's queue
 * depth and running jobs, and pushes one sched_sample into a ring of
 * SCHED_SAMPLES (the oldest is overwritten: 1440 × 5 s = 2 hours). The CPU
 * percentages are deltas between two readings: the process's CPU seconds
 * over wall seconds × 100 (above 100 when several threads run), the
 * machine's busy ticks over all ticks × 100 (0..100, all cores). The first
 * sample, taken at start, has no previous reading: its percentages are NaN.
 *
 * sched_sample_now answers a request without waiting: it reads the raw
 * counters now and takes the CPU deltas against the sampler's last reading
 * (at most SCHED_SAMPLE_EVERY_MS old); when that reading is less than
 * 200 ms old it gives the last sample's percentages instead.
 *
 * Threads: the sampler thread writes, request threads read; the ring and
 * the last reading are under sampler.mu, never held with sched.mu (the
 * sampler reads nqueued/nrunning under sched.mu first, then lets go).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "compute/sched/sched_int.h"
#include "compute/sched/stats/sampler.h"

/* The raw counters of one reading. */
typedef struct reading {
  double mono_ms;          /* t_now_ms */
  double proc_cpu_s;       /* process user + system seconds */
  uint64_t busy, total;    /* machine ticks; total 0: unreadable */
  int64_t mem_total, mem_avail, rss;
} reading;

struct sched_sampler {
  tmutex mu;
  pthread_cond_t cv; /* the thread sleeps on it (CLOCK_MONOTONIC) */
  pthread_t thread;
  int started, quit;           /* [mu] */
  reading last;                /* [mu] the thread's previous reading */
  sched_sample ring[SCHED_SAMPLES]; /* [mu] */
  int n, pos;                  /* [mu] samples held; next slot */
};

int sched_sample_parse_stat(const char *text, uint64_t *busy,
                            uint64_t *total) {
  *busy = *total = 0;
  if (!text || strncmp(text, "cpu ", 4) != 0) return -1;
  const char *p = text + 4;
  uint64_t v[10] = {0};
  int n = 0;
  while (n < 10) {
    char *end;
    unsigned long long x = strtoull(p, &end, 10);
    if (end == p) break;
    v[n++] = (uint64_t)x;
    p = end;
  }
  if (n < 4) return -1;
  /* user nice system idle iowait irq softirq steal (guest* are already in
   * user and nice: not added twice) */
  uint64_t all = 0;
  for (int i = 0; i < n && i < 8; i++) all += v[i];
  uint64_t idle = v[3] + (n > 4 ? v[4] : 0);
  *total = all;
  *busy = all - idle;
  return 0;
}

static void read_now(reading *r) {
  memset(r, 0, sizeof *r);
  r->mono_ms = t_now_ms();
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    r->proc_cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  char buf[8192];
  if (sched_read_small("/proc/stat", buf, sizeof buf) == 0)
    sched_sample_parse_stat(buf, &r->busy, &r->total);
  r->mem_total = r->mem_avail = r->rss = -1;
  if (sched_read_small("/proc/meminfo", buf, sizeof buf) == 0)
    sched_mem_parse_meminfo(buf, &r->mem_total, &r->mem_avail);
  unsigned long long vm, res;
  long page = sysconf(_SC_PAGESIZE);
  if (sched_read_small("/proc/self/statm", buf, sizeof buf) == 0 &&
      sscanf(buf, "%llu %llu", &vm, &res) == 2 && page > 0)
    r->rss = (int64_t)res * page;
}

/* The sample of reading `now` against `prev` (prev NULL: no deltas). */
static void fill(sched_sample *out, const reading *now, const reading *prev) {
  out->t_wall_ms = t_wall_ms();
  out->cpu_percent = out->machine_cpu_percent = NAN;
  if (prev) {
    double dt = (now->mono_ms - prev->mono_ms) / 1e3;
    if (dt > 0)
      out->cpu_percent = (now->proc_cpu_s - prev->proc_cpu_s) / dt * 100.0;
    if (now->total > prev->total && prev->total > 0 && now->busy >= prev->busy)
      out->machine_cpu_percent = (double)(now->busy - prev->busy) /
                                 (double)(now->total - prev->total) * 100.0;
  }
  out->memory_total = now->mem_total;
  out->memory_used = now->mem_total >= 0 && now->mem_avail >= 0
                         ? now->mem_total - now->mem_avail : -1;
  out->process_rss = now->rss;
}

static void counts(sched *s, sched_sample *out) {
  tmutex_lock(&s->mu);
  out->queued = s->nqueued;
  out->running = s->nrunning;
  tmutex_unlock(&s->mu);
}

static void take(sched *s, sched_sampler *sp, int first) {
  reading now;
  read_now(&now);
  sched_sample smp;
  counts(s, &smp);
  tmutex_lock(&sp->mu);
  fill(&smp, &now, first ? NULL : &sp->last);
  sp->last = now;
  sp->ring[sp->pos] = smp;
  sp->pos = (sp->pos + 1) % SCHED_SAMPLES;
  if (sp->n < SCHED_SAMPLES) sp->n++;
  tmutex_unlock(&sp->mu);
}

static void *sampler_main(void *arg) {
  sched *s = arg;
  sched_sampler *sp = s->sampler;
  tmutex_lock(&sp->mu);
  while (!sp->quit) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += SCHED_SAMPLE_EVERY_MS / 1000;
    tmutex_timedwait(&sp->cv, &sp->mu, &ts);
    if (sp->quit) break;
    tmutex_unlock(&sp->mu);
    take(s, sp, 0);
    tmutex_lock(&sp->mu);
  }
  tmutex_unlock(&sp->mu);
  return NULL;
}

int sched_sampler_start(sched *s) {
  sched_sampler *sp = calloc(1, sizeof *sp);
  if (!sp) return -1;
  tmutex_init(&sp->mu);
  pthread_condattr_t mono;
  pthread_condattr_init(&mono);
  pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
  pthread_cond_init(&sp->cv, &mono);
  pthread_condattr_destroy(&mono);
  s->sampler = sp;
  take(s, sp, 1);
  if (pthread_create(&sp->thread, NULL, sampler_main, s) != 0) {
    sched_sampler_stop(s);
    return -1;
  }
  sp->started = 1;
  return 0;
}

void sched_sampler_stop(sched *s) {
  sched_sampler *sp = s->sampler;
  if (!sp) return;
  if (sp->started) {
    tmutex_lock(&sp->mu);
    sp->quit = 1;
    pthread_cond_signal(&sp->cv);
    tmutex_unlock(&sp->mu);
    pthread_join(sp->thread, NULL);
  }
  pthread_cond_destroy(&sp->cv);
  tmutex_destroy(&sp->mu);
  free(sp);
  s->sampler = NULL;
}

int sched_sample_now(sched *s, sched_sample *out) {
  sched_sampler *sp = s->sampler;
  reading now;
  read_now(&now);
  sched_sample c;
  counts(s, &c);
  if (!sp) {
    fill(out, &now, NULL);
    out->queued = c.queued;
    out->running = c.running;
    return -1;
  }
  tmutex_lock(&sp->mu);
  if (now.mono_ms - sp->last.mono_ms >= 200) {
    fill(out, &now, &sp->last);
  } else {
    const sched_sample *lastsmp =
        &sp->ring[(sp->pos + SCHED_SAMPLES - 1) % SCHED_SAMPLES];
    fill(out, &now, NULL);
    out->cpu_percent = lastsmp->cpu_percent;
    out->machine_cpu_percent = lastsmp->machine_cpu_percent;
  }
  tmutex_unlock(&sp->mu);
  out->queued = c.queued;
  out->running = c.running;
  return 0;
}

int sched_samples(sched *s, int64_t since_wall_ms, sched_sample *out,
                  int cap) {
  sched_sampler *sp = s->sampler;
  if (!sp || cap <= 0) return 0;
  int k = 0;
  tmutex_lock(&sp->mu);
  int first = (sp->pos + SCHED_SAMPLES - sp->n) % SCHED_SAMPLES;
  for (int i = 0; i < sp->n && k < cap; i++) {
    const sched_sample *x = &sp->ring[(first + i) % SCHED_SAMPLES];
    if (x->t_wall_ms >= since_wall_ms) out[k++] = *x;
  }
  tmutex_unlock(&sp->mu);
  return k;
}
