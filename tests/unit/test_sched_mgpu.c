/* test_sched_mgpu.c — one job over every GPU, through the scheduler, with
 * four fake devices (issue 27; compute/kinds/mgpu.h, compute/sched/README.md
 * "Lent GPUs"). The fakes are sched_fixture.h's: a mutex per device
 * whose holder is recorded. The test kind "spread" {"n", "block", "fail"}
 * runs on cuda through mgpu_run with the run's own hooks (mgpu_lend_of):
 * each block writes result[r] = r into its rows and checks its thread
 * holds the block's device. Checked: a spread job alone runs a lane on
 * every device and names them (job_ctx.spread); a lent device that fails
 * mid-job hands its block to the others and the result is whole; a
 * single-GPU job arriving while the spread job holds every device runs
 * while the spread job is still running (its device given back before
 * the lane's next block) and the spread job still ends whole; no device
 * is held after. Every case runs twice: block alone, and as a lane
 * session two deep after 4 primed (lane_begin, prepare, launch, lane_end:
 * the geodesic matrix's way), where a block must have been launched by
 * its own lane on its device (oldest first, at most 4 held) and every
 * opened lane is ended.
 */
#include "compute/gpu/gpu.h"
#include "compute/kinds/mgpu.h"
#include "sched_fixture.h"

#define NDEV 4

static int fake_count(void) { return NDEV; }
static const char *fake_reason(void) { return ""; }
static int fake_healthy(int dev) { (void)dev; return 1; }
static void fake_note(int dev, int rc) { (void)dev, (void)rc; }
static const sched_gpu_ops fake_gpu = {fake_count, fake_healthy, fake_note,
                                       fake_lock,  fake_unlock,  fake_reason,
                                       fake_trylock};

/* ---- the "spread" kind -------------------------------------------------- */
static atomic_int sp_bad, sp_entered[NDEV], sp_slow;
static atomic_long sp_rows_done;
static pthread_mutex_t sp_mu = PTHREAD_MUTEX_INITIALIZER;
static char sp_spread[160]; /* the last run's ctx->spread */
static atomic_int b_done, b_dev;
static atomic_long a_rows_at_b;

typedef struct sp_run {
  double *out;
  int fail_dev;
} sp_run;

/* The lane session's fakes: a device's launched blocks (its holder's). */
static int sp_deep;
static int64_t sp_launched[NDEV][MGPU_PRIME_MAX];
static int sp_nl[NDEV];
static atomic_int sp_begun, sp_ended;

static int sp_lane_begin(void *u, int lane, int dev, int *prime, terr *e) {
  (void)u, (void)lane, (void)e, (void)prime;
  if (!fake_holds(dev)) atomic_fetch_add(&sp_bad, 1);
  sp_nl[dev] = 0;
  atomic_fetch_add(&sp_begun, 1);
  return 0;
}
static void sp_prepare(void *u, int lane, int dev, int rank, int nlive) {
  (void)u, (void)lane;
  if (!fake_holds(dev) || rank < 0 || rank >= nlive)
    atomic_fetch_add(&sp_bad, 1);
}
static int sp_launch(void *u, int lane, int dev, int64_t r0, int64_t r1,
                     terr *e) {
  (void)u, (void)lane, (void)r1, (void)e;
  if (!fake_holds(dev) || sp_nl[dev] >= 4) atomic_fetch_add(&sp_bad, 1);
  if (sp_nl[dev] < 4) sp_launched[dev][sp_nl[dev]++] = r0;
  return 0;
}
static void sp_lane_end(void *u, int lane, int dev, int rc) {
  (void)u, (void)lane, (void)dev, (void)rc;
  atomic_fetch_add(&sp_ended, 1);
}

static int sp_block(void *u, int lane, int dev, int64_t r0, int64_t r1,
                    terr *e) {
  sp_run *R = u;
  (void)lane;
  if (!fake_holds(dev)) atomic_fetch_add(&sp_bad, 1);
  atomic_store(&sp_entered[dev], 1);
  if (sp_deep) { /* launched by this lane, oldest first */
    if (sp_nl[dev] < 1 || sp_launched[dev][0] != r0)
      atomic_fetch_add(&sp_bad, 1);
    if (sp_nl[dev] > 0) {
      memmove(sp_launched[dev], sp_launched[dev] + 1,
              (size_t)(sp_nl[dev] - 1) * sizeof sp_launched[dev][0]);
      sp_nl[dev]--;
    }
  }
  if (dev == R->fail_dev) /* its first block: the lane stops then */
    return terr_set(e, T_EDEVICE, "", -1, "fake device %d failed", dev);
  if (atomic_load(&sp_slow) && !atomic_load(&b_done)) sleep_ms(1);
  for (int64_t r = r0; r < r1; r++) R->out[r] = (double)r;
  atomic_fetch_add(&sp_rows_done, r1 - r0);
  return 0;
}

