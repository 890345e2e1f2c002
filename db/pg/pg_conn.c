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
 * Threads: a connection is used by one thread at a time (the pool,
 * pg_store.c, hands them out); nothing here keeps state.
 */
#include <inttypes.h>
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

int pg__exec_ex(PGconn *c, const char *sql, int n, const char *const *vals,
                const int *lens, const int *fmts, int resfmt, PGresult **res,
                const char *what, terr *e) {
  if (res) *res = NULL;
  /* Without parameters: the simple protocol, which also runs a script of
   * several statements (the migrations). */
  PGresult *r = n == 0 && resfmt == 0
                    ? PQexec(c, sql)
                    : PQexecParams(c, sql, n, NULL, vals, lens, fmts, resfmt);
  ExecStatusType s = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) {
    if (res) *res = r;
    else PQclear(r);
    return 0;
  }
  const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  int code = map_state(c, state);
  const char *m = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  char msg[400];
  mask(m ? m : "the connection to the server was lost", NULL, msg, sizeof msg);
  terr_set(e, code, "", -1, "store: %s: %s", what, msg);
  PQclear(r);
  return code;
}

int pg__exec(PGconn *c, const char *sql, int n, const char *const *vals,
             PGresult **res, const char *what, terr *e) {
  return pg__exec_ex(c, sql, n, vals, NULL, NULL, 0, res, what, e);
}

int pg__begin(PGconn *c, terr *e) {
  return pg__exec(c, "BEGIN", 0, NULL, NULL, "begin", e);
}

int pg__commit(PGconn *c, terr *e) {
  return pg__exec(c, "COMMIT", 0, NULL, NULL, "commit", e);
}

void pg__rollback(PGconn *c) {
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
