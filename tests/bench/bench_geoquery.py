#!/usr/bin/env python3
"""bench_geoquery.py — Tessel's exact geodesic neighbour queries (issue 13:
params.query knn / radius on kind geodesic) side by side with their peers,
in one run, on the same points:

  * Tessel knn / radius: submit -> stored (the job's timings_ms.total) and
    submit -> NumPy (upload of the points, the job, the download of every
    part into the client), per backend;
  * Tessel's own square matrix + NumPy argpartition / nonzero: what one
    did before params.query. The matrix is n x n float64 (8 TB at 10^6), so
    beyond --matrix-elems it is run as an [s, n] block (points = s sample
    rows, targets = all points) and extrapolated: compute x (n-1)/(2s) (the
    square job computes the upper triangle and mirrors it), store +
    download + client work x n/s;
  * PostGIS 3, started here (initdb in a temporary directory, a Unix socket
    only, as the postgres user when run as root): a geography(Point, 4326)
    column with a GiST index; knn as a LATERAL `ORDER BY geog <-> a.geog
    LIMIT c` (sphere distance: PostGIS's KNN is spherical) re-ranked by
    ST_Distance(a.geog, b.geog, true) on the spheroid, keeping k; radius as a
    self-join on ST_DWithin(a.geog, b.geog, r, true). One psql connection
    per core, each on a slice of the query points. When the whole would
    take longer than --pg-max-s, it runs a sample and is extrapolated;
  * scikit-learn BallTree, metric haversine (a sphere of 6371008.8 m, not
    the ellipsoid), queried from one thread per core;
  * PyTorch on a GPU: unit vectors, chord^2 = 2 - 2 x.y by row chunks
    (float64), topk / a mask, haversine distance from the chord (a sphere).

Exactness: s sample rows of the brute-force matrix are computed by Tessel
(two matrix jobs with targets, mirrored as the square job mirrors its upper
triangle: d(i, j) = pair(p[min], p[max])); the reference knn of a row is
the k smallest (d, j), j != i; the reference radius set is {j != i: d <= r}.
Every row of every table says how its answers compare with it on those rows
(Tessel's must be identical: same indices, the same distance bits).

    /usr/bin/python3 tests/bench/bench_geoquery.py --tesseld build/tesseld [--n 1e5]
    python3 tests/bench/bench_geoquery.py --url http://127.0.0.1:PORT ...

See tests/bench/README.md ("bench_geoquery") for the flags and what each
column means. The Tessel query rows say "skipped" when the daemon answers
400 for params.query (a tesseld from before issue 13). Threads: one; the
PostGIS slices and BallTree chunks run in child processes / worker threads
that this process waits for. Everything started (tesseld, postgres, the
temporary directories) is stopped and removed on exit, Ctrl-C and SIGTERM
included; if this process is killed outright, postgres gets SIGINT (fast
shutdown) and tesseld SIGTERM (setpriv --pdeathsig), and only the temporary
directories are left.
"""
import argparse
import concurrent.futures
import datetime
import glob
import json
import os
import platform
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
import tessel  # noqa: E402
from tessel import errors as terrors  # noqa: E402

R_MEAN = 6371008.8  # the sphere BallTree and PyTorch measure on (metres)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Unavailable(Exception):
    """A peer that cannot run here; its row says why."""


class Skipped(Exception):
    """A Tessel row the daemon cannot answer (params.query refused)."""


# -- points ----------------------------------------------------------------------------
def uniform_points(n, rng):
    """n points uniform on the sphere, [lat, lon] degrees."""
    lat = np.degrees(np.arcsin(rng.uniform(-1.0, 1.0, n)))
    lon = rng.uniform(-180.0, 180.0, n)
    return np.ascontiguousarray(np.stack([lat, lon], axis=1))


