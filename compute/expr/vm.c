/* compute/expr/vm.c — evaluation of a compiled expression over a range of output
 * elements, in blocks of VM_BLOCK elements (no full-size temporary).
 *
 * The loops live in compute/expr/vm_tmpl.h, instantiated here for double (_f64) and
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

#include "compute/expr/expr_int.h"
#include "compute/expr/expr_math.h"
#include "util/tassert.h"

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

/* glibc's vector math library (libmvec), for sin, cos, exp and log on
 * vector operands: when the library was found at build time (CMake defines
 * TESSEL_HAVE_MVEC and links -lmvec) and the CPU has AVX2 (asked once a
 * process, so every thread and the serial path take the same route and
 * give the same bits). A block is fed 4 doubles / 8 floats at a time; the
 * tail goes through the same call, padded with 1, so an element's result
 * depends only on its value, never on where a chunk starts. Scalar operands
 * (0-d or broadcast inputs, constants) take the same call with one lane, so
 * they give the same bits as that value inside an array. All other
 * functions, constant folding at compile time (expr_apply_f64) and CPUs
 * without AVX2 keep libm.
 *
 * Measured against long double libm (4 million random inputs per range,
 * glibc 2.36, error in ulps of the correctly rounded result):
 *   sin  [-10,10] 3.24, |x| in [1e-300,1e6] 3.00, [1e6,1e300] 2.76
 *   cos  [-10,10] 3.47, |x| in [1e-300,1e6] 3.38, [1e6,1e300] 3.15
 *   exp  [-745,710] 2.98 (subnormal results incl.), [-1,1] 2.99
 *   log  (0,4] 1.52, [1e-320,1e308] 1.40 (subnormal inputs incl.)
 *   sinf 1.82, cosf 1.93 ([-100,100]), expf 2.57 ([-103,88]), logf 0.56
 * NaN/Inf/overflow/underflow results are those of libm (tested). glibc's
 * scalar functions are within 1 ulp, so a float64 map of these functions
 * goes from <1 to <3.5 ulp: inside the documented 4-ulp contract
 * (compute/expr/expr.h) and test_map_ref's 4*2^-52*scale bound. */
#if defined(TESSEL_HAVE_MVEC) && defined(__x86_64__) && \
    (defined(__clang__) || __GNUC__ >= 8)
#include <immintrin.h>
#include <stdatomic.h>
#define VM_MVEC 1
/* target on the declarations too: clang rejects (-Wpsabi) 256-bit vector
 * arguments in a function type compiled without AVX */
#define VM_AVX2 __attribute__((target("avx2")))
VM_AVX2 __m256d _ZGVdN4v_sin(__m256d x);
VM_AVX2 __m256d _ZGVdN4v_cos(__m256d x);
VM_AVX2 __m256d _ZGVdN4v_exp(__m256d x);
VM_AVX2 __m256d _ZGVdN4v_log(__m256d x);
VM_AVX2 __m256 _ZGVdN8v_sinf(__m256 x);
VM_AVX2 __m256 _ZGVdN8v_cosf(__m256 x);
VM_AVX2 __m256 _ZGVdN8v_expf(__m256 x);
VM_AVX2 __m256 _ZGVdN8v_logf(__m256 x);

/* 0 not asked yet, 1 AVX2, 2 not: the answer is the same from every
 * thread, so a race only repeats the question. */
static atomic_int vm_mvec_state;

static int vm_mvec_on(void) {
  int s = atomic_load_explicit(&vm_mvec_state, memory_order_relaxed);
  if (s == 0) {
    __builtin_cpu_init();
    s = __builtin_cpu_supports("avx2") ? 1 : 2;
    atomic_store_explicit(&vm_mvec_state, s, memory_order_relaxed);
  }
  return s == 1;
}

/* d[0..n) = F(a[0..n)); d may be a (each group is read before written). */
#define VM_MVEC_LOOP(NAME, T, VEC, W, F, LOAD, STORE)             \
  VM_AVX2 static void NAME(const T *a, int n, \
                                                   T *d) {         \
    int i = 0;                                                     \
    for (; i + (W) <= n; i += (W)) STORE(d + i, F(LOAD(a + i)));   \
    if (i < n) {                                                   \
      T t[W];                                                      \
      for (int k = 0; k < (W); k++) t[k] = i + k < n ? a[i + k] : 1; \
      STORE(t, F(LOAD(t)));                                        \
      for (int k = 0; i + k < n; k++) d[i + k] = t[k];             \
    }                                                              \
  }
