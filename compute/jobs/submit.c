/* compute/jobs/submit.c — a job's submission: the envelope, the check, the queue
 * slot, the store row, the queue (jobs.h says the order and why).
 *
 * The protocol the scheduler asks of its caller (sched.h "submit") is run
 * here and only here: sched_check_keep -> sched_reserve -> store_job_insert (or
 * _async) -> sched_enqueue_checked, or sched_unreserve when the insert
 * fails or finds the request_id's earlier job. Every exit after a
 * successful reserve goes through exactly one of those two. Before the
 * slot: a full data disk (util/datadir.h: the free space under the
 * reserve's low mark, or the reserve already given to the store) refuses
 * the job 507, after the envelope and the params were checked.
 * The check pins each {"file"} input (compute/array/localfile.h): the pins go
 * into the row's estimate ("files"), from which the queue reads them
 * (compute/sched/queue.c).
 *
 * jobs_submit is jobs_submit_prepare (everything before the insert), the
 * insert, and jobs_submit_inserted (the enqueue or the unreserve): a batch
 * (batch.c) runs the same two halves around store_insert_jobs (submit.h).
 * The prepare is jobs_submit_check (the envelope, the kind's check, the
 * output's size, the row without its id: nothing shared is taken, so a
 * batch checks its items on several threads) then jobs_submit_admit (the
 * full disk, the slot, the id, the regions, the key: in order). So a bad
 * output offset is answered 400 before a full disk's 507 or a full
 * queue's 429.
 *
 * A request_id goes through J->rids (rids.h), the keys with an insert in
 * flight: the prepare holds the key for the [sync] insert, released in
 * jobs_submit_inserted; a ?wait submit on one node claims it instead
 * (submit_keyed): the committed job of the key (store_job_by_request),
 * else the [async] insert, the enqueue, and a watch on the job's end whose
 * commit covers the insert. A submit that finds its key busy takes the
 * [sync] insert, which then finds that row (committed first: key_hold).
 *
 * Threads: an HTTP thread (the caller's), or a batch's checker thread
 * (batch.c: the check, the admit, the insert and the enqueue of its
 * items); no lock is held here (a submit
 * whose key a ?wait submit has claimed waits in rids_hold until that one
 * has queued its job, one store read, then commits that insert with one
 * jobs_sync when it is not known committed).
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compute/array/localfile.h"
#include "compute/array/region.h"
#include "compute/array/store_source.h"
#include "compute/jobs/jobs.h"
#include "compute/jobs/rids.h"
#include "compute/jobs/submit.h"
#include "util/buf.h"
#include "util/datadir.h"
#include "util/sigbus.h"
#include "util/util.h"

#define DEFAULT_PRIORITY 5

/* The envelope of a job submission, checked; strings borrowed from the
 * body. */
typedef struct submission {
  const kind_ops *kind;
  tbackend backend;
  int priority;
  double timeout_s;
  const char *request_id, *label;
  const char *output_file; /* "output": {"file"}; NULL when none */
  const char *out_region;  /* "output": {"region"}; NULL when none */
  int64_t out_offset;      /* its "offset" */
  json_t *params;
} submission;

/* The first key of obj not in the NULL-terminated list: "<key>: unknown
 * field". */
static int only_keys(const json_t *obj, const char *const *allowed, terr *e) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    int i = 0;
    while (allowed[i] && strcmp(allowed[i], key) != 0) i++;
    if (!allowed[i]) return terr_set(e, T_EINVAL, key, -1, "unknown field");
  }
  return T_OK;
}

/* An optional string field of minlen..maxlen characters: *out is NULL when
 * absent. */
static int opt_string(json_t *body, const char *key, size_t minlen,
                      size_t maxlen, const char **out, terr *e) {
  json_t *v = json_object_get(body, key);
  *out = NULL;
  if (!v) return T_OK;
  if (!json_is_string(v) || json_string_length(v) < minlen ||
      json_string_length(v) > maxlen)
    return terr_set(e, T_EINVAL, key, -1,
                    "expected a string of %zu to %zu characters", minlen,
                    maxlen);
  *out = json_string_value(v);
  return T_OK;
}

