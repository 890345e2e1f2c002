/* compute/array/store_source.h — a tenv (where uploaded arrays come from) backed by the store.
 *
 * The API builds one at submit (arrayval_check -> array_meta) and the
 * scheduler at prepare (arrayval_resolve -> array_load). Both callbacks look
 * the array up with store_array_get under the job's owner, so an array of
 * another owner is "not found" (T_ENOTFOUND), exactly like an unknown id.
 *
 * Threads: the callbacks may be called from any thread (the store gives
 * each thread its own read connection). The env holds no lock and nothing
 * to free; it borrows `st` and `owner`, which must outlive it.
 */
#ifndef TESSEL_ARRAY_STORE_SOURCE_H
#define TESSEL_ARRAY_STORE_SOURCE_H

#include <stdint.h>

#include "compute/array/arrayval.h"
#include "db/store.h"

/* Fill env: ud = st, owner = owner ("" when open), max_elems caps every
 * array's element count (T_ETOOLARGE beyond; <= 0: no cap). */
void tenv_from_store(tenv *env, store *st, const char *owner,
                     int64_t max_elems);

#endif
