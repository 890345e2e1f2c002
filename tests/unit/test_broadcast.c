/* test_broadcast.c — NumPy broadcasting (expr_broadcast), the merged
 * layout the VM walks (expr_layout_build), and VM results over broadcast
 * inputs against a plain nested-loop oracle, for chunkings that cut blocks
 * and rows anywhere and for mixed float32/float64 inputs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compute/expr/expr.h"
#include "compute/expr/expr_int.h"

static int bc(int n, const int *nd, const int64_t *const *sh, int *ond,
              int64_t *osh, terr *e) {
  const char *names[] = {"params.inputs.a", "params.inputs.b",
                         "params.inputs.c"};
  return expr_broadcast(n, nd, sh, names, ond, osh, e);
}

TEST(test_broadcast_shapes) {
  terr e;
  int ond;
  int64_t osh[T_MAXDIM];
  {
    int64_t a[] = {8, 1, 6, 1}, b[] = {7, 1, 5};
    const int64_t *s[] = {a, b};
    int nd[] = {4, 3};
    CHECK(bc(2, nd, s, &ond, osh, &e) == 0);
    CHECK(ond == 4 && osh[0] == 8 && osh[1] == 7 && osh[2] == 6 &&
          osh[3] == 5);
  }
  {
    int64_t a[] = {3}, b[] = {4};
    const int64_t *s[] = {a, b};
    int nd[] = {1, 1};
    CHECK(bc(2, nd, s, &ond, osh, &e) == T_EINVAL);
    CHECK_STR(e.field, "params.inputs.b");
    CHECK_STR(e.message,
              "params.inputs.b: shapes [3] and [4] do not broadcast");
  }
  {
    int64_t a[] = {2, 1}, b[] = {1}, c[] = {5, 1, 3};
    const int64_t *s[] = {a, b, c};
    int nd[] = {2, 0, 3};
    CHECK(bc(3, nd, s, &ond, osh, &e) == 0);
    CHECK(ond == 3 && osh[0] == 5 && osh[1] == 2 && osh[2] == 3);
  }
  {
    int64_t a[] = {0}, b[] = {1};
    const int64_t *s[] = {a, b};
    int nd[] = {1, 1};
    CHECK(bc(2, nd, s, &ond, osh, &e) == 0);
    CHECK(ond == 1 && osh[0] == 0);
    int64_t c[] = {3};
    s[1] = c;
    CHECK(bc(2, nd, s, &ond, osh, &e) == T_EINVAL);
  }
  {
    int64_t a[] = {4, 3}, b[] = {2, 1, 3}, c[] = {2, 5, 3};
    const int64_t *s[] = {a, b, c};
    int nd[] = {2, 3, 3};
    CHECK(bc(3, nd, s, &ond, osh, &e) == T_EINVAL);
    CHECK_STR(e.field, "params.inputs.c");
    CHECK(strstr(e.message, "shapes [2, 4, 3] and [2, 5, 3]") != NULL);
  }
  {
    const int64_t *s[] = {NULL};
    int nd[] = {0};
    CHECK(bc(1, nd, s, &ond, osh, &e) == 0);
    CHECK(ond == 0);
  }
}

static tarray *arr(tdtype dt, int nd, const int64_t *sh) {
  tarray *a = tarray_new(dt, nd, sh);
  for (int64_t i = 0; i < a->size; i++)
    tarray_set(a, i, (double)((i * 37 + 11) % 101) - 50.0);
  return a;
}

TEST(test_layout_merge) {
  expr_layout l;
  int64_t s2[] = {1000, 1000}, s1[] = {1000};
  tarray *a = arr(T_F64, 2, s2), *b = arr(T_F64, 2, s2), *c = arr(T_F64, 1, s1);
  const tarray *in[] = {a, b};
  expr_layout_build(2, in, 2, s2, &l);
  CHECK(l.ndim == 1 && l.shape[0] == 1000000 && l.contig[0] && l.contig[1]);
  const tarray *in2[] = {a, c};
  expr_layout_build(2, in2, 2, s2, &l);
  CHECK(l.ndim == 2 && l.contig[0] && !l.contig[1]);
  CHECK(l.stride[1][0] == 0 && l.stride[1][1] == 1);
  /* [4, 1] against [4, 5]: stride 1 on rows, 0 along them */
  int64_t s41[] = {4, 1}, s45[] = {4, 5};
  tarray *d = arr(T_F64, 2, s41);
  const tarray *in3[] = {d};
  expr_layout_build(1, in3, 2, s45, &l);
  CHECK(l.ndim == 2 && l.stride[0][0] == 1 && l.stride[0][1] == 0);
  /* size-1 dims vanish: [1, 7, 1] is flat */
  int64_t s171[] = {1, 7, 1};
  tarray *f = arr(T_F64, 3, s171);
  const tarray *in4[] = {f};
  expr_layout_build(1, in4, 3, s171, &l);
  CHECK(l.ndim == 1 && l.contig[0] && !l.scalar[0]);
  tarray_free(a);
  tarray_free(b);
  tarray_free(c);
  tarray_free(d);
  tarray_free(f);
}

