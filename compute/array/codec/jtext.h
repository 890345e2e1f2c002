/* jtext.h — a jansson value written as JSON text straight into a tbuf.
 *
 * Two stored documents are written from jansson trees on every job: a
 * submit's params (compute/jobs/json.c) and the router's figures in a
 * job's estimate (compute/sched/text.c). json_dumps builds the text in a
 * buffer of its own, and the params then took a second pass for their
 * reals (tjson_short_reals); written here in one walk, they cost a tiny
 * job a fraction of that (tests/bench/README.md, 2026-11-29b). The text is
 * exactly what jansson writes with JSON_COMPACT (keys in the object's
 * order, strings escaped as jansson does by default: util/buf.h's
 * writers), its reals as the caller asks:
 *   digits 0: the fewest digits that read back the same (json_dumps then
 *             tjson_short_reals);
 *   digits N: N significant digits (JSON_REAL_PRECISION(N)).
 * A string holding a NUL, or a value nested deeper than 32, is handed to
 * jansson itself (it writes the NUL as \u0000; the depth bounds the stack).
 * test_job_text and test_sched compare the text with jansson's.
 *
 * Threads: any; nothing shared. Out of memory: the tbuf's sticky error.
 */
#ifndef TESSEL_ARRAY_JTEXT_H
#define TESSEL_ARRAY_JTEXT_H

#include <jansson.h>

#include "util/buf.h"

void tjson_tree(tbuf *b, const json_t *v, int digits);

#endif
