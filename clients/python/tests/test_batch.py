"""map_many / reduce_many / geodesic_many (tessel/batch.py) against a real tesseld.

Checked: the results equal the single calls' in the order given; 50 jobs
cost two requests (jobs:batch that waits and brings the results, split in
two parts sent at once; a counter wrapped round the transport's request),
not 100; cuda items stay in one request (one gang); a call split over
several requests keeps its order and names a
bad item by its index in the whole call; when the batch's wait
runs out first the rest are waited for and right; a bad item raises InvalidArgument naming ``jobs[i]...``;
a result over the inline bound comes back whole through its link; the
client's waiter polls its pending jobs with one jobs:get, not one GET each;
submits of several threads made while one is in flight go out as batches
(fewer requests than jobs), each caller getting its own job or error.
A call of more chunks than transfer threads keeps at most one chunk per
thread in flight and its order; non-finite results in a group of one shape
come whole through their links (inf and nan apart), the others inline;
smalls / inlines equal small / inline one at a time; with retries a
chunk carries request_ids and a lost answer is sent again without new
jobs (without retries: no request_id, the loss raises); an input the
client cannot send mid-call raises after the chunks sent were answered.
"""
import threading
import time

import numpy as np
import pytest

import tessel
from tessel import batch as tbatch
from tessel import inline as tinline


def _counting(client, monkeypatch):
    calls = []
    real = client._t.request

    def counted(method, path, *a, **kw):
        calls.append((method, path))
        return real(method, path, *a, **kw)

    monkeypatch.setattr(client._t, "request", counted)
    return calls


def test_map_many_equals_single_calls(client, monkeypatch):
    items = [np.arange(float(n)) for n in range(1, 51)]
    single = [client.map("x*x + y", x=a, y=2.0) for a in items]
    calls = _counting(client, monkeypatch)
    many = client.map_many("x*x + y", items, y=2.0)
    assert len(many) == len(single)
    for a, b in zip(many, single):
        np.testing.assert_array_equal(a, b)
    # jobs:batch requests that wait, 25 items each (SPLIT_MIN), sent at
    # once: the 50 tiny jobs end within them and their results come in
    # their answers (no jobs:get)
    assert len(calls) == 2, calls
    assert all(c[1].startswith("/v1/jobs:batch?wait=") for c in calls), calls


def test_splits():
    sp = tbatch._splits
    assert sp(0, 8) == [] and sp(1, 8) == [range(0, 1)]
    assert sp(49, 8) == [range(0, 49)]            # under 2 * SPLIT_MIN: one
    assert sp(100, 8) == [range(0, 25), range(25, 50), range(50, 75), range(75, 100)]
    assert sp(2000, 8) == [range(lo, lo + 250) for lo in range(0, 2000, 250)]
    assert sp(100, 1) == [range(0, 100)]          # one transfer thread: one request
    big = sp(25000, 1)                             # never over the server's item limit
    assert len(big) == 3 and all(len(r) <= tbatch.BATCH_MAX for r in big)
    assert sum(len(r) for r in sp(1234, 7)) == 1234


def test_cuda_items_stay_in_one_request(client, monkeypatch):
    """backend "cuda": 100 items in one jobs:batch (the server gangs one
    batch's tiny jobs into one launch; parts would gang apart), where 100
    cpu items go in 4. Without a GPU the cuda items are refused, after
    their one request."""
    monkeypatch.setattr(client._t, "_nworkers", lambda: 4)
    calls = _counting(client, monkeypatch)
    items = [np.full(4, float(i)) for i in range(100)]
    client.reduce_many("sum", items, backend="cpu")
    assert len(calls) == 4, calls
    del calls[:]
    try:
        client.reduce_many("sum", items, backend="cuda")
    except tessel.TesselError:
        pass  # no GPU here
    batches = [c for c in calls if c[1].startswith("/v1/jobs:batch")]
    assert len(batches) == 1, calls


