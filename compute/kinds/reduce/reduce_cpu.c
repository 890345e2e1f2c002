/* reduce_cpu.c — reductions of an expression on the CPU, careful and
 * deterministic, with no full-size temporary.
 *
 * The expression is evaluated RED_EVAL values at a time with
 * expr_eval_f64 into a per-thread buffer and folded into accumulators:
 *   sum, mean   pairwise summation of each buffer (NumPy's scheme: 8
 *               accumulators up to 128 values, halves above), the buffer
 *               sums added with Neumaier's compensated summation
 *   norm        (scale, sum of squares) pairs as LAPACK's dnrm2, so that
 *               values near the overflow or underflow limits are fine
 *   var, std    two passes over each buffer (mean, then squared
 *               deviations, both pairwise), buffers merged with Chan's
 *               formula
 *   prod        running product; min/max/argmin/argmax a scan that keeps
 *               the first extreme and, like NumPy, the first NaN
 * Two layouts of the work:
 *   rows     the reduced elements of each output are contiguous (all
 *            elements, or the last axis): outputs are grouped into chunks
 *            of about RED_CHUNK elements; an output longer than that is cut
 *            into pieces whose partials are merged afterwards in order.
 *   columns  the reduced axis has something after it ([100, 10000] with
 *            axis 0): each chunk owns a block of output columns and walks
 *            the reduced axis, with per-column Kahan sums (Welford for
 *            var/std), reading whole rows of the expression at a time.
 * Chunk boundaries of the reduced data do not depend on the thread count
 * and partials merge in chunk order, so serial and cpu agree bit for bit.
 *
 * Threads: chunks run on pool threads; each writes its own outputs or its
 * own partial slot and uses its slot's scratch. Nothing is locked.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kinds/exprkind.h"
#include "compute/kinds/reduce/fold.h"
#include "util/pool.h"

#define RED_CHUNK 65536 /* reduced elements per chunk (rows layout) */
#define RED_EVAL 4096   /* values per expression evaluation */

/* ---- accumulators --------------------------------------------------------- */
typedef struct rpart {
  double s, c;        /* Neumaier sum and compensation */
  double scale, ssq;  /* norm: scale^2 * ssq */
  double prod;
  double val;         /* min/max; NaN once a NaN was seen */
  int64_t idx;        /* its index along the reduction; -1: none yet */
  double n, mean, m2; /* var/std */
} rpart;

static void part_init(rpart *p) {
  memset(p, 0, sizeof *p);
  p->prod = 1;
  p->idx = -1;
}

/* Pairwise sum (NumPy's pairwise_sum): exact order fixed by n alone. */
static double pairwise(const double *v, int64_t n) {
  if (n < 8) {
    double r = 0;
    for (int64_t i = 0; i < n; i++) r += v[i];
    return r;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; k++) r[k] = v[k];
    int64_t i;
    for (i = 8; i < n - n % 8; i += 8)
      for (int k = 0; k < 8; k++) r[k] += v[i + k];
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) s += v[i];
    return s;
  }
  int64_t h = n / 2;
  h -= h % 8;
  return pairwise(v, h) + pairwise(v + h, n - h);
}

static void var_merge(rpart *p, double nb, double mb, double m2b) {
  if (nb == 0) return;
  double na = p->n, n = na + nb, d = mb - p->mean;
  p->mean += d * (nb / n);
  p->m2 += m2b + d * d * (na * nb / n);
  p->n = n;
}

/* Extreme scan: min when sign is -1, max when +1. j0: index of v[0]. */
static void part_extreme(rpart *p, const double *v, int64_t m, int64_t j0,
                         int is_max) {
  if (p->idx >= 0 && isnan(p->val)) return;
  for (int64_t i = 0; i < m; i++) {
    double x = v[i];
    if (x != x) {
      p->val = x;
      p->idx = j0 + i;
      return;
    }
    if (p->idx < 0 || (is_max ? x > p->val : x < p->val)) {
      p->val = x;
      p->idx = j0 + i;
    }
  }
}

