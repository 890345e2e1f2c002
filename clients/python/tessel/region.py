"""tessel.Region: a registered shared-memory region (POST /v1/regions), and
the client's pool of them.

A Region is a file in the client's same-host directory, sized, mapped here
(mmap, shared) and registered with the server, which maps the same file
once (API.md "Regions"). A job then reads its inputs from the region in
place and writes its result into it: no byte goes through HTTP or through a
file written per job. ``Region.ndarray`` is a NumPy view on this process's
own mapping, so what the server wrote is there as soon as the job ended.

The pool (``_Pool``, one per Client) is what ``Client.empty`` and the
per-kind calls use without being asked: blocks carved from regions it
registers as it needs them (64 MiB at least, or the block's size), first
fit, each block's start a multiple of 64 bytes. A block lives as long as
the ndarray made from it (and anything viewing that array): a finalizer
gives it back. An input block of a call is kept until its job ended, so a
block is never reused while a job may still read or write it.

What crosses no wire: an ndarray that lies in one of the client's regions
(``c.empty``, ``Region.ndarray``, a result returned from a region) is sent
as ``{"region": id, "offset", "dtype", "shape"}``; an ordinary ndarray is
first copied into a pool block by several threads (``np.copyto`` on slices
in a thread pool: NumPy lets go of the GIL while it copies), which beats
writing it to a file and having the server map it. The result's block is
sized before the submit from the inputs' shapes (``_out_bytes``: an upper
bound per kind); where that cannot be known (a radius query, an input
given as a raw API value) the result goes the way it went before.

Regions are the server's until it stops: a restarted server has none, and
the client registers anew when a call finds its region gone.

Threads: a Region may be read and written from any thread; the pool's
bookkeeping takes one lock.
"""
from __future__ import annotations

import concurrent.futures
import mmap
import os
import threading
import uuid
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

