/* fuzz_time.c — libFuzzer target for t_parse_time (util/util.c), the
 * parser of /v1/stats/history's ?since.
 *
 * Whatever it accepts is a time it can write back: the ms it gives, written
 * by t_rfc3339 and parsed again, is the same ms (when the year is within
 * 0..9999, which t_rfc3339 writes); whatever it refuses leaves 0.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = 0;
  int64_t ms = -1;
  int rc = t_parse_time(s, &ms);
  if (rc != 0 && ms != 0) abort();
  if (rc == 0 && ms >= 0 && ms < 253402300800000LL) { /* 0001..9999 */
    char buf[40];
    int64_t back = -1;
    if (t_parse_time(t_rfc3339(ms, buf, sizeof buf), &back) != 0 || back != ms)
      abort();
  }
  free(s);
  return 0;
}
