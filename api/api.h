/* api.h — the REST resources (one file each) over the server and the core.
 *
 * api_register adds every route of API.md to the server:
 *   jobs.c     POST/GET /v1/jobs, GET/DELETE /v1/jobs/{id},
 *              POST /v1/jobs/{id}/cancel, GET /v1/jobs/{id}/result
 *   arrays.c   POST/GET /v1/arrays, GET/DELETE /v1/arrays/{id},
 *              GET /v1/arrays/{id}/data
 *   devices.c  GET /v1/devices
 *   service.c  GET /v1/stats, /healthz, /readyz, /metrics, /openapi.json
 *   results.c  content negotiation and streaming of arrays (json/npy/csv),
 *              shared by job results and array data
 */
#ifndef TESSEL_API_API_H
#define TESSEL_API_API_H

#include "sched/sched.h"
#include "db/store.h"
#include "http/http.h"

typedef struct api_ctx {
  http_server *srv;
  store *st;
  sched *sc;
  const char *data_dir;    /* arrays in <data_dir>/arrays */
  int64_t max_elems;       /* cap on the elements of any one array */
  int64_t max_json_result; /* results larger than this (bytes) -> 406 as JSON */
  double default_timeout_s; /* for jobs that give no timeout_s */
  int64_t started_wall_ms;
} api_ctx;

int api_register(http_server *srv, api_ctx *ctx, terr *e);

#endif