ALIGN = 64
POOL_MIN = 64 << 20          # a pool region's least size
COPY_CHUNK = 8 << 20         # bytes per thread's slice when copying in
COPY_THREADS = min(8, os.cpu_count() or 1)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Region:
    """A registered shared-memory region: a file in the same-host directory,
    mapped here and by the server.

    Made by `Client.region`, never directly. Closing it (or leaving its
    ``with`` block) deletes it on the server and removes its file; arrays
    made from it stay readable (the mapping outlives the file's name).

    Attributes
    ----------
    id : str
        The server's id (``r_...``).
    path : str
        The file.
    nbytes : int
        Its size, as registered.

    Examples
    --------
    >>> with sc.region(1 << 20) as r:  # sc: a client with a same-host directory
    ...     x = r.ndarray((4,), offset=0)
    ...     x[:] = [1.0, 2.0, 3.0, 4.0]
    ...     float(sc.reduce("sum", x=x))
    10.0
    """

    def __init__(self, client: Any, nbytes: int, owned_file: bool = True) -> None:
        d = client.local_dir()
        if d is None:
            raise RuntimeError("no same-host directory: regions need one (Client.local_dir)")
        self.client = client
        self.nbytes = int(nbytes)
        if self.nbytes <= 0:
            raise ValueError("a region needs at least one byte")
        self.path = os.path.join(d, f"tessel-region-{os.getpid()}-{uuid.uuid4().hex}.bin")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, self.nbytes)
            self._mm = mmap.mmap(fd, self.nbytes, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            os.unlink(self.path)
            raise
        os.close(fd)
        self._bytes = np.frombuffer(self._mm, np.uint8)
        self.base = self._bytes.__array_interface__["data"][0]
        try:
            _, info = client._t.json("POST", "/v1/regions", {"path": self.path})
        except BaseException:
            os.unlink(self.path)
            raise
        self.id = info["id"]
        self.info = info
        self._closed = False
        client._regions[self.id] = weakref.ref(self)
        self._fin = weakref.finalize(self, _drop, client._t, self.id, self.path)

    def __repr__(self) -> str:
        return f"<tessel.Region {self.id} {self.nbytes} bytes>"

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def ndarray(self, shape: Union[int, Sequence[int]], dtype: Any = np.float64,
                offset: int = 0) -> np.ndarray:
        """A NumPy view of the region's bytes at offset.

        Parameters
        ----------
        shape : int or tuple of int
        dtype : data-type, optional
            float64 (default) or float32 to be passed to a job as it is.
        offset : int, optional
            Bytes from the region's start; a multiple of the item size.

        Returns
        -------
        ndarray
            Writable; it reads what a job wrote there.

        Raises
        ------
        ValueError
            The range passes the region's end, or the offset is not aligned.

        Examples
        --------
        >>> r = sc.region(4096)
        >>> r.ndarray((2, 3), offset=64).shape
        (2, 3)
        >>> r.close()
        """
        dt = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        n = int(np.prod(shape, dtype=np.int64))
        if offset < 0 or offset % dt.itemsize or offset + n * dt.itemsize > self.nbytes:
            raise ValueError(f"{n} {dt} at offset {offset} do not fit in {self.nbytes} bytes "
                             "(or the offset is not a multiple of the item size)")
        return np.frombuffer(self._mm, dt, n, offset).reshape(shape)

    def close(self) -> None:
        """Delete the region on the server and remove its file.

        Arrays made from it stay readable here. A region a queued or
        running job uses is refused by the server (Conflict).

        Examples
        --------
        >>> sc.region(64).close()
        """
        if self._closed:
            return
        self.client._t.request("DELETE", f"/v1/regions/{self.id}")
        self._closed = True
        self.client._regions.pop(self.id, None)
        self._fin.detach()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def _offset_of(self, a: np.ndarray) -> Optional[int]:
        """a's byte offset in this region when it lies wholly inside, else None."""
        addr = a.__array_interface__["data"][0]
        if self.base <= addr and addr + a.nbytes <= self.base + self.nbytes:
            return addr - self.base
        return None


def _drop(t: Any, rid: str, path: str) -> None:
    """A Region garbage-collected unclosed: deleted as close() would."""
    try:
        t.request("DELETE", f"/v1/regions/{rid}")
    except Exception:
        pass
    try:
        os.unlink(path)
    except OSError:
        pass


class _Pool:
    """Blocks carved from regions this client registers as it needs them."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.regions: List[Region] = []
        self.used: Dict[str, List[Tuple[int, int]]] = {}  # region id -> sorted (start, end)

    def _fit(self, r: Region, n: int) -> Optional[int]:
        at = 0
        for s, e in self.used[r.id]:
            if s - at >= n:
                return at
            at = _align(e)
        return at if r.nbytes - at >= n else None

    def block(self, nbytes: int) -> Tuple[Region, int, np.ndarray]:
        """A block of nbytes (region, offset, its uint8 array); the block is
        given back when that array (and every view of it) is gone."""
        n = max(_align(int(nbytes)), ALIGN)
        r, at = None, 0
        with self.lock:
            for cand in self.regions:
                fit = self._fit(cand, n)
                if fit is not None:
                    r, at = cand, fit
                    self._take(r, at, n)
                    break
        if r is None:  # a new region, registered outside the lock
            r = Region(self.client, max(POOL_MIN, n))
            with self.lock:
                self.regions.append(r)
                self.used[r.id] = []
                self._take(r, 0, n)
        # Over a memoryview, not a slice of the region's array: NumPy would
        # make every view of a slice a view of the whole region, and the
        # block would be given back while a view of it lives.
        arr = np.frombuffer(memoryview(r._mm)[at:at + n], np.uint8)
        weakref.finalize(arr, self._give, r.id, at)
        return r, at, arr

    def _take(self, r: Region, at: int, n: int) -> None:
        u = self.used[r.id]
        u.append((at, at + n))
        u.sort()

    def _give(self, rid: str, at: int) -> None:
        with self.lock:
            u = self.used.get(rid)
            if u is not None:
                self.used[rid] = [x for x in u if x[0] != at]

    def close(self) -> None:
        with self.lock:
            regions, self.regions, self.used = self.regions, [], {}
        for r in regions:
            try:
                r.close()
            except Exception:
                pass


def view(block: np.ndarray, dtype: Any, shape: Sequence[int], skip: int = 0) -> np.ndarray:
    """dtype/shape over block's bytes from skip on (the block stays alive)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    return block[skip:skip + n * dt.itemsize].view(dt).reshape(tuple(shape))


def copy_in(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src by slices on several threads (NumPy copies without
    the GIL); one thread for small arrays."""
    d, s = dst.reshape(-1), src.reshape(-1)
    step = max(COPY_CHUNK // max(src.itemsize, 1), 1)
    if s.size <= step or COPY_THREADS == 1:
        np.copyto(d, s)
        return
    with concurrent.futures.ThreadPoolExecutor(COPY_THREADS) as ex:
        list(ex.map(lambda i: np.copyto(d[i:i + step], s[i:i + step]),
                    range(0, s.size, step)))


def _shape_of(v: Any) -> Optional[Tuple[int, ...]]:
    """An input's shape as the client knows it; None for a raw API value
    or a job whose result it has not seen."""
    if isinstance(v, np.ndarray):
        return v.shape
    if isinstance(v, (bool, int, float, list, tuple)):
        try:
            return np.shape(v)
        except Exception:
            return None
    info = getattr(v, "info", None)
    if isinstance(info, dict) and "status" in info:  # a Job: its result's shape
        r = info.get("result") or {}
        return tuple(r["shape"]) if info.get("status") == "succeeded" and \
            not r.get("parts") and "shape" in r else None
    shp = getattr(v, "shape", None)  # an Array
    return tuple(shp) if isinstance(shp, (tuple, list)) else None


def _out_bytes(kind: str, p: Dict[str, Any]) -> Optional[int]:
    """An upper bound of the result's bytes (every part, each 64-aligned),
    from the params as the caller gave them; None when not known here."""
    def shapes(vals):
        out = [_shape_of(v) for v in vals]
        return None if any(s is None for s in out) else out
    try:
        if kind in ("map", "reduce"):
            ins = shapes(list((p.get("inputs") or {}).values()))
            if ins is None:
                return None
            shp = np.broadcast_shapes(*ins) if ins else ()
            n = int(np.prod(shp, dtype=np.int64))
            if kind == "reduce":
                ax = p.get("axis")
                if ax is None:
                    n = 1
                elif isinstance(ax, int) and shp:
                    n = n // shp[ax] if shp[ax] else 0
                else:
                    return None
            return max(n, 1) * 8
        if kind == "matmul":
            s = shapes([p.get("a"), p.get("b")])
            if s is None or len(s[0]) != 2 or len(s[1]) != 2:
                return None
            m = s[0][1] if p.get("transpose_a") else s[0][0]
            n = s[1][0] if p.get("transpose_b") else s[1][1]
            return max(m * n, 1) * 8
        if kind == "geodesic":
            s = shapes([p.get("points")] + ([p["targets"]] if p.get("targets") is not None else []))
            if s is None:
                return None
            n = s[0][0]
            m = s[1][0] if len(s) > 1 else n
            q = p.get("query")
            if q is None:
                cells = n * (n - 1) // 2 if p.get("layout") == "condensed" and len(s) == 1 else n * m
                return max(cells, 1) * 8
            if "knn" in q:
                one = n * int(q["knn"]["k"]) * 8
                return _align(max(one, 1)) + max(one, 1)
            if "rowwise" in q:
                return max(n, 1) * 8
    except Exception:
        return None
    return None
