/* kinds.c — the table of job kinds: the four built in, then any a caller
 * adds with kinds_register (a test's own kind). Everything outside
 * compute/kinds/ reaches a kind through this table and its kind_ops,
 * never by its name; the backend names are in compute/kinds/names.c.
 *
 * Threads: the table is written only by kinds_register, which runs before
 * anything else reads it (kinds.h); after that every reader sees a fixed
 * table, and kind_list's text is built once (pthread_once).
 */
#include "compute/kinds/kinds.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static const kind_ops *table[KIND_MAX] = {
    &kind_map_ops,
    &kind_reduce_ops,
    &kind_matmul_ops,
    &kind_geodesic_ops,
};
static int count = 4;
static char names[KIND_MAX * 34]; /* kind_list's text */
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

int kind_count(void) {
  return count;
}

const kind_ops *kind_at(int i) {
  return i >= 0 && i < count ? table[i] : NULL;
}

int kind_slot(const kind_ops *k) {
  for (int i = 0; k && i < count; i++)
    if (table[i] == k) return i;
  return -1;
}

const kind_ops *kind_find(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < count; i++)
    if (strcmp(table[i]->name, name) == 0) return table[i];
  return NULL;
}

/* kind_list's text from the table: once on first use (any thread), and
 * again by each kinds_register (before anything else runs). */
static void names_build(void) {
  size_t len = 0;
  names[0] = 0;
  for (int i = 0; i < count && len < sizeof names; i++)
    len += (size_t)snprintf(names + len, sizeof names - len, "%s%s",
                            i ? ", " : "", table[i]->name);
}

const char *kind_list(void) {
  pthread_once(&names_once, names_build);
  return names;
}

/* A name the API can carry in a path, a query and a metric label. */
static int name_ok(const char *s) {
  if (!s || !(s[0] >= 'a' && s[0] <= 'z')) return 0;
  size_t n = strlen(s);
  if (n > 31) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
          s[i] == '_'))
      return 0;
  return 1;
}

/* 1 when a rate of k's cost is owned by a kind in the table already. */
static int rate_taken(const kind_ops *k) {
  const kind_cost *c = k->cost;
  for (int r = 0; c && r < c->nrates; r++)
    for (int i = 0; i < count; i++) {
      const kind_cost *o = table[i]->cost;
      for (int q = 0; o && q < o->nrates; q++)
        if (strcmp(o->rates[q].name, c->rates[r].name) == 0) return 1;
    }
  return 0;
}

int kinds_register(const kind_ops *k) {
  if (!k || count >= KIND_MAX || !name_ok(k->name) || kind_find(k->name) ||
      !k->check || !k->prepare || !k->run || !k->release ||
      (k->cost && (k->cost->nrates < 0 || k->cost->nrates > KIND_RATES)) ||
      rate_taken(k))
    return -1;
  table[count++] = k;
  pthread_once(&names_once, names_build); /* not again after this one */
  names_build();
  assert(kind_slot(k) == count - 1);
  return 0;
}
