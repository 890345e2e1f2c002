/* job_text.c — the job object of API.md written straight to JSON text.
 *
 * api_job_json (common.c) builds the job as a jansson tree: it parses the
 * JSON documents the store keeps as text (params, estimate, timings,
 * result, compare) and dumps everything again, which for a tiny job cost
 * more than running it (tests/bench/README.md). This file writes the same
 * object, key for key and in the same order, into one buffer, and copies
 * those stored documents verbatim: they are JSON the service itself wrote
 * (json_dumps of the submitted params, of the estimate, timings, result
 * and compare), so they need no second pass. The only difference a reader
 * can see is number spelling inside them: a stored timing of 0.012 stays
 * "0.012" where a re-dump prints 0.011999999999999999 — the same double.
 * tests/unit/test_job_text.c checks that both parse to equal JSON.
 *
 * Used for the answers that carry one job (submit, ?wait, get, cancel);
 * listings keep api_job_json.
 *
 * Threads: any; the only shared state read is the scheduler's live
 * progress of an unfinished job (sched_progress takes its lock).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "util/util.h"

typedef struct tbuf {
  char *p;
  size_t len, cap;
  int oom;
} tbuf;

static void tb_grow(tbuf *b, size_t more) {
  if (b->oom || b->len + more + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap < b->len + more + 1) cap *= 2;
  char *n = realloc(b->p, cap);
  if (!n) {
    b->oom = 1;
    return;
  }
  b->p = n;
  b->cap = cap;
}

static void tb_put(tbuf *b, const char *s, size_t n) {
  tb_grow(b, n);
  if (b->oom) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void tb_puts(tbuf *b, const char *s) { tb_put(b, s, strlen(s)); }

/* A JSON string, escaped as jansson does by default (", \, control
 * characters; UTF-8 passes through). */
static void tb_str(tbuf *b, const char *s) {
  tb_put(b, "\"", 1);
  const char *run = s;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    tb_put(b, run, (size_t)(s - run));
    char esc[8];
    switch (c) {
      case '"': tb_put(b, "\\\"", 2); break;
      case '\\': tb_put(b, "\\\\", 2); break;
      case '\b': tb_put(b, "\\b", 2); break;
      case '\f': tb_put(b, "\\f", 2); break;
      case '\n': tb_put(b, "\\n", 2); break;
      case '\r': tb_put(b, "\\r", 2); break;
      case '\t': tb_put(b, "\\t", 2); break;
      default:
        snprintf(esc, sizeof esc, "\\u%04X", c);
        tb_put(b, esc, 6);
    }
    run = s + 1;
  }
  tb_put(b, run, (size_t)(s - run));
  tb_put(b, "\"", 1);
}

static void tb_str_or_null(tbuf *b, const char *s) {
  if (s) tb_str(b, s);
  else tb_put(b, "null", 4);
}

/* A real as jansson writes it: 17 significant digits, and a ".0" when that
 * reads as an integer. Not finite: null (JSON has no NaN). */
static void tb_real(tbuf *b, double v) {
  if (!isfinite(v)) {
    tb_put(b, "null", 4);
    return;
  }
  char num[40];
  int n = snprintf(num, sizeof num, "%.17g", v);
  if (n > 0 && !strpbrk(num, ".eE") && n + 2 < (int)sizeof num) {
    memcpy(num + n, ".0", 3);
    n += 2;
  }
  tb_put(b, num, (size_t)n);
}

static void tb_int(tbuf *b, long long v) {
  char num[24];
  int n = snprintf(num, sizeof num, "%lld", v);
  tb_put(b, num, (size_t)n);
}

/* A stored JSON document, or `none` when there is none. */
static void tb_doc(tbuf *b, const char *doc, const char *none) {
  tb_puts(b, doc && *doc ? doc : none);
}

static void tb_time(tbuf *b, int64_t ms) {
  if (ms <= 0) {
    tb_put(b, "null", 4);
    return;
  }
  char when[40];
  tb_str(b, t_rfc3339(ms, when, sizeof when));
}

/* The value of the top-level key "size" of a stored estimate (an object of
 * numbers and strings that the service wrote, compact): its text, or
 * "null". */
