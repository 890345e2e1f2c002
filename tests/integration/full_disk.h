/* full_disk.h — what the two full-disk tests (test_disk_full, test_disk_reserve)
 * share: a daemon whose data directory is a small tmpfs of its own (root
 * only: a mount), and the store's integrity read with the daemon stopped.
 *
 * full_disk_start: the tmpfs mounted on a fresh directory in s->dir and the
 * daemon spawned on it with `threads` worker threads; 0, 1 when the daemon
 * did not start (everything undone), or it exits the program as skipped
 * when this machine cannot mount one (not root, no tmpfs).
 * full_disk_cleanup: the daemon killed, its log dumped when a check
 * failed, the tmpfs unmounted and its directory removed; any number of
 * times. store_integrity: PRAGMA integrity_check of <dir>/tessel.db into
 * buf ("ok" when sound; else SQLite's answer or why it could not be read).
 */
#ifndef TESSEL_TESTS_FULL_DISK_H
#define TESSEL_TESTS_FULL_DISK_H

#include <sqlite3.h>
#include <sys/mount.h>

#include "harness.h"

static int full_disk_mounted;

static inline void full_disk_cleanup(srv *s) {
  if (s->pid > 0) srv_kill(s, SIGKILL);
  if (check_failed) srv_dump_log(s);
  if (full_disk_mounted) umount2(s->dir, MNT_DETACH);
  full_disk_mounted = 0;
  rmdir(s->dir);
}

static inline int full_disk_start(srv *s, const char *daemon, const char *name,
                                  const char *threads) {
  if (geteuid() != 0) SKIP_ALL("mounting a tmpfs needs root");
  memset(s, 0, sizeof *s);
  s->daemon = daemon;
  snprintf(s->dir, sizeof s->dir, "/tmp/tessel-%s-XXXXXX", name);
  if (!mkdtemp(s->dir)) SKIP_ALL("mkdtemp: %s", strerror(errno));
  if (mount("tmpfs", s->dir, "tmpfs", 0, "size=64m") != 0) {
    int err = errno;
    rmdir(s->dir);
    SKIP_ALL("cannot mount a 64 MiB tmpfs: %s", strerror(err));
  }
  full_disk_mounted = 1;
  curl_global_init(CURL_GLOBAL_ALL);
  s->args[s->nargs++] = "--threads";
  s->args[s->nargs++] = threads;
  if (srv_spawn(s) != 0) {
    full_disk_cleanup(s);
    return 1;
  }
  return 0;
}

static inline const char *store_integrity(const char *dir, char *buf, size_t cap) {
  char db[400];
  snprintf(db, sizeof db, "%s/tessel.db", dir);
  sqlite3 *h = NULL;
  sqlite3_stmt *q = NULL;
  if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
    snprintf(buf, cap, "cannot open %s: %s", db, h ? sqlite3_errmsg(h) : "?");
  else if (sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &q, NULL) != SQLITE_OK)
    snprintf(buf, cap, "cannot prepare: %s", sqlite3_errmsg(h));
  else if (sqlite3_step(q) != SQLITE_ROW)
    snprintf(buf, cap, "no answer: %s", sqlite3_errmsg(h));
  else
    snprintf(buf, cap, "%s", (const char *)sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  sqlite3_close(h);
  return buf;
}

#endif
