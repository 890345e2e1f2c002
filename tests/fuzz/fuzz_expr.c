/* fuzz_expr.c — libFuzzer target for the expression language.
 *
 * Compiles arbitrary bytes (NUL-terminated copy, up to a little over the
 * source limit so that the length check is reached too). When it compiles,
 * the canonical text and the C emitter are exercised, and the program is
 * evaluated in float64 and float32 on small inputs whose shapes are picked
 * by the input's bytes among ones that broadcast to [3, 4] (0-d, [1], [4],
 * [3, 1], [3, 4]), in two uneven chunks, with values from the bytes
 * (NaN and Inf included). Invariants: compile either succeeds or fails with
 * T_EINVAL and a message; nothing reads or writes out of bounds (ASan);
 * no undefined behaviour (UBSan).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/expr/expr.h"

static const int64_t shapes[5][2] = {{0, 0}, {1, 0}, {4, 0}, {3, 1}, {3, 4}};
static const int ndims[5] = {0, 1, 1, 2, 2};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > EXPR_MAX_SRC + 64) return 0;
  char *src = malloc(size + 1);
  if (!src) return 0;
  memcpy(src, data, size);
  src[size] = 0;
  expr *x = NULL;
  terr e;
  int rc = expr_compile(src, &x, &e);
  if (rc) {
    if (rc != T_EINVAL || !e.message[0]) __builtin_trap();
    free(src);
    return 0;
  }
  if (!expr_canonical(x)) __builtin_trap();
  char cbuf[256];
  int n = expr_emit_c(x, "double", "tx_", cbuf, sizeof cbuf);
  if (n >= (int)sizeof cbuf) __builtin_trap();
  int nin = expr_ninputs(x);
  tarray *in[EXPR_MAX_INPUTS] = {0};
  for (int i = 0; i < nin; i++) {
    uint8_t b = size ? data[(size_t)i * 7 % size] : 0;
    int k = b % 5;
    in[i] = tarray_new(b & 0x80 ? T_F32 : T_F64, ndims[k], shapes[k]);
    if (!in[i]) goto done;
    for (int64_t j = 0; j < in[i]->size; j++) {
      uint8_t c = data[(size_t)(i * 13 + j) % size];
      double v = c == 0xff ? NAN : c == 0xfe ? INFINITY
               : ((double)c - 100.0) / 8.0;
      tarray_set(in[i], j, v);
    }
  }
  int64_t osh[2] = {3, 4};
  void *scratch = aligned_alloc(64, (expr_scratch_size(x) + 63) & ~(size_t)63);
  tarray *o64 = tarray_new(T_F64, 2, osh), *o32 = tarray_new(T_F32, 2, osh);
  double f[12];
  if (scratch && o64 && o32) {
    const tarray *const *ci = (const tarray *const *)in;
    expr_eval(x, ci, o64, 0, 5, scratch);
    expr_eval(x, ci, o64, 5, 7, scratch);
    expr_eval(x, ci, o32, 0, 12, scratch);
    expr_eval_f64(x, ci, 2, osh, 3, 9, f, scratch);
    /* the same elements give the same bits, whatever the chunking */
    for (int j = 0; j < 9; j++) {
      double a = f[j], b = ((double *)o64->data)[3 + j];
      if (memcmp(&a, &b, sizeof a) != 0 && !(isnan(a) && isnan(b)))
        __builtin_trap();
    }
  }
  free(scratch);
  tarray_free(o64);
  tarray_free(o32);
done:
  for (int i = 0; i < nin; i++) tarray_free(in[i]);
  expr_free(x);
  free(src);
  return 0;
}
