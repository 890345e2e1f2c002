/* compute/expr/compile.c — from the parsed tree to the VM's register program.
 *
 * Steps, in expr_compile:
 *   1. lex + parse (compute/expr/lex.c, compute/expr/parse.c);
 *   2. constant folding: any operation whose operands are all numbers is
 *      computed now with expr_apply_f64 (the same libm calls the VM makes),
 *      and where(c, a, b) with a constant c keeps one branch. Folding is in
 *      float64, as NumPy computes Python scalars before casting to the
 *      array's dtype;
 *   3. code generation: a post-order walk that visits the operand needing
 *      more registers first (Sethi-Ullman), frees operand registers as soon
 *      as they are read and reuses the lowest free one, so a program of
 *      hundreds of operations needs a handful of block registers. Inputs and
 *      constants are operands, never copied into registers. x**2 becomes a
 *      multiply (pow(x, 2) is exactly x*x, correctly rounded);
 *   4. the canonical text (compute/expr/emit.c).
 * The tree kept in the expr is the folded one: expr_canonical and
 * expr_emit_c are built from it.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "compute/expr/expr_int.h"
#include "compute/expr/expr_math.h"
#include "util/tassert.h"

double expr_apply_f64(expr_op op, double a, double b, double c) {
  switch (op) {
    case EO_NEG: return -a;
    case EO_NOT: return a == 0 ? 1.0 : 0.0;
    case EO_ADD: return a + b;
    case EO_SUB: return a - b;
    case EO_MUL: return a * b;
    case EO_DIV: return a / b;
    case EO_MOD: return xm_remainder(a, b);
    case EO_FLOORDIV: return xm_floordiv(a, b);
    case EO_POW: return pow(a, b);
    case EO_LT: return a < b ? 1.0 : 0.0;
    case EO_LE: return a <= b ? 1.0 : 0.0;
    case EO_GT: return a > b ? 1.0 : 0.0;
    case EO_GE: return a >= b ? 1.0 : 0.0;
    case EO_EQ: return a == b ? 1.0 : 0.0;
    case EO_NE: return a != b ? 1.0 : 0.0;
    case EO_AND: return (a != 0 && b != 0) ? 1.0 : 0.0;
    case EO_OR: return (a != 0 || b != 0) ? 1.0 : 0.0;
    case EO_ABS: return fabs(a);
    case EO_SQRT: return sqrt(a);
    case EO_CBRT: return cbrt(a);
    case EO_EXP: return exp(a);
    case EO_EXP2: return exp2(a);
    case EO_EXPM1: return expm1(a);
    case EO_LOG: return log(a);
    case EO_LOG2: return log2(a);
    case EO_LOG10: return log10(a);
    case EO_LOG1P: return log1p(a);
    case EO_SIN: return sin(a);
    case EO_COS: return cos(a);
    case EO_TAN: return tan(a);
    case EO_ASIN: return asin(a);
    case EO_ACOS: return acos(a);
    case EO_ATAN: return atan(a);
    case EO_ATAN2: return atan2(a, b);
    case EO_SINH: return sinh(a);
    case EO_COSH: return cosh(a);
    case EO_TANH: return tanh(a);
    case EO_ASINH: return asinh(a);
    case EO_ACOSH: return acosh(a);
    case EO_ATANH: return atanh(a);
    case EO_FLOOR: return floor(a);
    case EO_CEIL: return ceil(a);
    case EO_ROUND: return rint(a);
    case EO_TRUNC: return trunc(a);
    case EO_MIN: return xm_min(a, b);
    case EO_MAX: return xm_max(a, b);
    case EO_HYPOT: return hypot(a, b);
    case EO_FMOD: return fmod(a, b);
    case EO_WHERE: return a != 0 ? b : c;
    case EO_FMA: return fma(a, b, c);
    case EO_SIGN: return XM_SIGN(a);
    case EO_ISNAN: return isnan(a) ? 1.0 : 0.0;
    case EO_ISINF: return isinf(a) ? 1.0 : 0.0;
    case EO_ISFINITE: return isfinite(a) ? 1.0 : 0.0;
    case EO_SIGNBIT: return signbit(a) ? 1.0 : 0.0;
    case EO_COPYSIGN: return copysign(a, b);
    case EO_NEXTAFTER: return nextafter(a, b);
    case EO_ONES_LIKE: return 1.0;
    case EO_SQUARE: return a * a;
    case EO_COPY: return a;
    default: return NAN;
  }
}

/* ---- folding ----------------------------------------------------------- */
static void fold(expr_tree *t, int id) {
  expr_node *n = &t->nodes[id];
  int allnum = 1;
  for (int k = 0; k < n->nargs; k++) {
    fold(t, n->arg[k]);
    if (t->nodes[n->arg[k]].op != EO_NUM) allnum = 0;
  }
  if (n->nargs == 0) return;
  if (allnum) {
    double v[3] = {0, 0, 0};
    for (int k = 0; k < n->nargs; k++) v[k] = t->nodes[n->arg[k]].num;
    n->num = expr_apply_f64((expr_op)n->op, v[0], v[1], v[2]);
    n->op = EO_NUM;
    n->nargs = 0;
    return;
  }
  if (n->op == EO_WHERE && t->nodes[n->arg[0]].op == EO_NUM) {
    int keep = t->nodes[n->arg[0]].num != 0 ? n->arg[1] : n->arg[2];
    *n = t->nodes[keep]; /* the subtree stays reachable through its args */
  }
}

