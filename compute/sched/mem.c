/* compute/sched/mem.c — memory admission: how much memory jobs may hold, and
 * whether one more may start now.
 *
 * The budget (sched_config.max_memory_bytes, --max-memory) defaults to 80 %
 * of the smaller of the machine's RAM (MemTotal in /proc/meminfo) and this
 * process's cgroup v2 limit (memory.max of the cgroup named in
 * /proc/self/cgroup, when it is not "max"). A job's need is its kind's
 * estimate (job_estimate.mem_bytes, plus one more result for compare:
 * sched_mem_need).
 *
 *   submit  need > budget: 413 (sched_check), the job can never run here.
 *   start   a worker that took the job asks sched_mem_decide with the
 *           memory that running jobs hold (the scheduler's reservation
 *           counter, released when a job ends) and, for jobs of
 *           SCHED_MEM_PROBE_MIN bytes or more, what the machine has
 *           available now (MemAvailable; the cgroup's memory.max minus
 *           memory.current less its inactive page cache): RUN reserves
 *           the need; WAIT puts the job back at its place in the queue
 *           until a running job releases memory; NEVER (nothing of ours to
 *           wait for, and still no room: other processes hold the memory)
 *           fails the job "resource_exhausted".
 *
 * The arithmetic (sched_mem_decide, sched_mem_parse_*) is pure so that a
 * unit test can feed it figures; sched_mem_probe reads the files.
 *
 * Threads: every function may be called from any thread; none takes a lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/sched/sched_int.h"
#include "util/tassert.h"

int64_t sched_mem_need(const job_estimate *est, int backend) {
  int64_t m = est->mem_bytes > 0 ? est->mem_bytes : 0;
  if (backend == B_COMPARE && est->out_bytes > 0) /* the kept result + one */
    m = m > INT64_MAX - est->out_bytes ? INT64_MAX : m + est->out_bytes;
  return m;
}

int sched_mem_decide(int64_t need, int64_t budget, int64_t reserved,
                     int64_t avail) {
  if (need < 0) need = 0;
  if (reserved < 0) reserved = 0;
  if (budget > 0 && need > budget) return SCHED_MEM_NEVER;
  int64_t room = INT64_MAX;
  if (budget > 0) room = budget > reserved ? budget - reserved : 0;
  /* What the machine has now already excludes what running jobs touched;
   * counting their reservation again errs on the side of waiting. */
  if (avail >= 0 && avail < room) room = avail;
  T_ASSERT(room >= 0); /* never a negative room: a job of 0 bytes runs */
  if (need <= room) return SCHED_MEM_RUN;
  return reserved > 0 ? SCHED_MEM_WAIT : SCHED_MEM_NEVER;
}

/* "Key:   123 kB" of /proc/meminfo, in bytes; -1 when absent. */
static int64_t meminfo_field(const char *text, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
    if (strncmp(p, key, kl) != 0 || p[kl] != ':') continue;
    char *end;
    long long kb = strtoll(p + kl + 1, &end, 10);
    if (end == p + kl + 1 || kb < 0 || kb > INT64_MAX / 1024) return -1;
    return (int64_t)kb * 1024;
  }
  return -1;
}

void sched_mem_parse_meminfo(const char *text, int64_t *total,
                             int64_t *avail) {
  *total = meminfo_field(text, "MemTotal");
  *avail = meminfo_field(text, "MemAvailable");
}

int64_t sched_mem_parse_cgroup_value(const char *text) {
  if (!text) return -1;
  while (*text == ' ') text++;
  if (strncmp(text, "max", 3) == 0) return -1;
  char *end;
  long long v = strtoll(text, &end, 10);
  if (end == text || v < 0) return -1;
  return (int64_t)v;
}

/* Read a small file into buf (NUL-terminated); 0, or -1. */
int sched_read_small(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = 0;
  return n > 0 ? 0 : -1;
}

/* The cgroup v2 directory of this process, from /proc/self/cgroup's
 * "0::/path" line; falls back to the mount's root. */
static void cgroup_dir(char *dir, size_t cap) {
  char buf[4096];
  snprintf(dir, cap, "/sys/fs/cgroup");
  if (sched_read_small("/proc/self/cgroup", buf, sizeof buf) != 0) return;
  for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p) {
    if (strncmp(p, "0::", 3) != 0) continue;
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    char try[4200], probe[4096];
    snprintf(try, sizeof try, "/sys/fs/cgroup%s/memory.max",
             strcmp(p + 3, "/") == 0 ? "" : p + 3);
    if (sched_read_small(try, probe, sizeof probe) == 0)
      snprintf(dir, cap, "/sys/fs/cgroup%s",
               strcmp(p + 3, "/") == 0 ? "" : p + 3);
    return;
  }
}

void sched_mem_probe(int64_t *total, int64_t *avail) {
  char buf[8192];
  *total = *avail = -1;
  if (sched_read_small("/proc/meminfo", buf, sizeof buf) == 0)
    sched_mem_parse_meminfo(buf, total, avail);
  char dir[4200], path[4300];
  cgroup_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/memory.max", dir);
  int64_t max = sched_read_small(path, buf, sizeof buf) == 0
                    ? sched_mem_parse_cgroup_value(buf) : -1;
  if (max < 0) return;
  if (*total < 0 || max < *total) *total = max;
  snprintf(path, sizeof path, "%s/memory.current", dir);
  int64_t cur = sched_read_small(path, buf, sizeof buf) == 0
                    ? sched_mem_parse_cgroup_value(buf) : -1;
  /* Page cache the kernel can drop (inactive files: results just read or
   * written) is not memory anyone holds. */
  snprintf(path, sizeof path, "%s/memory.stat", dir);
  if (cur >= 0 && sched_read_small(path, buf, sizeof buf) == 0) {
    int64_t inactive = -1;
    for (char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
      if (strncmp(p, "inactive_file ", 14) == 0)
        inactive = sched_mem_parse_cgroup_value(p + 14);
    if (inactive > 0 && inactive < cur) cur -= inactive;
  }
  if (cur >= 0) {
    int64_t room = max > cur ? max - cur : 0;
    if (*avail < 0 || room < *avail) *avail = room;
  }
}

int64_t sched_mem_default_budget(int64_t total) {
  if (total <= 0) return 0; /* unknown: no budget */
  return total / 5 * 4;
}
