"""Many jobs per request: ``map_many``, ``reduce_many``, ``geodesic_many``.

A ``pool.map`` of small items becomes ``POST /v1/jobs:batch?wait=S``
requests (each item the body ``submit_*`` would send) with
``"include": ["result"]`` and the read mask ``"fields"``: the server
answers once every job has ended (or S has passed), so a batch of tiny
jobs is one request, its small results inline (``result.data``).

A call is cut into chunks (_chunks): up to one per transfer thread (at
least SPLIT_MIN items each), and beyond CHUNK items a thread, chunks of
CHUNK. They go out as they are made, each on a transfer thread's own
connection, at most one per thread in flight: the server checks and runs
chunk k while this thread makes chunk k+1 and turns the answers in hand,
in order, into arrays (a server checks a request's items one after another
on one thread, so chunks at once also spread its checks). Inputs are made
JSON lists and results arrays by one NumPy call per shape (inline.py).
Backend "cuda" stays one request (per 10,000 items): its batch must stay
whole for its jobs to share one launch. The jobs not ended by the answer
are waited for with ``POST /v1/jobs:get`` (``wait``, ``include``) until
every one has ended, and a larger result (or one with inf or nan, which
JSON cannot carry) is downloaded from its link. A server without
"include" on jobs:batch is asked the older way: the batch, then jobs:get.

request_ids: with ``Client(retries=N)`` (N > 0) each item carries one,
and a chunk whose answer was lost (a broken connection, a 503) is sent
once more: the server answers with the jobs the ids already made, none
new. Without retries the items carry none and a lost chunk raises,
never resent: an item with a request_id is inserted by the server's
[sync] path (a transaction per chunk before its jobs queue), which cost
+30 µs of daemon CPU a tiny job and 12,994 -> 7,945 jobs/s on 2 cores
(tests/bench/bench_many.py --ab).

A bad item raises the error the single call would raise (its field as
``jobs[i]...``), after every job of the call was submitted; a failed job
raises `JobFailed` as ``.result()`` would. An input the client itself
cannot send (an upload refused, a failed Job as input) raises while its
chunk is made: the chunks sent before it run on, and are waited for
before the call's uploads are deleted.

`Coalescer`: the submits of several threads (``executor().map``, or any
threads sharing a client) made while one submit is in flight go out
together as ``jobs:batch`` requests; each caller still gets its own Job
(a future that resolves alone) or its own error.
"""
from __future__ import annotations

import collections
import concurrent.futures
import itertools
import json
import os
import threading
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence

import numpy as np

from . import errors
from .inline import inline, inlines, smalls

BATCH_MAX = 10000  # the server's item limit (API.md "POST /v1/jobs:batch")
SPLIT_MIN = 25  # items a request gets at least before a call is split
CHUNK = 500  # items a request gets at most once a call has more than one per transfer thread


