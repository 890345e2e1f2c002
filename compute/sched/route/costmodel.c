/* costmodel.c — the cost model's arithmetic, its corrections from recorded
 * timings, its JSON cache, and the process-wide instance the router uses.
 * The measuring is in calibrate.c; the formulas are in costmodel.h.
 *
 * Threads: cm_model_* are pure (the caller owns the model). The global
 * model g_model is guarded by g_mu; the file is written under g_mu too,
 * to a temporary name then renamed.
 */
#include "compute/sched/route/costmodel.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/array/tarray.h"
#include "compute/gpu/gpu.h"
#include "util/buf.h"
#include "util/util.h"

/* Below this many bytes a job's data stays in the caches, and results come
 * from heap memory that malloc reuses (glibc maps allocations above 32 MiB
 * afresh, and those pay page faults on their first writes). */
#define CM_CACHE_BYTES (32.0 * 1024 * 1024)
#define CM_CORR_MIN 0.05
#define CM_CORR_MAX 20.0

static const char *bname(tbackend b) {
  return b == B_SERIAL || b == B_CPU || b == B_CUDA ? tbackend_name(b) : "?";
}

void cm_model_init(cm_model *m, const cm_rates *r) {
  memset(m, 0, sizeof *m);
  m->r = *r;
  m->inline_max = 16 << 20;
  for (int k = 0; k < KIND_MAX; k++)
    for (int b = 0; b < B__COUNT; b++) m->corr[k][b] = 1.0;
}

/* The slot of the kind in the table that owns the rate `name`, and the
 * rate's index in that kind's list; -1 when none does. */
static int rate_slot(const char *name, int *index) {
  for (int k = 0; k < kind_count(); k++) {
    const kind_cost *c = kind_at(k)->cost;
    for (int i = 0; c && i < c->nrates; i++)
      if (strcmp(c->rates[i].name, name) == 0) {
        *index = i;
        return k;
      }
  }
  return -1;
}

double cm_rate_get(const cm_rates *r, const char *name) {
  int i, k = rate_slot(name, &i);
  return k < 0 ? 0 : r->kind_rate[k][i];
}

int cm_rate_set(cm_rates *r, const char *name, double v) {
  int i, k = rate_slot(name, &i);
  if (k < 0) return -1;
  r->kind_rate[k][i] = v;
  return 0;
}

static double pos(double x) { return x > 0 && isfinite(x) ? x : 0; }
static double rate(double x) { return x > 0 && isfinite(x) ? x : 1e-30; }
/* A kind's term: NaN or negative is 0, "forever" stays infinite. */
static double term(double x) { return x > 0 ? x : 0; }
/* A file's rate with several writers: never above one thread's (they
 * queue on the inode lock; a measured "all" above it is noise). */
static double capped(double one, double all) {
  return all > 0 && all < one ? all : one;
}
/* A rate measured on one thread (r1) and on all `threads` (rn), for t
 * threads: in between in proportion. */
static double at_threads(double r1, double rn, int t, int threads) {
  if (t <= 1 || threads <= 1) return r1;
  if (t >= threads) return rn;
  return r1 + (rn - r1) * (t - 1) / (threads - 1);
}

/* The input bytes read from files and from heap memory; for cuda, the
 * bytes resident on a device are left out of both (and of h2d). */
static void input_bytes(const job_estimate *est, int cuda, double *file,
                        double *heap, double *resident) {
  double listed = 0;
  *file = *heap = *resident = 0;
  int n = est->ninputs < JOB_EST_INPUTS ? est->ninputs : JOB_EST_INPUTS;
  for (int i = 0; i < n; i++) {
    double b = pos((double)est->inputs[i].bytes);
    listed += b;
    if (cuda && est->inputs[i].resident)
      *resident += b;
    else if (est->inputs[i].from_file)
      *file += b;
    else
      *heap += b;
  }
  double rest = pos((double)est->in_bytes) - listed;
  if (rest > 0) *heap += rest;
}

/* How the result is kept: in the row, heap + npy_write, a sink (pwrite
 * from the pool's threads: a KIND_COST_SINK kind) or a fresh shared
 * mapping (compute/sched/run.c). */
