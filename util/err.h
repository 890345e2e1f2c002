/* err.h — the one error type of Tessel.
 *
 * Every fallible function returns an int: 0 (T_OK) on success or one of the
 * terr_code values below, and fills a caller-owned `terr` with the detail
 * (field path, position, message). The code has a name here, the error
 * code of API.md's JSON errors and of a failed job ("invalid_argument",
 * ...); its HTTP status is the transport's business (http_status_of in
 * server/http.h). A NULL `terr *` is allowed everywhere: the detail is then
 * dropped.
 */
#ifndef TESSEL_UTIL_ERR_H
#define TESSEL_UTIL_ERR_H

#include <stdarg.h>
#include <stdint.h>

typedef enum {
  T_OK = 0,
  T_EINVAL,      /* 400 invalid_argument */
  T_EUNAUTH,     /* 401 unauthenticated */
  T_ENOTFOUND,   /* 404 not_found */
  T_EMETHOD,     /* 405 method_not_allowed */
  T_ENOTACCEPT,  /* 406 not_acceptable */
  T_ECONFLICT,   /* 409 conflict */
  T_ETOOLARGE,   /* 413 payload_too_large */
  T_EMEDIA,      /* 415 unsupported_media_type */
  T_EBUSY,       /* 429 too_many_requests */
  T_EUNAVAIL,    /* 503 unavailable */
  T_EINTERNAL,   /* 500 internal */
  T_ECANCELED,   /* job stopped by a cancel (job status "canceled") */
  T_ETIMEOUT,    /* job ran past its timeout_s (job error "deadline_exceeded") */
  T_ENOMEM,      /* out of memory (host or device): 500 / job error "resource_exhausted" */
  T_EIO,         /* file or database I/O failed: 500 / job error "io_error" */
  T_EDEVICE,     /* a GPU error: job error "device_error" */
  T_ENOSPACE,    /* disk full (ENOSPC, EDQUOT, SQLITE_FULL): 507 / job error "resource_exhausted" */
  T_EFORBIDDEN,  /* 403 permission_denied (a foreign Origin) */
  T_EMISDIRECTED,/* 421 misdirected_request (a Host this server is not) */
  T_ENOTIMPL,    /* 501 not_implemented (an unknown transfer coding) */
  T_ERANGE,      /* 416 range_not_satisfiable (a Range header that cannot be served) */
  T__COUNT
} terr_code;

#define TERR_FIELD_MAX 96
#define TERR_MSG_MAX 320

typedef struct terr {
  terr_code code;
  char field[TERR_FIELD_MAX]; /* e.g. "params.expr", "" when not about a field */
  int64_t position;           /* index or character offset; -1 when none */
  char message[TERR_MSG_MAX]; /* human text, already prefixed with the field */
} terr;

/* Reset to "no error". */
void terr_clear(terr *e);

/* Record an error and return `code`, so that callers can write
 * `return terr_set(e, T_EINVAL, "params.expr", 5, "unknown name '%s'", n);`.
 * The message is "field: text" when field is non-empty. pos < 0: no position. */
int terr_set(terr *e, terr_code code, const char *field, int64_t pos,
             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int terr_vset(terr *e, terr_code code, const char *field, int64_t pos,
              const char *fmt, va_list ap);

/* Prefix the field path: "inputs.x" becomes "params.inputs.x" after
 * terr_prefix(e, "params"). Keeps the message consistent. */
void terr_prefix(terr *e, const char *prefix);

/* After a failed write with errno err: when err says the disk is full
 * (ENOSPC, EDQUOT), make e's code T_ENOSPACE. Returns e's (new) code, or
 * rc unchanged when e is NULL or err is another error. */
int terr_nospace(terr *e, int rc, int err);

/* The code's name. Never NULL; unknown codes map to "internal". */
const char *terr_code_name(terr_code code); /* "invalid_argument", ... */

#endif
