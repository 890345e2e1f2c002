/* compute/expr/vm_tmpl.h — the VM loops, written once and included by compute/expr/vm.c
 * twice: with VT = double (VFSUF empty) and VT = float (VFSUF f), VSFX
 * naming the instantiation. Not a public header.
 *
 * vm_run: for each block of at most VM_BLOCK output elements, point each
 * input operand at its data (in place when it is contiguous and already
 * of type VT, else gathered/converted into its block buffer), then run the
 * program: one tight loop per instruction, specialised for vector and
 * scalar operands so that the compiler vectorises the arithmetic. Every
 * operation is rounded to VT on its own (each loop stores its result; the
 * library is built with -ffp-contract=off besides): a*b + c is two
 * roundings, as in NumPy and on the GPU; fma(a, b, c) is one. The last
 * instruction writes straight into the destination. Registers may alias
 * an operand of the same instruction (the allocator reuses them); every
 * loop reads element i before writing element i, so that is safe.
 */
#define VCAT_(a, b) a##b
#define VCAT(a, b) VCAT_(a, b)
#define VFN(f) VCAT(f, VFSUF)
#define VNAME(f) VCAT(f, VSFX)

typedef struct {
  const VT *v; /* NULL: scalar s */
  VT s;
} VNAME(vopnd);

/* Input i of the layout, output elements [s, s+n), into dst as VT. */
static void VNAME(vm_gather)(const expr_layout *l, int i, const tarray *a,
                             int64_t s, int n, VT *dst) {
  const double *pd = a->dtype == T_F64 ? (const double *)a->data : NULL;
  const float *pf = a->dtype == T_F32 ? (const float *)a->data : NULL;
  if (l->contig[i]) {
    if (pd)
      for (int k = 0; k < n; k++) dst[k] = (VT)pd[s + k];
    else
      for (int k = 0; k < n; k++) dst[k] = (VT)pf[s + k];
    return;
  }
  int nd = l->ndim;
  int64_t idx[T_MAXDIM], off = 0, rem = s;
  for (int d = nd - 1; d >= 0; d--) {
    idx[d] = rem % l->shape[d];
    rem /= l->shape[d];
    off += idx[d] * l->stride[i][d];
  }
  const int64_t *st = l->stride[i];
  int done = 0;
  while (done < n) {
    int64_t run = l->shape[nd - 1] - idx[nd - 1];
    if (run > n - done) run = n - done;
    int64_t sl = st[nd - 1];
    VT *o = dst + done;
    if (sl == 1) {
      if (pd)
        for (int64_t k = 0; k < run; k++) o[k] = (VT)pd[off + k];
      else
        for (int64_t k = 0; k < run; k++) o[k] = (VT)pf[off + k];
    } else if (sl == 0) {
      VT v = pd ? (VT)pd[off] : (VT)pf[off];
      for (int64_t k = 0; k < run; k++) o[k] = v;
    } else {
      for (int64_t k = 0; k < run; k++)
        o[k] = pd ? (VT)pd[off + k * sl] : (VT)pf[off + k * sl];
    }
    done += (int)run;
    off += run * sl;
    idx[nd - 1] += run;
    for (int d = nd - 1; d > 0 && idx[d] == l->shape[d]; d--) {
      idx[d] = 0;
      off -= l->shape[d] * st[d];
      idx[d - 1]++;
      off += st[d - 1];
    }
  }
}

/* Loops with `a`, `b` bound to the element values. */
#define V_UN(EXPR)                                                   \
  do {                                                               \
    if (A.v) {                                                       \
      const VT *a_ = A.v;                                            \
      for (int i = 0; i < n; i++) {                                  \
        VT a = a_[i];                                                \
        d[i] = (EXPR);                                               \
      }                                                              \
    } else {                                                         \
      VT a = A.s, r_ = (EXPR);                                       \
      for (int i = 0; i < n; i++) d[i] = r_;                         \
    }                                                                \
  } while (0)

#define V_BIN(EXPR)                                                  \
  do {                                                               \
    if (A.v && B.v) {                                                \
      const VT *a_ = A.v, *b_ = B.v;                                 \
      for (int i = 0; i < n; i++) {                                  \
        VT a = a_[i], b = b_[i];                                     \
        d[i] = (EXPR);                                               \
      }                                                              \
    } else if (A.v) {                                                \
      const VT *a_ = A.v;                                            \
      VT b = B.s;                                                    \
      for (int i = 0; i < n; i++) {                                  \
        VT a = a_[i];                                                \
        d[i] = (EXPR);                                               \
      }                                                              \
    } else if (B.v) {                                                \
      const VT *b_ = B.v;                                            \
      VT a = A.s;                                                    \
      for (int i = 0; i < n; i++) {                                  \
        VT b = b_[i];                                                \
        d[i] = (EXPR);                                               \
      }                                                              \
    } else {                                                         \
      VT a = A.s, b = B.s, r_ = (EXPR);                              \
      for (int i = 0; i < n; i++) d[i] = r_;                         \
    }                                                                \
  } while (0)

