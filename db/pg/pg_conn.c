/* pg_conn.c — one libpq connection's steps: connecting (pg__open_conn),
 * running a statement with its failure mapped to a terr code (pg__exec,
 * pg__exec_ex), the transaction verbs, the store's clock, and the small
 * text conversions every file of db/pg/ uses.
 *
 * Error mapping (pg_int.h): the SQLSTATE of the result (PG_DIAG_SQLSTATE)
 * decides: a connection that is gone (CONNECTION_BAD, class 08, 57P01..03
 * admin shutdown) -> T_EUNAVAIL; 23505 unique violation -> T_ECONFLICT;
 * 53100 disk full -> T_ENOSPACE; 40P01 deadlock and 40001 serialization
 * failure -> T_EBUSY (the transaction was chosen to give way: run it again
 * whole; the writer of pg_store.c does); anything else T_EIO. The server's
 * words are kept (they never hold the conninfo); libpq's connection words
 * may name the host, never the password, and pg__open_conn still masks any
 * password it finds there.
 *
 * Prepared statements: a statement with parameters is parsed and planned
 * once per connection, not at every call (pg_stat_statements and perf on
 * tiny jobs: parse, analysis and planning were about half the server's
 * CPU, tests/bench/results/pg-2core-2026-11-29.md). Each connection keeps
 * a cache of the texts it prepared (PQsetInstanceData, freed with the
 * connection by a libpq event procedure); a text seen for the first time
 * is prepared (PQprepare, named "t<n>") and then run by name
 * (PQexecPrepared). Up to PG_PREP_MAX texts a connection; texts built per
 * call (the list's filters) use pg__exec_dyn and are never prepared. A
 * prepared statement outlives a ROLLBACK (it is not transactional). One
 * that fails with 0A000 (a table's row type changed under its cached plan:
 * another node migrated the schema) is forgotten, so the next call
 * prepares the text again under a new name. A pooler that does not keep
 * sessions (PgBouncer in transaction mode without prepared-statement
 * support) is not supported: connect to PostgreSQL or a session pooler.
 *
 * Notifications after the commit (pg__note): what a transaction wrote and
 * others must hear of ("queued", "end") is noted on its connection and
 * sent once COMMIT succeeded (pg__commit), in one statement with
 * synchronous_commit off for its own transaction. A NOTIFY inside the
 * data's transaction would hold PostgreSQL's single notify lock from its
 * pre-commit to the end of its WAL flush: every notifying commit of every
 * node then ran one after another. The notes follow the transaction
 * verbs run through pg__exec (BEGIN and ROLLBACK drop them, ROLLBACK TO
 * SAVEPOINT drops those taken since that savepoint); the notify
 * statement's failure only loses the events (the nodes poll the store).
 *
 * Threads: a connection is used by one thread at a time (the pool,
 * pg_store.c, hands them out); its statement cache is that connection's.
 */
#include <inttypes.h>
#include <libpq-events.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/pg/pg_int.h"

/* The password in conninfo (a heap copy), or NULL. */
static char *conninfo_password(const char *conninfo) {
  PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
  char *pw = NULL;
  for (PQconninfoOption *o = opts; o && o->keyword; o++)
    if (strcmp(o->keyword, "password") == 0 && o->val && *o->val)
      pw = strdup(o->val);
  if (opts) PQconninfoFree(opts);
  return pw;
}

/* msg with every occurrence of pw replaced by "***", into out. */
static void mask(const char *msg, const char *pw, char *out, size_t cap) {
  size_t n = 0, pl = pw ? strlen(pw) : 0;
  for (const char *m = msg; *m && n + 4 < cap;) {
    if (pl && strncmp(m, pw, pl) == 0) {
      memcpy(out + n, "***", 3);
      n += 3;
      m += pl;
    } else {
      out[n++] = *m == '\n' ? ' ' : *m;
      m++;
    }
  }
  while (n && out[n - 1] == ' ') n--;
  out[n] = 0;
}

/* ---- the per-connection statement cache ---------------------------------- */
#define PG_PREP_MAX 64

/* A savepoint of the open transaction and the number of notes taken
 * before it (pg__note). */
typedef struct note_mark {
  char name[16];
  size_t at;
} note_mark;

typedef struct prep_cache {
  int n;
  unsigned next_name; /* names are never reused on a connection */
  uint64_t hash[PG_PREP_MAX];
  char *sql[PG_PREP_MAX];
  unsigned name[PG_PREP_MAX];
  /* the open transaction's notifications (pg__note), sent after its COMMIT */
  char **notes;
  size_t nnotes, notes_cap;
  note_mark *marks;
  size_t nmarks, marks_cap;
} prep_cache;

