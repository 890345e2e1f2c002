#!/usr/bin/python3
"""peers_pipeline.py — the peers of bench_pipeline.c: what a NumPy user
reaches for to run `x**2 + 2*x + 1` and `-b/a` on a GPU, host array in ->
host array out, 10^8 float64 by default:
  cupy           cp.asarray(ndarray) + compute + cp.asnumpy (ordinary
                 pageable NumPy arrays: the issue's CuPy row);
  cupy pinned    the same from and into page-locked NumPy arrays
                 (cupyx.empty_pinned; asnumpy(out=...)), CuPy at its best;
  torch          torch.from_numpy(...).cuda() + compute + .cpu().numpy().
Medians of REPS after one warm-up, each run synchronised.
Usage: peers_pipeline.py [N=1e8] [REPS=5]
"""
import statistics
import sys
import time

import numpy as np

N = int(float(sys.argv[1])) if len(sys.argv) > 1 else 100_000_000
REPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5

rng = np.random.default_rng(1)
a = rng.uniform(-3, 3, N)
b = rng.uniform(0.5, 4, N)


def med(fn):
    fn()
    t = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


rows = []
try:
    import cupy as cp
    import cupyx

    def cp_x(src, out=None):
        x = cp.asarray(src)
        r = x**2 + 2 * x + 1
        res = cp.asnumpy(r, out=out) if out is not None else cp.asnumpy(r)
        cp.cuda.Stream.null.synchronize()
        return res

    def cp_ba(sa, sb, out=None):
        xa, xb = cp.asarray(sa), cp.asarray(sb)
        r = -xb / xa
        res = cp.asnumpy(r, out=out) if out is not None else cp.asnumpy(r)
        cp.cuda.Stream.null.synchronize()
        return res

    rows.append(("x**2 + 2*x + 1", "cupy asarray+compute+asnumpy (pageable)", med(lambda: cp_x(a))))
    rows.append(("-b/a", "cupy asarray+compute+asnumpy (pageable)", med(lambda: cp_ba(a, b))))
    pa = cupyx.empty_pinned((N,), np.float64)
    pb = cupyx.empty_pinned((N,), np.float64)
    po = cupyx.empty_pinned((N,), np.float64)
    pa[:] = a
    pb[:] = b
    po[:] = 0
    rows.append(("x**2 + 2*x + 1", "cupy, pinned in and out", med(lambda: cp_x(pa, po))))
    rows.append(("-b/a", "cupy, pinned in and out", med(lambda: cp_ba(pa, pb, po))))
    del pa, pb, po
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()
except Exception as ex:  # noqa: BLE001 - a missing peer is a row, not a crash
    rows.append(("-", "cupy: %s" % ex, float("nan")))
try:
    import torch

    def t_x():
        x = torch.from_numpy(a).cuda()
        r = x**2 + 2 * x + 1
        out = r.cpu().numpy()
        return out

    def t_ba():
        xa, xb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        return (-xb / xa).cpu().numpy()

    rows.append(("x**2 + 2*x + 1", "torch from_numpy.cuda+compute+cpu", med(t_x)))
    rows.append(("-b/a", "torch from_numpy.cuda+compute+cpu", med(t_ba)))
except Exception as ex:  # noqa: BLE001
    rows.append(("-", "torch: %s" % ex, float("nan")))

print("## peers (N = %d float64, medians of %d)\n" % (N, REPS))
print("| expression | peer | wall ms |\n|---|---|---:|")
for e, p, ms in rows:
    print("| `%s` | %s | %.1f |" % (e, p, ms))
