/* info.c — GET /v1/info: what a client adapts to, in one answer (as
 * KServe's server metadata and Ray's /api/version give theirs); and
 * GET /v1/nodes: the nodes of the service (several on a PostgreSQL store,
 * this process alone on SQLite; jobs_nodes -> sched_nodes).
 *
 * The answer says which server this is (name, version, how it was built),
 * what it can do now (a usable GPU, tokens, the same-host directories and
 * which of them this caller may use), and every limit it enforces, so a
 * client can pick the same-host path, size its uploads and its ?wait, or
 * refuse early instead of learning each from a 4xx. Every value comes from
 * the running daemon: the build's definitions (CMake sets TESSEL_VERSION,
 * TESSEL_BUILD_TYPE, TESSEL_COMPILER, TESSEL_HAVE_CUDA), the options in
 * effect (api_ctx.limits, filled by app/main.c), the transfer budget
 * (util/xfer.h), the GPUs found at start (gpu_count) and the kinds' and
 * backends' names (compute/kinds/names.c). The local directories are the caller's
 * own (jobs_local_dirs): with tokens, only DIR/<token name>.
 *
 * It takes no query parameter (400 naming one, as on every route; server/).
 * Needs a token when tokens are configured (HTTP_AUTH).
 *
 * Threads: MHD worker threads; everything read is constant after start
 * except the local directories' existence, read from the file system, and
 * the spare result files' counts (spare_get_stats, under its mutex).
 */
#include <math.h>
#include <stdlib.h>

#include "api/api_int.h"
#include "compute/array/codec/spare.h"
#include "util/xfer.h"

#ifndef TESSEL_BUILD_TYPE
#define TESSEL_BUILD_TYPE "unknown"
#endif
#ifndef TESSEL_COMPILER
#define TESSEL_COMPILER "unknown"
#endif

/* The names of kinds or backends as a JSON array. New reference. */
static json_t *names_json(int n, const char *(*name)(int)) {
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++) json_array_append_new(a, json_string(name(i)));
  return a;
}
static const char *kind_name_i(int i) { return kind_at(i)->name; }
static const char *backend_name_i(int i) { return tbackend_name((tbackend)i); }

static json_t *limits_json(const api_ctx *ctx) {
  const api_limits *l = &ctx->limits;
  return json_pack(
      "{s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
      " s:I, s:I, s:I, s:I, s:I}",
      "max_body", (json_int_t)l->max_body,
      "max_upload", (json_int_t)l->max_upload,
      "max_result", (json_int_t)l->max_result,
      "max_json_result", (json_int_t)ctx->max_json_result,
      "max_elements", (json_int_t)ctx->max_elems,
      "max_wait_s", API_MAX_WAIT_S,
      "queue_limit", (json_int_t)l->queue_limit,
      "job_timeout_s", (json_int_t)l->job_timeout_s,
      "result_ttl_s", (json_int_t)l->result_ttl_s,
      "max_attempts", (json_int_t)l->max_attempts,
      "max_memory", (json_int_t)l->max_memory,
      "max_job_memory", (json_int_t)l->max_job_memory,
      "max_transfer_memory", (json_int_t)xfer_budget_limit(),
      "max_connections", (json_int_t)l->max_connections,
      "per_ip_limit", (json_int_t)l->per_ip_limit,
      "conn_timeout_s", (json_int_t)l->conn_timeout_s,
      "header_timeout_s", (json_int_t)l->header_timeout_s,
      "min_body_rate", (json_int_t)l->min_body_rate);
}

/* The spare result files (compute/array/codec/spare.h): the budget, what
 * is ready now, and how many big results found one. */
static json_t *spare_json(void) {
  spare_stats st;
  spare_get_stats(&st);
  return json_pack("{s:I, s:I, s:i, s:I, s:I, s:s}", "budget",
                   (json_int_t)st.budget, "held", (json_int_t)st.held, "ready",
                   st.count, "taken", (json_int_t)st.taken, "missed",
                   (json_int_t)st.missed, "fill",
                   st.fill == SPARE_FILL_READ ? "read" : "written");
}

