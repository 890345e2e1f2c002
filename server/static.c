/* static.c — the web dashboard's files, served from web_dir.
 *
 * A request whose path matches no route is looked up under web_dir (an
 * existing file answers 405 to methods other than GET and HEAD):
 * "/" is web_dir/index.html, "/app.js" web_dir/app.js, "/a/" a/index.html.
 * The path arrives split into %-decoded segments (route.c), so "%2e%2e"
 * is seen as "..". Refused with 400: a "." or ".." segment, a backslash, a
 * '/' that came from "%2F" (a NUL, "%00", was refused by route_split).
 * Refused with 404: dot files, anything that does not exist, is not a
 * regular file, or whose realpath() leaves web_dir (a symlink pointing
 * out). The file is opened with O_NOFOLLOW on its resolved path and sent
 * with sendfile by MHD (http_reply_fd).
 *
 * Caching: every file is "no-cache" (revalidated at each use) with a weak
 * ETag of size and mtime, and If-None-Match answers 304. The dashboard is
 * ES modules importing each other under fixed names: with a max-age, a
 * page loaded right after an upgrade mixed cached old modules with new
 * ones for up to that long. Revalidation costs one conditional request
 * per module per page load (~20, answered 304 from the headers alone),
 * and an upgrade can never mix versions.
 *
 * Security headers on every file: a Content-Security-Policy that allows
 * scripts, styles, images and fetches from this origin only (no inline
 * script or style: the dashboard sets styles through the CSSOM, which the
 * policy allows; data: images for the favicon and canvas exports),
 * frame-ancestors 'none' (and the older X-Frame-Options: DENY) against
 * clickjacking, Referrer-Policy no-referrer (job ids in URLs stay here),
 * X-Content-Type-Options nosniff.
 *
 * Threads: runs on MHD worker threads; reads only immutable server fields.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/http_int.h"

#define STATIC_CSP                                                          \
  "default-src 'self'; script-src 'self'; style-src 'self'; "              \
  "img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; "      \
  "object-src 'none'; base-uri 'none'; form-action 'self'; "               \
  "frame-ancestors 'none'"

static const struct {
  const char *ext, *type;
} ctypes[] = {
    {"html", "text/html; charset=utf-8"},
    {"htm", "text/html; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"json", "application/json; charset=utf-8"},
    {"ico", "image/x-icon"},
    {"map", "application/json; charset=utf-8"},
    {"woff2", "font/woff2"},
    {"txt", "text/plain; charset=utf-8"},
};

static const char *static_ctype(const char *path) {
  const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
  if (!dot || (slash && dot < slash)) return "application/octet-stream";
  for (size_t i = 0; i < sizeof ctypes / sizeof ctypes[0]; i++)
    if (strcasecmp(dot + 1, ctypes[i].ext) == 0) return ctypes[i].type;
  return "application/octet-stream";
}

/* 1 when real is web (the root) or inside it. */
static int inside(const char *web, const char *real) {
  size_t n = strlen(web);
  return strncmp(web, real, n) == 0 && (real[n] == 0 || real[n] == '/');
}

/* Resolve rel (relative to web) and check it stays inside. 0, or an HTTP
 * status to answer (404). out holds PATH_MAX bytes. */
static int resolve(const char *web, const char *rel, char *out) {
  char joined[PATH_MAX];
  int n = snprintf(joined, sizeof joined, "%s/%s", web, rel);
  if (n < 0 || (size_t)n >= sizeof joined) return 404;
  if (!realpath(joined, out)) return 404;
  if (!inside(web, out)) return 404;
  return 0;
}

int static_serve(http_req *r, terr *e) {
  const char *web = r->srv->web_dir_real;
  const path_segs *p = &r->segs;
  char rel[PATH_MAX], real[PATH_MAX];
  size_t used = 0;
  rel[0] = 0;
  for (int i = 0; i < p->n; i++) {
    const char *s = p->seg[i];
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strchr(s, '\\') ||
        strchr(s, '/')) {
      return terr_set(e, T_EINVAL, "path", i,
                      "path segment %d: '.', '..', '\\' and encoded '/' are "
                      "not allowed",
                      i);
    }
    if (s[0] == '.' || (s[0] == 0 && i != p->n - 1)) goto not_found;
    size_t len = strlen(s);
    if (used + len + 2 >= sizeof rel) goto not_found;
    if (i) rel[used++] = '/';
    memcpy(rel + used, s, len + 1);
    used += len;
  }
  if (resolve(web, rel[0] ? rel : ".", real)) goto not_found;
  struct stat st;
  if (stat(real, &st) != 0) goto not_found;
  if (S_ISDIR(st.st_mode)) {
    char idx[PATH_MAX];
    if (snprintf(idx, sizeof idx, "%s/index.html", rel) >= (int)sizeof idx)
      goto not_found;
    if (resolve(web, idx, real) || stat(real, &st) != 0) goto not_found;
  }
  int fd = open(real, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) goto not_found;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    goto not_found;
  }
  if (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0) {
    close(fd);
    http_add_header(r, "Allow", "GET, HEAD");
    return terr_set(e, T_EMETHOD, "", -1, "%s is not allowed on a static file",
                    r->method);
  }
  const char *ctype = static_ctype(real);
  char etag[64];
  snprintf(etag, sizeof etag, "W/\"%llx-%llx\"", (unsigned long long)st.st_size,
           (unsigned long long)st.st_mtim.tv_sec * 1000000000ull +
               (unsigned long long)st.st_mtim.tv_nsec);
  http_add_header(r, "ETag", etag);
  http_add_header(r, "Cache-Control", "no-cache");
  http_add_header(r, "X-Content-Type-Options", "nosniff");
  http_add_header(r, "Content-Security-Policy", STATIC_CSP);
  http_add_header(r, "X-Frame-Options", "DENY");
  http_add_header(r, "Referrer-Policy", "no-referrer");
  const char *inm = http_header(r, "If-None-Match");
  if (inm && strstr(inm, etag)) {
    close(fd);
    http_reply_buffer(r, 304, ctype, NULL, 0);
    return T_OK;
  }
  http_reply_fd(r, 200, ctype, fd, 0, (uint64_t)st.st_size);
  return T_OK;
not_found:
  return terr_set(e, T_ENOTFOUND, "path", -1, "no file at %s", r->path);
}
