/* test_device.c — the CUDA device layer and matmul on a real GPU.
 *
 * Checks: discovery (/v1/devices fields agree with the device), the
 * self-benchmark's rates, matmul on every GPU against a float64 triple-loop
 * reference on random non-zero inputs with NaN-poisoned outputs (float64
 * within 1e-12, float32 within 2e-5 relative to a scale of 1: inputs are
 * in [-1, 1], sums over k <= 200), every transpose and bias shape, batches
 * and 1-D operands; the resident cache (a repeated job's h2d is 0); error
 * paths: a matmul too large for the device (T_ETOOLARGE before anything
 * moves), out of device memory (T_ENOMEM, and the device stays healthy and
 * works afterwards); health marking after GPU_FAIL_LIMIT device errors.
 * Exits 77 ("SKIPPED: no CUDA device") where there is no GPU.
 */
#include "compute/kinds/gpu_kernels.h"
#include "gpu_test_util.h"

#if TESSEL_HAVE_CUDA
#include <cuda_runtime_api.h>

static double g_tol64 = 1e-12, g_tol32 = 2e-5;

/* out = op(a) @ op(b) + bias, float64, NumPy 2-D / batched-equal rules. */
static tarray *ref_matmul(const tarray *a, const tarray *b, const tarray *bias,
                          int ta, int tb, const tarray *out) {
  tarray *r = tarray_new(T_F64, out->ndim, out->shape);
  int64_t ar = a->ndim == 1 ? 1 : a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
  int64_t br = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2],
          bc = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
  int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  int64_t batch = out->size / (m * n);
  int64_t abat = a->size / (ar * ac), bbat = b->size / (br * bc);
  for (int64_t q = 0; q < batch; q++) {
    int64_t oa = (abat == 1 ? 0 : q) * ar * ac, ob = (bbat == 1 ? 0 : q) * br * bc;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t t = 0; t < k; t++) {
          double x = tarray_get(a, oa + (ta ? t * ac + i : i * ac + t));
          double y = tarray_get(b, ob + (tb ? j * bc + t : t * bc + j));
          s += x * y;
        }
        int64_t o = q * m * n + i * n + j;
        if (bias) {
          /* bias broadcast over [.., m, n]: right-aligned */
          int64_t bo = 0, mul = 1, rem = o;
          for (int dd = out->ndim - 1, bd = bias->ndim - 1; dd >= 0; dd--, bd--) {
            int64_t idx = rem % out->shape[dd];
            rem /= out->shape[dd];
            if (bd < 0) continue;
            if (bias->shape[bd] != 1) bo += idx * mul;
            mul *= bias->shape[bd];
          }
          s += tarray_get(bias, bo);
        }
        tarray_set(r, o, s);
      }
  }
  return r;
}