typedef enum { KEEP_ROW, KEEP_HEAP, KEEP_SINK, KEEP_MAPPED } keep_way;
static keep_way keep_of(const cm_model *m, const kind_cost *c, tbackend b,
                        double out) {
  if (m->row_max > 0 && out + NPY_HEADER_MAX <= (double)m->row_max)
    return KEEP_ROW;
  if ((c->flags & KIND_COST_SINK) && (b != B_CUDA || kind_gpu_sink(out)))
    return KEEP_SINK; /* cuda: written from the slots below a size */
  if (b != B_CUDA && out <= (double)m->inline_max) return KEEP_HEAP;
  return KEEP_MAPPED;
}

/* What the kind's terms see of the machine (its rates: k's slot's, none
 * for a kind not in the table). */
static kind_machine machine_of(const cm_model *m, const kind_ops *k) {
  static const double none[KIND_RATES];
  const cm_rates *r = &m->r;
  int threads = r->threads > 0 ? r->threads : 1;
  int slot = kind_slot(k);
  double eff = r->vm_ops_n / rate(r->vm_ops_1 * threads);
  return (kind_machine){
      .threads = threads,
      .vm_1 = r->vm_ops_1,
      .vm_n = r->vm_ops_n,
      .par_eff = eff > 1 ? 1 : eff,
      .gpu_ops = r->gpus > 0 ? r->gpu_ops : 0,
      .dev_bw = r->dev_bw,
      .rate = slot >= 0 ? r->kind_rate[slot] : none,
  };
}

void cm_model_parts(const cm_model *m, const kind_ops *k,
                    const job_estimate *est, tbackend b, cm_parts *p) {
  const cm_rates *r = &m->r;
  const kind_cost *c = kind_cost_of(k);
  kind_machine km = machine_of(m, k);
  memset(p, 0, sizeof *p);
  double out = pos((double)est->out_bytes);
  double fin, hin, res;
  int threads = km.threads;
  input_bytes(est, b == B_CUDA, &fin, &hin, &res);
  double in = fin + hin;
  keep_way keep = keep_of(m, c, b, out);
  /* The store term: one thread's rate for serial; "all" capped by one
   * thread's for the pool and the GPU's staging gang. */
  int one = b == B_SERIAL;
  if (keep != KEEP_ROW) {
    double w = keep == KEEP_SINK
                   ? (one ? r->write_1 : capped(r->write_1, r->write_n))
               : keep == KEEP_HEAP
                   ? r->write_1
                   : b == B_CUDA ? (r->mwrite_pf > r->mwrite_n ? r->mwrite_pf
                                                              : r->mwrite_n)
                   : (one ? r->mwrite_1 : capped(r->mwrite_1, r->mwrite_n));
    p->store = pos(r->file_fixed_s) + out / rate(w);
  }
  switch (b) {
    case B_SERIAL:
    case B_CPU: {
      p->compute = term(c->cpu_s(est, !one, &km));
      /* mapped inputs fault whatever their size; heap ones cost beyond
       * the caches, unless the kind reads them inside its compute rate
       * (matmul re-reads its panels from cache: KIND_COST_HEAP_IN_RATE) */
      p->read = fin / rate(one ? r->map_read_1 : r->map_read_n);
      if (!(c->flags & KIND_COST_HEAP_IN_RATE) && in + out > CM_CACHE_BYTES)
        p->read += hin / rate(one ? r->stream_1 : r->stream_n);
      p->fixed =
          pos(r->job_fixed_s) + (one ? r->serial_fixed_s : r->cpu_fixed_s);
      if (!one && keep == KEEP_SINK)
        p->total = p->fixed + fmax(fmax(p->compute, p->read), p->store);
      else
        p->total = p->fixed + fmax(p->compute, p->read) + p->store;
      return;
    }
    case B_CUDA: {
      if (r->gpus <= 0) {
        p->total = INFINITY;
        return;
      }
      double dev = term(c->gpu_s(est, in + res + out, out, &km));
      p->compute = dev;
      int gang = r->gang > 0 ? r->gang : 1;
      double share = (double)gang / threads;
      if (share > 1) share = 1;
      /* the gang's host side: mapped inputs read at the gang's width,
       * heap ones copied into the pinned slots */
      p->read =
          fin / rate(at_threads(r->map_read_1, r->map_read_n, gang, threads)) +
          hin / rate(r->copy_n * share);
      if (keep == KEEP_ROW) /* a small result: still copied out of a slot */
        p->store = out / rate(r->copy_n * share);
      p->h2d = in / rate(r->h2d);
      p->d2h = out / rate(r->d2h);
      p->fixed = pos(r->job_fixed_s) + r->gpu_fixed_s;
      if (c->flags & KIND_COST_GPU_PHASED) { /* in, compute, then out */
        p->total =
            p->fixed + fmax(p->h2d, p->read) + dev + fmax(p->d2h, p->store);
        return;
      }
      double chunk = fmin(in + out, r->chunk_bytes);
      double latency = chunk / rate(fmin(r->h2d, r->copy_n * share));
      p->total = p->fixed +
                 fmax(fmax(p->h2d, p->d2h), fmax(p->read + p->store, dev)) +
                 latency;
      return;
    }
    default:
      p->total = INFINITY;
      return;
  }
}