/* "output": {"region": id, "offset": bytes} (compute/array/region.h). */
static int parse_output_region(json_t *v, submission *s, terr *e) {
  static const char *const keys[] = {"region", "offset", NULL};
  const char *key;
  json_t *x;
  json_object_foreach(v, key, x) {
    int i = 0;
    while (keys[i] && strcmp(keys[i], key) != 0) i++;
    if (!keys[i])
      return terr_set(e, T_EINVAL, "output", -1,
                      "'%s': unknown field (expected {\"region\": id, "
                      "\"offset\": bytes})", key);
  }
  x = json_object_get(v, "region");
  if (!json_is_string(x) || json_string_length(x) < 1 ||
      json_string_length(x) >= REGION_ID_MAX ||
      strchr(json_string_value(x), '@'))
    return terr_set(e, T_EINVAL, "output.region", -1,
                    "must be a region's id (\"r_...\")");
  s->out_region = json_string_value(x);
  x = json_object_get(v, "offset");
  if (x && (!json_is_integer(x) || json_integer_value(x) < 0))
    return terr_set(e, T_EINVAL, "output.offset", -1,
                    "must be a byte offset (an integer >= 0)");
  s->out_offset = x ? json_integer_value(x) : 0;
  return T_OK;
}

static int parse_submission(json_t *body, submission *s, terr *e) {
  static const char *const keys[] = {"kind",    "backend",    "priority",
                                     "timeout_s", "request_id", "label",
                                     "params",  "output",     NULL};
  int rc = only_keys(body, keys, e);
  if (rc) return rc;
  json_t *v = json_object_get(body, "kind");
  if (!json_is_string(v))
    return terr_set(e, T_EINVAL, "kind", -1, "required: one of %s",
                    kind_list());
  s->kind = kind_find(json_string_value(v));
  if (!s->kind)
    return terr_set(e, T_EINVAL, "kind", -1, "'%s' is not one of %s",
                    json_string_value(v), kind_list());
  s->backend = B_AUTO;
  v = json_object_get(body, "backend");
  if (v) {
    int b = json_is_string(v) ? tbackend_parse(json_string_value(v)) : -1;
    if (b < 0)
      return terr_set(e, T_EINVAL, "backend", -1, "expected one of %s",
                      tbackend_list());
    s->backend = (tbackend)b;
  }
  s->priority = DEFAULT_PRIORITY;
  v = json_object_get(body, "priority");
  if (v) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > 9)
      return terr_set(e, T_EINVAL, "priority", -1,
                      "expected an integer from 0 to 9 (higher runs first)");
    s->priority = (int)json_integer_value(v);
  }
  s->timeout_s = 0;
  v = json_object_get(body, "timeout_s");
  if (v) {
    if (!json_is_number(v) || !(json_number_value(v) > 0) ||
        json_number_value(v) > 86400)
      return terr_set(e, T_EINVAL, "timeout_s", -1,
                      "expected seconds, more than 0 and at most 86400");
    s->timeout_s = json_number_value(v);
  }
  if (opt_string(body, "request_id", 1, 64, &s->request_id, e) ||
      opt_string(body, "label", 0, 200, &s->label, e))
    return e->code;
  s->params = json_object_get(body, "params");
  if (!json_is_object(s->params))
    return terr_set(e, T_EINVAL, "params", -1, "required: a JSON object");
  v = json_object_get(body, "output");
  if (json_is_object(v) && json_object_get(v, "region"))
    return parse_output_region(v, s, e);
  if (v) {
    json_t *f = json_object_get(v, "file");
    if (!json_is_object(v) || json_object_size(v) != 1 || !f)
      return terr_set(e, T_EINVAL, "output", -1,
                      "expected {\"file\": \"/abs/path.npy\"}");
    s->output_file = json_string_value(f);
    if (!s->output_file || strlen(s->output_file) != json_string_length(f) ||
        json_string_length(f) > TLOCAL_PATH_MAX)
      return terr_set(e, T_EINVAL, "output.file", -1,
                      "must be an absolute path (a string of at most %d "
                      "bytes with no NUL)", TLOCAL_PATH_MAX);
  }
  return T_OK;
}

