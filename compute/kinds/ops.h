/* ops.h — names shared by the CPU and GPU implementations of reductions. */
#ifndef TESSEL_KINDS_OPS_H
#define TESSEL_KINDS_OPS_H

typedef enum {
  R_SUM = 0, R_MEAN, R_MIN, R_MAX, R_PROD, R_VAR, R_STD, R_ARGMIN, R_ARGMAX,
  R_NORM, R__COUNT
} reduce_op;

/* "sum" ... ; -1 when unknown. */
int reduce_op_parse(const char *s);
const char *reduce_op_name(reduce_op op);

#endif
