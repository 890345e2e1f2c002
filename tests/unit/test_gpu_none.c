/* test_gpu_none.c — the GPU facade on a machine without a usable GPU (CI):
 * gpu_init succeeds, says why there is no GPU, and every GPU entry point
 * answers "unavailable" instead of failing or exiting. On a machine WITH a
 * GPU the test is skipped (tests/gpu/ covers that case). */
#include "check.h"
#include "compute/gpu/gpu.h"
#include "compute/kinds/gpu_kernels.h"

TEST(no_device_has_reason) {
  const char *why = gpu_unavailable_reason();
  CHECK(why != NULL && why[0] != 0);
  json_t *j = gpu_devices_json();
  CHECK(j != NULL);
  CHECK(json_is_false(json_object_get(j, "available")));
  CHECK_STR(json_string_value(json_object_get(j, "reason")), why);
  CHECK(json_array_size(json_object_get(j, "devices")) == 0);
  json_decref(j);
  CHECK(gpu_healthy(0) == 0);
  gpu_note_result(0, T_EDEVICE); /* no device: a no-op, never a crash */
  gpu_lock(0);
  gpu_unlock(0);
  gpu_resident_drop("a_nothing");
  CHECK(gpu_resident_mask("a_nothing", 0, 8) == 0);
}

TEST(entry_points_answer_unavailable) {
  terr e;
  terr_clear(&e);
  gpu_rates r;
  CHECK(gpu_measure_rates(0, &r, &e) == T_EUNAVAIL);
  int64_t shape[2] = {2, 2};
  tarray *a = tarray_zeros(T_F64, 2, shape), *c = tarray_zeros(T_F64, 2, shape);
  job_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  terr_clear(&e);
  CHECK(gpu_matmul(0, a, a, NULL, 0, 0, NULL, c, &ctx, &e) == T_EUNAVAIL);
  CHECK(e.code == T_EUNAVAIL && e.message[0] != 0);
  terr_clear(&e);
  const tarray *ins[1] = {a};
  CHECK(gpu_map(0, NULL, ins, NULL, c, &ctx, &e) == T_EUNAVAIL);
  terr_clear(&e);
  CHECK(gpu_reduce(0, R_SUM, NULL, ins, NULL, -1, c, &ctx, &e) == T_EUNAVAIL);
  tarray_free(a);
  tarray_free(c);
}

int main(void) {
  CHECK(gpu_init() == 0);
  if (gpu_count() > 0) {
    gpu_shutdown();
    SKIP_ALL("a CUDA device is present; tests/gpu/ covers it");
  }
  RUN(no_device_has_reason);
  RUN(entry_points_answer_unavailable);
  gpu_shutdown();
  return check_summary();
}
