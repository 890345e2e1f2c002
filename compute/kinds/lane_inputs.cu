/* lane_inputs.cu — a lane's streamed inputs and events (lane_inputs.h),
 * one piece of code for the map's lanes (map/map_lane.cu) and the
 * reduce's (reduce/reduce_lane.cu), which differ only in what follows the
 * inputs in a block's buffer (a result; parts and states), which slots
 * carry inputs up, and what comes down.
 *
 * The plan: an uploaded array is read from the device's resident cache
 * when the lane's device is the run's own (cached whole there when it
 * fits, as a one-GPU run does) or when a lent device's cache holds it
 * already (gpu_resident_mask); else it is streamed like an inline input
 * (a borrowed device's cache is not filled with gigabytes for one job,
 * evicting what its own jobs keep there). Regions are whole 256-element
 * groups; a slot's regions are per element, times C once C is known.
 * An up chunk: the slot's last copy awaited, the gang copies every staged
 * input's piece into the slot, the copy-in stream moves each into its
 * place in the block's buffer, the slot's event recorded after them.
 * The frame: a lane's device checked at open, the job's stop asked at
 * every launch, and at close its streams synchronised before anything is
 * freed, then its device ended.
 * Threads: the lane's only (its device held).
 */
#include <string.h>

#include "compute/kinds/lane_inputs.h" /* first: C headers in extern "C" */

extern "C" int lane_events_create(lane_events *ev, terr *e) {
  int rc = 0;
  for (int k = 0; k < LANE_NBUF; k++) {
    CU_TRY(cudaEventCreateWithFlags(&ev->up[k], cudaEventDisableTiming));
    CU_TRY(cudaEventCreateWithFlags(&ev->kbeg[k], cudaEventDefault));
    CU_TRY(cudaEventCreateWithFlags(&ev->done[k], cudaEventDefault));
  }
  for (int s = 0; s < DEV_STAGE_SLOTS; s++)
    CU_TRY(cudaEventCreateWithFlags(&ev->slot_ev[s], cudaEventDisableTiming));
fail:
  return rc;
}

extern "C" void lane_events_destroy(lane_events *ev) {
  for (int k = 0; k < LANE_NBUF; k++) {
    if (ev->up[k]) (void)cudaEventDestroy(ev->up[k]);
    if (ev->kbeg[k]) (void)cudaEventDestroy(ev->kbeg[k]);
    if (ev->done[k]) (void)cudaEventDestroy(ev->done[k]);
  }
  for (int s = 0; s < DEV_STAGE_SLOTS; s++)
    if (ev->slot_ev[s]) (void)cudaEventDestroy(ev->slot_ev[s]);
}

extern "C" int lane_inputs_plan(devctx *d, const lane_in_job *J,
                                const fuse_sig *sig, fuse_args *args,
                                gpu_job *job, int64_t cap, lane_inputs *in,
                                size_t *per_dev, terr *e) {
  int rc = 0;
  const char *ids[FUSE_MAX_IN];
  size_t per_slot = 0;
  /* regions of whole 256-element groups: every one 16-byte aligned, as
   * the kernels' vector accesses want */
  size_t capr = ((size_t)cap + 255) & ~(size_t)255;
  for (int i = 0; i < J->nin; i++) {
    const tarray *x = J->inputs[i];
    size_t bytes = (size_t)x->size * in->m[i].es;
    int here = J->ids && J->ids[i] &&
               (d->index == J->own ||
                (gpu_resident_mask(J->ids[i], (int)x->dtype, bytes) >>
                 d->index) & 1u);
    ids[i] = here ? J->ids[i] : NULL;
  }
  T_TRY(fuse_place_inputs(d, J->nin, J->inputs, ids, sig, in->m, args, job,
                          e));
  for (int i = 0; i < J->nin; i++)
    if (in->m[i].streamed) {
      in->dreg[i] = *per_dev;
      *per_dev += capr * in->m[i].es;
      if (!in->m[i].pinned) {
        in->hreg[i] = per_slot; /* times C, once C is known */
        per_slot += in->m[i].es;
      }
    }
  if (per_slot > 0) {
    in->C = (int64_t)(d->slot[0].bytes / per_slot) & ~(int64_t)255;
    if (in->C < 256) {
      rc = terr_set(e, T_ETOOLARGE, "params.inputs", -1,
                    "too many inputs for the GPU staging buffers");
      goto fail;
    }
    for (int i = 0; i < J->nin; i++)
      if (in->m[i].streamed && !in->m[i].pinned)
        in->hreg[i] *= (size_t)in->C; /* bytes an element before it, times C */
  }
fail:
  return rc;
}

