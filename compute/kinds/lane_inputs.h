/* lane_inputs.h — private to the CUDA side of compute/kinds/: what a lane
 * of a run over every lent GPU (map/map_lane.cu, reduce/reduce_lane.cu)
 * does alike with its streamed inputs and its events; C linkage, C++ only
 * (it takes fuse.h's types).
 *
 * The input plan (lane_inputs_plan): which uploaded arrays a lane reads
 * from its device's resident cache (on the run's own device as a one-GPU
 * run reads them; on a lent one only when its cache holds them already,
 * never uploading gigabytes into a borrowed device), the rest placed by
 * fuse_place_inputs (scalars, broadcast inputs uploaded once, full-size
 * ones streamed); each streamed input's region in a block's device buffer
 * (whole 256-element groups, 16-byte aligned, as the kernels' vector
 * accesses want) and, when not page-locked, in a staging slot (C elements
 * a slot carries up). A block's streamed inputs go up from elements
 * [e0, e1): page-locked ones by DMA from where they lie (lane_up_pinned),
 * the rest a slot at a time (lane_up_chunk: the gang fills the slot the
 * caller picks, once its last copy is done, the copy-in stream moves it
 * into the block's buffer; the slot's event recorded after). Which slots
 * carry inputs up is the caller's: map keeps two for its results down.
 * Also the session's frame (the device check, the stop, the close).
 * Threads: the lane's only (its device held).
 */
#ifndef TESSEL_KINDS_LANE_INPUTS_H
#define TESSEL_KINDS_LANE_INPUTS_H

#include "compute/kinds/fuse.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LANE_NBUF 2 /* a lane's device buffers: blocks in hand at once */

/* What a lane's run says of its inputs (read-only). */
typedef struct lane_in_job {
  int nin;
  const tarray *const *inputs;
  const char *const *ids; /* NULL, or NULL entries: inline inputs */
  int own;                /* the run's own device (its lane caches uploads) */
} lane_in_job;

/* A lane's inputs placed: m[] and the regions (sig and args the lane's). */
typedef struct lane_inputs {
  fuse_input m[FUSE_MAX_IN];
  size_t dreg[FUSE_MAX_IN]; /* streamed input i in a device buffer */
  size_t hreg[FUSE_MAX_IN]; /* non-pinned streamed input i in a slot */
  int64_t C;                /* elements a slot carries up (0: none staged) */
} lane_inputs;

/* A lane's events: per buffer, its inputs up, its kernels begun and done;
 * per slot, its last copy done. */
typedef struct lane_events {
  cudaEvent_t up[LANE_NBUF], kbeg[LANE_NBUF], done[LANE_NBUF];
  cudaEvent_t slot_ev[DEV_STAGE_SLOTS];
} lane_events;

int lane_events_create(lane_events *ev, terr *e);
void lane_events_destroy(lane_events *ev); /* the ones made */

/* The inputs placed (m[i].es set by the caller's signature) and their
 * regions for blocks of up to cap elements: *per_dev the bytes of a
 * device buffer they take (the caller adds its own regions after them),
 * in->C and in->hreg from the slots' size. T_ETOOLARGE "params.inputs"
 * when a slot cannot carry 256 elements of every staged input. */
int lane_inputs_plan(devctx *d, const lane_in_job *J, const fuse_sig *sig,
                     fuse_args *args, gpu_job *job, int64_t cap,
                     lane_inputs *in, size_t *per_dev, terr *e);

/* Elements [e0, e1) of the page-locked streamed inputs queued up into the
 * block's buffer b (DMA on d->s_h2d). */
int lane_up_pinned(devctx *d, const lane_in_job *J, const lane_inputs *in,
                   char *b, int64_t e0, int64_t e1, terr *e);

/* One slot (s, its event *slot_ev) of the block's other streamed inputs,
 * from element *o of [e0, e1) into buffer b; *o advanced. */
int lane_up_chunk(devctx *d, const lane_in_job *J, const lane_inputs *in,
                  char *b, int64_t e0, int64_t e1, int s,
                  cudaEvent_t slot_ev, int64_t *o, terr *e);

/* The inputs' owned uploads freed (close). */
void lane_inputs_free(devctx *d, int nin, lane_inputs *in);

/* A session's frame, alike in both lanes:
 *   lane_device_ok  T_EDEVICE unless dev is a usable device (open);
 *   lane_stopped    the job's stop (stopped NULL ok) as launch's error,
 *                   "stopped at element r0"; 0 to go on;
 *   lane_quiesce    the device's three streams synchronised (close, before
 *                   anything is freed);
 *   lane_release    the buffers, events and inputs freed, the device's
 *                   error cleared and the device ended with rc (close). */
int lane_device_ok(int dev, terr *e);
int lane_stopped(int (*stopped)(void *ctx), void *ctx, int64_t r0, terr *e);
void lane_quiesce(devctx *d);
void lane_release(devctx *d, devbuf *buf, lane_events *ev, int nin,
                  lane_inputs *in, int rc);

#ifdef __cplusplus
}
#endif

#endif