/* Fold m values whose first has index j0; tmp (m doubles, may be v itself)
 * holds var's and norm's squares. */
static void part_block(rpart *p, reduce_op op, const double *v, int64_t m,
                       int64_t j0, double *tmp) {
  switch (op) {
    case R_SUM:
    case R_MEAN:
      fold_neumaier_add(&p->s, &p->c, pairwise(v, m));
      break;
    case R_PROD: {
      double r = 1;
      for (int64_t i = 0; i < m; i++) r *= v[i];
      p->prod *= r;
      break;
    }
    case R_MIN:
    case R_ARGMIN: part_extreme(p, v, m, j0, 0); break;
    case R_MAX:
    case R_ARGMAX: part_extreme(p, v, m, j0, 1); break;
    case R_VAR:
    case R_STD: {
      double mb = pairwise(v, m) / (double)m;
      for (int64_t i = 0; i < m; i++) tmp[i] = (v[i] - mb) * (v[i] - mb);
      var_merge(p, (double)m, mb, pairwise(tmp, m));
      break;
    }
    case R_NORM: {
      double amax = 0;
      int bad = 0;
      for (int64_t i = 0; i < m; i++) {
        double a = fabs(v[i]);
        bad |= a != a;
        amax = a > amax ? a : amax;
      }
      if (bad) {
        fold_norm_merge(&p->scale, &p->ssq, NAN, 0);
      } else if (isinf(amax)) {
        fold_norm_merge(&p->scale, &p->ssq, INFINITY, 0);
      } else if (amax > 0) {
        double inv = 1.0 / amax;
        for (int64_t i = 0; i < m; i++) tmp[i] = (v[i] * inv) * (v[i] * inv);
        fold_norm_merge(&p->scale, &p->ssq, amax, pairwise(tmp, m));
      }
      break;
    }
    default: break;
  }
}

/* Merge partial b (of later elements) into a. */
static void part_merge(rpart *a, const rpart *b, reduce_op op) {
  switch (op) {
    case R_SUM:
    case R_MEAN:
      fold_neumaier_add(&a->s, &a->c, b->s);
      fold_neumaier_add(&a->s, &a->c, b->c);
      break;
    case R_PROD: a->prod *= b->prod; break;
    case R_MIN:
    case R_ARGMIN:
    case R_MAX:
    case R_ARGMAX: {
      int is_max = op == R_MAX || op == R_ARGMAX;
      if (b->idx < 0 || (a->idx >= 0 && isnan(a->val))) break;
      if (a->idx < 0 || isnan(b->val) ||
          (is_max ? b->val > a->val : b->val < a->val)) {
        a->val = b->val;
        a->idx = b->idx;
      }
      break;
    }
    case R_VAR:
    case R_STD: var_merge(a, b->n, b->mean, b->m2); break;
    case R_NORM: fold_norm_merge(&a->scale, &a->ssq, b->scale, b->ssq); break;
    default: break;
  }
}

static double part_final(const rpart *p, reduce_op op, int64_t n, double ddof) {
  switch (op) {
    case R_SUM: return isfinite(p->s) ? p->s + p->c : p->s;
    case R_MEAN:
      return n ? (isfinite(p->s) ? p->s + p->c : p->s) / (double)n : NAN;
    case R_PROD: return p->prod;
    case R_MIN:
    case R_MAX: return p->idx >= 0 ? p->val : NAN;
    case R_ARGMIN:
    case R_ARGMAX: return (double)p->idx;
    case R_VAR:
    case R_STD: {
      if (n == 0) return NAN;
      double dof = (double)n - ddof;
      double v = p->m2 / (dof > 0 ? dof : 0);
      return op == R_STD ? sqrt(v) : v;
    }
    case R_NORM:
      return p->scale == 0 || !isfinite(p->scale) ? p->scale
                                                   : p->scale * sqrt(p->ssq);
    default: return NAN;
  }
}

/* ---- the layouts ------------------------------------------------------------- */
typedef struct rgeom {
  int64_t outer, len, inner; /* shape = [outer, len, inner] around the axis */
} rgeom;

