/* compute/expr/parse.c — recursive-descent parser of the expression language.
 *
 * Follows the grammar in expr.h, one function per level. The tree lives in
 * one array of expr_node (at most EXPR_MAX_NODES) linked by index, so it is
 * freed with one call. Nesting (parentheses, calls, prefix operators, the
 * right side of **) is counted and capped at EXPR_MAX_DEPTH, which bounds
 * the parser's recursion; every later pass recurses at most as deep as the
 * tree, which the node cap bounds.
 *
 * `//` (floor division) is a `*`-level operator, as in Python; `/ /` is
 * two slashes and an error, as in Python.
 *
 * Names: a name followed by '(' must be a function of the language (or one
 * of NumPy's names for it: expr_func_lookup; copy(x) and conj(x) are x
 * itself and make no node); `pi`
 * and `e` are constants; any other name is an input (at most
 * EXPR_MAX_INPUTS distinct ones, numbered in order of first appearance).
 * A function name used without a call is an error, so that `sin + 1` is
 * not silently an input called "sin".
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/expr/expr_int.h"

typedef struct parser {
  const char *src;
  const expr_tok *tk;
  int i; /* current token */
  expr_tree *t;
  terr *e;
} parser;

static int parse_or(parser *p, int depth, int *out);
static int parse_unary(parser *p, int depth, int *out);

static const expr_tok *cur(parser *p) { return &p->tk[p->i]; }

static int unexpected(parser *p) {
  const expr_tok *k = cur(p);
  if (k->kind == TK_NAME || k->kind == TK_NUM)
    return terr_set(p->e, T_EINVAL, "", k->pos, "unexpected %s '%.*s' at %d",
                    expr_tok_text(k->kind), k->len > 40 ? 40 : k->len,
                    p->src + k->pos, k->pos);
  return terr_set(p->e, T_EINVAL, "", k->pos, "unexpected %s at %d",
                  expr_tok_text(k->kind), k->pos);
}

static int too_deep(parser *p, int depth) {
  if (depth <= EXPR_MAX_DEPTH) return 0;
  return terr_set(p->e, T_EINVAL, "", cur(p)->pos,
                  "expression nested too deeply (max %d) at %d",
                  EXPR_MAX_DEPTH, cur(p)->pos);
}

/* Append a node; its index in *out. */
static int node_new(parser *p, expr_op op, int pos, int nargs, const int *args,
                    int *out) {
  expr_tree *t = p->t;
  if (t->nnodes >= EXPR_MAX_NODES)
    return terr_set(p->e, T_EINVAL, "", pos,
                    "expression too large (max %d nodes) at %d",
                    EXPR_MAX_NODES, pos);
  expr_node *n = &t->nodes[t->nnodes];
  memset(n, 0, sizeof *n);
  n->op = (uint8_t)op;
  n->pos = pos;
  n->nargs = (uint8_t)nargs;
  for (int k = 0; k < nargs; k++) n->arg[k] = args[k];
  n->input = -1;
  *out = t->nnodes++;
  return 0;
}

static int parse_call(parser *p, int depth, int fn, int *out) {
  const expr_tok *name = cur(p);
  int pos = name->pos;
  p->i += 2; /* name '(' */
  int args[3], n = 0, rc;
  if (cur(p)->kind != TK_RPAREN) {
    for (;;) {
      int a = -1;
      if ((rc = parse_or(p, depth + 1, &a))) return rc;
      if (n < 3) args[n] = a;
      n++;
      if (cur(p)->kind == TK_COMMA) {
        p->i++;
        continue;
      }
      break;
    }
  }
  if (cur(p)->kind != TK_RPAREN) {
    if (cur(p)->kind == TK_END)
      return terr_set(p->e, T_EINVAL, "", cur(p)->pos, "expected ')' at %d",
                      cur(p)->pos);
    return unexpected(p);
  }
  int want = expr_ops[fn].arity;
  if (n != want)
    return terr_set(p->e, T_EINVAL, "", pos,
                    "expected %d argument%s to %.*s, got %d at %d", want,
                    want == 1 ? "" : "s", name->len, p->src + name->pos, n,
                    pos);
  p->i++;
  if (fn == EO_COPY) { /* copy(x), conj(x): x itself */
    *out = args[0];
    return 0;
  }
  return node_new(p, (expr_op)fn, pos, n, args, out);
}

