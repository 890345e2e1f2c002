/* test_local.c — the same-host path (--local-dir): {"file"} inputs and
 * "output": {"file"} results against the real daemon (one CPU worker).
 *
 *  - round trip: a .npy in the allowed dir, map x+1, the result equals
 *    the reference; the same job with an output file: the file is
 *    byte-exact (npy_to_buffer of the reference), no temporary is left,
 *    the job's result names the file and /result is 409;
 *  - refused with 403 naming the field: "..", a symlink out of the dir, a
 *    symlink inside pointing inside, /etc/passwd, a relative path, an
 *    output outside (the outside dir stays empty), an output over an
 *    existing symlink (the link's target unchanged); a daemon without
 *    --local-dir refuses both forms with 403;
 *  - a truncated .npy and a file that is no .npy: 400; a missing file: 404;
 *  - a file truncated after submit while the job waits in the queue (its
 *    pin differs: conflict), and one truncated while the job reads it: the
 *    job fails naming the field and the daemon still answers /healthz
 *    (test_local_pins.c: files replaced while queued);
 *  - per-token dirs: alice reads DIR/alice, not DIR/bob nor DIR itself;
 *  - a canceled output job leaves no temporary file (nor has a named one
 *    while it runs);
 *  - issue 23: an output cut while the job streams it (the named
 *    temporary, or the unnamed one through /proc/<pid>/fd) fails conflict
 *    naming output.file and the file that was there stays; an output
 *    directory moved out of the allowed one while the job writes gets
 *    nothing and the job fails conflict; kill -9 during an output write
 *    and a restart leave no temporary in the directory;
 *  - a queued output job whose directory is gone after a restart fails
 *    naming output.file.
 */
#include <dirent.h>

#include "compute/array/tarray.h"
#include "harness.h"

static srv S;
static char L[256], OUT[256]; /* the allowed dir; a dir outside it */

static const char *LONG_JOB = LONG_SERIAL_JOB;

/* Write values i * 0.5 (n of them) as a .npy at path; 0 on success. */
static int write_npy(const char *path, int64_t n) {
  int64_t shape[1] = {n};
  tarray *a = tarray_new(T_F64, 1, shape);
  if (!a) return -1;
  for (int64_t i = 0; i < n; i++) ((double *)a->data)[i] = (double)i * 0.5;
  FILE *f = fopen(path, "wb");
  terr e;
  int rc = f ? npy_write(f, a, &e) : -1;
  if (f && fclose(f) != 0) rc = -1;
  tarray_free(a);
  return rc;
}

/* Read a whole file (malloc'd, *len); NULL when it cannot. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return b;
}

/* Entries of dir whose names contain `part` (".tmp"); -1 when it cannot
 * be read. */
static int count_entries(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
        (!part || strstr(de->d_name, part)))
      n++;
  closedir(d);
  return n;
}

static json_t *run_job(srv *s, const char *body, long *status) {
  json_t *j = submit(s, "?wait=60", body, status);
  if (!j) return NULL;
  const char *st = jstr(j, "status");
  if (st && strcmp(st, "succeeded") && strcmp(st, "failed") &&
      strcmp(st, "canceled")) {
    char id[64];
    snprintf(id, sizeof id, "%s", jstr(j, "id"));
    json_decref(j);
    j = wait_job(s, id, 120);
  }
  return j;
}

/* A map job body: expr over {"file": path}, with an output file when out
 * is not NULL. */
static void map_body(char *buf, size_t cap, const char *expr, const char *path,
                     const char *out) {
  char o[700] = "";
  if (out) snprintf(o, sizeof o, ",\"output\":{\"file\":\"%s\"}", out);
  snprintf(buf, cap,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"%s\",\"inputs\":{\"x\":"
           "{\"file\":\"%s\"}}}%s}", expr, path, o);
}

