/* compute/expr/functab.c — the language's operations and functions: each
 * operation's name, arity and whether it is called as a function
 * (expr_ops), and the lookup of a function's name, NumPy's aliases included
 * (expr_func_lookup). The parser, the compiler, the code generators and the
 * VM all read it; it calls none of them. (It sat in compile.c, which made
 * parse.c and compile.c call each other: issue 24's file circles.)
 */
#include <string.h>

#include "compute/expr/expr_int.h"

const expr_opinfo expr_ops[EO__COUNT] = {
    [EO_NUM] = {"num", 0, 0},     [EO_IN] = {"in", 0, 0},
    [EO_NEG] = {"-", 1, 0},       [EO_NOT] = {"not", 1, 0},
    [EO_ADD] = {"+", 2, 0},       [EO_SUB] = {"-", 2, 0},
    [EO_MUL] = {"*", 2, 0},       [EO_DIV] = {"/", 2, 0},
    [EO_MOD] = {"%", 2, 0},       [EO_FLOORDIV] = {"//", 2, 0},
    [EO_POW] = {"pow", 2, 1},
    [EO_LT] = {"<", 2, 0},        [EO_LE] = {"<=", 2, 0},
    [EO_GT] = {">", 2, 0},        [EO_GE] = {">=", 2, 0},
    [EO_EQ] = {"==", 2, 0},       [EO_NE] = {"!=", 2, 0},
    [EO_AND] = {"and", 2, 0},     [EO_OR] = {"or", 2, 0},
    [EO_ABS] = {"abs", 1, 1},     [EO_SQRT] = {"sqrt", 1, 1},
    [EO_CBRT] = {"cbrt", 1, 1},   [EO_EXP] = {"exp", 1, 1},
    [EO_EXP2] = {"exp2", 1, 1},   [EO_EXPM1] = {"expm1", 1, 1},
    [EO_LOG] = {"log", 1, 1},     [EO_LOG2] = {"log2", 1, 1},
    [EO_LOG10] = {"log10", 1, 1}, [EO_LOG1P] = {"log1p", 1, 1},
    [EO_SIN] = {"sin", 1, 1},     [EO_COS] = {"cos", 1, 1},
    [EO_TAN] = {"tan", 1, 1},     [EO_ASIN] = {"asin", 1, 1},
    [EO_ACOS] = {"acos", 1, 1},   [EO_ATAN] = {"atan", 1, 1},
    [EO_ATAN2] = {"atan2", 2, 1}, [EO_SINH] = {"sinh", 1, 1},
    [EO_COSH] = {"cosh", 1, 1},   [EO_TANH] = {"tanh", 1, 1},
    [EO_ASINH] = {"asinh", 1, 1}, [EO_ACOSH] = {"acosh", 1, 1},
    [EO_ATANH] = {"atanh", 1, 1}, [EO_FLOOR] = {"floor", 1, 1},
    [EO_CEIL] = {"ceil", 1, 1},   [EO_ROUND] = {"round", 1, 1},
    [EO_TRUNC] = {"trunc", 1, 1}, [EO_MIN] = {"min", 2, 1},
    [EO_MAX] = {"max", 2, 1},     [EO_HYPOT] = {"hypot", 2, 1},
    [EO_FMOD] = {"fmod", 2, 1},   [EO_WHERE] = {"where", 3, 1},
    [EO_FMA] = {"fma", 3, 1},     [EO_SIGN] = {"sign", 1, 1},
    [EO_ISNAN] = {"isnan", 1, 1}, [EO_ISINF] = {"isinf", 1, 1},
    [EO_ISFINITE] = {"isfinite", 1, 1}, [EO_SIGNBIT] = {"signbit", 1, 1},
    [EO_COPYSIGN] = {"copysign", 2, 1},
    [EO_NEXTAFTER] = {"nextafter", 2, 1},
    [EO_ONES_LIKE] = {"ones_like", 1, 1},
    [EO_SQUARE] = {"square", 1, 0}, [EO_COPY] = {"copy", 1, 0},
};

/* NumPy's (and numexpr's) names of the same functions. */
static const struct {
  const char *name;
  expr_op op;
} aliases[] = {
    {"arcsin", EO_ASIN},   {"arccos", EO_ACOS},   {"arctan", EO_ATAN},
    {"arctan2", EO_ATAN2}, {"arcsinh", EO_ASINH}, {"arccosh", EO_ACOSH},
    {"arctanh", EO_ATANH}, {"minimum", EO_MIN},   {"maximum", EO_MAX},
    {"absolute", EO_ABS},  {"power", EO_POW},     {"rint", EO_ROUND},
    {"remainder", EO_MOD}, {"floor_divide", EO_FLOORDIV},
    /* the value itself (real numbers only): the parser keeps the argument */
    {"copy", EO_COPY},     {"conj", EO_COPY},
};

int expr_func_lookup(const char *name, int len) {
  for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
    if ((int)strlen(aliases[i].name) == len &&
        !memcmp(aliases[i].name, name, (size_t)len))
      return aliases[i].op;
  for (int op = 0; op < EO__COUNT; op++) {
    const char *n = expr_ops[op].name;
    if (expr_ops[op].is_func && (int)strlen(n) == len && !memcmp(n, name, len))
      return op;
  }
  return -1;
}
