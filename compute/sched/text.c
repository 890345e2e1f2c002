/* compute/sched/text.c — the estimate document a worker stores at a job's start:
 * the kind's figures and the router's (and, for a job with {"file"}
 * inputs, their pins as "files": compute/array/localfile.h), written straight to
 * text (the router writes its own figures as text too, router_choose_text;
 * a job's timings and result are typed columns, whose JSON
 * compute/jobs/json.c writes).
 *
 * They used to be built as jansson trees and dumped; for a tiny job that
 * was a tenth of the worker's time (tests/bench/README.md). The text is the
 * same jansson wrote with JSON_COMPACT | JSON_REAL_PRECISION(9): keys in
 * the same order, reals with 9 significant digits, ".0" on a real that
 * reads as an integer, exponents without '+' or leading zeros (1e20, 6e-6),
 * strings escaped as jansson does by default (util/buf.h's JSON writers).
 * test_sched checks the stored documents parse and hold the expected
 * values.
 *
 * Ownership: every function returns a new malloc()ed string (NULL when out
 * of memory). Threads: any; nothing shared.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/localfile.h"
#include "compute/sched/sched_int.h"
#include "util/buf.h"

/* `"key":` with the separator before it unless it is the first. */
static void st_key(tbuf *b, const char *k, int *first) {
  if (!*first) tbuf_add(b, ",", 1);
  *first = 0;
  tbuf_json_str(b, k);
  tbuf_add(b, ":", 1);
}

char *stext_estimate(const job_estimate *est, const char *router,
                     const struct tlocal_pins *pins) {
  static const char *const own[] = {"size",      "work",      "out_dtype",
                                    "out_shape", "out_bytes", "in_bytes",
                                    "mem_bytes", "files"};
  tbuf b;
  tbuf_init(&b, 0);
  int first = 1;
  tbuf_add(&b, "{", 1);
  st_key(&b, own[0], &first);
  tbuf_json_int(&b, (long long)est->size);
  st_key(&b, own[1], &first);
  tbuf_json_real(&b, est->work, 9);
  st_key(&b, own[2], &first);
  tbuf_json_str(&b, tdtype_name(est->out_dtype));
  st_key(&b, own[3], &first);
  tbuf_add(&b, "[", 1);
  for (int i = 0; i < est->out_ndim; i++) {
    if (i) tbuf_add(&b, ",", 1);
    tbuf_json_int(&b, (long long)est->out_shape[i]);
  }
  tbuf_add(&b, "]", 1);
  st_key(&b, own[4], &first);
  tbuf_json_int(&b, (long long)est->out_bytes);
  st_key(&b, own[5], &first);
  tbuf_json_int(&b, (long long)est->in_bytes);
  st_key(&b, own[6], &first);
  tbuf_json_int(&b, (long long)est->mem_bytes);
  /* The router's figures (router_choose_text: members text, none of the
   * keys above). */
  if (router && *router) {
    tbuf_add(&b, ",", 1);
    tbuf_adds(&b, router);
  }
  char *files = tlocal_pins_text(pins);
  if (files) { /* kept for a run after a restart (compute/array/localfile.h) */
    st_key(&b, "files", &first);
    tbuf_adds(&b, files);
    free(files);
  }
  tbuf_add(&b, "}", 1);
  return tbuf_take(&b, NULL);
}

char *stext_devices(const job_ctx *ctx, int own, char *used, size_t cap) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_add(&b, "[", 1);
  size_t o = 0;
  used[0] = 0;
  int n = ctx->lanes.n;
  for (int k = 0; k < n; k++) {
    int dev = ctx->lanes.lane[k].dev;
    int64_t rows = ctx->lanes.lane[k].rows;
    if (k) tbuf_add(&b, ",", 1);
    tbuf_adds(&b, "{\"device\":");
    tbuf_json_int(&b, dev);
    tbuf_adds(&b, ",\"rows\":");
    tbuf_json_int(&b, (long long)rows);
    tbuf_adds(&b, ",\"blocks\":");
    tbuf_json_int(&b, (long long)ctx->lanes.lane[k].blocks);
    if (ctx->lanes.lane[k].failed) tbuf_adds(&b, ",\"failed\":true");
    if (ctx->lanes.lane[k].taken_back) tbuf_adds(&b, ",\"taken_back\":true");
    tbuf_add(&b, "}", 1);
    if (rows > 0 && o < cap) { /* backend.used: the devices that wrote */
      int w = snprintf(used + o, cap - o, "%scuda:%d", o ? "+" : "", dev);
      o += w > 0 ? (size_t)w : 0;
    }
  }
  if (n == 0) { /* the run's own device, as far as it said */
    tbuf_adds(&b, "{\"device\":");
    tbuf_json_int(&b, own);
    tbuf_add(&b, "}", 1);
  }
  if (o == 0 || o >= cap) snprintf(used, cap, "cuda:%d", own);
  tbuf_add(&b, "]", 1);
  return tbuf_take(&b, NULL);
}