/* The output file's place, checked now as the run will check it again
 * (compute/array/localfile.h: 403 outside the allowed directories, a symlink
 * refused, a missing directory 404). */
static int check_output(jobs *J, const char *owner, const submission *s,
                        terr *e) {
  if ((s->out_region || jobs_names_region(s->params)) &&
      store_is_cluster(J->st))
    return jobs_regions_use(J, owner, s->params, s->out_region, "", e);
  if (s->out_region) /* the offset now; the result's size after the check */
    return region_check_range(owner, s->out_region, s->out_offset, 0, 8,
                              "output", e);
  if (!s->output_file) return T_OK;
  tlocal_out o;
  int rc = tlocal_out_open(J->local, owner, s->output_file, "output.file", &o,
                           e);
  tlocal_out_close(&o);
  return rc;
}

/* An output region must hold the result's first array (the estimate's
 * shape; a geodesic radius query's: max_pairs) at its offset: 400 naming
 * output.offset now rather than a job that fails. */
static int check_output_size(const char *owner, const submission *s,
                             const job_estimate *est, terr *e) {
  if (!s->out_region) return T_OK;
  int64_t n = tshape_size(est->out_ndim, est->out_shape, INT64_MAX);
  int64_t isz = (int64_t)tdtype_size(est->out_dtype);
  return region_check_range(owner, s->out_region, s->out_offset,
                            n < 0 ? INT64_MAX : n * isz, isz, "output", e);
}

/* The store row of a checked submission (strings are heap copies: the
 * store frees them, and replaces the row when the request_id names an
 * earlier job); its id and created_at are the admit's (submit_admit). */
static int build_row(jobs *J, const char *owner, const submission *s,
                     json_t *body, const job_estimate *est,
                     const tlocal_pins *pins, job_record *j, terr *e) {
  memset(j, 0, sizeof *j);
  char *canon = NULL;
  /* The body's hash tells a retry (same request_id, same body) from a
   * reuse of the key; without a key nothing compares it. */
  if (s->request_id) {
    canon = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    if (!canon) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
    char hash[65];
    t_sha256_hex(canon, strlen(canon), hash);
    free(canon);
    j->body_hash = strdup(hash);
  }
  j->owner = strdup(owner);
  j->kind = strdup(s->kind->name);
  { /* stored and shown as the user wrote them: 1e-06, not 17 digits */
    j->params = jobs_params_text(s->params);
  }
  j->status = JOB_QUEUED;
  j->backend_requested = strdup(tbackend_name(s->backend));
  /* with the pins of its {"file"} inputs: the run compares them, in this
   * process or after a restart or on another node (compute/array/localfile.h) */
  char *files = tlocal_pins_text(pins);
  j->estimate = jobs_estimate_json(est, files);
  free(files);
  j->priority = s->priority;
  j->label = s->label ? strdup(s->label) : NULL;
  j->request_id = s->request_id ? strdup(s->request_id) : NULL;
  j->output_file = s->output_file ? strdup(s->output_file)
                  : s->out_region
                      ? region_out_text(s->out_region, s->out_offset)
                      : NULL;
  j->timeout_s = s->timeout_s > 0 ? s->timeout_s : J->default_timeout_s;
  j->max_abs_diff = NAN;
  /* A job split into tiles is marked so at insert (compute/sched/split.c). */
  j->tiles = sched_split_tiles(J->sc, s->kind, s->params, est,
                               s->backend,
                               s->output_file != NULL || s->out_region);
  if (!j->owner || !j->kind || !j->params || !j->backend_requested ||
      !j->estimate || (s->request_id && (!j->body_hash || !j->request_id)) ||
      (s->label && !j->label) ||
      ((s->output_file || s->out_region) && !j->output_file)) {
    store_job_clear(j);
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  }
  return T_OK;
}

