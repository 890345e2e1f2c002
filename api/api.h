/* api.h — the REST resources (one file each) over the server and the core.
 *
 * api_register adds every route of API.md to the server:
 *   jobs.c     POST/GET /v1/jobs, GET/DELETE /v1/jobs/{id},
 *              POST /v1/jobs/{id}/cancel, GET /v1/jobs/{id}/result
 *   arrays.c   POST/GET /v1/arrays, GET/DELETE /v1/arrays/{id},
 *              GET /v1/arrays/{id}/data
 *   service.c  GET /v1/devices, /v1/stats, /healthz, /readyz, /metrics,
 *              /openapi.json
 *   regions.c  POST/GET /v1/regions, GET/DELETE /v1/regions/{id}
 *              (registered shared-memory regions)
 *   info.c     GET /v1/info (version, build, features, limits)
 *   results.c  content negotiation and streaming of arrays (json/npy/csv),
 *              shared by job results and array data
 */
#ifndef TESSEL_API_API_H
#define TESSEL_API_API_H

#include "compute/array/arrays.h"
#include "server/http.h"
#include "compute/jobs/jobs.h"

/* The limits of the running daemon that GET /v1/info shows and the resource
 * files do not already hold (app/main.c copies them from the options in
 * effect; read-only after start). Bytes unless the name says otherwise. */
typedef struct api_limits {
  int64_t max_body;         /* JSON request bodies (--max-body) */
  int64_t max_upload;       /* array uploads (--max-upload) */
  int64_t max_result;       /* one job's result (--max-result) */
  int64_t queue_limit;      /* queued jobs before 429 (--queue-limit) */
  int64_t job_timeout_s;    /* a job's timeout when it gives none */
  int64_t result_ttl_s;     /* finished jobs and unused arrays kept; 0: kept */
  int64_t max_attempts;     /* starts of a job before it fails "crashed" */
  int64_t max_memory;       /* running jobs' budget as configured; 0: 80 %
                               of RAM or the cgroup limit (compute/sched/mem.c) */
  int64_t max_job_memory;   /* one job's estimated memory before 413 */
  int64_t max_connections;  /* connections at once, all clients */
  int64_t per_ip_limit;     /* connections from one address */
  int64_t conn_timeout_s;   /* idle connection */
  int64_t header_timeout_s; /* a request's headers after the connect */
  int64_t min_body_rate;    /* bytes/s a body must average; 0: none */
} api_limits;

typedef struct api_ctx {
  http_server *srv;
  jobs *jobs;              /* every job goes through it */
  arrays *arrays;          /* every uploaded array goes through it */
  int64_t max_elems;       /* cap on the elements of any one array */
  int64_t max_json_result; /* results larger than this (bytes) -> 406 as JSON */
  int64_t started_wall_ms;
  int tokens;              /* 1: --token-file given (every /v1 route needs one) */
  int tls;                 /* 1: served over HTTPS (--tls-cert) */
  api_limits limits;       /* for GET /v1/info */
} api_ctx;

int api_register(http_server *srv, api_ctx *ctx, terr *e);

#endif
