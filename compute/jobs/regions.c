/* compute/jobs/regions.c — registered regions as jobs see them
 * (compute/array/region.h owns the registry; this file adds what needs the
 * store): registration refused on a cluster store, the regions a job names
 * found in its params and recorded as used by it, the output region's
 * spelling in the job's row, and a delete that asks the store which of a
 * region's jobs are still queued or running (409 naming them).
 *
 * Cluster: a region is a mapping in one process, so a job naming it could
 * only run on the node that registered it. The simpler correct rule is
 * taken: on a cluster store (PostgreSQL) POST /v1/regions and any job that
 * names a region are refused 400, saying so.
 *
 * The output region is kept in the row's output_file column as
 * region_out_text spells it (compute/array/region.h).
 *
 * The GPU: jobs_regions_setup hands the registry compute/gpu's page-locking
 * (each new region is pinned once for every device; compute/array may not
 * call compute/gpu itself).
 *
 * Threads: an HTTP thread (the caller's); jobs_regions_setup once at start.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/region.h"
#include "compute/gpu/gpu.h"
#include "compute/jobs/jobs.h"

static int cluster_refusal(const char *field, terr *e) {
  return terr_set(e, T_EINVAL, field, -1,
                  "regions are not available on a cluster store: a region "
                  "is one node's mapping, and any node may run a job");
}

void jobs_regions_setup(int64_t bytes) {
  region_set_limit(bytes);
  region_set_pin(gpu_host_register, gpu_host_unregister);
}

int jobs_regions_available(jobs *J) {
  return J->local != NULL && !store_is_cluster(J->st);
}

int jobs_region_add(jobs *J, const char *owner, const char *path,
                    region_info *out, terr *e) {
  if (store_is_cluster(J->st)) return cluster_refusal("path", e);
  return region_add(J->local, owner, path, "path", out, e);
}

/* The store's probe: 1 while job id is queued or running. */
static int job_active(void *ud, const char *id) {
  jobs *J = ud;
  store_job j;
  terr e;
  if (store_job_get(J->st, id, NULL, &j, &e) != T_OK) return e.code != T_ENOTFOUND;
  int active = j.status == JOB_QUEUED || j.status == JOB_RUNNING;
  store_job_clear(&j);
  return active;
}

int jobs_region_delete(jobs *J, const char *owner, const char *id, terr *e) {
  return region_delete(owner, id, job_active, J, e);
}

/* Call fn for each {"region": id} object in v at any depth, with its
 * field's path; stop at fn's first error. */
typedef int (*region_ref_fn)(void *arg, const char *id, const char *field,
                             terr *e);
static int each_region(const json_t *v, char *field, size_t cap, int depth,
                       region_ref_fn fn, void *arg, terr *e) {
  if (depth > 64) return 0;
  size_t len = strlen(field);
  if (json_is_object(v)) {
    const json_t *r = json_object_get(v, "region");
    if (json_is_string(r)) return fn(arg, json_string_value(r), field, e);
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
      snprintf(field + len, cap - len, "%s%s", len ? "." : "", k);
      int rc = each_region(x, field, cap, depth + 1, fn, arg, e);
      field[len] = 0;
      if (rc) return rc;
    }
  } else if (json_is_array(v)) {
    for (size_t i = 0; i < json_array_size(v); i++) {
      snprintf(field + len, cap - len, "[%zu]", i);
      int rc = each_region(json_array_get(v, i), field, cap, depth + 1, fn,
                           arg, e);
      field[len] = 0;
      if (rc) return rc;
    }
  }
  return 0;
}

/* 1 when v holds a {"region": id} object at any depth: each_region's
 * walk without the field's path (no text per node; a submit asks this
 * three times of every job, most of which name no region). */
static int has_region(const json_t *v, int depth) {
  if (depth > 64) return 0;
  if (json_is_object(v)) {
    if (json_is_string(json_object_get(v, "region"))) return 1;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) if (has_region(x, depth + 1)) return 1;
  } else if (json_is_array(v)) {
    for (size_t i = 0; i < json_array_size(v); i++)
      if (has_region(json_array_get(v, i), depth + 1)) return 1;
  }
  return 0;
}

int jobs_names_region(const json_t *params) { return has_region(params, 0); }

typedef struct use_arg {
  jobs *J;
  const char *owner, *job_id;
} use_arg;

static int use_one(void *arg, const char *id, const char *field, terr *e) {
  use_arg *u = arg;
  char f[TERR_FIELD_MAX];
  snprintf(f, sizeof f, "%s.region", field);
  return region_use(u->owner, id, u->job_id, f, job_active, u->J, e);
}

int jobs_regions_use(jobs *J, const char *owner, const json_t *params,
                     const char *out_region, const char *job_id, terr *e) {
  int any = out_region || jobs_names_region(params);
  if (!any) return 0;
  if (store_is_cluster(J->st))
    return cluster_refusal(out_region ? "output.region" : "params", e);
  use_arg u = {J, owner, job_id};
  char field[TERR_FIELD_MAX] = "params";
  int rc = each_region(params, field, sizeof field, 0, use_one, &u, e);
  if (rc == 0 && out_region)
    rc = region_use(owner, out_region, job_id, "output.region", job_active, J,
                    e);
  return rc;
}
