/* compute/kinds/geodesic/query/query_int.h — private to the CUDA query
 * engine: what its files share. query.cu drives a call (cuda_geoq, its
 * design paragraph says how the engine works); query_index.cu builds the
 * index on the host (Morton order, tiles and their boxes, homes, output
 * slots); query_devs.cu sets the devices up and query_chunks.cu runs
 * chunks of queries on them (buffers,
 * uploads, the pass over the chunks, results scattered to their rows);
 * query_kernel.cu holds the kernel and its one launcher, gq_launch.
 *
 * The files call each other only through the functions declared here; the
 * kernel file knows nothing of gq_run, and the host files see the kernel
 * only through gq_launch (no <<<>>> outside query_kernel.cu). Everything
 * here is C++ with internal meaning (gq_ prefix); the C side sees only
 * query_cuda.h.
 */
#ifndef TESSEL_KINDS_GEODESIC_QUERY_INT_H
#define TESSEL_KINDS_GEODESIC_QUERY_INT_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "compute/gpu/devctx.h"
#include "compute/kinds/geodesic/query/query_cuda.h"

#define GQ_TILE 32      /* targets a tile (= warp width) */
#define GQ_WARPS 4      /* warps a block */
#define GQ_MAX_DEV GPU_MAX_DEVICES
#define GQ_CHUNK_MIN 16384 /* queries: the smallest chunk when not short */
#define GQ_TAIL_DIV 16  /* the last plain chunks shrink to cq / GQ_TAIL_DIV, */
#define GQ_TAIL_MIN 65536 /* but not below (512 blocks: every SM busy) */
#define GQ_FULL 0xffffffffu

/* ---- X and the Morton codes, the same bits on host and device ----------- */

/* sin and cos of x degrees: remquo's exact reduction to [-45, 45] as
 * geod__sincosd, then fdlibm's __kernel_sin / __kernel_cos (FreeBSD
 * msun k_sin.c, k_cos.c: Copyright (C) 1993 by Sun Microsystems, Inc.
 * Developed at SunPro, a Sun Microsystems, Inc. business. Permission to
 * use, copy, modify, and distribute this software is freely granted,
 * provided that this notice is preserved.) on |t| <= pi/4, < 1 ulp
 * (0.72 / 0.75 ulp over 5e6 arguments against long double). */
TESSEL_HD static inline void gq_sincosd(double x, double *sx, double *cx) {
  const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
               S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
               S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
  const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
               C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
               C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
  int q = 0;
  double t = geod__mulx(remquo(x, 90.0, &q), GEOD_DEG);
  double z = geod__mulx(t, t), w = geod__mulx(z, z);
  double rs = S2 + geod__mulx(z, S3 + geod__mulx(z, S4)) +
              geod__mulx(geod__mulx(z, w), S5 + geod__mulx(z, S6));
  double s = t + geod__mulx(geod__mulx(z, t), S1 + geod__mulx(z, rs));
  double rc = geod__mulx(z, C1 + geod__mulx(z, C2 + geod__mulx(z, C3))) +
              geod__mulx(geod__mulx(w, w),
                         C4 + geod__mulx(z, C5 + geod__mulx(z, C6)));
  double hz = geod__mulx(0.5, z), w1 = 1.0 - hz;
  double c = w1 + (((1.0 - w1) - hz) + geod__mulx(z, rc));
  switch ((unsigned)q & 3u) {
    case 0u: *sx = s; *cx = c; break;
    case 1u: *sx = c; *cx = -s; break;
    case 2u: *sx = -s; *cx = -c; break;
    default: *sx = -c; *cx = s; break;
  }
  *cx += 0.0; /* -0 -> +0 */
  if (x == 0) *sx = x;
}

/* What X needs of the plan (a device cannot read the geod_plan). */
typedef struct gq_surf {
  int sphere;          /* haversine: radius times the unit vector */
  double a, b, radius; /* ellipsoid axes; the sphere's radius */
  double R, scale;     /* the Morton grid: [-R, R] in 2^21 steps an axis */
} gq_surf;

/* Earth-centred X of a prepared point on the plan's surface (query.h). */
TESSEL_HD static inline void gq_xyz(const gq_surf *S, const geod_point *p,
                                    double *x) {
  if (S->sphere) {
    x[0] = geod__mulx(S->radius, p->sbet);
    x[1] = geod__mulx(S->radius, p->cbet);
    x[2] = geod__mulx(S->radius, p->dn);
  } else {
    double sl, cl;
    gq_sincosd(p->lon, &sl, &cl);
    x[0] = geod__mulx(geod__mulx(S->a, p->cbet), cl);
    x[1] = geod__mulx(geod__mulx(S->a, p->cbet), sl);
    x[2] = geod__mulx(S->b, p->sbet);
  }
}

