/* jobs/json.c — the job object of API.md, written in one place.
 *
 * Every answer that carries a job (submit, ?wait, get, cancel, the list)
 * is written here straight into one capped buffer (util/buf.h), key for
 * key in API.md's order. The JSON documents the store keeps as text
 * (params, estimate, timings, result, compare) are copied verbatim: they
 * are JSON the service itself wrote (json_dumps of the submitted params,
 * the estimate below, and sched/text.c's timings, result and compare), so
 * they need no second pass — parsing and dumping them again cost more
 * than running a tiny job (tests/bench/README.md). tests/unit/
 * test_job_text.c checks the text against an independent jansson model.
 *
 * Threads: any; the only shared state read is the scheduler's live
 * progress of an unfinished job (sched_progress takes its lock).
 */
#include <stdlib.h>
#include <string.h>

#include "jobs/jobs.h"
#include "util/buf.h"
#include "util/util.h"

/* A stored JSON document, or `none` when there is none. */
static void add_doc(tbuf *b, const char *doc, const char *none) {
  tbuf_adds(b, doc && *doc ? doc : none);
}

static void add_time(tbuf *b, int64_t ms) {
  if (ms <= 0) {
    tbuf_add(b, "null", 4);
    return;
  }
  char when[40];
  tbuf_json_str(b, t_rfc3339(ms, when, sizeof when));
}

/* The value of the top-level key "size" of a stored estimate (an object of
 * numbers and strings that the service wrote, compact): its text, or
 * "null". */
static void add_size(tbuf *b, const char *est) {
  const char *k = est ? strstr(est, "\"size\":") : NULL;
  if (!k) {
    tbuf_add(b, "null", 4);
    return;
  }
  k += 7;
  size_t n = strspn(k, "-+0123456789.eE");
  if (n == 0) tbuf_add(b, "null", 4);
  else tbuf_add(b, k, n);
}

char *jobs_json(jobs *J, const job_record *j, int with_params, size_t *len) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_reserve(&b, 1024 + (j->params ? strlen(j->params) : 0));
  tbuf_adds(&b, "{\"id\":");
  tbuf_json_str(&b, j->id);
  tbuf_adds(&b, ",\"kind\":");
  tbuf_json_str(&b, j->kind ? j->kind : "");
  tbuf_adds(&b, ",\"status\":");
  tbuf_json_str(&b, job_status_name(j->status));
  tbuf_adds(&b, ",\"label\":");
  tbuf_json_str(&b, j->label);
  tbuf_adds(&b, ",\"priority\":");
  tbuf_json_int(&b, j->priority);
  tbuf_adds(&b, ",\"request_id\":");
  tbuf_json_str(&b, j->request_id);
  tbuf_adds(&b, ",\"timeout_s\":");
  tbuf_json_real(&b, j->timeout_s, 17);
  tbuf_adds(&b, ",\"backend\":{\"requested\":");
  tbuf_json_str(&b, j->backend_requested ? j->backend_requested : "auto");
  tbuf_adds(&b, ",\"used\":");
  tbuf_json_str(&b, j->backend_used);
  tbuf_adds(&b, ",\"reason\":");
  tbuf_json_str(&b, j->backend_reason);
  tbuf_adds(&b, "},\"estimate\":");
  add_doc(&b, j->estimate, "null");
  tbuf_adds(&b, ",\"size\":");
  add_size(&b, j->estimate);
  tbuf_adds(&b, ",\"created_at\":");
  add_time(&b, j->created_at);
  tbuf_adds(&b, ",\"started_at\":");
  add_time(&b, j->started_at);
  tbuf_adds(&b, ",\"finished_at\":");
  add_time(&b, j->finished_at);
  tbuf_adds(&b, ",\"timings_ms\":");
  add_doc(&b, j->timings, "{}");
  int64_t done = j->progress_done, total = j->progress_total;
  if (!job_status_final(j->status) && J && J->sc)
    sched_progress(J->sc, j->id, &done, &total);
  tbuf_adds(&b, ",\"progress\":{\"done\":");
  tbuf_json_int(&b, (long long)done);
  tbuf_adds(&b, ",\"total\":");
  tbuf_json_int(&b, (long long)total);
  tbuf_adds(&b, "},\"result\":");
  size_t rl = j->result ? strlen(j->result) : 0;
  if (j->status == JOB_SUCCEEDED && rl >= 2 && j->result[0] == '{' &&
      j->result[rl - 1] == '}') {
    /* The stored {"dtype","shape","bytes"} with the href added. */
    tbuf_add(&b, j->result, rl - 1);
    tbuf_adds(&b, rl > 2 ? ",\"href\":\"/v1/jobs/" : "\"href\":\"/v1/jobs/");
    tbuf_adds(&b, j->id);
    tbuf_adds(&b, "/result\"}");
  } else {
    tbuf_add(&b, "null", 4);
  }
  tbuf_adds(&b, ",\"compare\":");
  add_doc(&b, j->compare, "null");
  tbuf_adds(&b, ",\"max_abs_diff\":");
  tbuf_json_real(&b, j->max_abs_diff, 17);
  tbuf_adds(&b, ",\"error\":");
  if (j->error_code) {
    tbuf_adds(&b, "{\"code\":");
    tbuf_json_str(&b, j->error_code);
    tbuf_adds(&b, ",\"message\":");
    tbuf_json_str(&b, j->error_message ? j->error_message : "");
    tbuf_adds(&b, "}");
  } else {
    tbuf_add(&b, "null", 4);
  }
  tbuf_adds(&b, ",\"attempts\":");
  tbuf_json_int(&b, j->attempts);
  if (with_params) {
    tbuf_adds(&b, ",\"params\":");
    add_doc(&b, j->params, "{}");
  }
  tbuf_adds(&b, "}");
  return tbuf_take(&b, len);
}

/* The submit-time estimate; the router adds its per-backend figures when
 * the job starts (sched/text.c). "size" feeds the dashboard's performance
 * chart. The same text json_pack("{s:I, s:f, s:I, s:I}") dumped. */
char *jobs_estimate_json(const job_estimate *est) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_adds(&b, "{\"size\":");
  tbuf_json_int(&b, (long long)est->size);
  tbuf_adds(&b, ",\"work\":");
  tbuf_json_real(&b, est->work, 17);
  tbuf_adds(&b, ",\"out_bytes\":");
  tbuf_json_int(&b, (long long)est->out_bytes);
  tbuf_adds(&b, ",\"in_bytes\":");
  tbuf_json_int(&b, (long long)est->in_bytes);
  tbuf_add(&b, "}", 1);
  return tbuf_take(&b, NULL);
}