static void geom(const reduce_spec *r, rgeom *g) {
  g->outer = 1, g->len = 1, g->inner = 1;
  for (int d = 0; d < r->ndim; d++) {
    if (r->axis < 0 || d == r->axis) g->len *= r->shape[d];
    else if (d < r->axis) g->outer *= r->shape[d];
    else g->inner *= r->shape[d];
  }
}

void reduce_out_shape(const reduce_spec *r, int *ndim, int64_t *shape) {
  int k = 0;
  if (r->axis >= 0)
    for (int d = 0; d < r->ndim; d++)
      if (d != r->axis) shape[k++] = r->shape[d];
  *ndim = k;
}

typedef struct rwork {
  const reduce_spec *r;
  rgeom g;
  tarray *out;
  job_ctx *ctx;
  /* rows layout */
  int64_t per_chunk; /* outputs per chunk (when pieces == 1) */
  int64_t pieces;    /* chunks per output (when > 1) */
  rpart *parts;      /* outer * pieces, when pieces > 1 */
  /* columns layout */
  int64_t colw, ncolb;
  const double *direct; /* data to read in place of evaluating, or NULL */
  /* per-slot scratch */
  char *scratch;
  size_t stride, xscratch;
} rwork;

static double *slot_buf(const rwork *w, int slot) {
  return (double *)(w->scratch + (size_t)slot * w->stride + w->xscratch);
}

/* Partial of flat range [base + j0, base + j1) (indices j0.. along the
 * reduction). */
static void rows_range(const rwork *w, int slot, int64_t base, int64_t j0,
                       int64_t j1, rpart *p) {
  const reduce_spec *r = w->r;
  void *xs = w->scratch + (size_t)slot * w->stride;
  double *buf = slot_buf(w, slot);
  for (int64_t j = j0; j < j1; j += RED_EVAL) {
    int64_t m = j1 - j < RED_EVAL ? j1 - j : RED_EVAL;
    const double *v = buf;
    if (w->direct) /* the expression is one full-size float64 input */
      v = w->direct + base + j;
    else
      expr_eval_f64(r->x, r->inputs, r->ndim, r->shape, base + j, m, buf, xs);
    part_block(p, r->op, v, m, j, buf);
  }
}

static void rows_chunk(void *arg, int64_t c, int slot) {
  rwork *w = arg;
  const reduce_spec *r = w->r;
  if (w->pieces > 1) {
    int64_t o = c / w->pieces, q = c % w->pieces;
    int64_t j0 = q * RED_CHUNK, j1 = j0 + RED_CHUNK;
    if (j1 > w->g.len) j1 = w->g.len;
    rpart *p = &w->parts[c];
    part_init(p);
    rows_range(w, slot, o * w->g.len, j0, j1, p);
  } else {
    int64_t o0 = c * w->per_chunk, o1 = o0 + w->per_chunk;
    if (o1 > w->g.outer) o1 = w->g.outer;
    for (int64_t o = o0; o < o1; o++) {
      rpart p;
      part_init(&p);
      rows_range(w, slot, o * w->g.len, 0, w->g.len, &p);
      tarray_set(w->out, o, part_final(&p, r->op, w->g.len, r->ddof));
    }
  }
  job_ctx_progress(w->ctx, 1);
}