/* The kind fills ctx->spread as a real one does (geod_mgpu). */
static int spread_run_named(void *plan, tbackend b, job_ctx *ctx,
                            tarray **result, terr *e) {
  splan *p = plan;
  if (b != B_CUDA)
    return terr_set(e, T_EINVAL, "backend", -1, "spread runs on cuda");
  int rc = ctx->result_alloc(ctx, T_F64, 1, &p->n, result, e);
  if (rc) return rc;
  sp_run R = {(double *)(*result)->data, (int)p->work};
  mgpu_lend lend;
  mgpu_report rep;
  mgpu_lend_of(ctx, &lend);
  mgpu_ops ops = {.u = &R, .block = sp_block};
  if (sp_deep) {
    ops.lane_begin = sp_lane_begin;
    ops.prepare = sp_prepare;
    ops.launch = sp_launch;
    ops.lane_end = sp_lane_end;
    ops.prime = 4;
  }
  rc = mgpu_run(ctx->device, p->n, (int64_t)p->ms, 0, &lend, &ops, &rep, e);
  mgpu_note(&rep, ctx);
  pthread_mutex_lock(&sp_mu);
  snprintf(sp_spread, sizeof sp_spread, "%s", ctx->spread);
  pthread_mutex_unlock(&sp_mu);
  return rc;
}

/* {"n": rows, "block": rows a block, "fail": device failing or -1} in
 * sleepy's plan: n, ms = block, work = fail. */
static int spread_prepare(const json_t *params, const tenv *env, void **plan,
                          terr *e) {
  (void)env, (void)e;
  splan *p = calloc(1, sizeof *p);
  p->n = json_integer_value(json_object_get(params, "n"));
  p->ms = (double)json_integer_value(json_object_get(params, "block"));
  json_t *f = json_object_get(params, "fail");
  p->work = f ? (double)json_integer_value(f) : -1;
  *plan = p;
  return T_OK;
}
static const kind_ops k_spread =
    KIND("spread", 0, 0, sleepy_check, spread_prepare, spread_run_named);
static const kind_ops *spread_kinds(const char *name) {
  if (strcmp(name, "spread") == 0) return &k_spread;
  return test_kinds(name);
}

/* sleepy on cuda: the single-GPU job; records where and when it ran. */
static void b_hook(job_ctx *ctx) {
  atomic_store(&a_rows_at_b, atomic_load(&sp_rows_done));
  atomic_store(&b_dev, ctx->device);
  atomic_store(&b_done, 1);
}

static int fx_open_mgpu(fx *f) {
  int rc = fx_prepare(f, 2);
  if (rc) return rc;
  f->cfg.gpu_ops = &fake_gpu;
  f->cfg.kind_lookup = spread_kinds;
  return fx_start(f);
}

static void reset(void) {
  atomic_store(&sp_bad, 0);
  for (int d = 0; d < NDEV; d++) atomic_store(&sp_entered[d], 0);
  atomic_store(&sp_rows_done, 0);
  atomic_store(&sp_slow, 0);
  atomic_store(&sp_begun, 0);
  atomic_store(&sp_ended, 0);
  atomic_store(&b_done, 0);
  atomic_store(&b_dev, -1);
  sp_spread[0] = 0;
}

/* What a job's record says of its devices (store_job.devices and
 * backend_used, API.md backend.devices): per device bit, the lanes that
 * wrote rows, failed, were taken back. Checked on the way: the document
 * parses, every lane once, rows and blocks summing to the job's (n rows
 * in blocks of `block`; 0: not checked), backend_used naming exactly the
 * lanes that wrote, in the document's order. The lanes' count, or -1. */
