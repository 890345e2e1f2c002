/* twice.h — a test-only job kind (never in the daemon): proof that a kind
 * owns its whole contract (issue 24, item 2). A test adds it to the kind
 * table with one line,
 *
 *     kinds_register(&test_kind_twice);
 *
 * and the scheduler, the router, the cost model and its calibration,
 * compare, the split service and the API then run it with no other
 * change (tests/integration/test_kind_contract.c).
 */
#ifndef TESSEL_TESTS_KINDS_TWICE_H
#define TESSEL_TESTS_KINDS_TWICE_H

#include "compute/kinds/kinds.h"

extern const kind_ops test_kind_twice;

/* The rate its calibration gives (rows/s, one thread): a fixed figure, so
 * that a test can find it in the cost model. */
#define TWICE_RATE 2.5e8

#endif
