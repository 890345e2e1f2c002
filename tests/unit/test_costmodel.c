/* test_costmodel.c — the router's cost model (compute/sched/route/costmodel.c), without a
 * GPU: the model picks the backend with the smallest estimate and says so
 * with every figure; estimates grow with the work and the bytes; a GPU is
 * chosen for heavy work only when one is usable, and not when copying the
 * data costs more than computing it on the CPU; the submit -> stored terms
 * (issue 11): a result that must be stored costs a GPU job at least its
 * d2h and its store (the 1e8 map is not sent to cuda any more),
 * a result kept in the store row costs no store, the store term does not
 * shrink with more threads, an input mapped from a file costs its page
 * faults, a resident input no h2d; corrections from recorded timings
 * converge on the measured/estimated ratio and stay bounded; the JSON
 * cache round-trips, and a bad one is refused naming the field; the
 * self-benchmark measures positive rates (the result files in the given
 * folder, which it leaves empty), and cm_init writes the cache and reads
 * it back on the next start. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compute/gpu/gpu.h"
#include "compute/sched/route/costmodel.h"
#include "compute/sched/route/router.h"

/* The built-in kinds, from the table (main). */
static const kind_ops *km, *kr, *kmm, *kg;

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
  cm_rate_set(&r, "gemm_1", 40e9);
  r.serial_fixed_s = 5e-6;
  r.cpu_fixed_s = 1e-4;
  r.gpus = gpus;
  r.h2d = r.d2h = 50e9;
  r.h2d_pageable = 10e9;
  r.d2h_pageable = 18e9;
  r.dev_bw = 3e12;
  cm_rate_set(&r, "gpu_flops", 5e13);
  r.gpu_ops = 1.2e13;
  r.gpu_fixed_s = 3e-4;
  r.chunk_bytes = 32 << 20;
  /* result files: the sink's pwrite ~4.5 GB/s (compute/array/codec/npyfile.c), first
   * writes through a mapping ~1.9 GB/s (issue 11: an 800 MB GPU result's
   * d2h phase took 373-464 ms) */
  r.write_1 = 4.5e9;
  r.write_n = 4.2e9;
  r.mwrite_1 = 1.9e9;
  r.mwrite_n = 1.9e9;
  r.mwrite_pf = 1.9e9; /* as before the GPU's gang prefaulted results */
  r.map_read_1 = 6e9;
  r.map_read_n = 30e9;
  r.file_fixed_s = 1e-4;
  r.job_fixed_s = 3e-4;
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

static tbackend choose(const cm_model *m, const kind_ops *k, const job_estimate *e,
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
  CHECK(choose(&m, km, &tiny, 1, why) == B_SERIAL);
  CHECK(strncmp(why, "estimate serial ", 16) == 0);
  CHECK(choose(&m, km, &mid, 0, why) == B_CPU);
  CHECK(strstr(why, "no usable GPU") != NULL);
  CHECK(choose(&m, km, &heavy, 1, why) == B_CUDA);
  CHECK(strncmp(why, "estimate cuda ", 14) == 0 && strstr(why, ", cpu ") &&
        strstr(why, ", serial "));
  CHECK(choose(&m, km, &heavy, 0, why) == B_CPU);
  /* x+1 over 1e9: staging 16 GB through the host (~0.47 s) vs 1e9 ops on
   * 12 G ops/s plus writing the result (~0.35 s). */
  CHECK(choose(&m, km, &big, 1, why) == B_CPU);
  /* A slow CPU does not send it to the GPU: the GPU's result is written
   * through a mapping at 1.9 GB/s, slower than the sink's pwrite... */
  r.vm_ops_n = 1e9;
  r.stream_n = 14e9;
  cm_model_init(&m, &r);
  CHECK(choose(&m, km, &big, 1, why) == B_CPU);
  /* ...but would, were the GPU's results written as fast as the sink's
   * (and the CPU a little slower still). */
  r.mwrite_1 = r.mwrite_n = r.mwrite_pf = r.write_1;
  r.vm_ops_n = 4e8;
  cm_model_init(&m, &r);
  CHECK(choose(&m, km, &big, 1, why) == B_CUDA);
  /* matmul 4096^3: 137 GFLOP; cuda ~3 ms + copies vs cpu ~0.3 s */
  job_estimate mm;
  memset(&mm, 0, sizeof mm);
  mm.work = 2.0 * 4096 * 4096 * 4096;
  mm.in_bytes = 2 * 8 * 4096 * 4096;
  mm.out_bytes = 8 * 4096 * 4096;
  CHECK(choose(&m, kmm, &mm, 1, why) == B_CUDA);
  cm_rates nog = rates(0);
  cm_model_init(&m, &nog);
  CHECK(choose(&m, kmm, &mm, 1, why) == B_CPU); /* no GPU measured */
}

