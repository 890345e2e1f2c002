/* main.c — tesseld: configuration, start-up, the signal loop, shutdown.
 *
 * Every setting has a flag, an environment variable and a default; a flag
 * beats the variable (`tesseld --help` lists them). Start-up order: data
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
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "compute/gpu/gpu.h"
#include "compute/jobs/jobs.h"
#include "compute/jobs/lifecycle.h"
#include "compute/sched/sched.h"
#include "db/store.h"
#include "server/http.h"
#include "util/datadir.h"
#include "util/util.h"
#include "util/xfer.h"

/* --local-dir may be given more than once (the variable: dirs separated by
 * ':'); every other option keeps its last value. */
#define LOCAL_DIRS_MAX 16

typedef struct option_def {
  const char *flag;  /* long option name */
  const char *env;   /* environment variable */
  const char *def;   /* default, as text */
  const char *help;
} option_def;

enum {
  O_LISTEN, O_PORT, O_DATA_DIR, O_THREADS, O_HTTP_THREADS, O_TOKEN_FILE,
  O_WEB_DIR, O_QUEUE_LIMIT, O_JOB_TIMEOUT, O_RESULT_TTL, O_MAX_BODY,
  O_MAX_UPLOAD, O_MAX_RESULT, O_MAX_ELEMENTS, O_MAX_JSON, O_SHUTDOWN,
  O_CONN_TIMEOUT, O_PER_IP, O_ACCESS_LOG, O_LOG_LEVEL, O_LOG_FORMAT, O_MAX_XFER,
  O_MAX_ATTEMPTS, O_MAX_MEMORY, O_SERVER_NAME, O_ALLOW_ORIGIN,
  O_HEADER_TIMEOUT, O_MIN_BODY_RATE, O_MAX_CONNS, O_LOCAL_DIR, O_TLS_CERT, O_TLS_KEY,
  O_STORE, O_STORE_FILE, O_NODE_NAME, O_LEASE, O_SPLIT_MIN_PAIRS, O_TILES, O_DISK_RESERVE, O_REGION_BYTES,
  O_UPLOAD_TTL, O_MAX_OPEN_UPLOADS, O_MAX_UPLOAD_PENDING,
  O__COUNT
};