TEST(round_trip_and_output_file) {
  char x[400], out[400], body[2048];
  snprintf(x, sizeof x, "%s/x.npy", L);
  CHECK(write_npy(x, 100000) == 0);
  map_body(body, sizeof body, "x+1", x, NULL);
  long st;
  json_t *j = run_job(&S, body, &st);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *d = j ? result_data(&S, j) : NULL;
  CHECK(json_is_array(d) && json_array_size(d) == 100000);
  int same = json_is_array(d);
  for (size_t i = 0; same && i < json_array_size(d); i++)
    same = json_number_value(json_array_get(d, i)) == (double)i * 0.5 + 1;
  CHECK(same);
  json_decref(d);
  json_decref(j);

  /* The same into an output file: byte-exact, nothing else left. */
  snprintf(out, sizeof out, "%s/out.npy", L);
  map_body(body, sizeof body, "x+1", x, out);
  j = run_job(&S, body, &st);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_t *res = j ? json_object_get(j, "result") : NULL;
  CHECK(res && jstr(res, "file") && strcmp(jstr(res, "file"), out) == 0);
  CHECK(res && !json_object_get(res, "href"));
  int64_t shape[1] = {100000};
  tarray *ref = tarray_new(T_F64, 1, shape);
  for (int64_t i = 0; i < 100000; i++) ((double *)ref->data)[i] = (double)i * 0.5 + 1;
  char *want = NULL, *got;
  size_t wlen = 0, glen = 0;
  terr e;
  CHECK(npy_to_buffer(ref, &want, &wlen, &e) == 0);
  got = slurp(out, &glen);
  CHECK(got && glen == wlen && memcmp(got, want, wlen) == 0);
  free(got);
  CHECK(count_entries(L, ".tmp") == 0);
  if (j) {
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%s/result", jstr(j, "id"));
    resp r = req(&S, "GET", path, NULL, NULL);
    CHECK(is_error(&r, 409, "conflict", "id"));
    CHECK(strstr(r.body, "out.npy") != NULL);
    resp_free(&r);
    /* Its result is not a chained input either. */
    snprintf(body, sizeof body,
             "{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":"
             "{\"result\":\"%s\"}}}}", jstr(j, "id"));
    r = req(&S, "POST", "/v1/jobs", "application/json", body);
    CHECK(is_error(&r, 409, "conflict", "params.inputs.x"));
    resp_free(&r);
  }
  json_decref(j);

  /* A small (heap) result replaces the existing file. */
  char small[400];
  snprintf(small, sizeof small, "%s/small.npy", L);
  CHECK(write_npy(small, 10) == 0);
  map_body(body, sizeof body, "x*2", small, out);
  j = run_job(&S, body, &st);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_decref(j);
  shape[0] = 10;
  tarray *r10 = tarray_new(T_F64, 1, shape);
  for (int64_t i = 0; i < 10; i++) ((double *)r10->data)[i] = (double)i;
  free(want);
  CHECK(npy_to_buffer(r10, &want, &wlen, &e) == 0);
  got = slurp(out, &glen);
  CHECK(got && glen == wlen && memcmp(got, want, wlen) == 0);
  free(got);
  free(want);
  tarray_free(ref);
  tarray_free(r10);
  CHECK(count_entries(L, ".tmp") == 0);
}

static void refused_input(srv *s, const char *path, long status,
                          const char *code) {
  char body[2048];
  map_body(body, sizeof body, "x+1", path, NULL);
  resp r = req(s, "POST", "/v1/jobs", "application/json", body);
  CHECK_MSG(is_error(&r, status, code, "params.inputs.x.file"), "path %s", path);
  resp_free(&r);
}

static void refused_output(srv *s, const char *in, const char *out,
                           long status) {
  char body[2048];
  map_body(body, sizeof body, "x+1", in, out);
  resp r = req(s, "POST", "/v1/jobs", "application/json", body);
  CHECK_MSG(is_error(&r, status, status == 403 ? "permission_denied"
                                               : "invalid_argument",
                     "output.file"),
            "output %s", out);
  resp_free(&r);
}