static void notes_cut(prep_cache *pc, size_t at) {
  while (pc->nnotes > at) free(pc->notes[--pc->nnotes]);
}

static void prep_clear(prep_cache *pc) {
  for (int i = 0; i < pc->n; i++) free(pc->sql[i]);
  pc->n = 0;
  notes_cut(pc, 0);
  pc->nmarks = 0;
}

/* libpq's event procedure: the cache lives and dies with its connection
 * (a reset connection is a new session: nothing of it is prepared). */
static int prep_event(PGEventId id, void *info, void *pass) {
  (void)pass;
  PGconn *c = NULL;
  if (id == PGEVT_CONNRESET) c = ((PGEventConnReset *)info)->conn;
  else if (id == PGEVT_CONNDESTROY) c = ((PGEventConnDestroy *)info)->conn;
  else return 1;
  prep_cache *pc = PQinstanceData(c, prep_event);
  if (!pc) return 1;
  prep_clear(pc);
  if (id == PGEVT_CONNDESTROY) {
    PQsetInstanceData(c, prep_event, NULL);
    free(pc->notes);
    free(pc->marks);
    free(pc);
  }
  return 1;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The index of sql in c's cache, -1 when absent. */
static int prep_find(const prep_cache *pc, const char *sql, uint64_t h) {
  for (int i = 0; i < pc->n; i++)
    if (pc->hash[i] == h && strcmp(pc->sql[i], sql) == 0) return i;
  return -1;
}

static void no_notice(void *arg, const char *msg) {
  (void)arg;
  (void)msg;
}

int pg__open_conn(const char *conninfo, PGconn **c, terr *e) {
  *c = NULL;
  const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
  const char *vals[] = {conninfo, "5", "tesseld", NULL};
  PGconn *pc = PQconnectdbParams(keys, vals, 1);
  if (!pc) return terr_set(e, T_ENOMEM, "", -1, "store: out of memory");
  if (PQstatus(pc) != CONNECTION_OK) {
    char *pw = conninfo_password(conninfo);
    char msg[400];
    mask(PQerrorMessage(pc), pw, msg, sizeof msg);
    free(pw);
    PQfinish(pc);
    return terr_set(e, T_EUNAVAIL, "store", -1,
                    "cannot reach PostgreSQL: %s", msg);
  }
  /* Notices (e.g. "relation already exists, skipping") are not ours to log. */
  PQsetNoticeProcessor(pc, no_notice, NULL);
  /* Without the cache (no memory) statements run unprepared. */
  prep_cache *cache = calloc(1, sizeof *cache);
  if (cache && PQregisterEventProc(pc, prep_event, "tessel-prep", NULL) &&
      PQsetInstanceData(pc, prep_event, cache))
    cache = NULL;
  free(cache);
  *c = pc;
  return 0;
}

static int map_state(PGconn *c, const char *st) {
  if (PQstatus(c) == CONNECTION_BAD) return T_EUNAVAIL;
  if (!st) return T_EUNAVAIL; /* no SQLSTATE: libpq lost the server */
  if (strncmp(st, "08", 2) == 0 || strcmp(st, "57P01") == 0 ||
      strcmp(st, "57P02") == 0 || strcmp(st, "57P03") == 0)
    return T_EUNAVAIL;
  if (strcmp(st, "23505") == 0) return T_ECONFLICT;
  if (strcmp(st, "53100") == 0) return T_ENOSPACE;
  if (strcmp(st, "40P01") == 0 || strcmp(st, "40001") == 0) return T_EBUSY;
  return T_EIO;
}

/* Run sql (n > 0 parameters) by the name it was prepared under on c,
 * preparing it first when new; unprepared when the cache is full or
 * missing. *slot: its cache index (-1: unprepared). */
static PGresult *run_prepared(PGconn *c, const char *sql, int n,
                              const char *const *vals, const int *lens,
                              const int *fmts, int resfmt, int *slot) {
  *slot = -1;
  prep_cache *pc = PQinstanceData(c, prep_event);
  if (!pc) return PQexecParams(c, sql, n, NULL, vals, lens, fmts, resfmt);
  uint64_t h = fnv1a(sql);
  int i = prep_find(pc, sql, h);
  char name[24];
  if (i < 0) {
    char *copy = pc->n < PG_PREP_MAX ? strdup(sql) : NULL;
    if (!copy) return PQexecParams(c, sql, n, NULL, vals, lens, fmts, resfmt);
    unsigned nm = pc->next_name++;
    snprintf(name, sizeof name, "t%u", nm);
    PGresult *p = PQprepare(c, name, sql, n, NULL);
    if (!p || PQresultStatus(p) != PGRES_COMMAND_OK) {
      free(copy);
      return p; /* its error is the statement's */
    }
    PQclear(p);
    i = pc->n++;
    pc->hash[i] = h;
    pc->sql[i] = copy;
    pc->name[i] = nm;
  }
  snprintf(name, sizeof name, "t%u", pc->name[i]);
  *slot = i;
  return PQexecPrepared(c, name, n, vals, lens, fmts, resfmt);
}

/* Forget cache slot i of c (its plan no longer fits the table). */
static void prep_forget(PGconn *c, int i) {
  prep_cache *pc = PQinstanceData(c, prep_event);
  if (!pc || i < 0 || i >= pc->n) return;
  free(pc->sql[i]);
  pc->n--;
  pc->hash[i] = pc->hash[pc->n];
  pc->sql[i] = pc->sql[pc->n];
  pc->name[i] = pc->name[pc->n];
}

static int exec_any(PGconn *c, const char *sql, int n,
                    const char *const *vals, const int *lens, const int *fmts,
                    int resfmt, PGresult **res, const char *what, terr *e,
                    int prepare);

/* ---- notifications after the commit (pg__note) ---------------------------- */
/* The transaction verbs keep c's notes in step with what will commit:
 * SAVEPOINT marks how many were taken, ROLLBACK TO SAVEPOINT drops those
 * taken since (the savepoint stays), RELEASE forgets the mark (and those
 * above it), BEGIN and ROLLBACK drop them all. COMMIT is pg__commit's. */
static void notes_track(PGconn *c, const char *sql) {
  prep_cache *pc = PQinstanceData(c, prep_event);
  if (!pc) return;
  static const char sp[] = "SAVEPOINT ", rb[] = "ROLLBACK TO SAVEPOINT ",
                    rl[] = "RELEASE SAVEPOINT ";
  const char *name = NULL;
  int verb = 0;
  if (strncmp(sql, sp, sizeof sp - 1) == 0) name = sql + sizeof sp - 1, verb = 1;
  else if (strncmp(sql, rb, sizeof rb - 1) == 0) name = sql + sizeof rb - 1, verb = 2;
  else if (strncmp(sql, rl, sizeof rl - 1) == 0) name = sql + sizeof rl - 1, verb = 3;
  else if (strcmp(sql, "BEGIN") == 0 || strcmp(sql, "ROLLBACK") == 0) {
    notes_cut(pc, 0);
    pc->nmarks = 0;
    return;
  } else {
    return;
  }
  if (verb == 1) {
    if (pc->nmarks == pc->marks_cap) {
      size_t cap = pc->marks_cap ? 2 * pc->marks_cap : 8;
      note_mark *m = realloc(pc->marks, cap * sizeof *m);
      if (!m) return; /* unmarked: a rollback to it keeps the notes (an
                         extra event; listeners read the store) */
      pc->marks = m;
      pc->marks_cap = cap;
    }
    note_mark *m = &pc->marks[pc->nmarks++];
    snprintf(m->name, sizeof m->name, "%s", name);
    m->at = pc->nnotes;
    return;
  }
  for (size_t i = pc->nmarks; i-- > 0;) {
    if (strcmp(pc->marks[i].name, name) != 0) continue;
    if (verb == 2) {
      notes_cut(pc, pc->marks[i].at);
      pc->nmarks = i + 1;
    } else {
      pc->nmarks = i;
    }
    return;
  }
}

/* Send what (a list of "<what>:<id>" on channel tessel) in a transaction
 * of its own that does not wait for its WAL flush: it writes no data. */
static void notes_send(PGconn *c, const char *const *v, size_t n) {
  if (!n) return;
  char *arr = pg__text_array(v, (int)n);
  terr e;
  if (!arr ||
      exec_any(c,
               "SELECT set_config('synchronous_commit', 'off', true),"
               " count(pg_notify('tessel', n)) FROM unnest($1::text[]) AS n",
               1, (const char *const[]){arr}, NULL, NULL, 0, NULL, "notify",
               &e, 1))
    log_debug("store: notifications not sent (the nodes poll for them)");
  free(arr);
}

void pg__note(PGconn *c, const char *what, const char *id) {
  char *text = malloc(strlen(what) + strlen(id) + 2);
  if (text) sprintf(text, "%s:%s", what, id);
  prep_cache *pc = PQinstanceData(c, prep_event);
  PGTransactionStatusType ts = PQtransactionStatus(c);
  if (ts != PQTRANS_INTRANS && ts != PQTRANS_IDLE) { /* a failed
      transaction (it will roll back) or a lost connection: nothing to tell */
    free(text);
    return;
  }
  int held = pc && text && ts == PQTRANS_INTRANS;
  if (held && pc->nnotes == pc->notes_cap) {
    size_t cap = pc->notes_cap ? 2 * pc->notes_cap : 64;
    char **v = realloc(pc->notes, cap * sizeof *v);
    if (v) {
      pc->notes = v;
      pc->notes_cap = cap;
    } else {
      held = 0;
    }
  }
  if (held) {
    pc->notes[pc->nnotes++] = text;
    return;
  }
  if (text && ts == PQTRANS_IDLE) /* not in a transaction: it committed */
    notes_send(c, (const char *const[]){text}, 1);
  else if (text) /* no memory to hold it: in the transaction, as NOTIFY is
                    (delivered at its commit; the lock held through it) */
    exec_any(c, "SELECT pg_notify('tessel', $1)", 1,
             (const char *const[]){text}, NULL, NULL, 0, NULL, "notify",
             &(terr){0}, 1);
  free(text);
}

static int exec_any(PGconn *c, const char *sql, int n,
                    const char *const *vals, const int *lens, const int *fmts,
                    int resfmt, PGresult **res, const char *what, terr *e,
                    int prepare) {
  if (res) *res = NULL;
  /* Without parameters: the simple protocol, which also runs a script of
   * several statements (the migrations). */
  int slot = -1;
  PGresult *r =
      n == 0 && resfmt == 0 ? PQexec(c, sql)
      : prepare ? run_prepared(c, sql, n, vals, lens, fmts, resfmt, &slot)
                : PQexecParams(c, sql, n, NULL, vals, lens, fmts, resfmt);
  ExecStatusType s = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) {
    if (n == 0) notes_track(c, sql);
    if (res) *res = r;
    else PQclear(r);
    return 0;
  }
  const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  if (slot >= 0 && state && strcmp(state, "0A000") == 0) prep_forget(c, slot);
  int code = map_state(c, state);
  const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  char msg[400];
  mask(m ? m : "the connection to the server was lost", NULL, msg, sizeof msg);
  terr_set(e, code, "", -1, "store: %s: %s", what, msg);
  PQclear(r);
  return code;
}

