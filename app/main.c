/* main.c — tesseld: configuration, start-up, the signal loop, shutdown.
 *
 * Every setting has a flag, an environment variable and a default; a flag
 * beats the variable (app/options.c holds their table; `tesseld --help`
 * lists them). Start-up order: data
 * dir, its lock (util/datadir.h: a second daemon on it exits 2 naming
 * the first's pid; a cluster store's nodes share theirs) and its disk's
 * reserve (same header, --disk-reserve: room for deletes and the
 * store's bookkeeping on a full disk, checked every second), store (store_open_url: SQLite, or a PostgreSQL cluster store; bad
 * configuration there exits 2 with the store unchanged), GPU discovery,
 * scheduler (re-queues the jobs a dead process left behind; on a cluster
 * store the queue is shared instead), HTTP server, then the node joins the
 * cluster (sched_join: named --node-name or host:port). SIGINT/SIGTERM start a graceful
 * shutdown: stop accepting, let running jobs finish up to a deadline (jobs
 * still running then stay queued in the store and run at the next start),
 * close the store. The main thread also expires old jobs and arrays.
 *
 * Threads: SIGINT/SIGTERM are blocked in every thread and taken here with
 * sigtimedwait, so no handler runs at an arbitrary point. Every thread but
 * OpenBLAS's: its library constructor starts them before main, with no
 * signal blocked, and a SIGTERM that came while the main thread was out of
 * sigtimedwait (expiring, at start) went to one of them and killed the
 * process without its shutdown (1 run in 5 of test_disk_reserve's restart).
 * So a handler is installed too: it only notes the signal, in whichever
 * OpenBLAS thread took it, and the loop reads the note within a second.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "app/options.h"
#include "compute/gpu/gpu.h"
#include "compute/jobs/jobs.h"
#include "compute/jobs/lifecycle.h"
#include "compute/sched/sched.h"
#include "db/store.h"
#include "server/http.h"
#include "util/datadir.h"
#include "util/tassert.h"
#include "util/util.h"

/* What main wires together; the API and the server hold pointers into it,
 * so it lives until the end of main. */
typedef struct daemon_parts {
  const app_opts *o;
  store *st;
  sched *sc;
  http_server *srv;
  struct tlocal *local;
  int cluster;
  char host[256];
  char calib[4200];
  sched_config scfg;
  jobs jctx;
  arrays arr;
  api_ctx actx;
} daemon_parts;

