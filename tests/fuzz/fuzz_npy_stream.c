/* fuzz_npy_stream.c — libFuzzer target for the streamed .npy upload.
 *
 * Differential: the input's first byte picks how the rest is cut into
 * pieces (1 to 256 bytes, or all at once), the pieces go through
 * npy_upload (compute/array/codec/upload.h) into a real store in a temporary directory,
 * and the outcome must agree with npy_parse on the whole buffer: accepted
 * by one exactly when accepted by the other, and when accepted, the stored
 * file holds npy_parse's dtype, shape and bytes. The stored array is then
 * deleted, so the directory stays small.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/array/tarray.h"
#include "compute/array/codec/upload.h"

static store *st;
static arrays A;
static char dir[64];

static void cleanup(void) {
  store_close(st);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  snprintf(dir, sizeof dir, "/tmp/fuzz_npy_stream_XXXXXX");
  if (!mkdtemp(dir)) abort();
  char sub[128];
  snprintf(sub, sizeof sub, "%s/arrays", dir);
  if (mkdir(sub, 0755) != 0) abort();
  terr e;
  t_log_level = T_LOG_ERROR;
  if (store_open(dir, &st, &e) != 0) abort();
  A.st = st;
  A.data_dir = dir;
  atexit(cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  size_t piece = data[0] == 0 ? (size_t)-1 : data[0];
  data++;
  size--;
  tarray *a = NULL;
  terr e;
  int whole = npy_parse(data, size, 1 << 20, &a, &e);
  npy_upload *u;
  if (npy_upload_begin(&A, 1 << 20, -1, &u, &e) != 0) abort();
  int rc = 0;
  for (size_t off = 0; off < size && rc == 0;) {
    size_t n = size - off < piece ? size - off : piece;
    rc = npy_upload_feed(u, data + off, n, &e);
    off += n;
  }
  store_array rec;
  int existing = 0;
  if (rc == 0) {
    rc = npy_upload_end(u, "", &rec, &existing, &e);
  } else {
    npy_upload_abort(u);
  }
  if ((rc == 0) != (whole == 0)) __builtin_trap();
  if (rc == 0) {
    tarray *b = NULL;
    if (tarray_map_npy(rec.path, &b, &e) != 0) __builtin_trap();
    if (b->dtype != a->dtype || b->ndim != a->ndim || b->size != a->size ||
        memcmp(b->shape, a->shape, sizeof a->shape[0] * (size_t)a->ndim) != 0 ||
        memcmp(a->data, b->data, (size_t)a->size * tdtype_size(a->dtype)) != 0)
      __builtin_trap();
    tarray_free(b);
    char *path = NULL;
    if (store_array_delete(st, rec.id, NULL, &path, &e) == 0 && path) {
      unlink(path);
      free(path);
    }
    store_array_clear(&rec);
  }
  tarray_free(a);
  return 0;
}
