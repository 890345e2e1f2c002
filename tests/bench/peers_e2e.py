#!/usr/bin/python3
"""peers_e2e.py — the peers of bench_e2e.c: NumPy, CuPy and PyTorch doing
what a bench_e2e case asks of Tessel, on the very same input bytes, with
their results checked against Tessel's.

Usage: peers_e2e.py CASE DIR REPS
  CASE: map1 (x**2 + 2*x + 1), map2 (-b/a), reduce (sum of x**2 along
  axis 1), matmul (W@X + b), chain (2*x + 1, then x*x, then x - 1), or
  pcie (the pinned-memory ceiling: no DIR files needed).
  DIR holds the inputs bench_e2e uploaded (in_<name>.npy: x; a, b; W, X,
  bias) and Tessel's result of the same inputs (tessel.npy).
Prints one line "RESULT <numpy_s> <cupy_s> <torch_s> <check> <max_err>"
(-1 where a peer is not importable or sees no GPU; check is ok, MISMATCH or
none; max_err is the largest |peer - tessel| over max |tessel|, of all the
peers that ran). For pcie: "RESULT <h2d_s> <d2h_s> <bytes>".

Each figure is the median of REPS timings after one warm-up.
- NumPy: the expression as NumPy writes it, on arrays it already holds;
  the last operation writes into a reused output array (out=), as the C
  client downloads into a reused buffer.
- CuPy: cp.asarray(inputs) + compute + .get(out=reused host array)
  (asnumpy into a buffer the user already holds), synchronised.
- PyTorch: torch.from_numpy(inputs).to('cuda') + compute +
  out.copy_(result) into a reused CPU tensor, synchronised.
Same dtype (float64) and the same expression for all. Every peer's result
is compared with Tessel's: |peer - tessel| <= atol + rtol*|tessel| with
the case's TOL below; a mismatch is printed loudly on stderr and the check
column says MISMATCH.
"""
import statistics
import sys
import time

import numpy as np

CASE, DIR, REPS = sys.argv[1], sys.argv[2], int(sys.argv[3])

# (rtol, atol as a fraction of max|tessel|): elementwise maps are the same
# float64 operations (a fused multiply-add may differ by an ulp or two);
# the reduce sums in another order (Tessel: compensated; NumPy: pairwise);
# matmul's BLAS order of additions is its own.
TOL = {"map1": (1e-12, 0), "map2": (1e-12, 0), "chain": (1e-12, 0),
       "reduce": (1e-10, 1e-14), "matmul": (1e-9, 1e-12)}


def med(f):
    f()
    t = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        f()
        t.append(time.perf_counter() - t0)
    return statistics.median(t)


def load(name):
    return np.load(f"{DIR}/in_{name}.npy")


def pcie():
    try:
        import cupy as cp
        import cupyx
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no GPU")
    except Exception:
        print("RESULT -1 -1 0")
        return
    n = 800_000_000 // 8
    h = cupyx.empty_pinned((n,), dtype=np.float64)
    h[:] = 1.0
    d = cp.empty(n, dtype=np.float64)
    s = cp.cuda.Stream.null

    def h2d():
        d.set(h)
        s.synchronize()

    def d2h():
        d.get(out=h)
        s.synchronize()

    print(f"RESULT {med(h2d)} {med(d2h)} {n * 8}")


def numpy_fn(ins, out):
    x = ins.get("x")
    if CASE == "map1":
        return lambda: np.add(x**2 + 2 * x, 1, out=out)
    if CASE == "map2":
        a, b = ins["a"], ins["b"]
        return lambda: np.divide(-b, a, out=out)
    if CASE == "reduce":
        return lambda: np.sum(x**2, axis=1, out=out)
    if CASE == "matmul":
        W, X, bias = ins["W"], ins["X"], ins["bias"]
        return lambda: np.add(W @ X, bias, out=out)
    if CASE == "chain":
        def f():
            y = 2 * x + 1
            y = y * y
            return np.subtract(y, 1, out=out)
        return f
    raise SystemExit(f"peers_e2e.py: unknown case {CASE}")


