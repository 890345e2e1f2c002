"""The Python client against a real tesseld: every method, every input form,
futures and the executor, errors, long waits, the same-host path, https://
against tesseld's own TLS (the test-only certificate of tests/integration/tls).

No timing is asserted; the only ordering asserted (as_completed) sets a job
of ~10^8 element-operations against one of 4 elements.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import tessel

A = np.arange(12.0)
BIG = np.arange(10000.0)  # over INLINE_MAX: goes up as an array (or a file), not inline
# A job that runs seconds on one thread and stops at its next chunk when
# canceled: an expensive reduce over 10^8 generated values.
LONG = {"op": "sum", "expr": "sin(x)*exp(cos(x))+sqrt(x)",
        "inputs": {"x": {"random": {"shape": [100000000], "seed": 7}}}}


def long_job(c, **kw):
    return c.submit("reduce", backend="serial", **dict(LONG, **kw))


# ---- the kinds -------------------------------------------------------------
def test_map(client):
    y = client.map("x**2 + 2*x + 1", x=A)
    assert isinstance(y, np.ndarray) and y.dtype == np.float64
    np.testing.assert_array_equal(y, A**2 + 2 * A + 1)


def test_map_two_inputs_broadcast(client):
    a, b = np.arange(6.0).reshape(2, 3), np.array([10.0, 20.0, 30.0])
    np.testing.assert_array_equal(client.map("-b/a", a=b, b=a), -a / b)
    np.testing.assert_array_equal(client.map("x + y", x=a, y=b, backend="cpu"), a + b)


def test_map_float32(client):
    y = client.map("x*2", x=np.float32([1.5, 2.5]), dtype="float32")
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.float32([3, 5]))


@pytest.mark.parametrize("same_host", [True, False])
def test_result_dtypes_as_numpy(daemon, same_host):
    """Without dtype=, the dtype NumPy would give: float32 op float32 and
    float32 with a Python number stay float32; a float64 (or int, which
    the client sends as float64) array makes float64; argmin/argmax are
    int64; a full reduce is a NumPy scalar, as np.sum's. Inputs as
    same-host files and as uploads."""
    c = tessel.Client(daemon.url, same_host=same_host)
    try:
        x = np.float32([1.5, -2.5, 3.25])
        w = np.float32([2, 4, 8])
        cases = [
            (c.map("x*2", x=x), x * 2),
            (c.map("x*y + 1.5", x=x, y=w), x * w + 1.5),
            (c.map("x*k", x=x, k=2.5), x * 2.5),
            (c.map("x + y", x=x, y=np.arange(3.0)), x + np.arange(3.0)),
            (c.map("x + y", x=x, y=[1.0, 2.0, 3.0]), x + np.array([1.0, 2.0, 3.0])),
            (c.map("x*2", x=x, dtype="float64"), x.astype(np.float64) * 2),
            (c.matmul(x.reshape(3, 1), w.reshape(1, 3)), x.reshape(3, 1) @ w.reshape(1, 3)),
        ]
        for got, want in cases:
            assert got.dtype == want.dtype, (got, want)
            np.testing.assert_allclose(got, want, rtol=1e-6)
        s = c.reduce("sum", x=x)
        assert isinstance(s, np.float32) and not isinstance(s, np.ndarray)
        assert s == np.sum(x) and type(s) is type(np.sum(x))
        am = c.reduce("argmax", x=x)
        assert isinstance(am, np.int64) and am == np.argmax(x)
        rows = c.reduce("argmin", x=np.float32([[3, 1, 2], [0, 5, -1]]), axis=1)
        assert rows.dtype == np.int64 and rows.tolist() == [1, 2]
        m = c.reduce("mean", x=np.arange(6.0).reshape(2, 3), axis=0)
        assert isinstance(m, np.ndarray) and m.dtype == np.float64
        # a Job's result stays the array the server stored: 0-d for a full reduce
        r = c.submit_reduce("sum", x=x).result()
        assert isinstance(r, np.ndarray) and r.shape == () and r.dtype == np.float32
    finally:
        c.close()


def test_reduce(client):
    d = np.random.default_rng(1).random((100, 1000))
    np.testing.assert_allclose(client.reduce("sum", "x**2", x=d, axis=1), (d**2).sum(axis=1), rtol=1e-12)
    assert client.reduce("std", x=d, ddof=1).item() == pytest.approx(d.std(ddof=1), rel=1e-12)
    assert client.reduce("argmax", x=[3.0, 9.0, 1.0]).item() == 1


def test_matmul(client):
    rng = np.random.default_rng(2)
    W, X, b = rng.random((5, 4)), rng.random((4, 3)), rng.random(3)
    np.testing.assert_allclose(client.matmul(W, X, bias=b), W @ X + b, rtol=1e-12)
    np.testing.assert_allclose(client.matmul(W.T, X, transpose_a=True), W @ X, rtol=1e-12)


def test_geodesic_forms(client):
    pts = [(0.0, 0.0), (0.0, 1.0), (45.0, 10.0)]
    d = client.geodesic(pts, units="km")
    assert d.shape == (3, 3) and d[0, 0] == 0 and d[0, 1] == pytest.approx(111.3195, rel=1e-5)
    np.testing.assert_allclose(client.geodesic(np.array(pts), method="haversine").shape, (3, 3))
    cond = client.geodesic(pts, layout="condensed")
    np.testing.assert_allclose(cond, d[np.triu_indices(3, 1)] * 1000, rtol=1e-12)
    t = client.geodesic(pts, targets=[(0.0, 2.0)])
    assert t.shape == (3, 1)
    with pytest.raises(tessel.InvalidArgument) as e:
        client.geodesic([(95.0, 0.0), (0.0, 0.0)])  # a swapped lat/lon is refused, not guessed
    assert e.value.field.startswith("params.points")
    with pytest.raises(tessel.InvalidArgument):
        client.geodesic(np.zeros((3, 3)))


def test_geodesic_dataframe(client):
    pd = pytest.importorskip("pandas", reason="pandas is not installed: DataFrame points untested")
    df = pd.DataFrame({"lon": [1.0, 0.0], "lat": [0.0, 0.0]})  # lon first: the names decide
    d = client.geodesic(df, units="km")
    assert d[0, 1] == pytest.approx(111.3195, rel=1e-5)
    with pytest.raises(tessel.InvalidArgument) as e:
        client.geodesic(pd.DataFrame({"y": [0.0], "x": [0.0]}))
    assert "lat" in str(e.value)
    d2 = client.geodesic(pd.DataFrame({"la": [0.0, 0.0], "lo": [1.0, 0.0]}), lat="la", lon="lo")
    assert d2.shape == (2, 2)


def _pts(n, seed):
    rng = np.random.default_rng(seed)
    p = np.column_stack([rng.uniform(-80, 80, n), rng.uniform(-180, 180, n)])
    p[5] = p[4]  # a duplicate: a neighbour at distance 0
    return p


def test_geodesic_knn_equals_brute_force(client):
    pts = _pts(200, 3)
    m = client.geodesic(pts, backend="cpu")  # the square matrix the query must match
    d, i = client.geodesic_knn(pts, 5, backend="cpu")
    assert d.shape == (200, 5) and i.dtype == np.int64
    for r in range(200):
        row = m[r].copy()
        order = [j for j in np.lexsort((np.arange(200), row)) if j != r][:5]
        assert i[r].tolist() == order
        assert d[r].tobytes() == row[order].tobytes()  # the matrix's bits
    assert i[4, 0] == 5 and d[4, 0] == 0
    t = _pts(30, 4)
    dt, it = client.geodesic_knn(pts, 100, targets=t)  # k cut to the 30 targets
    assert dt.shape == (200, 30) and sorted(it[0].tolist()) == list(range(30))


def test_geodesic_radius_and_rowwise(client):
    pts = _pts(150, 5)
    m = client.geodesic(pts, backend="cpu")
    r = float(np.quantile(m[np.triu_indices(150, 1)], 0.02))
    i, j, d = client.geodesic_radius(pts, r, backend="cpu")
    want = [(a, b) for a in range(150) for b in range(a + 1, 150) if m[a, b] <= r]
    assert list(zip(i.tolist(), j.tolist())) == want
    assert d.tobytes() == np.array([m[a, b] for a, b in want]).tobytes()
    with pytest.raises(tessel.TesselError) as e:
        client.geodesic_radius(pts, r, max_pairs=max(1, len(want) - 1), backend="cpu")
    assert "max_pairs" in (e.value.field or "") + str(e.value)
    am = client.geodesic_rowwise(pts, "argmin", backend="cpu")
    d1, i1 = client.geodesic_knn(pts, 1, backend="cpu")
    assert am.dtype == np.int64 and am.tolist() == i1[:, 0].tolist()
    cnt = client.geodesic_rowwise(pts, "count", within=r, backend="cpu")
    assert cnt.tolist() == [int(((m[a] <= r).sum()) - 1) for a in range(150)]
    job = client.submit_geodesic(pts, query={"knn": {"k": 2}}, backend="cpu")
    job.wait(60)
    assert job.part_names == ["distance", "index"]
    parts = job.parts()
    assert parts["index"].shape == (150, 2)
    np.testing.assert_array_equal(job.result(), parts["distance"])  # /result: the first part
    with pytest.raises(tessel.InvalidArgument) as e:
        client.geodesic_knn(pts, 0)
    assert e.value.field == "params.query.knn.k"


# ---- input forms -------------------------------------------------------------
@pytest.mark.parametrize("form", ["list", "fortran", "bigendian", "float32", "int", "strided",
                                  "transposed", "scalar"])
def test_input_forms(client, form):
    base = np.arange(12.0).reshape(3, 4)
    v = {"list": base.tolist(), "fortran": np.asfortranarray(base), "bigendian": base.astype(">f8"),
         "float32": base.astype(np.float32), "int": base.astype(np.int32),
         "strided": (np.arange(24.0).reshape(3, 8) / 2)[:, ::2],  # a view: every 2nd column
         "transposed": base.T.copy().T,
         "scalar": 3.0}[form]
    if form == "strided":
        assert not v.flags.c_contiguous and v.strides == (64, 16)
        np.testing.assert_array_equal(v, base)
    if form == "transposed":
        assert v.flags.f_contiguous and not v.flags.c_contiguous
    want = np.asarray(v, dtype=np.float64) * 2
    np.testing.assert_array_equal(client.map("x*2", x=v), want)


def test_strided_view(client):
    big = np.arange(48.0).reshape(6, 8)
    v = big[::2, 1::3]
    assert not v.flags.c_contiguous
    np.testing.assert_array_equal(client.map("x+0", x=v), v)


def test_upload_array_and_chaining(client):
    arr = client.upload(np.arange(5.0))
    assert isinstance(arr, tessel.Array) and arr.shape == (5,) and arr.dtype == np.float64
    np.testing.assert_array_equal(arr.download(), np.arange(5.0))
    j1 = client.submit_map("x*10", x=arr)
    j2 = client.submit_map("x+1", x=j1)  # chained on the server, j1 never downloaded
    assert j2.info["params"]["inputs"]["x"] == {"result": j1.id}
    np.testing.assert_array_equal(j2.result(), np.arange(5.0) * 10 + 1)
    assert j1._array is None
    np.testing.assert_array_equal(client.map("x", x={"range": {"stop": 3}}), [0.0, 1.0, 2.0])


def test_implicit_upload_removed(client):
    before = {a.id for a in client.arrays(1000)}
    client.map("x", x=np.random.default_rng().random(BIG.size))
    time.sleep(0.05)
    assert {a.id for a in client.arrays(1000)} == before


def test_tiny_call_is_one_request(daemon):
    # A few numbers go in the job's body (no upload, no delete) and the
    # result comes back in the submit's answer (?wait&include=result).
    with tessel.Client(daemon.url, same_host=False) as c:
        seen = []
        c._t.on_request = lambda m, p, h: seen.append((m, p))
        x = np.array([0.1, 1e300, -2.5, 3.0])
        got = c.map("x + 0.2", x=x)
        assert got.tobytes() == (x + 0.2).tobytes()  # exact, not just close
        assert [m for m, _ in seen] == ["POST"] and "include=result" in seen[0][1]
        seen.clear()
        # non-finite values (null in JSON) come as the .npy: inf and nan kept apart
        got = c.map("log(x)", x=np.array([0.0, -1.0, 1.0]))
        assert np.isneginf(got[0]) and np.isnan(got[1]) and got[2] == 0.0
        assert [m for m, _ in seen] == ["POST", "GET"]
        seen.clear()
        # float32 and non-finite inputs keep the upload (JSON numbers are float64)
        y = c.map("x * 2", x=np.array([1.5, np.inf]))
        assert np.isinf(y[1]) and y[0] == 3.0
        assert ("POST", "/v1/arrays") in seen or any(p.startswith("/v1/uploads") for _, p in seen)
        f = c.map("x * 2", x=np.array([1.5, 2.5], dtype=np.float32))
        assert f.dtype == np.float32 and f.tolist() == [3.0, 5.0]


def test_older_server_without_include_or_fields(daemon):
    # A server that has no ?include / "include" / "fields" refuses them with
    # 400 naming them (and makes nothing): the client asks again without,
    # and from then on never tries them on that server.
    with tessel.Client(daemon.url, same_host=False) as c:
        real = c._t.request
        tried = []

        def request(method, path, body=None, headers=None, timeout=None, raw=False):
            b = body if isinstance(body, (bytes, bytearray)) else b""
            new_include = "include=" in path or (path.startswith("/v1/jobs:batch")
                                                 and b'"include"' in b)  # jobs:get's is old
            field = "include" if new_include else "fields" if b'"fields"' in b else None
            tried.append(field)
            if field:
                raise tessel.errors.InvalidArgument(f"{field}: unknown", status=400,
                                                    code="invalid_argument", field=field)
            return real(method, path, body, headers, timeout, raw)

        c._t.request = request
        assert c.map("x + 1", x=[1.0, 2.0]).tolist() == [2.0, 3.0]
        assert c.map("x * 2", x=[4.0]).tolist() == [8.0]
        got = c.map_many("x - 1", [np.arange(3.0), np.arange(2.0)])
        assert [g.tolist() for g in got] == [[-1.0, 0.0, 1.0], [-1.0, 0.0]]
        got = c.map_many("x - 2", [np.arange(2.0)])
        assert got[0].tolist() == [-2.0, -1.0]
        assert c._t.refused == {"include", "fields"}
        assert tried.count("include") == 1 and tried.count("fields") == 1, tried


def test_futures_small_results_inline(daemon):
    # Jobs submitted without a wait: the waiter's jobs:get (or the submit's
    # own answer, or a GET ?wait) brings each small result along, so no
    # job's result is downloaded on its own.
    with tessel.Client(daemon.url, same_host=False) as c:
        seen = []
        c._t.on_request = lambda m, p, h: seen.append((m, p.split("?")[0]))
        jobs = [c.submit_map("x * 3", x=np.arange(5.0) + i) for i in range(40)]
        for i, j in enumerate(jobs):
            assert j.result(timeout=60).tolist() == ((np.arange(5.0) + i) * 3).tolist()
        assert not [p for m, p in seen if p.endswith("/result")]
        assert all(m == "POST" or p.startswith("/v1/jobs/j_") for m, p in seen)


# ---- futures -----------------------------------------------------------------
def test_job_is_a_future(client):
    j = client.submit_map("x*2", x=A)
    assert isinstance(j, concurrent.futures.Future)
    seen = []
    j.add_done_callback(lambda f: seen.append(f.result()))
    r = j.result(timeout=60)
    np.testing.assert_array_equal(r, A * 2)
    assert j.done() and not j.cancelled() and j.status == "succeeded"
    assert j.result() is r  # downloaded once
    deadline = time.time() + 30
    while not seen and time.time() < deadline:
        time.sleep(0.01)
    np.testing.assert_array_equal(seen[0], A * 2)
    assert j.timings["total"] >= 0 and j.backend["used"] and j.progress[0] == j.progress[1]


def test_stale_snapshot_after_end():
    """A job's JSON taken before it ended (the waiter's poll, answered after
    result() saw the end) does not take its status back: it stays final."""
    from tessel.job import Job
    j = Job(None, {"id": "j_x", "kind": "map", "status": "running"})
    assert j.status == "running" and not j.done()
    j._update({"id": "j_x", "kind": "map", "status": "succeeded", "timings_ms": {"total": 1}})
    assert j.done() and j.status == "succeeded"
    j._update({"id": "j_x", "kind": "map", "status": "queued"})
    assert j.status == "succeeded" and j.timings == {"total": 1}
    j._update({"id": "j_x", "kind": "map", "status": "succeeded", "timings_ms": {"total": 2}})
    assert j.status == "succeeded" and j.timings == {"total": 2}


def test_as_completed_order(client):
    slow = long_job(client)
    fast = client.submit_map("x+1", x=[1.0, 2.0, 3.0, 4.0])
    order = list(concurrent.futures.as_completed([slow, fast], timeout=120))
    assert order == [fast, slow]
    done, pending = concurrent.futures.wait([slow, fast], timeout=0)
    assert done == {slow, fast} and not pending
    assert slow.result().shape == ()


def test_cancel_queued_and_running(client):
    workers = client.stats()["queue"]["workers"]
    running = [long_job(client, priority=9) for _ in range(workers)]
    queued = long_job(client, priority=0)
    assert queued.cancel() is True
    assert queued.cancelled() and queued.status == "canceled"
    with pytest.raises(tessel.Canceled):
        queued.result()
    with pytest.raises(concurrent.futures.CancelledError):
        queued.result()
    for j in running:
        # At once: a cancel stops the job in whatever phase it is, the
        # generation of its 10^8 inputs (seconds) included. Waiting for its
        # compute to report progress lost a race when that phase was shorter
        # than the progress interval (the job succeeded first, CI 2026-11-26).
        assert j.cancel() is True
        assert j.status == "canceled"
    done, _ = concurrent.futures.wait(running + [queued], timeout=60)
    assert len(done) == workers + 1
    assert queued.cancel() is True  # a canceled job stays canceled


def test_cancel_finished_returns_false(client):
    j = client.submit_map("x", x=[1.0], wait=30)
    j.result()
    assert j.cancel() is False and not j.cancelled()


def test_rewait_past_the_server_cap():
    # The server holds a wait at most 60 s; the client asks again until the
    # job ends. Here the daemon holds every wait at most 0.2 s (the test-only
    # TESSEL_TEST_WAIT_HOLD_S), so a job of a few seconds meets the cap many
    # times while the client asks for the full 60 s each time, as it does
    # against a real server (test_wait_past_60s_real: the real 60 s, opt-in).
    from conftest import Daemon
    d = Daemon(["--threads", "1"], env={"TESSEL_TEST_WAIT_HOLD_S": "0.2"})
    try:
        c = tessel.Client(d.url, same_host=False)
        waits = []
        json0 = c._t.json

        def json(method, path, obj=None, timeout=None):
            st, info = json0(method, path, obj, timeout)
            if method == "GET" and "?wait=" in path:
                waits.append((path.split("?wait=")[1].split("&")[0], info["status"]))
            return st, info
        c._t.json = json
        j = long_job(c)
        assert j.result(timeout=300).shape == ()
        assert j.status == "succeeded"
        assert len(waits) >= 2, waits  # answered before the end, asked again
        assert all(w == "60.000" for w, _ in waits)
        assert all(st in ("queued", "running") for _, st in waits[:-1])
    finally:
        d.stop()


@pytest.mark.skipif(not os.environ.get("TESSEL_SLOW_TESTS"),
                    reason="a real wait past 60 s: set TESSEL_SLOW_TESTS=1 (takes ~70 s)")
def test_wait_past_60s_real(daemon):
    c = tessel.Client(daemon.url, same_host=False)
    big = dict(LONG, inputs={"x": {"random": {"shape": [1500000000], "seed": 1}}})
    j = c.submit("reduce", backend="serial", **big)
    t0 = time.monotonic()
    j.result(timeout=900)
    assert time.monotonic() - t0 > 60 and j.status == "succeeded"


def test_job_by_id_and_progress(client, capsys):
    j = client.submit_map("x*2", x=A)
    k = client.job(j.id)
    np.testing.assert_array_equal(k.result(timeout=60), A * 2)
    pytest.importorskip("tqdm", reason="tqdm is not installed: progress bar untested")
    y = client.map("x*3", x=A, progress=True)
    np.testing.assert_array_equal(y, A * 3)
    assert "map" in capsys.readouterr().err


def test_executor(client):
    data = [np.full(10, float(i)) for i in range(20)]
    with client.executor(max_in_flight=4) as ex:
        sums = list(ex.map(lambda d: client.reduce("sum", "x**2", x=d).item(), data))
        jobs = list(ex.map(lambda d: client.submit_map("x+1", x=d), data[:3]))  # Jobs resolve too
        # The same content from many threads: one array on the server, shared
        # by the jobs, removed only after the last of them.
        same = list(ex.map(lambda _: client.map("x+1", x=np.ones(BIG.size)), range(24)))
    assert sums == [10.0 * i * i for i in range(20)]
    assert all((s == 2.0).all() for s in same)
    np.testing.assert_array_equal(jobs[2], np.full(10, 3.0))


def test_executor_waits_together(daemon):
    # Threads waiting at once share their waits: rounds of one jobs:get for
    # many jobs, not a GET ?wait each; each future still gets its own array.
    with tessel.Client(daemon.url, same_host=False) as c:
        seen = []
        c._t.on_request = lambda m, p, h: seen.append((m, p.split("?")[0]))
        data = [np.arange(6.0) + i for i in range(200)]
        with c.executor(max_in_flight=16) as ex:
            out = list(ex.map(lambda d: c.submit_map("x*2", x=d).result(), data))
        assert all(o.tolist() == (d * 2).tolist() for o, d in zip(out, data))
        gets = sum(1 for m, p in seen if m == "GET" and p.startswith("/v1/jobs/j_"))
        assert c._waits.rounds > 0 and gets < len(data), (c._waits.rounds, gets)
        assert not [p for m, p in seen if p.endswith("/result")]
        # A job that runs long holds no other waiter's answer: tiny jobs
        # waited for beside it end while it still runs.
        slow = c.submit_map("x+1", x={"random": {"shape": [100_000_000], "dist": "normal",
                                                 "seed": 3}},
                            backend="serial", dtype="float32")  # seconds of normals on one thread
        try:
            with c.executor(max_in_flight=8) as ex:
                fut = ex.submit(lambda: slow.wait(120))  # waits beside the tiny ones
                out = list(ex.map(lambda d: c.submit_map("x-1", x=d).result(), data[:40]))
                assert all(o.tolist() == (d - 1).tolist() for o, d in zip(out, data))
                assert slow.refresh()["status"] in ("queued", "running")
                slow.cancel()
                assert fut.result(60) is True
        finally:
            slow.cancel()


def test_compare(client):
    t = client.compare("map", expr="x**2", x=np.arange(1000.0))
    assert isinstance(t, list) and {r["backend"] for r in t} >= {"serial", "cpu"}
    assert all(r["ms"] >= 0 for r in t) and t[0]["speedup"] == pytest.approx(1.0)
    np.testing.assert_array_equal(t.result, np.arange(1000.0) ** 2)


def test_compare_to_frame(client):
    # Skipped before asserting anything when pandas is missing (deps/ has
    # python3-pandas, so CI runs it).
    pytest.importorskip("pandas", reason="pandas is not installed: CompareTable.to_frame untested")
    t = client.compare("map", expr="x+1", x=np.arange(10.0))
    assert list(t.to_frame()["backend"]) == [r["backend"] for r in t]


# ---- errors --------------------------------------------------------------------
def test_errors(client, daemon):
    with pytest.raises(tessel.InvalidArgument) as e:
        client.map("x + y", x=A)
    assert (e.value.status, e.value.code, e.value.field, e.value.position) == \
        (400, "invalid_argument", "params.expr", 4)
    with pytest.raises(tessel.NotFound) as e:
        client.job("j_doesnotexist")
    assert e.value.status == 404
    if client.devices()["cuda"]["available"]:  # the GPU machine: it runs there
        j = client.submit_map("x", x=A, backend="cuda")
        np.testing.assert_array_equal(j.result(), A)
        assert j.backend["used"].startswith("cuda")
    else:  # no usable GPU: cuda is 503
        with pytest.raises(tessel.Unavailable) as e:
            client.map("x", x=A, backend="cuda")
        assert e.value.status == 503
    j = long_job(client)
    with pytest.raises(tessel.Conflict):
        j.delete()  # unfinished
    j.cancel()
    f = client.submit("reduce", backend="serial", timeout_s=0.05, **LONG)
    with pytest.raises(tessel.JobFailed) as e:
        f.result(timeout=120)
    assert e.value.code == "deadline_exceeded" and e.value.job["id"] == f.id
    assert isinstance(f.exception(), tessel.JobFailed)
    with pytest.raises(tessel.Unavailable):
        tessel.Client("http://127.0.0.1:1").devices()


def test_too_many_requests_and_retry():
    from conftest import Daemon
    d = Daemon(["--queue-limit", "1", "--threads", "1"])
    try:
        c = tessel.Client(d.url, same_host=False)
        busy = [long_job(c, priority=9)]
        with pytest.raises(tessel.TooManyRequests) as e:
            for _ in range(3):
                busy.append(long_job(c))
        assert e.value.status == 429 and e.value.retry_after is not None
        r = tessel.Client(d.url, same_host=False, retries=50)
        for j in busy[1:]:
            j.cancel()
        busy[0].cancel()
        assert r.map("x", x=[1.0]).tolist() == [1.0]
    finally:
        d.stop()


# ---- the same host -------------------------------------------------------------
def test_same_host_picked(daemon):
    # The .npy file path (regions=False); test_regions.py has the regions'.
    c = tessel.Client(daemon.url, local_dir=daemon.local, regions=False)
    assert c.local_dir() == os.path.realpath(daemon.local)
    j = c.submit_map("x*2", x=BIG)
    assert "file" in j.info["params"]["inputs"]["x"]
    y = j.result(timeout=60)
    assert isinstance(y, np.memmap)
    np.testing.assert_array_equal(y, BIG * 2)
    z = c.map("x+1", x=j)  # chained through the output file
    np.testing.assert_array_equal(z, BIG * 2 + 1)
    e = c.empty((3, 4))
    assert isinstance(e, np.memmap)
    e[...] = np.arange(12.0).reshape(3, 4)
    buf = np.full(A.shape, -1.0)
    got = c.submit_map("x*3", x=BIG[:12]).result(out=buf)  # read into out, not mapped
    assert got is buf and not isinstance(got, np.memmap)
    np.testing.assert_array_equal(buf, A * 3)
    k = c.submit_map("x*x", x=e)
    assert k.info["params"]["inputs"]["x"] == {"file": e.filename}
    np.testing.assert_array_equal(k.result(), e * e)
    del j, y
    c.close()  # waits until the reaper removed the ended jobs' input files
    left = [f for f in os.listdir(daemon.local) if not f.endswith(".out.npy") and f != os.path.basename(e.filename)]
    assert left == []


def test_same_host_not_picked(daemon, other_dir):
    c = tessel.Client(daemon.url, local_dir=other_dir)  # not a --local-dir of the server
    assert c.local_dir() is None
    j = c.submit_map("x*2", x=BIG)
    assert "array" in j.info["params"]["inputs"]["x"]
    y = j.result()
    assert not isinstance(y, np.memmap)
    np.testing.assert_array_equal(y, BIG * 2)
    assert os.listdir(other_dir) == []
    assert tessel.Client(daemon.url, same_host=False, local_dir=daemon.local).local_dir() is None
    assert not isinstance(c.empty(3), np.memmap)


def test_same_host_from_info(daemon):
    c = tessel.Client(daemon.url)
    if not c.info():
        pytest.skip("this server has no GET /v1/info: local_dirs from the server untested")
    assert c.local_dir() == os.path.realpath(daemon.local)


# ---- https:// ---------------------------------------------------------------
def test_https_against_tesseld_tls():
    """The client against tesseld's own TLS (--tls-cert / --tls-key, the
    test-only certificate of tests/integration/tls): verify= names the CA
    file; the wrong CA, or the system's CAs, fail the handshake."""
    from conftest import TLS_DIR, Daemon
    cert = os.path.join(TLS_DIR, "server-cert.pem")
    d = Daemon(["--tls-cert", cert, "--tls-key", os.path.join(TLS_DIR, "server-key.pem")])
    try:
        assert d.url.startswith("https://localhost:")
        c = tessel.Client(d.url, verify=cert)  # the self-signed certificate, checked
        assert c.info()["features"]["tls"] is True
        big = np.random.default_rng(5).random(300000)  # several TLS records each way
        np.testing.assert_array_equal(c.map("x*2", x=big), big * 2)
        arr = c.upload(A)
        np.testing.assert_array_equal(arr.download(), A)
        dist, idx = c.geodesic_knn([(0, 0), (0, 1), (0, 3)], 1)
        assert idx.ravel().tolist() == [1, 0, 1]
        c.close()
        insecure = tessel.Client(d.url, verify=False, same_host=False)
        assert insecure.reduce("sum", x=A).item() == A.sum()
        for verify in (True, os.path.join(TLS_DIR, "other-cert.pem")):
            with pytest.raises(tessel.Unavailable) as e:  # the system's CAs / another cert
                tessel.Client(d.url, same_host=False, verify=verify).devices()
            assert "CERTIFICATE_VERIFY_FAILED" in str(e.value)
        with pytest.raises(ValueError):
            tessel.Client(d.url, verify="/nonexistent/ca.pem")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(tessel.__path__[0]))
        run = [sys.executable, "-m", "tessel", "--url", d.url]
        p = subprocess.run(run + ["--cafile", cert, "devices"], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0 and "cpu" in json.loads(p.stdout), p.stderr
        p = subprocess.run(run + ["devices"], capture_output=True, text=True,
                           env=dict(env, TESSEL_CAFILE=cert), timeout=120)
        assert p.returncode == 0, p.stderr
        p = subprocess.run(run + ["devices"], capture_output=True, text=True,
                           env={k: v for k, v in env.items() if k != "TESSEL_CAFILE"}, timeout=120)
        assert p.returncode == 6 and "CERTIFICATE_VERIFY_FAILED" in p.stderr
    finally:
        d.stop()


def test_jobs_are_job_objects(client):
    """c.jobs() answers Job objects, as c.arrays() answers Arrays."""
    j = client.submit_map("x*2", x=A, label="py-jobs-objects", wait=60)
    got = client.jobs(label="py-jobs-objects")
    assert got and all(isinstance(k, tessel.Job) for k in got)
    assert got[0].id == j.id and got[0].status == "succeeded" and got[0].kind == "map"
    np.testing.assert_array_equal(got[0].result(), A * 2)


def test_request_ids_unique_and_fresh_after_fork():
    """The submits' request_ids (client._ids): "py-" and 32 hex digits, no
    repeat in a process, and a forked child's differ from its parent's
    (a repeat would make the server answer the parent's job)."""
    from tessel import client as tc
    ids = [tc._ids.next() for _ in range(10000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 35 and i.startswith("py-") and int(i[3:], 16) >= 0 for i in ids)
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then out
        os.write(w, tc._ids.next().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(r, 100).decode()
    os.close(r)
    os.close(w)
    mine = tc._ids.next()
    assert child[:19] != mine[:19] and child not in ids