static const option_def opts[O__COUNT] = {
  [O_LISTEN] = {"listen", "TESSEL_LISTEN", "127.0.0.1", "address to bind (0.0.0.0 or :: for all)"},
  [O_PORT] = {"port", "TESSEL_PORT", "8080", "TCP port (0 picks a free one)"},
  [O_DATA_DIR] = {"data-dir", "TESSEL_DATA_DIR", "./data", "store, results and uploads"},
  [O_THREADS] = {"threads", "TESSEL_THREADS", "0", "CPU worker threads (0: one per core)"},
  [O_HTTP_THREADS] = {"http-threads", "TESSEL_HTTP_THREADS", "4", "HTTP worker threads"},
  [O_TOKEN_FILE] = {"token-file", "TESSEL_TOKEN_FILE", "", "lines name:token; when set every /v1 route needs a bearer token"},
  [O_WEB_DIR] = {"web-dir", "TESSEL_WEB_DIR", "", "dashboard files served at / (default: the source tree's web/)"},
  [O_QUEUE_LIMIT] = {"queue-limit", "TESSEL_QUEUE_LIMIT", "10000", "queued jobs before 429"},
  [O_JOB_TIMEOUT] = {"job-timeout", "TESSEL_JOB_TIMEOUT", "600", "default job timeout, seconds"},
  [O_RESULT_TTL] = {"result-ttl", "TESSEL_RESULT_TTL", "604800", "seconds finished jobs (and unused arrays) are kept; 0 keeps them"},
  [O_MAX_BODY] = {"max-body", "TESSEL_MAX_BODY", "16777216", "cap on JSON request bodies, bytes"},
  [O_MAX_UPLOAD] = {"max-upload", "TESSEL_MAX_UPLOAD", "4294967296", "cap on array uploads, bytes"},
  [O_MAX_RESULT] = {"max-result", "TESSEL_MAX_RESULT", "21474836480", "cap on one job's result, bytes (413 beyond)"},
  [O_MAX_ELEMENTS] = {"max-elements", "TESSEL_MAX_ELEMENTS", "2000000000", "cap on the elements of any one array"},
  [O_MAX_JSON] = {"max-json-result", "TESSEL_MAX_JSON_RESULT", "268435456", "results bigger than this are not given as JSON (406)"},
  [O_SHUTDOWN] = {"shutdown-deadline", "TESSEL_SHUTDOWN_DEADLINE", "30", "seconds running jobs get to finish at shutdown"},
  [O_CONN_TIMEOUT] = {"conn-timeout", "TESSEL_CONN_TIMEOUT", "60", "idle connection timeout, seconds"},
  [O_PER_IP] = {"per-ip-limit", "TESSEL_PER_IP_LIMIT", "256", "connections one client address may hold; more get 503 + Retry-After"},
  [O_HEADER_TIMEOUT] = {"header-timeout", "TESSEL_HEADER_TIMEOUT", "10", "seconds a new connection has to send its request's headers"},
  [O_MIN_BODY_RATE] = {"min-body-rate", "TESSEL_MIN_BODY_RATE", "16384", "bytes/s a request body must average after 10 s (0: no minimum)"},
  [O_MAX_CONNS] = {"max-connections", "TESSEL_MAX_CONNECTIONS", "4096", "connections at once from all clients"},
  [O_ACCESS_LOG] = {"access-log", "TESSEL_ACCESS_LOG", "1", "1: log a line per request"},
  [O_LOG_LEVEL] = {"log-level", "TESSEL_LOG_LEVEL", "info", "debug, info, warn or error"},
  [O_LOG_FORMAT] = {"log-format", "TESSEL_LOG_FORMAT", "text", "text, or json (one object per line, for log shippers)"},
  [O_MAX_XFER] = {"max-transfer-memory", "TESSEL_MAX_TRANSFER_MEMORY", "0", "bytes all uploads and downloads may hold at once (503 beyond); 0: half of RAM or of the cgroup limit"},
  [O_MAX_ATTEMPTS] = {"max-attempts", "TESSEL_MAX_ATTEMPTS", "3", "starts of a job the process died in before it fails 'crashed'"},
  [O_SERVER_NAME] = {"server-name", "TESSEL_SERVER_NAME", "", "comma-separated host names the server also answers to (Host header); on loopback only loopback names pass otherwise (421)"},
  [O_ALLOW_ORIGIN] = {"allow-origin", "TESSEL_ALLOW_ORIGIN", "", "comma-separated origins (https://app.example) whose pages may call the API (CORS); others get 403 on POST/DELETE"},
  [O_TLS_CERT] = {"tls-cert", "TESSEL_TLS_CERT", "", "PEM certificate (chain): serve HTTPS instead of HTTP (with --tls-key)"},
  [O_TLS_KEY] = {"tls-key", "TESSEL_TLS_KEY", "", "PEM private key of --tls-cert (unencrypted; keep it readable by tesseld only)"},
  [O_LOCAL_DIR] = {"local-dir", "TESSEL_LOCAL_DIR", "", "same-host files: {\"file\"} inputs and \"output\" files under this directory (with tokens: its subdirectory named as the token); repeat the flag, or ':' between dirs in the variable; off when not given"},
  [O_STORE] = {"store", "TESSEL_STORE", "", "the store: sqlite: (in the data directory) or a postgresql:// URL, which makes this tesseld a node of a cluster (every node: the same store URL and the same data directory)"},
  [O_STORE_FILE] = {"store-file", "TESSEL_STORE_FILE", "", "a file whose first line is the store URL (keeps a password out of the process list; never logged)"},
  [O_NODE_NAME] = {"node-name", "TESSEL_NODE_NAME", "", "this node's name in /v1/nodes and job records (default: host name:port)"},
  [O_LEASE] = {"lease-s", "TESSEL_LEASE_S", "10", "cluster: seconds a node's claim on a job lasts without a heartbeat (1 to 300); a dead node's jobs run elsewhere after it"},
  [O_SPLIT_MIN_PAIRS] = {"split-min-pairs", "TESSEL_SPLIT_MIN_PAIRS", "", "geodesic jobs with at least this many pairs are split into tiles (0: never; default 0 on SQLite, 200000000 on PostgreSQL)"},
  [O_TILES] = {"tiles", "TESSEL_TILES", "", "tiles per split job, 2 to 256 (default: 2 x live nodes)"},
  [O_DISK_RESERVE] = {"disk-reserve", "TESSEL_DISK_RESERVE", "", "bytes kept free on the data directory's disk so that deletes, expiry and the store's bookkeeping work when it is full (new work then gets 507); 0: none (default: 64 MiB or 5% of the file system, the smaller)"},
  [O_UPLOAD_TTL] = {"upload-ttl", "TESSEL_UPLOAD_TTL", "3600", "seconds an upload in parts (POST /v1/uploads) may stay untouched before it is dropped; 0 keeps it"},
  [O_MAX_OPEN_UPLOADS] = {"max-open-uploads", "TESSEL_MAX_OPEN_UPLOADS", "16", "uploads in parts one token may hold open at once (413 beyond)"},
  [O_MAX_UPLOAD_PENDING] = {"max-upload-pending", "TESSEL_MAX_UPLOAD_PENDING", "17179869184", "bytes the open uploads in parts of one token may hold in all (413 beyond)"},
  [O_REGION_BYTES] = {"region-bytes", "TESSEL_REGION_BYTES", "0", "bytes of registered regions (/v1/regions) one token may hold (0: a quarter of RAM)"},
  [O_MAX_MEMORY] = {"max-memory", "TESSEL_MAX_MEMORY", "0", "memory budget of running jobs, bytes (0: 80% of the smaller of RAM and the cgroup limit)"},
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: tesseld [options]\n"
          "Tessel %s: array jobs and geodesic distance matrices over HTTP.\n\n"
          "Each option may also be set by its environment variable; a flag "
          "wins.\n\n",
          TESSEL_VERSION);
  for (int i = 0; i < O__COUNT; i++)
    fprintf(f, "  --%-18s %-26s %s (default: %s)\n", opts[i].flag, opts[i].env,
            opts[i].help, opts[i].def[0] ? opts[i].def : "none");
  fprintf(f, "  --%-18s %-26s %s\n", "help", "", "this text");
  fprintf(f, "  --%-18s %-26s %s\n", "version", "", "print the version");
}

