"""Small arrays as JSON lists, both ways: inputs written into a job's body
(`small`, `smalls`) and results read from an answer's ``result.data``
(`inline`, `inlines`).

A JSON number is a float64 and JSON has no NaN or infinity, so only
finite float64 (or integer, or bool) inputs of at most INLINE_MAX values
go inline; float32 and non-finite ones are uploaded as ``.npy``. The server
writes a non-finite result value as null: such a result is not taken from
the list (None: the caller downloads its ``.npy``, which keeps inf and nan
apart).

`smalls` and `inlines` do the same for many values at once, as the batch
calls (batch.py) need for thousands of tiny jobs: the arrays of one shape
and dtype are stacked and checked and converted by one NumPy call each
(~0.4 µs an item against ~3.5 for `small` or `inline` one at a time,
tests/bench/bench_many.py). A result from `inlines` is a view into the
one array made for its group (``a[i, ...]``; no two results share an
element) when that array is at most VIEW_MAX bytes, else a copy of its
row: one result kept never keeps more than VIEW_MAX of the others alive.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

INLINE_MAX = 8192  # elements of an input sent as a JSON list instead of an upload
VIEW_MAX = 64 << 10  # bytes of a group's array whose results may be views of it

_INLINE_KINDS = "biuf"


def small(v: Any) -> Optional[Any]:
    """A small finite float64 (or integer, or bool) input as nested lists
    (a number for a 0-d one), else None: lists go in the job's body, so
    10,000 tiny inputs cost no upload each."""
    if isinstance(v, (dict, str, bytes)) or not isinstance(v, (list, tuple, np.ndarray)):
        return None
    try:
        a = np.asarray(v)
    except (ValueError, TypeError):
        return None
    if a.size > INLINE_MAX or a.dtype.kind not in _INLINE_KINDS or a.dtype == np.float32:
        return None
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        return None
    return a.astype(np.float64).tolist()


def _stackable(v: Any) -> bool:
    return (type(v) is np.ndarray and v.dtype.kind in _INLINE_KINDS
            and v.dtype != np.float32 and v.size <= INLINE_MAX)


def smalls(values: Sequence[Any]) -> List[Optional[Any]]:
    """`small` of each value, in order. ndarrays of one shape and dtype are
    stacked, checked and made lists together; anything else goes through
    `small`."""
    out: List[Optional[Any]] = [None] * len(values)
    groups: Dict[Any, List[int]] = {}
    for i, v in enumerate(values):
        if _stackable(v):
            groups.setdefault((v.dtype.str, v.shape), []).append(i)
        else:
            out[i] = small(v)
    for idx in groups.values():
        k = len(idx)
        s = np.stack([values[i] for i in idx])
        rows = s.astype(np.float64, copy=False).tolist()
        if s.dtype.kind != "f":
            ok = [True] * k
        else:
            ok = np.isfinite(s.reshape(k, s[0].size)).all(axis=1).tolist()
        for i, row, good in zip(idx, rows, ok):
            if good:
                out[i] = row
    return out


def inline(result: Dict[str, Any]) -> Optional[np.ndarray]:
    """The array of an inline result (``result.data``), or None: also when
    it holds a null (a non-finite value)."""
    if "data" not in result:
        return None
    d = result["data"]
    if type(d) is float and not result.get("shape") and result.get("dtype") == "float64":
        # a scalar (a reduce's result): its 0-d array at once, ~20x cheaper
        # than the general path below (a JSON float is never NaN)
        return np.array(d)
    try:
        a = np.array(d, dtype=float if result.get("dtype") != "int64" else np.int64)
    except (TypeError, ValueError):  # a null in an int64 result
        return None
    if a.dtype.kind == "f" and np.isnan(a).any():
        return None
    a = a.astype(result.get("dtype", "float64"), copy=False)
    return a.reshape(result.get("shape", a.shape))


def inlines(results: Sequence[Dict[str, Any]]) -> List[Optional[np.ndarray]]:
    """`inline` of each result, in order. Float results of one shape and
    dtype are read by one np.array call and checked for nulls (NaN after
    it) together; an int64 one, or a group NumPy cannot read whole, goes
    through `inline`."""
    out: List[Optional[np.ndarray]] = [None] * len(results)
    groups: Dict[Any, List[int]] = {}
    for i, r in enumerate(results):
        dt = r.get("dtype", "float64")
        if "data" in r and dt in ("float64", "float32") and isinstance(r.get("shape", []), list):
            groups.setdefault((dt, tuple(r.get("shape", ()))), []).append(i)
        else:
            out[i] = inline(r)
    for (dt, shape), idx in groups.items():
        k = len(idx)
        try:
            a = np.array([results[i]["data"] for i in idx], dtype=np.float64)
        except (TypeError, ValueError):
            a = None
        if a is None or a.shape != (k,) + shape:  # not what the records said
            for i in idx:
                out[i] = inline(results[i])
            continue
        bad = np.isnan(a.reshape(k, a[0].size)).any(axis=1).tolist()
        a = a.astype(dt, copy=False)
        own = a.nbytes > VIEW_MAX  # a kept result must not keep the others
        for j, i in enumerate(idx):
            if not bad[j]:
                out[i] = a[j, ...].copy() if own else a[j, ...]
    return out