typedef struct dev_rec {
  unsigned wrote, failed, taken;
} dev_rec;
static int check_devices(const store_job *j, int64_t n, int64_t block,
                         dev_rec *d) {
  memset(d, 0, sizeof *d);
  json_t *doc = j->devices ? json_loads(j->devices, 0, NULL) : NULL;
  CHECK_MSG(json_is_array(doc), "devices '%s'", j->devices ? j->devices : "");
  if (!json_is_array(doc)) {
    json_decref(doc);
    return -1;
  }
  char used[400] = "";
  int64_t rows = 0, blocks = 0;
  unsigned seen = 0;
  size_t k;
  json_t *v;
  json_array_foreach(doc, k, v) {
    int dev = (int)json_integer_value(json_object_get(v, "device"));
    int64_t r = json_integer_value(json_object_get(v, "rows"));
    CHECK(dev >= 0 && dev < NDEV && !(seen >> dev & 1u));
    seen |= 1u << (dev & 31);
    rows += r;
    blocks += json_integer_value(json_object_get(v, "blocks"));
    if (r > 0) {
      d->wrote |= 1u << dev;
      size_t o = strlen(used);
      snprintf(used + o, sizeof used - o, "%scuda:%d", o ? "+" : "", dev);
    }
    if (json_is_true(json_object_get(v, "failed"))) d->failed |= 1u << dev;
    if (json_is_true(json_object_get(v, "taken_back"))) d->taken |= 1u << dev;
  }
  if (block > 0) {
    CHECK_MSG(rows == n, "rows %lld of %lld", (long long)rows, (long long)n);
    CHECK_MSG(blocks == (n + block - 1) / block, "blocks %lld",
              (long long)blocks);
    CHECK_MSG(j->backend_used && strcmp(j->backend_used, used) == 0,
              "used '%s', wrote '%s'", j->backend_used ? j->backend_used : "",
              used);
  }
  int lanes = (int)json_array_size(doc);
  json_decref(doc);
  return lanes;
}

/* Submit a spread job and wait for its end; checks the result's rows.
 * *rec: the job's record of its devices; the lanes' count. */
static int spread_job(fx *f, const char *params, int64_t n, int64_t block,
                      dev_rec *rec, char id[T_ID_MAX]) {
  int lanes = -1;
  CHECK(submit(f, "spread", params, "cuda", 5, 0, id) == 0);
  store_job j;
  if (wait_final(f, id, &j)) {
    CHECK_MSG(j.status == JOB_SUCCEEDED, "%s: %s", params,
              j.error_message ? j.error_message : "");
    if (j.result_path) check_npy(j.result_path, n, 0);
    lanes = check_devices(&j, n, block, rec);
    store_job_clear(&j);
  }
  wait_idle(f);
  return lanes;
}

TEST(test_spread_over_every_device) {
  reset();
  fx f;
  if (fx_open_mgpu(&f)) return;
  dev_rec rec;
  char id[T_ID_MAX];
  int lanes = spread_job(&f, "{\"n\":20000,\"block\":10}", 20000, 10, &rec,
                         id);
  /* every device a lane (a fast lane may write every block before the
   * others borrow theirs: backend.used names those that wrote) */
  CHECK_MSG(lanes == NDEV && rec.wrote != 0, "lanes %d wrote %x", lanes,
            rec.wrote);
  CHECK(rec.failed == 0);
  CHECK(atomic_load(&sp_bad) == 0);
  CHECK(atomic_load(&sp_begun) == atomic_load(&sp_ended));
  CHECK(!sp_deep || atomic_load(&sp_begun) > 0);
  CHECK_MSG(strncmp(sp_spread, "cuda:", 5) == 0, "spread '%s'", sp_spread);
  for (int d = 0; d < NDEV; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "%d:", d);
    CHECK_MSG(strstr(sp_spread, dev) != NULL, "device %d in '%s'", d,
              sp_spread);
    CHECK(!atomic_load(&dev_held[d]));
  }
  fx_close(&f);
}

TEST(test_spread_device_fails) {
  reset();
  fx f;
  if (fx_open_mgpu(&f)) return;
  /* device 3 is never the run's own here (the first free worker's is
   * 0..2 unless 3 takes it: then the own device fails, the same path) */
  dev_rec rec;
  char id[T_ID_MAX];
  int lanes = spread_job(&f, "{\"n\":20000,\"block\":10,\"fail\":3}",
                         20000, 10, &rec, id);
  /* device 3 recorded as what it did: a lane that failed, no rows, and
   * not in backend.used; the others wrote every row */
  CHECK(lanes == NDEV);
  CHECK_MSG(!(rec.wrote >> 3 & 1u), "wrote %x", rec.wrote);
  if (atomic_load(&sp_entered[3]))
    CHECK_MSG(rec.failed == 1u << 3, "failed %x", rec.failed);
  CHECK(atomic_load(&sp_bad) == 0);
  CHECK(atomic_load(&sp_begun) == atomic_load(&sp_ended));
  CHECK(!sp_deep || atomic_load(&sp_begun) > 0);
  if (atomic_load(&sp_entered[3]))
    CHECK_MSG(strstr(sp_spread, "failed") && strstr(sp_spread, "again"),
              "spread '%s'", sp_spread);
  for (int d = 0; d < NDEV; d++) CHECK(!atomic_load(&dev_held[d]));
  fx_close(&f);
}

