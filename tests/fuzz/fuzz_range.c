/* fuzz_range.c — libFuzzer target for http_range_parse (server/range.c),
 * the reader of the Range header on downloads.
 *
 * The first 8 bytes are the representation's length (0 to 2^40), the rest
 * the header. Whatever it answers must hold: ONE gives first <= last <
 * len; NONE, UNSAT and MULTI leave first = last = 0; every answer is one
 * of the four; an empty representation is never ONE. The same header
 * against the largest length is never UNSAT for a range it read as ONE
 * (a range that fits a small file fits any larger one).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8) return 0;
  uint64_t len = 0;
  memcpy(&len, data, 8);
  len &= (1ULL << 40) - 1;
  char *h = malloc(size - 8 + 1);
  if (!h) return 0;
  memcpy(h, data + 8, size - 8);
  h[size - 8] = 0;
  uint64_t a = 7, b = 7;
  http_range_kind k = http_range_parse(h, len, &a, &b);
  if (k != HTTP_RANGE_NONE && k != HTTP_RANGE_ONE && k != HTTP_RANGE_UNSAT &&
      k != HTTP_RANGE_MULTI)
    abort();
  if (k == HTTP_RANGE_ONE) {
    if (len == 0 || a > b || b >= len) abort();
    uint64_t a2, b2;
    if (http_range_parse(h, UINT64_MAX, &a2, &b2) != HTTP_RANGE_ONE) abort();
  } else if (a != 0 || b != 0) {
    abort();
  }
  free(h);
  return 0;
}