static int get_i64(const char *const *val, int o, int64_t lo, int64_t hi,
                   int64_t *out) {
  if (t_parse_i64(val[o], out) || *out < lo || *out > hi) {
    fprintf(stderr, "tesseld: --%s (%s) must be an integer from %lld to %lld, not '%s'\n",
            opts[o].flag, opts[o].env, (long long)lo, (long long)hi, val[o]);
    return -1;
  }
  return 0;
}

/* The store URL: --store, or the first line of --store-file (not both).
 * Only its scheme is checked here (the URL itself is never printed: it may
 * hold a password); store_open_url says the rest. 0, or -1 with a message
 * on stderr. *url: a new string ("" for the default, SQLite). */
static int store_url_get(const char *const *val, char **url) {
  *url = NULL;
  if (val[O_STORE][0] && val[O_STORE_FILE][0]) {
    fprintf(stderr, "tesseld: give --store (TESSEL_STORE) or --store-file "
                    "(TESSEL_STORE_FILE), not both\n");
    return -1;
  }
  if (val[O_STORE_FILE][0]) {
    FILE *f = fopen(val[O_STORE_FILE], "r");
    char line[4096];
    if (!f) {
      fprintf(stderr, "tesseld: --store-file (TESSEL_STORE_FILE): cannot "
                      "read %s: %s\n", val[O_STORE_FILE], strerror(errno));
      return -1;
    }
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[got ? strcspn(line, "\r\n") : 0] = 0;
    if (!line[0]) {
      fprintf(stderr, "tesseld: --store-file (TESSEL_STORE_FILE): %s has no "
                      "store URL on its first line\n", val[O_STORE_FILE]);
      return -1;
    }
    *url = strdup(line);
  } else {
    *url = strdup(val[O_STORE]);
  }
  if (!*url) return -1;
  const char *u = *url;
  /* libpq's key=value conninfo ("host=/run/pg dbname=tessel") too */
  int conninfo = strchr(u, '=') && !strstr(u, "://");
  if (!(u[0] == 0 || strcmp(u, "sqlite:") == 0 || conninfo ||
        strncmp(u, "postgresql://", 13) == 0 ||
        strncmp(u, "postgres://", 11) == 0)) {
    fprintf(stderr, "tesseld: --store%s: the store URL must be sqlite:, "
                    "postgresql://... or a key=value conninfo (not shown: "
                    "it may hold a password)\n",
            val[O_STORE_FILE][0] ? "-file" : "");
    free(*url);
    *url = NULL;
    return -1;
  }
  return 0;
}