static void one_matmul(int dev, tdtype dt, int and, const int64_t *as, int bnd,
                       const int64_t *bs, int bind, const int64_t *bis, int ta,
                       int tb, int ond, const int64_t *os, uint64_t seed) {
  tarray *a = tu_random(dt, and, as, seed, -1, 1);
  tarray *b = tu_random(dt, bnd, bs, seed + 1, -1, 1);
  tarray *bias = bind >= 0 ? tu_random(dt, bind, bis, seed + 2, -1, 1) : NULL;
  tarray *out = tu_poisoned(dt, ond, os);
  tu_job j;
  tu_job_init(&j, dev);
  terr e;
  terr_clear(&e);
  int rc = gpu_matmul(dev, a, b, bias, ta, tb, NULL, out, &j.ctx, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  tarray *ref = ref_matmul(a, b, bias, ta, tb, out);
  double err = tu_max_rel(out, ref, 1.0);
  CHECK_MSG(err <= (dt == T_F64 ? g_tol64 : g_tol32),
            "dev %d %s ta=%d tb=%d bias=%d: error %.3g", dev, tdtype_name(dt),
            ta, tb, bind, err);
  CHECK(j.ctx.t_compute > 0);
  tarray_free(a);
  tarray_free(b);
  tarray_free(bias);
  tarray_free(out);
  tarray_free(ref);
}

TEST(devices_json) {
  json_t *j = gpu_devices_json();
  CHECK(json_is_true(json_object_get(j, "available")));
  CHECK_STR(json_string_value(json_object_get(j, "reason")), "");
  CHECK(json_is_string(json_object_get(j, "driver_version")));
  CHECK(json_is_string(json_object_get(j, "runtime_version")));
  json_t *devs = json_object_get(j, "devices");
  CHECK((int)json_array_size(devs) == gpu_count());
  for (size_t i = 0; i < json_array_size(devs); i++) {
    json_t *d = json_array_get(devs, i);
    CHECK(json_integer_value(json_object_get(d, "index")) == (json_int_t)i);
    CHECK(strlen(json_string_value(json_object_get(d, "name"))) > 0);
    const char *cc = json_string_value(json_object_get(d, "compute_capability"));
    CHECK(cc && strchr(cc, '.') != NULL);
    CHECK(json_integer_value(json_object_get(d, "multiprocessors")) > 0);
    json_int_t tot = json_integer_value(json_object_get(d, "memory_total"));
    json_int_t fr = json_integer_value(json_object_get(d, "memory_free"));
    CHECK(tot > 0 && fr > 0 && fr <= tot);
    CHECK(json_is_true(json_object_get(d, "healthy")));
    printf("     device %zu: %s cc %s, %lld SMs, %.1f GiB (driver %s)\n", i,
           json_string_value(json_object_get(d, "name")), cc,
           (long long)json_integer_value(json_object_get(d, "multiprocessors")),
           (double)tot / (1 << 30),
           json_string_value(json_object_get(j, "driver_version")));
  }
  json_decref(j);
}

TEST(rates) {
  for (int d = 0; d < gpu_count(); d++) {
    gpu_rates r;
    terr e;
    terr_clear(&e);
    CHECK_MSG(gpu_measure_rates(d, &r, &e) == 0, "%s", e.message);
    /* Each was measured (positive, finite); the figures are printed, not
     * asserted: how fast a shared GPU host runs is not a test's verdict. */
    const double got[] = {r.h2d_pinned,   r.d2h_pinned, r.h2d_pageable,
                          r.d2h_pageable, r.d2d,        r.launch_s};
    for (size_t k = 0; k < sizeof got / sizeof got[0]; k++)
      CHECK_MSG(isfinite(got[k]) && got[k] > 0, "dev %d: rate %zu is %g", d, k, got[k]);
    printf("     dev %d: h2d %.1f/%.1f GB/s (pinned/pageable), d2h %.1f/%.1f, "
           "d2d %.0f GB/s, launch %.1f us\n",
           d, r.h2d_pinned / 1e9, r.h2d_pageable / 1e9, r.d2h_pinned / 1e9,
           r.d2h_pageable / 1e9, r.d2d / 1e9, r.launch_s * 1e6);
  }
}

TEST(matmul_shapes) {
  for (int dev = 0; dev < gpu_count(); dev++) {
    for (int dti = 0; dti < 2; dti++) {
      tdtype dt = dti ? T_F32 : T_F64;
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
          int64_t m = 37, k = 53, n = 29;
          int64_t as[2] = {ta ? k : m, ta ? m : k};
          int64_t bs[2] = {tb ? n : k, tb ? k : n};
          int64_t os[2] = {m, n};
          int64_t bias_n[1] = {n}, bias_m1[2] = {m, 1}, bias_mn[2] = {m, n};
          one_matmul(dev, dt, 2, as, 2, bs, -1, NULL, ta, tb, 2, os, 11);
          one_matmul(dev, dt, 2, as, 2, bs, 1, bias_n, ta, tb, 2, os, 12);
          one_matmul(dev, dt, 2, as, 2, bs, 2, bias_m1, ta, tb, 2, os, 13);
          one_matmul(dev, dt, 2, as, 2, bs, 2, bias_mn, ta, tb, 2, os, 14);
          one_matmul(dev, dt, 2, as, 2, bs, 0, NULL, ta, tb, 2, os, 15);
        }
      /* Batches: [3, 17, 19] @ [19, 11] and [3, 17, 19] @ [3, 19, 11]. */
      int64_t a3[3] = {3, 17, 19}, b2[2] = {19, 11}, b3[3] = {3, 19, 11},
              o3[3] = {3, 17, 11}, bias3[1] = {11};
      one_matmul(dev, dt, 3, a3, 2, b2, 1, bias3, 0, 0, 3, o3, 21);
      one_matmul(dev, dt, 3, a3, 3, b3, -1, NULL, 0, 0, 3, o3, 22);
      /* 1-D: [200] @ [200, 7] -> [7]; [9, 200] @ [200] -> [9]. */
      int64_t v[1] = {200}, m2[2] = {200, 7}, o1[1] = {7}, m3[2] = {9, 200},
              o9[1] = {9};
      one_matmul(dev, dt, 1, v, 2, m2, -1, NULL, 0, 0, 1, o1, 31);
      one_matmul(dev, dt, 2, m3, 1, v, -1, NULL, 0, 0, 1, o9, 32);
      /* A larger one through the pinned slots (> 1 MiB per operand). */
      int64_t la[2] = {700, 600}, lb[2] = {600, 500}, lo[2] = {700, 500},
              lbias[1] = {500};
      one_matmul(dev, dt, 2, la, 2, lb, 1, lbias, 0, 0, 2, lo, 41);
    }
  }
}

