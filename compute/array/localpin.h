/* compute/array/localpin.h — pins: each {"file"} input of a job (compute/array/localfile.h)
 * as it was when the job was accepted.
 *
 * One pin per input, by the field that names it ("params.inputs.x.file"):
 * the file's identity (st_dev, st_ino, size, mtime and ctime to the
 * nanosecond) and the header the plan was checked against (dtype, shape).
 * The check at submit records them; they are stored with the job (the
 * "files" of its stored estimate, compute/jobs/json.c and compute/sched/text.c), so that a
 * run in this process, a run after a restart and a run on another cluster
 * node all reopen the path and compare. Any difference — another file at the path (os.replace),
 * the same file written, truncated, touched or chmod-ed, another dtype or
 * shape — fails the job T_ECONFLICT naming the input before a byte of it
 * is read; the run maps the descriptor it compared, so it reads the very
 * inode that was checked. No descriptor is held while a job is queued
 * (a queue of any length holds none). A field without a pin (a job stored
 * before pins existed) is pinned when its run's check reads it.
 *
 * Threads: any, one at a time per pins object. Ownership: a pins object
 * is its creator's (tlocal_pins_free); returned text is the caller's.
 */
#ifndef TESSEL_ARRAY_LOCALPIN_H
#define TESSEL_ARRAY_LOCALPIN_H

#include <sys/stat.h>

#include "compute/array/tarray.h"
#include "util/err.h"

typedef struct tlocal_pins tlocal_pins;
tlocal_pins *tlocal_pins_new(void); /* NULL: out of memory */
void tlocal_pins_free(tlocal_pins *p); /* NULL ok */
int tlocal_pins_count(const tlocal_pins *p);
/* As JSON text, an array of {"field","dev","ino","size","mtime_ns",
 * "ctime_ns","dtype","shape"}; NULL when there are none (or out of
 * memory). Caller frees. */
char *tlocal_pins_text(const tlocal_pins *p);
/* From that text (a jansson value: the "files" of a stored estimate).
 * NULL when v is not such an array or out of memory: the run then pins
 * what its check reads. */
tlocal_pins *tlocal_pins_from_json(const void *json_v);

/* For compute/array/localfile.c. The file opened now (st) against field's pin: 0
 * when p is NULL, has no pin for field, or the pin names this very inode
 * unchanged (device, inode, size, mtime, ctime); T_ECONFLICT naming field
 * and saying what differs otherwise. */
int tlocal_pin_same(tlocal_pins *p, const char *field, const char *path,
                    const struct stat *st, terr *e);
/* The same, and the header (dt, ndim, shape) too; a field without a pin
 * is recorded (p NULL: nothing). T_EINVAL past 64 pins, T_ENOMEM. */
int tlocal_pin_use(tlocal_pins *p, const char *field, const char *path,
                   const struct stat *st, tdtype dt, int ndim,
                   const int64_t *shape, terr *e);
/* rc, the error of opening or reading field's file: for a pinned field a
 * change too (gone, no longer a usable .npy), so T_ECONFLICT with e's
 * reason; other codes (T_ENOMEM, T_EUNAVAIL) and unpinned fields as they
 * are. */
int tlocal_pin_failed(tlocal_pins *p, const char *field, int rc, terr *e);

#endif