TEST(paths_outside_are_refused) {
  char x[400], p[600], link[400];
  snprintf(x, sizeof x, "%s/x.npy", L);
  CHECK(write_npy(x, 100) == 0);
  snprintf(p, sizeof p, "%s/../etc/passwd", L);
  refused_input(&S, p, 403, "permission_denied");
  snprintf(p, sizeof p, "%s/sub/../x.npy", L); /* ".." even when inside */
  refused_input(&S, p, 403, "permission_denied");
  snprintf(link, sizeof link, "%s/etc", L);
  CHECK(symlink("/etc", link) == 0);
  snprintf(p, sizeof p, "%s/etc/passwd", L);
  refused_input(&S, p, 403, "permission_denied");
  snprintf(link, sizeof link, "%s/alias.npy", L);
  CHECK(symlink(x, link) == 0); /* inside, to inside: still no */
  refused_input(&S, link, 403, "permission_denied");
  refused_input(&S, "/etc/passwd", 403, "permission_denied");
  refused_input(&S, "x.npy", 403, "permission_denied");
  snprintf(p, sizeof p, "%s", L); /* the directory itself */
  refused_input(&S, p, 403, "permission_denied");

  /* Outputs: outside, "..", over a symlink, through a symlinked dir. */
  snprintf(p, sizeof p, "%s/o.npy", OUT);
  refused_output(&S, x, p, 403);
  snprintf(p, sizeof p, "%s/../%s/o.npy", L, strrchr(OUT, '/') + 1);
  refused_output(&S, x, p, 403);
  snprintf(p, sizeof p, "%s/etc/o.npy", L);
  refused_output(&S, x, p, 403);
  refused_output(&S, x, link, 403); /* alias.npy -> x.npy */
  refused_output(&S, x, "o.npy", 403);
  snprintf(p, sizeof p, "%s/", L);
  refused_output(&S, x, p, 403);
  CHECK(count_entries(OUT, NULL) == 0);
  size_t len;
  char *b = slurp(x, &len); /* the link's target is untouched */
  CHECK(b && len == 128 + 100 * 8);
  free(b);
  unlink(link);
  snprintf(link, sizeof link, "%s/etc", L);
  unlink(link);
}

TEST(bad_files_are_400_and_missing_404) {
  char p[400];
  snprintf(p, sizeof p, "%s/trunc.npy", L);
  CHECK(write_npy(p, 1000) == 0);
  CHECK(truncate(p, 128 + 500 * 8) == 0);
  refused_input(&S, p, 400, "invalid_argument");
  snprintf(p, sizeof p, "%s/text.npy", L);
  FILE *f = fopen(p, "w");
  fputs("not a numpy file at all\n", f);
  fclose(f);
  refused_input(&S, p, 400, "invalid_argument");
  snprintf(p, sizeof p, "%s/nothere.npy", L);
  refused_input(&S, p, 404, "not_found");
  snprintf(p, sizeof p, "%s/fifo.npy", L); /* never blocks the daemon */
  CHECK(mkfifo(p, 0600) == 0);
  refused_input(&S, p, 400, "invalid_argument");
  unlink(p);
}

/* The job fails naming the input (and saying `why`); the daemon lives
 * on. */
static void fails_naming_input(json_t *j, const char *why) {
  CHECK(j && strcmp(jstr(j, "status"), "failed") == 0);
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *m = err ? jstr(err, "message") : NULL;
  CHECK_MSG(m && strstr(m, "params.inputs.x.file") && strstr(m, why),
            "message %s", m ? m : "-");
  CHECK(srv_healthy(&S));
}