static int parse_name(parser *p, int depth, int *out) {
  const expr_tok *k = cur(p);
  const char *s = p->src + k->pos;
  int rc;
  if (p->tk[p->i + 1].kind == TK_LPAREN) {
    int fn = expr_func_lookup(s, k->len);
    if (fn < 0)
      return terr_set(p->e, T_EINVAL, "", k->pos,
                      "unknown function '%.*s' at %d", k->len, s, k->pos);
    return parse_call(p, depth, fn, out);
  }
  if (expr_func_lookup(s, k->len) >= 0)
    return terr_set(p->e, T_EINVAL, "", k->pos + k->len,
                    "function '%.*s' needs arguments: expected '(' at %d",
                    k->len, s, k->pos + k->len);
  if ((k->len == 2 && !memcmp(s, "pi", 2)) || (k->len == 1 && s[0] == 'e')) {
    if ((rc = node_new(p, EO_NUM, k->pos, 0, NULL, out))) return rc;
    p->t->nodes[*out].num = k->len == 2 ? M_PI : M_E;
    p->i++;
    return 0;
  }
  expr_tree *t = p->t;
  int in = -1;
  for (int j = 0; j < t->ninputs; j++)
    if ((int)strlen(t->names[j]) == k->len && !memcmp(t->names[j], s, k->len))
      in = j;
  if (in < 0) {
    if (t->ninputs >= EXPR_MAX_INPUTS)
      return terr_set(p->e, T_EINVAL, "", k->pos,
                      "too many inputs (max %d) at %d", EXPR_MAX_INPUTS,
                      k->pos);
    in = t->ninputs++;
    memcpy(t->names[in], s, (size_t)k->len); /* len <= EXPR_MAX_NAME */
    t->names[in][k->len] = 0;
    t->name_pos[in] = k->pos;
  }
  if ((rc = node_new(p, EO_IN, k->pos, 0, NULL, out))) return rc;
  t->nodes[*out].input = in;
  p->i++;
  return 0;
}

static int parse_atom(parser *p, int depth, int *out) {
  const expr_tok *k = cur(p);
  int rc;
  switch (k->kind) {
    case TK_NUM:
      if ((rc = node_new(p, EO_NUM, k->pos, 0, NULL, out))) return rc;
      p->t->nodes[*out].num = k->num;
      p->i++;
      return 0;
    case TK_NAME:
      return parse_name(p, depth, out);
    case TK_LPAREN: {
      p->i++;
      if ((rc = parse_or(p, depth + 1, out))) return rc;
      if (cur(p)->kind != TK_RPAREN) {
        if (cur(p)->kind == TK_END)
          return terr_set(p->e, T_EINVAL, "", cur(p)->pos,
                          "expected ')' at %d", cur(p)->pos);
        return unexpected(p);
      }
      p->i++;
      return 0;
    }
    case TK_END:
      if (p->i == 0)
        return terr_set(p->e, T_EINVAL, "", k->pos, "empty expression at %d",
                        k->pos);
      return terr_set(p->e, T_EINVAL, "", k->pos,
                      "unexpected end of expression at %d", k->pos);
    default:
      return unexpected(p);
  }
}

static int parse_power(parser *p, int depth, int *out) {
  int rc, a = -1, b = -1;
  if ((rc = parse_atom(p, depth, &a))) return rc;
  if (cur(p)->kind != TK_POW) {
    *out = a;
    return 0;
  }
  int pos = cur(p)->pos;
  p->i++;
  if ((rc = too_deep(p, depth + 1))) return rc;
  if ((rc = parse_unary(p, depth + 1, &b))) return rc;
  int args[2] = {a, b};
  return node_new(p, EO_POW, pos, 2, args, out);
}

static int parse_unary(parser *p, int depth, int *out) {
  expr_tok_kind k = cur(p)->kind;
  if (k != TK_MINUS && k != TK_PLUS) return parse_power(p, depth, out);
  int pos = cur(p)->pos, rc, a = -1;
  p->i++;
  if ((rc = too_deep(p, depth + 1))) return rc;
  if ((rc = parse_unary(p, depth + 1, &a))) return rc;
  if (k == TK_PLUS) {
    *out = a;
    return 0;
  }
  return node_new(p, EO_NEG, pos, 1, &a, out);
}

