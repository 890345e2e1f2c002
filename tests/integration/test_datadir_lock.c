/* test_datadir_lock.c — one tesseld per data directory and per port
 * (issue 23, case 7: nothing locked the data directory and SO_REUSEPORT let
 * a second daemon bind the same port; each newcomer re-ran "the job that
 * was running when the process died", one job ran three times at once and
 * a fourth start failed a healthy job "crashed").
 *
 * With a job running on the first daemon:
 *   - a second tesseld on the same data directory (on another port, and on
 *     the same port) exits non-zero without ever listening, its message
 *     naming the first's pid; the first's job is still running with the
 *     same attempts, the first still answers;
 *   - a second tesseld with a data directory of its own on the first's
 *     port exits non-zero without listening;
 *   - kill -9 of the first leaves its lock file behind, which does not stop
 *     a restart on the same data directory and port (the kernel dropped
 *     the lock; SO_REUSEADDR binds over the old connections' TIME_WAIT),
 *     and the restart re-runs the job as before (attempts + 1).
 * Every wait is for a state (an exit, a line, a job status), bounded.
 */
#include "harness.h"

static srv S;
static char job_id[64];

/* Minutes on one core here (test_cancel's expression over twice its
 * elements, 240 MB of input: 16 of 916 progress steps after 3 s), far
 * longer than the few seconds the test needs it running; canceled at the
 * end. */
#define LONG_REDUCE                                                            \
  "{\"kind\":\"reduce\",\"backend\":\"serial\",\"params\":{\"op\":\"sum\","     \
  "\"expr\":\"sin(x)*cos(x)+exp(sin(x))+log(x+2)+sqrt(x+1)+tanh(x)*atan(x)+"    \
  "sin(x+1)*cos(x+2)+exp(cos(x))+log(x+3)+tanh(x+1)\",\"inputs\":{\"x\":"       \
  "{\"range\":{\"start\":0,\"stop\":60000000}}},\"dtype\":\"float32\"}}"

typedef struct second {
  int status;     /* exit status (128+signal when killed) */
  int listened;   /* it printed its "listening on" line */
  char err[8192]; /* its stderr */
} second;

/* Start another tesseld on dir and port; wait (at most 60 s) until it
 * exits, or until it says it listens (then it is killed). */
static void run_second(const char *dir, int port, second *out) {
  memset(out, 0, sizeof *out);
  char errpath[] = "/tmp/tessel-second-XXXXXX";
  int efd = mkstemp(errpath);
  int pfd[2];
  if (efd < 0 || pipe(pfd) != 0) {
    out->status = -1;
    return;
  }
  char portbuf[16];
  snprintf(portbuf, sizeof portbuf, "%d", port);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 1);
    dup2(efd, 2);
    close(pfd[0]);
    close(pfd[1]);
    execl(S.daemon, S.daemon, "--port", portbuf, "--data-dir", dir,
          "--threads", "1", (char *)NULL);
    _exit(127);
  }
  close(pfd[1]);
  fcntl(pfd[0], F_SETFL, O_NONBLOCK);
  char outbuf[4096];
  size_t olen = 0;
  int st = 0, done = 0;
  for (int i = 0; i < 600 && !done; i++) {
    ssize_t n = read(pfd[0], outbuf + olen, sizeof outbuf - 1 - olen);
    if (n > 0) olen += (size_t)n;
    outbuf[olen] = 0;
    if (strstr(outbuf, "listening on")) {
      out->listened = 1;
      kill(pid, SIGKILL);
    }
    if (waitpid(pid, &st, WNOHANG) == pid) done = 1;
    else usleep(100000);
  }
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  close(pfd[0]);
  out->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  ssize_t n = pread(efd, out->err, sizeof out->err - 1, 0);
  out->err[n > 0 ? n : 0] = 0;
  close(efd);
  unlink(errpath);
}

static json_t *get_job(const char *id) {
  char path[128];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  resp r = req(&S, "GET", path, NULL, NULL);
  json_t *j = resp_json(&r);
  resp_free(&r);
  return j;
}

static json_int_t attempts_of(json_t *j) {
  return json_integer_value(json_object_get(j, "attempts"));
}

