/* api_int.h — helpers shared by the resource files of api/ (private). */
#ifndef TESSEL_API_API_INT_H
#define TESSEL_API_API_INT_H

#include <jansson.h>

#include "api/api.h"
#include "compute/array/tarray.h"
#include "compute/jobs/lifecycle.h"
#include "util/buf.h"

/* The largest result answered inline as result.data (jobs:get's
 * "include": ["result"], ?include=result on a job): the row's cap. */
#define API_INLINE_RESULT (64 * 1024)

/* A read mask over a job's members ("fields" of jobs:batch and jobs:get;
 * fields.c): bit k is the k-th member as jobs_json writes them. */
#define API_FIELDS_MAX 24
#define API_FIELD_RESULT (1ull << 16)
typedef struct api_fields {
  int on; /* 0: every member */
  unsigned long long want;
} api_fields;
/* v NULL: every member; else an array of member names (400 naming
 * "fields" or "fields[i]"). "id" is always kept. */
int api_fields_parse(json_t *v, api_fields *f, terr *e);
/* Append the job's text (jobs_json's, len bytes) with only f's members
 * (the whole text when f is off, or when it is not one object). */
void api_fields_put(tbuf *b, const char *text, size_t len, const api_fields *f);

/* The longest ?wait a request may ask for, seconds (POST /v1/jobs). */
#define API_MAX_WAIT_S 60.0

/* ?wait=S (0 when absent): 400 naming "wait" outside 0..API_MAX_WAIT_S.
 * api_hold_wait: S as the tests' TESSEL_TEST_WAIT_HOLD_S caps it. */
int api_parse_wait(http_req *r, double *wait_s, terr *e);
double api_hold_wait(double wait_s);

/* Parse the request body as one JSON object (duplicate keys refused, depth
 * bounded by jansson). 400 naming "body" and the byte position. Caller owns
 * *out. */
int api_body_object(http_req *r, json_t **out, terr *e);

/* The prelude of a submit (POST /v1/jobs, POST /v1/jobs:batch): ?wait and
 * the body as one object. On an error it answers the request and returns
 * its code (*body NULL); else 0 with *body the caller's. */
int api_submit_prelude(http_req *r, double *wait_s, json_t **body);

/* Answer `status` with the job (params included), as jobs_json writes it. */
void api_reply_job(http_req *r, api_ctx *ctx, const job_record *j,
                   int status);
/* The same; with `data` (?include=result on a succeeded job) its result
 * object gains "data" as jobs:get's include writes it (api_job_text_data). */
void api_reply_job_data(http_req *r, api_ctx *ctx, const job_record *j,
                        int status, int data);
/* Append the job's text (len bytes, jobs_json's of the row j, read under
 * its owner already) to b with "data" added to its "result" object when
 * the result is kept in the row and at most API_INLINE_RESULT bytes
 * (nested lists, non-finite values as null); the text as it was
 * otherwise. */
void api_job_text_data(tbuf *b, api_ctx *ctx, const char *text, size_t len,
                       const job_record *j);
/* The same with the result's .npy in hand (npy_len bytes, as the row
 * keeps it: the end's, jobs_wait_result), instead of reading it; npy
 * NULL: read it as api_job_text_data does. */
void api_job_text_data_npy(tbuf *b, api_ctx *ctx, const char *text,
                           size_t len, const job_record *j, const void *npy,
                           size_t npy_len);
/* The array's metadata as the API shows it. New ref. */
json_t *api_array_json(const store_array *a);

/* Reply with the contents of an array in the format the request asks for
 * (?format= or Accept: json | npy | csv), 406 when it cannot. `path` is the
 * array's .npy file. Query `limit_rows=N` previews the first N rows. A
 * geodesic result may be re-laid out: layout_from/to "square"|"condensed"
 * (NULL: as stored). */
void api_reply_array_file(http_req *r, api_ctx *ctx, const char *path,
                          const char *layout_from, const char *layout_to);
/* The same from a whole .npy held in memory (npy: malloc()ed, taken). */
void api_reply_array_npy(http_req *r, api_ctx *ctx, char *npy, size_t len,
                         const char *layout_from, const char *layout_to);

/* After a delete (compute/jobs/lifecycle.h did it): answer 200
 * {"id", "deleted": true}. */
void api_reply_deleted(http_req *r, const char *id);

/* Error helpers. */
void api_reply_terr(http_req *r, int code, const char *field, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

/* Resource registration (one per file). */
/* Jansson's allocator, metered while api_body_object parses (common.c);
 * api_register installs it before any route. */
void api_body_meter_install(void);
int api_jobs_register(http_server *srv, api_ctx *ctx, terr *e);
int api_batch_register(http_server *srv, api_ctx *ctx, terr *e);
int api_arrays_register(http_server *srv, api_ctx *ctx, terr *e);
int api_uploads_register(http_server *srv, api_ctx *ctx, terr *e);
int api_service_register(http_server *srv, api_ctx *ctx, terr *e);
int api_info_register(http_server *srv, api_ctx *ctx, terr *e);
int api_regions_register(http_server *srv, api_ctx *ctx, terr *e);
/* GET /metrics (api/metrics.c), routed by api/service.c. */
void api_handle_metrics(http_req *r, void *ud);

#endif
