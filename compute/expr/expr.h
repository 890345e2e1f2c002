/* expr.h — the expression language of map and reduce jobs.
 *
 * Text -> tokens (compute/expr/lex.c) -> tree (compute/expr/parse.c) -> a compact register
 * program (compute/expr/compile.c) -> a virtual machine (compute/expr/vm.c) that runs the
 * program over blocks of a few thousand elements, so that no full-size
 * temporary is ever made. Inputs broadcast as in NumPy.
 *
 * Grammar (lowest precedence first), Python-like:
 *   or  ->  and ('or' and)*          and -> not ('and' not)*
 *   not ->  'not' not | cmp          cmp -> sum (('<'|'<='|'>'|'>='|'=='|'!=') sum)?
 *   sum ->  term (('+'|'-') term)*   term -> unary (('*'|'/'|'//'|'%') unary)*
 *   unary -> '-' unary | '+' unary | power
 *   power -> atom ('**' unary)?      (right-associative; -x**2 == -(x**2))
 *   atom -> number | name | name '(' args ')' | '(' or ')'
 * Comparisons and logic give 1.0 / 0.0 (non-zero is true). `%` is NumPy's
 * remainder (sign of the divisor); fmod is C's; `//` is np.floor_divide.
 * round() rounds half to even.
 * Functions: abs sqrt cbrt exp exp2 expm1 log log2 log10 log1p sin cos tan
 * asin acos atan atan2 sinh cosh tanh asinh acosh atanh floor ceil round trunc
 * min max pow hypot fmod where(c, a, b) fma(a, b, c) sign isnan isinf
 * isfinite signbit (1.0 / 0.0) copysign nextafter ones_like, and NumPy's
 * names arcsin arccos arctan arctan2 arcsinh arccosh arctanh minimum maximum
 * absolute power rint remainder floor_divide (the same functions), copy and
 * conj (the value itself). Constants: pi e. Any other name is an input. Limits: source <= 4096 bytes, <= 16 distinct
 * inputs, depth <= 64, <= 1024 nodes.
 *
 * Errors: T_EINVAL with the 0-based character position, e.g.
 *   "unknown function 'foo' at 3", "unexpected ')' at 7",
 *   "expected 3 arguments to where, got 2 at 0".
 * Callers prefix the field ("params.expr") with terr_prefix.
 * An input the job does not supply is reported by the caller as
 * "unknown name 'y' at 5" using expr_input_pos().
 *
 * Accuracy: sin, cos, exp and log (float64 and float32) are within 4 ulp of
 * the correctly rounded value: on x86-64 CPUs with AVX2 the VM runs them
 * through glibc's libmvec for every block, tail and 0-d input alike (so a
 * result never depends on where a block ends, and serial == cpu bit for
 * bit); NumPy's SIMD loops make the same trade. Every other function and
 * operator is libm's / IEEE 754. Constants folded at compile time
 * (sin(1)) use libm. Each operation is rounded on its own (no a*b + c is
 * ever contracted into an FMA; fma(a, b, c) asks for one), as in NumPy and
 * in the GPU kernels, which give the VM's bits for + - * / % and the exact
 * functions (api/API.md lists them and the ulp bounds of the others).
 *
 * Thread safety: a compiled expr is immutable; any number of threads may
 * evaluate it at once, each with its own scratch.
 */
#ifndef TESSEL_EXPR_EXPR_H
#define TESSEL_EXPR_EXPR_H

#include <stddef.h>
#include <stdint.h>

#include "compute/array/tarray.h"
#include "util/err.h"

#define EXPR_MAX_SRC 4096
#define EXPR_MAX_INPUTS 16
#define EXPR_BLOCK 4096 /* elements per VM block */

typedef struct expr expr;

/* Parse and compile. On success *out is owned by the caller (expr_free). */
int expr_compile(const char *src, expr **out, terr *e);
/* How many times expr_compile has run in this process (any thread): a job
 * compiles its expression once, at submit, and tests count on it. */
int64_t expr_compiles(void);
void expr_free(expr *x); /* NULL is a no-op */

/* The input names the expression uses, in order of first appearance. */
int expr_ninputs(const expr *x);
const char *expr_input_name(const expr *x, int i);
/* Character offset of the first use of input i (for error messages). */
int expr_input_pos(const expr *x, int i);
/* Index of input `name`, or -1. */
int expr_input_index(const expr *x, const char *name);