def clustered_points(n, rng, per, sigma_km):
    """n points in n/per clusters: centres uniform on the sphere, points
    Gaussian around them (sigma_km in each direction), lon wrapped, lat
    clipped to the poles."""
    c = uniform_points(max(1, n // per), rng)
    which = rng.integers(0, len(c), n)
    dy = rng.normal(0.0, sigma_km, n) / 111.32
    lat0 = c[which, 0]
    dx = rng.normal(0.0, sigma_km, n) / (111.32 * np.maximum(np.cos(np.radians(lat0)), 1e-3))
    lat = np.clip(lat0 + dy, -90.0, 90.0)
    lon = (c[which, 1] + dx + 180.0) % 360.0 - 180.0
    return np.ascontiguousarray(np.stack([lat, lon], axis=1))


# -- Tessel ------------------------------------------------------------------------------
class Daemon:
    """A tesseld started for this run: port 0, a fresh data dir under tmp."""

    def __init__(self, exe, tmp, threads):
        self.dir = tempfile.mkdtemp(prefix="tessel-geoq-", dir=tmp)
        # setpriv --pdeathsig: the daemon stops if this process is killed
        pd = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []
        cmd = pd + [exe, "--port", "0", "--data-dir", os.path.join(self.dir, "data"),
               "--access-log", "0", "--max-upload", str(1 << 36), "--job-timeout", "7200"]
        if threads:
            cmd += ["--threads", str(threads)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url = None
        for line in self.proc.stdout:
            if "listening on http://" in line:
                self.url = line.split("listening on ")[1].split()[0].rstrip(",/")
                break
        if not self.url:
            self.stop()
            raise SystemExit("tesseld did not start: " + exe)
        # keep draining its output so it never blocks on a full pipe
        self._drain = concurrent.futures.ThreadPoolExecutor(1)
        self._drain.submit(lambda: [None for _ in self.proc.stdout])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def query_refused(e):
    """Is this 400 the daemon saying it has no params.query?"""
    f = e.field or ""
    return f.startswith("params.query") or (f == "params" and "query" in (e.message or ""))


def tessel_query(c, pts, query, backend):
    """One query job, timed: points up (.npy), submit, wait, every part down.
    Returns (stored_s, whole_s, {part: array}, job info)."""
    t0 = time.perf_counter()
    arr = c.upload(pts)
    try:
        job = c.submit("geodesic", backend=backend, points=arr, method="karney", units="m",
                       query=query, output=False, wait=60)
    except terrors.InvalidArgument as e:
        if query_refused(e):
            raise Skipped(f"this tesseld does not take params.query (400 {e.field}: {e.message})")
        raise
    job.wait()
    if job.status != "succeeded":
        raise RuntimeError(f"job {job.id} {job.status}: {job.info.get('error')}")
    # the parts the result lists (name, dtype, shape, href), else the
    # query's documented ones (compute/kinds/geodesic/query/query.h)
    names = [p["name"] for p in (job.info.get("result") or {}).get("parts") or [] if p.get("name")] or \
        (["distance", "index"] if "knn" in query else ["i", "j", "distance"])
    parts = {nm: c._t.download_npy(f"/v1/jobs/{job.id}/result/{nm}") for nm in names}
    t1 = time.perf_counter()
    info = job.info
    job.delete()
    arr.delete()
    return info["timings_ms"]["total"] / 1e3, t1 - t0, parts, info


def matrix_job(c, points, targets, backend):
    """A matrix job points x targets (uploaded), downloaded. (seconds whole,
    job timings_ms, matrix)."""
    t0 = time.perf_counter()
    a = c.upload(points)
    b = c.upload(targets) if targets is not None else None
    job = c.submit("geodesic", backend=backend, points=a, targets=b, method="karney",
                   units="m", output=False, wait=60)
    d = job.result()
    t1 = time.perf_counter()
    tm = job.info["timings_ms"]
    job.delete()
    a.delete()
    if b is not None:
        b.delete()
    return t1 - t0, tm, d


class Reference:
    """Brute force on the sample rows S from Tessel's own matrix, and the
    matrix peer's timing. rows[t] is d(S[t], j) for every j, mirrored as
    the square job mirrors: pair(p[min], p[max])."""

    def __init__(self, c, pts, S, backend):
        n = len(pts)
        self.S = S
        self.square = len(S) == n
        if self.square:  # the real square job
            self.whole_s, self.tm, self.rows = matrix_job(c, pts, None, backend)
        else:
            self.whole_s, self.tm, fwd = matrix_job(c, pts[S], pts, backend)  # the timed block
            _, _, back = matrix_job(c, pts, pts[S], backend)  # [n, s]: pair(p[j], p[S[t]])
            self.rows = fwd
            for t, i in enumerate(S):
                self.rows[t, :i] = back[:i, t]
            del back
        self.n = n

    def matrix_time(self, client_s):
        """The square matrix + client work (client_s for the block) for all n."""
        if self.square:
            return self.whole_s + client_s
        s, n = len(self.S), self.n
        comp = self.tm.get("compute", 0) / 1e3
        return comp * (n - 1) / (2 * s) + (self.whole_s - comp + client_s) * n / s

    def knn(self, k):
        """(distance, index) [s, k] by (d, j), j != i; NaN ranks last."""
        s = len(self.S)
        kk = min(k, self.n - 1)
        D = np.empty((s, kk))
        I = np.empty((s, kk), dtype=np.int64)
        for t, i in enumerate(self.S):
            d = self.rows[t].copy()
            d[i] = np.inf
            d[np.isnan(d)] = np.inf
            v = np.partition(d, kk - 1)[kk - 1]
            cand = np.nonzero(d <= v)[0]
            o = cand[np.lexsort((cand, d[cand]))][:kk]
            D[t], I[t] = self.rows[t, o], o
        return D, I

    def client_knn(self, k):
        """What a client of the matrix does (the timed part): argpartition
        of each row (itself excluded), then its k sorted."""
        d = self.rows.copy()
        d[np.arange(len(self.S)), self.S] = np.inf
        kk = min(k, self.n - 1)
        idx = np.argpartition(d, kk - 1, axis=1)[:, :kk]
        part = np.take_along_axis(d, idx, axis=1)
        o = np.argsort(part, axis=1, kind="stable")
        return np.take_along_axis(part, o, axis=1), np.take_along_axis(idx, o, axis=1)

    def client_within(self, r):
        """What a client of the matrix does for a radius: the pairs (the
        matrix is symmetric: the upper triangle, i < j)."""
        t, j = np.nonzero(self.rows <= r)
        keep = self.S[t] < j
        return self.S[t][keep], j[keep], self.rows[t[keep], j[keep]]

    def within(self, r):
        """Per sample row, the sorted j != i with d <= r."""
        out = []
        for t, i in enumerate(self.S):
            j = np.nonzero(self.rows[t] <= r)[0]
            out.append(j[j != i])
        return out


def knn_agreement(ref_d, ref_i, S, dist, ind, exact_bits):
    """How a peer's knn on the sample rows compares with the reference."""
    if dist is None:
        return "—"
    same = sum(np.array_equal(ind[t], ref_i[t]) for t in range(len(S)))
    sets = sum(set(ind[t].tolist()) == set(ref_i[t].tolist()) for t in range(len(S)))
    err = np.abs(dist - ref_d)
    rel = np.nanmax(err / np.maximum(ref_d, 1e-9))
    s = f"{same}/{len(S)} rows same indices in order, {sets}/{len(S)} same sets; "
    if exact_bits:
        bits = sum(np.array_equal(dist[t], ref_d[t]) for t in range(len(S)))
        return s + f"{bits}/{len(S)} rows distances bit-identical (max |Δd| {np.nanmax(err):.3g} m)"
    return s + f"max |Δd| {np.nanmax(err):.3g} m (relative {rel:.2g})"


def radius_distance_bits(ref, i, j, dist):
    """Tessel's radius pairs touching a sample row: how many distances
    differ from the reference's bits, of how many."""
    pos = np.full(ref.n, -1, dtype=np.int64)
    pos[ref.S] = np.arange(len(ref.S))
    bad = tot = 0
    for a, b in ((i, j), (j, i)):
        m = pos[a] >= 0
        tot += int(m.sum())
        bad += int(np.count_nonzero(ref.rows[pos[a[m]], b[m]] != dist[m]))
    return bad, tot


def radius_agreement(ref_sets, S, sets):
    if sets is None:
        return "—"
    same = sum(np.array_equal(np.sort(sets[t]), ref_sets[t]) for t in range(len(S)))
    miss = sum(len(np.setdiff1d(ref_sets[t], sets[t])) for t in range(len(S)))
    extra = sum(len(np.setdiff1d(sets[t], ref_sets[t])) for t in range(len(S)))
    tot = sum(len(x) for x in ref_sets)
    return f"{same}/{len(S)} rows same neighbour sets ({tot} true neighbours: {miss} missed, {extra} extra)"


# -- PostGIS -------------------------------------------------------------------------------
class Postgis:
    """A PostgreSQL + PostGIS server for this run: initdb in a temporary
    directory, a Unix socket there, no TCP; run as the postgres user (or
    $PG_USER) when this process is root (the server refuses root)."""

    def __init__(self, bindir, tmp, conns):
        if bindir is None:
            cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
            if cands:
                bindir = os.path.dirname(cands[-1])
            elif shutil.which("postgres"):
                bindir = os.path.dirname(os.path.realpath(shutil.which("postgres")))
            else:
                raise Unavailable("no PostgreSQL server here (deps/packages.txt [bench]: postgresql-15)")
        ver = os.path.basename(os.path.dirname(bindir))
        if not glob.glob(f"/usr/share/postgresql/{ver}/extension/postgis.control"):
            raise Unavailable(f"no PostGIS for PostgreSQL {ver} (deps/packages.txt [bench]: "
                              "postgresql-15-postgis-3)")
        self.bin = bindir
        self.conns = conns
        self.dir = tempfile.mkdtemp(prefix="tessel-geoq-pg-", dir=tmp)
        self.proc = None
        drop = []
        if os.geteuid() == 0:
            user = os.environ.get("PG_USER", "postgres")
            try:
                pw = pwd.getpwnam(user)
            except KeyError:
                raise Unavailable(f"running as root and no user {user!r} to run postgres as")
            os.chmod(self.dir, 0o700)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            drop = ["--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid), "--clear-groups"]
        self.data = os.path.join(self.dir, "data")
        r = subprocess.run(["setpriv"] + drop + [os.path.join(bindir, "initdb"), "-D", self.data,
                                                 "-U", "bench", "--auth=trust", "-E", "UTF8", "--no-sync"],
                           cwd=self.dir, capture_output=True, text=True)
        if r.returncode:
            raise Unavailable("initdb failed: " + r.stderr.strip()[-300:])
        mem = "1GB"
        self.proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "INT"] + drop +
            [os.path.join(bindir, "postgres"), "-D", self.data, "-k", self.dir,
             "-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", f"shared_buffers={mem}", "-c", "work_mem=256MB",
             "-c", "maintenance_work_mem=1GB", "-c", "max_parallel_workers_per_gather=0",
             "-c", "jit=off", "-c", "max_wal_size=8GB"],
            cwd=self.dir, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "log"), "w"))
        for _ in range(300):
            if self.proc.poll() is not None:
                raise Unavailable("postgres exited: " + open(os.path.join(self.dir, "log")).read()[-300:])
            if subprocess.run(self.psql_cmd("SELECT 1"), capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise Unavailable("postgres did not accept connections in 30 s")
        self.sql("CREATE EXTENSION postgis")
        self.version = self.sql("SELECT postgis_lib_version()").strip()

    def psql_cmd(self, sql=None):
        cmd = [os.path.join(self.bin, "psql"), "-h", self.dir, "-U", "bench", "-d", "postgres",
               "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
        return cmd + (["-c", sql] if sql else [])

    def sql(self, sql, stdin=None):
        r = subprocess.run(self.psql_cmd(sql), input=stdin, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("psql: " + r.stderr.strip()[-500:])
        return r.stdout

    def load(self, pts):
        """The points as table pts(id, geog) with a GiST index; seconds."""
        t0 = time.perf_counter()
        self.sql("DROP TABLE IF EXISTS pts, raw, q; CREATE TABLE raw(id int, lat float8, lon float8)")
        lines = "".join(f"{i},{la!r},{lo!r}\n" for i, (la, lo) in enumerate(pts.tolist()))
        self.sql("COPY raw FROM STDIN (FORMAT csv)", stdin=lines)
        self.sql("CREATE TABLE pts AS SELECT id, ST_SetSRID(ST_MakePoint(lon, lat), 4326)::geography"
                 " AS geog FROM raw; ALTER TABLE pts ADD PRIMARY KEY (id);"
                 " CREATE INDEX pts_geog ON pts USING gist (geog); DROP TABLE raw; ANALYZE pts")
        return time.perf_counter() - t0

    def _run(self, ids, query):
        """query (with {slot}) for the points ids, spread over the
        connections; seconds of the whole and the rows (a, b, d)."""
        self.sql("DROP TABLE IF EXISTS q; CREATE TABLE q(id int, slot int)")
        self.sql("COPY q FROM STDIN (FORMAT csv)",
                 stdin="".join(f"{i},{t % self.conns}\n" for t, i in enumerate(ids)))
        self.sql("ANALYZE q")
        outs = [tempfile.TemporaryFile(dir=self.dir) for _ in range(self.conns)]
        t0 = time.perf_counter()
        ps = [subprocess.Popen(self.psql_cmd(f"COPY ({query.format(slot=s)}) TO STDOUT"),
                               stdout=outs[s], stderr=subprocess.PIPE) for s in range(self.conns)]
        errs = [p.communicate()[1] for p in ps]
        dt = time.perf_counter() - t0
        for p, e in zip(ps, errs):
            if p.returncode:
                raise RuntimeError("psql: " + e.decode()[-500:])
        rows = []
        for f in outs:
            f.seek(0)
            a = np.loadtxt(f, dtype=np.float64, ndmin=2) if os.fstat(f.fileno()).st_size else np.empty((0, 3))
            rows.append(a)
            f.close()
        return dt, np.concatenate(rows)

    KNN = ("SELECT a.id, c.id, c.d FROM q JOIN pts a ON a.id = q.id CROSS JOIN LATERAL ("
           " SELECT b.id, ST_Distance(a.geog, b.geog, true) AS d FROM ("
           "  SELECT b.id, b.geog FROM pts b WHERE b.id <> a.id ORDER BY b.geog <-> a.geog LIMIT {cand}) b"
           " ORDER BY d, b.id LIMIT {k}) c WHERE q.slot = {{slot}}")
    RADIUS = ("SELECT a.id, b.id, ST_Distance(a.geog, b.geog, true) FROM q JOIN pts a ON a.id = q.id"
              " JOIN pts b ON ST_DWithin(a.geog, b.geog, {r}, true) AND b.id <> a.id"
              " WHERE q.slot = {{slot}}")

    def knn(self, ids, k, cand):
        dt, rows = self._run(ids, self.KNN.format(cand=cand, k=k))
        rows = rows[np.lexsort((rows[:, 1], rows[:, 2], rows[:, 0]))]
        a = rows[:, 0].astype(np.int64)
        pos = {int(i): t for t, i in enumerate(ids)}
        kk = min(k, 1 << 62)
        D = np.full((len(ids), k), np.nan)
        I = np.full((len(ids), k), -1, dtype=np.int64)
        fill = np.zeros(len(ids), dtype=np.int64)
        for ai, bi, d in zip(a, rows[:, 1].astype(np.int64), rows[:, 2]):
            t = pos[int(ai)]
            if fill[t] < kk:
                D[t, fill[t]], I[t, fill[t]] = d, bi
                fill[t] += 1
        return dt, D, I

    def radius(self, ids, r):
        dt, rows = self._run(ids, self.RADIUS.format(r=repr(float(r))))
        a = rows[:, 0].astype(np.int64)
        b = rows[:, 1].astype(np.int64)
        return dt, a, b

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- scikit-learn and PyTorch (spheres) -----------------------------------------------------
def balltree(pts, threads):
    try:
        from sklearn.neighbors import BallTree
    except ImportError:
        raise Unavailable("no scikit-learn here (deps/packages.txt [bench]: python3-sklearn)")
    X = np.radians(pts)
    t0 = time.perf_counter()
    tree = BallTree(X, metric="haversine")
    chunks = np.array_split(np.arange(len(X)), threads * 4)
    ex = concurrent.futures.ThreadPoolExecutor(threads)
    return tree, X, chunks, ex, t0


def balltree_knn(pts, k, threads):
    tree, X, chunks, ex, t0 = balltree(pts, threads)
    kk = min(k + 1, len(X))
    res = list(ex.map(lambda c: tree.query(X[c], k=kk), chunks))
    ex.shutdown()
    d = np.concatenate([r[0] for r in res])
    ind = np.concatenate([r[1] for r in res])
    # drop the point itself (or, when a duplicate took its place, the last)
    self_ = ind == np.arange(len(X))[:, None]
    self_[~self_.any(axis=1), -1] = True
    keep = kk - 1
    ind = ind[~self_].reshape(len(X), keep)
    d = d[~self_].reshape(len(X), keep) * R_MEAN
    return time.perf_counter() - t0, d, ind


def balltree_radius(pts, r, threads):
    tree, X, chunks, ex, t0 = balltree(pts, threads)
    res = list(ex.map(lambda c: tree.query_radius(X[c], r / R_MEAN), chunks))
    ex.shutdown()
    sets = [s for part in res for s in part]
    dt = time.perf_counter() - t0
    pairs = (sum(len(s) for s in sets) - len(X)) // 2
    return dt, sets, pairs


def torch_dev():
    try:
        import torch
    except ImportError:
        raise Unavailable("not available here (no PyTorch)")
    if not torch.cuda.is_available():
        raise Unavailable("not available here (PyTorch sees no CUDA device)")
    return torch


def torch_unit(torch, pts):
    la, lo = np.radians(pts[:, 0]), np.radians(pts[:, 1])
    x = np.stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)], axis=1)
    return torch.from_numpy(x).to("cuda")


