"""tessel.Job: a job on the server that is a concurrent.futures.Future, and
the per-client waiter thread that finishes those futures.

A Job's Future result is set from the server's final job JSON; Job.result()
then downloads the result array once (or maps the same-host output file)
and keeps it, so every call returns the same array. A Job ends in exactly
one of: set_result (succeeded), set_exception(JobFailed) (failed) or the
Future's cancelled state (canceled on the server, by anyone), through
_update, whichever thread sees the final status first (a lock makes it once).

Waiting has no 60 s limit: result()/wait() asks GET /v1/jobs/{id}?wait=
(the server holds the request until the job ends or the wait passes, at
most 60 s; API.md) again and again until it ends. Everything else — add_done_callback,
concurrent.futures.wait / as_completed, done() — is served by the Waiter:
one daemon thread per Client that polls the pending jobs (one GET each when
few, the queued and running lists when many), backing off from 20 ms to
0.5 s, so callbacks run on that thread.

The reaper (one daemon thread per process) removes the temporary same-host
files: a job's input files once it ended, its output file once the Job is
gone (an array mapped from it stays valid).

Job's public methods are annotated and carry NumPy-style docstrings whose
examples run as doctests (tests/test_docs.py).
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import threading
import time
import warnings
import weakref
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import errors

FINAL = ("succeeded", "failed", "canceled")


class Job(concurrent.futures.Future):
    """A job on the server, as a concurrent.futures.Future.

    Made by ``c.submit*``, ``c.job(id)`` and ``c.jobs()``, never directly.
    ``wait``, ``as_completed`` and ``add_done_callback`` work as for any
    Future; ``result()`` has no 60 s limit.

    Attributes
    ----------
    id : str
        ``j_...``.
    kind, status : str
    progress : tuple of int
        (done, total) chunks.
    timings : dict
        Milliseconds per phase (``timings_ms``).
    backend : dict
        Requested, used, why, and a cuda run's ``devices`` once it ended
        (``used`` is ``"cuda:0+cuda:1"`` for a run over several GPUs).
    info : dict
        The last job JSON the server answered.

    Examples
    --------
    >>> j = c.submit_map("x*2", x=[1.0, 2.0])
    >>> j.result(), j.status
    (array([2., 4.]), 'succeeded')
    """

    def __init__(self, client: Any, info: Dict[str, Any], cleanup: Optional[list] = None,
                 output_file: Optional[str] = None, owns_file: bool = False) -> None:
        super().__init__()
        self.client = client
        self.id = info["id"]
        self.info = info
        self._cleanup = cleanup or []  # callables run once the job ended
        self._output_file = output_file
        self._array = None
        self._parts = {}  # part name -> array, once downloaded
        self._out_block = None  # (Region, offset, array): its output region block
        self._ulock = threading.Lock()
        self._ended = False
        if output_file and owns_file:
            # The same-host output file lives as long as this Job (an array
            # mapped from it stays valid after the unlink).
            weakref.finalize(self, reaper.unlink, output_file)
        self._update(info)

    def __repr__(self) -> str:
        return f"<tessel.Job {self.id} {self.kind} {self.status}>"

    # -- what the server says ------------------------------------------------
    @property
    def kind(self) -> Optional[str]:
        """The job's kind: "map", "reduce", "matmul", "geodesic"."""
        return self.info.get("kind")

    @property
    def status(self) -> Optional[str]:
        """queued, running, succeeded, failed or canceled (as last seen)."""
        return self.info.get("status")

    @property
    def progress(self) -> Tuple[int, int]:
        """(done, total) chunks, as last seen."""
        p = self.info.get("progress") or {}
        return (p.get("done", 0), p.get("total", 0))

    @property
    def timings(self) -> Dict[str, Any]:
        """Milliseconds per phase (the job's ``timings_ms``)."""
        return self.info.get("timings_ms") or {}

    @property
    def backend(self) -> Dict[str, Any]:
        """The backend requested, used, the reason, and ``devices``: a cuda
        run's GPUs once it ended (API.md, ``backend.devices``), each with
        the rows and blocks it wrote when the job ran over several; None
        otherwise. ``used`` then names the GPUs that wrote rows,
        ``"cuda:0+cuda:1"`` (its family before the first ``:``)."""
        return self.info.get("backend") or {}

    @property
    def compare_table(self) -> Optional[List[Dict[str, Any]]]:
        """The backends' records of a compare job, else None."""
        return self.info.get("compare")

    def refresh(self) -> Dict[str, Any]:
        """Ask the server for the job now (GET /v1/jobs/{id}).

        Returns
        -------
        dict
            The job JSON, also kept as ``.info``.

        Examples
        --------
        >>> j = c.submit_map("x", x=[1.0], wait=60)
        >>> j.refresh()["status"]
        'succeeded'
        """
        _, info = self.client._t.json("GET", f"/v1/jobs/{self.id}")
        self._update(info)
        return info

    def _update(self, info):
        st = info.get("status")
        with self._ulock:
            # A snapshot taken before the job ended (the waiter's poll of
            # the queued list, answered late) never replaces a final one.
            if st not in FINAL:
                if not self._ended:
                    self.info = info
                return
            self.info = info
            if self._ended:
                return
            self._ended = True
        for fn in self._cleanup:
            try:
                fn()
            except Exception:  # best effort: a temporary left behind is harmless
                pass
        self._cleanup = []
        if st == "succeeded":
            self.set_result(info)
        elif st == "failed":
            self.set_exception(errors.from_job(info))
        else:
            concurrent.futures.Future.cancel(self)
            self.set_running_or_notify_cancel()  # tells wait()/as_completed

    # -- waiting -----------------------------------------------------------
    def running(self) -> bool:
        """True while the job runs on the server (as last seen).

        Returns
        -------
        bool

        Examples
        --------
        >>> c.submit_map("x", x=[1.0], wait=60).running()  # it ended
        False
        """
        return self.status == "running"

    def _get_waiting(self, w: float):
        """GET ?wait=w; with include=result when the server keeps the result
        (a small one then comes inline: no download after)."""
        t = self.client._t
        path = f"/v1/jobs/{self.id}?wait={w:.3f}"
        if self._output_file or getattr(self, "_out_block", None) is not None:
            return t.json("GET", path, timeout=w + 60)
        return t.newer("include", lambda: t.json("GET", path + "&include=result", timeout=w + 60),
                       lambda: t.json("GET", path, timeout=w + 60))

    def wait(self, timeout: Optional[float] = None, progress: bool = False) -> bool:
        """Wait until the job ended, without downloading its result.

        Parameters
        ----------
        timeout : float, optional
            Seconds; None waits as long as it takes (asking the server
            again every `max_wait` seconds).
        progress : bool, optional
            Show a tqdm progress bar.

        Returns
        -------
        bool
            True when it ended, False when `timeout` passed first.

        Examples
        --------
        >>> j = c.submit_map("x + 1", x=[1.0])
        >>> j.wait(60), j.status
        (True, 'succeeded')
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = _bar(self, progress)
        try:
            while not self.done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                if bar is not None:
                    time.sleep(min(0.25, left) if left is not None else 0.25)
                    self.refresh()
                    bar.show(self)
                else:
                    # GET ?wait holds the request until the job ends or w
                    # passes (API.md); asked again until it ends.
                    w = self.client.max_wait if left is None else max(0.001, min(self.client.max_wait, left))
                    self.client._waits.step(self, w)
            if bar is not None:
                bar.show(self)
        finally:
            if bar is not None:
                bar.close()
        return True

    def result(self, timeout: Optional[float] = None, progress: bool = False,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        """The job's result as a NumPy array, once it ended.

        Downloaded once and kept (or mapped from a same-host file): every
        call returns the same array. A result of several parts (a kNN or
        radius query) answers its first part here: see `part`.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait; None: as long as it takes.
        progress : bool, optional
            Show a tqdm progress bar while waiting.
        out : ndarray, optional
            An array of the result's shape and dtype to read into; returned.

        Returns
        -------
        ndarray

        Raises
        ------
        JobFailed
            The job failed (``.code``, ``.field``, ``.job``).
        Canceled
            The job was canceled (a concurrent.futures.CancelledError).
        concurrent.futures.TimeoutError
            `timeout` passed first.

        Examples
        --------
        >>> c.submit_map("x / 2", x=[1.0, 3.0]).result(timeout=60)
        array([0.5, 1.5])
        """
        if not self.wait(timeout, progress):
            raise concurrent.futures.TimeoutError(f"job {self.id} still {self.status}")
        if self.cancelled():
            raise errors.from_job(self.info)
        super().result(0)  # raises the JobFailed set by _update
        if self._array is None or out is not None:
            arr = self.client._fetch_result(self, out)
            if out is not None:
                return arr
            self._array = arr
        return self._array

    @property
    def part_names(self) -> List[str]:
        """The names of the result's parts (API.md "Results of several
        arrays"), e.g. ["distance", "index"] for a kNN query; [] for a
        result of one array."""
        r = self.info.get("result") or {}
        return [p["name"] for p in r.get("parts") or []]

    def part(self, name: str, timeout: Optional[float] = None,
             out: Optional[np.ndarray] = None) -> np.ndarray:
        """One part of a result of several arrays, e.g. a kNN query's "index".

        Parameters
        ----------
        name : str
            One of `part_names`: "distance" and "index" for a kNN query;
            "i", "j" and "distance" for a radius query.
        timeout : float, optional
            Seconds to wait for the job; None: as long as it takes.
        out : ndarray, optional
            An array of the part's shape and dtype to read into.

        Returns
        -------
        ndarray
            In the part's own dtype (int64 parts stay int64); downloaded
            once and kept.

        Raises
        ------
        NotFound
            No part of that name.
        JobFailed, Canceled, concurrent.futures.TimeoutError
            As `result`.

        Examples
        --------
        >>> j = c.submit_geodesic([(0, 0), (0, 1), (0, 3)], query={"knn": {"k": 2}})
        >>> j.part("index")
        array([[1, 2],
               [0, 2],
               [1, 0]])
        >>> j.part("distance").dtype
        dtype('float64')
        """
        if not self.wait(timeout):
            raise concurrent.futures.TimeoutError(f"job {self.id} still {self.status}")
        if self.cancelled():
            raise errors.from_job(self.info)
        super().result(0)
        if out is None and name in self._parts:
            return self._parts[name]
        arr = self.client._fetch_part(self, name, out)
        if out is None:
            self._parts[name] = arr
        return arr

    def parts(self, timeout: Optional[float] = None) -> Dict[str, np.ndarray]:
        """Every part of the result, by name.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for the job.

        Returns
        -------
        dict of str to ndarray
            {} for a result of one array.

        Examples
        --------
        >>> j = c.submit_geodesic([(0, 0), (0, 1)], query={"radius": {"r": 200000}})
        >>> sorted(j.parts())
        ['distance', 'i', 'j']
        """
        if not self.wait(timeout):
            raise concurrent.futures.TimeoutError(f"job {self.id} still {self.status}")
        return {n: self.part(n) for n in self.part_names}

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The job's error (JobFailed or Canceled) once it ended, else None.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for the job; None: as long as it takes.

        Returns
        -------
        JobFailed, Canceled or None

        Raises
        ------
        concurrent.futures.TimeoutError
            `timeout` passed first.

        Examples
        --------
        >>> c.submit_map("x", x=[1.0]).exception(60) is None
        True
        """
        if not self.wait(timeout):
            raise concurrent.futures.TimeoutError(f"job {self.id} still {self.status}")
        if self.cancelled():
            return errors.from_job(self.info)
        return super().exception(0)

    def cancel(self) -> bool:
        """Cancel the job on the server.

        Returns
        -------
        bool
            True when the job ended canceled; False when it had already
            ended (or finished before it could stop).

        Examples
        --------
        >>> j = c.submit_map("x", x=[1.0], wait=60)
        >>> j.cancel()  # it had already succeeded
        False
        """
        if self.done():
            return self.cancelled()
        try:
            st, info = self.client._t.request("POST", f"/v1/jobs/{self.id}/cancel")
        except errors.Conflict:
            self.refresh()
            return self.cancelled()
        self._update(info)
        deadline = time.monotonic() + 60
        while not self.done() and time.monotonic() < deadline:  # 202: stopping
            time.sleep(0.02)
            self.refresh()
        return self.cancelled()

    def delete(self) -> None:
        """Remove the ended job and its stored result from the server.

        Raises
        ------
        Conflict
            The job has not ended.

        Examples
        --------
        >>> j = c.submit_map("x", x=[1.0], wait=60)
        >>> j.delete()
        """
        self.client._t.request("DELETE", f"/v1/jobs/{self.id}")