static void VNAME(vm_where)(VNAME(vopnd) C, VNAME(vopnd) A, VNAME(vopnd) B,
                            int n, VT *d) {
  int64_t mc = C.v ? -1 : 0, ma = A.v ? -1 : 0, mb = B.v ? -1 : 0;
  const VT *c_ = C.v ? C.v : &C.s, *a_ = A.v ? A.v : &A.s,
           *b_ = B.v ? B.v : &B.s;
  for (int64_t i = 0; i < n; i++)
    d[i] = c_[i & mc] != 0 ? a_[i & ma] : b_[i & mb];
}

/* fma(a, b, c): a*b + c with one rounding (libm's fma/fmaf: the FMA
 * instruction where the CPU has it, else glibc's exact emulation). */
static void VNAME(vm_fma)(VNAME(vopnd) A, VNAME(vopnd) B, VNAME(vopnd) C,
                          int n, VT *d) {
  int64_t ma = A.v ? -1 : 0, mb = B.v ? -1 : 0, mc = C.v ? -1 : 0;
  const VT *a_ = A.v ? A.v : &A.s, *b_ = B.v ? B.v : &B.s,
           *c_ = C.v ? C.v : &C.s;
  for (int64_t i = 0; i < n; i++)
    d[i] = VFN(fma)(a_[i & ma], b_[i & mb], c_[i & mc]);
}

VM_CLONES static void VNAME(vm_exec)(const expr_ins *in, VNAME(vopnd) A,
                           VNAME(vopnd) B, VNAME(vopnd) C, int n, VT *d) {
#ifdef VM_MVEC
  /* sin/cos/exp/log: libmvec for vector and scalar operands alike, so an
   * element's bits never depend on its block or on being 0-d/broadcast. */
  if (A.v) {
    if (VNAME(vm_mvec)(in->op, A.v, n, d)) return;
  } else {
    VT r_;
    if (VNAME(vm_mvec)(in->op, &A.s, 1, &r_)) {
      for (int i = 0; i < n; i++) d[i] = r_;
      return;
    }
  }
#endif
  switch ((expr_op)in->op) {
    case EO_COPY: V_UN(a); break;
    case EO_NEG: V_UN(-a); break;
    case EO_NOT: V_UN((VT)(a == 0)); break;
    case EO_SQUARE: V_UN(a * a); break;
    case EO_ADD: V_BIN(a + b); break;
    case EO_SUB: V_BIN(a - b); break;
    case EO_MUL: V_BIN(a * b); break;
    case EO_DIV: V_BIN(a / b); break;
    case EO_MOD: V_BIN(VFN(xm_remainder)(a, b)); break;
    case EO_FLOORDIV: V_BIN(VFN(xm_floordiv)(a, b)); break;
    case EO_POW: V_BIN(VFN(pow)(a, b)); break;
    case EO_LT: V_BIN((VT)(a < b)); break;
    case EO_LE: V_BIN((VT)(a <= b)); break;
    case EO_GT: V_BIN((VT)(a > b)); break;
    case EO_GE: V_BIN((VT)(a >= b)); break;
    case EO_EQ: V_BIN((VT)(a == b)); break;
    case EO_NE: V_BIN((VT)(a != b)); break;
    case EO_AND: V_BIN((VT)((a != 0) & (b != 0))); break;
    case EO_OR: V_BIN((VT)((a != 0) | (b != 0))); break;
    case EO_ABS: V_UN(VFN(fabs)(a)); break;
    case EO_SQRT: V_UN(VFN(sqrt)(a)); break;
    case EO_CBRT: V_UN(VFN(cbrt)(a)); break;
    case EO_EXP: V_UN(VFN(exp)(a)); break;
    case EO_EXP2: V_UN(VFN(exp2)(a)); break;
    case EO_EXPM1: V_UN(VFN(expm1)(a)); break;
    case EO_LOG: V_UN(VFN(log)(a)); break;
    case EO_LOG2: V_UN(VFN(log2)(a)); break;
    case EO_LOG10: V_UN(VFN(log10)(a)); break;
    case EO_LOG1P: V_UN(VFN(log1p)(a)); break;
    case EO_SIN: V_UN(VFN(sin)(a)); break;
    case EO_COS: V_UN(VFN(cos)(a)); break;
    case EO_TAN: V_UN(VFN(tan)(a)); break;
    case EO_ASIN: V_UN(VFN(asin)(a)); break;
    case EO_ACOS: V_UN(VFN(acos)(a)); break;
    case EO_ATAN: V_UN(VFN(atan)(a)); break;
    case EO_ATAN2: V_BIN(VFN(atan2)(a, b)); break;
    case EO_SINH: V_UN(VFN(sinh)(a)); break;
    case EO_COSH: V_UN(VFN(cosh)(a)); break;
    case EO_TANH: V_UN(VFN(tanh)(a)); break;
    case EO_ASINH: V_UN(VFN(asinh)(a)); break;
    case EO_ACOSH: V_UN(VFN(acosh)(a)); break;
    case EO_ATANH: V_UN(VFN(atanh)(a)); break;
    case EO_FLOOR: V_UN(VFN(floor)(a)); break;
    case EO_CEIL: V_UN(VFN(ceil)(a)); break;
    case EO_ROUND: V_UN(VFN(rint)(a)); break;
    case EO_TRUNC: V_UN(VFN(trunc)(a)); break;
    case EO_MIN: V_BIN(XM_MIN(a, b)); break;
    case EO_MAX: V_BIN(XM_MAX(a, b)); break;
    case EO_HYPOT: V_BIN(VFN(hypot)(a, b)); break;
    case EO_FMOD: V_BIN(VFN(fmod)(a, b)); break;
    case EO_WHERE: VNAME(vm_where)(A, B, C, n, d); break;
    case EO_FMA: VNAME(vm_fma)(A, B, C, n, d); break;
    case EO_SIGN: V_UN((VT)XM_SIGN(a)); break;
    case EO_ISNAN: V_UN((VT)(a != a)); break;
    case EO_ISINF: V_UN((VT)(VFN(fabs)(a) == (VT)INFINITY)); break;
    case EO_ISFINITE: V_UN((VT)(VFN(fabs)(a) < (VT)INFINITY)); break;
    case EO_SIGNBIT: V_UN((VT)(signbit(a) != 0)); break;
    case EO_COPYSIGN: V_BIN(VFN(copysign)(a, b)); break;
    case EO_NEXTAFTER: V_BIN(VFN(nextafter)(a, b)); break;
    case EO_ONES_LIKE: V_UN(((void)a, (VT)1)); break;
    default: break; /* EO_NUM / EO_IN never reach the program */
  }
}