/* A file-name-safe copy of a node name (calibration-<name>.json). */
static void name_for_file(const char *name, char *out, size_t cap) {
  T_ASSERT(cap > 0); /* room for the terminating NUL */
  size_t i = 0;
  for (; name[i] && i + 1 < cap; i++) {
    char ch = name[i];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
             (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_';
    out[i] = ok ? ch : '_';
  }
  out[i] = 0;
}

/* A stop signal taken by a thread that does not block it (see the top). */
static volatile sig_atomic_t stop_signal;
static void note_stop_signal(int sig) { stop_signal = sig; }

/* Expiry's timer: compute/jobs/lifecycle.h ends each old job and array as
 * a delete does (row, GPU copies, files). */
static void expire_old(store *st, int64_t ttl_s) {
  if (ttl_s <= 0) return;
  int n = 0;
  terr e;
  if (jobs_expire(st, t_wall_ms() - ttl_s * 1000, &n, &e)) {
    log_warn("expiry failed: %s", e.message);
    return;
  }
  if (n) log_info("expired %d files older than %llds", n, (long long)ttl_s);
}

/* The data directory and its subdirectories; then one daemon per data
 * directory, before anything in it is read or changed (the store, the
 * in-flight journal, the upload sweep): a second one exits 2 naming the
 * first's pid; cluster nodes share theirs. Then the data disk's reserve
 * (util/datadir.h), before the store writes. 0, or the exit status, with
 * the message logged. */
static int guard_data_dir(const char *data_dir, const char *store_url,
                          int64_t disk_reserve) {
  char sub[4200];
  for (int i = 0; i < 3; i++) {
    static const char *const dirs[] = {"", "/arrays", "/results"};
    snprintf(sub, sizeof sub, "%s%s", data_dir, dirs[i]);
    if (t_mkdirs(sub) != 0) {
      log_error("cannot create %s: %s", sub, strerror(errno));
      return 1;
    }
  }
  terr e;
  int sqlite = !store_url[0] || strcmp(store_url, "sqlite:") == 0;
  if (dirlock_take(data_dir, !sqlite, &e)) {
    log_error("%s", e.message);
    return 2;
  }
  if (disk_reserve < 0) disk_reserve = reserve_default_bytes(data_dir);
  int rc = reserve_open(data_dir, disk_reserve, &e);
  if (rc) {
    log_error("--disk-reserve (TESSEL_DISK_RESERVE): %s", e.message);
    return rc == T_EINVAL ? 2 : 1;
  }
  return 0;
}

/* SIGINT/SIGTERM: blocked here (threads inherit the mask) and taken by the
 * main loop's sigtimedwait; the handler is for OpenBLAS's threads (see the
 * top). */
static void block_stop_signals(sigset_t *sigs) {
  sigemptyset(sigs);
  sigaddset(sigs, SIGINT);
  sigaddset(sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, sigs, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = note_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

/* Same-host files: every directory must be there now (canonical from here
 * on); their mappings are guarded against SIGBUS. 0, or -1 said. */
static int open_local_dirs(daemon_parts *d) {
  terr le;
  if (jobs_local_open(d->o->local_dirs, d->o->nlocal, d->o->token_file != NULL,
                      &d->local, &le)) {
    fprintf(stderr, "tesseld: --local-dir (TESSEL_LOCAL_DIR): %s\n", le.message);
    return -1;
  }
  return 0;
}

/* The store (the URL is freed here, used or not). A bad store
 * (unreachable, refused, a newer schema, another data directory's) is bad
 * configuration: exit 2, the store unchanged; the message never holds the
 * URL's password (store_open_url). Then the router's calibration path and
 * the GPUs. 0, or the exit status. */
static int open_store_and_gpus(daemon_parts *d, char *store_url) {
  terr e;
  int bad = store_open_url(store_url, d->o->data_dir, &d->st, &e);
  free(store_url);
  if (bad) {
    log_error("%s", e.message);
    return 2;
  }
  d->cluster = store_is_cluster(d->st);
  snprintf(d->host, sizeof d->host, "localhost");
  gethostname(d->host, sizeof d->host - 1);
  d->host[sizeof d->host - 1] = 0;
  snprintf(d->calib, sizeof d->calib, "%s/calibration.json", d->o->data_dir);
  if (d->cluster) {
    /* Nodes share the data directory: each keeps its router calibration
     * under its own name (one host's nodes share the host's). */
    char fname[128];
    name_for_file(d->o->node_name[0] ? d->o->node_name : d->host, fname,
                  sizeof fname);
    snprintf(d->calib, sizeof d->calib, "%s/calibration-%s.json",
             d->o->data_dir, fname);
  }
  /* Compiled GPU kernels are cached under <data>/kernels across restarts. */
  gpu_configure(&(gpu_config){.data_dir = d->o->data_dir});
  gpu_init();
  if (gpu_count() == 0) log_info("CUDA: %s", gpu_unavailable_reason());
  gpu_warm_start(); /* each GPU's pinned slots, while the rest starts */
  return 0;
}

static int create_scheduler(daemon_parts *d, terr *e) {
  const app_opts *o = d->o;
  d->scfg = (sched_config){
      .st = d->st,
      .data_dir = o->data_dir,
      .threads = (int)o->threads,
      .queue_limit = (int)o->queue_limit,
      .default_timeout_s = (double)o->job_timeout,
      .max_result_bytes = o->max_result,
      .max_job_mem_bytes = o->max_result * 2 + o->max_elems * 8,
      .inline_result_max = 0, /* the scheduler's measured crossover (16 MiB) */
      /* Results of up to 4 KiB of .npy (about 500 float64) stay in the job's
       * row: a file of their own would cost more than the job. */
      .row_result_max = 4096,
      .calibration_path = d->calib,
      .kind_lookup = kind_find,
      .max_attempts = (int)o->max_attempts,
      .max_memory_bytes = o->max_memory, /* 0: from the machine (compute/sched/mem.c) */
      .local = d->local,
      .split_min_pairs = o->split_min >= 0 ? o->split_min
                         : d->cluster     ? 200000000
                                          : 0,
      .tiles = (int)o->tiles, /* 0: 2 x live nodes */
      .spare_results = o->spare_results, /* -1: the default */
  };
  return sched_create(&d->scfg, &d->sc, e);
}

static int create_server(daemon_parts *d, terr *e) {
  const app_opts *o = d->o;
  http_config hcfg = {
      .listen = o->listen,
      .port = (int)o->port,
      .threads = (int)o->http_threads,
      .max_body = o->max_body,
      .max_upload = o->max_upload,
      .conn_timeout_s = (int)o->conn_timeout,
      .per_ip_limit = (int)o->per_ip,
      .token_file = o->token_file,
      .web_dir = o->web_dir,
      .access_log = (int)o->access_log,
      .header_timeout_s = (int)o->header_timeout,
      .min_body_rate = o->min_body_rate,
      .max_conns = o->max_conns,
      .server_names = o->server_names,
      .allow_origins = o->allow_origins,
      .tls_cert = o->tls_cert,
      .tls_key = o->tls_key,
  };
  return http_server_create(&hcfg, &d->srv, e);
}

/* The API's context, registered on the server: every resource's handlers
 * see it (api/api.h). */
static int register_api(daemon_parts *d, terr *e) {
  const app_opts *o = d->o;
  T_ASSERT(d->st && d->sc && d->srv); /* the parts the API calls into */
  d->jctx = (jobs){
      .st = d->st,
      .sc = d->sc,
      .max_elems = o->max_elems,
      .max_result_bytes = o->max_result,
      .default_timeout_s = (double)o->job_timeout,
      .local = d->local,
      /* keyed ?wait submits inserted [async]: one node only */
      .rids = d->cluster ? NULL : jobs_rids_new(),
      /* threads that check a batch's items beside its HTTP thread */
      .checkers = jobs_checkers_new(),
  };
  d->arr = (arrays){.st = d->st, .data_dir = o->data_dir};
  /* Uploads a dead process left unfinished; not on a cluster store, whose
   * data directory is shared: the .tmp files may be other nodes' uploads in
   * progress. */
  if (!d->cluster) arrays_sweep(&d->arr);
  jobs_uploads_setup(&(parts_limits){.ttl_s = o->upload_ttl,
                                     .max_open = o->max_open_uploads,
                                     .max_pending = o->max_upload_pending,
                                     .max_bytes = o->max_upload,
                                     .max_elems = o->max_elems});
  d->actx = (api_ctx){
      .srv = d->srv,
      .jobs = &d->jctx,
      .arrays = &d->arr,
      .max_elems = o->max_elems,
      .max_json_result = o->max_json,
      .started_wall_ms = t_wall_ms(),
      .tokens = o->token_file != NULL,
      .tls = o->tls_cert != NULL,
      .limits = {
          .max_body = o->max_body,
          .max_upload = o->max_upload,
          .max_result = o->max_result,
          .queue_limit = o->queue_limit,
          .job_timeout_s = o->job_timeout,
          .result_ttl_s = o->ttl,
          .max_attempts = o->max_attempts,
          .max_memory = o->max_memory,
          .max_job_memory = d->scfg.max_job_mem_bytes,
          .max_connections = o->max_conns,
          .per_ip_limit = o->per_ip,
          .conn_timeout_s = o->conn_timeout,
          .header_timeout_s = o->header_timeout,
          .min_body_rate = o->min_body_rate,
      },
  };
  return api_register(d->srv, &d->actx, e);
}

/* The node: named and reachable as it listens (the port is known now, also
 * when --port 0 picked it). */
static int join_cluster(daemon_parts *d, terr *e) {
  char name[300], url[400];
  const char *lh = d->o->listen;
  int any = strcmp(lh, "0.0.0.0") == 0 || strcmp(lh, "::") == 0;
  const char *h = any ? d->host : lh;
  int port = http_port(d->srv);
  T_ASSERT(port > 0 && port <= 65535); /* started: --port 0 has been picked */
  if (d->o->node_name[0])
    snprintf(name, sizeof name, "%s", d->o->node_name);
  else
    snprintf(name, sizeof name, "%s:%d", d->host, port);
  snprintf(url, sizeof url, "%s://%s%s%s:%d/", http_is_tls(d->srv) ? "https" : "http",
           strchr(h, ':') ? "[" : "", h, strchr(h, ':') ? "]" : "", port);
  sched_node_config nc = {.name = name, .url = url, .version = TESSEL_VERSION,
                          .lease_ms = (int)d->o->lease_s * 1000};
  return sched_join(d->sc, &nc, e);
}

/* The warnings about an exposed listener, the log line, and the stdout
 * line scripts wait for. */
static void announce(const daemon_parts *d) {
  const app_opts *o = d->o;
  const char *lh = o->listen;
  int loopback = strcmp(lh, "127.0.0.1") == 0 || strcmp(lh, "::1") == 0 ||
                 strcmp(lh, "localhost") == 0;
  if (!o->token_file && !loopback)
    log_warn("listening on %s with no --token-file: anyone who can reach it can "
             "submit jobs", lh);
  sched_stats ss;
  sched_get_stats(d->sc, &ss);
  const char *scheme = http_is_tls(d->srv) ? "https" : "http";
  if (o->token_file && !http_is_tls(d->srv) && !loopback)
    log_warn("tokens travel in clear text on %s: use --tls-cert/--tls-key or a "
             "reverse proxy that terminates TLS (README)", lh);
  /* Not "listening on <url>": scripts wait for the stdout line below, and
   * some read stderr with it. */
  log_info("tesseld %s up on %s port %d (%s), data in %s, %d CPU workers, %d GPU(s)%s",
           TESSEL_VERSION, lh, http_port(d->srv), scheme, o->data_dir, ss.workers,
           gpu_count(), o->token_file ? ", tokens required" : "");
  /* A line a script can wait for, also when port 0 picked the port. */
  printf("tesseld: listening on %s://%s:%d/\n", scheme, lh, http_port(d->srv));
  fflush(stdout);
}

/* Until SIGINT/SIGTERM: the disk reserve's watch every second, and expiry
 * at start and then every ttl/2 (between 1 s and 60 s). */
static void serve_until_stopped(const daemon_parts *d, sigset_t *sigs) {
  int64_t ttl = d->o->ttl;
  double expiry_every_ms = ttl > 0 ? (double)ttl * 500.0 : 60e3;
  if (expiry_every_ms < 1e3) expiry_every_ms = 1e3;
  if (expiry_every_ms > 60e3) expiry_every_ms = 60e3;
  expire_old(d->st, ttl);
  double next_expiry = t_now_ms() + expiry_every_ms;
  for (;;) {
    struct timespec ts = {1, 0};
    int sig = sigtimedwait(sigs, NULL, &ts);
    if (sig < 0 && stop_signal) sig = stop_signal;
    if (sig == SIGINT || sig == SIGTERM) {
      log_info("signal %d: shutting down (jobs get up to %llds)", sig,
               (long long)d->o->shutdown_s);
      return;
    }
    reserve_watch(1); /* a full disk: given up; room again: taken back */
    int nup = 0; /* uploads in parts untouched for --upload-ttl */
    jobs_uploads_expire(&nup);
    if (nup) log_info("expired %d incomplete uploads in parts", nup);
    if (t_now_ms() >= next_expiry) {
      expire_old(d->st, ttl);
      next_expiry = t_now_ms() + expiry_every_ms;
    }
  }
}

int main(int argc, char **argv) {
  app_opts o;
  int prc = app_opts_parse(argc, argv, &o);
  if (prc) {
    app_opts_free(&o);
    return prc == 1 ? 0 : 2;
  }
  jobs_regions_setup(o.region_bytes); /* compute/array/region.h */
  /* The store URL last among the flags: nothing above returns holding it. */
  char *store_url = NULL;
  if (app_opts_store_url(&o, &store_url)) {
    app_opts_free(&o);
    return 2;
  }

  /* Signals: blocked everywhere (threads inherit the mask), taken below. */
  sigset_t sigs;
  block_stop_signals(&sigs);

  daemon_parts d = {.o = &o};
  int rc = guard_data_dir(o.data_dir, store_url, o.disk_reserve);
  if (!rc && open_local_dirs(&d)) rc = 2;
  if (rc) {
    free(store_url);
    app_opts_free(&o);
    return rc;
  }
  rc = open_store_and_gpus(&d, store_url); /* frees store_url */
  terr e;
  terr_clear(&e);
  if (rc) goto out;
  rc = 1;
  if (create_scheduler(&d, &e)) {
    log_error("scheduler: %s", e.message);
    goto out;
  }
  if (create_server(&d, &e)) {
    log_error("http: %s", e.message);
    goto out;
  }
  if (register_api(&d, &e) || sched_start(d.sc, &e) || http_server_start(d.srv, &e)) {
    log_error("start: %s", e.message);
    goto out;
  }
  if (join_cluster(&d, &e)) {
    log_error("cannot join the cluster: %s", e.message);
    rc = 2;
    goto out;
  }
  announce(&d);
  serve_until_stopped(&d, &sigs);
  rc = 0;
  http_server_quiesce(d.srv);
  sched_shutdown(d.sc, (double)o.shutdown_s);

out:
  http_server_destroy(d.srv);
  sched_destroy(d.sc);
  gpu_shutdown();
  store_close(d.st);
  jobs_rids_free(d.jctx.rids); /* after the last job's end */
  jobs_checkers_free(d.jctx.checkers); /* after the last batch */
  jobs_local_free(d.local);
  reserve_close();
  dirlock_release();
  app_opts_free(&o);
  if (rc) log_error("tesseld stopped after an error");
  else log_info("tesseld stopped");
  return rc;
}
