/* options.h — tesseld's settings: one table, from which both the parsing
 * and `--help` come (app/options.c).
 *
 * Every setting has a flag, an environment variable and a default; a flag
 * beats the variable, the variable beats the default. Each row of the
 * table names its parser and the field of app_opts it fills, so that a new
 * option is one row (and one field); `--help` prints every row once, with
 * its one true default. --local-dir is the one option that may be given
 * more than once (the variable: directories separated by ':').
 */
#ifndef TESSEL_APP_OPTIONS_H
#define TESSEL_APP_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#define LOCAL_DIRS_MAX 16

typedef struct app_opts {
  /* text settings ("" when not given) */
  const char *listen, *data_dir, *server_names, *allow_origins, *store,
      *store_file, *node_name;
  /* NULL when not given */
  const char *token_file, *tls_cert, *tls_key;
  const char *web_dir; /* NULL: no dashboard (no --web-dir, no source web/) */
  /* numbers, in range (each row says which) */
  int64_t port, threads, http_threads, queue_limit, job_timeout, ttl,
      max_body, max_upload, max_result, max_elems, max_json, shutdown_s,
      conn_timeout, per_ip, access_log, max_xfer, max_attempts, max_memory,
      header_timeout, min_body_rate, max_conns, lease_s;
  int64_t split_min;    /* -1: by the store (0 on SQLite, 2e8 on a cluster) */
  int64_t tiles;        /* 0: 2 x live nodes */
  int64_t disk_reserve; /* -1: the default (util/datadir.h) */
  int64_t spare_results; /* -1: the default (compute/array/codec/spare.h) */
  int64_t upload_ttl, max_open_uploads, max_upload_pending; /* uploads in parts */
  int64_t region_bytes; /* 0: a quarter of RAM */
  const char *local_dirs[LOCAL_DIRS_MAX];
  int nlocal;
  /* owned: the variable's copy that local_dirs point into; web_dir's */
  char *local_env_;
  char web_default_[4200];
} app_opts;

/* Reads the environment and argv into *o. 0: run; 1: --help or --version
 * was printed (exit 0); 2: a bad option, said on stderr (exit 2). Sets the
 * log level and format (util/util.h) and the transfer budget. */
int app_opts_parse(int argc, char **argv, app_opts *o);
void app_opts_free(app_opts *o);

/* The store URL: --store, or the first line of --store-file (not both).
 * Only its scheme is checked here (the URL itself is never printed: it may
 * hold a password); store_open_url says the rest. 0, or -1 with a message
 * on stderr. *url: a new string ("" for the default, SQLite). */
int app_opts_store_url(const app_opts *o, char **url);

/* `tesseld --help`: every row of the table, once, with its default. */
void app_opts_usage(FILE *f);

#endif