TEST(file_truncated_after_submit_and_while_read) {
  char x[400], body[2048];
  snprintf(x, sizeof x, "%s/big.npy", L);
  CHECK(write_npy(x, 1000000) == 0);
  /* Queued behind a long job: the header is checked again at the run. */
  long st;
  json_t *l = submit(&S, "", LONG_JOB, &st);
  char lid[64];
  snprintf(lid, sizeof lid, "%s", l ? jstr(l, "id") : "");
  json_decref(l);
  wait_running(&S, lid);
  map_body(body, sizeof body, "x+1", x, NULL);
  json_t *q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  char qid[64];
  snprintf(qid, sizeof qid, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
  CHECK(truncate(x, 4096) == 0);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", lid);
  resp r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
  json_t *j = wait_job(&S, qid, 120);
  fails_naming_input(j, "its size changed"); /* its pin, before a byte */
  json_decref(j);

  /* Truncated while the job reads it: a slow expression over 4M values
   * on one thread; the file is cut once the job runs. The mapping's
   * pages past the cut would raise SIGBUS; the guard turns them into
   * zeros and the job fails. */
  CHECK(write_npy(x, 4000000) == 0);
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":{\"expr\":"
           "\"sin(x)*cos(x)*exp(-abs(x))*log(abs(x)+2)*sqrt(abs(x)+1)*"
           "tanh(x)*atan(x)*sin(x*2)*cos(x*3)*exp(sin(x))\",\"inputs\":{\"x\":"
           "{\"file\":\"%s\"}}}}", x);
  q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  snprintf(qid, sizeof qid, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
  CHECK(wait_reading(&S, qid));
  CHECK(truncate(x, 4096) == 0);
  j = wait_job(&S, qid, 120);
  fails_naming_input(j, "truncated under the job");
  json_decref(j);
  unlink(x);
}

TEST(canceled_output_job_leaves_no_temporary) {
  char x[400], out[400], body[2048];
  snprintf(x, sizeof x, "%s/c.npy", L);
  snprintf(out, sizeof out, "%s/c_out.npy", L);
  CHECK(write_npy(x, 4000000) == 0);
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":{\"expr\":"
           "\"sin(x)*cos(x)*exp(-abs(x))*log(abs(x)+2)*sqrt(abs(x)+1)*"
           "tanh(x)*atan(x)*sin(x*2)*cos(x*3)*exp(sin(x))\",\"inputs\":{\"x\":"
           "{\"file\":\"%s\"}}},\"output\":{\"file\":\"%s\"}}", x, out);
  long st;
  json_t *q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  char qid[64], path[128];
  snprintf(qid, sizeof qid, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
  CHECK(wait_reading(&S, qid));
  CHECK(count_entries(L, "c_out") == 0); /* its temporary is unnamed */
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", qid);
  resp r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
  json_t *j = wait_job(&S, qid, 120);
  CHECK(j && strcmp(jstr(j, "status"), "canceled") == 0);
  json_decref(j);
  CHECK(count_entries(L, "c_out") == 0);
  unlink(x);
}

/* A slow serial map of n float64 at `in` (written here) into `out`;
 * submitted, running and mid-way once this returns; its id in id. */
static void slow_output_job(const char *in, const char *out, int64_t n,
                            char id[64]) {
  char body[2048];
  CHECK(write_npy(in, n) == 0);
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"backend\":\"serial\",\"params\":{\"expr\":"
           "\"sin(x)*cos(x)*exp(-abs(x))*log(abs(x)+2)*sqrt(abs(x)+1)*"
           "tanh(x)*atan(x)*sin(x*2)*cos(x*3)*exp(sin(x))\",\"inputs\":{\"x\":"
           "{\"file\":\"%s\"}}},\"output\":{\"file\":\"%s\"}}", in, out);
  long st;
  json_t *q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  snprintf(id, 64, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
  CHECK(wait_reading(&S, id));
}

/* The output temporary the daemon is writing for a file named `name` in
 * dir, as a path that truncate() reaches: a named one in dir
 * (".<name>.tmp..."), or an unnamed one (O_TMPFILE) through the daemon's
 * /proc/<pid>/fd ("<dir>/#<inode> (deleted)"). 0 when found. */
static int out_temp(const char *dir, const char *name, char *path,
                    size_t cap) {
  char part[300], fds[64], link[700], target[700];
  snprintf(part, sizeof part, ".%s.tmp", name);
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d)))
    if (strncmp(de->d_name, part, strlen(part)) == 0) {
      snprintf(path, cap, "%s/%s", dir, de->d_name);
      closedir(d);
      return 0;
    }
  if (d) closedir(d);
  snprintf(fds, sizeof fds, "/proc/%d/fd", (int)S.pid);
  snprintf(part, sizeof part, "%s/#", dir);
  d = opendir(fds);
  while (d && (de = readdir(d))) {
    snprintf(link, sizeof link, "%s/%s", fds, de->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (strncmp(target, part, strlen(part)) == 0) {
      snprintf(path, cap, "%s", link);
      closedir(d);
      return 0;
    }
  }
  if (d) closedir(d);
  return -1;
}

/* j failed "conflict" naming output.file. */
static void fails_conflict_on_output(json_t *j) {
  CHECK(j && jstr(j, "status") && strcmp(jstr(j, "status"), "failed") == 0);
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *code = err ? jstr(err, "code") : NULL;
  const char *m = err ? jstr(err, "message") : NULL;
  CHECK_MSG(code && strcmp(code, "conflict") == 0, "code %s (%s)",
            code ? code : "-", m ? m : "-");
  CHECK_MSG(m && strstr(m, "output.file"), "message %s", m ? m : "-");
  json_t *res = j ? json_object_get(j, "result") : NULL;
  CHECK(!res || !json_object_get(res, "file")); /* no file is claimed */
}

/* Issue 23, case 3: the output cut while the job streams it. It used to
 * succeed with a zeroed header; now it fails conflict and the file that
 * was there stays as it was. */