TEST(monotonic) {
  cm_model m;
  cm_rates r = rates(1);
  cm_model_init(&m, &r);
  for (int b = B_SERIAL; b <= B_CUDA; b++) {
    double prev = 0;
    for (double n = 1e3; n <= 1e10; n *= 10) {
      job_estimate e = map_est(n, 4);
      double ms = cm_model_ms(&m, km, &e, (tbackend)b);
      CHECK(ms > prev);
      prev = ms;
    }
  }
}

/* A cuda map writes a result below KIND_GPU_SINK_MAX into a sink from the
 * pinned slots (one writer: the sink's one-thread rate), a bigger one into
 * a prefaulted mapping (issue 25: at 10^7 float64 the mapping's prefault
 * alone took 35 ms on an H200, the sink's whole write 19 ms). */
TEST(cuda_results_below_the_sink_cap_go_to_a_sink) {
  cm_model m;
  cm_rates r = rates(1);
  r.mwrite_pf = 6.6e9;
  cm_model_init(&m, &r);
  job_estimate small = map_est(1e7, 1), big = map_est(1e8, 1);
  cm_parts p;
  CHECK(kind_gpu_sink(8e7) && !kind_gpu_sink(8e8));
  cm_model_parts(&m, km, &small, B_CUDA, &p);
  CHECK_NEAR(p.store, r.file_fixed_s + 8e7 / r.write_n, 1e-9);
  cm_model_parts(&m, km, &big, B_CUDA, &p);
  CHECK_NEAR(p.store, r.file_fixed_s + 8e8 / 6.6e9, 1e-9);
  /* the override moves the cap both ways (for measuring) */
  setenv("TESSEL_GPU_SINK_MAX", "0", 1);
  CHECK(!kind_gpu_sink(8e7));
  cm_model_parts(&m, km, &small, B_CUDA, &p);
  CHECK_NEAR(p.store, r.file_fixed_s + 8e7 / 6.6e9, 1e-9);
  setenv("TESSEL_GPU_SINK_MAX", "1000000000", 1);
  CHECK(kind_gpu_sink(8e8));
  unsetenv("TESSEL_GPU_SINK_MAX");
}

/* x**2 + 2*x + 1 over n float64 read from an upload (a mapped file). */
static job_estimate upload_est(double n) {
  job_estimate e = map_est(n, 7);
  e.ninputs = 0;
  job_estimate_input(&e, (int64_t)(8 * n), 1);
  return e;
}

TEST(stored_results_cost_a_gpu_job) {
  cm_model m;
  cm_rates r = rates(1);
  cm_model_init(&m, &r);
  /* The case: 1e8 elements; cuda took 637 ms (serial 471) while
   * the old model said 88 ms. Now: at least d2h, at least the store of
   * 800 MB through a mapping (~420 ms), and not chosen. */
  job_estimate e = upload_est(1e8);
  cm_parts p;
  cm_model_parts(&m, km, &e, B_CUDA, &p);
  CHECK_NEAR(p.store, r.file_fixed_s + 8e8 / r.mwrite_1, 1e-9);
  CHECK_NEAR(p.d2h, 8e8 / r.d2h, 1e-12);
  CHECK_NEAR(p.h2d, 8e8 / r.h2d, 1e-12);
  CHECK(p.total >= p.fixed + p.store && p.total >= p.fixed + p.d2h);
  CHECK(cm_model_ms(&m, km, &e, B_CUDA) >= 420);
  char why[200];
  CHECK(choose(&m, km, &e, 1, why) != B_CUDA);
  /* With the result mapping prefaulted by the gang (measured 6.6 GB/s on
   * an H100's ext4), cuda's store is that rate's, the CPU backends' are
   * not moved by it. */
  {
    cm_model m2;
    cm_rates r2 = r;
    cm_parts q, c1, c2;
    r2.mwrite_pf = 6.6e9;
    cm_model_init(&m2, &r2);
    cm_model_parts(&m2, km, &e, B_CUDA, &q);
    CHECK_NEAR(q.store, r.file_fixed_s + 8e8 / 6.6e9, 1e-9);
    CHECK(q.total < p.total);
    job_estimate mm = e;
    mm.out_bytes = (int64_t)8e8;
    cm_model_parts(&m, kmm, &mm, B_CPU, &c1);
    cm_model_parts(&m2, kmm, &mm, B_CPU, &c2);
    CHECK(c1.store == c2.store);
  }
  /* The estimate JSON has every backend's parts; cuda's with its copies. */
  tbackend b;
  json_t *j = NULL;
  CHECK(cm_model_choose(&m, km, &e, 1, &b, why, sizeof why, &j) == 0);
  json_t *pc = json_object_get(json_object_get(j, "parts_ms"), "cuda");
  CHECK_NEAR(json_number_value(json_object_get(pc, "store")), p.store * 1e3,
             1e-6);
  CHECK(json_is_number(json_object_get(pc, "h2d")) &&
        json_is_number(json_object_get(pc, "d2h")));
  CHECK(json_object_get(
            json_object_get(json_object_get(j, "parts_ms"), "serial"), "h2d") ==
        NULL);
  json_decref(j);
  /* A result that fits the store row: no store term on any backend, and a
   * small GPU result is still copied out of the pinned slot. */
  job_estimate red = upload_est(1e6);
  red.out_bytes = 8;
  m.row_max = 65536;
  for (int bb = B_SERIAL; bb <= B_CPU; bb++) {
    cm_model_parts(&m, kr, &red, (tbackend)bb, &p);
    CHECK(p.store == 0);
  }
  m.row_max = 0; /* no row: a file, at least its fixed cost */
  cm_model_parts(&m, kr, &red, B_SERIAL, &p);
  CHECK(p.store >= r.file_fixed_s);
}

