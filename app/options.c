/* options.c — tesseld's option table, its parsers and `--help`.
 *
 * One row per setting: the flag, its environment variable, the default
 * the parser is given when neither is set, the default as `--help` says
 * it (when the text alone would not: "" is "the source tree's web/" for
 * --web-dir, "sqlite:" for --store), the help line, and the parser with
 * the app_opts field it fills (numbers: their range). Parsing takes the
 * variable (an empty one counts as unset), then the command line
 * (getopt_long, generated from the table; the last flag wins but for
 * --local-dir, whose flags add up and replace the variable's list), then
 * runs each row's parser once; the first bad value stops it with a
 * message naming the flag and the variable. Adding an option: a field in
 * app_opts (options.h) and a row here; nothing else.
 */
#include "app/options.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/tassert.h"
#include "util/util.h"
#include "util/xfer.h"

typedef struct opt_def opt_def;
/* text: the value (never NULL); from_env: it came from the variable. */
typedef int (*opt_parser)(const opt_def *d, const char *text, int from_env,
                          app_opts *o);

struct opt_def {
  const char *flag, *env;
  const char *def;   /* what the parser gets when neither is set */
  const char *shown; /* the default as --help says it; NULL: def, or "none" */
  const char *help;
  opt_parser parse;
  size_t off;      /* the field of app_opts the parser fills */
  int64_t lo, hi;  /* numbers: the range */
  int repeat;      /* may be given more than once (each flag parsed) */
};

#define FIELD(f) offsetof(app_opts, f)

static int p_i64(const opt_def *d, const char *text, int from_env, app_opts *o) {
  (void)from_env;
  int64_t *out = (int64_t *)(void *)((char *)o + d->off);
  if (!text[0] && !d->def[0]) return 0; /* optional: the preset stands */
  int64_t v;
  T_ASSERT(d->lo <= d->hi); /* a row's range is not empty */
  if (t_parse_i64(text, &v) || v < d->lo || v > d->hi) {
    fprintf(stderr, "tesseld: --%s (%s) must be an integer from %lld to %lld, not '%s'\n",
            d->flag, d->env, (long long)d->lo, (long long)d->hi, text);
    return -1;
  }
  *out = v;
  return 0;
}

static int p_str(const opt_def *d, const char *text, int from_env, app_opts *o) {
  (void)from_env;
  *(const char **)(void *)((char *)o + d->off) = text;
  return 0;
}

/* "" is "not given": NULL. */
static int p_str_or_null(const opt_def *d, const char *text, int from_env, app_opts *o) {
  (void)from_env;
  *(const char **)(void *)((char *)o + d->off) = text[0] ? text : NULL;
  return 0;
}

static int p_node_name(const opt_def *d, const char *text, int from_env, app_opts *o) {
  if (strlen(text) > 100) {
    fprintf(stderr, "tesseld: --%s (%s) takes at most 100 bytes\n", d->flag, d->env);
    return -1;
  }
  return p_str(d, text, from_env, o);
}

/* Not given: the source tree's web/ when it is there, else no dashboard. */
static int p_web_dir(const opt_def *d, const char *text, int from_env, app_opts *o) {
  (void)d;
  (void)from_env;
  if (text[0]) {
    o->web_dir = text;
    return 0;
  }
  struct stat sb;
  snprintf(o->web_default_, sizeof o->web_default_, "%s/web", TESSEL_SOURCE_DIR);
  o->web_dir = stat(o->web_default_, &sb) == 0 ? o->web_default_ : NULL;
  return 0;
}

static int p_log_format(const opt_def *d, const char *text, int from_env, app_opts *o) {
  (void)d;
  (void)from_env;
  (void)o;
  if (strcmp(text, "json") == 0) {
    t_log_json = 1;
  } else if (strcmp(text, "text") != 0) {
    fprintf(stderr, "tesseld: --log-format must be text or json\n");
    return -1;
  }
  return 0;
}

static int p_log_level(const opt_def *d, const char *text, int from_env, app_opts *o) {
  (void)d;
  (void)from_env;
  (void)o;
  static const char *const names[] = {"debug", "info", "warn", "error"};
  static const int levels[] = {T_LOG_DEBUG, T_LOG_INFO, T_LOG_WARN, T_LOG_ERROR};
  for (int i = 0; i < 4; i++)
    if (strcmp(text, names[i]) == 0) {
      t_log_level = levels[i];
      return 0;
    }
  fprintf(stderr, "tesseld: --log-level must be debug, info, warn or error\n");
  return -1;
}

static int p_max_xfer(const opt_def *d, const char *text, int from_env, app_opts *o) {
  if (p_i64(d, text, from_env, o)) return -1;
  xfer_budget_set(o->max_xfer);
  return 0;
}