static void handle_info(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  json_t *dirs = jobs_local_dirs(ctx->jobs, http_owner(r));
  char nid[T_ID_MAX], nname[128];
  jobs_node_self(ctx->jobs, nid, nname, sizeof nname);
  json_t *body =
      dirs ? json_pack(
                 "{s:s, s:s, s:{s:s, s:b, s:s}, s:s, s:{s:s, s:s},"
                 " s:{s:b, s:b, s:b, s:b, s:b, s:b, s:[s,s,s]},"
                 " s:o, s:o, s:o, s:o, s:o}",
                 "name", "tessel", "version", TESSEL_VERSION, "build", "type",
                 TESSEL_BUILD_TYPE, "cuda", TESSEL_HAVE_CUDA, "compiler",
                 TESSEL_COMPILER, "store", jobs_store_kind(ctx->jobs), "node",
                 "id", nid, "name", nname, "features", "cuda",
                 jobs_gpu_count() > 0, "tokens", ctx->tokens, "tls", ctx->tls,
                 "same_host",
                 ctx->jobs->local != NULL, "regions",
                 jobs_regions_available(ctx->jobs), "chained_jobs", 1,
                 "formats", "npy",
                 "csv", "json", "local_dirs", dirs, "limits",
                 limits_json(ctx), "kinds", names_json(kind_count(), kind_name_i),
                 "backends", names_json(B__COUNT, backend_name_i),
                 "spare_results", spare_json())
           : NULL;
  if (!body) {
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  http_reply_json(r, 200, body);
}

static json_t *time_json(int64_t ms) {
  char when[40];
  return ms > 0 ? json_string(t_rfc3339(ms, when, sizeof when)) : json_null();
}

static json_t *node_json(const store_node *n) {
  return json_pack(
      "{s:s, s:s, s:s, s:b, s:i, s:i, s:s, s:o, s:o, s:i, s:i, s:o, s:I}",
      "id", n->id, "name", n->name ? n->name : "", "url",
      n->url ? n->url : "", "alive", n->alive, "threads", n->threads, "gpus",
      n->gpus, "version", n->version ? n->version : "", "started_at",
      time_json(n->started_at), "heartbeat_at", time_json(n->heartbeat_at),
      "running", n->running, "queued", n->queued, "load",
      isfinite(n->load) ? json_real(n->load) : json_null(), "jobs_done",
      (json_int_t)n->jobs_done);
}

static void handle_nodes(http_req *r, void *ud) {
  api_ctx *ctx = ud;
  store_node *nodes = NULL;
  int n = 0;
  terr e;
  if (jobs_nodes(ctx->jobs, &nodes, &n, &e)) {
    http_reply_error(r, &e);
    return;
  }
  json_t *arr = json_array();
  for (int i = 0; arr && i < n; i++)
    if (json_array_append_new(arr, node_json(&nodes[i]))) {
      json_decref(arr);
      arr = NULL;
    }
  store_nodes_free(nodes, n);
  json_t *body = arr ? json_pack("{s:s, s:o}", "store",
                                 jobs_store_kind(ctx->jobs), "nodes", arr)
                     : NULL;
  if (!body) {
    api_reply_terr(r, T_ENOMEM, "", "out of memory");
    return;
  }
  http_reply_json(r, 200, body);
}

int api_info_register(http_server *srv, api_ctx *ctx, terr *e) {
  if (http_route(srv, "GET", "/v1/info", handle_info, ctx, HTTP_AUTH) ||
      http_route(srv, "GET", "/v1/nodes", handle_nodes, ctx, HTTP_AUTH))
    return terr_set(e, T_EINTERNAL, "", -1, "cannot register /v1/info");
  return T_OK;
}
