/* expr_int.h — private pieces shared by the expression engine's files.
 *
 * The engine is four steps, one file each:
 *   compute/expr/lex.c      text -> tokens (positions kept for error messages)
 *   compute/expr/parse.c    tokens -> a tree of expr_node in one array (children
 *                   before parents is NOT assumed; links are indices)
 *   compute/expr/compile.c  constant folding, strength reduction (x**2 -> x*x),
 *                   register allocation into a flat program of expr_ins,
 *                   the canonical text and the C emitter
 *   compute/expr/vm.c       runs the program over blocks (compute/expr/vm_tmpl.h holds the
 *                   loops, instantiated for double and float)
 * plus compute/expr/broadcast.c (NumPy broadcasting and the per-input strides the
 * VM gathers with). Nothing here is visible outside compute/expr/.
 */
#ifndef TESSEL_EXPR_EXPR_INT_H
#define TESSEL_EXPR_EXPR_INT_H

#include <stdint.h>

#include "compute/expr/expr.h"

#define EXPR_MAX_DEPTH 64
#define EXPR_MAX_NODES 1024
#define EXPR_MAX_NAME 64    /* bytes of one identifier */
#define EXPR_MAX_REGS 96    /* block registers a program may use */

/* ---- tokens ------------------------------------------------------------ */
typedef enum {
  TK_END = 0, TK_NUM, TK_NAME,
  TK_PLUS, TK_MINUS, TK_STAR, TK_SLASH, TK_DSLASH, TK_PERCENT, TK_POW,
  TK_LT, TK_LE, TK_GT, TK_GE, TK_EQ, TK_NE,
  TK_AND, TK_OR, TK_NOT,
  TK_LPAREN, TK_RPAREN, TK_COMMA
} expr_tok_kind;

typedef struct expr_tok {
  expr_tok_kind kind;
  int pos;        /* 0-based byte offset in the source */
  int len;        /* bytes of source text */
  double num;     /* TK_NUM */
} expr_tok;

/* Tokenise src (NUL-terminated, at most EXPR_MAX_SRC bytes). *toks is a new
 * array (caller frees) ending with TK_END. T_EINVAL with a position. */
int expr_lex(const char *src, expr_tok **toks, int *ntok, terr *e);
const char *expr_tok_text(expr_tok_kind k); /* "'+'", "number", ... */

/* ---- operations -------------------------------------------------------- */
typedef enum {
  EO_NUM = 0, EO_IN,                  /* leaves */
  EO_NEG, EO_NOT,                     /* prefix operators */
  EO_ADD, EO_SUB, EO_MUL, EO_DIV, EO_MOD, EO_FLOORDIV, EO_POW,
  EO_LT, EO_LE, EO_GT, EO_GE, EO_EQ, EO_NE, EO_AND, EO_OR,
  /* functions, in the order of the language reference */
  EO_ABS, EO_SQRT, EO_CBRT, EO_EXP, EO_EXP2, EO_EXPM1, EO_LOG, EO_LOG2,
  EO_LOG10, EO_LOG1P, EO_SIN, EO_COS, EO_TAN, EO_ASIN, EO_ACOS, EO_ATAN,
  EO_ATAN2, EO_SINH, EO_COSH, EO_TANH, EO_ASINH, EO_ACOSH, EO_ATANH,
  EO_FLOOR, EO_CEIL, EO_ROUND, EO_TRUNC, EO_MIN, EO_MAX, EO_HYPOT, EO_FMOD,
  EO_WHERE, EO_FMA, EO_SIGN, EO_ISNAN, EO_ISINF, EO_ISFINITE, EO_SIGNBIT,
  EO_COPYSIGN, EO_NEXTAFTER, EO_ONES_LIKE,
  /* made by the compiler only */
  EO_SQUARE, /* x**2 */
  EO_COPY,   /* dst = a (a bare input or constant as the whole program) */
  EO__COUNT
} expr_op;

typedef struct expr_opinfo {
  const char *name;  /* function name, or the operator's symbol */
  int arity;
  int is_func;       /* callable by name in the language */
} expr_opinfo;
extern const expr_opinfo expr_ops[EO__COUNT]; /* compute/expr/functab.c */
/* The function called `name` (length len), or -1. `pow` maps to EO_POW;
 * NumPy's names (arcsin ... arctanh, minimum, maximum, absolute, power,
 * rint, remainder, floor_divide, ...) map to the op of the C name, so that
 * they fold, print (canonical form) and run as that op; numexpr's copy and
 * conj (the value itself, for real numbers) give EO_COPY, which the parser
 * replaces by the argument. */
int expr_func_lookup(const char *name, int len);

/* Scalar double semantics of every op (the folding and reference form). */
double expr_apply_f64(expr_op op, double a, double b, double c);

/* ---- tree -------------------------------------------------------------- */
typedef struct expr_node {
  uint8_t op;     /* expr_op */
  uint8_t nargs;
  int pos;        /* source offset, for messages */
  int arg[3];     /* node indices */
  double num;     /* EO_NUM */
  int input;      /* EO_IN: input index */
} expr_node;

typedef struct expr_tree {
  expr_node *nodes; /* owned */
  int nnodes, root;
  int ninputs;
  char names[EXPR_MAX_INPUTS][EXPR_MAX_NAME + 1];
  int name_pos[EXPR_MAX_INPUTS];
} expr_tree;

/* Parse a token list into t (t->nodes owned by t afterwards, also on error:
 * free it). */
int expr_parse(const char *src, const expr_tok *toks, int ntok, expr_tree *t,
               terr *e);

/* ---- program ----------------------------------------------------------- */
enum { OPK_REG = 0, OPK_IN, OPK_CONST };

typedef struct expr_ins {
  uint8_t op;
  uint8_t nargs;
  uint8_t kind[3];  /* OPK_* of each operand */
  int16_t idx[3];   /* register, input or constant index */
  int16_t dst;      /* register; the last instruction writes the output */
} expr_ins;

struct expr {
  expr_tree tree;    /* after folding */
  expr_ins *prog;    /* owned */
  int nins;
  int nregs;
  double *consts;    /* owned */
  int nconsts;
  uint32_t used_mask; /* inputs the folded program still reads */
  char *canon;       /* owned */
};

/* ---- broadcasting for the VM ------------------------------------------- */
/* The output shape after merging dimensions that every input walks
 * contiguously (or all broadcasts along), and each input's element strides
 * over it (0 where it broadcasts). */
typedef struct expr_layout {
  int ndim;
  int64_t shape[T_MAXDIM];
  int64_t stride[EXPR_MAX_INPUTS][T_MAXDIM];
  int contig[EXPR_MAX_INPUTS]; /* 1: input i is read at the output index */
  int scalar[EXPR_MAX_INPUTS]; /* 1: input i has one element */
} expr_layout;

void expr_layout_build(int nin, const tarray *const *inputs, int ndim,
                       const int64_t *shape, expr_layout *l);

#endif