int jobs_local_open(const char *const *dirs, int n, int tokens,
                    struct tlocal **out, terr *e) {
  int rc = tlocal_create(dirs, n, out, e);
  if (rc || !*out) return rc;
  if (sigbus_install() != 0) {
    tlocal_free(*out);
    *out = NULL;
    return terr_set(e, T_EINTERNAL, "local-dir", -1,
                    "cannot install the SIGBUS handler");
  }
  for (int i = 0; i < (*out)->n; i++)
    log_info("same-host files under %s%s", (*out)->dirs[i],
             tokens ? "/<token name>" : "");
  return 0;
}

void jobs_local_free(struct tlocal *l) { tlocal_free(l); }

/* The roots compute/array/localfile.c's resolve would accept for owner, as its
 * header states them: without an owner each DIR; with one, DIR/owner when
 * owner is one plain path component and that entry is a directory itself
 * (not a symlink: root_fd opens it with O_NOFOLLOW and refuses one). */
json_t *jobs_local_dirs(jobs *J, const char *owner) {
  json_t *out = json_array();
  const tlocal *l = J->local;
  for (int i = 0; out && l && i < l->n; i++) {
    char root[TLOCAL_PATH_MAX];
    if (tlocal_root(l, i, owner, root, sizeof root) != 0) continue;
    json_t *js = json_string(root);
    if (!js) continue; /* not UTF-8: JSON cannot carry it */
    if (json_array_append_new(out, js) != 0) {
      json_decref(out);
      return NULL;
    }
  }
  return out;
}

/* 1 when v holds, at any depth, an input read from the store of a kind
 * in `keys` (REF_ARRAY: {"array": "<id>"}, REF_RESULT: {"result": "<id>"}):
 * its insert checks that the array or job is still there (a delete may
 * have come between the submit's check and the insert; see submit_prepare
 * for which of them may still be inserted [async]). */
enum { REF_ARRAY = 1, REF_RESULT = 2 };
static int refs_stored(const json_t *v, int keys, int depth) {
  if (depth > 64) return 1; /* deeper than any kind reads: the safe answer */
  if (json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
      if ((((keys & REF_ARRAY) && strcmp(k, "array") == 0) ||
           ((keys & REF_RESULT) && strcmp(k, "result") == 0)) &&
          json_is_string(x))
        return 1;
      if (refs_stored(x, keys, depth + 1)) return 1;
    }
  } else if (json_is_array(v)) {
    for (size_t i = 0; i < json_array_size(v); i++)
      if (refs_stored(json_array_get(v, i), keys, depth + 1)) return 1;
  }
  return 0;
}

static int submit_checked(jobs *J, const char *owner, const submission *sp,
                          json_t *body, const tenv *envp, jobs_pending *p,
                          terr *e);

static int key_take(jobs *J, jobs_pending *p, int want_async, terr *e);

/* jobs_submit_check: the envelope, the output's place, the kind's check,
 * the row without its id (submit.h says why it may run on any thread). */