def _unlink_quiet(path):
    try:
        os.unlink(path)
    except OSError:
        pass


class _Reaper:
    """Removes temporary same-host files on one background daemon thread.

    Unlinking a file of 800 MB in tmpfs frees its pages: 77 ms on the 2-core
    VM, inside c.map()'s time when done where the job ends. Queued here, the
    caller goes on. drain() removes what is queued in the calling thread and
    waits for the one being removed; Client.close() and the interpreter's
    exit (atexit) call it, and after the exit's drain unlink() removes at
    once, so a normal exit leaves nothing behind. One per process; the lock
    (a Condition) guards the queue, the busy count and the thread."""

    def __init__(self):
        self._cv = threading.Condition()
        self._q = []
        self._busy = 0
        self._thread = None
        self._exiting = False
        atexit.register(self._at_exit)

    def unlink(self, path):
        with self._cv:
            if not self._exiting:
                self._q.append(path)
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name="tessel-reaper",
                                                    daemon=True)
                    self._thread.start()
                self._cv.notify_all()
                return
        _unlink_quiet(path)

    def _run(self):
        while True:
            with self._cv:
                while not self._q:
                    self._cv.wait()
                path = self._q.pop(0)
                self._busy += 1
            _unlink_quiet(path)
            with self._cv:
                self._busy -= 1
                self._cv.notify_all()

    def drain(self):
        """Return once every path queued so far is removed."""
        with self._cv:
            todo, self._q = self._q, []
        for p in todo:
            _unlink_quiet(p)
        with self._cv:
            while self._busy:
                self._cv.wait()

    def _at_exit(self):
        with self._cv:
            self._exiting = True
        self.drain()