/* The uncorrected model, in seconds. */
static double raw_s(const cm_model *m, const kind_ops *k,
                    const job_estimate *est, tbackend b) {
  cm_parts p;
  cm_model_parts(m, k, est, b, &p);
  return p.total;
}

/* k's correction on b: 1 for a kind not in the table. */
static double corr_of(const cm_model *m, const kind_ops *k, tbackend b) {
  int slot = kind_slot(k);
  return slot >= 0 ? m->corr[slot][b] : 1.0;
}

double cm_model_ms(const cm_model *m, const kind_ops *k,
                   const job_estimate *est, tbackend b) {
  if ((unsigned)b >= B__COUNT) return INFINITY;
  return raw_s(m, k, est, b) * 1e3 * corr_of(m, k, b);
}

void cm_model_observe(cm_model *m, const kind_ops *k, const job_estimate *est,
                      tbackend b, double measured_ms) {
  int kind = kind_slot(k);
  if (kind < 0 || (b != B_SERIAL && b != B_CPU && b != B_CUDA)) return;
  double raw = raw_s(m, k, est, b) * 1e3;
  if (!(raw > 0) || !isfinite(raw) || !(measured_ms > 0)) return;
  double ratio = measured_ms / raw;
  if (ratio < CM_CORR_MIN) ratio = CM_CORR_MIN;
  if (ratio > CM_CORR_MAX) ratio = CM_CORR_MAX;
  /* In log space, so that 2x too slow and 2x too fast weigh the same. */
  double c = m->corr[kind][b];
  c = exp((1 - CM_ALPHA) * log(c) + CM_ALPHA * log(ratio));
  m->corr[kind][b] = c;
  m->nobs[kind][b]++;
}

/* ms with `dec` decimals as "%.*f" writes it, into buf (32 bytes) without
 * printf when the value is in range and not within a hair of a tie
 * (printf rounds the exact binary value half to even): 1, else 0. */
static int fixed_ms(char *buf, double ms, int dec) {
  static const double p10[] = {1, 10, 100};
  double x = ms * p10[dec];
  if (!(ms >= 0) || x >= 1e9) return 0; /* x exact to well under 1e-6 */
  double fl = floor(x), fr = x - fl;
  if (fabs(fr - 0.5) < 1e-6) return 0;
  long long d = (long long)fl + (fr > 0.5);
  char dig[24];
  size_t n = t_fmt_int(dig, d), o = 0;
  if (dec == 0) {
    memcpy(buf, dig, n);
    o = n;
  } else {
    size_t whole = n > (size_t)dec ? n - (size_t)dec : 0;
    if (whole == 0) buf[o++] = '0';
    else memcpy(buf, dig, whole), o = whole;
    buf[o++] = '.';
    for (size_t z = n; z < (size_t)dec; z++) buf[o++] = '0';
    memcpy(buf + o, dig + whole, n - whole);
    o += n - whole;
  }
  memcpy(buf + o, " ms", 4);
  return 1;
}

static void fmt_ms(char *buf, size_t len, double ms) {
  int dec = ms < 1 ? 2 : ms < 100 ? 1 : 0;
  if (len >= 32 && isfinite(ms) && fixed_ms(buf, ms, dec)) return;
  if (!isfinite(ms))
    snprintf(buf, len, "n/a");
  else if (ms < 1)
    snprintf(buf, len, "%.2f ms", ms);
  else if (ms < 100)
    snprintf(buf, len, "%.1f ms", ms);
  else
    snprintf(buf, len, "%.0f ms", ms);
}

