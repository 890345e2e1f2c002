"""Parallel-stream transfers (transport.py): an array of 64 MiB and more goes
up in parts over several connections and comes down in byte ranges over
several connections, into one preallocated array; the bytes are the bytes.

Counted on the client's hook (Transport.on_request, connections_opened), so
nothing here is timed. Also: a small array keeps to one upload request; a
transport with upload_streams=1 sends a big one in one piece, and by default
in as many parts as the server advises (the upload's `streams`); a server that
answers 404 to POST /v1/uploads (a fake, older server) is used the
one-stream way.
"""
import collections
import threading

import numpy as np
import pytest

import tessel
from tessel import transport


def _recorder(t):
    """Count requests as (method, has a Range header, the path's first two
    segments) and the threads that sent them."""
    seen = collections.Counter()
    lock = threading.Lock()
    threads = set()

    def hook(method, path, headers):
        room = "/".join(path.split("?")[0].split("/")[:3])  # "/v1/uploads"
        with lock:
            seen[(method, "Range" in headers, room)] += 1
            threads.add(threading.get_ident())

    t.on_request = hook
    return seen, threads


def test_big_round_trip_uses_several_connections(daemon):
    with tessel.Client(daemon.url, same_host=False, streams=4, upload_streams=4) as c:
        t = c._t
        seen, threads = _recorder(t)
        rng = np.random.default_rng(7)
        a = rng.standard_normal(9 * 1024 * 1024)  # 72 MiB of float64
        before = t.connections_opened
        arr = c.upload(a)
        puts = seen[("PUT", False, "/v1/uploads")]
        assert puts >= 4, seen
        assert t.connections_opened - before >= 2
        assert len(threads) >= 2
        # The one-piece upload of the same bytes gives the same id.
        with tessel.Client(daemon.url, same_host=False, streams=1, upload_streams=1) as c1:
            assert c1.upload(a).id == arr.id
        seen.clear()
        back = arr.download()
        ranged = sum(n for (m, rng_, _), n in seen.items() if m == "GET" and rng_)
        assert ranged >= 3, seen
        assert back.dtype == a.dtype and back.shape == a.shape
        assert back.tobytes() == a.tobytes()
        # Into a caller's out, and a job's result the same way.
        out = np.empty_like(a)
        assert arr.download(out) is out and np.array_equal(out, a)
        seen.clear()
        r = c.map("x * 2", x=arr)
        assert np.array_equal(r, a * 2)
        assert sum(n for (m, rng_, _), n in seen.items() if m == "GET" and rng_) >= 3


def test_small_array_one_request(daemon):
    with tessel.Client(daemon.url, same_host=False, streams=4, upload_streams=4) as c:
        seen, _ = _recorder(c._t)
        arr = c.upload(np.arange(1000.0))
        assert not any(m == "PUT" for (m, _, _) in seen), seen
        assert np.array_equal(arr.download(), np.arange(1000.0))


def test_streams_one_sends_one_piece(daemon):
    with tessel.Client(daemon.url, same_host=False, streams=1, upload_streams=1) as c:
        seen, _ = _recorder(c._t)
        a = np.arange(9 * 1024 * 1024, dtype=np.float64)
        arr = c.upload(a)
        assert not any(m == "PUT" for (m, _, _) in seen)
        assert np.array_equal(arr.download(), a)
        assert not any(r for (_, r, _) in seen)


def test_falls_back_without_uploads_route(daemon, monkeypatch):
    with tessel.Client(daemon.url, same_host=False, streams=4, upload_streams=4) as c:
        t = c._t
        real = t.json

        def no_uploads(method, path, obj=None, timeout=None):
            if path == "/v1/uploads":
                raise tessel.errors.NotFound("no route", status=404, code="not_found")
            return real(method, path, obj, timeout)

        monkeypatch.setattr(t, "json", no_uploads)
        a = np.linspace(0, 1, 9 * 1024 * 1024)
        arr = c.upload(a)
        assert t._no_parts
        assert np.array_equal(arr.download(), a)


def test_streams_must_be_positive():
    with pytest.raises(ValueError):
        transport.Transport("http://127.0.0.1:1", streams=0)
    with pytest.raises(ValueError):
        transport.Transport("http://127.0.0.1:1", upload_streams=0)


