/* router.c — the "auto" backend rule.
 *
 * With the calibrated cost model loaded (router_init), router_choose asks
 * it (compute/sched/route/costmodel.c): the estimated time on every backend from this
 * machine's measured rates, the fastest chosen, the reason naming the
 * figures ("estimate cuda 12 ms, cpu 840 ms, serial 1600 ms"). Without it
 * (before the scheduler starts, or in tests that do not calibrate), the
 * size rule below:
 *
 * The kind's estimate gives `work` in a kind-specific unit (map/reduce:
 * elements x VM instructions, matmul: flops, geodesic: point pairs); the
 * kind's cost (kind_cost: unit, unit_ns) gives a rough single-core cost
 * per unit, which turns it into "ms on one core":
 *
 *   serial  when that is under 0.2 ms: waking other threads and splitting
 *           the work costs tens of microseconds, more than it saves;
 *   cuda    when a usable GPU is there, the job takes at least 20 ms on one
 *           core, and moving its bytes over PCIe (10 GB/s, pageable) costs
 *           under a quarter of the time the CPU pool would take;
 *   cpu     otherwise (the thread pool).
 *
 * The per-unit costs are order-of-magnitude figures for a current x86 core,
 * not measurements of this machine. Keep this the only entry point
 * (router.h). No kind is named here: what differs between kinds comes
 * from their kind_cost.
 */
#include "compute/sched/route/router.h"

#include <stdatomic.h>

#include "compute/sched/route/costmodel.h"

#include <stdio.h>
#include <unistd.h>

#define ROUTER_SERIAL_MAX_MS 0.2
#define ROUTER_GPU_MIN_MS 20.0
#define ROUTER_PCIE_BYTES_PER_MS 1.0e7 /* 10 GB/s */

/* "1000 elements" / "5000 points": the size in the words a user knows
 * (est->size when the kind gives it, else the work in its unit). */
static void router_size_words(const kind_cost *c, const job_estimate *est,
                              char *buf, size_t len) {
  if (est->size > 0)
    snprintf(buf, len, "%lld %s", (long long)est->size, c->size_words);
  else if (c->size_from_ops && est->ops_per_elem > 0)
    snprintf(buf, len, "%.0f %s", est->work / est->ops_per_elem,
             c->size_words);
  else
    snprintf(buf, len, "%.3g %s", est->work, c->unit);
}

int router_init(const char *calibration_path, const char *results_dir,
                int threads, int64_t row_max, int64_t inline_max, terr *e) {
  return cm_init(calibration_path, results_dir, threads, row_max, inline_max,
                 e);
}

void router_observe(const kind_ops *k, const job_estimate *est, tbackend b,
                    double ms) {
  if (k && est) cm_observe(k, est, b, ms);
}

void router_shutdown(void) { cm_shutdown(); }

/* Online cores, read once: sysconf reads /sys on every call, which cost
 * more than the rest of a tiny job's routing. */
static long router_cores(void) {
  static atomic_long cached;
  long n = atomic_load_explicit(&cached, memory_order_relaxed);
  if (n > 0) return n;
  n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  atomic_store_explicit(&cached, n, memory_order_relaxed);
  return n;
}

/* The size rule's figures as members of a JSON object (no braces; not
 * "work", which the job's estimate holds already). */
static void size_rule_text(tbuf *b, const char *unit, double serial_ms,
                           double cpu_ms, long ncores, double transfer_ms,
                           int gpu_available, int digits) {
  tbuf_adds(b, "\"model\":\"size-rule\",\"unit\":");
  tbuf_json_str(b, unit);
  tbuf_adds(b, ",\"serial_ms\":");
  tbuf_json_real(b, serial_ms, digits);
  tbuf_adds(b, ",\"cpu_ms\":");
  tbuf_json_real(b, cpu_ms, digits);
  tbuf_adds(b, ",\"cores\":");
  tbuf_json_int(b, ncores);
  tbuf_adds(b, ",\"transfer_ms\":");
  tbuf_json_real(b, transfer_ms, digits);
  tbuf_adds(b, gpu_available ? ",\"gpu_available\":true"
                             : ",\"gpu_available\":false");
}

int router_choose_text(const kind_ops *k, const job_estimate *est,
                       int gpu_available, tbackend *chosen, char *reason,
                       size_t reason_len, tbuf *figs, int digits) {
  if (k && cm_ready())
    return cm_choose_text(k, est, gpu_available, chosen, reason, reason_len,
                          figs, digits);
  const kind_cost *c = kind_cost_of(k);
  double ns = c->unit_ns;
  const char *unit = c->unit;
  double work = est->work > 0 ? est->work : 0;
  long ncores = router_cores();
  double serial_ms = work * ns / 1e6;
  double cpu_ms = serial_ms / (double)ncores;
  double bytes = (double)(est->in_bytes > 0 ? est->in_bytes : 0) +
                 (double)(est->out_bytes > 0 ? est->out_bytes : 0);
  double transfer_ms = bytes / ROUTER_PCIE_BYTES_PER_MS;
  char size[64];
  router_size_words(c, est, size, sizeof size);

  if (serial_ms < ROUTER_SERIAL_MAX_MS) {
    *chosen = B_SERIAL;
    snprintf(reason, reason_len,
             "small job (%s): serial avoids thread hand-off", size);
  } else if (gpu_available && serial_ms >= ROUTER_GPU_MIN_MS &&
             transfer_ms < cpu_ms / 4) {
    *chosen = B_CUDA;
    snprintf(reason, reason_len,
             "large job (%s, about %.0f ms on %ld cores): cuda, copies "
             "about %.1f ms", size, cpu_ms, ncores, transfer_ms);
  } else {
    *chosen = B_CPU;
    if (!gpu_available || serial_ms < ROUTER_GPU_MIN_MS)
      snprintf(reason, reason_len,
               "%s (about %.1f ms on one core): cpu pool of %ld threads%s",
               size, serial_ms, ncores,
               gpu_available ? "" : "; no usable GPU");
    else
      snprintf(reason, reason_len,
               "%s: cpu, copying %.3g MB to a GPU (about %.1f ms) would "
               "outweigh the compute (about %.1f ms)", size, bytes / 1e6,
               transfer_ms, cpu_ms);
  }
  if (!figs) return T_OK;
  size_rule_text(figs, unit, serial_ms, cpu_ms, ncores, transfer_ms,
                 gpu_available, digits);
  return figs->err ? T_ENOMEM : T_OK;
}

int router_choose(const kind_ops *k, const job_estimate *est,
                  int gpu_available, tbackend *chosen, char *reason,
                  size_t reason_len, json_t **estimates) {
  tbuf b;
  tbuf_init(&b, 0);
  int rc = router_choose_text(k, est, gpu_available, chosen, reason,
                              reason_len, estimates ? &b : NULL, 0);
  if (!estimates) return rc;
  *estimates = cm_figures_json(&b);
  return *estimates ? T_OK : T_ENOMEM;
}