TEST(store_does_not_scale_with_threads) {
  cm_model m;
  cm_rates r = rates(0);
  r.write_n = 3 * r.write_1; /* even if "all threads" measured faster */
  r.mwrite_n = 2 * r.mwrite_1;
  cm_model_init(&m, &r);
  job_estimate e = upload_est(1e8);
  cm_parts ps, pc;
  cm_model_parts(&m, km, &e, B_SERIAL, &ps);
  cm_model_parts(&m, km, &e, B_CPU, &pc);
  CHECK(ps.store > 0.1);
  CHECK(pc.store >= ps.store);
  /* a cheap map on the pool cannot be faster than its store */
  CHECK(pc.total >= pc.fixed + pc.store);
  /* geodesic results go through a mapping: the same rule */
  job_estimate g;
  memset(&g, 0, sizeof g);
  g.work = 5000.0 * 4999 / 2;
  g.out_bytes = 8 * 5000 * 5000;
  g.in_bytes = 5000 * 16;
  cm_model_parts(&m, kg, &g, B_SERIAL, &ps);
  cm_model_parts(&m, kg, &g, B_CPU, &pc);
  CHECK(pc.store >= ps.store && ps.store >= g.out_bytes / r.mwrite_1);
  CHECK(pc.compute < ps.compute); /* the compute does scale */
  /* the method's cost per pair counts: haversine (27 ns) is cheaper
   * than Karney (630, the default when the kind gives none) */
  job_estimate hv = g;
  hv.ops_per_elem = 27;
  cm_parts ph;
  cm_model_parts(&m, kg, &hv, B_SERIAL, &ph);
  CHECK_NEAR(ph.compute * 630, ps.compute * 27, 1e-9 * ps.compute * 630);
  /* a 64-thread machine with the same per-thread rates: no smaller store */
  r.threads = 64;
  cm_model_init(&m, &r);
  cm_parts p64;
  cm_model_parts(&m, km, &e, B_CPU, &p64);
  CHECK(p64.store >= pc.store - 1e-12);
}

