/* auth.c — bearer tokens from a file of "name:token" lines.
 *
 * The file is read once, when the server is created: one "name:token" per
 * line, blank lines and lines starting with '#' ignored, surrounding
 * spaces and a trailing CR trimmed. Anything else (no ':', empty name or
 * token, spaces inside, a name over 64 or a token over 512 characters, a
 * token used twice, no token at all) fails the start with T_EINVAL naming
 * the file and the line. Names may repeat (one caller, several tokens).
 *
 * Only the SHA-256 of each token is kept. A presented token is hashed and
 * compared with every entry without an early exit, and the comparison of
 * two digests is branch-free, so the time taken does not depend on which
 * token (if any) matched nor on how many leading bytes agreed.
 *
 * Threads: the table is immutable after auth_load; auth_check may run on
 * any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "server/http_int.h"
#include "util/vec.h"

#define AUTH_LINE_MAX 1024

static void auth_digest(const char *tok, size_t len, unsigned char out[32]) {
  struct sha256_ctx c;
  sha256_init(&c);
  sha256_update(&c, len, (const uint8_t *)tok);
  sha256_digest(&c, SHA256_DIGEST_SIZE, out);
}

/* 1 when equal; runs in the same time whatever the contents. */
static int digest_equal(const unsigned char *a, const unsigned char *b) {
  unsigned diff = 0;
  for (int i = 0; i < 32; i++) diff |= (unsigned)(a[i] ^ b[i]);
  return (int)(1u & ((diff - 1u) >> 8));
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' ||
               s[n - 1] == '\n'))
    s[--n] = 0;
  return s;
}

static int has_space_or_ctl(const char *s) {
  for (; *s; s++)
    if (isspace((unsigned char)*s) || iscntrl((unsigned char)*s)) return 1;
  return 0;
}

int auth_load(const char *path, auth_table *t, terr *e) {
  memset(t, 0, sizeof *t);
  size_t cap = 0;
  int lineno = 0, rc = T_OK;
  char line[AUTH_LINE_MAX + 2];
  FILE *f = fopen(path, "re");
  if (!f)
    return terr_set(e, T_EINVAL, "token_file", -1, "cannot open %s: %s", path,
                    strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
    log_warn("token file %s is readable by group or others (mode %03o)", path,
             (unsigned)(st.st_mode & 0777));
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t len = strlen(line);
    if (len > AUTH_LINE_MAX && line[len - 1] != '\n') {
      rc = terr_set(e, T_EINVAL, "token_file", lineno,
                    "%s:%d: line longer than %d characters", path, lineno,
                    AUTH_LINE_MAX);
      goto fail;
    }
    char *s = trim(line);
    if (!*s || *s == '#') continue;
    char *colon = strchr(s, ':');
    if (!colon) {
      rc = terr_set(e, T_EINVAL, "token_file", lineno,
                    "%s:%d: expected \"name:token\"", path, lineno);
      goto fail;
    }
    *colon = 0;
    char *name = trim(s), *tok = trim(colon + 1);
    size_t nlen = strlen(name), tlen = strlen(tok);
    if (!nlen || !tlen || has_space_or_ctl(name) || has_space_or_ctl(tok) ||
        strchr(name, '"')) {
      rc = terr_set(e, T_EINVAL, "token_file", lineno,
                    "%s:%d: expected \"name:token\" with a non-empty name and "
                    "token and no spaces inside",
                    path, lineno);
      goto fail;
    }
    if (tlen < AUTH_TOKEN_MIN) { /* guessable: "a", "1234", a name */
      rc = terr_set(e, T_EINVAL, "token_file", lineno,
                    "%s:%d: the token of '%s' has %zu characters; a token "
                    "needs at least %d (e.g. openssl rand -hex 16)",
                    path, lineno, name, tlen, AUTH_TOKEN_MIN);
      goto fail;
    }
    if (nlen > AUTH_NAME_MAX || tlen > AUTH_TOKEN_MAX) {
      rc = terr_set(e, T_EINVAL, "token_file", lineno,
                    "%s:%d: name over %d or token over %d characters", path,
                    lineno, AUTH_NAME_MAX, AUTH_TOKEN_MAX);
      goto fail;
    }
    auth_entry ent;
    memset(&ent, 0, sizeof ent);
    memcpy(ent.name, name, nlen + 1);
    auth_digest(tok, tlen, ent.digest);
    for (size_t i = 0; i < t->n; i++)
      if (memcmp(t->v[i].digest, ent.digest, 32) == 0) {
        rc = terr_set(e, T_EINVAL, "token_file", lineno,
                      "%s:%d: this token is already given to \"%s\"", path,
                      lineno, t->v[i].name);
        goto fail;
      }
    if (tvec_grow(&t->v, &cap, sizeof *t->v, t->n + 1, 0)) {
      rc = terr_set(e, T_ENOMEM, "token_file", -1, "out of memory");
      goto fail;
    }
    t->v[t->n++] = ent;
  }
  if (ferror(f)) {
    rc = terr_set(e, T_EIO, "token_file", -1, "reading %s failed", path);
    goto fail;
  }
  if (t->n == 0) {
    rc = terr_set(e, T_EINVAL, "token_file", -1, "%s holds no token", path);
    goto fail;
  }
  fclose(f);
  return T_OK;
fail:
  fclose(f);
  auth_free(t);
  return rc;
}

void auth_free(auth_table *t) {
  if (t->v) memset(t->v, 0, t->n * sizeof *t->v);
  free(t->v);
  t->v = NULL;
  t->n = 0;
}

int auth_check(const auth_table *t, const char *authorization, char *name) {
  name[0] = 0;
  if (!authorization) return 0;
  const char *p = authorization;
  while (*p == ' ') p++;
  if (strncasecmp(p, "Bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\t'))
    return 0;
  p += 6;
  while (*p == ' ' || *p == '\t') p++;
  size_t len = strlen(p);
  while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
  if (!len || len > AUTH_TOKEN_MAX) return 0;
  unsigned char d[32];
  auth_digest(p, len, d);
  long found = -1;
  for (size_t i = 0; i < t->n; i++) {
    /* Branch-free select of the matching index. */
    long eq = digest_equal(t->v[i].digest, d);
    found = (found & (eq - 1)) | ((long)i & -eq);
  }
  if (found < 0) return 0;
  memcpy(name, t->v[found].name, AUTH_NAME_MAX + 1);
  return 1;
}