TEST(output_truncated_while_written) {
  char x[400], out[400], tmp[800];
  snprintf(x, sizeof x, "%s/t.npy", L);
  snprintf(out, sizeof out, "%s/t_out.npy", L);
  CHECK(write_npy(out, 10) == 0); /* the user's previous result */
  size_t olen = 0, nlen = 0;
  char *old = slurp(out, &olen);
  char id[64];
  slow_output_job(x, out, 8000000, id);
  CHECK(out_temp(L, "t_out.npy", tmp, sizeof tmp) == 0);
  CHECK_MSG(truncate(tmp, 0) == 0, "truncate %s: %s", tmp, strerror(errno));
  json_t *j = wait_job(&S, id, 120);
  fails_conflict_on_output(j);
  json_decref(j);
  char *now = slurp(out, &nlen);
  CHECK(old && now && olen == nlen && memcmp(old, now, olen) == 0);
  free(old);
  free(now);
  CHECK(count_entries(L, "t_out") == 1);
  CHECK(srv_healthy(&S));
  unlink(x);
  unlink(out);
}

/* Issue 23, case 4: the output's directory moved out of --local-dir while
 * the job writes. It used to receive the file; now nothing is written
 * outside (nor inside) and the job fails conflict naming output.file. */
TEST(output_dir_moved_out_while_written) {
  char x[400], dir[400], out[500], away[400];
  snprintf(x, sizeof x, "%s/m.npy", L);
  snprintf(dir, sizeof dir, "%s/moving", L);
  snprintf(out, sizeof out, "%s/o.npy", dir);
  snprintf(away, sizeof away, "%s/moving", OUT);
  CHECK(mkdir(dir, 0700) == 0);
  char id[64];
  slow_output_job(x, out, 8000000, id);
  CHECK(rename(dir, away) == 0);
  json_t *j = wait_job(&S, id, 120);
  fails_conflict_on_output(j);
  json_decref(j);
  CHECK_MSG(count_entries(away, NULL) == 0, "%d entries in %s",
            count_entries(away, NULL), away);
  CHECK(access(dir, F_OK) != 0);
  CHECK(rmdir(away) == 0);
  unlink(x);
}

/* Issue 23, case 5: kill -9 while an output is written, then a restart
 * (the job runs again and succeeds): no temporary stays in the user's
 * directory. */