reaper = _Reaper()


class _Bar:
    def __init__(self, tqdm, job):
        self.t = tqdm(total=0, desc=f"{job.kind} {job.id}", unit="chunk")

    def show(self, job):
        done, total = job.progress
        if total and self.t.total != total:
            self.t.total = total
            self.t.refresh()
        if done > self.t.n:
            self.t.update(done - self.t.n)
        self.t.set_postfix_str(job.status or "")

    def close(self):
        self.t.close()


_warned_tqdm = False


def _bar(job, progress):
    global _warned_tqdm
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if not _warned_tqdm:
            warnings.warn("progress=True needs tqdm (pip install tqdm / apt install python3-tqdm)")
            _warned_tqdm = True
        return None
    return _Bar(tqdm, job)


def _apply_get(jobs, answers):
    """A jobs:get answer into its Jobs (in the order asked); an id the
    server no longer has ends its Job failed, not_found."""
    for j, info in zip(jobs, answers):
        if "status" in info:
            j._update(info)
        elif (info.get("error") or {}).get("code") == "not_found":
            j._update(dict(j.info, status="failed", error={
                "code": "not_found", "message": "the job was deleted"}))


class WaitGroup:
    """Threads waiting in Job.wait at once share their requests (issue 26:
    an executor's threads each waiting for a tiny job).

    One thread at a time leads a round: alone, its job's GET ?wait (the
    server holds it until the end); with others queued, one POST
    /v1/jobs:get for all of them with a short wait (ROUND), so that one
    job that runs long holds no other's answer for more than that. A
    thread that finds a round in flight queues its job for the next one
    and waits up to JOIN for it to end; if it has not (a long single
    wait), it asks alone, as before. Every answer carries small results
    (include=result). A server without jobs:get is asked job by job.
    Threads: the condition guards busy and the queue."""

    JOIN = 0.02
    ROUND = 0.05

    def __init__(self, client):
        self._client = weakref.ref(client)
        self._cv = threading.Condition()
        self._busy = False
        self._queue = []
        self.rounds = 0  # jobs:get rounds sent (tests, benchmarks)

    def step(self, job, w):
        """Return once job's state was asked for at least once (or it ended)."""
        deadline = time.monotonic() + self.JOIN
        with self._cv:
            while self._busy and not job.done():
                if job not in self._queue:
                    self._queue.append(job)
                rem = deadline - time.monotonic()
                if rem <= 0:
                    break
                self._cv.wait(rem)
            if job.done():
                return
            lead = not self._busy
            if lead:
                self._busy = True
                batch = list({id(j): j for j in [job] + self._queue if not j.done()}.values())
                self._queue = []
            elif job in self._queue:
                self._queue.remove(job)
        if not lead:  # the round in flight waits long: ask alone
            _, info = job._get_waiting(w)
            job._update(info)
            return
        try:
            if len(batch) == 1 or getattr(self._client(), "_no_get_many", False):
                _, info = job._get_waiting(w)
                job._update(info)
            else:
                self._get_many(batch, min(w, self.ROUND))
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()

    def _get_many(self, batch, w):
        client = self._client()
        try:
            _, out = client._t.json("POST", "/v1/jobs:get",
                                    {"ids": [j.id for j in batch], "wait": w,
                                     "include": ["result"]}, timeout=w + 60)
        except errors.TesselError as e:
            if e.status not in (404, 405):
                raise
            client._no_get_many = True  # an older server: the next rounds go alone
            return
        self.rounds += 1
        _apply_get(batch, out["jobs"])