/* out[i,j,k] = x[...] * 3 - y[...] + z, checked against nested loops. */
static void check_case(tdtype out_dt, tdtype xdt, int xnd,
                       const int64_t *xsh, int ynd, const int64_t *ysh) {
  expr *ex = NULL;
  terr e;
  CHECK(expr_compile("x * 3 - y + z", &ex, &e) == 0);
  if (!ex) return;
  int64_t zsh[1] = {1};
  tarray *x = arr(xdt, xnd, xsh), *y = arr(T_F64, ynd, ysh),
         *z = arr(T_F32, 1, zsh);
  tarray_set(z, 0, 0.25);
  int nds[] = {xnd, ynd, 1};
  const int64_t *shs[] = {xsh, ysh, zsh};
  int ond;
  int64_t osh[T_MAXDIM];
  CHECK(expr_broadcast(3, nds, shs, NULL, &ond, osh, &e) == 0);
  tarray *out = tarray_new(out_dt, ond, osh);
  const tarray *in[] = {x, y, z};
  void *scratch = aligned_alloc(64, (expr_scratch_size(ex) + 63) & ~63ul);
  /* uneven chunks: 1, 2, 3, ... elements, then big ones */
  int64_t start = 0, step = 1;
  while (start < out->size) {
    int64_t n = step < out->size - start ? step : out->size - start;
    expr_eval(ex, in, out, start, n, scratch);
    start += n;
    step = step < 50 ? step + 1 : step * 3;
  }
  /* oracle: unravel each output index, ravel into each input */
  int64_t idx[T_MAXDIM];
  int bad = 0;
  for (int64_t i = 0; i < out->size; i++) {
    int64_t r = i;
    for (int d = ond - 1; d >= 0; d--) {
      idx[d] = r % osh[d];
      r /= osh[d];
    }
    int64_t xi = 0, yi = 0;
    for (int d = 0; d < xnd; d++) {
      int64_t id = idx[ond - xnd + d];
      xi = xi * xsh[d] + (xsh[d] == 1 ? 0 : id);
    }
    for (int d = 0; d < ynd; d++) {
      int64_t id = idx[ond - ynd + d];
      yi = yi * ysh[d] + (ysh[d] == 1 ? 0 : id);
    }
    double want = tarray_get(x, xi) * 3 - tarray_get(y, yi) + 0.25;
    if (out_dt == T_F32) want = (float)want; /* exact in float here */
    if (tarray_get(out, i) != want && bad++ < 3)
      fprintf(stderr, "element %lld: %g != %g\n", (long long)i,
              tarray_get(out, i), want);
  }
  CHECK(bad == 0);
  free(scratch);
  tarray_free(out);
  tarray_free(x);
  tarray_free(y);
  tarray_free(z);
  expr_free(ex);
}

TEST(test_vm_broadcast) {
  int64_t a[] = {3, 1, 4097}, b[] = {5, 1}, c[] = {4097}, d[] = {2, 1, 3},
          f[] = {1, 2500}, g[] = {300, 1}, h[] = {7, 2, 3, 1},
          k[] = {2, 1, 5};
  for (int o = 0; o < 2; o++)
    for (int xd = 0; xd < 2; xd++) {
      tdtype od = o ? T_F32 : T_F64, xdt = xd ? T_F32 : T_F64;
      check_case(od, xdt, 3, a, 2, b);     /* [3,5,4097] */
      check_case(od, xdt, 1, c, 1, c);     /* same shape, flat */
      check_case(od, xdt, 3, d, 2, b);     /* short rows */
      check_case(od, xdt, 2, f, 2, g);     /* outer product [300, 2500] */
      check_case(od, xdt, 4, h, 3, k);     /* [7, 2, 3, 5] */
    }
}

int main(void) {
  RUN(test_broadcast_shapes);
  RUN(test_layout_merge);
  RUN(test_vm_broadcast);
  return check_summary();
}