int pg__exec_ex(PGconn *c, const char *sql, int n, const char *const *vals,
                const int *lens, const int *fmts, int resfmt, PGresult **res,
                const char *what, terr *e) {
  return exec_any(c, sql, n, vals, lens, fmts, resfmt, res, what, e, 1);
}

int pg__exec_dyn(PGconn *c, const char *sql, int n, const char *const *vals,
                 PGresult **res, const char *what, terr *e) {
  return exec_any(c, sql, n, vals, NULL, NULL, 0, res, what, e, 0);
}

int pg__exec(PGconn *c, const char *sql, int n, const char *const *vals,
             PGresult **res, const char *what, terr *e) {
  return pg__exec_ex(c, sql, n, vals, NULL, NULL, 0, res, what, e);
}

int pg__begin(PGconn *c, terr *e) {
  return pg__exec(c, "BEGIN", 0, NULL, NULL, "begin", e);
}

int pg__commit(PGconn *c, terr *e) {
  prep_cache *pc = PQinstanceData(c, prep_event);
  int rc = pg__exec(c, "COMMIT", 0, NULL, NULL, "commit", e);
  if (!pc) return rc;
  if (!rc) notes_send(c, (const char *const *)pc->notes, pc->nnotes);
  notes_cut(pc, 0);
  pc->nmarks = 0;
  return rc;
}

void pg__rollback(PGconn *c) {
  prep_cache *pc = PQinstanceData(c, prep_event);
  if (pc) {
    notes_cut(pc, 0);
    pc->nmarks = 0;
  }
  if (PQtransactionStatus(c) == PQTRANS_IDLE) return;
  PGresult *r = PQexec(c, "ROLLBACK");
  PQclear(r);
}

int pg__now_ms(PGconn *c, int64_t *ms, terr *e) {
  PGresult *r;
  int rc = pg__exec(c,
                    "SELECT (extract(epoch from clock_timestamp()) * 1000)"
                    "::bigint",
                    0, NULL, &r, "clock", e);
  if (rc) return rc;
  *ms = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return 0;
}

char *pg__dup(PGresult *r, int row, int col, int *oom) {
  if (PQgetisnull(r, row, col)) return NULL;
  char *d = strdup(PQgetvalue(r, row, col));
  if (!d) *oom = 1;
  return d;
}

const char *pg__i64(char *buf, int64_t v) {
  snprintf(buf, 32, "%" PRId64, v);
  return buf;
}

const char *pg__f64(char *buf, double v) {
  snprintf(buf, 32, "%.17g", v);
  return buf;
}
