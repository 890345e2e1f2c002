/* err.c — the error table and the helpers that fill a terr. */
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const names[T__COUNT] = {
    [T_OK] = "ok",
    [T_EINVAL] = "invalid_argument",
    [T_EUNAUTH] = "unauthenticated",
    [T_ENOTFOUND] = "not_found",
    [T_EMETHOD] = "method_not_allowed",
    [T_ENOTACCEPT] = "not_acceptable",
    [T_ECONFLICT] = "conflict",
    [T_ETOOLARGE] = "payload_too_large",
    [T_EMEDIA] = "unsupported_media_type",
    [T_EBUSY] = "too_many_requests",
    [T_EUNAVAIL] = "unavailable",
    [T_EINTERNAL] = "internal",
    [T_ECANCELED] = "canceled",
    [T_ETIMEOUT] = "deadline_exceeded",
    [T_ENOMEM] = "resource_exhausted",
    [T_EIO] = "io_error",
    [T_EDEVICE] = "device_error",
    [T_ENOSPACE] = "resource_exhausted",
    [T_EFORBIDDEN] = "permission_denied",
    [T_EMISDIRECTED] = "misdirected_request",
    [T_ENOTIMPL] = "not_implemented",
    [T_ERANGE] = "range_not_satisfiable",
};

int terr_nospace(terr *e, int rc, int err) {
  if (rc == T_OK || (err != ENOSPC && err != EDQUOT)) return rc;
  if (e) e->code = T_ENOSPACE;
  return T_ENOSPACE;
}

void terr_clear(terr *e) {
  if (!e) return;
  e->code = T_OK;
  e->field[0] = 0;
  e->position = -1;
  e->message[0] = 0;
}

int terr_vset(terr *e, terr_code code, const char *field, int64_t pos,
              const char *fmt, va_list ap) {
  if (!e) return code;
  e->code = code;
  e->position = pos < 0 ? -1 : pos;
  snprintf(e->field, sizeof e->field, "%s", field ? field : "");
  char text[TERR_MSG_MAX];
  vsnprintf(text, sizeof text, fmt ? fmt : "", ap);
  if (e->field[0])
    snprintf(e->message, sizeof e->message, "%s: %s", e->field, text);
  else
    snprintf(e->message, sizeof e->message, "%s", text);
  return code;
}

int terr_set(terr *e, terr_code code, const char *field, int64_t pos,
             const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = terr_vset(e, code, field, pos, fmt, ap);
  va_end(ap);
  return rc;
}

void terr_prefix(terr *e, const char *prefix) {
  if (!e || !prefix || !prefix[0]) return;
  char field[TERR_FIELD_MAX], msg[TERR_MSG_MAX];
  size_t oldlen = strlen(e->field);
  if (oldlen)
    snprintf(field, sizeof field, "%s.%s", prefix, e->field);
  else
    snprintf(field, sizeof field, "%s", prefix);
  /* The message starts with the old field (when there was one): swap it. */
  const char *rest = e->message;
  if (oldlen && strncmp(rest, e->field, oldlen) == 0 && rest[oldlen] == ':')
    rest += oldlen + 2;
  snprintf(msg, sizeof msg, "%s: %s", field, rest);
  memcpy(e->field, field, sizeof field);
  memcpy(e->message, msg, sizeof msg);
}

const char *terr_code_name(terr_code code) {
  if ((unsigned)code >= T__COUNT) return "internal";
  return names[code];
}