def test_split_call_keeps_order_and_names_the_index(client, monkeypatch):
    """120 items over 3 requests in flight together (a barrier of 3 in the
    counted request proves they overlap): results in the order given; a bad
    item in the third part is named by its index in the whole call."""
    monkeypatch.setattr(client._t, "_nworkers", lambda: 3)
    calls = _counting(client, monkeypatch)
    counted = client._t.request
    meet = threading.Barrier(3, timeout=30)

    def together(method, path, *a, **kw):
        if path.startswith("/v1/jobs:batch"):
            meet.wait()
        return counted(method, path, *a, **kw)

    monkeypatch.setattr(client._t, "request", together)
    items = [np.full(3, float(i)) for i in range(120)]
    got = client.map_many("x * 2 + 1", items)
    assert len(calls) == 3, calls
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, np.full(3, 2.0 * i + 1))
    meet.reset()
    bad = list(items)
    bad[97] = {"y": [2.0]}
    with pytest.raises(tessel.InvalidArgument) as ei:
        client.map_many("x + 1", bad)
    assert ei.value.field.startswith("jobs[97]."), ei.value.field


def test_many_when_the_batch_wait_runs_out(client, monkeypatch):
    """The batch's wait over before the jobs end (max_wait 1 ms): the jobs
    not ended in its answer are waited for with jobs:get, results right."""
    items = [np.arange(float(n)) for n in range(1, 41)]
    monkeypatch.setattr(client, "max_wait", 0.001)
    calls = _counting(client, monkeypatch)
    many = client.map_many("x*x + 1", items)
    for a, x in zip(many, items):
        np.testing.assert_array_equal(a, x * x + 1)
    assert calls[0][1] == "/v1/jobs:batch?wait=0.001", calls


def test_reduce_and_geodesic_many(client):
    got = client.reduce_many("sum", [[1.0, 2.0], [3.0], [4.0, 5.0, 6.0]])
    assert [float(g) for g in got] == [3.0, 3.0, 15.0]
    # a scalar result (the inline fast path) is a 0-d float64 array, as the
    # general path made it, holding the single call's value bit for bit
    x = np.random.default_rng(3).standard_normal(1000)
    (many,) = client.reduce_many("sum", [x], expr="x**2")
    one = client.reduce("sum", x=x, expr="x**2")
    assert isinstance(many, np.ndarray) and many.shape == () and many.dtype == np.float64
    assert many.view(np.int64) == np.asarray(one, dtype=np.float64).view(np.int64)
    assert abs(float(many) - float(np.sum(x ** 2))) <= 1e-12 * float(np.sum(x ** 2))
    pts = [[(0, 0), (0, 1)], [(0, 0), (1, 0), (2, 0)]]
    mats = client.geodesic_many(pts, units="km")
    for m, p in zip(mats, pts):
        np.testing.assert_allclose(m, client.geodesic(p, units="km"))


def test_bad_item_names_its_index(client):
    with pytest.raises(tessel.InvalidArgument) as ei:
        client.map_many("x+1", [[1.0], {"y": [2.0]}, [3.0]])
    assert ei.value.field.startswith("jobs[1].")


def test_large_result_by_link(client):
    a = np.arange(20000.0)  # 160 kB: over the inline bound
    (r,) = client.map_many("x+1", [a])
    np.testing.assert_array_equal(r, a + 1)


def test_waiter_polls_many_jobs_in_one_request(client, monkeypatch):
    import concurrent.futures
    jobs = [client.submit_map("x+1", x=[float(i)]) for i in range(30)]
    calls = _counting(client, monkeypatch)
    done, not_done = concurrent.futures.wait(jobs, timeout=120)
    assert not not_done
    polls = [p for m, p in calls if p == "/v1/jobs:get"]
    per_job = [p for m, p in calls if m == "GET" and p.startswith("/v1/jobs/")]
    assert [float(j.result()[0]) for j in jobs] == [i + 1.0 for i in range(30)]
    assert not per_job, per_job
    assert len(polls) < len(jobs)


