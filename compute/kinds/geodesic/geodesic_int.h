/* compute/kinds/geodesic/geodesic_int.h — private to the CUDA matrix of
 * the geodesic kind: what its five files share. geodesic.cu (its opening
 * comment is the design: kernel modes, the band pipeline, several
 * devices) holds the one-device pipeline (cuda_geodesic);
 * geodesic_dev.cu the host helpers both pipelines use; geodesic_spread.cu the lanes over several devices
 * (gg_spread) and the lane session of geod_mgpu (cuda_geod_lane_*); geodesic_kernel.cu the kernel and its launchers;
 * geodesic_bench.cu the benchmark entry points (kernel variants, the
 * copy baseline).
 *
 * The kernel is seen only through gg_launch / gg_launch_variant (no
 * <<<>>> outside geodesic_kernel.cu). C++ with internal meaning (gg_
 * prefix); the C side sees only geodesic_cuda.h.
 */
#ifndef TESSEL_KINDS_GEODESIC_INT_H
#define TESSEL_KINDS_GEODESIC_INT_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "compute/gpu/devctx.h"
#include "compute/kinds/geodesic/geodesic_cuda.h"

#define GG_NSTAGE DEV_STAGE_SLOTS         /* the device's pinned slots */
#define GG_NSLOT 3                       /* device band buffers (passes) */
#define GG_SLOT_MAX ((size_t)256 << 20)
#define GG_LOOK 4                        /* bands computed ahead (SYM) */
#define GG_TILE 32
#define GG_LEND_CHUNKS 4 /* borrow devices for results of this many chunks */
#define GG_BAL 4         /* bands per lane at least, for balance */
#define GG_LANE_MAX (GPU_MAX_DEVICES * DEV_STAGE_SLOTS)

/* GG_SYMB: a block of rows [r0, r1) of a square matrix, each pair once
 * (a lane session's square blocks over several devices, geodesic_spread.cu):
 * pairs (i, j), i in the block and j > i, written to the block's band
 * (rows [r0, r1), columns [r0, m), pitch bw) and mirrored, (j, i), into the
 * band when j < r1, else into the strip (rows [r1, n), columns [r0, r1),
 * pitch sw) at out2. The rows' columns left of r0 are earlier blocks'
 * strips: every element of the matrix is written by exactly one block. */
enum { GG_SYM = 0, GG_ROWS = 1, GG_COND = 2, GG_SQR = 3, GG_SYMB = 4 };

/* ---- the kernel (geodesic_kernel.cu) -------------------------------------- */

typedef struct gg_args {
  geod_ellipsoid g;
  const geod_point *p, *q;
  double radius, unit;
  int64_t n, m;   /* rows, columns of the whole result (m = n if square) */
  int64_t r0, r1; /* the band's rows */
  int64_t c0;     /* first column of the grid */
  int64_t base0;  /* COND: condensed index of the band's first element */
  void *out;      /* SYM: the whole matrix; ROWS/COND: the band */
  unsigned long long *nonconv;
  int upper;      /* ROWS: pairs j > i only, j <= i written zero (plan.h) */
  void *out2;     /* SYMB: the strip */
  int64_t bw, sw; /* SYMB: the band's and the strip's pitch (elements) */
} gg_args;

/* Launch the kernel over `grid` tiles of GG_TILE x GG_TILE pairs in `mode`
 * on stream s: the method and the output type pick the instance; the
 * launch's status (cudaGetLastError). */
cudaError_t gg_launch(int method, int mode, dim3 grid, cudaStream_t s,
                      const gg_args &a, int f32);
/* The tuning variants (karney, float64, mode GG_SYM or GG_ROWS): 0 is the
 * default shape; gg_variant_name(v) says which, NULL past the last. */
#define GG_NVARIANT 5
cudaError_t gg_launch_variant(int variant, int mode, dim3 grid, cudaStream_t s,
                              const gg_args &a);
const char *gg_variant_name(int variant);
/* The attributes of the default kernel (fails when the binary has no code
 * for the current device's architecture). */
cudaError_t gg_kernel_attributes(cudaFuncAttributes *attr);

/* ---- the host side (geodesic_dev.cu) ------------------------------------- */

/* ---- on the device runtime ------------------------------------------------
 * Everything per device — the lock, streams, timing events, memory pool,
 * pinned staging slots and the host copy gang — is the device runtime's
 * (compute/gpu/devctx.h): dev_begin / dev_end, CU_TRY, devmem_alloc, d->slot[].
 * What only this pipeline needs beyond it are the events that pace the
 * bands, made per call (a geodesic job is long; an event costs
 * microseconds). */

typedef struct gg_events {
  cudaEvent_t band[GG_LOOK + 1]; /* a band's kernel is done */
  cudaEvent_t slot[GG_NSLOT];    /* a band buffer's copies are queued */
} gg_events;
int gg_events_create(gg_events *ev, terr *e);
void gg_events_destroy(gg_events *ev);

/* Take Tessel device `dev` for a call: T_EUNAVAIL when there is no usable
 * device at all, T_EDEVICE when `dev` is not one of them; else
 * dev_begin's answer (the device locked and current). */
int gg_begin(int dev, devctx **d, terr *e);
/* The kernel arguments every launch of a plan shares (the band fields are
 * the caller's). */
void gg_args_init(gg_args *a, const geod_plan *pl, const geod_point *dp,
                  const geod_point *dq, unsigned long long *dnc);

/* A band of output rows [r0, r1): `bytes` at byte `off` of the result. */
typedef struct gg_band {
  int64_t r0, r1;
  size_t off, bytes;
  int64_t base0; /* COND: condensed index of the first element */
} gg_band;

/* Cut the output into bands of at most `cap` bytes (SYM: rows a multiple
 * of the tile). Returns the band count, or -1 (no memory, or one row does
 * not fit). Caller frees *out. */
int64_t gg_bands(const geod_plan *pl, int mode, size_t es, size_t cap,
                 gg_band **out);
/* The plan's points up to device d and the Vincenty counter zeroed (see
 * geodesic.cu); the caller frees the buffers, on failure too. */
int gg_points_up(devctx *d, const geod_plan *pl, devbuf *bp, devbuf *bq,
                 devbuf *bnc, terr *e);
/* Device bytes a call may take on the current device: 90% of what is
 * free, at most the plan's gpu_mem_limit. */
int gg_budget(const geod_plan *pl, size_t *budget, terr *e);
/* Copy a chunk from its pinned slot into the result, on the device's gang. */
void gg_drain(devctx *d, char *dst, const void *src, size_t len);
/* 0, or the job's stop code with e set (canceled, timed out). */
int gg_stopped(const geod_gpu_job *job, terr *e);

/* ---- several devices (geodesic_spread.cu) -------------------------------- */

/* The matrix over nl lanes on devices ldev[] (a device may repeat: its
 * lanes are consecutive). Every lane's device is taken here and ended
 * before returning; the caller gives borrowed devices back. chunk: the
 * copy size (at most a pinned slot of any lane's device). */
int gg_spread(const int *ldev, int nl, const geod_plan *pl, tarray *out,
              const geod_gpu_job *job, size_t chunk, int64_t *nonconv,
              terr *e);

#endif
