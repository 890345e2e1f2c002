/* tassert.h — T_ASSERT, the project's assert for a documented invariant
 * (an index in range, a buffer within its cap, a legal state change),
 * in a header that C and CUDA (C++) files both include: util/tmutex.h
 * adds the lock checks on top, but needs C11 atomics, which nvcc's C++
 * does not have.
 *
 * Like assert, it is on in every build but Release (NDEBUG: what is
 * shipped and benchmarked), where it compiles to nothing; so the
 * condition must have no side effect.
 */
#ifndef TESSEL_UTIL_TASSERT_H
#define TESSEL_UTIL_TASSERT_H

#include <assert.h>

/* T_ASSERT: assert, named so that a reader sees a documented invariant. */
#define T_ASSERT(cond) assert(cond)

#endif
