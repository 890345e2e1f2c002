/* cost.c — the expression VM's part of the cost model (kinds.h,
 * kind_cost): the terms of map and reduce, and of any kind that gives no
 * cost of its own.
 *
 * Work is VM instructions (job_estimate.work = elements x instructions per
 * element). On the CPU it runs at the measured VM rate, one thread's or
 * all the pool's together; on a GPU the fused kernel does the work at the
 * nominal operation rate while its bytes (inputs and result) pass through
 * device memory at the measured copy rate, the slower of the two setting
 * the time. Pure functions, any thread.
 */
#include <math.h>
#include <stdlib.h>

#include "compute/kinds/kinds.h"
#include "util/util.h"

int kind_gpu_sink(double bytes) {
  const char *v = getenv("TESSEL_GPU_SINK_MAX");
  int64_t cap;
  if (v && t_parse_i64(v, &cap) == 0 && cap >= 0) return bytes <= (double)cap;
  return bytes <= KIND_GPU_SINK_MAX;
}

double kind_vm_cpu_s(const job_estimate *est, int all, const kind_machine *m) {
  double work = est->work > 0 && isfinite(est->work) ? est->work : 0;
  return work / kind_rate_or_tiny(all ? m->vm_n : m->vm_1);
}

double kind_vm_gpu_s(const job_estimate *est, double bytes, double out,
                     const kind_machine *m) {
  double work = est->work > 0 && isfinite(est->work) ? est->work : 0;
  return fmax(bytes / kind_rate_or_tiny(m->dev_bw),
              work / kind_rate_or_tiny(m->gpu_ops));
}

const kind_cost kind_cost_vm = {
    .unit = "element-ops",
    .size_words = "elements",
    .size_from_ops = 1,
    .unit_ns = 1.0, /* a VM instruction */
    .cpu_s = kind_vm_cpu_s,
    .gpu_s = kind_vm_gpu_s,
};