TEST(test_single_gpu_job_takes_a_device_back) {
  reset();
  fx f;
  if (fx_open_mgpu(&f)) return;
  atomic_store(&sp_slow, 1); /* 1 ms a block until the single job ran */
  char aid[T_ID_MAX], bid[T_ID_MAX];
  int64_t n = 1000000;
  CHECK(submit(&f, "spread", "{\"n\":1000000,\"block\":10}", "cuda", 5, 0,
               aid) == 0);
  /* every device is the spread job's (own or lent) */
  int all = 0;
  for (int i = 0; i < 20000 && !all; i++) {
    all = 1;
    for (int d = 0; d < NDEV; d++) all = all && atomic_load(&sp_entered[d]);
    if (!all) sleep_ms(1);
  }
  CHECK(all);
  cuda_hook = b_hook;
  CHECK(submit(&f, "sleepy", "{\"n\":1}", "cuda", 5, 0, bid) == 0);
  store_job j;
  if (wait_final(&f, bid, &j)) {
    CHECK(j.status == JOB_SUCCEEDED);
    /* a single-GPU job: its own device alone */
    char want1[64];
    snprintf(want1, sizeof want1, "[{\"device\":%d}]", atomic_load(&b_dev));
    CHECK_MSG(j.devices && strcmp(j.devices, want1) == 0, "devices '%s'",
              j.devices ? j.devices : "");
    snprintf(want1, sizeof want1, "cuda:%d", atomic_load(&b_dev));
    CHECK_STR(j.backend_used, want1);
    store_job_clear(&j);
  }
  /* It ran while the spread job still had rows to write. */
  CHECK(atomic_load(&b_done) == 1);
  CHECK_MSG(atomic_load(&a_rows_at_b) < n, "rows at b %ld",
            atomic_load(&a_rows_at_b));
  dev_rec rec = {0};
  char *used = NULL;
  if (wait_final(&f, aid, &j)) {
    CHECK_MSG(j.status == JOB_SUCCEEDED, "%s",
              j.error_message ? j.error_message : "");
    if (j.result_path) check_npy(j.result_path, n, 0);
    CHECK(check_devices(&j, n, 10, &rec) == NDEV);
    used = j.backend_used ? strdup(j.backend_used) : NULL;
    store_job_clear(&j);
  }
  wait_idle(&f);
  cuda_hook = NULL;
  CHECK(atomic_load(&sp_bad) == 0);
  CHECK(atomic_load(&sp_begun) == atomic_load(&sp_ended));
  CHECK(!sp_deep || atomic_load(&sp_begun) > 0);
  char want[32];
  snprintf(want, sizeof want, "%d:", atomic_load(&b_dev));
  char *at = strstr(sp_spread, " rows ");
  at = at ? strstr(at, want) : NULL;
  CHECK_MSG(at && strncmp(strchr(at, ':') + 1, "0", 1) != 0 &&
                strstr(at, "taken back"),
            "device %d in '%s'", atomic_load(&b_dev), sp_spread);
  CHECK_MSG(rec.taken >> atomic_load(&b_dev) & 1u, "taken back %x",
            rec.taken);
  for (int d = 0; d < NDEV; d++) CHECK(!atomic_load(&dev_held[d]));
  fx_close(&f);
  /* the record survives a restart: read back from the store */
  store *st = NULL;
  terr e;
  CHECK(store_open(f.dir, &st, &e) == 0);
  if (st && store_job_get(st, aid, NULL, &j, &e) == 0) {
    dev_rec again;
    CHECK(check_devices(&j, n, 10, &again) == NDEV);
    CHECK(again.wrote == rec.wrote && again.taken == rec.taken);
    CHECK_STR(j.backend_used, used ? used : "");
    store_job_clear(&j);
  } else {
    CHECK_MSG(0, "job %s after a restart: %s", aid, e.message);
  }
  if (st) store_close(st);
  free(used);
}

int main(void) {
  t_log_level = T_LOG_WARN;
  snprintf(root, sizeof root, "/tmp/tessel_schedmgpu_XXXXXX");
  if (!mkdtemp(root)) SKIP_ALL("cannot create a temp dir");
  for (sp_deep = 0; sp_deep < 2; sp_deep++) {
    printf("-- %s\n", sp_deep ? "lane session, two deep" : "block alone");
    RUN(test_spread_over_every_device);
    RUN(test_spread_device_fails);
    RUN(test_single_gpu_job_takes_a_device_back);
  }
  rm_tree(root);
  return check_summary();
}