TEST(inputs_where_they_come_from) {
  cm_model m;
  cm_rates r = rates(1);
  cm_model_init(&m, &r);
  /* mapped from a file: the page faults' rate, even below the caches */
  job_estimate f = upload_est(1e6);
  cm_parts p;
  cm_model_parts(&m, km, &f, B_SERIAL, &p);
  CHECK_NEAR(p.read, 8e6 / r.map_read_1, 1e-12);
  job_estimate h = f; /* the same bytes on the heap (inline, range) */
  h.inputs[0].from_file = 0;
  cm_model_parts(&m, km, &h, B_SERIAL, &p);
  CHECK(p.read == 0); /* 16 MB in + out: in the caches */
  /* resident on the device: no h2d and no host read for cuda */
  job_estimate big = upload_est(1e8), res = big;
  res.inputs[0].resident = 1;
  cm_parts pb, pr;
  cm_model_parts(&m, km, &big, B_CUDA, &pb);
  cm_model_parts(&m, km, &res, B_CUDA, &pr);
  CHECK(pb.h2d > 0 && pb.read > 0);
  CHECK(pr.h2d == 0 && pr.read == 0);
  CHECK(pr.d2h == pb.d2h && pr.store == pb.store);
  CHECK(pr.total <= pb.total);
  /* ...which does not change a CPU backend's read */
  cm_model_parts(&m, km, &big, B_SERIAL, &pb);
  cm_model_parts(&m, km, &res, B_SERIAL, &pr);
  CHECK(pr.read == pb.read && pb.read > 0);
  /* a matmul's inputs: resident ones leave the h2d of the others */
  job_estimate mm;
  memset(&mm, 0, sizeof mm);
  mm.work = 2.0 * 2048 * 2048 * 2048;
  mm.out_bytes = 8 * 2048 * 2048;
  mm.in_bytes = 2 * mm.out_bytes;
  job_estimate_input(&mm, mm.out_bytes, 1);
  job_estimate_input(&mm, mm.out_bytes, 1);
  mm.inputs[1].resident = 1 << 0;
  cm_model_parts(&m, kmm, &mm, B_CUDA, &p);
  CHECK_NEAR(p.h2d, (double)mm.out_bytes / r.h2d, 1e-12);
}

TEST(corrections) {
  cm_model m;
  cm_rates r = rates(1);
  cm_model_init(&m, &r);
  job_estimate e = map_est(1e7, 4);
  double raw = cm_model_ms(&m, km, &e, B_CPU);
  for (int i = 0; i < 60; i++) cm_model_observe(&m, km, &e, B_CPU, 3 * raw);
  CHECK_NEAR(m.corr[kind_slot(km)][B_CPU], 3.0, 0.01);
  CHECK_NEAR(cm_model_ms(&m, km, &e, B_CPU), 3 * raw, 0.01 * raw);
  CHECK(m.nobs[kind_slot(km)][B_CPU] == 60);
  CHECK(m.corr[kind_slot(km)][B_SERIAL] == 1.0); /* other pairs untouched */
  CHECK(m.corr[kind_slot(kr)][B_CPU] == 1.0);
  for (int i = 0; i < 200; i++) cm_model_observe(&m, km, &e, B_CUDA, 1e12);
  CHECK(m.corr[kind_slot(km)][B_CUDA] <= 20.0);  /* bounded */
  cm_model_observe(&m, km, &e, B_AUTO, 5);  /* ignored */
  cm_model_observe(&m, km, &e, B_CPU, -1);  /* ignored */
  CHECK(m.nobs[kind_slot(km)][B_CPU] == 60);
}

/* The figures as the scheduler stores them (cm_model_choose_text, 9
 * digits) are the text jansson wrote for the tree the model used to build
 * per job (its code kept here as the reference), byte for byte. */
static json_t *figures_tree(const cm_model *m, const kind_ops *k,
                            const job_estimate *e, int gpu_ok) {
  static const tbackend order[3] = {B_CUDA, B_CPU, B_SERIAL};
  double ms[B__COUNT];
  for (int b = 0; b < B__COUNT; b++) ms[b] = INFINITY;
  ms[B_SERIAL] = cm_model_ms(m, k, e, B_SERIAL);
  ms[B_CPU] = cm_model_ms(m, k, e, B_CPU);
  if (gpu_ok && m->r.gpus > 0) ms[B_CUDA] = cm_model_ms(m, k, e, B_CUDA);
  tbackend best = B_SERIAL;
  for (int i = 0; i < 3; i++)
    if (ms[order[i]] < ms[best]) best = order[i];
  int slot = kind_slot(k);
  json_t *o = json_object();
  json_object_set_new(o, "model", json_string("calibrated"));
  json_object_set_new(o, "serial_ms", json_real(ms[B_SERIAL]));
  json_object_set_new(o, "cpu_ms", json_real(ms[B_CPU]));
  json_object_set_new(o, "cuda_ms", isfinite(ms[B_CUDA]) ? json_real(ms[B_CUDA])
                                                        : json_null());
  json_object_set_new(o, "choice", json_string(tbackend_name(best)));
  json_t *corr = json_object();
  json_object_set_new(corr, "serial", json_real(m->corr[slot][B_SERIAL]));
  json_object_set_new(corr, "cpu", json_real(m->corr[slot][B_CPU]));
  json_object_set_new(corr, "cuda", json_real(m->corr[slot][B_CUDA]));
  json_object_set_new(o, "corrections", corr);
  json_t *parts = json_object();
  for (int i = 2; i >= 0; i--) {
    if (!isfinite(ms[order[i]])) continue;
    cm_parts p;
    cm_model_parts(m, k, e, order[i], &p);
    json_t *pj = json_object();
    json_object_set_new(pj, "fixed", json_real(p.fixed * 1e3));
    json_object_set_new(pj, "read", json_real(p.read * 1e3));
    if (order[i] == B_CUDA) json_object_set_new(pj, "h2d", json_real(p.h2d * 1e3));
    json_object_set_new(pj, "compute", json_real(p.compute * 1e3));
    if (order[i] == B_CUDA) json_object_set_new(pj, "d2h", json_real(p.d2h * 1e3));
    json_object_set_new(pj, "store", json_real(p.store * 1e3));
    json_object_set_new(parts, tbackend_name(order[i]), pj);
  }
  json_object_set_new(o, "parts_ms", parts);
  return o;
}