def compute(xp, ins):
    """The case's expression in CuPy or PyTorch (both take these operators)."""
    x = ins.get("x")
    if CASE == "map1":
        return x**2 + 2 * x + 1
    if CASE == "map2":
        return -ins["b"] / ins["a"]
    if CASE == "reduce":
        return (x**2).sum(axis=1) if xp == "cupy" else (x**2).sum(dim=1)
    if CASE == "matmul":
        return ins["W"] @ ins["X"] + ins["bias"]
    if CASE == "chain":
        y = 2 * x + 1
        y = y * y
        return y - 1


def check(name, got, ref, bad):
    rtol, afrac = TOL[CASE]
    atol = afrac * float(np.max(np.abs(ref))) if ref.size else 0.0
    if got.shape != ref.shape:
        print(f"MISMATCH: {CASE} {name}: shape {got.shape}, Tessel {ref.shape}",
              file=sys.stderr)
        bad.append(np.inf)
        MISMATCHES.append(name)
        return
    err = np.abs(got - ref)
    lim = atol + rtol * np.abs(ref)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    bad.append(float(np.max(err)) / scale if scale > 0 else float(np.max(err, initial=0)))
    if not np.all(err <= lim):
        i = int(np.argmax(err - lim))
        print(f"MISMATCH: {CASE} {name} vs Tessel at flat index {i}: "
              f"{got.flat[i]!r} against {ref.flat[i]!r} (rtol {rtol}, atol {atol:g})",
              file=sys.stderr)
        MISMATCHES.append(name)


MISMATCHES = []


def main():
    if CASE == "pcie":
        pcie()
        return
    names = {"map1": ["x"], "map2": ["a", "b"], "reduce": ["x"],
             "matmul": ["W", "X", "bias"], "chain": ["x"]}[CASE]
    ins = {n: load(n) for n in names}
    try:
        ref = np.load(f"{DIR}/tessel.npy")
    except OSError:
        ref = None
    out = np.empty(ref.shape, dtype=np.float64) if ref is not None else None
    f = numpy_fn(ins, out)
    if out is None:  # no Tessel result to check against: time only
        out = np.empty_like(f())
    r = [med(f), -1.0, -1.0]
    errs = []
    if ref is not None:
        check("numpy", f(), ref, errs)
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() > 0:
            hout = np.empty_like(out)

            def c():
                g = {k: cp.asarray(v) for k, v in ins.items()}
                y = compute("cupy", g)
                try:
                    y.get(out=hout)
                except TypeError:  # an old CuPy without out=
                    hout[...] = cp.asnumpy(y)
                cp.cuda.Stream.null.synchronize()
            r[1] = med(c)
            if ref is not None:
                check("cupy", hout, ref, errs)
    except ImportError:
        pass
    except Exception as e:  # a peer that fails is said, not hidden
        print(f"peers_e2e.py: cupy {CASE}: {e}", file=sys.stderr)
    try:
        import torch
        if torch.cuda.is_available():
            tins = {k: torch.from_numpy(v) for k, v in ins.items()}
            tout = torch.from_numpy(np.empty_like(out))

            def t():
                g = {k: v.to("cuda") for k, v in tins.items()}
                tout.copy_(compute("torch", g))
                torch.cuda.synchronize()
            r[2] = med(t)
            if ref is not None:
                check("torch", tout.numpy(), ref, errs)
    except ImportError:
        pass
    except Exception as e:
        print(f"peers_e2e.py: torch {CASE}: {e}", file=sys.stderr)
    if ref is None:
        verdict, worst = "none", 0.0
    else:
        worst = max(errs) if errs else 0.0
        verdict = "MISMATCH" if MISMATCHES else "ok"
    print(f"RESULT {r[0]} {r[1]} {r[2]} {verdict} {worst:.3g}")


main()