/* Spread the low 21 bits of v to every third bit. */
TESSEL_HD static inline uint64_t gq_spread3(uint64_t v) {
  v &= 0x1fffff;
  v = (v | v << 32) & 0x1f00000000ffffULL;
  v = (v | v << 16) & 0x1f0000ff0000ffULL;
  v = (v | v << 8) & 0x100f00f00f00f00fULL;
  v = (v | v << 4) & 0x10c30c30c30c30c3ULL;
  v = (v | v << 2) & 0x1249249249249249ULL;
  return v;
}

/* The 3-D Morton code of X (21 bits an axis, 63 in all). */
TESSEL_HD static inline uint64_t gq_code(const gq_surf *S, const double *x) {
  uint64_t c = 0;
  for (int a = 0; a < 3; a++) {
    double u = geod__mulx(x[a] + S->R, S->scale);
    uint64_t v = u <= 0 ? 0 : u >= (1 << 21) - 1 ? (1 << 21) - 1 : (uint64_t)u;
    c |= gq_spread3(v) << a;
  }
  return c;
}
#define GQ_CODE_BITS 63

/* The kernel's modes: knn, rowwise min/argmin (a best so far, pruned like
 * knn), other rowwise ops, radius count and radius fill. */
enum { GQ_KNN = 0, GQ_MIN, GQ_ROW, GQ_RCOUNT, GQ_RFILL };

/* ---- the kernel (query_kernel.cu) ---------------------------------------- */

typedef struct gq_args {
  geod_ellipsoid g;
  double radius, unit;
  int self;            /* no targets: targets are the points */
  int op;              /* rowwise op */
  int K;               /* knn: k_eff */
  int64_t hw;          /* home window (knn, min): targets */
  double bound0;       /* the fixed bound in output units (r, within; inf) */
  int64_t m, nt;       /* targets, tiles */
  const double *tx;    /* 3 m: sorted targets' X */
  const geod_point *tp;
  const long long *tj; /* original index of sorted target */
  const double *box;   /* 6 nt: lo xyz, hi xyz */
  int64_t nq;          /* queries of the chunk */
  const double *qx;
  const geod_point *qp;
  const long long *qi, *qhome;
  const long long *qslot; /* knn, rowwise: the output row of each query in
                           * the chunk (its rank by original index) */
  double *hd;          /* knn heap, [nq/32][K][32] */
  long long *hj;
  void *od;            /* values out (plan dtype; fill: double) */
  long long *oj;       /* indices / counts out */
  const long long *coff; /* fill: the chunk's row offsets */
  unsigned long long *nonconv;
} gq_args;

/* Launch the kernel for nq queries of a chunk on stream s: the method and
 * mode pick the instance; a warp of 32 queries, GQ_WARPS warps a block.
 * The launch's status (cudaGetLastError). */
cudaError_t gq_launch(int method, int mode, int64_t nq, cudaStream_t s,
                      const gq_args &a, int f32);

/* ---- the index (query_index.cu) ------------------------------------------ */

/* Sorted points: X (3 a point), the points, their original index. */
typedef struct gq_side {
  int64_t n;
  double *x;
  geod_point *p;
  long long *idx;
  uint64_t *code;
  double t_codes, t_sort, t_gather; /* ms of gq_side_build's steps (trace) */
} gq_side;

/* Build the sorted side of n prepared points (T_ENOMEM; *s freed then). */
int gq_side_build(const geoq_gpu_job *job, const geod_plan *pl,
                  const geod_point *pts, int64_t n, gq_side *s, terr *e);
void gq_side_free(gq_side *s);
/* free(p[0..n)), buffers of an index of `items` points: from
 * GQ_FREE_ASYNC points on, on a detached thread of its own (the munmap of
 * the index's fresh GB took 125-255 ms on the 2-core VM for 10^7 points);
 * here for smaller ones, when the thread cannot start or with
 * TESSEL_GEOQ_EVEN set (the benchmarks' before). At most GQ_FREE_MAX. */
