/* devices.c — the GPU runtime's read-only reports, as the API shows them:
 * how many GPUs the service computes on (/v1/info's features.cuda) and
 * the /v1/devices "cuda" object, the runtime's list annotated with each
 * device's utilisation and memory in use through NVML. Here, not in api/,
 * so that the API calls no gpu_* function (tests/layout/check_layout.py
 * rule 8); nothing here changes a device's state.
 */
#include "compute/gpu/gpu.h"
#include "compute/jobs/jobs.h"

int jobs_gpu_count(void) { return gpu_count(); }

json_t *jobs_devices_json(void) {
  json_t *cuda = gpu_devices_json();
  gpu_nvml_annotate(cuda); /* utilisation per device, through NVML */
  return cuda;
}