def test_executor_coalesces_submits(client, monkeypatch):
    calls = _counting(client, monkeypatch)
    counted = client._t.request
    held = []

    def hold_first(method, path, *a, **kw):
        # the first single submit stays in flight until others have queued
        # behind it (a state, capped at 30 s), so a batch must form
        if method == "POST" and path.startswith("/v1/jobs") and not held:
            held.append(path)
            deadline = time.monotonic() + 30
            while len(client._coalescer._queue) < 4 and time.monotonic() < deadline:
                time.sleep(0.005)
        return counted(method, path, *a, **kw)

    monkeypatch.setattr(client._t, "request", hold_first)
    before = client._coalescer.batches
    n = 64
    with client.executor(max_in_flight=16) as ex:
        futs = [ex.submit(lambda i: client.submit_map("x*2", x=[float(i)]), i) for i in range(n)]
        got = [float(f.result()[0]) for f in futs]
    assert got == [2.0 * i for i in range(n)]
    submits = [p for m, p in calls if p.startswith("/v1/jobs") and m == "POST"
               and (p.startswith("/v1/jobs?") or p == "/v1/jobs" or p.startswith("/v1/jobs:batch"))]
    # 16 threads submitting at once: some went out together
    assert client._coalescer.batches > before
    assert len(submits) < n, submits


def test_coalesced_submit_error_is_the_callers(client):
    import concurrent.futures

    def bad(i):
        return client.submit_map("x+" if i % 2 else "x+1", x=[1.0])

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        futs = [ex.submit(bad, i) for i in range(32)]
        for i, f in enumerate(futs):
            if i % 2:
                with pytest.raises(tessel.InvalidArgument) as ei:
                    f.result()
                assert ei.value.field == "params.expr"
            else:
                assert float(f.result().result()[0]) == 2.0


def test_smalls_and_inlines_equal_one_at_a_time():
    """The grouped conversions give what the one-at-a-time ones give, for
    every kind of value: groups of one shape with a non-finite row, -0.0,
    ints, bools, 0-d, empty, float32 (not inline), lists, dicts."""
    rng = np.random.default_rng(7)
    vals = [rng.standard_normal(5) for _ in range(6)]
    vals[2][3] = np.inf
    vals += [np.array([0.0, -0.0, 1.0, 2.0, 3.0]), np.arange(6).reshape(2, 3), np.array(2.5),
             np.array([True, False]), np.zeros(0), np.float32([1, 2]), [1, 2], {"range": 3},
             np.full(tinline.INLINE_MAX + 1, 1.0), np.zeros((2, 0))]
    got = tinline.smalls(vals)
    assert got == [tinline.small(v) for v in vals]
    assert got[2] is None and got[0] == vals[0].tolist()
    res = [{"dtype": "float64", "shape": [3], "data": [1.0, None, 2.0]},
           {"dtype": "float64", "shape": [3], "data": [1.0, 2.0, 3.0]},
           {"dtype": "float64", "shape": [], "data": 3.0},
           {"dtype": "float64", "shape": [], "data": None},
           {"dtype": "int64", "shape": [2], "data": [1, 2]},
           {"dtype": "int64", "shape": [2], "data": [1, None]},
           {"dtype": "float32", "shape": [1, 2], "data": [[1.5, 2.5]]},
           {"dtype": "float64", "shape": [2, 0], "data": [[], []]},
           {"dtype": "float64", "shape": [2], "data": [[1.0], [2.0]]},  # not its shape
           {"dtype": "float64", "shape": [2]}]                          # no data
    # a group over VIEW_MAX: each result its own array, none keeping the rest
    big = [{"dtype": "float64", "shape": [1000], "data": [float(i)] * 1000} for i in range(9)]
    got = tinline.inlines(big)
    assert all(g.base is None and g[0] == i for i, g in enumerate(got))
    small_group = tinline.inlines(res[1:2] * 3)
    assert small_group[0].base is small_group[1].base is not None  # views: tiny ones
    for g, o in zip(tinline.inlines(res), [tinline.inline(r) for r in res]):
        assert (g is None) == (o is None), (g, o)
        if g is not None:
            assert g.dtype == o.dtype and g.shape == o.shape
            np.testing.assert_array_equal(g, o)


