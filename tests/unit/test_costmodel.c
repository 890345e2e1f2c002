/* test_costmodel.c — the router's cost model (sched/costmodel.c), without a
 * GPU: the model picks the backend with the smallest estimate and says so
 * with every figure; estimates grow with the work and the bytes; a GPU is
 * chosen for heavy work only when one is usable, and not when copying the
 * data costs more than computing it on the CPU; corrections from recorded
 * timings converge on the measured/estimated ratio and stay bounded; the
 * JSON cache round-trips, and a bad one is refused naming the field; the
 * self-benchmark measures positive rates, and cm_init writes the cache and
 * reads it back on the next start. */
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "sched/costmodel.h"
#include "gpu/gpu.h"
#include "sched/router.h"

/* A machine like the H100 host: 16 threads, ~1 G VM ops/s per thread. */
static cm_rates rates(int gpus) {
  cm_rates r;
  memset(&r, 0, sizeof r);
  r.threads = 16;
  r.vm_ops_1 = 1e9;
  r.vm_ops_n = 12e9;
  r.copy_n = 40e9;
  r.stream_1 = 14e9;
  r.stream_n = 150e9;
  r.fault_1 = 2.5e9;
  r.fault_n = 30e9;
  r.gang = 16;
  r.gemm_1 = 40e9;
  r.serial_fixed_s = 5e-6;
  r.cpu_fixed_s = 1e-4;
  r.gpus = gpus;
  r.h2d = r.d2h = 50e9;
  r.h2d_pageable = 10e9;
  r.d2h_pageable = 18e9;
  r.dev_bw = 3e12;
  r.gpu_flops = 5e13;
  r.gpu_ops = 1.2e13;
  r.gpu_fixed_s = 3e-4;
  r.chunk_bytes = 32 << 20;
  return r;
}

static job_estimate map_est(double n, double ops_per_elem) {
  job_estimate e;
  memset(&e, 0, sizeof e);
  e.ops_per_elem = ops_per_elem;
  e.work = n * ops_per_elem;
  e.in_bytes = (int64_t)(8 * n);
  e.out_bytes = (int64_t)(8 * n);
  e.size = (int64_t)n;
  return e;
}

static tbackend choose(const cm_model *m, tkind k, const job_estimate *e,
                       int gpu_ok, char *reason) {
  tbackend b = B_AUTO;
  json_t *j = NULL;
  CHECK(cm_model_choose(m, k, e, gpu_ok, &b, reason, 200, &j) == 0);
  CHECK(j != NULL);
  /* the choice is the smallest of the estimates it reports */
  double best = json_number_value(json_object_get(j, "serial_ms"));
  double cpu = json_number_value(json_object_get(j, "cpu_ms"));
  json_t *cj = json_object_get(j, "cuda_ms");
  if (cpu < best) best = cpu;
  if (json_is_number(cj) && json_number_value(cj) < best) best = json_number_value(cj);
  CHECK_NEAR(cm_model_ms(m, k, e, b), best, 1e-9 * best);
  CHECK_STR(json_string_value(json_object_get(j, "choice")),
            b == B_CUDA ? "cuda" : b == B_CPU ? "cpu" : "serial");
  json_decref(j);
  return b;
}

TEST(picks_the_fastest) {
  cm_model m;
  cm_rates r = rates(1);
  cm_model_init(&m, &r);
  char why[200];
  job_estimate tiny = map_est(100, 4), mid = map_est(1e6, 4),
               big = map_est(1e9, 1), heavy = map_est(1e8, 200);
  CHECK(choose(&m, K_MAP, &tiny, 1, why) == B_SERIAL);
  CHECK(strncmp(why, "estimate serial ", 16) == 0);
  CHECK(choose(&m, K_MAP, &mid, 0, why) == B_CPU);
  CHECK(strstr(why, "no usable GPU") != NULL);
  CHECK(choose(&m, K_MAP, &heavy, 1, why) == B_CUDA);
  CHECK(strncmp(why, "estimate cuda ", 14) == 0 && strstr(why, ", cpu ") &&
        strstr(why, ", serial "));
  CHECK(choose(&m, K_MAP, &heavy, 0, why) == B_CPU);
  /* x+1 over 1e9: staging 16 GB through the host (~0.47 s) vs 1e9 ops on
   * 12 G ops/s plus writing the result (~0.35 s). */
  CHECK(choose(&m, K_MAP, &big, 1, why) == B_CPU);
  /* The same with a slow CPU goes to the GPU. */
  r.vm_ops_n = 1e9;
  cm_model_init(&m, &r);
  CHECK(choose(&m, K_MAP, &big, 1, why) == B_CUDA);
  /* matmul 4096^3: 137 GFLOP; cuda ~3 ms + copies vs cpu ~0.3 s */
  job_estimate mm;
  memset(&mm, 0, sizeof mm);
  mm.work = 2.0 * 4096 * 4096 * 4096;
  mm.in_bytes = 2 * 8 * 4096 * 4096;
  mm.out_bytes = 8 * 4096 * 4096;
  CHECK(choose(&m, K_MATMUL, &mm, 1, why) == B_CUDA);
  cm_rates nog = rates(0);
  cm_model_init(&m, &nog);
  CHECK(choose(&m, K_MATMUL, &mm, 1, why) == B_CPU); /* no GPU measured */
}