/* The reason as it was written with printf ("%.2f" under 1 ms, "%.1f"
 * under 100, "%.0f" above), chosen first. */
static void old_ms(char *buf, size_t len, double ms) {
  if (ms < 1) snprintf(buf, len, "%.2f ms", ms);
  else if (ms < 100) snprintf(buf, len, "%.1f ms", ms);
  else snprintf(buf, len, "%.0f ms", ms);
}
static void old_reason(const cm_model *m, const kind_ops *k,
                       const job_estimate *e, int gpu_ok, tbackend best,
                       char *out, size_t len) {
  static const tbackend order[3] = {B_CUDA, B_CPU, B_SERIAL};
  char num[40];
  old_ms(num, sizeof num, cm_model_ms(m, k, e, best));
  size_t l = (size_t)snprintf(out, len, "estimate %s %s", tbackend_name(best),
                              num);
  for (int i = 0; i < 3; i++) {
    if (order[i] == best || (order[i] == B_CUDA && !(gpu_ok && m->r.gpus > 0)))
      continue;
    old_ms(num, sizeof num, cm_model_ms(m, k, e, order[i]));
    l += (size_t)snprintf(out + l, len - l, ", %s %s", tbackend_name(order[i]),
                          num);
  }
  if (!gpu_ok) snprintf(out + l, len - l, "; no usable GPU");
}

TEST(figures_text_as_jansson) {
  cm_model m;
  cm_rates r = rates(1);
  cm_model_init(&m, &r);
  m.corr[kind_slot(km)][B_CPU] = 1.2345678912345;
  m.row_max = 65536;
  job_estimate es[] = {map_est(3, 1),   map_est(100, 4),   map_est(1e6, 4),
                       map_est(1e8, 200), map_est(1e9, 1),  map_est(2e5, 3),
                       map_est(3e6, 7),   map_est(5e4, 11), map_est(7e7, 2)};
  for (size_t i = 0; i < sizeof es / sizeof es[0]; i++)
    for (int gpu = 0; gpu <= 1; gpu++) {
      tbuf b;
      tbuf_init(&b, 0);
      tbuf_add(&b, "{", 1);
      tbackend ch;
      char why[200];
      CHECK(cm_model_choose_text(&m, km, &es[i], gpu, &ch, why, sizeof why,
                                 &b, 9) == 0);
      tbuf_add(&b, "}", 1);
      char *text = tbuf_take(&b, NULL);
      json_t *t = figures_tree(&m, km, &es[i], gpu);
      char *want = json_dumps(t, JSON_COMPACT | JSON_REAL_PRECISION(9));
      CHECK_STR(text, want);
      CHECK_STR(json_string_value(json_object_get(t, "choice")),
                tbackend_name(ch));
      char old[200];
      old_reason(&m, km, &es[i], gpu, ch, old, sizeof old);
      CHECK_STR(why, old);
      free(want);
      free(text);
      json_decref(t);
    }
}