class Waiter:
    """The client's one background thread finishing pending Jobs (daemon
    thread; started on first use, sleeps when nothing is pending)."""

    def __init__(self, client):
        self._client = weakref.ref(client)
        self._pending = {}
        self._cv = threading.Condition()
        self._thread = None
        self._closed = False

    def add(self, job):
        if job.done():
            return
        with self._cv:
            self._pending[id(job)] = job  # two Jobs of one id are both finished
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tessel-waiter", daemon=True)
                self._thread.start()
            self._cv.notify()

    def close(self):
        with self._cv:
            self._closed = True
            self._cv.notify()

    def _run(self):
        delay = 0.02
        while True:
            with self._cv:
                while not self._pending and not self._closed:
                    self._cv.wait()
                    delay = 0.02
                if self._closed:
                    return
                jobs = list(self._pending.values())
            client = self._client()
            if client is None:
                return
            try:
                self._poll(client, jobs)
            except errors.TesselError:
                pass  # the next round tries again
            del client
            with self._cv:
                for j in jobs:
                    if j.done():
                        self._pending.pop(id(j), None)
                self._cv.wait(delay)
            delay = min(0.5, delay * 1.5)

    @staticmethod
    def _poll(client, jobs):
        """Refresh the pending jobs: one POST /v1/jobs:get per 10,000 of
        them (no wait: each future resolves as soon as a poll sees its job
        ended); a server without jobs:get is polled job by job."""
        if not getattr(client, "_no_get_many", False):
            try:
                for lo in range(0, len(jobs), 10000):
                    chunk = jobs[lo:lo + 10000]
                    _, out = client._t.json("POST", "/v1/jobs:get",
                                            {"ids": [j.id for j in chunk],
                                             "include": ["result"]})
                    _apply_get(chunk, out["jobs"])
                return
            except errors.TesselError as e:
                if e.status not in (404, 405):
                    raise
                client._no_get_many = True  # an older server
        Waiter._poll_each(client, jobs)

    @staticmethod
    def _poll_each(client, jobs):
        t = client._t
        if len(jobs) > 16:
            live = set()
            for st in ("queued", "running"):
                _, page = t.json("GET", f"/v1/jobs?status={st}&limit=1000")
                live.update(j["id"] for j in page["jobs"])
                if page.get("next_cursor"):
                    live = None
                    break
            if live is not None:
                jobs = [j for j in jobs if j.id not in live]
        for j in jobs:
            try:
                j.refresh()
            except errors.NotFound:
                j._update(dict(j.info, status="failed",
                               error={"code": "not_found", "message": "the job was deleted"}))