static void tb_size(tbuf *b, const char *est) {
  const char *k = est ? strstr(est, "\"size\":") : NULL;
  if (!k) {
    tb_put(b, "null", 4);
    return;
  }
  k += 7;
  size_t n = strspn(k, "-+0123456789.eE");
  if (n == 0) tb_put(b, "null", 4);
  else tb_put(b, k, n);
}

char *api_job_text(api_ctx *ctx, const store_job *j, int with_params,
                   size_t *len) {
  tbuf b = {0};
  tb_grow(&b, 1024 + (j->params ? strlen(j->params) : 0));
  tb_puts(&b, "{\"id\":");
  tb_str(&b, j->id);
  tb_puts(&b, ",\"kind\":");
  tb_str(&b, j->kind ? j->kind : "");
  tb_puts(&b, ",\"status\":");
  tb_str(&b, job_status_name(j->status));
  tb_puts(&b, ",\"label\":");
  tb_str_or_null(&b, j->label);
  tb_puts(&b, ",\"priority\":");
  tb_int(&b, j->priority);
  tb_puts(&b, ",\"request_id\":");
  tb_str_or_null(&b, j->request_id);
  tb_puts(&b, ",\"timeout_s\":");
  tb_real(&b, j->timeout_s);
  tb_puts(&b, ",\"backend\":{\"requested\":");
  tb_str(&b, j->backend_requested ? j->backend_requested : "auto");
  tb_puts(&b, ",\"used\":");
  tb_str_or_null(&b, j->backend_used);
  tb_puts(&b, ",\"reason\":");
  tb_str_or_null(&b, j->backend_reason);
  tb_puts(&b, "},\"estimate\":");
  tb_doc(&b, j->estimate, "null");
  tb_puts(&b, ",\"size\":");
  tb_size(&b, j->estimate);
  tb_puts(&b, ",\"created_at\":");
  tb_time(&b, j->created_at);
  tb_puts(&b, ",\"started_at\":");
  tb_time(&b, j->started_at);
  tb_puts(&b, ",\"finished_at\":");
  tb_time(&b, j->finished_at);
  tb_puts(&b, ",\"timings_ms\":");
  tb_doc(&b, j->timings, "{}");
  int64_t done = j->progress_done, total = j->progress_total;
  if (!job_status_final(j->status) && ctx && ctx->sc)
    sched_progress(ctx->sc, j->id, &done, &total);
  tb_puts(&b, ",\"progress\":{\"done\":");
  tb_int(&b, (long long)done);
  tb_puts(&b, ",\"total\":");
  tb_int(&b, (long long)total);
  tb_puts(&b, "},\"result\":");
  size_t rl = j->result ? strlen(j->result) : 0;
  if (j->status == JOB_SUCCEEDED && rl >= 2 && j->result[0] == '{' &&
      j->result[rl - 1] == '}') {
    /* The stored {"dtype","shape","bytes"} with the href added. */
    tb_put(&b, j->result, rl - 1);
    tb_puts(&b, rl > 2 ? ",\"href\":\"/v1/jobs/" : "\"href\":\"/v1/jobs/");
    tb_puts(&b, j->id);
    tb_puts(&b, "/result\"}");
  } else {
    tb_put(&b, "null", 4);
  }
  tb_puts(&b, ",\"compare\":");
  tb_doc(&b, j->compare, "null");
  tb_puts(&b, ",\"max_abs_diff\":");
  tb_real(&b, j->max_abs_diff);
  tb_puts(&b, ",\"error\":");
  if (j->error_code) {
    tb_puts(&b, "{\"code\":");
    tb_str(&b, j->error_code);
    tb_puts(&b, ",\"message\":");
    tb_str(&b, j->error_message ? j->error_message : "");
    tb_puts(&b, "}");
  } else {
    tb_put(&b, "null", 4);
  }
  tb_puts(&b, ",\"attempts\":");
  tb_int(&b, j->attempts);
  if (with_params) {
    tb_puts(&b, ",\"params\":");
    tb_doc(&b, j->params, "{}");
  }
  tb_puts(&b, "}");
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  if (len) *len = b.len;
  return b.p;
}

void api_reply_job(http_req *r, api_ctx *ctx, const store_job *j,
                   int status) {
  size_t len = 0;
  char *text = api_job_text(ctx, j, 1, &len);
  if (!text) {
    api_reply_terr(r, T_ENOMEM, "", "out of memory for the answer");
    return;
  }
  http_reply_buffer(r, status, "application/json; charset=utf-8", text, len);
}