int jobs_submit_check(jobs *J, const char *owner, json_t *body,
                      jobs_pending *p, terr *e) {
  submission s;
  memset(&s, 0, sizeof s);
  memset(p, 0, sizeof *p);
  int rc = parse_submission(body, &s, e);
  if (rc || (rc = check_output(J, owner, &s, e))) return rc;
  /* On a cluster store the row must be committed before another node can
   * claim it: always the [sync] insert. */
  p->async_ok = !store_is_cluster(J->st);
  /* With a request_id only where the keys in flight are known (rids.h). */
  p->async_ok = p->async_ok && (!s.request_id || J->rids);
  /* An uploaded array as input may: an array delete (or expiry) is a
   * writer op like the insert, so it either comes after the insert, sees
   * the job and is refused 409, or comes before and the insert fails (its
   * refs_exist), and the answer, given only after a commit covering the
   * insert, names why from the store's note of that failure (404 naming
   * the input: jobs_unrecorded). The job may have run meanwhile: its end
   * finds no row and is dropped. Not a job's result as input: it stays a
   * [sync] insert (chains: compute/jobs/README.md). */
  p->async_ok = p->async_ok && !refs_stored(s.params, REF_RESULT, 0);
  /* Nor one naming a region: a delete asks the store whether it is
   * queued (compute/jobs/regions.c), so the row must be there. */
  p->async_ok = p->async_ok && !s.out_region && !jobs_names_region(s.params);

  tenv env;
  tenv_from_store(&env, J->st, owner, J->max_elems);
  env.local = J->local;
  env.max_result_bytes = J->max_result_bytes;
  /* Each {"file"} input's identity and header as checked now: stored with
   * the row, compared by the run (compute/array/localfile.h, "Pins"). */
  if (J->local && !(env.local_pins = tlocal_pins_new()))
    return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  rc = submit_checked(J, owner, &s, body, &env, p, e);
  tlocal_pins_free(env.local_pins);
  return rc;
}

void jobs_submit_uncheck(jobs_pending *p) {
  kind_checked_free(p->kind, p->checked);
  p->checked = NULL;
  store_job_clear(&p->row);
}

/* jobs_submit_admit; want_async: the caller inserts [async] when
 * p->async_ok (jobs_submit with ?wait), so a request_id's key is claimed
 * for that insert rather than held for a [sync] one (rids.h). */
static int submit_admit(jobs *J, jobs_pending *p, int *retry_after_s,
                        int want_async, terr *e) {
  /* A full data disk (its reserve given to the store): 507 before a row
   * or a result takes what the deletes need; room again since, the reserve
   * is taken back here and the job goes on. */
  reserve_watch(1);
  if (reserve_full()) {
    jobs_submit_uncheck(p);
    return terr_set(e, T_ENOSPACE, "", -1,
                    "the data directory's disk is full: delete arrays or "
                    "jobs to free room");
  }
  *retry_after_s = 1;
  int rc = sched_reserve(J->sc, retry_after_s, e);
  if (rc) {
    jobs_submit_uncheck(p);
    return rc;
  }
  /* The id (time-ordered: util.h) and the creation time in the order the
   * jobs are admitted, a batch's in item order. */
  t_id_new('j', p->row.id);
  p->row.created_at = t_wall_ms();
  /* The regions it names know it before the row exists: a delete from
   * now on answers 409 while it is queued or running. */
  if ((rc = jobs_regions_use(J, p->row.owner, p->params, p->out_region,
                             p->row.id, e))) {
    jobs_submit_uncheck(p);
    sched_unreserve(J->sc);
    return rc;
  }
  if (p->row.request_id && J->rids) rc = key_take(J, p, want_async, e);
  return rc;
}

int jobs_submit_admit(jobs *J, jobs_pending *p, int *retry_after_s,
                      terr *e) {
  return submit_admit(J, p, retry_after_s, 0, e);
}

/* jobs_submit_prepare, want_async as submit_admit's. */
static int submit_prepare(jobs *J, const char *owner, json_t *body,
                          jobs_pending *p, int *retry_after_s, int want_async,
                          terr *e) {
  int rc = jobs_submit_check(J, owner, body, p, e);
  return rc ? rc : submit_admit(J, p, retry_after_s, want_async, e);
}