def _advice(c):
    """The server's `streams` for a new upload (the upload then deleted)."""
    _, up = c._t.json("POST", "/v1/uploads", {"dtype": "float64", "shape": [8]})
    c._t.request("DELETE", f"/v1/uploads/{up['id']}")
    assert isinstance(up["streams"], int) and 1 <= up["streams"] <= 8, up
    return up["streams"]


def _default_round_trip(url, together=False):
    """A 72 MiB array up and down with the defaults; returns the advice and
    what was sent (the PUTs, the threads that sent them). together: every
    PUT waits at a barrier of `advice` parties (30 s; it breaks, and the
    upload fails, unless that many PUTs are on their way at once)."""
    with tessel.Client(url, same_host=False) as c:
        assert c._t.upload_streams is None and c._t.streams > 1
        advice = _advice(c)
        seen, _ = _recorder(c._t)
        counting = c._t.on_request
        gate = threading.Barrier(advice, timeout=30)
        put_threads = set()

        def hook(method, path, headers):
            counting(method, path, headers)
            if method == "PUT":
                put_threads.add(threading.get_ident())
                if together:
                    gate.wait()

        c._t.on_request = hook
        a = np.arange(9 * 1024 * 1024, dtype=np.float64)
        arr = c.upload(a)
        c._t.on_request = counting
        puts = seen[("PUT", False, "/v1/uploads")]
        up_threads = put_threads
        seen.clear()
        assert np.array_equal(arr.download(), a)
        assert sum(n for (m, r, _), n in seen.items() if m == "GET" and r) >= 3, seen
        with tessel.Client(url, same_host=False, streams=1, upload_streams=1) as c1:
            assert c1.upload(a).id == arr.id  # the same bytes, the same id
        return advice, puts, up_threads


def test_default_uploads_as_the_server_advises(daemon):
    """The defaults: a big upload in as many parts at once as the upload's
    `streams` says (1: one PUT of the whole array on the caller's thread),
    its download in ranges over several connections."""
    advice, puts, threads = _default_round_trip(daemon.url)
    if advice == 1:
        assert puts == 1 and threads == {threading.get_ident()}, (puts, threads)
    else:
        assert puts == 2 * advice and 1 <= len(threads) <= advice, (puts, threads)


def test_mapped_parts_advise_several():
    """A server whose parts are copied into the file's mapping
    (TESSEL_PARTS_MAP=1: the default on 4 CPUs or more) advises several
    parts at once, at most its big bodies at once (--http-threads 3: 2),
    and the client with its defaults sends that many at once (a barrier of
    2 on every PUT), its parts in file order over 2 threads; with
    TESSEL_PARTS_MAP=0 it advises 1 whatever the machine."""
    from conftest import Daemon
    d = Daemon(extra=("--http-threads", "3"), env={"TESSEL_PARTS_MAP": "1"})
    try:
        advice, puts, threads = _default_round_trip(d.url, together=True)
        assert advice == 2, advice
        assert puts == 4 and len(threads) == 2, (puts, threads)
    finally:
        d.stop()
    d = Daemon(env={"TESSEL_PARTS_MAP": "0"})
    try:
        advice, puts, threads = _default_round_trip(d.url)
        assert advice == 1 and puts == 1, (advice, puts)
    finally:
        d.stop()


def test_two_uploads_share_the_advice():
    """Two big inputs of one call go up at once and share the parts the
    server advises (2 here: each sends its array as 1 PUT, the two PUTs at
    a barrier of 2), rather than each asking for all of them (they then
    queued behind each other on the client's transfer threads)."""
    from conftest import Daemon
    d = Daemon(extra=("--http-threads", "3"), env={"TESSEL_PARTS_MAP": "1"})
    try:
        with tessel.Client(d.url, same_host=False) as c:
            assert _advice(c) == 2
            gate = threading.Barrier(2, timeout=30)
            puts = []

            def hook(method, path, headers):
                if method == "PUT":
                    puts.append(path.split("?")[0])
                    gate.wait()

            c._t.on_request = hook
            a = np.linspace(1.0, 2.0, 9 * 1024 * 1024)
            b = np.linspace(-5.0, 5.0, 9 * 1024 * 1024)
            got = c.map("-b/a", a=a, b=b, backend="cpu")
            assert len(puts) == 2 and puts[0] != puts[1], puts
            assert np.array_equal(got, -b / a)
    finally:
        d.stop()