/* Output elements [start, start+count) of the layout into out[0..count). */
static void VNAME(vm_run)(const expr *x, const tarray *const *inputs,
                          const expr_layout *l, int64_t start, int64_t count,
                          VT *out, void *scratch) {
  const tdtype my = sizeof(VT) == 8 ? T_F64 : T_F32;
  int nin = x->tree.ninputs;
  VT *regs = (VT *)scratch;
  VT *ibuf = regs + (size_t)x->nregs * VM_BLOCK;
  VNAME(vopnd) inop[EXPR_MAX_INPUTS];
  int direct[EXPR_MAX_INPUTS];
  for (int i = 0; i < nin; i++) {
    direct[i] = 0;
    inop[i].v = NULL;
    inop[i].s = 0;
    if (!(x->used_mask & (1u << i))) continue;
    const tarray *a = inputs[i];
    if (l->scalar[i]) {
      inop[i].s = (VT)tarray_get(a, 0);
    } else {
      direct[i] = l->contig[i] && a->dtype == my;
      inop[i].v = ibuf + (size_t)i * VM_BLOCK; /* placeholder, set below */
    }
  }
  for (int64_t done = 0; done < count; done += VM_BLOCK) {
    int n = (int)(count - done < VM_BLOCK ? count - done : VM_BLOCK);
    int64_t s = start + done;
    for (int i = 0; i < nin; i++) {
      if (!inop[i].v) continue;
      if (direct[i]) {
        inop[i].v = (const VT *)inputs[i]->data + s;
      } else {
        VT *buf = ibuf + (size_t)i * VM_BLOCK;
        VNAME(vm_gather)(l, i, inputs[i], s, n, buf);
        inop[i].v = buf;
      }
    }
    for (int k = 0; k < x->nins; k++) {
      const expr_ins *in = &x->prog[k];
      VNAME(vopnd) op[3] = {{NULL, 0}, {NULL, 0}, {NULL, 0}};
      for (int j = 0; j < in->nargs; j++) {
        switch (in->kind[j]) {
          case OPK_REG: op[j].v = regs + (size_t)in->idx[j] * VM_BLOCK; break;
          case OPK_IN: op[j] = inop[in->idx[j]]; break;
          default: op[j].s = (VT)x->consts[in->idx[j]]; break;
        }
      }
      VT *d = in->dst < 0 ? out + done : regs + (size_t)in->dst * VM_BLOCK;
      VNAME(vm_exec)(in, op[0], op[1], op[2], n, d);
    }
  }
}

#undef V_UN
#undef V_BIN
#undef VFN
#undef VNAME
#undef VCAT
#undef VCAT_