/* Columns [i0, i0 + cw) of output row o: walk the reduced axis. */
static void cols_chunk(void *arg, int64_t c, int slot) {
  rwork *w = arg;
  const reduce_spec *r = w->r;
  const rgeom *g = &w->g;
  int64_t o = c / w->ncolb, i0 = (c % w->ncolb) * w->colw;
  int64_t cw = g->inner - i0 < w->colw ? g->inner - i0 : w->colw;
  void *xs = w->scratch + (size_t)slot * w->stride;
  double *buf = slot_buf(w, slot);
  double *a = buf + RED_EVAL, *b = a + w->colw;  /* accumulators */
  int64_t *ix = (int64_t *)(b + w->colw);
  int full = cw == g->inner;
  int64_t rows = full ? (RED_EVAL / cw > 0 ? RED_EVAL / cw : 1) : 1;
  reduce_op op = r->op;
  int is_max = op == R_MAX || op == R_ARGMAX;
  for (int64_t i = 0; i < cw; i++) a[i] = op == R_PROD ? 1 : 0, b[i] = 0;
  for (int64_t j = 0; j < g->len; j += rows) {
    int64_t nr = g->len - j < rows ? g->len - j : rows;
    int64_t start = (o * g->len + j) * g->inner + i0;
    expr_eval_f64(r->x, r->inputs, r->ndim, r->shape, start,
                  full ? nr * cw : cw, buf, xs);
    for (int64_t k = 0; k < nr; k++) {
      const double *v = buf + k * cw;
      int64_t jj = j + k;
      switch (op) {
        case R_SUM:
        case R_MEAN: /* Kahan: a sum, b the running compensation */
          for (int64_t i = 0; i < cw; i++) {
            double y = v[i] - b[i], t = a[i] + y;
            /* t - t == 0 only for finite t: Inf must not poison b */
            b[i] = t - t == 0 ? (t - a[i]) - y : 0.0;
            a[i] = t;
          }
          break;
        case R_NORM:
          for (int64_t i = 0; i < cw; i++) {
            double y = v[i] * v[i] - b[i], t = a[i] + y;
            b[i] = t - t == 0 ? (t - a[i]) - y : 0.0;
            a[i] = t;
          }
          break;
        case R_PROD:
          for (int64_t i = 0; i < cw; i++) a[i] *= v[i];
          break;
        case R_VAR:
        case R_STD: { /* Welford: a mean, b m2 */
          double inv = 1.0 / (double)(jj + 1);
          for (int64_t i = 0; i < cw; i++) {
            double d = v[i] - a[i];
            a[i] += d * inv;
            b[i] += d * (v[i] - a[i]);
          }
          break;
        }
        default: /* min/max/argmin/argmax: a value, ix index */
          for (int64_t i = 0; i < cw; i++) {
            double x = v[i];
            if (jj == 0 || (a[i] == a[i] &&
                            (x != x || (is_max ? x > a[i] : x < a[i])))) {
              a[i] = x;
              ix[i] = jj;
            }
          }
          break;
      }
    }
  }
  for (int64_t i = 0; i < cw; i++) {
    double res;
    switch (op) {
      case R_SUM: res = isfinite(a[i]) ? a[i] - b[i] : a[i]; break;
      case R_MEAN:
        res = (isfinite(a[i]) ? a[i] - b[i] : a[i]) / (double)g->len;
        break;
      case R_NORM: res = sqrt(isfinite(a[i]) ? a[i] - b[i] : a[i]); break;
      case R_PROD: res = a[i]; break;
      case R_VAR:
      case R_STD: {
        double dof = (double)g->len - r->ddof;
        res = b[i] / (dof > 0 ? dof : 0);
        if (op == R_STD) res = sqrt(res);
        break;
      }
      case R_ARGMIN:
      case R_ARGMAX: res = (double)ix[i]; break;
      default: res = a[i]; break;
    }
    tarray_set(w->out, o * g->inner + i0 + i, res);
  }
  job_ctx_progress(w->ctx, 1);
}

/* Zero-size work (any of outer, len, inner 0) plans no chunk at all:
 * either there is no output, or every output reduces nothing and
 * reduce_cpu_run writes the ops' empty values without chunks. */