TEST(monotonic) {
  cm_model m;
  cm_rates r = rates(1);
  cm_model_init(&m, &r);
  for (int b = B_SERIAL; b <= B_CUDA; b++) {
    double prev = 0;
    for (double n = 1e3; n <= 1e10; n *= 10) {
      job_estimate e = map_est(n, 4);
      double ms = cm_model_ms(&m, K_MAP, &e, (tbackend)b);
      CHECK(ms > prev);
      prev = ms;
    }
  }
}

TEST(corrections) {
  cm_model m;
  cm_rates r = rates(1);
  cm_model_init(&m, &r);
  job_estimate e = map_est(1e7, 4);
  double raw = cm_model_ms(&m, K_MAP, &e, B_CPU);
  for (int i = 0; i < 60; i++) cm_model_observe(&m, K_MAP, &e, B_CPU, 3 * raw);
  CHECK_NEAR(m.corr[K_MAP][B_CPU], 3.0, 0.01);
  CHECK_NEAR(cm_model_ms(&m, K_MAP, &e, B_CPU), 3 * raw, 0.01 * raw);
  CHECK(m.nobs[K_MAP][B_CPU] == 60);
  CHECK(m.corr[K_MAP][B_SERIAL] == 1.0); /* other pairs untouched */
  CHECK(m.corr[K_REDUCE][B_CPU] == 1.0);
  for (int i = 0; i < 200; i++) cm_model_observe(&m, K_MAP, &e, B_CUDA, 1e12);
  CHECK(m.corr[K_MAP][B_CUDA] <= 20.0);  /* bounded */
  cm_model_observe(&m, K_MAP, &e, B_AUTO, 5);  /* ignored */
  cm_model_observe(&m, K_MAP, &e, B_CPU, -1);  /* ignored */
  CHECK(m.nobs[K_MAP][B_CPU] == 60);
}

TEST(json_roundtrip) {
  cm_model m, back;
  cm_rates r = rates(2);
  cm_model_init(&m, &r);
  m.corr[K_REDUCE][B_CUDA] = 1.75;
  m.nobs[K_REDUCE][B_CUDA] = 9;
  json_t *j = cm_model_to_json(&m);
  terr e;
  terr_clear(&e);
  CHECK(cm_model_from_json(j, &back, &e) == 0);
  CHECK(back.r.threads == 16 && back.r.gpus == 2);
  CHECK_NEAR(back.r.dev_bw, 3e12, 1);
  CHECK_NEAR(back.corr[K_REDUCE][B_CUDA], 1.75, 1e-12);
  CHECK(back.nobs[K_REDUCE][B_CUDA] == 9);
  json_object_set_new(json_object_get(j, "rates"), "vm_ops_1", json_string("x"));
  CHECK(cm_model_from_json(j, &back, &e) == T_EINVAL);
  CHECK_STR(e.field, "calibration.rates.vm_ops_1");
  json_decref(j);
}

TEST(calibrate_and_cache) {
  cm_rates r;
  terr e;
  terr_clear(&e);
  CHECK(cm_calibrate(&r, 2, &e) == 0);
  CHECK(r.vm_ops_1 > 1e6 && r.vm_ops_n > 1e6 && r.copy_n > 1e7 && r.gemm_1 > 1e7);
  CHECK(r.stream_1 > 1e7 && r.stream_n > 1e7 && r.fault_1 > 1e7 && r.fault_n > 1e7);
  CHECK(r.gpus == gpu_count());
  char dir[] = "/tmp/tessel-router-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/calibration.json", dir);
  CHECK(cm_init(path, 2, &e) == 0);
  CHECK(cm_ready());
  CHECK(access(path, R_OK) == 0);
  job_estimate je = map_est(1e6, 4);
  for (int i = 0; i < 16; i++) cm_observe(K_MAP, &je, B_SERIAL, 1234.0);
  cm_model a;
  cm_get(&a);
  CHECK(a.nobs[K_MAP][B_SERIAL] == 16);
  cm_shutdown();
  CHECK(!cm_ready());
  /* Next start: read back (same threads and GPUs), corrections kept. */
  CHECK(cm_init(path, 2, &e) == 0);
  cm_model b;
  cm_get(&b);
  CHECK(b.nobs[K_MAP][B_SERIAL] == 16);
  CHECK_NEAR(b.r.vm_ops_1, a.r.vm_ops_1, 1e-6 * a.r.vm_ops_1);
  tbackend ch;
  char why[200];
  CHECK(cm_choose(K_MAP, &je, 0, &ch, why, sizeof why, NULL) == 0);
  CHECK(strncmp(why, "estimate ", 9) == 0);
  /* The router's entry point uses the model now, the size rule after. */
  kind_ops k = {.kind = K_MAP, .name = "map"};
  json_t *est = NULL;
  CHECK(router_choose(&k, &je, 0, &ch, why, sizeof why, &est) == 0);
  CHECK(strncmp(why, "estimate ", 9) == 0);
  CHECK_STR(json_string_value(json_object_get(est, "model")), "calibrated");
  json_decref(est);
  router_observe(&k, &je, B_CPU, 5.0);
  cm_get(&b);
  CHECK(b.nobs[K_MAP][B_CPU] == 1);
  router_shutdown();
  CHECK(router_choose(&k, &je, 0, &ch, why, sizeof why, NULL) == 0);
  CHECK(strncmp(why, "estimate ", 9) != 0);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  gpu_init();
  RUN(picks_the_fastest);
  RUN(monotonic);
  RUN(corrections);
  RUN(json_roundtrip);
  RUN(calibrate_and_cache);
  gpu_shutdown();
  return check_summary();
}