#define GQ_FREE_MAX 16
#define GQ_FREE_ASYNC ((int64_t)1 << 20)
void gq_free_later(void *const *p, int n, int64_t items);
/* The boxes of the tiles of sorted X (n points): 6 doubles a tile (lo xyz,
 * hi xyz), *nt tiles; NULL when out of memory. The caller frees. Both in
 * parallel on job's pool (job->par; job NULL: on the calling thread). */
double *gq_boxes(const geoq_gpu_job *job, const double *x, int64_t n,
                 int64_t *nt);

/* ---- the devices (query_devs.cu) and the chunks (query_chunks.cu) ------- */

/* One device's share: its context, the targets' index, the chunk buffers
 * and the chunk in flight. */
typedef struct gq_dev {
  int dev, borrowed;
  /* A second lane of the device of lane dv[k - ndev]: its own chunk
   * buffers and events, that lane's devctx and targets' index (tx, tp, tj,
   * box, nc: not freed here). Two chunks in flight a device, so that one
   * is copied down and scattered while the other's kernel runs. */
  int twin;
  devctx *d;
  devbuf tx, tp, tj, box, nc;
  /* the index on the device (r->devix): the sorted queries with targets
   * (X, points, original index), every sorted query's home and output
   * slot; shared with the twin like tx. ix: the build's scratch, codes
   * the sorted codes it keeps for the homes (freed once built). */
  devbuf ax, ap, ai, ah, as;
  devbuf ix, codes;
  devbuf qx, qp, qi, qh, qs, hd, hj, od, oj, coff, sk, sv, tmp;
  size_t tmp_bytes;
  cudaEvent_t start, done; /* around a chunk's kernels */
  cudaEvent_t up;          /* a chunk's queries are up (its kernel waits) */
  cudaEvent_t pass0;       /* a device lane's: the pass began (the trace) */
  int64_t chunk; /* in flight, or -1 */
  unsigned long long nonconv;
} gq_dev;

/* A chunk of sorted queries [s0, s1); fill chunks: pairs [p0, p1). */
typedef struct gq_chunk {
  int64_t s0, s1, p0, p1;
} gq_chunk;

/* Everything a call shares. */
typedef struct gq_run {
  const geod_plan *pl;
  const geoq *q;
  const geoq_gpu_job *job;
  int mode, f32, K;
  size_t es;
  gq_side T, Q; /* targets, queries (Q aliases T without targets) */
  long long *home; /* per sorted query */
  /* knn, rowwise: slot[s], the row of sorted query s in its chunk's output
   * (chunks are [c cq, (c + 1) cq)), and ord, each chunk's rows in order:
   * the output comes back in increasing original row, scattered forward. */
  long long *slot, *ord;
  double *box;
  int64_t nt;
  int ndev;  /* lanes: the devices, then their twins (gq_twins) */
  int nreal; /* devices: dv[0, nreal) */
  gq_dev dv[2 * GQ_MAX_DEV];
  int64_t cq;  /* queries a chunk holds */
  int64_t pcap; /* pairs a fill chunk holds */
  /* host staging of a chunk's results (gq_host_stage: their sizes) */
  void *hod;
  long long *hoj;
  size_t hod_bytes, hoj_bytes;
  long long *cnt;  /* radius: pairs per original row */
  int64_t *off;    /* radius: first pair of each original row */
  long long *coff; /* radius fill: per sorted query, pairs before it */
  tarray *part[GEOQ_MAX_PARTS];
  int nparts;
  double t_up, t_down, t_kern;
  /* per lane, in the last pass (gq_pass): queries and chunks computed */
  int64_t lrows[2 * GQ_MAX_DEV], lchunks[2 * GQ_MAX_DEV];
  /* TESSEL_GEOQ_EVEN (benchmarks): every plain chunk r->cq, as before the
   * guided tail (gq_cut) */
  int even;
  /* The index on the devices (query_devindex.cu), unless
   * TESSEL_GEOQ_HOST_INDEX is set or a device's memory cannot hold its
   * build (gq_dev_setup falls back to the host's). slotted: knn and
   * rowwise (output slots and ord). cut0: with devix, the plain cut's
   * chunk starts, slot_nch + 1 of them (the last n). */
  int devix, slotted;
  long long *cut0;
  /* the plain cut gq_slots laid the slots out for: chunks, the last one's
   * start (gq_run_pass asserts the pass cuts the same) */
  int64_t slot_nch, slot_last;
  /* The trace (query.cu's gq_trace; host ms unless said): the index's
   * steps, each device's setup (taken, buffers, targets up), and of the
   * last pass: its span, the prefault, per lane the kernels (device ms),
   * the end of its last kernel after the pass began (device clock, from
   * its device's pass0) and the host's time bringing its chunks down and
   * scattering them. */
  double tr_sides, tr_boxes, tr_homes, tr_slots, tr_setup[GQ_MAX_DEV];
  double tr_sort3[3]; /* the sides' codes, radix sort, gather */
  double tr_dix[GQ_MAX_DEV][3]; /* device index: points up, build, down */
  double tr_pass, tr_prefault;
  double tr_kern[2 * GQ_MAX_DEV], tr_kend[2 * GQ_MAX_DEV],
      tr_fin[2 * GQ_MAX_DEV];
} gq_run;