int jobs_submit_prepare(jobs *J, const char *owner, json_t *body,
                        jobs_pending *p, int *retry_after_s, terr *e) {
  return submit_prepare(J, owner, body, p, retry_after_s, 0, e);
}

/* Hold p's key for a [sync] insert (rids.h: it waits only while a claim of
 * the key reads the store). On an error p is given up (nothing held). */
static int key_hold(jobs *J, jobs_pending *p, terr *e) {
  p->async_ok = 0;
  p->rid_claimed = 0;
  int queued = 0;
  p->rid = rids_hold(J->rids, p->row.owner, p->row.request_id, &queued);
  /* read after the hold: a claim it waited for is queued by now, and the
   * insert it stamped is ahead of ours */
  p->rid_mark = rids_mark(J->rids);
  char id[T_ID_MAX];
  if (!p->rid)
    return jobs_submit_inserted(
        J, p, terr_set(e, T_ENOMEM, "", -1, "out of memory"), 0, id, e);
  /* The key's [async] insert is queued: committed first, so that ours
   * finds its row (a finish queued meanwhile may take a queued insert
   * over, writing the row at the job's end instead: rids.h). */
  int rc = queued ? jobs_sync(J, e) : T_OK;
  return rc ? jobs_submit_inserted(J, p, rc, 0, id, e) : T_OK;
}

/* The last step of a prepare with a request_id: claim its key for an
 * [async] insert when the caller makes one and the key is free, else hold
 * it for the [sync] insert. */
static int key_take(jobs *J, jobs_pending *p, int want_async, terr *e) {
  if (want_async && p->async_ok &&
      (p->rid = rids_claim(J->rids, p->row.owner, p->row.request_id))) {
    p->rid_claimed = 1;
    return T_OK;
  }
  return key_hold(J, p, e);
}

int jobs_submit_inserted(jobs *J, jobs_pending *p, int insert_rc,
                         int existing, char id[T_ID_MAX], terr *e) {
  id[0] = 0;
  if (p->rid && !p->rid_claimed) { /* the [sync] insert has returned */
    rids_release(J->rids, p->rid);
    /* committed: so is every [async] insert stamped before it was queued */
    if (!insert_rc) rids_committed(J->rids, p->rid_mark);
    p->rid = NULL;
  }
  if (insert_rc) {
    kind_checked_free(p->kind, p->checked);
    store_job_clear(&p->row);
    sched_unreserve(J->sc);
    return insert_rc;
  }
  t_scopy(id, T_ID_MAX, p->row.id);
  int rc = T_OK;
  if (existing) {
    kind_checked_free(p->kind, p->checked);
    sched_unreserve(J->sc);
  } else {
    /* enqueue takes the slot and `checked`, whatever it answers */
    rc = sched_enqueue_held(J->sc, &p->row, p->params, &p->est, p->kind,
                            p->checked, p->hold, e);
  }
  store_job_clear(&p->row);
  return rc;
}

/* The scheduler's word that a keyed [async] insert's job ended (the
 * store's writer thread, or the thread that ended it unstarted): with its
 * committed row, its end's commit covers the insert (rids.h). */
static void keyed_job_ended(void *arg, const char *id, const store_job *ended) {
  (void)id;
  rids_ended(arg, ended != NULL);
}

/* An idempotent ?wait submit that claimed its key (rids.h): the job the
 * store has committed for the key (the same body: that job, *async_insert
 * 0; another body: 409 naming request_id), else the [async] insert, whose
 * key stays in J->rids until a commit is known to cover it. A read that
 * fails leaves the decision to the [sync] insert. */