/* The job is still running on the first daemon, started `want` times. */
static void check_job_untouched(const char *what, json_int_t want) {
  json_t *j = get_job(job_id);
  CHECK_MSG(j && !strcmp(jstr(j, "status"), "running"), "%s: job %s",
            what, j ? jstr(j, "status") : "missing");
  CHECK_MSG(j && attempts_of(j) == want, "%s: attempts %lld, want %lld",
            what, j ? (long long)attempts_of(j) : -1LL, (long long)want);
  json_decref(j);
  resp r = req(&S, "GET", "/healthz", NULL, NULL);
  CHECK(r.status == 200);
  resp_free(&r);
}

static void check_refused_by_lock(const char *what, const second *b) {
  char pidtext[32];
  snprintf(pidtext, sizeof pidtext, "pid %d", (int)S.pid);
  CHECK_MSG(!b->listened, "%s: the second daemon listened", what);
  CHECK_MSG(b->status != 0 && b->status < 128, "%s: exit status %d", what,
            b->status);
  CHECK_MSG(strstr(b->err, pidtext) != NULL,
            "%s: the message does not name %s: %s", what, pidtext, b->err);
  CHECK_MSG(strstr(b->err, "tesseld.lock") != NULL,
            "%s: the message does not name the lock file: %s", what, b->err);
}

TEST(second_daemon_on_the_data_dir_is_refused) {
  long st;
  json_t *j = submit(&S, "", LONG_REDUCE, &st);
  CHECK(j && st == 202);
  snprintf(job_id, sizeof job_id, "%s", j ? jstr(j, "id") : "");
  json_decref(j);
  CHECK(wait_running(&S, job_id));
  j = get_job(job_id);
  json_int_t before = j ? attempts_of(j) : -1;
  json_decref(j);
  CHECK(before == 1);

  second b;
  run_second(S.dir, 0, &b); /* another port: only the lock can stop it */
  check_refused_by_lock("same data dir", &b);
  check_job_untouched("after a second daemon on the data dir", before);

  run_second(S.dir, S.port, &b); /* the case as found: same dir and port */
  check_refused_by_lock("same data dir and port", &b);
  check_job_untouched("after a second daemon on the data dir and port",
                      before);
}

TEST(second_daemon_on_the_port_is_refused) {
  char dir[] = "/tmp/tessel-it-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  second b;
  run_second(dir, S.port, &b);
  CHECK_MSG(!b.listened, "a second daemon listened on port %d", S.port);
  CHECK_MSG(b.status != 0 && b.status < 128, "exit status %d", b.status);
  CHECK_MSG(strstr(b.err, "cannot listen") != NULL, "stderr: %s", b.err);
  check_job_untouched("after a second daemon on the port", 1);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

TEST(restart_after_kill9_takes_the_lock) {
  pid_t old = S.pid;
  CHECK(srv_kill(&S, SIGKILL) == 128 + SIGKILL);
  CHECK(srv_restart(&S) == 0);
  CHECK(S.pid > 0 && S.pid != old);
  /* The lock file names the new daemon. */
  char path[400], text[32] = "";
  snprintf(path, sizeof path, "%s/tesseld.lock", S.dir);
  FILE *f = fopen(path, "r");
  CHECK(f && fgets(text, sizeof text, f));
  if (f) fclose(f);
  CHECK_MSG(atoi(text) == (int)S.pid, "lock file says '%s', pid %d", text,
            (int)S.pid);
  /* The job the dead process was running is run again, once. */
  CHECK(wait_running(&S, job_id));
  json_t *j = get_job(job_id);
  CHECK_MSG(j && attempts_of(j) == 2, "attempts %lld",
            j ? (long long)attempts_of(j) : -1LL);
  json_decref(j);
  char cpath[128];
  snprintf(cpath, sizeof cpath, "/v1/jobs/%s/cancel", job_id);
  resp r = req(&S, "POST", cpath, NULL, NULL);
  CHECK(r.status == 200 || r.status == 202);
  resp_free(&r);
  j = wait_job(&S, job_id, 60);
  CHECK(j && !strcmp(jstr(j, "status"), "canceled"));
  json_decref(j);
}

int main(int argc, char **argv) {
  if (argc < 2) SKIP_ALL("usage: test_datadir_lock <tesseld>");
  curl_global_init(CURL_GLOBAL_ALL);
  if (srv_start(&S, argv[1], "--threads", "1", NULL) != 0) return 1;
  RUN(second_daemon_on_the_data_dir_is_refused);
  RUN(second_daemon_on_the_port_is_refused);
  RUN(restart_after_kill9_takes_the_lock);
  srv_cleanup(&S);
  curl_global_cleanup();
  return check_summary();
}