TEST(matmul_resident) {
  int64_t as[2] = {600, 400}, bs[2] = {400, 300}, os[2] = {600, 300};
  tarray *a = tu_random(T_F64, 2, as, 5, -1, 1), *b = tu_random(T_F64, 2, bs, 6, -1, 1);
  const char *ids[3] = {"a_TESTRESIDENTA", "a_TESTRESIDENTB", NULL};
  tarray *ref = NULL;
  for (int rep = 0; rep < 2; rep++) {
    tarray *out = tu_poisoned(T_F64, 2, os);
    tu_job j;
    tu_job_init(&j, 0);
    terr e;
    terr_clear(&e);
    CHECK_MSG(gpu_matmul(0, a, b, NULL, 0, 0, ids, out, &j.ctx, &e) == 0, "%s",
              e.message);
    if (rep == 0) {
      CHECK(j.ctx.t_h2d > 0);
      ref = ref_matmul(a, b, NULL, 0, 0, out);
    } else {
      CHECK_MSG(j.ctx.t_h2d == 0, "second run h2d %.3f ms", j.ctx.t_h2d);
    }
    CHECK(tu_max_rel(out, ref, 1.0) <= g_tol64);
    tarray_free(out);
  }
  json_t *dj = gpu_devices_json();
  json_t *d0 = json_array_get(json_object_get(dj, "devices"), 0);
  CHECK(json_integer_value(json_object_get(d0, "resident_bytes")) >=
        (json_int_t)(a->size + b->size) * 8);
  json_decref(dj);
  gpu_resident_drop(ids[0]);
  gpu_resident_drop(ids[1]);
  dj = gpu_devices_json();
  d0 = json_array_get(json_object_get(dj, "devices"), 0);
  CHECK(json_integer_value(json_object_get(d0, "resident_bytes")) == 0);
  json_decref(dj);
  tarray_free(a);
  tarray_free(b);
  tarray_free(ref);
}

TEST(matmul_too_large) {
  /* Shapes only: the size check comes before any data is read. */
  tarray a, b, out;
  memset(&a, 0, sizeof a);
  a.dtype = T_F64;
  a.ndim = 2;
  a.shape[0] = 400000;
  a.shape[1] = 400000;
  a.size = a.shape[0] * a.shape[1];
  b = a;
  out = a;
  tu_job j;
  tu_job_init(&j, 0);
  terr e;
  terr_clear(&e);
  CHECK(gpu_matmul(0, &a, &b, NULL, 0, 0, NULL, &out, &j.ctx, &e) == T_ETOOLARGE);
  CHECK(strstr(e.message, "GPU memory") != NULL);
  CHECK(gpu_healthy(0));
}