/* ---- code generation --------------------------------------------------- */
typedef struct gen {
  expr *x;
  int nins, cap;
  uint8_t busy[EXPR_MAX_REGS];
  int nregs;
  terr *e;
} gen;

/* Registers a subtree needs (Sethi-Ullman number, leaves need none). */
static int need(const expr_tree *t, int id) {
  const expr_node *n = &t->nodes[id];
  if (n->nargs == 0) return 0;
  int r[3], best = 0;
  for (int k = 0; k < n->nargs; k++) r[k] = need(t, n->arg[k]);
  /* children run in descending order of need; child k (0-based in that
   * order) runs while k earlier results are held */
  for (int k = 0; k < n->nargs; k++)
    for (int j = k + 1; j < n->nargs; j++)
      if (r[j] > r[k]) {
        int s = r[k];
        r[k] = r[j];
        r[j] = s;
      }
  for (int k = 0; k < n->nargs; k++)
    if (r[k] + k > best) best = r[k] + k;
  return best > 1 ? best : 1;
}

static int const_index(expr *x, double v) {
  for (int i = 0; i < x->nconsts; i++)
    if (memcmp(&x->consts[i], &v, sizeof v) == 0) return i;
  T_ASSERT(x->nconsts <= x->tree.nnodes); /* one constant per node at most */
  x->consts[x->nconsts] = v;
  return x->nconsts++;
}

typedef struct operand {
  uint8_t kind;
  int16_t idx;
} operand;

static int gen_node(gen *g, int id, operand *out) {
  expr *x = g->x;
  const expr_node *n = &x->tree.nodes[id];
  if (n->op == EO_NUM) {
    out->kind = OPK_CONST;
    out->idx = (int16_t)const_index(x, n->num);
    return 0;
  }
  if (n->op == EO_IN) {
    out->kind = OPK_IN;
    out->idx = (int16_t)n->input;
    x->used_mask |= 1u << n->input;
    return 0;
  }
  expr_op op = (expr_op)n->op;
  int nargs = n->nargs;
  int args[3] = {n->arg[0], n->arg[1], n->arg[2]};
  if (op == EO_POW && x->tree.nodes[args[1]].op == EO_NUM &&
      x->tree.nodes[args[1]].num == 2.0) {
    op = EO_SQUARE;
    nargs = 1;
  }
  int order[3] = {0, 1, 2}, r[3] = {0, 0, 0};
  for (int k = 0; k < nargs; k++) r[k] = need(&x->tree, args[k]);
  for (int k = 0; k < nargs; k++)
    for (int j = k + 1; j < nargs; j++)
      if (r[order[j]] > r[order[k]]) {
        int s = order[k];
        order[k] = order[j];
        order[j] = s;
      }
  operand ops[3];
  int rc;
  for (int k = 0; k < nargs; k++)
    if ((rc = gen_node(g, args[order[k]], &ops[order[k]]))) return rc;
  for (int k = 0; k < nargs; k++)
    if (ops[k].kind == OPK_REG) {
      T_ASSERT(ops[k].idx >= 0 && ops[k].idx < EXPR_MAX_REGS);
      T_ASSERT(g->busy[ops[k].idx]); /* an argument's register is live */
      g->busy[ops[k].idx] = 0;
    }
  int dst = -1;
  for (int i = 0; i < EXPR_MAX_REGS; i++)
    if (!g->busy[i]) {
      dst = i;
      break;
    }
  if (dst < 0)
    return terr_set(g->e, T_EINVAL, "", n->pos,
                    "expression needs too many intermediate values at %d",
                    n->pos);
  g->busy[dst] = 1;
  if (dst + 1 > g->nregs) g->nregs = dst + 1;
  /* prog holds one instruction per node plus the final copy */
  T_ASSERT(g->nins < x->tree.nnodes);
  expr_ins *in = &x->prog[g->nins++];
  memset(in, 0, sizeof *in);
  in->op = (uint8_t)op;
  in->nargs = (uint8_t)nargs;
  for (int k = 0; k < nargs; k++) {
    in->kind[k] = ops[k].kind;
    in->idx[k] = ops[k].idx;
  }
  in->dst = (int16_t)dst;
  out->kind = OPK_REG;
  out->idx = (int16_t)dst;
  return 0;
}