/* A file-name-safe copy of a node name (calibration-<name>.json). */
static void name_for_file(const char *name, char *out, size_t cap) {
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

/* One daemon per data directory, before anything in it is read or changed
 * (the store, the in-flight journal, the upload sweep): a second one exits
 * 2 naming the first's pid; cluster nodes share theirs. Then the data
 * disk's reserve (util/datadir.h), before the store writes. 0, or the exit
 * status, with the message logged. */
static int guard_data_dir(const char *data_dir, const char *store_url,
                          int64_t disk_reserve) {
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

int main(int argc, char **argv) {
  const char *val[O__COUNT];
  for (int i = 0; i < O__COUNT; i++) {
    const char *env = getenv(opts[i].env);
    val[i] = env && *env ? env : opts[i].def;
  }
  struct option lopts[O__COUNT + 3];
  for (int i = 0; i < O__COUNT; i++)
    lopts[i] = (struct option){opts[i].flag, required_argument, NULL, i};
  lopts[O__COUNT] = (struct option){"help", no_argument, NULL, 'h'};
  lopts[O__COUNT + 1] = (struct option){"version", no_argument, NULL, 'V'};
  lopts[O__COUNT + 2] = (struct option){0, 0, 0, 0};
  const char *local_dirs[LOCAL_DIRS_MAX];
  int nlocal = 0, local_flag = 0;
  char *local_env = val[O_LOCAL_DIR][0] ? strdup(val[O_LOCAL_DIR]) : NULL;
  for (char *d = local_env; d && *d;) { /* "a:b:c", empty parts skipped */
    char *colon = strchr(d, ':');
    if (colon) *colon = 0;
    if (*d && nlocal == LOCAL_DIRS_MAX) {
      fprintf(stderr, "tesseld: more than %d --local-dir\n", LOCAL_DIRS_MAX);
      free(local_env);
      return 2;
    }
    if (*d) local_dirs[nlocal++] = d;
    d = colon ? colon + 1 : NULL;
  }
  int c;
  while ((c = getopt_long(argc, argv, "hV", lopts, NULL)) != -1) {
    if (c == 'h') {
      usage(stdout);
      return 0;
    }
    if (c == 'V') {
      printf("tesseld %s\n", TESSEL_VERSION);
      return 0;
    }
    if (c < 0 || c >= O__COUNT) {
      usage(stderr);
      return 2;
    }
    if (c == O_LOCAL_DIR) { /* a flag replaces the variable's list */
      if (!local_flag) nlocal = 0;
      local_flag = 1;
      if (nlocal == LOCAL_DIRS_MAX) {
        fprintf(stderr, "tesseld: more than %d --local-dir\n", LOCAL_DIRS_MAX);
        return 2;
      }
      local_dirs[nlocal++] = optarg;
    }
    val[c] = optarg;
  }
  if (optind < argc) {
    fprintf(stderr, "tesseld: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return 2;
  }

  int64_t port, threads, http_threads, queue_limit, job_timeout, ttl, max_body,
      max_upload, max_result, max_elems, max_json, shutdown_s, conn_timeout,
      per_ip, access_log, max_xfer, max_attempts, max_memory, header_timeout,
      min_body_rate, max_conns, lease_s, split_min = -1, tiles = 0,
      disk_reserve = -1, upload_ttl, max_open_uploads, max_upload_pending,
      region_bytes = 0;
  if (get_i64(val, O_PORT, 0, 65535, &port) ||
      get_i64(val, O_THREADS, 0, 1024, &threads) ||
      get_i64(val, O_HTTP_THREADS, 1, 256, &http_threads) ||
      get_i64(val, O_QUEUE_LIMIT, 1, 100000000, &queue_limit) ||
      get_i64(val, O_JOB_TIMEOUT, 1, 86400 * 7, &job_timeout) ||
      get_i64(val, O_RESULT_TTL, 0, INT64_MAX / 1000, &ttl) ||
      get_i64(val, O_MAX_BODY, 1024, INT64_MAX, &max_body) ||
      get_i64(val, O_MAX_UPLOAD, 1024, INT64_MAX, &max_upload) ||
      get_i64(val, O_MAX_RESULT, 8, INT64_MAX, &max_result) ||
      get_i64(val, O_MAX_ELEMENTS, 1, INT64_MAX / 8, &max_elems) ||
      get_i64(val, O_MAX_JSON, 1024, INT64_MAX, &max_json) ||
      get_i64(val, O_SHUTDOWN, 0, 86400, &shutdown_s) ||
      get_i64(val, O_CONN_TIMEOUT, 1, 86400, &conn_timeout) ||
      get_i64(val, O_PER_IP, 1, 1000000, &per_ip) ||
      get_i64(val, O_ACCESS_LOG, 0, 1, &access_log) ||
      get_i64(val, O_MAX_XFER, 0, INT64_MAX, &max_xfer) ||
      get_i64(val, O_MAX_ATTEMPTS, 1, 1000, &max_attempts) ||
      get_i64(val, O_MAX_MEMORY, 0, INT64_MAX, &max_memory) ||
      get_i64(val, O_HEADER_TIMEOUT, 1, 3600, &header_timeout) ||
      get_i64(val, O_MIN_BODY_RATE, 0, INT64_MAX, &min_body_rate) ||
      get_i64(val, O_MAX_CONNS, 16, 1000000, &max_conns) ||
      get_i64(val, O_LEASE, 1, 300, &lease_s) ||
      get_i64(val, O_UPLOAD_TTL, 0, INT64_MAX / 1000, &upload_ttl) ||
      get_i64(val, O_MAX_OPEN_UPLOADS, 1, 1000000, &max_open_uploads) ||
      get_i64(val, O_MAX_UPLOAD_PENDING, 1024, INT64_MAX, &max_upload_pending) ||
      get_i64(val, O_REGION_BYTES, 0, INT64_MAX, &region_bytes) ||
      (val[O_SPLIT_MIN_PAIRS][0] &&
       get_i64(val, O_SPLIT_MIN_PAIRS, 0, INT64_MAX, &split_min)) ||
      (val[O_TILES][0] && get_i64(val, O_TILES, 2, 256, &tiles)) ||
      (val[O_DISK_RESERVE][0] &&
       get_i64(val, O_DISK_RESERVE, 0, INT64_MAX, &disk_reserve)))
    return 2;
  if (strlen(val[O_NODE_NAME]) > 100) {
    fprintf(stderr, "tesseld: --node-name (TESSEL_NODE_NAME) takes at most "
                    "100 bytes\n");
    return 2;
  }
  xfer_budget_set(max_xfer);
  jobs_regions_setup(region_bytes); /* compute/array/region.h */
  if (strcmp(val[O_LOG_FORMAT], "json") == 0) {
    t_log_json = 1;
  } else if (strcmp(val[O_LOG_FORMAT], "text") != 0) {
    fprintf(stderr, "tesseld: --log-format must be text or json\n");
    return 2;
  }
  const char *lvl = val[O_LOG_LEVEL];
  if (strcmp(lvl, "debug") == 0) t_log_level = T_LOG_DEBUG;
  else if (strcmp(lvl, "info") == 0) t_log_level = T_LOG_INFO;
  else if (strcmp(lvl, "warn") == 0) t_log_level = T_LOG_WARN;
  else if (strcmp(lvl, "error") == 0) t_log_level = T_LOG_ERROR;
  else {
    fprintf(stderr, "tesseld: --log-level must be debug, info, warn or error\n");
    return 2;
  }
  /* The store URL last among the flags: nothing above returns holding it. */
  char *store_url = NULL;
  if (store_url_get(val, &store_url)) return 2;

  /* Signals: blocked everywhere (threads inherit the mask), taken below. */
  sigset_t sigs;
  block_stop_signals(&sigs);

  const char *data_dir = val[O_DATA_DIR];
  char sub[4200];
  for (int i = 0; i < 3; i++) {
    static const char *const dirs[] = {"", "/arrays", "/results"};
    snprintf(sub, sizeof sub, "%s%s", data_dir, dirs[i]);
    if (t_mkdirs(sub) != 0) {
      log_error("cannot create %s: %s", sub, strerror(errno));
      free(store_url);
      return 1;
    }
  }
  int grc = guard_data_dir(data_dir, store_url, disk_reserve);
  if (grc) {
    free(store_url);
    return grc;
  }
  const char *web_dir = val[O_WEB_DIR];
  char web_default[4200];
  if (!web_dir[0]) {
    struct stat sb;
    snprintf(web_default, sizeof web_default, "%s/web", TESSEL_SOURCE_DIR);
    web_dir = stat(web_default, &sb) == 0 ? web_default : NULL;
  }
  const char *token_file = val[O_TOKEN_FILE][0] ? val[O_TOKEN_FILE] : NULL;
  /* Same-host files: every directory must be there now (canonical from
   * here on); their mappings are guarded against SIGBUS. */
  struct tlocal *local = NULL;
  {
    terr le;
    int lrc = jobs_local_open(local_dirs, nlocal, token_file != NULL, &local,
                              &le);
    free(local_env);
    if (lrc) {
      fprintf(stderr, "tesseld: --local-dir (TESSEL_LOCAL_DIR): %s\n",
              le.message);
      free(store_url);
      return 2;
    }
  }

  int rc = 1;
  terr e;
  terr_clear(&e);
  store *st = NULL;
  sched *sc = NULL;
  http_server *srv = NULL;
  char calib[4200];
  snprintf(calib, sizeof calib, "%s/calibration.json", data_dir);

  /* A bad store (unreachable, refused, a newer schema, another data
   * directory's) is bad configuration: exit 2, the store unchanged. The
   * message never holds the URL's password (store_open_url). */
  if (store_open_url(store_url, data_dir, &st, &e)) {
    log_error("%s", e.message);
    free(store_url);
    store_url = NULL;
    rc = 2;
    goto out;
  }
  free(store_url);
  store_url = NULL;
  int cluster = store_is_cluster(st);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  if (cluster) {
    /* Nodes share the data directory: each keeps its router calibration
     * under its own name (one host's nodes share the host's). */
    char fname[128];
    name_for_file(val[O_NODE_NAME][0] ? val[O_NODE_NAME] : host, fname,
                  sizeof fname);
    snprintf(calib, sizeof calib, "%s/calibration-%s.json", data_dir, fname);
  }
  if (split_min < 0) split_min = cluster ? 200000000 : 0;
  /* Compiled GPU kernels are cached under <data>/kernels across restarts. */
  gpu_configure(&(gpu_config){.data_dir = data_dir});
  gpu_init();
  if (gpu_count() == 0) log_info("CUDA: %s", gpu_unavailable_reason());
  sched_config scfg = {
      .st = st,
      .data_dir = data_dir,
      .threads = (int)threads,
      .queue_limit = (int)queue_limit,
      .default_timeout_s = (double)job_timeout,
      .max_result_bytes = max_result,
      .max_job_mem_bytes = max_result * 2 + max_elems * 8,
      .inline_result_max = 0, /* the scheduler's measured crossover (16 MiB) */
      /* Results of up to 4 KiB of .npy (about 500 float64) stay in the job's
       * row: a file of their own would cost more than the job. */
      .row_result_max = 4096,
      .calibration_path = calib,
      .kind_lookup = kind_find,
      .max_attempts = (int)max_attempts,
      .max_memory_bytes = max_memory, /* 0: from the machine (compute/sched/mem.c) */
      .local = local,
      .split_min_pairs = split_min,
      .tiles = (int)tiles, /* 0: 2 x live nodes */
  };
  if (sched_create(&scfg, &sc, &e)) {
    log_error("scheduler: %s", e.message);
    goto out;
  }
  http_config hcfg = {
      .listen = val[O_LISTEN],
      .port = (int)port,
      .threads = (int)http_threads,
      .max_body = max_body,
      .max_upload = max_upload,
      .conn_timeout_s = (int)conn_timeout,
      .per_ip_limit = (int)per_ip,
      .token_file = token_file,
      .web_dir = web_dir,
      .access_log = (int)access_log,
      .header_timeout_s = (int)header_timeout,
      .min_body_rate = min_body_rate,
      .max_conns = max_conns,
      .server_names = val[O_SERVER_NAME],
      .allow_origins = val[O_ALLOW_ORIGIN],
      .tls_cert = val[O_TLS_CERT][0] ? val[O_TLS_CERT] : NULL,
      .tls_key = val[O_TLS_KEY][0] ? val[O_TLS_KEY] : NULL,
  };
  if (http_server_create(&hcfg, &srv, &e)) {
    log_error("http: %s", e.message);
    goto out;
  }
  jobs jctx = {
      .st = st,
      .sc = sc,
      .max_elems = max_elems,
      .max_result_bytes = max_result,
      .default_timeout_s = (double)job_timeout,
      .local = local,
  };
  arrays actx_arrays = {.st = st, .data_dir = data_dir};
  /* Uploads a dead process left unfinished; not on a cluster store, whose
   * data directory is shared: the .tmp files may be other nodes' uploads in
   * progress. */
  if (!cluster) arrays_sweep(&actx_arrays);
  jobs_uploads_setup(&(parts_limits){.ttl_s = upload_ttl,
                                     .max_open = max_open_uploads,
                                     .max_pending = max_upload_pending,
                                     .max_bytes = max_upload,
                                     .max_elems = max_elems});
  api_ctx actx = {
      .srv = srv,
      .jobs = &jctx,
      .arrays = &actx_arrays,
      .max_elems = max_elems,
      .max_json_result = max_json,
      .started_wall_ms = t_wall_ms(),
      .tokens = token_file != NULL,
      .tls = val[O_TLS_CERT][0] != 0,
      .limits = {
          .max_body = max_body,
          .max_upload = max_upload,
          .max_result = max_result,
          .queue_limit = queue_limit,
          .job_timeout_s = job_timeout,
          .result_ttl_s = ttl,
          .max_attempts = max_attempts,
          .max_memory = max_memory,
          .max_job_memory = scfg.max_job_mem_bytes,
          .max_connections = max_conns,
          .per_ip_limit = per_ip,
          .conn_timeout_s = conn_timeout,
          .header_timeout_s = header_timeout,
          .min_body_rate = min_body_rate,
      },
  };
  if (api_register(srv, &actx, &e) || sched_start(sc, &e) ||
      http_server_start(srv, &e)) {
    log_error("start: %s", e.message);
    goto out;
  }
  {
    /* The node: named and reachable as it listens (the port is known now,
     * also when --port 0 picked it). */
    char name[300], url[400];
    const char *lh = val[O_LISTEN];
    int any = strcmp(lh, "0.0.0.0") == 0 || strcmp(lh, "::") == 0;
    if (val[O_NODE_NAME][0])
      snprintf(name, sizeof name, "%s", val[O_NODE_NAME]);
    else
      snprintf(name, sizeof name, "%s:%d", host, http_port(srv));
    snprintf(url, sizeof url, "%s://%s%s%s:%d/",
             http_is_tls(srv) ? "https" : "http", strchr(any ? host : lh, ':') ? "[" : "",
             any ? host : lh, strchr(any ? host : lh, ':') ? "]" : "",
             http_port(srv));
    sched_node_config nc = {.name = name, .url = url,
                            .version = TESSEL_VERSION,
                            .lease_ms = (int)lease_s * 1000};
    if (sched_join(sc, &nc, &e)) {
      log_error("cannot join the cluster: %s", e.message);
      rc = 2;
      goto out;
    }
  }
  if (!token_file && strcmp(val[O_LISTEN], "127.0.0.1") != 0 &&
      strcmp(val[O_LISTEN], "::1") != 0 && strcmp(val[O_LISTEN], "localhost") != 0)
    log_warn("listening on %s with no --token-file: anyone who can reach it can "
             "submit jobs", val[O_LISTEN]);
  sched_stats ss;
  sched_get_stats(sc, &ss);
  const char *scheme = http_is_tls(srv) ? "https" : "http";
  if (token_file && !http_is_tls(srv) && strcmp(val[O_LISTEN], "127.0.0.1") != 0 &&
      strcmp(val[O_LISTEN], "::1") != 0 && strcmp(val[O_LISTEN], "localhost") != 0)
    log_warn("tokens travel in clear text on %s: use --tls-cert/--tls-key or a "
             "reverse proxy that terminates TLS (README)", val[O_LISTEN]);
  /* Not "listening on <url>": scripts wait for the stdout line below, and
   * some read stderr with it. */
  log_info("tesseld %s up on %s port %d (%s), data in %s, %d CPU workers, %d GPU(s)%s",
           TESSEL_VERSION, val[O_LISTEN], http_port(srv), scheme, data_dir,
           ss.workers, gpu_count(), token_file ? ", tokens required" : "");
  /* A line a script can wait for, also when port 0 picked the port. */
  printf("tesseld: listening on %s://%s:%d/\n", scheme, val[O_LISTEN],
         http_port(srv));
  fflush(stdout);

  /* Expiry runs at start and then every ttl/2 (between 1 s and 60 s). */
  double expiry_every_ms = ttl > 0 ? (double)ttl * 500.0 : 60e3;
  if (expiry_every_ms < 1e3) expiry_every_ms = 1e3;
  if (expiry_every_ms > 60e3) expiry_every_ms = 60e3;
  expire_old(st, ttl);
  double next_expiry = t_now_ms() + expiry_every_ms;
  for (;;) {
    struct timespec ts = {1, 0};
    int sig = sigtimedwait(&sigs, NULL, &ts);
    if (sig < 0 && stop_signal) sig = stop_signal;
    if (sig == SIGINT || sig == SIGTERM) {
      log_info("signal %d: shutting down (jobs get up to %llds)", sig,
               (long long)shutdown_s);
      break;
    }
    reserve_watch(1); /* a full disk: given up; room again: taken back */
    int nup = 0; /* uploads in parts untouched for --upload-ttl */
    jobs_uploads_expire(&nup);
    if (nup) log_info("expired %d incomplete uploads in parts", nup);
    if (t_now_ms() >= next_expiry) {
      expire_old(st, ttl);
      next_expiry = t_now_ms() + expiry_every_ms;
    }
  }
  rc = 0;
  http_server_quiesce(srv);
  sched_shutdown(sc, (double)shutdown_s);

out:
  http_server_destroy(srv);
  sched_destroy(sc);
  gpu_shutdown();
  store_close(st);
  jobs_local_free(local);
  reserve_close();
  dirlock_release();
  if (rc) log_error("tesseld stopped after an error");
  else log_info("tesseld stopped");
  return rc;
}
