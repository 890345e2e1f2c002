/* compute/expr/emit.c — text forms of a compiled (folded) expression tree.
 *
 *   canonical  fully parenthesised, numbers as %.17g, inputs in0..inN:
 *              "((in0*in0)+1)". Equal for sources that parse and fold to
 *              the same tree; the GPU kernel cache keys on it.
 *   C / CUDA   expr_emit_c: one expression over v0..v{n-1} of a given
 *              type. + - * / and unary minus are C operators; comparisons
 *              and logic are C operators cast back to the type (1 / 0);
 *              every function of the language is called as
 *              <prefix><name>(...) (e.g. tx_sin, tx_atan2, tx_where,
 *              tx_round, tx_isnan), `%` as <prefix>remainder(a,b), `//`
 *              as <prefix>floordiv(a,b) and `**` as <prefix>pow(a,b);
 *              constants are ((type)<%.17g>), infinities
 *              and NaN from folding as ((type)(1.0/0.0)) etc.
 * Both are built from the tree only, never from the source text. Both
 * writers are bounded: a too-small buffer is reported, never overrun.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/expr/expr_int.h"
#include "util/util.h"

typedef struct wbuf {
  char *buf;
  size_t len, off;
  int over;
} wbuf;

static void w_put(wbuf *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void w_put(wbuf *w, const char *fmt, ...) {
  if (w->over) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(w->buf + w->off, w->len - w->off, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= w->len - w->off) {
    w->over = 1;
    return;
  }
  w->off += (size_t)n;
}

/* A string as it is (w_put's "%s" without printf: the canonical text of a
 * tiny job's expression was five vsnprintf calls). */
static void w_str(wbuf *w, const char *s) {
  if (w->over) return;
  size_t n = strlen(s);
  if (n >= w->len - w->off) {
    w->over = 1;
    return;
  }
  memcpy(w->buf + w->off, s, n + 1);
  w->off += n;
}

/* A number as "%.17g" writes it; an integer of up to 15 digits (which
 * %.17g writes as its digits) without printf. */
static void w_num(wbuf *w, double v) {
  if (v == floor(v) && fabs(v) < 1e15 && !(v == 0 && signbit(v))) {
    char d[24];
    size_t n = t_fmt_int(d, (long long)v);
    d[n] = 0;
    w_str(w, d);
  } else {
    w_put(w, "%.17g", v);
  }
}

static int is_cmp(expr_op op) { return op >= EO_LT && op <= EO_NE; }

/* ---- canonical --------------------------------------------------------- */
static void canon(wbuf *w, const expr_tree *t, int id) {
  const expr_node *n = &t->nodes[id];
  expr_op op = (expr_op)n->op;
  const char *name = expr_ops[op].name;
  if (op == EO_NUM) {
    w_num(w, n->num);
  } else if (op == EO_IN) {
    w_str(w, "in");
    w_num(w, n->input);
  } else if (op == EO_NEG) {
    w_str(w, "(-");
    canon(w, t, n->arg[0]);
    w_str(w, ")");
  } else if (op == EO_NOT) {
    w_str(w, "(not ");
    canon(w, t, n->arg[0]);
    w_str(w, ")");
  } else if (!expr_ops[op].is_func) { /* binary operator */
    w_str(w, "(");
    canon(w, t, n->arg[0]);
    if (op == EO_AND || op == EO_OR) w_str(w, " ");
    w_str(w, name);
    if (op == EO_AND || op == EO_OR) w_str(w, " ");
    canon(w, t, n->arg[1]);
    w_str(w, ")");
  } else {
    w_str(w, name);
    w_str(w, "(");
    for (int k = 0; k < n->nargs; k++) {
      if (k) w_str(w, ",");
      canon(w, t, n->arg[k]);
    }
    w_str(w, ")");
  }
}

/* A %.17g number is at most 24 bytes; every other node adds at most a
 * name of 9 ("nextafter") and 4 punctuation bytes, so 40 bytes a node
 * always suffice. */
char *expr_canonical_build(const expr_tree *t) {
  size_t len = (size_t)t->nnodes * 40 + 1;
  char *buf = malloc(len);
  if (!buf) return NULL;
  wbuf w = {buf, len, 0, 0};
  canon(&w, t, t->root);
  if (w.over) { /* cannot happen with the bound above */
    free(buf);
    return NULL;
  }
  return buf;
}

/* ---- C ----------------------------------------------------------------- */
typedef struct emitter {
  wbuf w;
  const char *ct, *fp;
} emitter;

static void emit_num(emitter *m, double v) {
  if (isnan(v)) {
    w_put(&m->w, "((%s)(0.0/0.0))", m->ct);
  } else if (isinf(v)) {
    w_put(&m->w, "((%s)(%s1.0/0.0))", m->ct, v < 0 ? "-" : "");
  } else {
    char num[40];
    snprintf(num, sizeof num, "%.17g", v);
    /* make it a floating literal: "2" -> "2.0" */
    const char *dot = strpbrk(num, ".eE");
    w_put(&m->w, "((%s)%s%s)", m->ct, num, dot ? "" : ".0");
  }
}

static void emit(emitter *m, const expr_tree *t, int id) {
  const expr_node *n = &t->nodes[id];
  expr_op op = (expr_op)n->op;
  wbuf *w = &m->w;
  if (w->over) return;
  switch (op) {
    case EO_NUM: emit_num(m, n->num); return;
    case EO_IN: w_put(w, "v%d", n->input); return;
    case EO_NEG:
      w_put(w, "(-");
      emit(m, t, n->arg[0]);
      w_put(w, ")");
      return;
    case EO_NOT:
      w_put(w, "((%s)(", m->ct);
      emit(m, t, n->arg[0]);
      w_put(w, " == 0))");
      return;
    case EO_AND:
    case EO_OR:
      w_put(w, "((%s)((", m->ct);
      emit(m, t, n->arg[0]);
      w_put(w, ") != 0 %s (", op == EO_AND ? "&&" : "||");
      emit(m, t, n->arg[1]);
      w_put(w, ") != 0))");
      return;
    case EO_ADD:
    case EO_SUB:
    case EO_MUL:
    case EO_DIV:
      w_put(w, "(");
      emit(m, t, n->arg[0]);
      w_put(w, " %s ", expr_ops[op].name);
      emit(m, t, n->arg[1]);
      w_put(w, ")");
      return;
    default:
      break;
  }
  if (is_cmp(op)) {
    w_put(w, "((%s)(", m->ct);
    emit(m, t, n->arg[0]);
    w_put(w, " %s ", expr_ops[op].name);
    emit(m, t, n->arg[1]);
    w_put(w, "))");
    return;
  }
  const char *name = op == EO_MOD        ? "remainder"
                     : op == EO_FLOORDIV ? "floordiv"
                                         : expr_ops[op].name;
  w_put(w, "%s%s(", m->fp, name);
  for (int k = 0; k < n->nargs; k++) {
    if (k) w_put(w, ", ");
    emit(m, t, n->arg[k]);
  }
  w_put(w, ")");
}

int expr_emit_c(const expr *x, const char *ctype, const char *fn_prefix,
                char *buf, size_t len) {
  if (!x || !buf || len == 0 || !ctype || !fn_prefix) return -1;
  emitter m = {{buf, len, 0, 0}, ctype, fn_prefix};
  emit(&m, &x->tree, x->tree.root);
  if (m.w.over) {
    buf[0] = 0;
    return -1;
  }
  return (int)m.w.off;
}