/* append's "%s" without printf: s cut to what is left, terminated. */
static void append_str(char *buf, size_t len, size_t *off, const char *s) {
  if (*off >= len) return;
  t_scopy(buf + *off, len - *off, s);
  *off += strlen(buf + *off);
}

static void append(char *buf, size_t len, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, size_t *off, const char *fmt, ...) {
  if (*off >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *off, len - *off, fmt, ap);
  va_end(ap);
  if (n > 0) *off += (size_t)n < len - *off ? (size_t)n : len - *off - 1;
}

/* "key": before a member of the figures' text, with the comma before all
 * but the first (the keys here need no escaping). */
static void fig_key(tbuf *b, const char *k, int *first) {
  if (!*first) tbuf_add(b, ",", 1);
  *first = 0;
  tbuf_add(b, "\"", 1);
  tbuf_adds(b, k);
  tbuf_add(b, "\":", 2);
}

/* A real member; none for a non-finite value (jansson's json_real gave no
 * value for it, so the key was left out). */
static void fig_real(tbuf *b, const char *k, double v, int digits,
                     int *first) {
  if (!isfinite(v)) return;
  fig_key(b, k, first);
  tbuf_json_real(b, v, digits);
}

/* The figures as the members of a JSON object, written straight to text
 * (a jansson tree built and walked for each job was ~40k instructions of
 * a tiny job's ~350k: tests/bench/README.md). */
static void fig_text(tbuf *b, const cm_model *m, const kind_ops *k,
                     const job_estimate *est, const double *ms,
                     tbackend best, int digits) {
  static const tbackend order[3] = {B_CUDA, B_CPU, B_SERIAL};
  int first = 1;
  fig_key(b, "model", &first);
  tbuf_add(b, "\"calibrated\"", 12);
  fig_real(b, "serial_ms", ms[B_SERIAL], digits, &first);
  fig_real(b, "cpu_ms", ms[B_CPU], digits, &first);
  fig_key(b, "cuda_ms", &first);
  if (isfinite(ms[B_CUDA])) tbuf_json_real(b, ms[B_CUDA], digits);
  else tbuf_add(b, "null", 4);
  fig_key(b, "choice", &first);
  tbuf_json_str(b, bname(best));
  fig_key(b, "corrections", &first);
  int f2 = 1;
  tbuf_add(b, "{", 1);
  fig_real(b, "serial", corr_of(m, k, B_SERIAL), digits, &f2);
  fig_real(b, "cpu", corr_of(m, k, B_CPU), digits, &f2);
  fig_real(b, "cuda", corr_of(m, k, B_CUDA), digits, &f2);
  tbuf_add(b, "}", 1);
  fig_key(b, "parts_ms", &first);
  tbuf_add(b, "{", 1);
  f2 = 1;
  for (int i = 2; i >= 0; i--) {
    if (!isfinite(ms[order[i]])) continue;
    cm_parts p;
    cm_model_parts(m, k, est, order[i], &p);
    int f3 = 1, gpu = order[i] == B_CUDA;
    fig_key(b, bname(order[i]), &f2);
    tbuf_add(b, "{", 1);
    fig_real(b, "fixed", p.fixed * 1e3, digits, &f3);
    fig_real(b, "read", p.read * 1e3, digits, &f3);
    if (gpu) fig_real(b, "h2d", p.h2d * 1e3, digits, &f3);
    fig_real(b, "compute", p.compute * 1e3, digits, &f3);
    if (gpu) fig_real(b, "d2h", p.d2h * 1e3, digits, &f3);
    fig_real(b, "store", p.store * 1e3, digits, &f3);
    tbuf_add(b, "}", 1);
  }
  tbuf_add(b, "}", 1);
}

