/* bench_daemon.h — the real tesseld for a benchmark: started on a free port
 * with a fresh data dir, stopped with SIGKILL (no clean shutdown: what was
 * acknowledged must already be durable). bench_daemon_start with parent
 * NULL starts it again on the same data dir (after a kill -9). Header-only:
 * each bench_*.c is one program.
 */
#ifndef TESSEL_BENCH_DAEMON_H
#define TESSEL_BENCH_DAEMON_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct bench_daemon {
  pid_t pid;
  int port;
  char dir[300];  /* its data dir (stderr in dir/daemon.log) */
  char base[64];  /* "http://127.0.0.1:PORT" */
} bench_daemon;

/* Start exe --port 0 --data-dir <parent>/tessel_<name>_XXXXXX --access-log 0
 * --log-level warn, then the NULL-terminated `extra` arguments; wait for
 * its "listening on" line. 0, or -1 (said on stderr). */
static inline int bench_daemon_start(bench_daemon *d, const char *exe,
                              const char *parent, const char *name,
                              const char *const *extra) {
  if (parent) { /* a fresh data dir; NULL: again on d->dir (a restart) */
    memset(d, 0, sizeof *d);
    snprintf(d->dir, sizeof d->dir, "%s/tessel_%s_XXXXXX", parent, name);
    if (!mkdtemp(d->dir)) {
      perror("mkdtemp");
      return -1;
    }
  }
  int out[2];
  if (pipe(out) != 0) return -1;
  char logpath[400];
  snprintf(logpath, sizeof logpath, "%s/daemon.log", d->dir);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const char *argv[40];
    int a = 0;
    const char *fixed[] = {exe, "--port", "0", "--data-dir", d->dir,
                           "--access-log", "0", "--log-level", "warn"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[a++] = fixed[i];
    for (int i = 0; extra && extra[i] && a < 39; i++) argv[a++] = extra[i];
    argv[a] = NULL;
    dup2(out[1], 1);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) dup2(fd, 2);
    close(out[0]);
    close(out[1]);
    execv(exe, (char *const *)argv);
    _exit(127);
  }
  close(out[1]);
  d->pid = pid;
  FILE *f = fdopen(out[0], "r");
  char line[512];
  d->port = -1;
  while (f && fgets(line, sizeof line, f)) {
    char *p = strstr(line, "listening on http://");
    if (p) {
      char *colon = strrchr(p + 20, ':');
      if (colon) d->port = atoi(colon + 1);
      break;
    }
  }
  if (f) fclose(f);
  if (d->port <= 0) {
    fprintf(stderr, "bench: the daemon did not start (see %s)\n", logpath);
    return -1;
  }
  snprintf(d->base, sizeof d->base, "http://127.0.0.1:%d", d->port);
  return 0;
}

static inline void bench_daemon_kill9(bench_daemon *d) {
  if (d->pid <= 0) return;
  kill(d->pid, SIGKILL);
  while (waitpid(d->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  d->pid = 0;
}

/* Kill it and remove its data dir. */
static inline void bench_daemon_remove(bench_daemon *d) {
  bench_daemon_kill9(d);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", d->dir);
}

#endif