def test_chunks_pipelined_in_order(client, monkeypatch):
    """A call of more than CHUNK items a transfer thread: chunks of CHUNK,
    never more than one a thread in flight at once, results in the order
    given; every chunk's items inline and no jobs:get."""
    monkeypatch.setattr(client._t, "_nworkers", lambda: 2)
    monkeypatch.setattr(tbatch, "CHUNK", 30)
    assert tbatch._chunks(200, 2) == [range(lo, min(200, lo + 30)) for lo in range(0, 200, 30)]
    assert tbatch._chunks(60, 2) == tbatch._splits(60, 2)
    calls = _counting(client, monkeypatch)
    counted = client._t.request
    lock = threading.Lock()
    now = [0, 0]  # in flight, most at once

    def flight(method, path, *a, **kw):
        with lock:
            now[0] += 1
            now[1] = max(now[1], now[0])
        try:
            time.sleep(0.01)  # each request in flight a while: overlaps show
            return counted(method, path, *a, **kw)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(client._t, "request", flight)
    items = [np.full(4, float(i)) for i in range(200)]
    got = client.map_many("x * 3", items)
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, np.full(4, 3.0 * i))
    assert len(calls) == 7 and all(p.startswith("/v1/jobs:batch?wait=") for _, p in calls), calls
    assert now[1] == 2, now


def test_many_non_finite_results_by_link(client):
    """Results of one shape, some with inf or nan (null in JSON): those come
    as their .npy (inf and nan apart), the others inline; an inf input is
    uploaded. The same values the single calls give."""
    items = [np.array([1.0, 2.0, 4.0]), np.array([0.0, 1.0, -1.0]), np.array([8.0, 16.0, 32.0]),
             np.array([np.inf, 1.0, 2.0])]
    got = client.map_many("log2(x)", items)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = [np.log2(x) for x in items]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)  # equal_nan: nan where nan
    assert np.isneginf(got[1][0]) and np.isnan(got[1][2]) and np.isposinf(got[3][0])


def test_lost_chunk_resent_with_request_ids(daemon, monkeypatch):
    """Client(retries=1): each item carries a request_id; a chunk whose
    answer is lost (the request reached the server, the connection broke)
    is sent again, the server answers with the jobs it made: no job twice.
    Without retries: no request_id, and the loss raises Unavailable."""
    c = tessel.Client(daemon.url, same_host=False, retries=1)
    real = c._t.request
    bodies = []

    def lose_first(method, path, body=None, *a, **kw):
        out = real(method, path, body, *a, **kw)
        if path.startswith("/v1/jobs:batch"):
            bodies.append(body)
            if len(bodies) == 1:
                raise tessel.Unavailable("connection reset", code="unavailable")
        return out

    monkeypatch.setattr(c._t, "request", lose_first)
    label = f"lost-{time.monotonic_ns()}"
    items = [np.full(2, float(i)) for i in range(10)]
    got = c.map_many("x + 1", items, label=label)
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, np.full(2, i + 1.0))
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    import json
    rids = [j["request_id"] for j in json.loads(bodies[0])["jobs"]]
    assert len(set(rids)) == 10
    assert len(c.jobs(label=label, limit=100)) == 10  # none made twice
    c.close()

    c = tessel.Client(daemon.url, same_host=False)
    bodies.clear()
    real = c._t.request
    monkeypatch.setattr(c._t, "request", lose_first)
    with pytest.raises(tessel.Unavailable):
        c.map_many("x + 1", items)
    assert len(bodies) == 1 and b"request_id" not in bodies[0]
    c.close()


def test_input_refused_mid_call(client, monkeypatch):
    """An input the client cannot send, in the fourth chunk: its error is
    raised, the three chunks sent before it were answered (waited for,
    not abandoned) and nothing after it was sent."""
    monkeypatch.setattr(client._t, "_nworkers", lambda: 2)
    monkeypatch.setattr(tbatch, "CHUNK", 10)
    calls = _counting(client, monkeypatch)
    answered = []
    counted = client._t.request

    def note(method, path, *a, **kw):
        out = counted(method, path, *a, **kw)
        answered.append(path)
        return out

    monkeypatch.setattr(client._t, "request", note)

    def refuse(v, field, cleanup):
        raise RuntimeError(f"cannot send {field}")

    monkeypatch.setattr(client, "_input", refuse)
    items = [np.full(2, float(i)) for i in range(60)]
    items[35] = np.float32([1, 2])  # not inline: goes to _input
    with pytest.raises(RuntimeError, match="params.inputs.x"):
        client.map_many("x + 1", items)
    assert len(calls) == 3 and len(answered) == 3, (calls, answered)