VM_MVEC_LOOP(vm_mvec_sin, double, __m256d, 4, _ZGVdN4v_sin, _mm256_loadu_pd, _mm256_storeu_pd)
VM_MVEC_LOOP(vm_mvec_cos, double, __m256d, 4, _ZGVdN4v_cos, _mm256_loadu_pd, _mm256_storeu_pd)
VM_MVEC_LOOP(vm_mvec_exp, double, __m256d, 4, _ZGVdN4v_exp, _mm256_loadu_pd, _mm256_storeu_pd)
VM_MVEC_LOOP(vm_mvec_log, double, __m256d, 4, _ZGVdN4v_log, _mm256_loadu_pd, _mm256_storeu_pd)
VM_MVEC_LOOP(vm_mvec_sinf, float, __m256, 8, _ZGVdN8v_sinf, _mm256_loadu_ps, _mm256_storeu_ps)
VM_MVEC_LOOP(vm_mvec_cosf, float, __m256, 8, _ZGVdN8v_cosf, _mm256_loadu_ps, _mm256_storeu_ps)
VM_MVEC_LOOP(vm_mvec_expf, float, __m256, 8, _ZGVdN8v_expf, _mm256_loadu_ps, _mm256_storeu_ps)
VM_MVEC_LOOP(vm_mvec_logf, float, __m256, 8, _ZGVdN8v_logf, _mm256_loadu_ps, _mm256_storeu_ps)
#undef VM_MVEC_LOOP

/* Runs op on a vector operand through libmvec; 0: not handled here. */
static int vm_mvec_f64(int op, const double *a, int n, double *d) {
  if (!vm_mvec_on()) return 0;
  switch ((expr_op)op) {
    case EO_SIN: vm_mvec_sin(a, n, d); return 1;
    case EO_COS: vm_mvec_cos(a, n, d); return 1;
    case EO_EXP: vm_mvec_exp(a, n, d); return 1;
    case EO_LOG: vm_mvec_log(a, n, d); return 1;
    default: return 0;
  }
}

static int vm_mvec_f32(int op, const float *a, int n, float *d) {
  if (!vm_mvec_on()) return 0;
  switch ((expr_op)op) {
    case EO_SIN: vm_mvec_sinf(a, n, d); return 1;
    case EO_COS: vm_mvec_cosf(a, n, d); return 1;
    case EO_EXP: vm_mvec_expf(a, n, d); return 1;
    case EO_LOG: vm_mvec_logf(a, n, d); return 1;
    default: return 0;
  }
}
#endif

#define VT double
#define VFSUF
#define VSFX _f64
#include "compute/expr/vm_tmpl.h"
#undef VT
#undef VFSUF
#undef VSFX

#define VT float
#define VFSUF f
#define VSFX _f32
#include "compute/expr/vm_tmpl.h"
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
  T_ASSERT(start >= 0 && start + count <= out->size); /* within out */
  expr_layout l;
  expr_layout_build(x->tree.ninputs, inputs, out->ndim, out->shape, &l);
  if (out->dtype == T_F64)
    vm_run_f64(x, inputs, &l, start, count, (double *)out->data + start,
               scratch);
  else
    vm_run_f32(x, inputs, &l, start, count, (float *)out->data + start,
               scratch);
}

void expr_eval_into(const expr *x, const tarray *const *inputs,
                    const tarray *out, int64_t start, int64_t count, void *dst,
                    void *scratch) {
  if (count <= 0) return;
  expr_layout l;
  expr_layout_build(x->tree.ninputs, inputs, out->ndim, out->shape, &l);
  if (out->dtype == T_F64)
    vm_run_f64(x, inputs, &l, start, count, dst, scratch);
  else
    vm_run_f32(x, inputs, &l, start, count, dst, scratch);
}

void expr_eval_f64(const expr *x, const tarray *const *inputs, int ndim,
                   const int64_t *shape, int64_t start, int64_t count,
                   double *dst, void *scratch) {
  if (count <= 0) return;
  expr_layout l;
  expr_layout_build(x->tree.ninputs, inputs, ndim, shape, &l);
  vm_run_f64(x, inputs, &l, start, count, dst, scratch);
}