/* (query_index.cu) The surface and Morton grid of plan pl. */
gq_surf gq_surface(const geod_plan *pl);
/* (query_index.cu) The whole host index of r: both sides sorted
 * (r->T, r->Q), the tiles' boxes, the homes (traced). */
int gq_host_index(gq_run *r, terr *e);

/* ---- the index on the devices (query_devindex.cu) ------------------------ */

/* Device bytes of device x's index beyond the targets' (tx, tp, tj, box):
 * *keep what stays for the pass (ax, ap, ai, ah, as), *build what the
 * build takes besides and gives back (ix, codes). */
void gq_dev_index_bytes(const gq_run *r, size_t *keep, size_t *build);
/* Before the builds, on cuda_geoq's thread: the plain cut (r->cut0,
 * slot_nch, slot_last) and r->ord for knn and rowwise, r->Q.idx for
 * radius (filled by the first device's gq_dev_index). */
int gq_dev_index_prep(gq_run *r, terr *e);
/* Allocate device x's index buffers, after gq_dev_index_prep (this thread
 * holding the device); gq_dev_index_free gives the build's scratch back
 * (ix, codes) once it is built. */
int gq_dev_index_alloc(const gq_run *r, gq_dev *x, terr *e);
void gq_dev_index_free(gq_dev *x);
/* Build the index on device x from the plan's prepared points, the same
 * on every device: the targets (and the queries) up, X, codes, CUB's
 * radix sort (stable: by code, then original index), gather, boxes,
 * homes, slots. lead: also bring down what the host needs (r->ord for
 * knn and rowwise, r->Q.idx for radius: allocated by the caller). ms:
 * points up, build, down. Runs on a helper thread for devices beyond the
 * first (gq_uploads); frees the build's scratch before it returns. */
int gq_dev_index(const gq_run *r, gq_dev *x, int lead, double ms[3],
                 terr *e);

/* (query_index.cu) The home of every sorted query: its position in the
 * targets' order (without targets, itself); r->home allocated by the
 * caller. slot and ord for chunks of r->cq sorted queries (see gq_run). */
void gq_homes(gq_run *r);
int gq_slots(gq_run *r, terr *e);

/* 0, or the job's stop code with e set (canceled, timed out). */
int gq_stop(gq_run *r, terr *e);
/* Device bytes a device holds for the whole call: the targets' index
 * (and with r->devix what its index keeps: gq_dev_index_bytes). */
size_t gq_fixed_bytes(const gq_run *r);
/* Device bytes a chunk of cq queries takes (radius fill: plus pcap pairs). */
size_t gq_chunk_bytes(const gq_run *r, int64_t cq);
/* Take device x, allocate the targets' index, cut r->cq to its budget. */
int gq_dev_setup(gq_run *r, gq_dev *x, terr *e);
/* The targets' index up to every device, at once (a thread a device
 * beyond the first; in turn with r->even). */
int gq_uploads(gq_run *r, terr *e);
/* The chunk buffers of device x, once r->cq (and r->pcap) are final. */
int gq_dev_buffers(gq_run *r, gq_dev *x, terr *e);
/* Give back every buffer of device x (its lock held). */
void gq_dev_free(gq_dev *x);
/* A twin lane for each device lane (gq_dev.twin), after gq_dev_setup. */
int gq_twins(gq_run *r, terr *e);
/* Host staging for a chunk's results. */
int gq_host_stage(gq_run *r, terr *e);
/* Cut the sorted queries into chunks (fill: by pairs too); *out freed by
 * the caller. */
int gq_cut(gq_run *r, int fill, gq_chunk **out, int64_t *nch, terr *e);
/* One pass over the chunks, every device taking the next when it is free. */
int gq_pass(gq_run *r, const gq_chunk *ch, int64_t nch, terr *e);

#endif
