/* expr_vm.c — evaluation of a compiled expression over a range of output
 * elements, in blocks of VM_BLOCK elements (no full-size temporary).
 *
 * The loops live in expr_vm_tmpl.h, instantiated here for double (_f64) and
 * float (_f32): arithmetic is done in the output's type, like NumPy on
 * float32 arrays with Python-float constants. Scratch (caller-owned, one per
 * thread): nregs block registers, then one block buffer per input for
 * gathering broadcast inputs or converting ones of the other dtype; inputs
 * that are contiguous and of the arithmetic type are read in place.
 *
 * Thread safety: reads only the immutable expr and the inputs; writes only
 * the caller's range of the output and the caller's scratch.
 */
#include <math.h>
#include <string.h>

#include "compute/expr_int.h"
#include "compute/expr_math.h"

/* Elements per block: 2048 doubles (16 KiB) per register keeps a typical
 * program's registers and input blocks in L1/L2 while a loop is long
 * enough to amortise the per-instruction dispatch (tests/bench). */
#define VM_BLOCK 2048
_Static_assert(VM_BLOCK <= EXPR_BLOCK, "VM block above the documented max");

/* The instruction loops are built twice, for AVX2 and for the x86-64
 * baseline, and picked at load time (GCC/Clang target_clones). Each
 * instruction is one operation, so no multiply-add is contracted and both
 * give the same bits. */
/* Not under sanitizers: the ifunc resolver runs before their runtimes are
 * up (TSan crashes at start-up in any binary that links the VM). */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define VM_NO_CLONES 1
#endif
#endif
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__) && !defined(VM_NO_CLONES) && \
    (defined(__clang__) || __GNUC__ >= 8)
#define VM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VM_CLONES
#endif

#define VT double
#define VFSUF
#define VSFX _f64
#include "compute/expr_vm_tmpl.h"
#undef VT
#undef VFSUF
#undef VSFX

#define VT float
#define VFSUF f
#define VSFX _f32
#include "compute/expr_vm_tmpl.h"
#undef VT
#undef VFSUF
#undef VSFX

size_t expr_scratch_size(const expr *x) {
  size_t blocks = (size_t)x->nregs + (size_t)x->tree.ninputs;
  return blocks * VM_BLOCK * sizeof(double) + 64;
}

void expr_eval(const expr *x, const tarray *const *inputs, tarray *out,
               int64_t start, int64_t count, void *scratch) {
  if (count <= 0) return;
  expr_layout l;
  expr_layout_build(x->tree.ninputs, inputs, out->ndim, out->shape, &l);
  if (out->dtype == T_F64)
    vm_run_f64(x, inputs, &l, start, count, (double *)out->data + start,
               scratch);
  else
    vm_run_f32(x, inputs, &l, start, count, (float *)out->data + start,
               scratch);
}

void expr_eval_f64(const expr *x, const tarray *const *inputs, int ndim,
                   const int64_t *shape, int64_t start, int64_t count,
                   double *dst, void *scratch) {
  if (count <= 0) return;
  expr_layout l;
  expr_layout_build(x->tree.ninputs, inputs, ndim, shape, &l);
  vm_run_f64(x, inputs, &l, start, count, dst, scratch);
}