int cm_model_choose_text(const cm_model *m, const kind_ops *k,
                         const job_estimate *est, int gpu_ok,
                         tbackend *chosen, char *reason, size_t len,
                         tbuf *figs, int digits) {
  static const tbackend order[3] = {B_CUDA, B_CPU, B_SERIAL};
  double ms[B__COUNT];
  for (int b = 0; b < B__COUNT; b++) ms[b] = INFINITY;
  ms[B_SERIAL] = cm_model_ms(m, k, est, B_SERIAL);
  ms[B_CPU] = cm_model_ms(m, k, est, B_CPU);
  if (gpu_ok && m->r.gpus > 0) ms[B_CUDA] = cm_model_ms(m, k, est, B_CUDA);
  tbackend best = B_SERIAL;
  for (int i = 0; i < 3; i++)
    if (ms[order[i]] < ms[best]) best = order[i];
  *chosen = best;
  /* "estimate cuda 12 ms, cpu 840 ms, serial 1600 ms", chosen first. */
  char num[32];
  size_t l = 0;
  fmt_ms(num, sizeof num, ms[best]);
  append_str(reason, len, &l, "estimate ");
  append_str(reason, len, &l, bname(best));
  append_str(reason, len, &l, " ");
  append_str(reason, len, &l, num);
  for (int i = 0; i < 3; i++) {
    if (order[i] == best || !isfinite(ms[order[i]])) continue;
    fmt_ms(num, sizeof num, ms[order[i]]);
    append_str(reason, len, &l, ", ");
    append_str(reason, len, &l, bname(order[i]));
    append_str(reason, len, &l, " ");
    append_str(reason, len, &l, num);
  }
  if (!gpu_ok) append_str(reason, len, &l, "; no usable GPU");
  if (figs) fig_text(figs, m, k, est, ms, best, digits);
  return figs && figs->err ? T_ENOMEM : T_OK;
}

json_t *cm_figures_json(tbuf *b) {
  tbuf o;
  tbuf_init(&o, 0);
  tbuf_add(&o, "{", 1);
  tbuf_add(&o, b->p ? b->p : "", b->len);
  tbuf_add(&o, "}", 1);
  tbuf_free(b);
  size_t n;
  char *text = tbuf_take(&o, &n);
  json_t *j = text ? json_loadb(text, n, 0, NULL) : NULL;
  free(text);
  return j;
}

int cm_model_choose(const cm_model *m, const kind_ops *k,
                    const job_estimate *est, int gpu_ok, tbackend *chosen,
                    char *reason, size_t len, json_t **estimates) {
  tbuf b;
  tbuf_init(&b, 0);
  int rc = cm_model_choose_text(m, k, est, gpu_ok, chosen, reason, len,
                                estimates ? &b : NULL, 0);
  if (!estimates) return rc;
  *estimates = cm_figures_json(&b);
  return *estimates ? T_OK : T_ENOMEM;
}

/* ---- JSON -------------------------------------------------------------- */

#define CM_FIELDS(X)                                                        \
  X(vm_ops_1) X(vm_ops_n) X(copy_n) X(stream_1) X(stream_n) X(fault_1)      \
  X(fault_n) X(serial_fixed_s) X(cpu_fixed_s) X(write_1)          \
  X(write_n) X(map_read_1) X(map_read_n) X(mwrite_1) X(mwrite_n)          \
  X(mwrite_pf) X(file_fixed_s) X(job_fixed_s)
#define CM_GPU_FIELDS(X)                                                    \
  X(h2d) X(d2h) X(h2d_pageable) X(d2h_pageable) X(dev_bw) X(gpu_ops)        \
  X(gpu_fixed_s) X(chunk_bytes)

json_t *cm_model_to_json(const cm_model *m) {
  json_t *o = json_object(), *r = json_object(), *c = json_object();
  json_object_set_new(r, "threads", json_integer(m->r.threads));
  json_object_set_new(r, "gpus", json_integer(m->r.gpus));
  json_object_set_new(r, "gang", json_integer(m->r.gang));
#define PUT(f) json_object_set_new(r, #f, json_real(m->r.f));
  CM_FIELDS(PUT)
  CM_GPU_FIELDS(PUT)
#undef PUT
  for (int k = 0; k < kind_count(); k++) {
    const kind_cost *kc = kind_at(k)->cost;
    for (int i = 0; kc && i < kc->nrates; i++)
      if (!kc->rates[i].gpu || m->r.gpus > 0)
        json_object_set_new(r, kc->rates[i].name,
                            json_real(m->r.kind_rate[k][i]));
  }
  for (int k = 0; k < kind_count(); k++) {
    json_t *kb = json_object();
    for (int b = B_SERIAL; b <= B_CUDA; b++)
      json_object_set_new(kb, bname((tbackend)b),
                          json_pack("{s:f, s:i}", "factor", m->corr[k][b],
                                    "observations", m->nobs[k][b]));
    json_object_set_new(c, kind_at(k)->name, kb);
  }
  json_object_set_new(o, "version", json_integer(4));
  json_object_set_new(o, "rates", r);
  json_object_set_new(o, "corrections", c);
  return o;
}

