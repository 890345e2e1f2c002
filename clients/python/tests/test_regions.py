"""Registered shared-memory regions from the client (tessel/region.py):
c.region, c.empty carved from the client's pool, and calls whose arrays
live in regions sending no byte over HTTP (every request is counted and
none is an upload or a result download); results bit-equal to the same
calls over HTTP (a client with same_host=False)."""
import os

import numpy as np
import pytest

import tessel


class Counter:
    """Every request a client's transport sends: (method, path, body bytes)."""

    def __init__(self, c):
        self.seen = []
        send = c._t._send

        def counted(method, path, body, headers, timeout, *rest):
            n = 0 if body is None else sum(memoryview(p).nbytes for p in
                                           ([body] if isinstance(body, (bytes, bytearray)) else body))
            self.seen.append((method, path, n))
            return send(method, path, body, headers, timeout, *rest)
        c._t._send = counted

    def data_requests(self):
        """Uploads of arrays and downloads of results."""
        return [s for s in self.seen if s[1].startswith("/v1/arrays")
                or "/result" in s[1]]


@pytest.fixture
def rc(daemon):
    c = tessel.Client(daemon.url, local_dir=daemon.local)
    assert c.local_dir() is not None
    yield c
    c.close()


@pytest.fixture(scope="module")
def http(daemon):
    c = tessel.Client(daemon.url, same_host=False)
    yield c
    c.close()


def _in_region(c, a):
    return c._region_of(a) is not None


def test_region_object(rc, daemon):
    with rc.region(1 << 20) as r:
        assert r.id.startswith("r_") and r.nbytes == 1 << 20
        assert os.path.dirname(r.path) == os.path.realpath(daemon.local)
        listed = rc._t.json("GET", "/v1/regions")[1]["regions"]
        assert [g["bytes"] for g in listed if g["id"] == r.id] == [1 << 20]
        x = r.ndarray((100,), np.float64, offset=4096)
        x[:] = np.arange(100.0)
        assert rc.reduce("sum", x=x) == 4950.0
        with pytest.raises(ValueError):
            r.ndarray((1 << 17,), offset=8)  # past the end
        with pytest.raises(ValueError):
            r.ndarray((2,), offset=3)  # not aligned
        path = r.path
    assert not os.path.exists(path)
    with pytest.raises(tessel.NotFound):
        rc._t.json("GET", f"/v1/regions/{r.id}")
    assert x[99] == 99.0  # the mapping outlives the region


def test_empty_calls_move_no_bytes_over_http(rc, http):
    n = 1000
    x = rc.empty((n,))
    assert not isinstance(x, np.memmap) and _in_region(rc, x)
    x[:] = np.linspace(-3, 3, n)
    m = rc.empty((20, 50))
    m[...] = np.arange(1000.0).reshape(20, 50) / 7
    w = rc.empty((50, 10))
    w[...] = np.arange(500.0).reshape(50, 10) / 3
    pts = rc.empty((40, 2))
    pts[:, 0] = np.linspace(-50, 50, 40)
    pts[:, 1] = np.linspace(-170, 170, 40)
    cnt = Counter(rc)
    j = rc.submit_map("x**2 + 2*x + 1", x=x)
    y = j.result(timeout=60)
    assert set(j.info["params"]["inputs"]["x"]) == {"region", "offset", "dtype", "shape"}
    assert j.info["output"]["region"] == j.info["result"]["region"]
    r_sum = rc.reduce("sum", x=m, axis=1)
    r_mm = rc.matmul(m, w)
    r_geo = rc.geodesic(pts)
    knn = rc.geodesic_knn(pts, 3)
    assert cnt.data_requests() == []
    assert all(n == 0 for m_, p, n in cnt.seen if m_ == "GET")
    for a in (y, r_sum, r_mm, r_geo):  # results are views of the client's regions
        assert _in_region(rc, a)
    # bit-equal to the same calls over HTTP
    np.testing.assert_array_equal(y, http.map("x**2 + 2*x + 1", x=np.array(x)))
    np.testing.assert_array_equal(r_sum, http.reduce("sum", x=np.array(m), axis=1))
    np.testing.assert_array_equal(r_mm, http.matmul(np.array(m), np.array(w)))
    np.testing.assert_array_equal(r_geo, http.geodesic(np.array(pts)))
    hk = http.geodesic_knn(np.array(pts), 3)
    dist, idx = (knn["distance"], knn["index"]) if isinstance(knn, dict) else knn
    hd, hi = (hk["distance"], hk["index"]) if isinstance(hk, dict) else hk
    np.testing.assert_array_equal(dist, hd)
    np.testing.assert_array_equal(idx, hi)
    # a result in a region chains into the next call, still in place
    cnt.seen.clear()
    z = rc.map("y - 1", y=y)
    np.testing.assert_array_equal(z, np.array(y) - 1)
    j2 = rc.submit_map("y * 3", y=j)  # the Job itself: its region range
    assert set(j2.info["params"]["inputs"]["y"]) == {"region", "offset", "dtype", "shape"}
    np.testing.assert_array_equal(j2.result(timeout=60), np.array(y) * 3)
    assert cnt.data_requests() == []


def test_ordinary_ndarray_copied_into_a_region(rc, http):
    a = np.random.default_rng(3).random(3_000_000)  # several threads copy it
    cnt = Counter(rc)
    j = rc.submit_map("-b/a", a=a, b=a[::-1].copy())
    got = j.result(timeout=120)
    assert "region" in j.info["params"]["inputs"]["a"]
    assert cnt.data_requests() == []
    np.testing.assert_array_equal(got, -(a[::-1]) / a)
    assert got.dtype == np.float64 and _in_region(rc, got)
    ints = rc.map("x * 2", x=np.arange(5))  # converted, then copied in
    np.testing.assert_array_equal(ints, np.arange(5) * 2.0)


def test_pool_blocks_reused_and_regions_regained(rc):
    e1 = rc.empty((10,))
    r1, off1 = rc._region_of(e1)
    addr = e1.__array_interface__["data"][0]
    del e1  # its block is given back ...
    e2 = rc.empty((10,))
    assert e2.__array_interface__["data"][0] == addr  # ... and reused
    e2[:] = 5.0
    # The server forgot every region (as after a restart): the call
    # registers anew and copies the array, and still succeeds.
    for g in rc._t.json("GET", "/v1/regions")[1]["regions"]:
        rc._t.request("DELETE", f"/v1/regions/{g['id']}")
    np.testing.assert_array_equal(rc.map("x + 1", x=e2), np.full(10, 6.0))
    assert r1.id not in rc._regions


def test_limit_falls_back_to_files(other_dir):
    from conftest import Daemon
    d = Daemon(extra=["--region-bytes", "4096"])
    try:
        c = tessel.Client(d.url, local_dir=d.local)
        e = c.empty((1000,))  # a 64 MiB pool region is past the limit
        assert isinstance(e, np.memmap)
        with pytest.raises(tessel.PayloadTooLarge):
            c.region(1 << 20)
        with c.region(4096) as r:
            r.ndarray((4,))[:] = 1.0
            assert c.reduce("sum", x=r.ndarray((4,))) == 4.0
        c.close()
    finally:
        d.stop()