def test_big_inputs_go_up_at_once(daemon):
    """Two big ndarray inputs of one call are uploaded beside each other
    (client._inputs): the hook holds each POST /v1/arrays at a barrier
    that only opens when both have started, so inputs sent one after the
    other would break it (the barrier's timeout guards a hang, nothing is
    timed); the answer is still the answer."""
    with tessel.Client(daemon.url, same_host=False, streams=1, upload_streams=1) as c:
        gate = threading.Barrier(2, timeout=30)
        posts = []

        def hook(method, path, headers):
            if method == "POST" and path.startswith("/v1/arrays"):
                posts.append(threading.current_thread().name)
                gate.wait()

        c._t.on_request = hook
        a = np.linspace(1.0, 2.0, 300_000)
        b = np.linspace(-5.0, 5.0, 300_000)
        got = c.map("-b/a", a=a, b=b)
        assert len(posts) == 2 and all(n.startswith("tessel-input") for n in posts), posts
        assert np.array_equal(got, -b / a)
        # Small inputs stay on the caller's thread, one after the other.
        posts.clear()
        c._t.on_request = lambda m, p, h: posts.append(threading.current_thread().name) \
            if m == "POST" and p.startswith("/v1/arrays") else None
        small = np.arange(1.0, 1000.0)
        assert np.array_equal(c.map("a+b", a=small, b=small + 1), 2 * small + 1)
        assert posts == [] or all(not n.startswith("tessel-input") for n in posts), posts


def test_big_inputs_one_bad_leaves_nothing(daemon):
    """One of two big inputs refused (a dtype the service has no use for)
    while the other uploads: the call raises and the temporary the other
    made is removed once the failure is known (nothing left on the server)."""
    with tessel.Client(daemon.url, same_host=False, streams=1, upload_streams=1) as c:
        _, before = c._t.json("GET", "/v1/arrays")
        a = np.linspace(1.0, 2.0, 300_000)
        bad = np.zeros(300_000, dtype=np.complex128)
        posts = []
        c._t.on_request = lambda m, p, h: posts.append(p) \
            if m == "POST" and p.startswith("/v1/arrays") else None
        with pytest.raises((tessel.TesselError, TypeError, ValueError)):
            c.map("a+b", a=a, b=bad)
        assert len(posts) == 1, posts  # a's went up; then it was removed
        _, after = c._t.json("GET", "/v1/arrays")
        ids = lambda r: {x["id"] for x in (r.get("arrays") or r.get("items") or [])}
        assert ids(after) <= ids(before), (before, after)


def test_empty_array_big_on_huge_page_memory():
    """transport.empty_array: 64 MiB and more lie in their own private
    anonymous mapping (asked for huge pages), writable, C or Fortran order
    as asked, freed with the array; smaller ones are np.empty's."""
    import mmap
    big = transport.empty_array((9 * 1024 * 1024,), np.float64)
    assert big.flags.writeable and big.flags.c_contiguous and big.nbytes == 72 << 20
    mapped = hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")
    if mapped:
        assert isinstance(big.base, mmap.mmap)
    big[::4096] = 7.0
    assert big[4096] == 7.0
    if mapped:
        assert big[1] == 0.0  # fresh anonymous pages read as zeros
    f = transport.empty_array((3072, 3072), np.float64, "F")
    assert f.flags.f_contiguous and f.shape == (3072, 3072)
    small = transport.empty_array((1000,), np.float32)
    assert small.base is None and small.dtype == np.float32


def test_big_download_is_writable_and_right(daemon):
    """A big result downloaded into a new array (several ranges into the
    huge-page array) is the bytes, and the caller may write to it."""
    with tessel.Client(daemon.url, same_host=False, streams=4, upload_streams=1) as c:
        a = np.random.default_rng(3).standard_normal(9 * 1024 * 1024)
        arr = c.upload(a)
        back = arr.download()
        assert back.tobytes() == a.tobytes() and back.flags.writeable
        back[0] = 1.0
