/* test_gpu_nvml.c — compute/gpu/nvml.c without NVML: the library named is absent
 * (as on a machine without the NVIDIA driver, and in every CUDA-less
 * build), and nothing may fail but the figure.
 *
 * Asserts: the reason names the library; a devices answer with no device
 * gains nothing; each device of a (hand-made) answer gets "utilization":
 * null and a "utilization_unavailable" string naming the library, its
 * other fields untouched; a second call gives the same (the load is tried
 * once); gpu_devices_json of this build still annotates cleanly.
 */
#include <string.h>

#include "check.h"
#include "compute/gpu/gpu.h"

#define NO_LIB "libtessel-test-no-such-nvml.so.1"

TEST(absent_library) {
  gpu_nvml_set_library(NO_LIB);
  const char *why = gpu_nvml_unavailable_reason();
  CHECK_MSG(why && strstr(why, NO_LIB) != NULL, "reason: %s", why ? why : "(null)");

  json_t *none = json_pack("{s:b, s:[]}", "available", 0, "devices");
  gpu_nvml_annotate(none);
  CHECK(json_object_size(none) == 2 && json_array_size(json_object_get(none, "devices")) == 0);
  json_decref(none);

  for (int round = 0; round < 2; round++) {
    json_t *cuda = json_pack("{s:b, s:[{s:i, s:s}, {s:i, s:s, s:s}]}", "available", 1,
                             "devices", "index", 0, "name", "A", "index", 1, "name", "B",
                             "pci_bus_id", "00000000:3B:00.0");
    gpu_nvml_annotate(cuda);
    json_t *devs = json_object_get(cuda, "devices");
    for (size_t i = 0; i < 2; i++) {
      json_t *d = json_array_get(devs, i);
      CHECK(json_is_null(json_object_get(d, "utilization")));
      const char *u = json_string_value(json_object_get(d, "utilization_unavailable"));
      CHECK_MSG(u && strstr(u, NO_LIB), "device %zu: %s", i, u ? u : "(none)");
      CHECK(json_integer_value(json_object_get(d, "index")) == (json_int_t)i);
      CHECK(strcmp(json_string_value(json_object_get(d, "name")), i ? "B" : "A") == 0);
    }
    json_decref(cuda);
  }

  json_t *real = gpu_devices_json();
  gpu_nvml_annotate(real);
  json_t *v;
  size_t i;
  json_array_foreach(json_object_get(real, "devices"), i, v)
    CHECK(json_is_null(json_object_get(v, "utilization")));
  json_decref(real);
}

int main(void) {
  RUN(absent_library);
  return check_summary();
}