/* One left-associative binary level: operand parser `sub`, and a map from
 * token kinds to ops (EO__COUNT where the token does not belong here). */
typedef int (*level_fn)(parser *, int, int *);

static expr_op binop_of(expr_tok_kind k, int level) {
  switch (level) {
    case 0: return k == TK_STAR ? EO_MUL : k == TK_SLASH ? EO_DIV
                 : k == TK_DSLASH ? EO_FLOORDIV
                 : k == TK_PERCENT ? EO_MOD : EO__COUNT;
    case 1: return k == TK_PLUS ? EO_ADD : k == TK_MINUS ? EO_SUB : EO__COUNT;
    case 2: return k == TK_AND ? EO_AND : EO__COUNT;
    default: return k == TK_OR ? EO_OR : EO__COUNT;
  }
}

static int parse_left(parser *p, int depth, int level, level_fn sub,
                      int *out) {
  int rc, a = -1, b = -1;
  if ((rc = sub(p, depth, &a))) return rc;
  for (;;) {
    expr_op op = binop_of(cur(p)->kind, level);
    if (op == EO__COUNT) break;
    int pos = cur(p)->pos;
    p->i++;
    if ((rc = sub(p, depth, &b))) return rc;
    int args[2] = {a, b};
    if ((rc = node_new(p, op, pos, 2, args, &a))) return rc;
  }
  *out = a;
  return 0;
}

static int parse_term(parser *p, int depth, int *out) {
  return parse_left(p, depth, 0, parse_unary, out);
}
static int parse_sum(parser *p, int depth, int *out) {
  return parse_left(p, depth, 1, parse_term, out);
}

static int parse_cmp(parser *p, int depth, int *out) {
  int rc, a = -1, b = -1;
  if ((rc = parse_sum(p, depth, &a))) return rc;
  expr_op op;
  switch (cur(p)->kind) {
    case TK_LT: op = EO_LT; break;
    case TK_LE: op = EO_LE; break;
    case TK_GT: op = EO_GT; break;
    case TK_GE: op = EO_GE; break;
    case TK_EQ: op = EO_EQ; break;
    case TK_NE: op = EO_NE; break;
    default: *out = a; return 0;
  }
  int pos = cur(p)->pos;
  p->i++;
  if ((rc = parse_sum(p, depth, &b))) return rc;
  int args[2] = {a, b};
  return node_new(p, op, pos, 2, args, out);
}

static int parse_not(parser *p, int depth, int *out) {
  if (cur(p)->kind != TK_NOT) return parse_cmp(p, depth, out);
  int pos = cur(p)->pos, rc, a = -1;
  p->i++;
  if ((rc = too_deep(p, depth + 1))) return rc;
  if ((rc = parse_not(p, depth + 1, &a))) return rc;
  return node_new(p, EO_NOT, pos, 1, &a, out);
}

static int parse_and(parser *p, int depth, int *out) {
  return parse_left(p, depth, 2, parse_not, out);
}

static int parse_or(parser *p, int depth, int *out) {
  int rc;
  if ((rc = too_deep(p, depth))) return rc;
  return parse_left(p, depth, 3, parse_and, out);
}

int expr_parse(const char *src, const expr_tok *toks, int ntok, expr_tree *t,
               terr *e) {
  (void)ntok; /* the list ends with TK_END; the parser never reads past it */
  memset(t, 0, sizeof *t);
  /* not zeroed: node_new clears each node it hands out, and nothing reads
   * past nnodes (a calloc of the whole table was a tiny job's largest
   * memset at submit) */
  t->nodes = malloc(EXPR_MAX_NODES * sizeof *t->nodes);
  if (!t->nodes) return terr_set(e, T_ENOMEM, "", -1, "out of memory");
  parser p = {.src = src, .tk = toks, .i = 0, .t = t, .e = e};
  int rc = parse_or(&p, 0, &t->root);
  if (rc) return rc;
  if (cur(&p)->kind != TK_END) return unexpected(&p);
  return 0;
}
