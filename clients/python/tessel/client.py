"""tessel.Client: one method per job kind, NumPy arrays in and out.

Inputs. Wherever a kind takes an array, a caller may pass a NumPy array or
anything numpy.asarray takes (a list, a scalar), a tessel.Array (an upload
kept on the server), a tessel.Job (its result, read on the server: a chained
job; a pending one is waited for first, not downloaded), or a raw API value
({"random": ...}, {"range": ...}, {"file": ...}). An array is sent as .npy
from its own buffer when it is C-contiguous, native-endian float64 or
float32; anything else (Fortran order, strided views, big-endian, integers,
bools) is converted here first, since the server refuses Fortran and
big-endian .npy. Arrays this client uploaded only for one job (the server
answered 201, a new array) are deleted when that job ends.

Same-host path. When the server lets this caller use a --local-dir
directory (GET /v1/info "local_dirs", or Client(local_dir=...)), and that
directory exists and is writable here, and a probe job proves the server
reads what this process wrote there (a random tiny .npy, read back through
"output" too), arrays go through registered shared-memory regions there
(region.py; API.md "Regions"): an ndarray already in one of the client's
regions (c.empty(), Region.ndarray, an earlier result) is named in place,
an ordinary one is copied into a block of the client's region pool by
several threads, and the result is written by the server into a block the
client carved for it and returned as a view: no byte crosses HTTP. With
regions=False, or a server without them, inputs are written there as .npy
files ({"file": path}) and results come back as "output" files mapped with
mmap (copy-on-write), or read into the caller's out= with readinto. The
probe's answer is kept for the Client's life. Otherwise everything goes over
HTTP. The temporary files are removed by the reaper
thread (job.py) once their job ended: freeing an 800 MB file's pages takes
tens of milliseconds that the caller does not wait for; Client.close() and
the interpreter's exit wait until they are gone.

Threads: a Client may be used from any number of threads at once (one
connection per thread; the same-host probe runs once under a lock).

The per-kind methods (map, reduce, matmul, geodesic and its queries) live in
kinds.py (the Kinds mixin), Array in array.py; every public method is
annotated and has a NumPy-style docstring whose example runs as a doctest
(tests/test_docs.py).
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import threading
import urllib.parse
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import errors
from .batch import Batches, Coalescer, _ids
from .inline import inline as _inline, small as _small
from .array import Array, _wire_array  # noqa: F401 (tessel.client.Array, as before)
from .job import Job, WaitGroup, Waiter, _unlink_quiet, reaper
from .region import Region, _Pool, _out_bytes, copy_in
from .region import view as region_view
from .kinds import ArrayLike, Kinds, Output  # noqa: F401 (ArrayLike: tessel.client.ArrayLike)
from .transport import DEFAULT_STREAMS, DEFAULT_UPLOAD_STREAMS, Transport, npy_header, read_npy_file

DEFAULT_URL = "http://127.0.0.1:8080"
_ARRAY_PARAMS = ("a", "b", "bias", "points", "targets")
# An input this big (bytes) is made beside the job's other big ones (_inputs).
BIG_INPUT = 1 << 20


def _nbytes(v) -> int:
    """The bytes of an ndarray-like input the client would send; 0 for the
    rest (Array, Job, raw API values, numbers, lists: cheap or unknown)."""
    return v.nbytes if isinstance(v, np.ndarray) else 0



class Client(Kinds, Batches):
    """A connection to a Tessel server: NumPy arrays in, NumPy arrays out.

    Parameters
    ----------
    url : str, optional
        The server; default ``$TESSEL_URL``, else http://127.0.0.1:8080.
        An https:// URL is spoken over TLS.
    token : str, optional
        Bearer token; default ``$TESSEL_TOKEN``.
    retries : int, optional
        How many times a 429, or a 503 with Retry-After, is retried after
        sleeping what the server says; 0 (default) raises at once. Above
        0 the ``*_many`` calls also give each item a request_id and send a
        request whose answer was lost once more (batch.py).
    timeout : float, optional
        Seconds a socket operation may take.
    same_host : bool, optional
        None (default): use a same-host directory once a probe job proved
        the server reads what this process writes; False: never.
    local_dir : str, optional
        The one directory to try for same-host transfers, instead of the
        server's ``local_dirs`` (GET /v1/info).
    regions : bool, optional
        Same-host only. None (default): arrays go through registered
        shared-memory regions (`region`, `empty`; API.md "Regions") where
        the server has them; False: through .npy files as before.
    max_wait : float, optional
        Seconds of each server-side wait (the server allows up to 60).
    verify : bool or str, optional
        https:// only: True checks the server's certificate against the
        system's CAs, a path against that CA file (a self-signed server,
        e.g. tesseld's own ``--tls-cert``), False not at all. Default
        ``$TESSEL_CAFILE`` when set, else True.
    streams : int, optional
        Connections one big download uses at once (default 8): results and
        arrays of 64 MiB and more come down in byte ranges, each on its own
        connection; 1 reads everything over one.
    upload_streams : int, optional
        Connections one big upload uses at once. Default: what the server
        advises for arrays of 64 MiB and more (up to 8 on a server of 4
        CPUs or more, whose parts beat one stream: 800 MB in 0.15-0.18 s
        over 8 against 0.20-0.25 s over one on an H200 host; 1 on smaller
        ones); they go up in parts (POST /v1/uploads), each part on its own
        connection. 1: one POST /v1/arrays, never parts.

    Raises
    ------
    ValueError
        `verify` names a CA file that cannot be read.

    Examples
    --------
    >>> c = tessel.Client(url)  # same host: results come back in a region
    >>> c.map("x + 1", x=[1.0, 2.0]).tolist()
    [2.0, 3.0]
    >>> c.close()

    A Client is a context manager, and may be used from many threads.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, retries: int = 0,
                 timeout: float = 120.0, same_host: Optional[bool] = None,
                 local_dir: Optional[str] = None, max_wait: float = 60.0,
                 verify: Union[None, bool, str] = None,
                 streams: int = DEFAULT_STREAMS,
                 regions: Optional[bool] = None,
                 upload_streams: Optional[int] = DEFAULT_UPLOAD_STREAMS) -> None:
        self.url = url or os.environ.get("TESSEL_URL") or DEFAULT_URL
        token = token if token is not None else os.environ.get("TESSEL_TOKEN")
        if verify is None:
            verify = os.environ.get("TESSEL_CAFILE") or True
        self._t = Transport(self.url, token or None, retries, timeout, verify, streams=streams,
                            upload_streams=upload_streams)
        self._coalescer = Coalescer(self._t)  # submits made together share a request
        self.max_wait = float(max_wait)
        self._same_host_opt = same_host
        self._local_dir_opt = local_dir
        self._local = None  # None: not probed yet; "" no; else the directory
        self._local_lock = threading.Lock()
        self._empties = {}  # data address -> (path, nbytes) of c.empty arrays
        self._regions_opt = regions
        self._regions = {}  # region id -> weakref to its live Region
        self._rpool = None  # the pool c.empty and the calls carve blocks from
        self._rpool_lock = threading.Lock()
        self._waiter = Waiter(self)
        self._waits = WaitGroup(self)  # Job.wait's requests, shared by threads waiting at once
        self._temp_lock = threading.Lock()
        self._temps = {}      # array id -> jobs using it (uploads made for jobs)
        self._pinned = set()  # array ids c.upload() returned: never removed here
        self._deleting = {}   # array id -> Event set once its DELETE is done
        # A temporary removed while an upload of the same content was in
        # flight: that upload may have been answered "already stored" just
        # before the DELETE. Each finished DELETE gets the next epoch; an
        # upload that began at an earlier epoch uploads anew when its id
        # was removed since. Cleared whenever no upload is in flight.
        self._del_epoch = 0
        self._deleted_at = {}  # array id -> epoch of its last DELETE
        self._uploading = 0

    def __repr__(self) -> str:
        return f"<tessel.Client {self.url}>"

    def close(self) -> None:
        """Stop the waiter thread and close this thread's connection.

        Waits until the temporary same-host files of ended jobs are removed.

        Examples
        --------
        >>> with tessel.Client(url) as c2:  # close() on leaving
        ...     "by_kind" in c2.stats()
        True
        """
        self._waiter.close()
        if self._rpool is not None:
            self._rpool.close()
        self._t.shutdown()
        reaper.drain()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- service -------------------------------------------------------------
    def devices(self) -> Dict[str, Any]:
        """The server's devices: CPU threads and GPUs (GET /v1/devices).

        Returns
        -------
        dict
            ``{"cpu": {...}, "cuda": {"available": bool, "devices": [...]}}``.

        Examples
        --------
        >>> sorted(c.devices())
        ['cpu', 'cuda']
        """
        return self._t.json("GET", "/v1/devices")[1]

    def stats(self) -> Dict[str, Any]:
        """The server's counters: jobs by kind, backend and status, with their times (GET /v1/stats).

        Returns
        -------
        dict
            ``by_kind``: a list of {"kind", "backend", "status", "count",
            "p50_ms", "p95_ms", "result_bytes"}; API.md lists the rest.

        Examples
        --------
        >>> sum(r["count"] for r in c.stats()["by_kind"]) >= 0
        True
        """
        return self._t.json("GET", "/v1/stats")[1]

    def info(self) -> Dict[str, Any]:
        """The server's version, features and limits (GET /v1/info).

        Returns
        -------
        dict
            {} on a server that has no /v1/info.

        Examples
        --------
        >>> "tls" in c.info()["features"]
        True
        """
        try:
            return self._t.json("GET", "/v1/info")[1]
        except errors.NotFound:
            return {}

    # -- arrays ---------------------------------------------------------------
    def upload(self, a: Any, dtype: Any = None) -> Array:
        """Keep an array on the server, to use as the input of many jobs.

        Parameters
        ----------
        a : array_like
            Anything numpy.asarray takes. Sent as C-order native float64 /
            float32 (converted here first when it is not).
        dtype : data-type, optional
            Convert to this dtype first (e.g. ``np.float32``).

        Returns
        -------
        Array
            Kept until deleted; never removed by the client.

        Raises
        ------
        InvalidArgument
            Not numbers.
        PayloadTooLarge
            Larger than the server takes.

        Examples
        --------
        >>> a = c.upload(np.arange(3.0))
        >>> a.shape, c.map("x + 1", x=a)
        ((3,), array([1., 2., 3.]))
        """
        a = np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype)
        info = self._t.upload_npy(_wire_array(a))[1]
        with self._temp_lock:
            self._pinned.add(info["id"])
        return Array(self, info)

    def array(self, id: str) -> Array:
        """An array kept on the server, by id.

        Parameters
        ----------
        id : str
            ``a_...``.

        Returns
        -------
        Array

        Raises
        ------
        NotFound
            No such array.

        Examples
        --------
        >>> a = c.upload([1.0, 2.0])
        >>> c.array(a.id).shape
        (2,)
        """
        return Array(self, self._t.json("GET", f"/v1/arrays/{id}")[1])

    def arrays(self, limit: int = 100) -> List[Array]:
        """The arrays kept on the server, newest first.

        Parameters
        ----------
        limit : int, optional
            At most this many (1 to 1000).

        Returns
        -------
        list of Array

        Examples
        --------
        >>> a = c.upload([5.0, 6.0])
        >>> a.id in [x.id for x in c.arrays(1000)]
        True
        """
        return [Array(self, i) for i in self._t.json("GET", f"/v1/arrays?limit={limit}")[1]["arrays"]]

    def download(self, a: Union[Array, str], out: Optional[np.ndarray] = None) -> np.ndarray:
        """The data of an array kept on the server.

        Parameters
        ----------
        a : Array or str
            The array or its id.
        out : ndarray, optional
            An array of the same shape and dtype to read into.

        Returns
        -------
        ndarray

        Examples
        --------
        >>> a = c.upload([3.0, 4.0])
        >>> c.download(a.id)
        array([3., 4.])
        """
        return Array(self, {"id": a, "dtype": "float64", "shape": []}).download(out) \
            if isinstance(a, str) else a.download(out)

    # -- same host ------------------------------------------------------------
    def local_dir(self) -> Optional[str]:
        """The same-host directory in use, or None.

        The first call probes (a tiny job proves the server reads what this
        process writes there); the answer is kept for the Client's life.

        Returns
        -------
        str or None

        Examples
        --------
        >>> tessel.Client(url, same_host=False).local_dir() is None
        True
        """
        if self._local is None:
            with self._local_lock:
                if self._local is None:
                    self._local = self._probe_local() or ""
        return self._local or None

    def _probe_local(self):
        if self._same_host_opt is False:
            return None
        # An explicit local_dir is the only one tried; else the server's
        # own list for this caller (GET /v1/info local_dirs).
        cands = ([self._local_dir_opt] if self._local_dir_opt
                 else list(self.info().get("local_dirs") or []))
        for d in cands:
            d = os.path.realpath(d)
            if not (os.path.isdir(d) and os.access(d, os.W_OK)):
                continue
            probe = np.random.default_rng().random(4)
            src = os.path.join(d, f"tessel-probe-{uuid.uuid4().hex}.npy")
            out = os.path.join(d, f"tessel-probe-{uuid.uuid4().hex}.out.npy")
            try:
                np.save(src, probe)
                _, j = self._t.json("POST", "/v1/jobs?wait=30", {
                    "kind": "map", "backend": "serial",
                    "params": {"expr": "x", "inputs": {"x": {"file": src}}},
                    "output": {"file": out}})
                if j.get("status") == "succeeded" and np.array_equal(np.load(out), probe):
                    return d
            except (errors.TesselError, OSError, ValueError):
                pass
            finally:
                _unlink_quiet(src)
                _unlink_quiet(out)
        return None

    def empty(self, shape: Union[int, Sequence[int]], dtype: Any = np.float64) -> np.ndarray:
        """A new array living in the same-host directory, like numpy.empty.

        Carved from a registered region the client keeps (growing it by new
        regions as needed): fill it and pass it as an input, and no byte
        crosses HTTP or a file. With ``regions=False`` (or a server without
        regions): an np.memmap of a .npy there. Without a same-host
        directory: numpy.empty.

        Parameters
        ----------
        shape : int or tuple of int
        dtype : data-type, optional
            float64 (default) or float32 to be passed without conversion.

        Returns
        -------
        ndarray
            A view of a region's mapping (or an np.memmap) when there is a
            same-host directory.

        Examples
        --------
        >>> e = sc.empty((2, 2))  # sc: a client with a same-host directory
        >>> e[...] = 1.5
        >>> float(sc.reduce("sum", x=e))
        6.0
        """
        d = self.local_dir()
        if d is None:
            return np.empty(shape, dtype)
        shp = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        dt = np.dtype(dtype)
        blk = self._block(int(np.prod(shp, dtype=np.int64)) * dt.itemsize)
        if blk is not None:
            return region_view(blk[2], dt, shp)
        path = os.path.join(d, f"tessel-{os.getpid()}-{uuid.uuid4().hex}.npy")
        m = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(dtype), shape=shape)
        self._empties[m.__array_interface__["data"][0]] = (path, m.nbytes)
        weakref_finalize(m, self._forget_empty, m.__array_interface__["data"][0], path)
        return m

    def region(self, nbytes: int) -> Region:
        """A new registered shared-memory region of nbytes (API.md "Regions").

        A file in the same-host directory, sized, mapped here and registered
        with the server: ``Region.ndarray`` views it; arrays in it are job
        inputs read in place, and results of calls whose inputs all lie in
        regions are written into the client's regions.

        Parameters
        ----------
        nbytes : int

        Returns
        -------
        Region
            A context manager; ``close()`` deletes it.

        Raises
        ------
        RuntimeError
            No same-host directory.
        PayloadTooLarge
            Past the server's per-token limits (``--region-bytes``, 16
            regions).

        Examples
        --------
        >>> r = sc.region(1 << 16)  # sc: a client with a same-host directory
        >>> r.id.startswith("r_"), r.nbytes
        (True, 65536)
        >>> r.close()
        """
        return Region(self, nbytes)

    def _regions_on(self) -> bool:
        return self._regions_opt is not False and self.local_dir() is not None

    def _block(self, nbytes):
        """A pool block (region, offset, array) or None: regions are off,
        or the server refused one (then off for this client)."""
        if not self._regions_on():
            return None
        with self._rpool_lock:
            if self._rpool is None:
                self._rpool = _Pool(self)
            pool = self._rpool
        try:
            return pool.block(nbytes)
        except OSError:
            return None  # the directory is full, say: the file path instead
        except errors.TesselError as e:
            if isinstance(e, errors.NotFound) or getattr(e, "status", 0) in (404, 405):
                self._regions_opt = False  # a server without /v1/regions
            return None

    def _region_of(self, a):
        """(Region, offset) holding a wholly when a is a C-contiguous native
        float array in one of this client's live regions, else None."""
        if not (self._regions and a.flags.c_contiguous and a.dtype.isnative
                and a.dtype.kind == "f" and a.dtype.itemsize in (4, 8)):
            return None
        for ref in list(self._regions.values()):
            r = ref()
            off = r._offset_of(a) if r is not None and not r._closed else None
            if off is not None and off % a.dtype.itemsize == 0:
                return r, off
        return None

    def _regions_gone(self):
        """The server no longer has our regions (it restarted): forget them
        all; arrays in them are ordinary arrays from now on."""
        with self._rpool_lock:
            pool, self._rpool = self._rpool, None
        for ref in list(self._regions.values()):
            r = ref()
            if r is not None:
                r._closed = True
                r._fin.detach()
        self._regions.clear()
        if pool is not None:
            pool.regions = []

    def _forget_empty(self, addr, path):
        self._empties.pop(addr, None)
        _unlink_quiet(path)

    # -- inputs ----------------------------------------------------------------
    def _input(self, v, field, cleanup):
        """The API value for an input (may upload or write a file)."""
        if isinstance(v, Array):
            return {"array": v.id}
        if isinstance(v, Job):
            if not v.done():
                v.wait()
            if v.status != "succeeded":
                raise errors.from_job(v.info)
            if v._output_file:
                return {"file": v._output_file}
            r = v.info.get("result") or {}
            if r.get("region") and not r.get("parts") and r.get("region") in self._regions:
                cleanup.append(lambda: v)  # its block stays while this job runs
                return {"region": r["region"], "offset": r["offset"],
                        "dtype": r["dtype"], "shape": r["shape"]}
            return {"result": v.id}
        if isinstance(v, dict):
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
        a = v if isinstance(v, np.ndarray) else np.asarray(v)
        if a.ndim == 0 and a.dtype.kind in "biuf":
            return float(a)
        if isinstance(a, np.ndarray) and a.flags.c_contiguous and a.dtype.isnative and a.size:
            hit = self._empties.get(a.__array_interface__["data"][0])
            if hit and hit[1] == a.nbytes and a.dtype.kind == "f":
                a.flush() if isinstance(a, np.memmap) else None
                return {"file": hit[0]}
        if isinstance(a, np.ndarray) and a.size:
            hit = self._region_of(a)
            if hit is not None:  # in place: no byte copied or sent
                cleanup.append(lambda: a)  # kept (not reused) while the job runs
                return {"region": hit[0].id, "offset": hit[1], "dtype": a.dtype.name,
                        "shape": list(a.shape)}
        small = _small(a) if a.size else None
        if small is not None:  # a few numbers: in the job's body, no upload
            return small
        a = _wire_array(a)
        blk = self._block(a.nbytes) if a.size else None
        if blk is not None:  # copied into a region by several threads
            copy_in(region_view(blk[2], a.dtype, a.shape), a)
            cleanup.append(lambda: blk)
            return {"region": blk[0].id, "offset": blk[1], "dtype": a.dtype.name,
                    "shape": list(a.shape)}
        d = self.local_dir()
        if d is not None:
            path = os.path.join(d, f"tessel-{os.getpid()}-{uuid.uuid4().hex}.npy")
            with open(path, "wb") as f:
                f.write(npy_header(a.dtype, a.shape))
                if a.size:
                    f.write(memoryview(a.reshape(-1)).cast("B"))
            cleanup.append(lambda: reaper.unlink(path))
            return {"file": path}
        while True:
            with self._temp_lock:
                epoch0 = self._del_epoch
                self._uploading += 1
            try:
                status, info = self._t.upload_npy(a)
            except BaseException:
                with self._temp_lock:
                    self._uploading -= 1
                raise
            i = info["id"]
            with self._temp_lock:
                self._uploading -= 1  # counted until now: see _deleted_at
                gone = self._deleting.get(i)
                stale = gone is None and self._deleted_at.get(i, -1) > epoch0
                if self._uploading == 0:
                    self._deleted_at.clear()
                if stale:
                    continue  # removed after the server said it had it
                # Ours to remove once every job of this client using it
                # ended: new on the server (201) or already one of our
                # temporaries. The same content from c.upload() is pinned.
                if gone is None and i not in self._pinned and (status == 201 or i in self._temps):
                    self._temps[i] = self._temps.get(i, 0) + 1
                    cleanup.append(lambda: self._drop_temp(i))
            if gone is None:
                return {"array": i}
            gone.wait(60)  # the same content is being removed: upload anew

    def _inputs(self, params, cleanup):
        """The job's params with every array value made an API value. Two or
        more big ndarrays (BIG_INPUT bytes and more, say `-b/a` on 10^8
        elements) are made at once, one thread each: each upload (or copy
        into a region) then runs beside the others instead of after them;
        over HTTP the server takes each on its own connection."""
        p, todo = {}, []
        for k, v in params.items():
            if v is None:
                continue
            if k == "inputs":
                p[k] = {}
                todo += [((k, n), x, f"params.inputs.{n}") for n, x in v.items()]
            elif k in _ARRAY_PARAMS:
                todo.append(((k, None), v, f"params.{k}"))
            else:
                p[k] = v
        big = sum(1 for _, x, _ in todo if _nbytes(x) >= BIG_INPUT)
        if big >= 2:
            def one(x, f):  # this thread's upload shares the advised parts
                self._t.share(big)
                return self._input(x, f, cleanup)

            with concurrent.futures.ThreadPoolExecutor(
                    min(len(todo), 8), thread_name_prefix="tessel-input") as ex:
                futs = [ex.submit(one, x, f) for _, x, f in todo]
                # every one finished (ok or not) before a failure is raised,
                # so that cleanup holds each temporary that was made
                concurrent.futures.wait(futs)
                vals = [f.result() for f in futs]
        else:
            vals = [self._input(x, f, cleanup) for _, x, f in todo]
        for ((k, n), _, _), val in zip(todo, vals):
            if n is None:
                p[k] = val
            else:
                p[k][n] = val
        return p

    def _drop_temp(self, i):
        with self._temp_lock:
            n = self._temps.get(i, 0) - 1
            if n > 0:
                self._temps[i] = n
                return
            self._temps.pop(i, None)
            if i in self._pinned:
                return
            ev = self._deleting[i] = threading.Event()
        try:
            self._t.request("DELETE", f"/v1/arrays/{i}")
        finally:
            with self._temp_lock:
                self._deleting.pop(i, None)
                self._del_epoch += 1
                if self._uploading:
                    self._deleted_at[i] = self._del_epoch
            ev.set()

    # -- jobs --------------------------------------------------------------------
    def submit(self, kind: str, *, backend: str = "auto", priority: Optional[int] = None,
               timeout_s: Optional[float] = None, label: Optional[str] = None,
               request_id: Optional[str] = None, output: Output = None, wait: float = 0.0,
               **params: Any) -> Job:
        """Submit a job of any kind and return at once.

        Parameters
        ----------
        kind : str
            "map", "reduce", "matmul", "geodesic" (API.md "Job kinds").
        backend : {"auto", "serial", "cpu", "cuda", "compare"}, optional
            Where it runs; "auto" lets the server choose.
        priority : int, optional
            0 to 9, higher runs first (FIFO within a priority); default 5.
        timeout_s : float, optional
            The job fails with ``deadline_exceeded`` past this many seconds.
        label : str, optional
            A free text kept with the job.
        request_id : str, optional
            Idempotency key: the same request_id twice is one job.
        output : None, False or str, optional
            None: a same-host output file when there is one; False: the
            server keeps the result; a path: the server writes it there.
        wait : float, optional
            Seconds the server may hold the submit until the job ends.
        **params
            The kind's parameters (API.md); an array value may be any input
            form (ndarray, list, Array, Job, raw API value). None values are
            left out.

        Returns
        -------
        Job
            A concurrent.futures.Future.

        Raises
        ------
        InvalidArgument
            A bad parameter (``.field`` names it).

        Examples
        --------
        >>> j = c.submit("reduce", op="sum", inputs={"x": [1.0, 2.0, 3.0]})
        >>> j.result()
        array(6.)
        """
        opts = dict(backend=backend, priority=priority, timeout_s=timeout_s, label=label,
                    request_id=request_id, output=output, wait=wait)
        try:
            return self._submit(kind, opts, params)
        except errors.InvalidArgument as e:
            # The result's size this client estimated for its region block
            # was too small (an input it could not see into): the server
            # keeps the result instead.
            if e.field != "output.offset" or output is not None:
                raise
            return self._submit(kind, dict(opts, output=False), params)
        except errors.NotFound as e:
            # Another thread's job ended and removed a temporary upload of
            # the same content between our upload and submit: once more.
            # A region not found: the server restarted and dropped them all;
            # the client registers new ones.
            f = e.field or ""
            if f.endswith(".region"):
                self._regions_gone()
            elif not f.startswith("params."):
                raise
            return self._submit(kind, opts, params)

    def _submit(self, kind: str, opts: Dict[str, Any], params: Dict[str, Any]) -> Job:
        backend, priority, timeout_s, label, request_id, output, wait = (
            opts["backend"], opts["priority"], opts["timeout_s"], opts["label"],
            opts["request_id"], opts["output"], opts["wait"])
        cleanup = []
        try:
            p = self._inputs(params, cleanup)
            body = {"kind": kind, "backend": backend, "params": p,
                    "request_id": request_id or _ids.next()}
            for k, v in (("priority", priority), ("timeout_s", timeout_s), ("label", label)):
                if v is not None:
                    body[k] = v
            out_file = out_blk = None
            if output is None and self._regions_on():
                nb = _out_bytes(kind, params)
                out_blk = self._block(nb) if nb else None
            if out_blk is not None:  # the result's bytes into our region
                body["output"] = {"region": out_blk[0].id, "offset": out_blk[1]}
            elif output is None and self.local_dir() is not None and \
                    not (kind == "geodesic" and
                         {"knn", "radius"} & set(params.get("query") or {})):
                out_file = os.path.join(self.local_dir(),
                                        f"tessel-{os.getpid()}-{uuid.uuid4().hex}.out.npy")
            elif isinstance(output, str):
                out_file = output
            if out_file:
                body["output"] = {"file": out_file}
            raw = json.dumps(body).encode()
            q = f"?wait={min(float(wait), self.max_wait):.3f}" if wait else ""
            # A job whose result the server keeps: a small result that is
            # there when the answer leaves (with ?wait, or a job that ended
            # at once) comes inline in it (?include=result), so a tiny call
            # is one request. Batched submits (the coalescer's) read theirs
            # through the waiter's jobs:get, which includes results too.
            def post(query):
                return self._t.request("POST", "/v1/jobs" + query, raw,
                                       {"Content-Type": "application/json"},
                                       timeout=(float(wait) + 60) if wait else None)[1]

            def single():
                if out_file is not None or out_blk is not None:
                    return post(q)
                return self._t.newer("include",
                                     lambda: post((q + "&" if q else "?") + "include=result"),
                                     lambda: post(q))
            info = self._coalescer.submit(body, q, single)
        except BaseException:
            for fn in cleanup:
                try:
                    fn()
                except Exception:
                    pass
            raise
        job = Job(self, info, cleanup, out_file, owns_file=output is None)
        job._out_block = out_blk
        if not job.done():
            self._waiter.add(job)
        return job

    def job(self, id: str) -> Job:
        """A job by id, as a Job (a Future finished by this client's waiter).

        Parameters
        ----------
        id : str
            ``j_...``.

        Returns
        -------
        Job

        Raises
        ------
        NotFound
            No such job.

        Examples
        --------
        >>> j = c.submit_map("x", x=[1.0])
        >>> c.job(j.id).result()
        array([1.])
        """
        return self._job(self._t.json("GET", f"/v1/jobs/{id}")[1])

    def _job(self, info: Dict[str, Any]) -> Job:
        j = Job(self, info)
        if not j.done():
            self._waiter.add(j)
        return j

    def jobs(self, status: Optional[str] = None, kind: Optional[str] = None,
             backend: Optional[str] = None, label: Optional[str] = None,
             limit: int = 50) -> List[Job]:
        """The server's jobs, newest first, as Job objects (as `arrays` gives Arrays).

        Parameters
        ----------
        status : {"queued", "running", "succeeded", "failed", "canceled"}, optional
        kind : str, optional
            "map", "reduce", "matmul", "geodesic".
        backend : str, optional
            The backend the job asked for.
        label : str, optional
            The jobs with this label.
        limit : int, optional
            At most this many (1 to 1000).

        Returns
        -------
        list of Job
            Each with ``.id``, ``.kind``, ``.status``, ``.info`` (the JSON);
            pending ones are finished by this client's waiter.

        Examples
        --------
        >>> j = c.submit_map("x", x=[2.0], label="doc-jobs", wait=60)
        >>> k = c.jobs(label="doc-jobs", limit=1)[0]
        >>> k.id == j.id, k.status, k.result()
        (True, 'succeeded', array([2.]))
        """
        q = urllib.parse.urlencode([(k, v) for k, v in (
            ("status", status), ("kind", kind), ("backend", backend), ("label", label),
            ("limit", limit)) if v is not None])
        return [self._job(i) for i in self._t.json("GET", "/v1/jobs?" + q)[1]["jobs"]]

    def _region_result(self, job, r, out):
        """A result (or part) r that the server wrote into a region: a view
        of the job's block (kept alive by it), or copied into out."""
        blk = getattr(job, "_out_block", None)
        if blk is not None and blk[0].id == r["region"]:
            v = region_view(blk[2], r["dtype"], r["shape"], r["offset"] - blk[1])
        else:
            reg = self._regions.get(r["region"])
            reg = reg() if reg is not None else None
            if reg is None:
                raise errors.NotFound(f"region {r['region']} is not this client's",
                                      code="not_found")
            v = reg.ndarray(r["shape"], r["dtype"], r["offset"])
        if out is not None:
            np.copyto(out, v)
            return out
        return v

    def _fetch_part(self, job, name, out=None):
        r = job.info.get("result") or {}
        if r.get("region"):
            for p in r.get("parts") or []:
                if p["name"] == name:
                    return self._region_result(job, dict(p, region=r["region"]), out)
        return self._t.download_npy(f"/v1/jobs/{job.id}/result/{name}", out)

    def _fetch_result(self, job, out=None):
        r = job.info.get("result") or {}
        if "data" in r:  # inline in the job's answer (?include=result)
            a = _inline(r)
            if out is None:
                r.pop("data", None)  # the array is kept (job._array) instead of the lists
            if a is not None:
                if out is None:
                    return a
                np.copyto(out, a)
                return out
        if r.get("region"):
            return self._region_result(job, r, out)
        if r.get("file"):
            if out is not None:  # as a download fills it: no mapping to fault in
                return read_npy_file(r["file"], out)
            return np.load(r["file"], mmap_mode="c")
        return self._t.download_npy(f"/v1/jobs/{job.id}/result", out)

    def compare(self, kind: str, **params: Any) -> "CompareTable":
        """Run one job on every available backend and compare their times.

        Parameters
        ----------
        kind : str
            "map", "reduce", "matmul", "geodesic" or another kind.
        **params
            What `submit_map` / `submit_reduce` / `submit_matmul` /
            `submit_geodesic` (or `submit`) take for that kind, except
            `backend` ("compare" here).

        Returns
        -------
        CompareTable
            A list of ``{"backend", "ms", "speedup", ...}`` records
            (speedup against serial); ``.result`` the array,
            ``.max_abs_diff``, ``.to_frame()`` with pandas.

        Examples
        --------
        >>> t = c.compare("map", expr="x*2", x=np.arange(3.0))
        >>> t.result, t[0]["backend"], t[0]["speedup"]
        (array([0., 2., 4.]), 'serial', 1.0)
        """
        params.setdefault("wait", self.max_wait)
        if kind == "geodesic":
            job = self.submit_geodesic(backend="compare", **params)
        elif kind in ("map", "reduce", "matmul"):
            job = getattr(self, "submit_" + kind)(backend="compare", **params)
        else:
            job = self.submit(kind, backend="compare", **params)
        return CompareTable(job)

    def executor(self, max_in_flight: int = 8) -> "TesselExecutor":
        """A concurrent.futures.Executor whose calls are Tessel operations.

        Each ``submit(fn, ...)`` runs fn (e.g. ``lambda a: c.map("x**2",
        x=a)``, or one returning a Job, resolved to its result array) with
        at most `max_in_flight` running at once: a drop-in for a
        ProcessPoolExecutor whose work moved to the server.

        Parameters
        ----------
        max_in_flight : int, optional
            The most calls running at once.

        Returns
        -------
        TesselExecutor

        Examples
        --------
        >>> with c.executor(max_in_flight=2) as ex:
        ...     sums = list(ex.map(lambda d: c.reduce("sum", x=d).item(), [[1.0, 2.0], [3.0]]))
        >>> sums
        [3.0, 3.0]
        """
        return TesselExecutor(max_in_flight)