static int submit_keyed(jobs *J, jobs_pending *p, int *async_insert,
                        char id[T_ID_MAX], terr *e) {
  rids_entry *en = p->rid;
  p->rid = NULL;
  p->rid_claimed = 0;
  store_job found;
  terr re;
  int existing = 0;
  int rc = store_job_by_request(J->st, p->row.owner, p->row.request_id,
                                &found, &re);
  if (rc == T_OK) {
    existing = 1;
    if (!found.body_hash || !p->row.body_hash ||
        strcmp(found.body_hash, p->row.body_hash) != 0)
      rc = terr_set(e, T_ECONFLICT, "request_id", -1,
                    "'%s' was used for a different request body",
                    p->row.request_id);
    if (rc) {
      store_job_clear(&found);
    } else {
      store_job_clear(&p->row);
      p->row = found;
    }
  } else if (rc == T_ENOTFOUND) {
    rc = store_job_insert_async(J->st, &p->row, e);
  } else { /* cannot tell: the [sync] insert decides, as without the table */
    rids_unclaim(J->rids, en);
    *async_insert = 0;
    if ((rc = key_hold(J, p, e))) return rc;
    rc = store_job_insert(J->st, &p->row, &existing, e);
    return jobs_submit_inserted(J, p, rc, existing, id, e);
  }
  if (rc || existing) {
    rids_unclaim(J->rids, en);
    *async_insert = 0;
    return jobs_submit_inserted(J, p, rc, existing, id, e);
  }
  /* stamped before the enqueue: the job's end is queued after the stamp */
  (void)rids_queued(J->rids, en);
  rc = jobs_submit_inserted(J, p, 0, 0, id, e);
  rids_enqueued(en);
  uint64_t token;
  int w;
  if (rc) {
    /* not queued, its row is: known committed after a sync (which sweeps) */
    terr se;
    (void)jobs_sync(J, &se);
    rids_ended(en, 0);
  } else if ((w = sched_wait_end(J->sc, id, keyed_job_ended, en, &token))) {
    /* ended already: its end's write has returned, the insert with it
     * (sched.h), so the key is settled; not known (-1): a later sweep */
    rids_ended(en, w > 0);
  }
  return rc;
}

int jobs_submit(jobs *J, const char *owner, json_t *body, int *async_insert,
                char id[T_ID_MAX], int *retry_after_s, terr *e) {
  jobs_pending p;
  id[0] = 0;
  int rc = submit_prepare(J, owner, body, &p, retry_after_s, *async_insert, e);
  if (rc) return rc;
  /* With async_insert nothing is answered before a later commit, which
   * commits the insert too: it need not be waited for here, and then
   * usually shares the end's transaction. An idempotency key is checked
   * against the committed rows and the inserts in flight (rids.h). */
  *async_insert = *async_insert && p.async_ok;
  if (p.rid_claimed) return submit_keyed(J, &p, async_insert, id, e);
  int existing = 0;
  rc = *async_insert ? store_job_insert_async(J->st, &p.row, e)
                     : store_job_insert(J->st, &p.row, &existing, e);
  return jobs_submit_inserted(J, &p, rc, existing, id, e);
}

/* jobs_submit_check once its envelope is checked and env is made: the
 * kind's check, the output's size, the row (no id yet). On an error
 * nothing is held. */
static int submit_checked(jobs *J, const char *owner, const submission *sp,
                          json_t *body, const tenv *envp, jobs_pending *p,
                          terr *e) {
  submission s = *sp;
  tenv env = *envp;
  job_estimate est;
  memset(&est, 0, sizeof est);
  void *checked = NULL; /* the parsed, compiled expression: built once */
  int rc;
  if ((rc = sched_check_keep(J->sc, s.kind, s.params, &env, s.backend, &est,
                             &checked, e)))
    return rc;
  job_record row;
  if ((rc = check_output_size(owner, &s, &est, e)) ||
      (rc = build_row(J, owner, &s, body, &est, env.local_pins, &row, e))) {
    kind_checked_free(s.kind, checked);
    return rc;
  }
  p->row = row;
  p->kind = s.kind;
  p->params = s.params;
  p->out_region = s.out_region;
  p->est = est;
  p->checked = checked;
  return T_OK;
}