/* A canonical text of the tree (fully parenthesised, numbers as %.17g,
 * inputs as in0..inN): equal for expressions that parse to the same tree.
 * Used as the cache key of compiled GPU kernels. Owned by x. */
const char *expr_canonical(const expr *x);

/* Emit the tree as one C/CUDA expression over variables v0..v{n-1} of type
 * `ctype` ("double" or "float"), calling functions named with prefix
 * `fn_prefix` for anything that is not a plain C operator (e.g.
 * "tx_remainder(a,b)", "tx_where(c,a,b)", "tx_round(a)" with fn_prefix "tx_";
 * the caller defines them). Returns the length written, or -1 when buf is too
 * small. Built only from the parsed tree: no source text is copied.
 * Exactly: + - * / and unary minus are C operators; comparisons, and/or/not
 * are C operators cast to ctype ("((double)(v0 < v1))"); `%` is
 * <prefix>remainder(a,b), `//` is <prefix>floordiv(a,b), `**` and pow()
 * are <prefix>pow(a,b), and every other function is <prefix><its C name>
 * (NumPy's names are emitted as the C name): abs sqrt cbrt exp exp2 expm1
 * log log2 log10 log1p sin cos tan asin acos atan atan2 sinh cosh tanh
 * asinh acosh atanh floor ceil round trunc min max hypot fmod where fma
 * sign isnan isinf isfinite signbit copysign nextafter ones_like. The C
 * operators must be compiled without FMA contraction (-ffp-contract=off,
 * NVRTC --fmad=false) to mean what the VM computes. Constants
 * (folded in float64) appear as "((ctype)2.5)"; Inf/NaN as
 * "((ctype)(1.0/0.0))" / "((ctype)(0.0/0.0))". Semantics to give them:
 * compute/expr/expr_math.h (remainder, floordiv, sign, NaN-propagating min/max,
 * round = rint; the classifications give 1/0 in ctype). */
int expr_emit_c(const expr *x, const char *ctype, const char *fn_prefix,
                char *buf, size_t len);

/* VM instructions the program runs per output element (after folding;
 * at least 1). The cost models' ops_per_elem. */
int expr_program_length(const expr *x);

/* The input the whole expression is (source "x", "(x)", "+x"), or -1.
 * Lets reductions read such an input in place. */
int expr_bare_input(const expr *x);

/* ---- broadcasting ----------------------------------------------------- */
/* NumPy broadcasting of n shapes. 0, or T_EINVAL naming the first input
 * (by `names[i]`) that does not fit: "shapes [3] and [4] do not broadcast". */
int expr_broadcast(int n, const int *ndims, const int64_t *const *shapes,
                   const char *const *names, int *out_ndim, int64_t *out_shape,
                   terr *e);

/* ---- evaluation ------------------------------------------------------- */
/* Bytes of scratch one thread needs for expr_eval. */
size_t expr_scratch_size(const expr *x);

/* Evaluate output elements [start, start+count) (flat, C order over the
 * broadcast shape `out` has) into out->data, reading inputs[i] for input i
 * (broadcast to out's shape; float32 or float64, mixed allowed). Arithmetic
 * is float64 when out is float64, float32 when out is float32. `scratch`
 * holds expr_scratch_size(x) bytes, aligned to 64. Never fails for valid
 * shapes; NaN and Inf follow IEEE 754. */
void expr_eval(const expr *x, const tarray *const *inputs, tarray *out,
               int64_t start, int64_t count, void *scratch);

/* Same, but into dst (`count` elements of out's dtype, element `start`
 * first) instead of out->data, which is not touched (it may be NULL: a
 * result written to its file by slices, compute/array/codec/npyfile.c). Serial and
 * parallel runs give the same bits either way. */
void expr_eval_into(const expr *x, const tarray *const *inputs,
                    const tarray *out, int64_t start, int64_t count, void *dst,
                    void *scratch);

/* Same, into a caller buffer of `count` doubles instead of out->data, for
 * reductions: `shape` is the broadcast shape. */
void expr_eval_f64(const expr *x, const tarray *const *inputs, int ndim,
                   const int64_t *shape, int64_t start, int64_t count,
                   double *dst, void *scratch);

#endif
