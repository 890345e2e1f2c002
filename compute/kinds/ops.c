/* ops.c — the reduce op names of API.md, shared by the CPU kind
 * (compute/kinds/reduce/reduce.c) and the CUDA kernels. */
#include "compute/kinds/ops.h"

#include <string.h>

static const char *const names[R__COUNT] = {
    [R_SUM] = "sum",       [R_MEAN] = "mean",     [R_MIN] = "min",
    [R_MAX] = "max",       [R_PROD] = "prod",     [R_VAR] = "var",
    [R_STD] = "std",       [R_ARGMIN] = "argmin", [R_ARGMAX] = "argmax",
    [R_NORM] = "norm",
};

int reduce_op_parse(const char *s) {
  if (!s) return -1;
  for (int i = 0; i < R__COUNT; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}

const char *reduce_op_name(reduce_op op) {
  return (unsigned)op < R__COUNT ? names[op] : "?";
}