TEST(json_roundtrip) {
  cm_model m, back;
  cm_rates r = rates(2);
  cm_model_init(&m, &r);
  m.corr[kind_slot(kr)][B_CUDA] = 1.75;
  m.nobs[kind_slot(kr)][B_CUDA] = 9;
  json_t *j = cm_model_to_json(&m);
  terr e;
  terr_clear(&e);
  CHECK(cm_model_from_json(j, &back, &e) == 0);
  CHECK(back.r.threads == 16 && back.r.gpus == 2);
  CHECK_NEAR(back.r.dev_bw, 3e12, 1);
  CHECK_NEAR(back.corr[kind_slot(kr)][B_CUDA], 1.75, 1e-12);
  CHECK(back.nobs[kind_slot(kr)][B_CUDA] == 9);
  json_object_set_new(json_object_get(j, "rates"), "vm_ops_1", json_string("x"));
  CHECK(cm_model_from_json(j, &back, &e) == T_EINVAL);
  CHECK_STR(e.field, "calibration.rates.vm_ops_1");
  json_decref(j);
}

TEST(calibrate_and_cache) {
  cm_rates r;
  terr e;
  terr_clear(&e);
  char dir[] = "/tmp/tessel-router-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  CHECK(cm_calibrate_in(&r, 2, dir, &e) == 0);
  /* Every rate was measured: a positive finite number. How fast this
   * machine is (a loaded CI core may be slow) is not the test's business. */
  const double measured[] = {r.vm_ops_1, r.vm_ops_n,   r.copy_n,     cm_rate_get(&r, "gemm_1"),
                             r.stream_1, r.stream_n,   r.fault_1,    r.fault_n,
                             r.write_1,  r.write_n,    r.map_read_1, r.map_read_n,
                             r.mwrite_1, r.mwrite_n,   r.file_fixed_s, r.job_fixed_s};
  for (size_t k = 0; k < sizeof measured / sizeof measured[0]; k++)
    CHECK_MSG(isfinite(measured[k]) && measured[k] > 0, "rate %zu is %g", k, measured[k]);
  CHECK(r.gpus == gpu_count());
  { /* its files are gone */
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *de;
    int left = 0;
    while (d && (de = readdir(d)))
      if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) left++;
    if (d) closedir(d);
    CHECK(left == 0);
  }
  char path[256];
  snprintf(path, sizeof path, "%s/calibration.json", dir);
  CHECK(cm_init(path, dir, 2, 0, 0, &e) == 0);
  CHECK(cm_ready());
  CHECK(access(path, R_OK) == 0);
  job_estimate je = map_est(1e6, 4);
  for (int i = 0; i < 16; i++) cm_observe(km, &je, B_SERIAL, 1234.0);
  cm_model a;
  cm_get(&a);
  CHECK(a.nobs[kind_slot(km)][B_SERIAL] == 16);
  cm_shutdown();
  CHECK(!cm_ready());
  /* Next start: read back (same threads and GPUs), corrections kept. */
  CHECK(cm_init(path, dir, 2, 0, 0, &e) == 0);
  cm_model b;
  cm_get(&b);
  CHECK(b.nobs[kind_slot(km)][B_SERIAL] == 16);
  CHECK_NEAR(b.r.vm_ops_1, a.r.vm_ops_1, 1e-6 * a.r.vm_ops_1);
  tbackend ch;
  char why[200];
  CHECK(cm_choose(km, &je, 0, &ch, why, sizeof why, NULL) == 0);
  CHECK(strncmp(why, "estimate ", 9) == 0);
  /* The router's entry point uses the model now, the size rule after. */
  json_t *est = NULL;
  CHECK(router_choose(km, &je, 0, &ch, why, sizeof why, &est) == 0);
  CHECK(strncmp(why, "estimate ", 9) == 0);
  CHECK_STR(json_string_value(json_object_get(est, "model")), "calibrated");
  json_decref(est);
  router_observe(km, &je, B_CPU, 5.0);
  cm_get(&b);
  CHECK(b.nobs[kind_slot(km)][B_CPU] == 1);
  router_shutdown();
  CHECK(router_choose(km, &je, 0, &ch, why, sizeof why, NULL) == 0);
  CHECK(strncmp(why, "estimate ", 9) != 0);
  unlink(path);
  rmdir(dir);
}

int main(void) {
  km = kind_find("map");
  kr = kind_find("reduce");
  kmm = kind_find("matmul");
  kg = kind_find("geodesic");
  gpu_init();
  RUN(picks_the_fastest);
  RUN(monotonic);
  RUN(stored_results_cost_a_gpu_job);
  RUN(store_does_not_scale_with_threads);
  RUN(inputs_where_they_come_from);
  RUN(cuda_results_below_the_sink_cap_go_to_a_sink);
  RUN(corrections);
  RUN(figures_text_as_jansson);
  RUN(json_roundtrip);
  RUN(calibrate_and_cache);
  gpu_shutdown();
  return check_summary();
}