static void plan_work(const reduce_spec *r, int width, rwork *w,
                      int64_t *nchunks) {
  memset(w, 0, sizeof *w);
  w->r = r;
  geom(r, &w->g);
  const rgeom *g = &w->g;
  if (g->outer == 0 || g->len == 0 || g->inner == 0) {
    w->pieces = 1;
    *nchunks = 0;
  } else if (g->inner == 1) {
    if (g->len > RED_CHUNK) {
      w->pieces = (g->len + RED_CHUNK - 1) / RED_CHUNK;
      *nchunks = g->outer * w->pieces;
    } else {
      w->pieces = 1;
      w->per_chunk = RED_CHUNK / g->len; /* len > 0 here */
      if (w->per_chunk < 1) w->per_chunk = 1;
      *nchunks = (g->outer + w->per_chunk - 1) / w->per_chunk;
    }
  } else {
    /* column blocks: at least 4 chunks a thread when there are columns to
     * share; results do not depend on the block width */
    int64_t want = (int64_t)(width < 1 ? 1 : width) * 4;
    int64_t cw = g->inner;
    if (g->outer < want) cw = (g->inner * g->outer + want - 1) / want;
    if (cw < 256) cw = 256;
    if (cw > RED_EVAL) cw = RED_EVAL;
    if (cw > g->inner) cw = g->inner; /* inner > 0 here */
    w->colw = cw;
    w->ncolb = (g->inner + cw - 1) / cw;
    *nchunks = g->outer * w->ncolb;
  }
}

int64_t reduce_cpu_chunks(const reduce_spec *r) {
  rwork w;
  int64_t n;
  plan_work(r, 1, &w, &n);
  return n;
}

int reduce_cpu_run(const reduce_spec *r, tarray *out, job_ctx *ctx, int width,
                   terr *e) {
  if (width < 1) width = 1;
  rwork w;
  int64_t nchunks;
  plan_work(r, width, &w, &nchunks);
  w.out = out;
  w.ctx = ctx;
  if (nchunks == 0) { /* zero-size: nothing to evaluate */
    /* every output (if any) reduces nothing: NumPy's empty values, sum 0,
     * prod 1, norm 0, mean/var/std NaN; min/max/argmin/argmax never get
     * here (refused at submit, compute/kinds/reduce/reduce.c) but would give NaN / -1 */
    rpart p;
    part_init(&p);
    for (int64_t i = 0; i < out->size; i++)
      tarray_set(out, i, part_final(&p, r->op, 0, r->ddof));
    atomic_store(&ctx->progress_total, 0);
    atomic_store(&ctx->progress_done, 0);
    return 0;
  }
  if (nchunks < width) width = (int)nchunks;
  int bare = expr_bare_input(r->x);
  if (bare >= 0 && r->inputs[bare]->dtype == T_F64 &&
      r->inputs[bare]->size == out->size * w.g.len)
    w.direct = r->inputs[bare]->data;
  w.xscratch = (expr_scratch_size(r->x) + 63) & ~(size_t)63;
  size_t extra = RED_EVAL * sizeof(double) +
                 (size_t)w.colw * (2 * sizeof(double) + sizeof(int64_t));
  w.stride = (w.xscratch + extra + 63) & ~(size_t)63;
  w.scratch = aligned_alloc(64, w.stride * (size_t)width);
  if (w.pieces > 1) w.parts = malloc((size_t)nchunks * sizeof *w.parts);
  if (!w.scratch || (w.pieces > 1 && !w.parts)) {
    free(w.scratch);
    free(w.parts);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  pool_chunk_fn fn = w.g.inner == 1 ? rows_chunk : cols_chunk;
  atomic_store(&ctx->progress_total, nchunks);
  atomic_store(&ctx->progress_done, 0);
  int stopped = 0;
  if (!ctx->pool || width == 1) {
    for (int64_t c = 0; c < nchunks && !stopped; c++) {
      if (job_ctx_stopped(ctx)) stopped = 1;
      else fn(&w, c, 0);
    }
  } else {
    stopped = pool_for(ctx->pool, width, nchunks, fn, &w, ctx->stop) != 0;
  }
  if (!stopped && w.pieces > 1) { /* merge pieces in order */
    for (int64_t o = 0; o < w.g.outer; o++) {
      rpart *p = &w.parts[o * w.pieces];
      for (int64_t q = 1; q < w.pieces; q++) part_merge(p, p + q, r->op);
      tarray_set(out, o, part_final(p, r->op, w.g.len, r->ddof));
    }
  }
  free(w.scratch);
  free(w.parts);
  if (stopped) return terr_set(e, job_ctx_stop_code(ctx), "", -1, "stopped");
  return 0;
}