def _splits(n: int, workers: int) -> List[range]:
    """[lo, hi) ranges of n items: one for n < 2 * SPLIT_MIN, else up to
    `workers` near-equal parts of SPLIT_MIN or more, and never more than
    BATCH_MAX in one."""
    k = max(1, min(workers, n // SPLIT_MIN), -(-n // BATCH_MAX))
    size = max(1, -(-n // k))
    return [range(lo, min(n, lo + size)) for lo in range(0, n, size)]


def _chunks(n: int, workers: int) -> List[range]:
    """The requests of a call of n items: `_splits` up to `workers` parts
    of CHUNK items, beyond that chunks of CHUNK sent as they are made
    (_run_many)."""
    if workers == 1 or n <= workers * CHUNK:
        return _splits(n, workers)
    return [range(lo, min(n, lo + CHUNK)) for lo in range(0, n, CHUNK)]


class _Ids:
    """request_ids for submits: "py-" and 32 hex digits, a random 64-bit
    prefix of this process and a counter. Unique as uuid4 ones are for
    one server (a fresh prefix after fork: a child never repeats its
    parent's ids), at a tenth of uuid4's cost (no os.urandom per call)."""

    def __init__(self) -> None:
        self.reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        self.prefix = "py-" + os.urandom(8).hex()
        self.count = itertools.count(int.from_bytes(os.urandom(4), "little"))

    def next(self) -> str:
        return f"{self.prefix}{next(self.count) & 0xFFFFFFFFFFFFFFFF:016x}"


_ids = _Ids()


_BY_CODE = {
    "invalid_argument": errors.InvalidArgument,
    "not_found": errors.NotFound,
    "permission_denied": errors.PermissionDenied,
    "payload_too_large": errors.PayloadTooLarge,
    "unavailable": errors.Unavailable,
    "too_many_requests": errors.TooManyRequests,
}


def _item_error(err: Dict[str, Any]) -> errors.TesselError:
    cls = _BY_CODE.get(err.get("code") or "", errors.TesselError)
    return cls(err.get("message", "refused"), status=0, code=err.get("code"),
               field=err.get("field"), position=err.get("position"))


_FINAL = ("succeeded", "failed", "canceled")
_ARRAY_KEYS = ("points", "targets", "a", "b", "bias")
_FIELDS = ["status", "error", "result"]


class _Call:
    """One *_many call's state: the jobs' ids and ended records, their
    inline results converted so far, the first refused item's error."""

    def __init__(self, n: int) -> None:
        self.ids: List[Optional[str]] = [None] * n
        self.done: Dict[str, Dict[str, Any]] = {}
        self.arrays: List[Optional[np.ndarray]] = [None] * n
        self.first_error: Optional[errors.TesselError] = None

    def take(self, lo: int, out: Dict[str, Any]) -> None:
        """The answer of the chunk whose first item is `lo`: ids and ended
        records in order, the succeeded ones' inline results converted at
        once (inlines: one NumPy call per shape)."""
        ok = []
        for k, item in enumerate(out["jobs"]):
            if "status" not in item:  # refused: {"error": ...}
                e = dict(item["error"])
                f = e.get("field") or ""
                e["field"] = f"jobs[{lo + k}]" + f[f.index("]") + 1:] if f else f
                self.first_error = self.first_error or _item_error(e)
                continue
            self.ids[lo + k] = item["id"]
            if item["status"] in _FINAL:
                self.done[item["id"]] = item
                if item["status"] == "succeeded" and "data" in (item.get("result") or {}):
                    ok.append(lo + k)
        if ok:
            got = inlines([self.done[self.ids[i]]["result"] for i in ok])  # type: ignore[index]
            for i, a in zip(ok, got):
                self.arrays[i] = a


class Batches:
    """The batch calls of `Client` (a mixin: needs ``_t``, ``_input``, ``max_wait``)."""

    def _jobs_json(self, kind: str, params: Sequence[Dict[str, Any]], opts: Dict[str, Any],
                   cleanup: List[Any]) -> bytes:
        """The JSON array of a chunk's job bodies (each with a request_id
        when the client retries). The chunk's array inputs are made lists
        together (smalls); one that is not small is uploaded
        (Client._input)."""
        bodies, slots, values = [], [], []
        keyed = self._t.retries > 0  # a chunk may be resent (_batch_call)
        extra = {k: v for k, v in opts.items() if v is not None}
        for p in params:
            q: Dict[str, Any] = {}
            for k, v in p.items():
                if v is None:
                    continue
                if k == "inputs":
                    q[k] = ins = {}
                    for n, x in v.items():
                        ins[n] = None
                        slots.append((ins, n, "params.inputs."))
                        values.append(x)
                elif k in _ARRAY_KEYS:
                    q[k] = None
                    slots.append((q, k, "params."))
                    values.append(v)
                else:
                    q[k] = v
            b = {"kind": kind, "params": q}
            b.update(extra)
            if keyed:
                b["request_id"] = _ids.next()
            bodies.append(b)
        for (d, k, where), v, s in zip(slots, values, smalls(values)):
            d[k] = s if s is not None else self._input(v, where + k, cleanup)
        return json.dumps(bodies, separators=(",", ":")).encode()

    def _run_many(self, kind: str, params: List[Dict[str, Any]],
                  opts: Dict[str, Any]) -> List[np.ndarray]:
        """The chunks (_chunks) go out as they are made, up to one per
        transfer thread in flight (each on its own connection) and one more
        made ahead: the server runs chunk k while this thread makes chunk
        k+1 and converts the answers in hand, in order."""
        cleanup: List[Any] = []
        call = _Call(len(params))
        try:
            # cuda items in one request (per 10,000): the server queues a
            # batch's items as one unit and its tiny jobs share one launch;
            # parts would gang apart (compute/sched/README.md, "Gangs")
            gang = opts.get("backend") == "cuda"
            workers = 1 if gang else self._t._nworkers()
            chunks = _chunks(len(params), workers)
            if len(chunks) == 1:
                r = chunks[0]
                call.take(r.start, self._batch_call(
                    self._jobs_json(kind, params[r.start:r.stop], opts, cleanup)))
            else:
                pool = self._t._workers()
                flight: Deque[Any] = collections.deque()
                try:
                    for r in chunks:  # made while `workers` chunks are in flight
                        body = self._jobs_json(kind, params[r.start:r.stop], opts, cleanup)
                        while len(flight) >= workers or (flight and flight[0][1].done()):
                            lo, fut = flight.popleft()
                            call.take(lo, fut.result())
                        flight.append((r.start, pool.submit(self._batch_call, body)))
                    while flight:
                        lo, fut = flight.popleft()
                        call.take(lo, fut.result())
                finally:  # an error: the chunks sent still end before cleanup
                    concurrent.futures.wait([f for _, f in flight])
            if call.first_error is not None:
                raise call.first_error
            return self._results(call.ids, call.done, call.arrays)  # type: ignore[arg-type]
        finally:
            for fn in cleanup:
                try:
                    fn()
                except Exception:
                    pass

    def _fields_call(self, path: str, body: Dict[str, Any], fields: List[str],
                     timeout: Optional[float]) -> Dict[str, Any]:
        """POST body to a batch call asking only `fields` of each job (a
        tiny job's whole record is ~1.5 KB: its estimate, params, timings);
        a server that has no "fields" (400 naming it) is asked again without."""
        def post(b):
            return self._t.request("POST", path, json.dumps(b).encode(),
                                   {"Content-Type": "application/json"}, timeout=timeout)[1]
        return self._t.newer("fields", lambda: post(dict(body, fields=fields)), lambda: post(body))

    def _batch_call(self, jobs: bytes) -> Dict[str, Any]:
        """One jobs:batch of `jobs` (a JSON array, _jobs_json) that waits for
        them to end and brings their small results (one request for a batch
        of tiny jobs); a server without "include" on jobs:batch: the batch
        alone. A chunk whose answer was lost (a connection that broke, a
        503) is sent once more: its request_ids make the server answer
        with the jobs it already made, not new ones."""
        wait = min(self.max_wait, 60.0)
        hdr = {"Content-Type": "application/json"}

        def post(path: str, rest: bytes, timeout: Optional[float]) -> Dict[str, Any]:
            body = b'{"jobs":' + jobs + rest + b"}"
            try:
                return self._t.request("POST", path, body, hdr, timeout=timeout)[1]
            except errors.Unavailable as e:
                if isinstance(e, errors.TooManyRequests) or not self._t.retries:
                    raise
                return self._t.request("POST", path, body, hdr, timeout=timeout)[1]

        def waited(fields: bytes) -> Dict[str, Any]:
            return post(f"/v1/jobs:batch?wait={wait:.3f}", b',"include":["result"]' + fields,
                        wait + 60)

        def alone(fields: bytes) -> Dict[str, Any]:
            return post("/v1/jobs:batch", fields, None)

        def ask(call: Callable[[bytes], Dict[str, Any]], fields: List[str]):
            mask = b',"fields":' + json.dumps(fields).encode()
            return self._t.newer("fields", lambda: call(mask), lambda: call(b""))
        return self._t.newer("include", lambda: ask(waited, _FIELDS),
                             lambda: ask(alone, ["status", "error"]))

    def _results(self, ids: List[str], done: Optional[Dict[str, Dict[str, Any]]] = None,
                 arrays: Optional[List[Optional[np.ndarray]]] = None) -> List[np.ndarray]:
        """The results of ids, in order: `arrays[i]` where the caller has it,
        else from the ended records in `done`, the others waited for with
        jobs:get; a result not inline is downloaded."""
        done = dict(done or {})
        pending = [i for i in dict.fromkeys(ids) if i not in done]
        while pending:
            nxt = []
            for lo in range(0, len(pending), BATCH_MAX):
                chunk = pending[lo:lo + BATCH_MAX]
                out = self._fields_call("/v1/jobs:get",
                                        {"ids": chunk, "wait": min(self.max_wait, 60.0),
                                         "include": ["result"]},
                                        _FIELDS, min(self.max_wait, 60.0) + 60)
                for j in out["jobs"]:
                    if "status" not in j:  # {"id", "error"}
                        raise _item_error(j["error"])
                    if j["status"] in _FINAL:
                        done[j["id"]] = j
                    else:
                        nxt.append(j["id"])
            pending = nxt
        res = []
        for k, i in enumerate(ids):
            a = arrays[k] if arrays is not None else None
            if a is None:
                j = done[i]
                if j["status"] != "succeeded":
                    if "kind" not in j:  # a partial record ("fields"): the whole job for the error
                        _, j = self._t.json("GET", f"/v1/jobs/{i}")
                    raise errors.from_job(j)
                a = inline(j.get("result") or {})
                if a is None:
                    a = self._t.download_npy(f"/v1/jobs/{i}/result", None)
            res.append(a)
        return res

    def map_many(self, expr: str, items: Sequence[Any], *, backend: str = "auto",
                 dtype: Optional[str] = None, priority: Optional[int] = None,
                 timeout_s: Optional[float] = None, label: Optional[str] = None,
                 **common: Any) -> List[np.ndarray]:
        """`map` over many inputs at once: one job each, few requests.

        Parameters
        ----------
        expr : str
            The elementwise expression (as `Client.map`).
        items : sequence
            One entry per job: an array_like bound to the expression's one
            free input (``x`` unless `common` names the others), or a dict
            of input name to array_like.
        backend, dtype, priority, timeout_s, label
            As `Client.map`, for every job.
        **common : array_like
            Inputs shared by every job (``y=...``).

        Returns
        -------
        list of ndarray
            The results, in the order of `items`.

        Raises
        ------
        InvalidArgument
            An item the server refused (``.field`` ``jobs[i]...``); raised
            after the other items were submitted.
        JobFailed
            A job failed while running.

        Examples
        --------
        >>> c.map_many("x*x", [[1.0, 2.0], [3.0]])
        [array([1., 4.]), array([9.])]
        """
        params = []
        for it in items:
            ins = dict(common)
            if type(it) is not np.ndarray and isinstance(it, Mapping):
                ins.update(it)
            else:
                ins["x"] = it
            params.append({"expr": expr, "dtype": dtype, "inputs": ins})
        return self._run_many("map", params, dict(backend=backend, priority=priority,
                                                  timeout_s=timeout_s, label=label))

    def reduce_many(self, op: str, items: Sequence[Any], *, expr: Optional[str] = None,
                    axis: Optional[int] = None, backend: str = "auto",
                    priority: Optional[int] = None, timeout_s: Optional[float] = None,
                    label: Optional[str] = None, **common: Any) -> List[np.ndarray]:
        """`reduce` over many inputs at once (one job each).

        Parameters
        ----------
        op : str
            "sum", "mean", "min", "max", ... (as `Client.reduce`).
        items : sequence
            One entry per job: an array_like (input ``x``) or a dict of
            inputs.
        expr : str, optional
            An expression reduced instead of ``x`` (as `Client.reduce`).
        axis : int, optional
            The axis reduced; default all.
        backend, priority, timeout_s, label
            As `Client.reduce`, for every job.
        **common : array_like
            Inputs shared by every job.

        Returns
        -------
        list of ndarray

        Examples
        --------
        >>> [float(s) for s in c.reduce_many("sum", [[1.0, 2.0], [3.0]])]
        [3.0, 3.0]
        """
        params = []
        for it in items:
            ins = dict(common)
            if type(it) is not np.ndarray and isinstance(it, Mapping):
                ins.update(it)
            else:
                ins["x"] = it
            params.append({"op": op, "expr": expr, "axis": axis, "inputs": ins})
        return self._run_many("reduce", params, dict(backend=backend, priority=priority,
                                                     timeout_s=timeout_s, label=label))

    def geodesic_many(self, items: Sequence[Any], *, method: str = "karney",
                      units: str = "m", backend: str = "auto",
                      priority: Optional[int] = None, timeout_s: Optional[float] = None,
                      label: Optional[str] = None, **common: Any) -> List[np.ndarray]:
        """`geodesic` distance matrices of many point sets (one job each).

        Parameters
        ----------
        items : sequence
            One entry per job: the points (an (n, 2) array_like of lat, lon
            in degrees), or a dict with ``points`` and ``targets``.
        method, units, backend, priority, timeout_s, label
            As `Client.geodesic`, for every job.
        **common
            Other geodesic parameters shared by every job (``layout=...``).

        Returns
        -------
        list of ndarray

        Examples
        --------
        >>> [m.shape for m in c.geodesic_many([[(0, 0), (0, 1)], [(0, 0), (1, 0), (2, 0)]])]
        [(2, 2), (3, 3)]
        """
        params = []
        for it in items:
            p = dict(common, method=method, units=units)
            if type(it) is not np.ndarray and isinstance(it, Mapping):
                p.update(it)
            else:
                p["points"] = np.asarray(it, dtype=np.float64)
            params.append(p)
        return self._run_many("geodesic", params, dict(backend=backend, priority=priority,
                                                       timeout_s=timeout_s, label=label))


class Coalescer:
    """Gathers the submits of several threads made while one is in flight.

    The first submit (no request in flight) is sent as it always was, one
    ``POST /v1/jobs``: a lone caller pays nothing more. Submits made by
    other threads meanwhile queue up; when the request in flight returns,
    its thread sends the queue as ``POST /v1/jobs:batch`` requests (one per
    ``?wait`` value, at most 10,000 items each) and hands every caller its
    own job or its own error (its field as the single submit names it).
    An item refused for a full queue (429), and every item when the
    server has no jobs:batch, is sent again alone, with the usual retries.
    """

    def __init__(self, transport: Any) -> None:
        self._t = transport
        self._lock = threading.Lock()
        self._busy = False
        self._queue: List[List[Any]] = []
        self._no_batch = False
        self.batches = 0  # jobs:batch requests sent (for tests and benchmarks)

    def submit(self, body: Dict[str, Any], query: str,
               single: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
        """The job JSON of `body`: by `single()`, or from a batch."""
        with self._lock:
            lead = not self._busy or self._no_batch
            if lead:
                self._busy = True
            else:  # a slot (and its Event) only for a submit that waits
                slot: List[Any] = [body, query, threading.Event(), None, None]
                self._queue.append(slot)
        if not lead:
            slot[2].wait()
            if slot[4] is not None:
                if getattr(slot[4], "code", None) == "too_many_requests" or slot[4] is _ALONE:
                    return single()
                raise slot[4]
            return slot[3]
        try:
            return single()
        finally:
            self._drain()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._busy = False
                    return
                q = self._queue[0][1]
                batch = [s for s in self._queue if s[1] == q][:BATCH_MAX]
                taken = set(map(id, batch))
                self._queue = [s for s in self._queue if id(s) not in taken]
            self._send(batch, q)

    def _send(self, batch: List[List[Any]], q: str) -> None:
        try:
            if self._no_batch:
                raise _NoBatch()
            wait = float(q.split("=", 1)[1]) if q else 0.0
            body: Dict[str, Any] = {"jobs": [s[0] for s in batch]}

            def post(b):
                return self._t.request("POST", "/v1/jobs:batch" + q, json.dumps(b).encode(),
                                       {"Content-Type": "application/json"},
                                       timeout=(wait + 60) if wait else None)[1]
            # a job ended by the answer brings its small result
            out = self._t.newer("include", lambda: post(dict(body, include=["result"])),
                                lambda: post(body))
            self.batches += 1
            for s, item in zip(batch, out["jobs"]):
                if "status" in item:
                    s[3] = item
                else:
                    e = dict(item["error"])
                    f = e.get("field") or ""
                    rest = f[f.index("]") + 1:] if "]" in f else ""
                    e["field"] = rest[1:] if rest.startswith(".") else rest
                    s[4] = _item_error(e)
        except (_NoBatch, errors.NotFound, errors.TesselError) as e:
            if isinstance(e, _NoBatch) or getattr(e, "status", 0) in (404, 405):
                self._no_batch = True
                for s in batch:
                    s[4] = _ALONE
            else:
                for s in batch:
                    s[4] = e
        except BaseException as e:
            for s in batch:
                s[4] = e
        finally:
            for s in batch:
                s[2].set()


class _NoBatch(Exception):
    pass


_ALONE = _NoBatch()  # "send it alone": this server has no jobs:batch
