/* compute/jobs/json.c — the job object of API.md, written in one place.
 *
 * Every answer that carries a job (submit, ?wait, get, cancel, the list)
 * is written here straight into one capped buffer (util/buf.h), key for
 * key in API.md's order, from the typed record (db/store.h: timings and
 * result are numbers). The documents the store keeps as text — the
 * submitted params, the estimate (below, plus the router's figures) and
 * compare's per-backend list — are JSON the service itself wrote, copied
 * verbatim: parsing and dumping them again cost more than running a tiny
 * job (tests/bench/README.md). The result's parts (a result of several
 * arrays) are the exception: their document holds the service's file
 * paths, so it is read (compute/array/parts.h) and written without them, with
 * each part's href. tests/unit/
 * test_job_text.c checks the text against an independent jansson model.
 *
 * A split job's "tiles" reads its tiles from the store (add_tiles).
 *
 * The params a submit stores are written here too (jobs_params_text: the
 * request's tree walked once into text, reals in their fewest digits).
 *
 * Threads: any; the only shared state read is the scheduler's live
 * progress of an unfinished job (sched_progress takes its lock).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/codec/jtext.h"
#include "compute/array/parts.h"
#include "compute/array/region.h"
#include "compute/jobs/jobs.h"
#include "util/buf.h"
#include "util/util.h"

/* The field a stored error message names, or 0. A run-time error is kept
 * as its message only, which terr_set wrote as "field: text" (util/err.h);
 * a field of the job's own request ("params...", "output...") is read
 * back from there, so a job that fails at run time names its field as a
 * refused submit does. Other messages ("the job was canceled", a path
 * with a colon) name none. */