TEST(out_of_memory) {
  /* Hold nearly all free memory, then ask for more than is left. */
  size_t fr = 0, tot = 0;
  cudaSetDevice(0);
  CHECK(cudaMemGetInfo(&fr, &tot) == cudaSuccess);
  void *hogs[64];
  int nh = 0;
  size_t left = fr;
  while (left > ((size_t)256 << 20) && nh < 64) {
    size_t want = left - ((size_t)128 << 20);
    if (want > ((size_t)8 << 30)) want = (size_t)8 << 30;
    void *p = NULL;
    if (cudaMalloc(&p, want) != cudaSuccess) {
      cudaGetLastError();
      break;
    }
    hogs[nh++] = p;
    left -= want;
  }
  int64_t as[2] = {6000, 6000};
  tarray *a = tu_random(T_F64, 2, as, 9, -1, 1);
  tarray *out = tu_poisoned(T_F64, 2, as);
  tu_job j;
  tu_job_init(&j, 0);
  terr e;
  terr_clear(&e);
  int rc = gpu_matmul(0, a, a, NULL, 0, 0, NULL, out, &j.ctx, &e);
  CHECK_MSG(rc == T_ENOMEM, "rc %d: %s", rc, e.message);
  CHECK(gpu_healthy(0));
  for (int i = 0; i < nh; i++) cudaFree(hogs[i]);
  /* The device works again once memory is back. */
  tarray_free(out);
  int64_t ss[2] = {64, 64};
  tarray *s = tu_random(T_F64, 2, ss, 10, -1, 1);
  out = tu_poisoned(T_F64, 2, ss);
  tu_job_init(&j, 0);
  terr_clear(&e);
  CHECK_MSG(gpu_matmul(0, s, s, NULL, 0, 0, NULL, out, &j.ctx, &e) == 0, "%s",
            e.message);
  tarray *ref = ref_matmul(s, s, NULL, 0, 0, out);
  CHECK(tu_max_rel(out, ref, 1.0) <= g_tol64);
  tarray_free(ref);
  tarray_free(s);
  tarray_free(a);
  tarray_free(out);
}

/* gpu_warm_start: off with TESSEL_GPU_WARM=0 (nothing to wait for); on,
 * every device's pinned slots are made (or were there already) once it is
 * joined, and a second wait has nothing to join. Then a job runs as ever. */
TEST(warm_up) {
  setenv("TESSEL_GPU_WARM", "0", 1);
  gpu_warm_start();
  CHECK(gpu_warm_wait() == -1);
  unsetenv("TESSEL_GPU_WARM");
  gpu_warm_start();
  CHECK(gpu_warm_wait() == gpu_count());
  CHECK(gpu_warm_wait() == -1);
  int64_t as[2] = {64, 64};
  int64_t bs[2] = {64, 32};
  one_matmul(gpu_count() - 1, T_F64, 2, as, 2, bs, -1, NULL, 0, 0, 2, bs, 41);
}

TEST(health_marking) {
  /* Last test: it leaves device 0 unhealthy. */
  for (int i = 0; i < GPU_FAIL_LIMIT - 1; i++) gpu_note_result(0, T_EDEVICE);
  CHECK(gpu_healthy(0));
  gpu_note_result(0, 0); /* a success resets the run */
  gpu_note_result(0, T_ENOMEM); /* not a device fault */
  for (int i = 0; i < GPU_FAIL_LIMIT - 1; i++) gpu_note_result(0, T_EDEVICE);
  CHECK(gpu_healthy(0));
  gpu_note_result(0, T_EDEVICE);
  CHECK(!gpu_healthy(0));
  json_t *j = gpu_devices_json();
  CHECK(json_is_false(json_object_get(json_array_get(json_object_get(j, "devices"), 0), "healthy")));
  json_decref(j);
}

int main(void) {
  CHECK(gpu_init() == 0);
  if (gpu_count() == 0) SKIP_ALL_NO_GPU("no CUDA device (%s)", gpu_unavailable_reason());
  RUN(devices_json);
  RUN(rates);
  RUN(matmul_shapes);
  RUN(matmul_resident);
  RUN(matmul_too_large);
  RUN(out_of_memory);
  RUN(warm_up);
  RUN(health_marking);
  gpu_shutdown();
  return check_summary();
}

#else /* !TESSEL_HAVE_CUDA: nothing to test without the CUDA layer */
int main(void) { SKIP_ALL("CUDA support not built"); }
#endif
