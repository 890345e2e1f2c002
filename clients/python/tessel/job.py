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
"""
import atexit
import concurrent.futures
import os
import threading
import time
import warnings
import weakref

import numpy as np

from . import errors

FINAL = ("succeeded", "failed", "canceled")


class Job(concurrent.futures.Future):
    """A job. .id, .kind, .status, .progress (done, total), .timings (ms),
    .backend (requested, used, reason), .info (the last job JSON)."""

    def __init__(self, client, info, cleanup=None, output_file=None, owns_file=False):
        super().__init__()
        self.client = client
        self.id = info["id"]
        self.info = info
        self._cleanup = cleanup or []  # callables run once the job ended
        self._output_file = output_file
        self._array = None
        self._parts = {}  # part name -> array, once downloaded
        self._ulock = threading.Lock()
        self._ended = False
        if output_file and owns_file:
            # The same-host output file lives as long as this Job (an array
            # mapped from it stays valid after the unlink).
            weakref.finalize(self, reaper.unlink, output_file)
        self._update(info)

    def __repr__(self):
        return f"<tessel.Job {self.id} {self.kind} {self.status}>"

    # -- what the server says ------------------------------------------------
    @property
    def kind(self):
        return self.info.get("kind")

    @property
    def status(self):
        return self.info.get("status")

    @property
    def progress(self):
        p = self.info.get("progress") or {}
        return (p.get("done", 0), p.get("total", 0))

    @property
    def timings(self):
        return self.info.get("timings_ms") or {}

    @property
    def backend(self):
        return self.info.get("backend") or {}

    @property
    def compare_table(self):
        return self.info.get("compare")

    def refresh(self):
        """GET the job now; returns its JSON."""
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
    def running(self):
        return self.status == "running"

    def wait(self, timeout=None, progress=False):
        """Wait until the job ended (no download). True when it did."""
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
                    _, info = self.client._t.json(
                        "GET", f"/v1/jobs/{self.id}?wait={w:.3f}", timeout=w + 60)
                    self._update(info)
            if bar is not None:
                bar.show(self)
        finally:
            if bar is not None:
                bar.close()
        return True

    def result(self, timeout=None, progress=False, out=None):
        """The result as a NumPy array (downloaded once and kept). Raises
        JobFailed, Canceled, or concurrent.futures.TimeoutError."""
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
    def part_names(self):
        """The names of the result's parts (API.md "Results of several
        arrays"); [] for a result of one array."""
        r = self.info.get("result") or {}
        return [p["name"] for p in r.get("parts") or []]

    def part(self, name, timeout=None, out=None):
        """Part `name` of the result as a NumPy array (int64 parts stay
        int64), downloaded once and kept (or into out)."""
        if not self.wait(timeout):
            raise concurrent.futures.TimeoutError(f"job {self.id} still {self.status}")
        if self.cancelled():
            raise errors.from_job(self.info)
        super().result(0)
        if out is None and name in self._parts:
            return self._parts[name]
        arr = self.client._t.download_npy(f"/v1/jobs/{self.id}/result/{name}", out)
        if out is None:
            self._parts[name] = arr
        return arr

    def parts(self, timeout=None):
        """Every part of the result: {name: array}."""
        if not self.wait(timeout):
            raise concurrent.futures.TimeoutError(f"job {self.id} still {self.status}")
        return {n: self.part(n) for n in self.part_names}

    def exception(self, timeout=None):
        if not self.wait(timeout):
            raise concurrent.futures.TimeoutError(f"job {self.id} still {self.status}")
        if self.cancelled():
            return errors.from_job(self.info)
        return super().exception(0)

    def cancel(self):
        """Cancel on the server. True when the job ended canceled; False
        when it had already ended (or finished before it could stop)."""
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

    def delete(self):
        """DELETE the finished job (and its stored result) on the server."""
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