def torch_chunk(n, mem_bytes):
    return max(1, min(n, int(mem_bytes // (8 * n * 3))))


def torch_knn(pts, k, mem_bytes):
    """haversine k nearest, chunked rows x all, float64; (s, d, ind) on the host."""
    torch = torch_dev()
    n = len(pts)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    X = torch_unit(torch, pts)
    kk = min(k, n - 1)
    rows = torch_chunk(n, mem_bytes)
    D = torch.empty((n, kk), dtype=torch.float64, device="cuda")
    I = torch.empty((n, kk), dtype=torch.int64, device="cuda")
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        c2 = (2.0 - 2.0 * (X[lo:hi] @ X.T)).clamp_(min=0.0)
        c2[torch.arange(hi - lo, device="cuda"), torch.arange(lo, hi, device="cuda")] = float("inf")
        v, j = torch.topk(c2, kk, dim=1, largest=False, sorted=True)
        D[lo:hi] = 2.0 * R_MEAN * torch.asin(torch.sqrt(v).mul_(0.5).clamp_(max=1.0))
        I[lo:hi] = j
        del c2
    d, ind = D.cpu().numpy(), I.cpu().numpy()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, d, ind


def torch_radius(pts, r, mem_bytes):
    """haversine pairs within r, i < j; (s, i, j) on the host."""
    torch = torch_dev()
    n = len(pts)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    X = torch_unit(torch, pts)
    lim = (2.0 * np.sin(min(r / (2.0 * R_MEAN), np.pi / 2))) ** 2
    rows = torch_chunk(n, mem_bytes)
    ii, jj = [], []
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        c2 = 2.0 - 2.0 * (X[lo:hi] @ X.T)
        a, b = torch.nonzero(c2 <= lim, as_tuple=True)
        a = a + lo
        keep = a < b
        ii.append(a[keep])
        jj.append(b[keep])
        del c2
    i = torch.cat(ii).cpu().numpy()
    j = torch.cat(jj).cpu().numpy()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, i, j


def pair_sets(S, i, j):
    """Per sample row S[t], the j's paired with it (either side)."""
    pos = {int(v): t for t, v in enumerate(S)}
    out = [[] for _ in S]
    for a, b in ((i, j), (j, i)):
        m = np.isin(a, S)
        for x, y in zip(a[m], b[m]):
            out[pos[int(x)]].append(int(y))
    return [np.unique(np.array(v, dtype=np.int64)) for v in out]


# -- the table -----------------------------------------------------------------------------
class Table:
    def __init__(self, title):
        self.title = title
        self.rows = []  # (name, timed, scope, secs or None, exact_peer, agreement, note)
        self.notes = []

    def add(self, name, timed, scope, secs, agreement="", note="", exact_peer=False):
        self.rows.append((name, timed, scope, secs, exact_peer, agreement, note))
        log(f"  {name}: {'%.3f s' % secs if secs is not None else note}")

    def render(self):
        ex = [r[3] for r in self.rows if r[4] and r[3] is not None]
        best = min(ex) if ex else None
        out = [f"### {self.title}", "",
               "| row | timed | n run | s | / fastest exact peer | agreement with brute force (sample rows) | note |",
               "|---|---|---|---|---|---|---|"]
        for name, timed, scope, secs, _, agr, note in self.rows:
            s = f"{secs:.3f}" if secs is not None else "—"
            ratio = f"{secs / best:.3g}" if (secs is not None and best) else "—"
            out.append(f"| {name} | {timed} | {scope} | {s} | {ratio} | {agr} | {note} |")
        out.append("")
        out += self.notes
        return "\n".join(out) + "\n"


def fmt_n(n):
    return f"{n:,}"


# -- the cases -----------------------------------------------------------------------------
def run_case(args, c, pg, pts, label, query, backends, gpu, ref, pg_loaded):
    """One table: a knn or radius query on pts, every row."""
    n = len(pts)
    S = ref.S
    is_knn = "knn" in query
    k = query["knn"]["k"] if is_knn else None
    r = query["radius"]["r"] if not is_knn else None
    title = (f"{label}: knn k = {k}" if is_knn else f"{label}: radius r = {r:g} m") + \
        f", n = {fmt_n(n)}, WGS84, Karney, points = targets"
    log("== " + title)
    tb = Table(title)
    if is_knn:
        ref_d, ref_i = ref.knn(k)
    else:
        ref_sets = ref.within(r)

    # Tessel's queries
    stored = {}
    for b in backends:
        try:
            st, whole, parts, info = tessel_query(c, pts, query, b)
        except Skipped as e:
            tb.add(f"Tessel {b}", "submit → stored", fmt_n(n), None, note="skipped: " + str(e))
            continue
        except Exception as e:  # a failure is a row, not the end of the run
            tb.add(f"Tessel {b}", "submit → stored", fmt_n(n), None, note=f"error: {e}")
            continue
        used = (info.get("backend") or {}).get("used", b)
        if is_knn:
            agr = knn_agreement(ref_d, ref_i, S, parts["distance"][S], parts["index"][S], True)
            extra = ""
        else:
            i, j = parts["i"], parts["j"]
            agr = radius_agreement(ref_sets, S, pair_sets(S, i, j))
            bad, tot = radius_distance_bits(ref, i, j, parts["distance"])
            agr += f"; {tot - bad}/{tot} of their pairs' distances bit-identical"
            extra = f"{len(i):,} pairs"
        stored[b] = st
        exact = (agr.startswith(f"{len(S)}/{len(S)} rows same indices in order") and
                 f"{len(S)}/{len(S)} rows distances bit-identical" in agr) if is_knn else \
            (agr.startswith(f"{len(S)}/{len(S)} rows same neighbour sets") and bad == 0)
        tb.notes.append(f"Exactness, Tessel {b}: " + ("identical to brute force on every sample row."
                                                     if exact else "**MISMATCH** with brute force: " + agr))
        if not exact:
            log(f"MISMATCH: Tessel {b} {title}: {agr}")
        tb.add(f"Tessel {b} ({used})", "submit → stored", fmt_n(n), st, agr, extra)
        tb.add(f"Tessel {b} ({used})", "points up + job + parts down to NumPy", fmt_n(n), whole, "same", extra)

    # Tessel's square matrix + argpartition / nonzero
    t0 = time.perf_counter()
    if is_knn:
        ref.client_knn(k)
    else:
        ref.client_within(r)
    client = time.perf_counter() - t0
    est = ref.matrix_time(client)
    scope = fmt_n(n) if ref.square else f"{len(S):,} rows of {fmt_n(n)}, extrapolated"
    tb.add("Tessel square matrix + " + ("argpartition" if is_knn else "nonzero"),
           "matrix job + download + NumPy", scope, est, "the reference (brute force)",
           f"{n * n * 8 / 1e9:.3g} GB matrix" + ("" if ref.square else
                                                   f"; measured {ref.whole_s + client:.2f} s for the block"),
           exact_peer=True)

    # PostGIS
    if pg is None or isinstance(pg, str):
        tb.add(f"PostGIS", "query → rows in the client", "—", None, note=pg or "not run (--no-postgis)")
    else:
        try:
            if not pg_loaded.get(label):
                pg_loaded.clear()
                pg_loaded[label] = pg.load(pts)
            cand = max(args.pg_cand, k) if is_knn else None
            probe_ids = np.union1d(S, np.random.default_rng(7).choice(n, min(n, args.pg_probe), replace=False))
            if is_knn:
                dt, D, I = pg.knn(probe_ids, k, cand)
            else:
                dt, a, bb = pg.radius(probe_ids, r)
            est_full = dt * n / len(probe_ids)
            full = len(probe_ids) == n or (args.pg_max_s > 0 and est_full <= args.pg_max_s)
            if full and len(probe_ids) < n:
                ids = np.arange(n)
                if is_knn:
                    dt, D, I = pg.knn(ids, k, cand)
                else:
                    dt, a, bb = pg.radius(ids, r)
            else:
                ids = probe_ids
            pos = np.searchsorted(ids, S)
            if is_knn:
                agr = knn_agreement(ref_d, ref_i, S, D[pos], I[pos], False)
                note = f"candidates by `<->` (sphere): {cand}, re-ranked by ST_Distance(…, true)"
            else:
                agr = radius_agreement(ref_sets, S, pair_sets(S, a, bb))
                note = f"{(len(a) // 2 if full else len(a) * n // (2 * len(ids))):,} pairs" + \
                    ("" if full else " (extrapolated)")
            secs = dt if full else dt * n / len(ids)
            scope = fmt_n(n) if full else f"{len(ids):,} of {fmt_n(n)} points, extrapolated"
            note += f"; load + GiST index {pg_loaded[label]:.1f} s (not in s); {pg.conns} connections; PostGIS {pg.version}"
            tb.add("PostGIS", "query → rows in the client", scope, secs, agr, note, exact_peer=True)
            if stored:
                for b, st in stored.items():
                    tb.notes.append(f"Tessel {b} submit → stored is **{secs / st:.1f}×** faster than PostGIS"
                                    f" ({st:.2f} s vs {secs:.2f} s).")
        except Exception as e:
            tb.add("PostGIS", "query → rows in the client", "—", None, note=f"error: {e}")

    # BallTree
    try:
        if is_knn:
            dt, d, ind = balltree_knn(pts, k, args.threads or os.cpu_count())
            agr = knn_agreement(ref_d, ref_i, S, d[S], ind[S], False)
            note = "sphere (haversine), not the ellipsoid"
        else:
            dt, sets, pairs = balltree_radius(pts, r, args.threads or os.cpu_count())
            agr = radius_agreement(ref_sets, S, [np.sort(sets[i][sets[i] != i]) for i in S])
            note = f"{pairs:,} pairs; sphere (haversine), not the ellipsoid"
        tb.add("scikit-learn BallTree", "build + query, NumPy in", fmt_n(n), dt, agr, note)
    except Unavailable as e:
        tb.add("scikit-learn BallTree", "build + query", "—", None, note=str(e))

    # PyTorch
    if gpu or args.torch:
        try:
            mem = args.torch_chunk_gb * 1e9
            if is_knn:
                dt, d, ind = torch_knn(pts, k, mem)
                agr = knn_agreement(ref_d, ref_i, S, d[S], ind[S], False)
                note = "sphere; chunked rows x all, float64, synchronised"
            else:
                dt, i, j = torch_radius(pts, r, mem)
                agr = radius_agreement(ref_sets, S, pair_sets(S, i, j))
                note = f"{len(i):,} pairs; sphere; chunked, float64, synchronised"
            tb.add("PyTorch cdist + " + ("topk" if is_knn else "mask"),
                   "to(cuda) + compute + cpu()", fmt_n(n), dt, agr, note)
        except Unavailable as e:
            tb.add("PyTorch cdist + topk", "—", "—", None, note=str(e))
        except Exception as e:
            tb.add("PyTorch cdist + topk", "—", "—", None, note=f"error: {e}")
    else:
        tb.add("PyTorch cdist + topk", "—", "—", None, note="not available here (no GPU on the daemon; --torch forces)")
    tb.notes.append("Load average after the case: " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + ".")
    return tb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tesseld", help="a tesseld binary to start for this run")
    ap.add_argument("--url", help="a running daemon instead (its own threads)")
    ap.add_argument("--n", type=float, default=None, help="points (default 1e6 with a GPU, else 1e5)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--r", type=float, default=1000.0, help="radius, metres")
    ap.add_argument("--cases", default="uniform-knn,clustered-knn,clustered-radius")
    ap.add_argument("--backends", default=None, help="Tessel backends (default cuda with a GPU, else cpu)")
    ap.add_argument("--per-cluster", type=int, default=1000)
    ap.add_argument("--sigma-km", type=float, default=10.0)
    ap.add_argument("--max-pairs", type=int, default=200_000_000)
    ap.add_argument("--matrix-elems", type=float, default=None,
                    help="largest matrix block (default 2.5e7, 1e8 with a GPU); also the check's rows")
    ap.add_argument("--pg-max-s", type=float, default=120.0,
                    help="run PostGIS on all points when that is expected within this; else sample (0: always sample)")
    ap.add_argument("--pg-probe", type=int, default=2000, help="PostGIS's sample (and first probe) of points")
    ap.add_argument("--pg-cand", type=int, default=20, help="knn candidates by <-> before the spheroid re-rank")
    ap.add_argument("--pg-bin", help="PostgreSQL's bin directory (default /usr/lib/postgresql/<newest>/bin)")
    ap.add_argument("--no-postgis", action="store_true")
    ap.add_argument("--torch", action="store_true", help="run the PyTorch rows without a GPU daemon")
    ap.add_argument("--torch-chunk-gb", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=0, help="tesseld --threads, BallTree threads, psql connections")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--out", help="the markdown copy (default tests/bench/results/geoquery-<machine>-<date>.md)")
    args = ap.parse_args()
    if not args.tesseld and not args.url:
        ap.error("give --tesseld PATH or --url URL")

    def stop_on_signal(sig, _frame):
        raise SystemExit(f"stopped by signal {sig}")
    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGHUP, stop_on_signal)

    daemon = pg = None
    try:
        if args.url:
            url = args.url.rstrip("/")
        else:
            daemon = Daemon(args.tesseld, args.dir, args.threads)
            url = daemon.url
        c = tessel.Client(url, same_host=False, timeout=3600)
        dev = c.devices()
        gpus = [d for d in (dev.get("cuda") or {}).get("devices") or [] if dev["cuda"].get("available")]
        gpu = bool(gpus)
        n = int(args.n or (1e6 if gpu else 1e5))
        backends = (args.backends or ("cuda" if gpu else "cpu")).split(",")
        elems = args.matrix_elems or (1e8 if gpu else 2.5e7)
        threads = args.threads or os.cpu_count()
        args.threads = threads
        rng = np.random.default_rng(args.seed)
        s = n if n * n <= elems else max(1, int(elems // n))
        S = np.sort(rng.choice(n, s, replace=False)) if s < n else np.arange(n)

        if args.no_postgis:
            pg = None
        else:
            try:
                pg = Postgis(args.pg_bin, args.dir, threads)
            except Unavailable as e:
                pg = "not available here: " + str(e)
                log("PostGIS: " + pg)

        machine = (f"{os.cpu_count()} CPUs ({dev['cpu'].get('model')}), "
                   f"{'GPU ' + ', '.join(g.get('name', '?') for g in gpus) if gpu else 'no GPU'}, "
                   f"tesseld {dev['cpu'].get('workers')} CPU workers")
        head = [f"# bench_geoquery — {datetime.date.today()}", "",
                f"Machine: {machine}; {platform.node()}; load average at start "
                f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}.", "",
                "Command: `" + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]) + "`", "",
                f"Exactness reference: {len(S):,} sample rows of the brute-force matrix (Tessel's square "
                "matrix semantics: d(i, j) = pair(p[min], p[max]), j ≠ i, ties by the smaller index).", ""]
        print("\n".join(head))
        tables = []
        sets = {}
        pg_loaded = {}
        for case in args.cases.split(","):
            kind, q = case.split("-")
            if kind not in sets:
                g = np.random.default_rng(args.seed + (0 if kind == "uniform" else 1))
                pts = uniform_points(n, g) if kind == "uniform" else \
                    clustered_points(n, g, args.per_cluster, args.sigma_km)
                log(f"== {kind} points: brute-force reference on {len(S)} rows")
                ref = Reference(c, pts, S, "cuda" if gpu else "cpu")
                sets = {kind: (pts, ref)}
            pts, ref = sets[kind]
            label = ("uniform on the sphere" if kind == "uniform" else
                     f"clustered ({args.per_cluster} per cluster, σ {args.sigma_km:g} km)")
            query = {"knn": {"k": args.k}} if q == "knn" else \
                {"radius": {"r": args.r, "max_pairs": args.max_pairs}}
            tb = run_case(args, c, pg, pts, label, query, backends, gpu, ref, pg_loaded)
            txt = tb.render()
            print(txt, flush=True)
            tables.append(txt)
        target = ("targets (issue 13): one H100/H200, 10⁶ points, k = 10 submit → stored ≤ 10 s; radius "
                  "1 km on 10⁶ clustered ≤ 10 s" if gpu else
                  "targets (issue 13): 2 cores, 10⁵ points, k = 10 ≤ 30 s and ≥ 10× faster than PostGIS")
        print(target)
        out = args.out or os.path.join(
            HERE, "results", f"geoquery-{(gpus[0].get('name', 'gpu').split()[-1].lower() if gpu else f'{os.cpu_count()}core')}"
            f"-n{n}-{datetime.date.today()}.md")
        with open(out, "w") as f:
            f.write("\n".join(head) + "\n" + "\n".join(tables) + "\n" + target + "\n")
        log("saved " + out)
    finally:
        if isinstance(pg, Postgis):
            pg.stop()
        if daemon is not None:
            daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