char *expr_canonical_build(const expr_tree *t); /* compute/expr/emit.c */

static _Atomic int64_t compiles;

int64_t expr_compiles(void) { return atomic_load_explicit(&compiles, memory_order_relaxed); }

int expr_compile(const char *src, expr **out, terr *e) {
  atomic_fetch_add_explicit(&compiles, 1, memory_order_relaxed);
  *out = NULL;
  expr_tok *toks = NULL;
  int ntok = 0, rc;
  expr *x = calloc(1, sizeof *x);
  if (!x) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  if (!src) {
    rc = terr_set(e, T_EINVAL, "", 0, "empty expression at 0");
    goto fail;
  }
  if ((rc = expr_lex(src, &toks, &ntok, e))) goto fail;
  if ((rc = expr_parse(src, toks, ntok, &x->tree, e))) goto fail;
  fold(&x->tree, x->tree.root);
  /* At most one instruction and one constant per node, plus a final copy. */
  x->prog = calloc((size_t)x->tree.nnodes + 1, sizeof *x->prog);
  x->consts = calloc((size_t)x->tree.nnodes + 1, sizeof *x->consts);
  if (!x->prog || !x->consts) {
    rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
    goto fail;
  }
  gen g = {.x = x, .e = e};
  operand res;
  if ((rc = gen_node(&g, x->tree.root, &res))) goto fail;
  if (res.kind != OPK_REG) { /* a bare input or constant */
    expr_ins *in = &x->prog[g.nins++];
    memset(in, 0, sizeof *in);
    in->op = EO_COPY;
    in->nargs = 1;
    in->kind[0] = res.kind;
    in->idx[0] = res.idx;
    in->dst = 0;
    g.nregs = 1;
  }
  T_ASSERT(g.nins >= 1 && g.nins <= x->tree.nnodes + 1);
  T_ASSERT(g.nregs >= 1 && g.nregs <= EXPR_MAX_REGS);
  x->nins = g.nins;
  x->nregs = g.nregs;
  x->prog[x->nins - 1].dst = -1; /* the last one writes the output */
  x->canon = expr_canonical_build(&x->tree);
  if (!x->canon) {
    rc = terr_set(e, T_ENOMEM, "", -1, "out of memory");
    goto fail;
  }
  free(toks);
  *out = x;
  return 0;
fail:
  free(toks);
  expr_free(x);
  return rc;
}

void expr_free(expr *x) {
  if (!x) return;
  free(x->tree.nodes);
  free(x->prog);
  free(x->consts);
  free(x->canon);
  free(x);
}

int expr_ninputs(const expr *x) { return x->tree.ninputs; }

const char *expr_input_name(const expr *x, int i) {
  return i >= 0 && i < x->tree.ninputs ? x->tree.names[i] : NULL;
}

int expr_input_pos(const expr *x, int i) {
  return i >= 0 && i < x->tree.ninputs ? x->tree.name_pos[i] : -1;
}

int expr_input_index(const expr *x, const char *name) {
  if (!name) return -1;
  for (int i = 0; i < x->tree.ninputs; i++)
    if (strcmp(x->tree.names[i], name) == 0) return i;
  return -1;
}

const char *expr_canonical(const expr *x) { return x->canon; }

int expr_program_length(const expr *x) { return x->nins; }

int expr_bare_input(const expr *x) {
  const expr_ins *in = &x->prog[0];
  return x->nins == 1 && in->op == EO_COPY && in->kind[0] == OPK_IN
             ? in->idx[0]
             : -1;
}