static int local_dir_add(app_opts *o, const char *dir) {
  T_ASSERT(o->nlocal >= 0 && o->nlocal <= LOCAL_DIRS_MAX);
  if (o->nlocal == LOCAL_DIRS_MAX) {
    fprintf(stderr, "tesseld: more than %d --local-dir\n", LOCAL_DIRS_MAX);
    return -1;
  }
  o->local_dirs[o->nlocal++] = dir;
  return 0;
}

/* A flag: one directory. The variable (or the empty default): "a:b:c",
 * empty parts skipped. */
static int p_local_dir(const opt_def *d, const char *text, int from_env, app_opts *o) {
  (void)d;
  if (!from_env) return local_dir_add(o, text);
  if (!text[0]) return 0;
  o->local_env_ = strdup(text);
  if (!o->local_env_) return -1;
  for (char *p = o->local_env_; p && *p;) {
    char *colon = strchr(p, ':');
    if (colon) *colon = 0;
    if (*p && local_dir_add(o, p)) return -1;
    p = colon ? colon + 1 : NULL;
  }
  return 0;
}

#define NUM(flag, env, def, lo, hi, field, help) \
  {flag, env, def, NULL, help, p_i64, FIELD(field), lo, hi, 0}
#define OPTNUM(flag, env, shown, lo, hi, field, help) \
  {flag, env, "", shown, help, p_i64, FIELD(field), lo, hi, 0}
#define STR(flag, env, def, shown, field, help) \
  {flag, env, def, shown, help, p_str, FIELD(field), 0, 0, 0}
#define STR_NULL(flag, env, shown, field, help) \
  {flag, env, "", shown, help, p_str_or_null, FIELD(field), 0, 0, 0}
#define FN(flag, env, def, shown, parse, help) \
  {flag, env, def, shown, help, parse, 0, 0, 0, 0}