extern "C" int lane_up_pinned(devctx *d, const lane_in_job *J,
                              const lane_inputs *in, char *b, int64_t e0,
                              int64_t e1, terr *e) {
  int rc = 0;
  for (int i = 0; i < J->nin; i++)
    if (in->m[i].streamed && in->m[i].pinned) {
      size_t es = in->m[i].es;
      CU_TRY(cudaMemcpyAsync(b + in->dreg[i],
                             (const char *)J->inputs[i]->data +
                                 (size_t)e0 * es,
                             (size_t)(e1 - e0) * es, cudaMemcpyHostToDevice,
                             d->s_h2d));
    }
fail:
  return rc;
}

extern "C" int lane_up_chunk(devctx *d, const lane_in_job *J,
                             const lane_inputs *in, char *b, int64_t e0,
                             int64_t e1, int s, cudaEvent_t slot_ev,
                             int64_t *o, terr *e) {
  int rc = 0, ni = 0;
  int64_t cnt = e1 - *o < in->C ? e1 - *o : in->C;
  gang_item items[FUSE_MAX_IN];
  T_ASSERT(in->C > 0 && *o >= e0 && *o < e1);
  CU_TRY(cudaEventSynchronize(slot_ev));
  for (int i = 0; i < J->nin; i++)
    if (in->m[i].streamed && !in->m[i].pinned) {
      size_t es = in->m[i].es;
      T_ASSERT(in->hreg[i] + (size_t)cnt * es <= d->slot[s].bytes);
      items[ni++] = (gang_item){d->slot[s].host + in->hreg[i],
                                (const char *)J->inputs[i]->data +
                                    (size_t)*o * es,
                                (size_t)cnt * es};
    }
  gang_copy(d->gang, items, ni);
  for (int i = 0; i < J->nin; i++)
    if (in->m[i].streamed && !in->m[i].pinned) {
      size_t es = in->m[i].es;
      CU_TRY(cudaMemcpyAsync(b + in->dreg[i] + (size_t)(*o - e0) * es,
                             d->slot[s].host + in->hreg[i], (size_t)cnt * es,
                             cudaMemcpyHostToDevice, d->s_h2d));
    }
  CU_TRY(cudaEventRecord(slot_ev, d->s_h2d));
  *o += cnt;
fail:
  return rc;
}

extern "C" void lane_inputs_free(devctx *d, int nin, lane_inputs *in) {
  for (int i = 0; i < nin && i < FUSE_MAX_IN; i++) devmem_free(d, &in->m[i].tmp);
}

extern "C" int lane_device_ok(int dev, terr *e) {
  int n = gpu_count();
  if (dev < 0 || dev >= n)
    return terr_set(e, T_EDEVICE, "", -1, "CUDA: no device %d (%d usable)",
                    dev, n);
  return 0;
}

extern "C" int lane_stopped(int (*stopped)(void *ctx), void *ctx, int64_t r0,
                            terr *e) {
  int st;
  if (stopped && (st = stopped(ctx)) != 0)
    return terr_set(e, (terr_code)st, "", -1, "stopped at element %lld",
                    (long long)r0);
  return 0;
}

extern "C" void lane_quiesce(devctx *d) {
  (void)cudaSetDevice(d->ordinal);
  (void)cudaStreamSynchronize(d->s_h2d);
  (void)cudaStreamSynchronize(d->s_comp);
  (void)cudaStreamSynchronize(d->s_d2h);
}

extern "C" void lane_release(devctx *d, devbuf *buf, lane_events *ev,
                             int nin, lane_inputs *in, int rc) {
  for (int k = 0; k < LANE_NBUF; k++) devmem_free(d, &buf[k]);
  lane_events_destroy(ev);
  lane_inputs_free(d, nin, in);
  (void)cudaGetLastError();
  dev_end(d, rc);
}
