/* api.c — the API's registration table: one row per resource file, each
 * adding its routes (method, path, handler, query parameters) to the
 * server. The table sits here, not in common.c's helpers, so that the
 * resources call the helpers and nothing calls back (issue 24's file
 * circles; tests/layout/check_layout.py checks it). A new resource file
 * is one row.
 */
#include "api/api_int.h"
#include "util/tassert.h"

static const struct {
  const char *name;
  int (*add)(http_server *srv, api_ctx *ctx, terr *e);
} resources[] = {
    {"jobs", api_jobs_register},       /* api/jobs.c, api/results.c */
    {"batch", api_batch_register},     /* api/batch.c: jobs:batch, jobs:get */
    {"arrays", api_arrays_register},   /* api/arrays.c */
    {"uploads", api_uploads_register}, /* api/uploads.c */
    {"service", api_service_register}, /* api/service.c, api/metrics.c */
    {"info", api_info_register},       /* api/info.c */
    {"regions", api_regions_register}, /* api/regions.c */
};

int api_register(http_server *srv, api_ctx *ctx, terr *e) {
  T_ASSERT(srv && ctx && ctx->jobs && ctx->arrays); /* wired by app/main.c */
  api_body_meter_install();
  for (size_t i = 0; i < sizeof resources / sizeof resources[0]; i++) {
    int rc = resources[i].add(srv, ctx, e);
    if (rc) return rc;
  }
  return T_OK;
}