static const opt_def table[] = {
    STR("listen", "TESSEL_LISTEN", "127.0.0.1", NULL, listen, "address to bind (0.0.0.0 or :: for all)"),
    NUM("port", "TESSEL_PORT", "8080", 0, 65535, port, "TCP port (0 picks a free one)"),
    STR("data-dir", "TESSEL_DATA_DIR", "./data", NULL, data_dir, "store, results and uploads"),
    NUM("threads", "TESSEL_THREADS", "0", 0, 1024, threads, "CPU worker threads (0: one per core)"),
    NUM("http-threads", "TESSEL_HTTP_THREADS", "0", 0, 256, http_threads, "HTTP worker threads (0: one per core, 4 to 16)"),
    STR_NULL("token-file", "TESSEL_TOKEN_FILE", "none (no tokens)", token_file, "lines name:token; when set every /v1 route needs a bearer token"),
    FN("web-dir", "TESSEL_WEB_DIR", "", TESSEL_SOURCE_DIR "/web, when it exists", p_web_dir, "dashboard files served at /"),
    NUM("queue-limit", "TESSEL_QUEUE_LIMIT", "10000", 1, 100000000, queue_limit, "queued jobs before 429"),
    NUM("job-timeout", "TESSEL_JOB_TIMEOUT", "600", 1, 86400 * 7, job_timeout, "default job timeout, seconds"),
    NUM("result-ttl", "TESSEL_RESULT_TTL", "604800", 0, INT64_MAX / 1000, ttl, "seconds finished jobs (and unused arrays) are kept; 0 keeps them"),
    NUM("max-body", "TESSEL_MAX_BODY", "16777216", 1024, INT64_MAX, max_body, "cap on JSON request bodies, bytes"),
    NUM("max-upload", "TESSEL_MAX_UPLOAD", "4294967296", 1024, INT64_MAX, max_upload, "cap on array uploads, bytes"),
    NUM("max-result", "TESSEL_MAX_RESULT", "21474836480", 8, INT64_MAX, max_result, "cap on one job's result, bytes (413 beyond)"),
    NUM("max-elements", "TESSEL_MAX_ELEMENTS", "2000000000", 1, INT64_MAX / 8, max_elems, "cap on the elements of any one array"),
    NUM("max-json-result", "TESSEL_MAX_JSON_RESULT", "268435456", 1024, INT64_MAX, max_json, "results bigger than this are not given as JSON (406)"),
    NUM("shutdown-deadline", "TESSEL_SHUTDOWN_DEADLINE", "30", 0, 86400, shutdown_s, "seconds running jobs get to finish at shutdown"),
    NUM("conn-timeout", "TESSEL_CONN_TIMEOUT", "60", 1, 86400, conn_timeout, "idle connection timeout, seconds"),
    NUM("per-ip-limit", "TESSEL_PER_IP_LIMIT", "256", 1, 1000000, per_ip, "connections one client address may hold; more get 503 + Retry-After"),
    NUM("header-timeout", "TESSEL_HEADER_TIMEOUT", "10", 1, 3600, header_timeout, "seconds a new connection has to send its request's headers"),
    NUM("min-body-rate", "TESSEL_MIN_BODY_RATE", "16384", 0, INT64_MAX, min_body_rate, "bytes/s a request body must average after 10 s (0: no minimum)"),
    NUM("max-connections", "TESSEL_MAX_CONNECTIONS", "4096", 16, 1000000, max_conns, "connections at once from all clients"),
    NUM("access-log", "TESSEL_ACCESS_LOG", "1", 0, 1, access_log, "1: log a line per request"),
    FN("log-level", "TESSEL_LOG_LEVEL", "info", NULL, p_log_level, "debug, info, warn or error"),
    FN("log-format", "TESSEL_LOG_FORMAT", "text", NULL, p_log_format, "text, or json (one object per line, for log shippers)"),
    {"max-transfer-memory", "TESSEL_MAX_TRANSFER_MEMORY", "0", "0 (half of RAM or of the cgroup limit)", "bytes all uploads and downloads may hold at once (503 beyond)", p_max_xfer, FIELD(max_xfer), 0, INT64_MAX, 0},
    NUM("max-attempts", "TESSEL_MAX_ATTEMPTS", "3", 1, 1000, max_attempts, "starts of a job the process died in before it fails 'crashed'"),
    STR("server-name", "TESSEL_SERVER_NAME", "", NULL, server_names, "comma-separated host names the server also answers to (Host header); on loopback only loopback names pass otherwise (421)"),
    STR("allow-origin", "TESSEL_ALLOW_ORIGIN", "", NULL, allow_origins, "comma-separated origins (https://app.example) whose pages may call the API (CORS); others get 403 on POST/DELETE"),
    STR_NULL("tls-cert", "TESSEL_TLS_CERT", "none (HTTP)", tls_cert, "PEM certificate (chain): serve HTTPS instead of HTTP (with --tls-key)"),
    STR_NULL("tls-key", "TESSEL_TLS_KEY", NULL, tls_key, "PEM private key of --tls-cert (unencrypted; keep it readable by tesseld only)"),
    {"local-dir", "TESSEL_LOCAL_DIR", "", "none (off)", "same-host files: {\"file\"} inputs and \"output\" files under this directory (with tokens: its subdirectory named as the token); repeat the flag, or ':' between dirs in the variable", p_local_dir, 0, 0, 0, 1},
    STR("store", "TESSEL_STORE", "", "sqlite: (in the data directory)", store, "the store: sqlite: or a postgresql:// URL, which makes this tesseld a node of a cluster (every node: the same store URL and the same data directory)"),
    STR("store-file", "TESSEL_STORE_FILE", "", NULL, store_file, "a file whose first line is the store URL (keeps a password out of the process list; never logged)"),
    {"node-name", "TESSEL_NODE_NAME", "", "host name:port", "this node's name in /v1/nodes and job records", p_node_name, FIELD(node_name), 0, 0, 0},
    NUM("lease-s", "TESSEL_LEASE_S", "10", 1, 300, lease_s, "cluster: seconds a node's claim on a job lasts without a heartbeat (1 to 300); a dead node's jobs run elsewhere after it"),
    OPTNUM("split-min-pairs", "TESSEL_SPLIT_MIN_PAIRS", "0 on SQLite, 200000000 on PostgreSQL", 0, INT64_MAX, split_min, "geodesic jobs with at least this many pairs are split into tiles (0: never)"),
    OPTNUM("tiles", "TESSEL_TILES", "2 x live nodes", 2, 256, tiles, "tiles per split job, 2 to 256"),
    OPTNUM("spare-results", "TESSEL_SPARE_RESULTS", "an eighth of the memory, at most 8 GiB, on 4 CPUs or more; 0 on fewer", 0, INT64_MAX, spare_results, "bytes of big result files made ahead, their pages in the page cache, so that a big result is copied into pages that are there (compute/array/codec/spare.h); 0: none"),
    OPTNUM("disk-reserve", "TESSEL_DISK_RESERVE", "64 MiB or 5% of the file system, the smaller", 0, INT64_MAX, disk_reserve, "bytes kept free on the data directory's disk so that deletes, expiry and the store's bookkeeping work when it is full (new work then gets 507); 0: none"),
    NUM("upload-ttl", "TESSEL_UPLOAD_TTL", "3600", 0, INT64_MAX / 1000, upload_ttl, "seconds an upload in parts (POST /v1/uploads) may stay untouched before it is dropped; 0 keeps it"),
    NUM("max-open-uploads", "TESSEL_MAX_OPEN_UPLOADS", "16", 1, 1000000, max_open_uploads, "uploads in parts one token may hold open at once (413 beyond)"),
    NUM("max-upload-pending", "TESSEL_MAX_UPLOAD_PENDING", "17179869184", 1024, INT64_MAX, max_upload_pending, "bytes the open uploads in parts of one token may hold in all (413 beyond)"),
    {"region-bytes", "TESSEL_REGION_BYTES", "0", "0 (a quarter of RAM)", "bytes of registered regions (/v1/regions) one token may hold", p_i64, FIELD(region_bytes), 0, INT64_MAX, 0},
    NUM("max-memory", "TESSEL_MAX_MEMORY", "0", 0, INT64_MAX, max_memory, "memory budget of running jobs, bytes (0: 80% of the smaller of RAM and the cgroup limit)"),
};
#define NOPTS ((int)(sizeof table / sizeof table[0]))