static int message_field(const char *msg, char *field, size_t cap) {
  if (!msg || (strncmp(msg, "params.", 7) && strncmp(msg, "output", 6)))
    return 0;
  size_t n = strspn(msg,
                    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789_.[]");
  if (n == 0 || n >= cap || strncmp(msg + n, ": ", 2)) return 0;
  memcpy(field, msg, n);
  field[n] = 0;
  return 1;
}

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

/* {"queue":..,...}: the recorded phases in API.md's order, reals as
 * jansson's JSON_REAL_PRECISION(9) writes them (the stored values are
 * already rounded to the microsecond). */
static void add_timings(tbuf *b, const job_timings *t) {
  /* the names as JSON keys, each with the separator before it */
  static const char *const keys[JOB_T__COUNT] = {
      "\"queue\":", "\"prepare\":", "\"h2d\":", "\"compute\":",
      "\"d2h\":", "\"store\":", "\"total\":"};
  tbuf_add(b, "{", 1);
  int first = 1;
  for (int i = 0; i < JOB_T__COUNT; i++) {
    if (!(t->set & (1u << i))) continue;
    if (!first) tbuf_add(b, ",", 1);
    first = 0;
    tbuf_adds(b, keys[i]);
    tbuf_json_real(b, t->ms[i], 9);
  }
  tbuf_add(b, "}", 1);
}

/* ,"parts":[{"name","dtype","shape","bytes","href"|"offset"}] of a result
 * of several arrays (offset: in the job's output region) (the stored document, compute/array/parts.h; its paths are the
 * service's and never shown). Nothing for a one-array result, or when the
 * document does not read (logged). */
static void add_parts(tbuf *b, const char *doc, const char *id) {
  if (!doc || !id) return;
  tparts p;
  terr e;
  if (tparts_parse(doc, &p, &e) != T_OK) {
    log_warn("job %s: %s", id, e.message);
    return;
  }
  if (p.n > 1) {
    tbuf_addl(b, ",\"parts\":[");
    for (int i = 0; i < p.n; i++) {
      const tpart *t = &p.p[i];
      tbuf_adds(b, i ? ",{\"name\":" : "{\"name\":");
      tbuf_json_str(b, t->name);
      tbuf_addl(b, ",\"dtype\":");
      tbuf_json_str(b, tdtype_name(t->dtype));
      tbuf_addl(b, ",\"shape\":[");
      for (int d = 0; d < t->ndim; d++) {
        if (d) tbuf_add(b, ",", 1);
        tbuf_json_int(b, (long long)t->shape[d]);
      }
      tbuf_addl(b, "],\"bytes\":");
      tbuf_json_int(b, (long long)t->bytes);
      if (t->in_region) { /* its bytes' place in the output region */
        tbuf_addl(b, ",\"offset\":");
        tbuf_json_int(b, (long long)t->offset);
        tbuf_addl(b, "}");
        continue;
      }
      tbuf_addl(b, ",\"href\":\"/v1/jobs/");
      tbuf_adds(b, id); /* ids and part names need no escaping */
      tbuf_addl(b, "/result/");
      tbuf_adds(b, t->name);
      tbuf_addl(b, "\"}");
    }
    tbuf_add(b, "]", 1);
  }
  tparts_clear(&p);
}

/* {"dtype","shape","bytes"[,"nonconverged"][,"href"|"file"][,"parts"]}:
 * an output job's result is its file (file given), which the service does
 * not keep; a result of several arrays lists them all in "parts" (the
 * other fields are the first's). */
static void add_result(tbuf *b, const job_result_info *r, const char *id,
                       const char *file, const char *parts) {
  tbuf_addl(b, "{\"dtype\":");
  tbuf_json_str(b, r->dtype);
  tbuf_addl(b, ",\"shape\":[");
  for (int d = 0; d < r->ndim; d++) {
    if (d) tbuf_add(b, ",", 1);
    tbuf_json_int(b, (long long)r->shape[d]);
  }
  tbuf_addl(b, "],\"bytes\":");
  tbuf_json_int(b, (long long)r->bytes);
  if (r->nonconverged > 0) {
    tbuf_addl(b, ",\"nonconverged\":");
    tbuf_json_int(b, (long long)r->nonconverged);
  }
  char rid[REGION_ID_MAX];
  int64_t off;
  if (region_out_parse(file, rid, &off)) { /* raw bytes in the region */
    tbuf_addl(b, ",\"region\":");
    tbuf_json_str(b, rid);
    tbuf_addl(b, ",\"offset\":");
    tbuf_json_int(b, (long long)off);
    add_parts(b, parts, id);
  } else if (file) {
    tbuf_addl(b, ",\"file\":");
    tbuf_json_str(b, file);
  } else if (id) {
    tbuf_addl(b, ",\"href\":\"/v1/jobs/");
    tbuf_adds(b, id);
    tbuf_addl(b, "/result\"");
    add_parts(b, parts, id);
  }
  tbuf_add(b, "}", 1);
}

char *jobs_timings_json(const job_timings *t) {
  tbuf b;
  tbuf_init(&b, 0);
  add_timings(&b, t);
  return tbuf_take(&b, NULL);
}

char *jobs_result_json(const job_result_info *r, const char *id) {
  if (!r->dtype[0]) return strdup("null");
  tbuf b;
  tbuf_init(&b, 0);
  add_result(&b, r, id, NULL, NULL);
  return tbuf_take(&b, NULL);
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

/* The job's "launch": the object "launch" of its stored estimate — written
 * by the scheduler at the start of a job that a GPU worker took together
 * with others to share one launch (compute/sched/README.md, "Gangs"):
 * {"shared": N, "first": "<id>"}, numbers and an id, no nested object —
 * or null. */
static void add_launch(tbuf *b, const char *est) {
  /* The scheduler appends it last: the document ends with
   * ,"launch":{...}} (a string in the document — a file's name — never
   * ends it), and it holds nothing but its keys, a number and an id. */
  size_t n = est ? strlen(est) : 0;
  const char *k = NULL;
  for (const char *p = est; p && (p = strstr(p, ",\"launch\":{")); p++) k = p;
  if (k) k += 10;
  const char *end = k ? strchr(k, '}') : NULL;
  if (!end || end + 2 != est + n || end[1] != '}' ||
      strspn(k, "{}\",:_-0123456789abcdefghijklmnopqrstuvwxyz"
                "ABCDEFGHIJKLMNOPQRSTUVWXYZ") < (size_t)(end + 1 - k)) {
    tbuf_add(b, "null", 4);
    return;
  }
  tbuf_add(b, k, (size_t)(end + 1 - k));
}

/* A split job's "tiles" (compute/sched/split.c): total, done (succeeded tiles) and
 * by_node, the done tiles per node name (this node's name on SQLite, where
 * rows name no node). Its tiles are read from the store; when they cannot
 * be, done is 0 and by_node empty. */
static void add_tiles(tbuf *b, jobs *J, const job_record *j) {
  store_job *kids = NULL;
  int nk = 0, done = 0;
  terr e;
  if (store_job_children(J->st, j->id, &kids, &nk, &e) != T_OK) nk = 0;
  char names[64][104];
  int counts[64], nn = 0;
  for (int i = 0; i < nk; i++) {
    if (kids[i].status != JOB_SUCCEEDED) continue;
    done++;
    char name[104] = "";
    if (kids[i].node && J->sc &&
        sched_node_name(J->sc, kids[i].node, name, sizeof name)) {
    } else if (kids[i].node) {
      snprintf(name, sizeof name, "%s", kids[i].node);
    } else if (J->sc) {
      char id[T_ID_MAX];
      sched_node_self(J->sc, id, name, sizeof name);
    }
    int k = 0;
    while (k < nn && strcmp(names[k], name) != 0) k++;
    if (k == nn && nn < 64) {
      snprintf(names[nn], sizeof names[nn], "%s", name);
      counts[nn++] = 0;
    }
    if (k < nn) counts[k]++;
  }
  tbuf_addl(b, ",\"tiles\":{\"total\":");
  tbuf_json_int(b, j->tiles);
  tbuf_addl(b, ",\"done\":");
  tbuf_json_int(b, done);
  tbuf_addl(b, ",\"by_node\":{");
  for (int k = 0; k < nn; k++) {
    if (k) tbuf_add(b, ",", 1);
    tbuf_json_str(b, names[k]);
    tbuf_add(b, ":", 1);
    tbuf_json_int(b, counts[k]);
  }
  tbuf_addl(b, "}}");
  for (int i = 0; i < nk; i++) store_job_clear(&kids[i]);
  free(kids);
}

char *jobs_json(jobs *J, const job_record *j, int with_params, size_t *len) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_reserve(&b, 1024 + (j->params ? strlen(j->params) : 0));
  tbuf_addl(&b, "{\"id\":");
  tbuf_json_str(&b, j->id);
  tbuf_addl(&b, ",\"kind\":");
  tbuf_json_str(&b, j->kind ? j->kind : "");
  tbuf_addl(&b, ",\"status\":");
  tbuf_json_str(&b, job_status_name(j->status));
  tbuf_addl(&b, ",\"label\":");
  tbuf_json_str(&b, j->label);
  tbuf_addl(&b, ",\"priority\":");
  tbuf_json_int(&b, j->priority);
  tbuf_addl(&b, ",\"request_id\":");
  tbuf_json_str(&b, j->request_id);
  tbuf_addl(&b, ",\"timeout_s\":");
  tbuf_json_real(&b, j->timeout_s, 0);
  tbuf_addl(&b, ",\"backend\":{\"requested\":");
  tbuf_json_str(&b, j->backend_requested ? j->backend_requested : "auto");
  tbuf_addl(&b, ",\"used\":");
  tbuf_json_str(&b, j->backend_used);
  tbuf_addl(&b, ",\"reason\":");
  tbuf_json_str(&b, j->backend_reason);
  tbuf_addl(&b, ",\"devices\":"); /* a cuda run's GPUs, from its end */
  add_doc(&b, j->devices, "null");
  tbuf_addl(&b, "},\"estimate\":");
  add_doc(&b, j->estimate, "null");
  tbuf_addl(&b, ",\"size\":");
  add_size(&b, j->estimate);
  tbuf_addl(&b, ",\"launch\":");
  add_launch(&b, j->estimate);
  tbuf_addl(&b, ",\"created_at\":");
  add_time(&b, j->created_at);
  tbuf_addl(&b, ",\"started_at\":");
  add_time(&b, j->started_at);
  tbuf_addl(&b, ",\"finished_at\":");
  add_time(&b, j->finished_at);
  tbuf_addl(&b, ",\"timings_ms\":");
  add_timings(&b, &j->timings);
  int64_t done = j->progress_done, total = j->progress_total;
  if (!job_status_final(j->status) && J && J->sc)
    sched_progress(J->sc, j->id, &done, &total);
  tbuf_addl(&b, ",\"progress\":{\"done\":");
  tbuf_json_int(&b, (long long)done);
  tbuf_addl(&b, ",\"total\":");
  tbuf_json_int(&b, (long long)total);
  tbuf_addl(&b, "},\"result\":");
  if (j->status == JOB_SUCCEEDED && j->result.dtype[0])
    add_result(&b, &j->result, j->id, j->output_file, j->result_parts);
  else
    tbuf_add(&b, "null", 4);
  tbuf_addl(&b, ",\"output\":");
  char out_region[REGION_ID_MAX];
  int64_t out_offset;
  if (region_out_parse(j->output_file, out_region, &out_offset)) {
    /* the result's raw bytes at offset; "result" says dtype and shape */
    tbuf_addl(&b, "{\"region\":");
    tbuf_json_str(&b, out_region);
    tbuf_addl(&b, ",\"offset\":");
    tbuf_json_int(&b, (long long)out_offset);
    tbuf_addl(&b, "}");
  } else if (j->output_file) {
    tbuf_addl(&b, "{\"file\":");
    tbuf_json_str(&b, j->output_file);
    tbuf_addl(&b, "}");
  } else {
    tbuf_add(&b, "null", 4);
  }
  tbuf_addl(&b, ",\"compare\":");
  add_doc(&b, j->compare, "null");
  tbuf_addl(&b, ",\"max_abs_diff\":");
  tbuf_json_real(&b, j->max_abs_diff, 0);
  tbuf_addl(&b, ",\"error\":");
  if (j->error_code) {
    tbuf_addl(&b, "{\"code\":");
    tbuf_json_str(&b, j->error_code);
    tbuf_addl(&b, ",\"message\":");
    tbuf_json_str(&b, j->error_message ? j->error_message : "");
    tbuf_addl(&b, ",\"field\":");
    char field[TERR_FIELD_MAX];
    if (message_field(j->error_message, field, sizeof field))
      tbuf_json_str(&b, field);
    else
      tbuf_add(&b, "null", 4);
    tbuf_addl(&b, "}");
  } else {
    tbuf_add(&b, "null", 4);
  }
  tbuf_addl(&b, ",\"attempts\":");
  tbuf_json_int(&b, j->attempts);
  /* The node that claimed (or ran) it, by name when this node knows it
   * (compute/sched/cluster.c); null on SQLite and while unclaimed. */
  tbuf_addl(&b, ",\"node\":");
  char nname[104];
  if (j->node && J && J->sc && sched_node_name(J->sc, j->node, nname, sizeof nname))
    tbuf_json_str(&b, nname);
  else
    tbuf_json_str(&b, j->node);
  if (j->tiles > 0 && !j->parent && J && J->st) add_tiles(&b, J, j);
  if (with_params) {
    tbuf_addl(&b, ",\"params\":");
    add_doc(&b, j->params, "{}");
  }
  tbuf_addl(&b, "}");
  return tbuf_take(&b, len);
}

/* The submit-time estimate; the router adds its per-backend figures when
 * the job starts (compute/sched/text.c). "size" feeds the dashboard's performance
 * chart. The same text json_pack("{s:I, s:f, s:I, s:I}") dumped. */
char *jobs_estimate_json(const job_estimate *est, const char *files) {
  tbuf b;
  tbuf_init(&b, 0);
  tbuf_addl(&b, "{\"size\":");
  tbuf_json_int(&b, (long long)est->size);
  tbuf_addl(&b, ",\"work\":");
  tbuf_json_real(&b, est->work, 0);
  tbuf_addl(&b, ",\"out_bytes\":");
  tbuf_json_int(&b, (long long)est->out_bytes);
  tbuf_addl(&b, ",\"in_bytes\":");
  tbuf_json_int(&b, (long long)est->in_bytes);
  if (files) { /* the pins a run compares with (compute/array/localfile.h) */
    tbuf_addl(&b, ",\"files\":");
    tbuf_adds(&b, files);
  }
  tbuf_add(&b, "}", 1);
  return tbuf_take(&b, NULL);
}

/* A job's params as stored: the text json_dumps(params, JSON_COMPACT)
 * then tjson_short_reals wrote (test_job_text.c compares the two), in one
 * walk (the dump and the second pass were 16k instructions of a tiny
 * job's submit: tests/bench/README.md, 2026-11-29b). */
char *jobs_params_text(const json_t *params) {
  tbuf b;
  tbuf_init(&b, 0);
  tjson_tree(&b, params, 0); /* compute/array/codec/jtext.h */
  return tbuf_take(&b, NULL);
}