def weakref_finalize(obj: Any, fn: Callable[..., Any], *args: Any) -> Any:
    import weakref
    return weakref.finalize(obj, fn, *args)


class CompareTable(list):
    """The backends' times of a compare job (`Client.compare`), as a list of records.

    Attributes
    ----------
    job : Job
    result : ndarray
        The job's result.
    max_abs_diff : float or None
        The largest difference between the backends' results.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        self.result = job.result()
        rows = [dict(r) for r in (job.info.get("compare") or [])]
        serial = next((r["ms"] for r in rows if r.get("backend") == "serial"), None)
        for r in rows:
            if serial and r.get("ms"):
                r["speedup"] = serial / r["ms"]
        super().__init__(rows)
        self.max_abs_diff = job.info.get("max_abs_diff")

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame (needs pandas).

        Returns
        -------
        pandas.DataFrame
            One row per backend.

        Raises
        ------
        ImportError
            pandas is not installed.

        Examples
        --------
        >>> c.compare("map", expr="x", x=[1.0]).to_frame().columns[0]
        'backend'
        """
        import pandas as pd  # optional
        return pd.DataFrame(list(self))


class TesselExecutor(concurrent.futures.Executor):
    """Executor whose calls are Tessel operations (`Client.executor`).

    At most `max_in_flight` run at once, each on a thread of its own that
    waits for its job; a Job returned by a call is resolved to its array.
    """

    def __init__(self, max_in_flight: int = 8) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_in_flight,
                                                           thread_name_prefix="tessel-exec")

    @staticmethod
    def _call(fn: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        r = fn(*args, **kwargs)
        return r.result() if isinstance(r, Job) else r

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> concurrent.futures.Future:
        """Run ``fn(*args, **kwargs)``; a Future of its value (a Job's array)."""
        return self._pool.submit(self._call, fn, args, kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking calls; wait for the running ones when `wait`."""
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