TEST(output_kill9_leaves_no_temporary) {
  char x[400], out[400];
  snprintf(x, sizeof x, "%s/k.npy", L);
  snprintf(out, sizeof out, "%s/k_out.npy", L);
  char id[64];
  slow_output_job(x, out, 2000000, id);
  srv_kill(&S, SIGKILL);
  CHECK(srv_restart(&S) == 0);
  json_t *j = wait_job(&S, id, 120);
  CHECK(j && jstr(j, "status") && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_decref(j);
  CHECK(count_entries(L, "k_out") == 1); /* the output alone */
  CHECK(count_entries(L, ".tmp") == 0);
  unlink(x);
  unlink(out);
}

TEST(output_dir_gone_after_restart) {
  char dir[400], out[500], x[400], body[2048];
  snprintf(dir, sizeof dir, "%s/later", L);
  CHECK(mkdir(dir, 0700) == 0);
  snprintf(out, sizeof out, "%s/o.npy", dir);
  snprintf(x, sizeof x, "%s/x.npy", L);
  long st;
  json_t *l = submit(&S, "", LONG_JOB, &st);
  char lid[64];
  snprintf(lid, sizeof lid, "%s", l ? jstr(l, "id") : "");
  json_decref(l);
  wait_running(&S, lid);
  map_body(body, sizeof body, "x+1", x, out);
  json_t *q = submit(&S, "", body, &st);
  CHECK(q && st == 202);
  char qid[64];
  snprintf(qid, sizeof qid, "%s", q ? jstr(q, "id") : "");
  json_decref(q);
  /* Stored with its output; the directory goes while the daemon is down. */
  srv_kill(&S, SIGKILL);
  CHECK(rmdir(dir) == 0);
  CHECK(srv_restart(&S) == 0);
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s/cancel", lid);
  resp r = req(&S, "POST", path, NULL, NULL);
  resp_free(&r);
  json_t *j = wait_job(&S, qid, 120);
  CHECK(j && strcmp(jstr(j, "status"), "failed") == 0);
  json_t *err = j ? json_object_get(j, "error") : NULL;
  const char *m = err ? jstr(err, "message") : NULL;
  CHECK_MSG(m && strstr(m, "output.file"), "message %s", m ? m : "-");
  json_t *o = j ? json_object_get(j, "output") : NULL;
  CHECK(o && jstr(o, "file") && strcmp(jstr(o, "file"), out) == 0);
  json_decref(j);
}

TEST(feature_off_is_403) {
  srv off;
  CHECK(srv_start(&off, S.daemon, "--threads", "1", NULL) == 0);
  char x[400], out[400];
  snprintf(x, sizeof x, "%s/x.npy", L);
  snprintf(out, sizeof out, "%s/off.npy", L);
  refused_input(&off, x, 403, "permission_denied");
  char body[2048];
  map_body(body, sizeof body, "x+1", x, NULL);
  resp r = req(&off, "POST", "/v1/jobs", "application/json", body);
  CHECK(strstr(r.body, "--local-dir") != NULL);
  resp_free(&r);
  snprintf(body, sizeof body,
           "{\"kind\":\"map\",\"params\":{\"expr\":\"x\",\"inputs\":{\"x\":1}},"
           "\"output\":{\"file\":\"%s\"}}", out);
  r = req(&off, "POST", "/v1/jobs", "application/json", body);
  CHECK(is_error(&r, 403, "permission_denied", "output.file"));
  resp_free(&r);
  CHECK(access(out, F_OK) != 0);
  srv_cleanup(&off);
}

TEST(per_token_directories) {
  char base[300], d[400], tokens[300];
  snprintf(base, sizeof base, "/tmp/tessel-it-tok-XXXXXX");
  CHECK(mkdtemp(base) != NULL);
  snprintf(tokens, sizeof tokens, "%s/tokens", base);
  FILE *f = fopen(tokens, "w");
  fprintf(f, "alice:alice-secret-01234\nbob:bob-secret-0123456\n");
  fclose(f);
  snprintf(d, sizeof d, "%s/alice", base);
  CHECK(mkdir(d, 0700) == 0);
  snprintf(d, sizeof d, "%s/bob", base);
  CHECK(mkdir(d, 0700) == 0);
  char ax[400], bx[400], top[400];
  snprintf(ax, sizeof ax, "%s/alice/x.npy", base);
  snprintf(bx, sizeof bx, "%s/bob/x.npy", base);
  snprintf(top, sizeof top, "%s/x.npy", base);
  CHECK(write_npy(ax, 10) == 0 && write_npy(bx, 10) == 0 &&
        write_npy(top, 10) == 0);
  srv t;
  CHECK(srv_start(&t, S.daemon, "--threads", "1", "--token-file", tokens,
                  "--local-dir", base, NULL) == 0);
  t.token = "alice-secret-01234";
  char body[2048];
  map_body(body, sizeof body, "x+1", ax, NULL);
  long st;
  json_t *j = run_job(&t, body, &st);
  CHECK(j && strcmp(jstr(j, "status"), "succeeded") == 0);
  json_decref(j);
  refused_input(&t, bx, 403, "permission_denied");
  refused_input(&t, top, 403, "permission_denied");
  t.token = "bob-secret-0123456";
  refused_input(&t, ax, 403, "permission_denied");
  srv_cleanup(&t);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  CHECK(system(cmd) == 0);
}

TEST(start_refuses_a_missing_dir) {
  srv bad;
  /* The daemon exits at once: srv_start fails (no "listening" line). */
  CHECK(srv_start(&bad, S.daemon, "--local-dir", "/nonexistent/tessel", NULL) != 0);
  srv_cleanup(&bad);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_local <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  snprintf(L, sizeof L, "/tmp/tessel-it-local-XXXXXX");
  snprintf(OUT, sizeof OUT, "/tmp/tessel-it-outside-XXXXXX");
  if (!mkdtemp(L) || !mkdtemp(OUT)) return 1;
  if (srv_start(&S, argv[1], "--threads", "1", "--local-dir", L, NULL) != 0)
    return 1;
  RUN(round_trip_and_output_file);
  RUN(paths_outside_are_refused);
  RUN(bad_files_are_400_and_missing_404);
  RUN(file_truncated_after_submit_and_while_read);
  RUN(canceled_output_job_leaves_no_temporary);
  RUN(output_truncated_while_written);
  RUN(output_dir_moved_out_while_written);
  RUN(output_kill9_leaves_no_temporary);
  RUN(output_dir_gone_after_restart);
  RUN(feature_off_is_403);
  RUN(per_token_directories);
  RUN(start_refuses_a_missing_dir);
  srv_cleanup(&S);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", L, OUT);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", L);
  curl_global_cleanup();
  return check_summary();
}