int cm_model_from_json(const json_t *j, cm_model *m, terr *e) {
  cm_rates r;
  memset(&r, 0, sizeof r);
  const json_t *rj = json_object_get(j, "rates");
  /* Version 3 added the file rates (submit -> stored), 4 the prefaulted
   * mapping rate (GPU results): an older cache is measured again. */
  if (!json_is_object(rj) ||
      json_integer_value(json_object_get(j, "version")) != 4)
    return terr_set(e, T_EINVAL, "calibration", -1, "not a version 4 model");
  r.threads = (int)json_integer_value(json_object_get(rj, "threads"));
  r.gpus = (int)json_integer_value(json_object_get(rj, "gpus"));
  r.gang = (int)json_integer_value(json_object_get(rj, "gang"));
#define GET(f)                                                              \
  r.f = json_number_value(json_object_get(rj, #f));                         \
  if (!(r.f > 0) || !isfinite(r.f))                                         \
    return terr_set(e, T_EINVAL, "calibration.rates." #f, -1,               \
                    "missing or not a positive number");
  CM_FIELDS(GET)
  if (r.gpus > 0) {
    CM_GPU_FIELDS(GET)
  }
#undef GET
  for (int k = 0; k < kind_count(); k++) {
    const kind_cost *kc = kind_at(k)->cost;
    for (int i = 0; kc && i < kc->nrates; i++) {
      if (kc->rates[i].gpu && r.gpus <= 0) continue;
      const char *n = kc->rates[i].name;
      double v = json_number_value(json_object_get(rj, n));
      if (!(v > 0) || !isfinite(v))
        return terr_set(e, T_EINVAL, "calibration.rates", -1,
                        "%s: missing or not a positive number", n);
      r.kind_rate[k][i] = v;
    }
  }
  if (r.threads < 1)
    return terr_set(e, T_EINVAL, "calibration.rates.threads", -1, "below 1");
  cm_model_init(m, &r);
  const json_t *cj = json_object_get(j, "corrections");
  for (int k = 0; k < kind_count() && json_is_object(cj); k++) {
    const json_t *kb = json_object_get(cj, kind_at(k)->name);
    for (int b = B_SERIAL; b <= B_CUDA && kb; b++) {
      const json_t *x = json_object_get(kb, bname((tbackend)b));
      double f = json_number_value(json_object_get(x, "factor"));
      if (f >= CM_CORR_MIN && f <= CM_CORR_MAX) m->corr[k][b] = f;
      m->nobs[k][b] = (int)json_integer_value(json_object_get(x, "observations"));
    }
  }
  return 0;
}

/* ---- the process-wide model -------------------------------------------- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cm_model g_model;
static int g_ready, g_since_save;
static double g_saved_ms; /* t_now_ms of the last save */
/* Rewriting the file (a new inode, a rename) costs tens of microseconds
 * under g_mu, which every worker's observation takes: at thousands of tiny
 * jobs a second, "every 16 observations" alone was a tenth of the daemon's
 * CPU (issue 26's profile). At most once a second, then; cm_shutdown
 * saves the rest. */
#define CM_SAVE_MIN_MS 1000.0
static char g_path[1024];

static void save_locked(void) {
  if (!g_path[0]) return;
  json_t *j = cm_model_to_json(&g_model);
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", g_path, (long)getpid());
  if (j && json_dump_file(j, tmp, JSON_INDENT(2)) == 0) {
    if (rename(tmp, g_path) != 0) unlink(tmp);
  } else {
    unlink(tmp); /* a partial file (a full disk) */
    log_warn("router: cannot write %s", tmp);
  }
  json_decref(j);
  g_since_save = 0;
  g_saved_ms = t_now_ms();
}

/* "router: the kinds' rates: matmul gemm_1 3.1e+10, ..." (none: no line). */
static void log_kind_rates(const cm_rates *r) {
  char buf[512];
  size_t l = 0;
  buf[0] = 0;
  for (int k = 0; k < kind_count(); k++) {
    const kind_cost *kc = kind_at(k)->cost;
    for (int i = 0; kc && i < kc->nrates; i++)
      if (!kc->rates[i].gpu || r->gpus > 0)
        append(buf, sizeof buf, &l, "%s%s %s %.2g", l ? ", " : "",
               kind_at(k)->name, kc->rates[i].name, r->kind_rate[k][i]);
  }
  if (l) log_info("router: the kinds' rates: %s", buf);
}

int cm_init(const char *path, const char *dir, int threads, int64_t row_max,
            int64_t inline_max, terr *e) {
  cm_model m;
  int loaded = 0;
  if (path && path[0]) {
    json_error_t jerr;
    json_t *j = json_load_file(path, 0, &jerr);
    terr le;
    terr_clear(&le);
    if (j && cm_model_from_json(j, &m, &le) == 0 && m.r.threads == threads &&
        m.r.gpus == gpu_count())
      loaded = 1;
    else if (j)
      log_info("router: recalibrating (%s)",
               le.message[0] ? le.message : "threads or GPUs changed");
    json_decref(j);
  }
  if (!loaded) {
    cm_rates r;
    double t0 = t_now_ms();
    int rc = cm_calibrate_in(&r, threads, dir, e);
    if (rc) return rc;
    cm_model_init(&m, &r);
    log_info(
        "router: calibrated in %.0f ms: VM %.2g ops/s (1 thread), %.2g "
        "(%d); result files: pwrite %.2g B/s (1), %.2g (%d), mapped "
        "writes %.2g (1), %.2g (%d), prefaulted %.2g (%d), %.2g ms a file; "
        "mapped inputs "
        "read %.2g B/s (1), %.2g (%d); %d GPU(s)%s",
        t_now_ms() - t0, r.vm_ops_1, r.vm_ops_n, threads, r.write_1, r.write_n,
        threads, r.mwrite_1, r.mwrite_n, threads, r.mwrite_pf, threads,
        r.file_fixed_s * 1e3,
        r.map_read_1, r.map_read_n, threads, r.gpus,
        r.gpus ? "" : " (cpu only)");
    if (r.gpus)
      log_info(
          "router: GPU 0: h2d %.2g B/s, d2h %.2g B/s (pinned), device "
          "%.2g B/s, launch %.2g ms, staging gang %d",
          r.h2d, r.d2h, r.dev_bw, r.gpu_fixed_s * 1e3, r.gang);
    log_kind_rates(&r);
  }
  m.row_max = row_max > 0 ? row_max : 0;
  if (inline_max > 0) m.inline_max = inline_max;
  pthread_mutex_lock(&g_mu);
  g_model = m;
  snprintf(g_path, sizeof g_path, "%s", path ? path : "");
  if (!loaded) save_locked();
  g_ready = 1;
  pthread_mutex_unlock(&g_mu);
  return 0;
}

int cm_ready(void) {
  pthread_mutex_lock(&g_mu);
  int r = g_ready;
  pthread_mutex_unlock(&g_mu);
  return r;
}

void cm_observe(const kind_ops *k, const job_estimate *est, tbackend b,
                double ms) {
  pthread_mutex_lock(&g_mu);
  if (g_ready) {
    cm_model_observe(&g_model, k, est, b, ms);
    if (++g_since_save >= 16 && t_now_ms() - g_saved_ms >= CM_SAVE_MIN_MS)
      save_locked();
  }
  pthread_mutex_unlock(&g_mu);
}

int cm_choose_text(const kind_ops *k, const job_estimate *est, int gpu_ok,
                   tbackend *chosen, char *reason, size_t len, tbuf *figs,
                   int digits) {
  pthread_mutex_lock(&g_mu);
  cm_model m = g_model;
  pthread_mutex_unlock(&g_mu);
  return cm_model_choose_text(&m, k, est, gpu_ok, chosen, reason, len, figs,
                              digits);
}

int cm_choose(const kind_ops *k, const job_estimate *est, int gpu_ok,
              tbackend *chosen, char *reason, size_t len, json_t **estimates) {
  tbuf b;
  tbuf_init(&b, 0);
  int rc = cm_choose_text(k, est, gpu_ok, chosen, reason, len,
                          estimates ? &b : NULL, 0);
  if (!estimates) return rc;
  *estimates = cm_figures_json(&b);
  return *estimates ? T_OK : T_ENOMEM;
}

void cm_get(cm_model *out) {
  pthread_mutex_lock(&g_mu);
  *out = g_model;
  pthread_mutex_unlock(&g_mu);
}

void cm_shutdown(void) {
  pthread_mutex_lock(&g_mu);
  if (g_ready && g_since_save) save_locked();
  g_ready = 0;
  pthread_mutex_unlock(&g_mu);
}