void app_opts_usage(FILE *f) {
  fprintf(f,
          "usage: tesseld [options]\n"
          "Tessel %s: array jobs and geodesic distance matrices over HTTP.\n\n"
          "Each option may also be set by its environment variable; a flag "
          "wins.\n\n",
          TESSEL_VERSION);
  for (int i = 0; i < NOPTS; i++) {
    const opt_def *d = &table[i];
    const char *shown = d->shown ? d->shown : d->def[0] ? d->def : "none";
    fprintf(f, "  --%-18s %-26s %s (default: %s)\n", d->flag, d->env, d->help, shown);
  }
  fprintf(f, "  --%-18s %-26s %s\n", "help", "", "this text");
  fprintf(f, "  --%-18s %-26s %s\n", "version", "", "print the version");
}

int app_opts_parse(int argc, char **argv, app_opts *o) {
  memset(o, 0, sizeof *o);
  o->split_min = -1;
  o->disk_reserve = -1;
  o->spare_results = -1;
  const char *text[NOPTS];
  int from_env[NOPTS], flagged[NOPTS];
  struct option lopts[NOPTS + 3];
  for (int i = 0; i < NOPTS; i++) {
    const char *env = getenv(table[i].env);
    from_env[i] = env && *env;
    text[i] = from_env[i] ? env : table[i].def;
    flagged[i] = 0;
    lopts[i] = (struct option){table[i].flag, required_argument, NULL, i};
  }
  lopts[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
  lopts[NOPTS + 1] = (struct option){"version", no_argument, NULL, 'V'};
  lopts[NOPTS + 2] = (struct option){0, 0, 0, 0};
  int c;
  while ((c = getopt_long(argc, argv, "hV", lopts, NULL)) != -1) {
    if (c == 'h' || c == 'V') {
      if (c == 'h') app_opts_usage(stdout);
      else printf("tesseld %s\n", TESSEL_VERSION);
      return 1;
    }
    if (c < 0 || c >= NOPTS) {
      app_opts_usage(stderr);
      return 2;
    }
    T_ASSERT(optarg != NULL); /* every row takes a value */
    flagged[c] = 1;
    text[c] = optarg;
    if (table[c].repeat && table[c].parse(&table[c], optarg, 0, o)) return 2;
  }
  if (optind < argc) {
    fprintf(stderr, "tesseld: unexpected argument '%s'\n", argv[optind]);
    app_opts_usage(stderr);
    return 2;
  }
  for (int i = 0; i < NOPTS; i++) {
    if (table[i].repeat && flagged[i]) continue; /* parsed flag by flag */
    /* a repeatable row not flagged: the variable's list (or the default) */
    int env_form = table[i].repeat || (from_env[i] && !flagged[i]);
    if (table[i].parse(&table[i], text[i], env_form, o)) return 2;
  }
  return 0;
}

void app_opts_free(app_opts *o) {
  free(o->local_env_);
  o->local_env_ = NULL;
}

int app_opts_store_url(const app_opts *o, char **url) {
  *url = NULL;
  if (o->store[0] && o->store_file[0]) {
    fprintf(stderr, "tesseld: give --store (TESSEL_STORE) or --store-file "
                    "(TESSEL_STORE_FILE), not both\n");
    return -1;
  }
  if (o->store_file[0]) {
    FILE *f = fopen(o->store_file, "r");
    char line[4096];
    if (!f) {
      fprintf(stderr, "tesseld: --store-file (TESSEL_STORE_FILE): cannot "
                      "read %s: %s\n", o->store_file, strerror(errno));
      return -1;
    }
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[got ? strcspn(line, "\r\n") : 0] = 0;
    if (!line[0]) {
      fprintf(stderr, "tesseld: --store-file (TESSEL_STORE_FILE): %s has no "
                      "store URL on its first line\n", o->store_file);
      return -1;
    }
    *url = strdup(line);
  } else {
    *url = strdup(o->store);
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
            o->store_file[0] ? "-file" : "");
    free(*url);
    *url = NULL;
    return -1;
  }
  return 0;
}
