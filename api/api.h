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

#include "array/arrays.h"
#include "http/http.h"
#include "jobs/jobs.h"

typedef struct api_ctx {
  http_server *srv;
  jobs *jobs;              /* every job goes through it */
  arrays *arrays;          /* every uploaded array goes through it */
  int64_t max_elems;       /* cap on the elements of any one array */
  int64_t max_json_result; /* results larger than this (bytes) -> 406 as JSON */
  int64_t started_wall_ms;
} api_ctx;

int api_register(http_server *srv, api_ctx *ctx, terr *e);

#endif
