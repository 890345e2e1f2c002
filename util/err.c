/* err.c — the error table and the helpers that fill a terr. */
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct {
  int status;
  const char *name;
} table[T__COUNT] = {
    [T_OK] = {200, "ok"},
    [T_EINVAL] = {400, "invalid_argument"},
    [T_EUNAUTH] = {401, "unauthenticated"},
    [T_ENOTFOUND] = {404, "not_found"},
    [T_EMETHOD] = {405, "method_not_allowed"},
    [T_ENOTACCEPT] = {406, "not_acceptable"},
    [T_ECONFLICT] = {409, "conflict"},
    [T_ETOOLARGE] = {413, "payload_too_large"},
    [T_EMEDIA] = {415, "unsupported_media_type"},
    [T_EBUSY] = {429, "too_many_requests"},
    [T_EUNAVAIL] = {503, "unavailable"},
    [T_EINTERNAL] = {500, "internal"},
    [T_ECANCELED] = {409, "canceled"},
    [T_ETIMEOUT] = {504, "deadline_exceeded"},
    [T_ENOMEM] = {500, "resource_exhausted"},
    [T_EIO] = {500, "io_error"},
    [T_EDEVICE] = {500, "device_error"},
    [T_ENOSPACE] = {507, "resource_exhausted"},
    [T_EFORBIDDEN] = {403, "permission_denied"},
    [T_EMISDIRECTED] = {421, "misdirected_request"},
    [T_ENOTIMPL] = {501, "not_implemented"},
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

int terr_http_status(terr_code code) {
  if ((unsigned)code >= T__COUNT) return 500;
  return table[code].status;
}

const char *terr_code_name(terr_code code) {
  if ((unsigned)code >= T__COUNT) return "internal";
  return table[code].name;
}
