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
"output" too), inputs are written there as .npy files ({"file": path}) and
results come back as "output" files mapped with mmap (copy-on-write), or read
into the caller's out= with readinto. The probe's answer is kept for the
Client's life. c.empty() gives an array that already lives there. Otherwise
everything goes over HTTP. The temporary files are removed by the reaper
thread (job.py) once their job ended: freeing an 800 MB file's pages takes
tens of milliseconds that the caller does not wait for; Client.close() and
the interpreter's exit wait until they are gone.

Threads: a Client may be used from any number of threads at once (one
connection per thread; the same-host probe runs once under a lock).
"""
import concurrent.futures
import json
import os
import threading
import uuid

import numpy as np

from . import errors
from .job import Job, Waiter, _unlink_quiet, reaper
from .transport import Transport, npy_header, read_npy_file

DEFAULT_URL = "http://127.0.0.1:8080"
_ARRAY_PARAMS = ("a", "b", "bias", "points", "targets")
_SUBMIT_OPTS = ("backend", "priority", "timeout_s", "label", "request_id")


class Array:
    """An array kept on the server (POST /v1/arrays). Usable as any input."""

    def __init__(self, client, info):
        self.client = client
        self.info = info
        self.id = info["id"]
        self.dtype = np.dtype(info["dtype"])
        self.shape = tuple(info["shape"])

    def __repr__(self):
        return f"<tessel.Array {self.id} {self.dtype} {self.shape}>"

    def download(self, out=None):
        return self.client._t.download_npy(f"/v1/arrays/{self.id}/data", out)

    def delete(self):
        self.client._t.request("DELETE", f"/v1/arrays/{self.id}")


def _wire_array(a):
    """a as the server takes it: C-contiguous, native, float64 or float32."""
    a = np.asarray(a)
    if a.dtype.kind == "f" and a.dtype.itemsize in (4, 8):
        want = a.dtype.newbyteorder("=")
    elif a.dtype.kind in "biuf":
        want = np.dtype(np.float64)
    else:
        raise errors.InvalidArgument(f"an array of {a.dtype} is not numbers", code="invalid_argument")
    if a.dtype != want or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype=want)
    return a


class Client:
    """A Tessel server. url: default $TESSEL_URL, else http://127.0.0.1:8080;
    token: default $TESSEL_TOKEN; retries: how many times a 429 / 503 with
    Retry-After is retried after sleeping what it says (0: raise at once);
    same_host: None (use it when proven), False (never); local_dir: a
    directory to try when the server does not list one in /v1/info;
    max_wait: seconds of each server-side wait (the server allows up to 60);
    verify (https:// only): True checks the certificate against the
    system's CAs, a path against that CA bundle (default $TESSEL_CAFILE when
    set), False not at all."""

    def __init__(self, url=None, token=None, retries=0, timeout=120.0, same_host=None,
                 local_dir=None, max_wait=60.0, verify=None):
        self.url = url or os.environ.get("TESSEL_URL") or DEFAULT_URL
        token = token if token is not None else os.environ.get("TESSEL_TOKEN")
        if verify is None:
            verify = os.environ.get("TESSEL_CAFILE") or True
        self._t = Transport(self.url, token or None, retries, timeout, verify)
        self.max_wait = float(max_wait)
        self._same_host_opt = same_host
        self._local_dir_opt = local_dir
        self._local = None  # None: not probed yet; "" no; else the directory
        self._local_lock = threading.Lock()
        self._empties = {}  # data address -> (path, nbytes) of c.empty arrays
        self._waiter = Waiter(self)
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

    def __repr__(self):
        return f"<tessel.Client {self.url}>"

    def close(self):
        """Stop the waiter thread, close this thread's connection and wait
        until the temporary same-host files of ended jobs are removed."""
        self._waiter.close()
        self._t.close()
        reaper.drain()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- service -------------------------------------------------------------
    def devices(self):
        return self._t.json("GET", "/v1/devices")[1]

    def stats(self):
        return self._t.json("GET", "/v1/stats")[1]

    def info(self):
        """GET /v1/info, or {} on a server that has none."""
        try:
            return self._t.json("GET", "/v1/info")[1]
        except errors.NotFound:
            return {}

    # -- arrays ---------------------------------------------------------------
    def upload(self, a, dtype=None):
        """Upload an array (anything numpy.asarray takes); a tessel.Array."""
        a = np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype)
        info = self._t.upload_npy(_wire_array(a))[1]
        with self._temp_lock:
            self._pinned.add(info["id"])
        return Array(self, info)

    def array(self, id):
        return Array(self, self._t.json("GET", f"/v1/arrays/{id}")[1])

    def arrays(self, limit=100):
        return [Array(self, i) for i in self._t.json("GET", f"/v1/arrays?limit={limit}")[1]["arrays"]]

    def download(self, a, out=None):
        """The data of a tessel.Array or array id as NumPy."""
        return Array(self, {"id": a, "dtype": "float64", "shape": []}).download(out) \
            if isinstance(a, str) else a.download(out)

    # -- same host ------------------------------------------------------------
    def local_dir(self):
        """The same-host directory in use, or None (probes once)."""
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

    def empty(self, shape, dtype=np.float64):
        """An array living in the same-host directory (np.memmap of a .npy
        there), so passing it as an input later copies nothing. Without a
        same-host directory: a plain numpy.empty."""
        d = self.local_dir()
        if d is None:
            return np.empty(shape, dtype)
        path = os.path.join(d, f"tessel-{os.getpid()}-{uuid.uuid4().hex}.npy")
        m = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(dtype), shape=shape)
        self._empties[m.__array_interface__["data"][0]] = (path, m.nbytes)
        weakref_finalize(m, self._forget_empty, m.__array_interface__["data"][0], path)
        return m

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
        a = _wire_array(a)
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
    def submit(self, kind, *args, **kw):
        """Submit a job; a tessel.Job (a concurrent.futures.Future). params
        are the kind's (API.md "Job kinds"); array values may be any input
        form. Options: backend, priority, timeout_s, label, request_id,
        output (None: a same-host file when available; False: keep it on
        the server; a path: {"file": path}), wait (seconds the server may
        hold the submit)."""
        try:
            return self._submit(kind, *args, **kw)
        except errors.NotFound as e:
            # Another thread's job ended and removed a temporary upload of
            # the same content between our upload and submit: once more.
            if not (e.field or "").startswith("params."):
                raise
            return self._submit(kind, *args, **kw)

    def _submit(self, kind, backend="auto", priority=None, timeout_s=None, label=None,
                request_id=None, output=None, wait=0.0, **params):
        cleanup = []
        try:
            p = {}
            for k, v in params.items():
                if v is None:
                    continue
                if k == "inputs":
                    p[k] = {n: self._input(x, f"params.inputs.{n}", cleanup) for n, x in v.items()}
                elif k in _ARRAY_PARAMS:
                    p[k] = self._input(v, f"params.{k}", cleanup)
                else:
                    p[k] = v
            body = {"kind": kind, "backend": backend, "params": p,
                    "request_id": request_id or "py-" + uuid.uuid4().hex}
            for k, v in (("priority", priority), ("timeout_s", timeout_s), ("label", label)):
                if v is not None:
                    body[k] = v
            out_file = None
            if output is None and self.local_dir() is not None:
                out_file = os.path.join(self.local_dir(),
                                        f"tessel-{os.getpid()}-{uuid.uuid4().hex}.out.npy")
            elif isinstance(output, str):
                out_file = output
            if out_file:
                body["output"] = {"file": out_file}
            raw = json.dumps(body).encode()
            q = f"?wait={min(float(wait), self.max_wait):.3f}" if wait else ""
            _, info = self._t.request("POST", "/v1/jobs" + q, raw,
                                      {"Content-Type": "application/json"},
                                      timeout=(float(wait) + 60) if wait else None)
        except BaseException:
            for fn in cleanup:
                try:
                    fn()
                except Exception:
                    pass
            raise
        job = Job(self, info, cleanup, out_file, owns_file=output is None)
        if not job.done():
            self._waiter.add(job)
        return job

    def job(self, id):
        """A Job for an existing id (finished by this client's waiter)."""
        _, info = self._t.json("GET", f"/v1/jobs/{id}")
        j = Job(self, info)
        if not j.done():
            self._waiter.add(j)
        return j

    def jobs(self, status=None, kind=None, limit=50):
        q = "&".join(f"{k}={v}" for k, v in (("status", status), ("kind", kind), ("limit", limit)) if v)
        return self._t.json("GET", "/v1/jobs?" + q)[1]["jobs"]

    def _fetch_result(self, job, out=None):
        r = job.info.get("result") or {}
        if r.get("file"):
            if out is not None:  # as a download fills it: no mapping to fault in
                return read_npy_file(r["file"], out)
            return np.load(r["file"], mmap_mode="c")
        return self._t.download_npy(f"/v1/jobs/{job.id}/result", out)

    # -- one method per kind --------------------------------------------------------
    def submit_map(self, expr, backend="auto", dtype=None, inputs=None, **kw):
        opts, named = _split(kw)
        return self.submit("map", backend=backend, expr=expr, dtype=dtype,
                           inputs=dict(inputs or {}, **named), **opts)

    def submit_reduce(self, op, expr=None, backend="auto", axis=None, ddof=None, dtype=None,
                      inputs=None, **kw):
        opts, named = _split(kw)
        return self.submit("reduce", backend=backend, op=op, expr=expr, axis=axis, ddof=ddof,
                           dtype=dtype, inputs=dict(inputs or {}, **named), **opts)

    def submit_matmul(self, a, b, bias=None, backend="auto", transpose_a=None, transpose_b=None,
                      dtype=None, **opts):
        return self.submit("matmul", backend=backend, a=a, b=b, bias=bias, transpose_a=transpose_a,
                           transpose_b=transpose_b, dtype=dtype, **opts)

    def submit_geodesic(self, points, targets=None, method="karney", units="m", layout=None,
                        ellipsoid=None, radius_m=None, dtype=None, backend="auto",
                        lat="lat", lon="lon", query=None, **opts):
        """layout None: the server's ("square"); query: {"knn": {"k": 10}},
        {"radius": {"r": 5000}} or {"rowwise": {"op": "argmin"}} (API.md),
        whose results of several parts (knn, radius) are never written to a
        same-host output file: read them with Job.part / Job.parts."""
        if query is not None and ("knn" in query or "radius" in query):
            opts.setdefault("output", False)
        return self.submit("geodesic", backend=backend,
                           points=_points(points, lat, lon, "params.points"),
                           targets=None if targets is None else _points(targets, lat, lon, "params.targets"),
                           method=method, units=units, layout=layout, ellipsoid=ellipsoid,
                           radius_m=radius_m, dtype=dtype, query=query, **opts)

    def map(self, expr, backend="auto", progress=False, **kw):
        """expr over the named inputs (x=a, ...), NumPy broadcasting."""
        return self._run(self.submit_map(expr, backend=backend, wait=self._w(progress), **kw), progress)

    def reduce(self, op, expr=None, backend="auto", progress=False, **kw):
        """op (sum mean min max prod var std argmin argmax norm) of expr."""
        return self._run(self.submit_reduce(op, expr, backend=backend, wait=self._w(progress), **kw),
                         progress)

    def matmul(self, a, b, bias=None, backend="auto", progress=False, **kw):
        """a @ b + bias."""
        return self._run(self.submit_matmul(a, b, bias, backend=backend, wait=self._w(progress), **kw),
                         progress)

    def geodesic(self, points, targets=None, backend="auto", progress=False, **kw):
        """Pairwise distances; points (n, 2) [lat, lon], a list of (lat, lon)
        or a DataFrame with columns lat= / lon= (named, never guessed)."""
        return self._run(self.submit_geodesic(points, targets, backend=backend,
                                              wait=self._w(progress), **kw), progress)

    def geodesic_knn(self, points, k, targets=None, backend="auto", progress=False, **kw):
        """The k nearest targets of each point (the other points when there
        are no targets; a point is never its own neighbour), exact on the
        ellipsoid: (distance [n, k], index [n, k] int64), each row ascending,
        ties by the smaller index; k is cut to the candidates there are."""
        job = self.submit_geodesic(points, targets, backend=backend,
                                   query={"knn": {"k": int(k)}}, wait=self._w(progress), **kw)
        job.wait(progress=progress)
        return job.part("distance"), job.part("index")

    def geodesic_radius(self, points, r, targets=None, max_pairs=None, backend="auto",
                        progress=False, **kw):
        """Every pair within distance r (in units): (i, j, distance), sorted
        by (i, j); without targets each pair once, i < j."""
        q = {"r": r}
        if max_pairs is not None:
            q["max_pairs"] = int(max_pairs)
        job = self.submit_geodesic(points, targets, backend=backend, query={"radius": q},
                                   wait=self._w(progress), **kw)
        job.wait(progress=progress)
        return job.part("i"), job.part("j"), job.part("distance")

    def geodesic_rowwise(self, points, op, targets=None, within=None, backend="auto",
                         progress=False, **kw):
        """One value per point over its targets (or the other points, or
        those within `within`): op min, argmin, max, argmax, mean, sum or
        count; argmin/argmax/count are int64 (-1: no candidate)."""
        q = {"op": op}
        if within is not None:
            q["within"] = within
        return self._run(self.submit_geodesic(points, targets, backend=backend,
                                              query={"rowwise": q}, wait=self._w(progress), **kw),
                         progress)

    def _w(self, progress):
        return 0 if progress else self.max_wait

    @staticmethod
    def _run(job, progress):
        return job.result(progress=progress)

    def compare(self, kind, **params):
        """Run on every available backend (backend="compare"): a
        CompareTable (a list of {"backend", "ms", ...} records with
        "speedup" against serial), .result the array, .to_frame()."""
        params.setdefault("wait", self.max_wait)
        if kind == "geodesic":
            job = self.submit_geodesic(backend="compare", **params)
        elif kind in ("map", "reduce", "matmul"):
            job = getattr(self, "submit_" + kind)(backend="compare", **params)
        else:
            job = self.submit(kind, backend="compare", **params)
        return CompareTable(job)

    def executor(self, max_in_flight=8):
        """A concurrent.futures.Executor running Tessel operations: each
        submit(fn, ...) runs fn (e.g. lambda a: c.map("x**2", x=a), or one
        returning a Job) with at most max_in_flight of them at once; a
        Job returned by fn is resolved to its result array."""
        return TesselExecutor(max_in_flight)


def weakref_finalize(obj, fn, *args):
    import weakref
    return weakref.finalize(obj, fn, *args)


def _split(kw):
    """Submit options apart from named inputs (map/reduce take x=..., y=...)."""
    opts = {k: kw.pop(k) for k in list(kw) if k in _SUBMIT_OPTS + ("output", "wait")}
    return opts, kw


def _points(p, lat, lon, field):
    """An (n, 2) [lat, lon] value from an array, a list of pairs or a DataFrame."""
    if isinstance(p, (Array, Job, dict)):
        return p
    if hasattr(p, "columns") and hasattr(p, "to_numpy"):  # a pandas DataFrame
        cols = list(p.columns)
        missing = [c for c in (lat, lon) if c not in cols]
        if missing:
            raise errors.InvalidArgument(
                f"the DataFrame has no column {missing[0]!r} (it has {cols}); name the "
                f"latitude and longitude columns with lat= and lon=",
                code="invalid_argument", field=field)
        return np.column_stack([p[lat].to_numpy(dtype=np.float64), p[lon].to_numpy(dtype=np.float64)])
    a = np.asarray(p, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != 2:
        raise errors.InvalidArgument(f"expected (n, 2) [lat, lon] points, got shape {a.shape}",
                                     code="invalid_argument", field=field)
    return a


class CompareTable(list):
    """The backends' times of a compare job, as a list of records."""

    def __init__(self, job):
        self.job = job
        self.result = job.result()
        rows = [dict(r) for r in (job.info.get("compare") or [])]
        serial = next((r["ms"] for r in rows if r.get("backend") == "serial"), None)
        for r in rows:
            if serial and r.get("ms"):
                r["speedup"] = serial / r["ms"]
        super().__init__(rows)
        self.max_abs_diff = job.info.get("max_abs_diff")

    def to_frame(self):
        import pandas as pd  # optional
        return pd.DataFrame(list(self))


class TesselExecutor(concurrent.futures.Executor):
    """Executor whose calls are Tessel operations; at most max_in_flight run
    at once (each on a thread of its own that waits for its job)."""

    def __init__(self, max_in_flight=8):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_in_flight,
                                                           thread_name_prefix="tessel-exec")

    @staticmethod
    def _call(fn, args, kwargs):
        r = fn(*args, **kwargs)
        return r.result() if isinstance(r, Job) else r

    def submit(self, fn, /, *args, **kwargs):
        return self._pool.submit(self._call, fn, args, kwargs)

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
