/* test_router.c — the size rule behind backend "auto" (compute/sched/route/router.c):
 * serial for work under 0.2 ms on one core, cuda for large work when a GPU
 * is usable and its copies are cheap next to the CPU pool's time, cpu
 * otherwise; the reason names the size in the kind's words; the estimates
 * JSON carries the figures. Pure function: no store, no threads.
 */
#include <unistd.h>

#include "check.h"
#include "compute/sched/route/router.h"

/* The built-in kinds, from the table (main): their kind_cost is what the
 * size rule reads. */
static const kind_ops *k_map, *k_matmul, *k_geo;

static job_estimate est_of(double work, int64_t size, int64_t in_bytes,
                           int64_t out_bytes) {
  job_estimate e;
  memset(&e, 0, sizeof e);
  e.work = work;
  e.size = size;
  e.ops_per_elem = 1;
  e.in_bytes = in_bytes;
  e.out_bytes = out_bytes;
  return e;
}

TEST(test_small_is_serial) {
  job_estimate e = est_of(1000, 1000, 8000, 8000);
  tbackend b = B_AUTO;
  char reason[256];
  json_t *est = NULL;
  CHECK(router_choose(k_map, &e, 1, &b, reason, sizeof reason, &est) == 0);
  CHECK(b == B_SERIAL);
  CHECK_STR(reason, "small job (1000 elements): serial avoids thread hand-off");
  CHECK_STR(json_string_value(json_object_get(est, "model")), "size-rule");
  CHECK_NEAR(json_number_value(json_object_get(est, "serial_ms")), 0.001, 1e-12);
  CHECK(json_is_true(json_object_get(est, "gpu_available")));
  json_decref(est);
  /* Without the size, the elements come from work / ops_per_elem. */
  e = est_of(600, 0, 0, 0);
  e.ops_per_elem = 3;
  router_choose(k_map, &e, 0, &b, reason, sizeof reason, NULL);
  CHECK(b == B_SERIAL && strstr(reason, "(200 elements)"));
}

TEST(test_large_goes_to_cuda_only_with_a_gpu) {
  /* 1e10 element-ops = ~10 s on one core; 16 MB to move = ~1.6 ms. */
  job_estimate e = est_of(1e10, 1000000, 8000000, 8000000);
  tbackend b;
  char reason[256];
  router_choose(k_map, &e, 1, &b, reason, sizeof reason, NULL);
  CHECK(b == B_CUDA);
  CHECK_MSG(strstr(reason, "large job (1000000 elements") != NULL, "%s", reason);
  router_choose(k_map, &e, 0, &b, reason, sizeof reason, NULL);
  CHECK(b == B_CPU);
  CHECK_MSG(strstr(reason, "no usable GPU") != NULL, "%s", reason);
}

TEST(test_copies_outweigh) {
  /* 3e7 element-ops (~30 ms on a core) but 800 MB to move (~80 ms). */
  job_estimate e = est_of(3e7, 50000000, 400000000, 400000000);
  tbackend b;
  char reason[256];
  router_choose(k_map, &e, 1, &b, reason, sizeof reason, NULL);
  CHECK(b == B_CPU);
  CHECK_MSG(strstr(reason, "would outweigh") != NULL, "%s", reason);
}

TEST(test_kind_units) {
  tbackend b;
  char reason[256];
  json_t *est = NULL;
  /* matmul: flops are cheap per unit, so 1e6 flops stay serial */
  job_estimate e = est_of(2e6, 1000000, 0, 0);
  router_choose(k_matmul, &e, 0, &b, reason, sizeof reason, &est);
  CHECK(b == B_SERIAL && strstr(reason, "1000000 m*k*n"));
  CHECK_STR(json_string_value(json_object_get(est, "unit")), "flops");
  json_decref(est);
  /* geodesic: 1000 pairs of Karney are ~0.4 ms: not serial any more */
  e = est_of(1000, 45, 720, 8000);
  router_choose(k_geo, &e, 0, &b, reason, sizeof reason, NULL);
  CHECK(b == B_CPU && strstr(reason, "45 points"));
  /* and a tiny geodesic job is serial */
  e = est_of(10, 5, 80, 200);
  router_choose(k_geo, &e, 1, &b, reason, sizeof reason, NULL);
  CHECK(b == B_SERIAL);
}

TEST(test_reason_fits_buffer) {
  job_estimate e = est_of(1e9, 123456789, 0, 0);
  tbackend b;
  char reason[16];
  router_choose(k_map, &e, 1, &b, reason, sizeof reason, NULL);
  CHECK(strlen(reason) == sizeof reason - 1);
}

/* The size rule's figures as the scheduler stores them (members text, 9
 * digits) are what jansson wrote for the tree it used to build, less
 * "work" (the job's estimate has it). */
TEST(test_size_rule_text) {
  job_estimate e = est_of(3e7, 50000000, 400000000, 400000000);
  tbackend b;
  char reason[256];
  tbuf t;
  tbuf_init(&t, 0);
  tbuf_add(&t, "{", 1);
  CHECK(router_choose_text(k_map, &e, 1, &b, reason, sizeof reason, &t, 9) ==
        0);
  tbuf_add(&t, "}", 1);
  char *text = tbuf_take(&t, NULL);
  json_t *est = NULL;
  router_choose(k_map, &e, 1, &b, reason, sizeof reason, &est);
  CHECK(est && json_object_get(est, "work") == NULL);
  char *want = json_dumps(est, JSON_COMPACT | JSON_REAL_PRECISION(9));
  CHECK_STR(text, want);
  json_t *old = json_pack("{s:s, s:s, s:f, s:f, s:i, s:f, s:b}", "model",
                          "size-rule", "unit", json_string_value(json_object_get(est, "unit")),
                          "serial_ms", json_number_value(json_object_get(est, "serial_ms")),
                          "cpu_ms", json_number_value(json_object_get(est, "cpu_ms")),
                          "cores", (int)json_integer_value(json_object_get(est, "cores")),
                          "transfer_ms", json_number_value(json_object_get(est, "transfer_ms")),
                          "gpu_available", 1);
  char *old_text = json_dumps(old, JSON_COMPACT | JSON_REAL_PRECISION(9));
  CHECK_STR(text, old_text);
  CHECK_NEAR(json_number_value(json_object_get(est, "serial_ms")), 30.0, 1e-9);
  free(old_text);
  json_decref(old);
  free(want);
  free(text);
  json_decref(est);
}

int main(void) {
  k_map = kind_find("map");
  k_matmul = kind_find("matmul");
  k_geo = kind_find("geodesic");
  RUN(test_small_is_serial);
  RUN(test_large_goes_to_cuda_only_with_a_gpu);
  RUN(test_copies_outweigh);
  RUN(test_kind_units);
  RUN(test_reason_fits_buffer);
  RUN(test_size_rule_text);
  return check_summary();
}
