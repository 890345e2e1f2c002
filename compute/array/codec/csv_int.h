/* csv_int.h — the cell rules csv.c's one-shot reader and csvpush.c's push
 * reader share (private to compute/array/): what a number cell may hold, the value
 * or the error of one trimmed cell, the element cap's error. Any thread.
 */
#ifndef TESSEL_ARRAY_CSV_INT_H
#define TESSEL_ARRAY_CSV_INT_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define CSV_CELL_MAX 256 /* longest number text accepted in one cell */

/* Case-insensitive equality of s[0..n) and a lowercase word. */
int csv_word_eq(const char *s, size_t n, const char *w);
/* 1 when s[0..n) is a decimal number: [+-]digits[.digits][(e|E)[+-]digits]
 * with at least one digit in the mantissa; 2 when it is nan/inf/infinity;
 * else 0. */
int csv_num_syntax(const char *s, size_t n);
/* The value of the trimmed cell s[0..n) at byte offset `at` ("1.5",
 * '"1.5"'), or its error (T_EINVAL naming "body", "row R, column C: ..."). */
int csv_cell_value(const char *s, size_t n, int64_t row, int64_t col,
                   size_t at, int allow_nonfinite, double *v, terr *e);
/* T_ETOOLARGE: "row R, column C: more than N values". */
int csv_too_many(terr *e, int64_t row, int64_t col, size_t at,
                 int64_t max_elems);

#endif
