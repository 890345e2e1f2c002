#!/usr/bin/env python3
"""tests/contract/run.py — api/openapi.json against the real daemon's answers.

Starts tesseld (argv[1]) on a free port (as tests/hostile/run.py does: --port
0, the port read from its "listening on" line) with a token file, then calls
every route of the spec with answers that succeed and answers that fail, and
for each answer asserts:
  - the spec has the route, method and status code (an undocumented status
    is a failure);
  - a JSON body validates against that response's schema with a JSON Schema
    2020-12 validator (python3-jsonschema), $refs resolved inside the spec;
  - every header the response documents as required (X-Request-Id, Location,
    Retry-After, WWW-Authenticate, Allow) is there, and X-Total-Rows after a
    ?limit_rows cut.
Request bodies are checked against the request schema too: every body sent
to POST /v1/jobs that the server accepts validates against JobSubmit, and
bodies the per-kind union must refuse (a map job with matmul's params, an
ellipsoid with |f| > 1/50) fail it.
It also asserts what the contract says beyond shapes: an unknown query
parameter is 400 naming it, on every route, and every parameter the spec
gives a route is taken; ?limit_rows gives the whole
"shape", "rows" and X-Total-Rows; numbers are the shortest text that reads
back (0.1, 1/3, 1e-300) and int64 results are exact beyond 2^53.
Exit 77 (skipped) when python3-jsonschema is missing.
"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import jsonschema
    jsonschema.Draft202012Validator
except (ImportError, AttributeError) as x:  # Debian: python3-jsonschema
    print("skipped: python3-jsonschema (with 2020-12) is not installed (%s)" % x)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC_PATH = os.path.join(HERE, "..", "..", "api", "openapi.json")
SPEC = json.load(open(SPEC_PATH))
SPEC_URI = "urn:tessel:openapi"
try:  # jsonschema >= 4.18 (Debian 13) resolves $refs through referencing
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012
    _REG = {"registry": Registry().with_resource(
        SPEC_URI, Resource.from_contents(SPEC, default_specification=DRAFT202012))}
except ImportError:  # 4.10 (Debian 12): RefResolver
    _REG = {"resolver": jsonschema.RefResolver(SPEC_URI, SPEC, store={SPEC_URI: SPEC})}
TOKEN = "contract-token-0123456789"

failures = []
checked = {}


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def ptr(*parts):
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def validator(*pointer):
    return jsonschema.Draft202012Validator(
        {"$ref": SPEC_URI + "#/" + ptr(*pointer)}, **_REG)


def template_of(path):
    """The spec's path template that matches a concrete path."""
    path = path.split("?")[0]
    for t in SPEC["paths"]:
        rx = "^" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(t)) + "$"
        if re.match(rx, path):
            lit = [t2 for t2 in SPEC["paths"] if t2 == path]
            return lit[0] if lit else t
    return None


class Daemon:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="tessel-contract-")
        tok = os.path.join(self.dir, "tokens")
        with open(tok, "w") as f:
            f.write("alice:%s\n" % TOKEN)
        self.local = os.path.join(self.dir, "local")  # alice's: local/alice
        os.makedirs(os.path.join(self.local, "alice"))
        self.log = open(os.path.join(self.dir, "daemon.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--port", "0", "--data-dir", os.path.join(self.dir, "data"),
             "--threads", "1", "--access-log", "0", "--token-file", tok,
             "--queue-limit", "1", "--max-body", "200000",
             "--max-json-result", "100000", "--local-dir", self.local],
            stdout=subprocess.PIPE, stderr=self.log)
        deadline = time.time() + 60
        self.port = None
        while time.time() < deadline and self.port is None:
            line = self.proc.stdout.readline().decode(errors="replace")
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            elif not line and self.proc.poll() is not None:
                break
        if self.port is None:
            raise RuntimeError("the daemon did not start; see %s/daemon.log" % self.dir)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)


D = None


def call(method, path, body=None, ctype=None, token=True, headers=None,
         want=None, raw=None):
    """One request; the answer checked against the spec. Returns (status,
    headers dict (lower-case names), body bytes, parsed JSON or None)."""
    c = http.client.HTTPConnection("127.0.0.1", D.port, timeout=60)
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + TOKEN
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        ctype = ctype or "application/json"
    if ctype:
        h["Content-Type"] = ctype
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    payload = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    doc = None
    ct = hdrs.get("content-type", "")
    if ct.startswith("application/json") and payload:
        doc = json.loads(payload)
    where = "%s %s -> %d" % (method, path, r.status)
    if want is not None and r.status != want:
        fail("%s: wanted %d: %s" % (where, want, payload[:300]))
    check_answer(method, path, r.status, hdrs, doc, ct, where)
    return r.status, hdrs, payload, doc


def check_answer(method, path, status, hdrs, doc, ct, where):
    t = template_of(path)
    if t is None:
        fail("%s: no such path in the spec" % where)
        return
    op = SPEC["paths"][t].get(method.lower())
    if op is None:
        if status != 405:
            fail("%s: method not in the spec" % where)
        return
    resp = op["responses"].get(str(status))
    if resp is None:
        fail("%s: status not documented" % where)
        return
    checked[(method, t, status)] = checked.get((method, t, status), 0) + 1
    for name, h in resp.get("headers", {}).items():
        h = SPEC["components"]["headers"][h["$ref"].split("/")[-1]] if "$ref" in h else h
        if h.get("required") and name.lower() not in hdrs:
            fail("%s: header %s missing" % (where, name))
    if doc is not None:
        if "application/json" not in resp.get("content", {}):
            fail("%s: JSON body but the spec gives %s" % (where, list(resp.get("content", {}))))
            return
        v = validator("paths", t, method.lower(), "responses", str(status),
                      "content", "application/json", "schema")
        errs = sorted(v.iter_errors(doc), key=lambda e: list(e.path))
        for e in errs[:3]:
            fail("%s: %s at %s" % (where, e.message[:300], "/".join(map(str, e.path))))


SUBMIT = validator("components", "schemas", "JobSubmit")


def submit(body, wait=10, want=None):
    if not SUBMIT.is_valid(body):
        fail("request body refused by JobSubmit: %s" % json.dumps(body)[:200])
    q = "?wait=%s" % wait if wait else ""
    return call("POST", "/v1/jobs" + q, body=body, want=want)


def error_field(doc):
    return ((doc or {}).get("error") or {}).get("field")


def main():
    global D
    D = Daemon(sys.argv[1])
    try:
        run()
    finally:
        D.stop()
    print("answers checked: %d (route, method, status) combinations, %d requests" %
          (len(checked), sum(checked.values())))
    for k in sorted(checked, key=str):
        print("  %s %s %d" % k)
    if failures:
        print("%d failure(s)" % len(failures))
        sys.exit(1)
    print("ok")


def run():
    # ---- the request schema: a union on kind
    bad_map = {"kind": "map", "params": {"a": [[1]], "b": [[1]]}}
    if SUBMIT.is_valid(bad_map):
        fail("JobSubmit accepts a map job with matmul's params")
    bad_f = {"kind": "geodesic", "params": {"points": [[0, 0]], "ellipsoid": {"a": 6.4e6, "f": 0.05}}}
    if SUBMIT.is_valid(bad_f):
        fail("JobSubmit accepts |f| > 1/50")
    if SUBMIT.is_valid({"kind": "map", "params": {"expr": "x", "inputs": {"x": 1}}, "bogus": 1}):
        fail("JobSubmit accepts an unknown field")
    st, _, _, doc = call("POST", "/v1/jobs", body=bad_map, want=400)
    st, _, _, doc = call("POST", "/v1/jobs", body=bad_f, want=400)

    # ---- service routes
    call("GET", "/healthz", token=False, want=200)
    call("GET", "/readyz", token=False, want=200)
    call("GET", "/v1/info", want=200)
    call("GET", "/v1/devices", want=200)
    st, _, _, d = call("GET", "/v1/nodes", want=200)
    if d.get("store") != "sqlite" or len(d.get("nodes", [])) != 1 or not d["nodes"][0]["alive"]:
        fail("/v1/nodes on SQLite: expected one live node (this process), got %r" % (d,))
    call("GET", "/v1/stats", want=200)
    call("GET", "/v1/stats/history", want=200)
    call("GET", "/v1/stats/history?since=2026-01-01T00:00:00Z&step=86400", want=200)
    st, _, _, d = call("GET", "/v1/stats/history?step=0", want=400)
    if error_field(d) != "step":
        fail("history step=0: field %r" % error_field(d))
    call("GET", "/openapi.json", token=False, want=200)
    call("GET", "/metrics", want=200)
    call("GET", "/v1/info", token=False, want=401)
    call("GET", "/v1/stats", token=False, headers={"Authorization": "Bearer nope"}, want=401)
    st, h, _, _ = call("GET", "/healthz", token=False, headers={"X-Request-Id": "my-id.1"}, want=200)
    if h.get("x-request-id") != "my-id.1":
        fail("X-Request-Id not echoed: %r" % h.get("x-request-id"))

    # ---- jobs that succeed
    st, h, _, j = submit({"kind": "map", "params": {"expr": "x*2", "inputs": {"x": [1, 2, 3]}}, "label": "contract"}, want=200)
    mid = j["id"]
    if h.get("location") != "/v1/jobs/" + mid:
        fail("Location %r" % h.get("location"))
    st, h, _, j2 = submit({"kind": "reduce", "params": {"op": "sum", "inputs": {"x": [[1, 2], [3, 4]]}, "axis": 1}, "backend": "compare"}, want=200)
    if j2 and not (j2.get("compare") and any("max_abs_diff" in c for c in j2["compare"])):
        fail("a compare job's runs give no max_abs_diff: %r" % (j2 or {}).get("compare"))
    submit({"kind": "matmul", "params": {"a": [[1, 2], [3, 4]], "b": [1, 1], "bias": 0.5}}, want=200)
    pts = [[0, 0], [0, 1], [1, 0], [1, 1], [45, 45], [-30, 100]]
    st, _, _, g = submit({"kind": "geodesic", "params": {"points": pts, "method": "vincenty"}}, want=200)
    gid = g["id"]
    st, _, _, k = submit({"kind": "geodesic", "params": {"points": pts, "query": {"knn": {"k": 2}}}}, want=200)
    kid = k["id"]
    if not (k.get("result") or {}).get("parts"):
        fail("a knn job's result has no parts")
    st, _, _, rw = submit({"kind": "geodesic", "params": {"points": pts, "query": {"rowwise": {"op": "argmin"}}}}, want=200)
    # a job that fails, and its result
    st, _, _, bad = submit({"kind": "reduce", "params": {"op": "sum", "inputs": {"x": [1.0]}}, "timeout_s": 1e-6}, wait=10)
    call("GET", "/v1/jobs?limit=5", want=200)
    call("GET", "/v1/jobs?status=succeeded&kind=map&limit=2", want=200)
    call("GET", "/v1/jobs/" + mid, want=200)
    call("GET", "/v1/jobs/" + mid + "?wait=0.1", want=200)

    # ---- results
    st, h, _, d = call("GET", "/v1/jobs/%s/result" % mid, want=200)
    if d and d["data"] != [2, 4, 6]:
        fail("map result %r" % d["data"])
    call("GET", "/v1/jobs/%s/result?format=csv" % mid, want=200)
    call("GET", "/v1/jobs/%s/result?format=npy" % mid, want=200)
    call("GET", "/v1/jobs/%s/result?format=xml" % mid, want=400)
    call("GET", "/v1/jobs/%s/result?layout=square" % mid, want=400)
    call("GET", "/v1/jobs/%s/result" % mid, headers={"Accept": "image/png"}, want=406)
    call("GET", "/v1/jobs/%s/result?layout=condensed" % gid, want=200)
    st, h, _, d = call("GET", "/v1/jobs/%s/result?limit_rows=2" % gid, want=200)
    if d and (d["shape"] != [6, 6] or d.get("rows") != 2 or len(d["data"]) != 2):
        fail("limit_rows=2 of a 6x6: %r" % {k: d.get(k) for k in ("shape", "rows")})
    if h.get("x-total-rows") != "6":
        fail("X-Total-Rows %r, want 6" % h.get("x-total-rows"))
    for fmt in ("csv", "npy"):
        st, h, _, _ = call("GET", "/v1/jobs/%s/result?limit_rows=1&format=%s" % (gid, fmt), want=200)
        if h.get("x-total-rows") != "6":
            fail("X-Total-Rows %r in %s" % (h.get("x-total-rows"), fmt))
    st, h, _, _ = call("GET", "/v1/jobs/%s/result" % gid, want=200)
    if "x-total-rows" in h:
        fail("X-Total-Rows without a cut")
    for part in ("distance", "index"):
        st, _, _, d = call("GET", "/v1/jobs/%s/result/%s" % (kid, part), want=200)
        if part == "index" and d and not all(isinstance(x, int) for row in d["data"] for x in row):
            fail("int64 part not integers: %r" % d["data"])
    call("GET", "/v1/jobs/%s/result/nope" % kid, want=404)
    st, _, body, _ = call("GET", "/v1/jobs/%s/result?format=csv" % rw["id"], want=200)
    if body and not re.fullmatch(rb"(-?\d+\n)+", body):
        fail("int64 rowwise CSV is not integers: %r" % body[:80])
    call("GET", "/v1/jobs/%s/result" % rw["id"], want=200)
    if bad and bad.get("status") == "failed":
        call("GET", "/v1/jobs/%s/result" % bad["id"], want=409)

    # ---- numbers: the shortest text that reads back; int64 exact
    vals = [0.1, 1 / 3, 1e-300, 2.5, 100.0, 598140.0, -0.0, 1e22, 5e-324]
    st, h, _, a = call("POST", "/v1/arrays", raw=json.dumps(vals).encode(), ctype="application/json", want=201)
    aid = a["id"]
    if h.get("location") != "/v1/arrays/" + aid:
        fail("array Location %r" % h.get("location"))
    st, _, body, d = call("GET", "/v1/arrays/%s/data" % aid, want=200)
    want_text = ",".join(["0.1", "0.3333333333333333", "1e-300", "2.5", "100", "598140",
                          "-0", "1e+22", "5e-324"])
    if body and b'"data":[' + want_text.encode() + b"]" not in body:
        fail("JSON numbers not shortest: %r" % body)
    st, _, body, _ = call("GET", "/v1/arrays/%s/data?format=csv" % aid, want=200)
    if body and body.decode().split() != want_text.split(","):
        fail("CSV numbers not shortest: %r" % body)
    if d and [float(x) for x in d["data"]] != vals:
        fail("numbers do not read back: %r" % d["data"])
    # 2^53 + 1 as int64: a rowwise count over 2^53+1 is out of reach; an
    # argmin index is exact (checked above); here int64 text of the int64
    # writer is checked through a count.
    st, _, _, cnt = submit({"kind": "geodesic", "params": {"points": pts, "query": {"rowwise": {"op": "count"}}}}, want=200)
    st, _, _, d = call("GET", "/v1/jobs/%s/result" % cnt["id"], want=200)
    if d and d["data"] != [5] * 6:
        fail("count %r" % d["data"])

    # ---- arrays
    call("GET", "/v1/arrays", want=200)
    call("GET", "/v1/arrays?limit=0", want=400)
    call("GET", "/v1/arrays/" + aid, want=200)
    call("GET", "/v1/arrays/%s/data?format=xml" % aid, want=400)
    st, h, _, d = call("GET", "/v1/arrays/%s/data?limit_rows=3" % aid, want=200)
    if d and (d["shape"] != [len(vals)] or d.get("rows") != 3 or h.get("x-total-rows") != str(len(vals))):
        fail("array limit_rows: %r %r" % (d, h.get("x-total-rows")))
    call("POST", "/v1/arrays", raw=b"1,2\n3\n", ctype="text/csv", want=400)
    call("POST", "/v1/arrays", raw=b"<x/>", ctype="application/xml", want=415)
    call("GET", "/v1/arrays/a_nope", want=404)
    # Range on the stored .npy: 206, 416 (past the end, several, JSON)
    st, h, body, _ = call("GET", "/v1/arrays/%s/data?format=npy" % aid,
                          headers={"Range": "bytes=0-9"}, want=206)
    if len(body) != 10 or not (h.get("content-range") or "").startswith("bytes 0-9/"):
        fail("Range 0-9: %d bytes, %r" % (len(body), h.get("content-range")))
    call("GET", "/v1/arrays/%s/data?format=npy" % aid, headers={"Range": "bytes=999999-"}, want=416)
    call("GET", "/v1/arrays/%s/data?format=npy" % aid, headers={"Range": "bytes=0-1,3-4"}, want=416)
    call("GET", "/v1/arrays/%s/data" % aid, headers={"Range": "bytes=0-9"}, want=416)
    call("GET", "/v1/jobs/%s/result?format=npy" % mid, headers={"Range": "bytes=-4"}, want=206)
    call("GET", "/v1/jobs/%s/result/index?format=npy" % kid, headers={"Range": "bytes=0-"}, want=206)
    call("GET", "/v1/jobs/%s/result?format=csv" % mid, headers={"Range": "bytes=0-1"}, want=416)

    # ---- uploads in parts
    st, h, _, up = call("POST", "/v1/uploads", body={"dtype": "float64", "shape": [4]}, want=201)
    uid = up["id"]
    if h.get("location") != "/v1/uploads/" + uid:
        fail("upload Location %r" % h.get("location"))
    call("POST", "/v1/uploads", body={"dtype": "int8", "shape": [4]}, want=400)
    call("POST", "/v1/uploads", body={"shape": [4], "x": 1}, want=400)
    call("POST", "/v1/uploads", body={"shape": [1 << 30]}, want=413)
    call("POST", "/v1/uploads", raw=b"x", ctype="text/plain", want=415)
    call("PUT", "/v1/uploads/%s?offset=16" % uid, raw=b"\0" * 16,
         ctype="application/octet-stream", want=200)
    call("PUT", "/v1/uploads/%s?offset=24" % uid, raw=b"\0" * 16,
         ctype="application/octet-stream", want=400)
    call("POST", "/v1/uploads/%s/complete" % uid, want=409)
    call("GET", "/v1/uploads/" + uid, want=200)
    call("PUT", "/v1/uploads/%s?offset=0" % uid, raw=b"\0" * 16,
         ctype="application/octet-stream", want=200)
    st, h, _, done = call("POST", "/v1/uploads/%s/complete" % uid, want=201)
    if h.get("location") != "/v1/arrays/" + (done or {}).get("id", ""):
        fail("complete Location %r" % h.get("location"))
    call("GET", "/v1/uploads/" + uid, want=404)
    call("PUT", "/v1/uploads/%s?offset=0" % uid, raw=b"\0" * 8,
         ctype="application/octet-stream", want=404)
    call("POST", "/v1/uploads/%s/complete" % uid, want=404)
    st, _, _, up = call("POST", "/v1/uploads", body={"shape": [4]}, want=201)
    call("PUT", "/v1/uploads/%s?offset=0" % up["id"], raw=b"\0" * 32,
         ctype="application/octet-stream", want=200)
    call("POST", "/v1/uploads/%s/complete" % up["id"], want=200)  # the same zeros
    st, _, _, up = call("POST", "/v1/uploads", body={"shape": [2, 2]}, want=201)
    call("DELETE", "/v1/uploads/" + up["id"], want=200)
    call("DELETE", "/v1/uploads/" + up["id"], want=404)
    call("DELETE", "/v1/arrays/" + done["id"], want=200)

    # ---- unknown query parameters: 400 naming them, on every route
    for method, path in [("GET", "/v1/jobs?bogus=1"), ("GET", "/v1/jobs/%s?bogus=1" % mid),
                         ("GET", "/v1/jobs/%s/result?bogus=1" % mid),
                         ("GET", "/v1/jobs/%s/result/index?bogus=1" % kid),
                         ("POST", "/v1/jobs/%s/cancel?bogus=1" % mid),
                         ("DELETE", "/v1/jobs/j_nope?bogus=1"),
                         ("GET", "/v1/arrays?bogus=1"), ("GET", "/v1/arrays/%s?bogus=1" % aid),
                         ("GET", "/v1/arrays/%s/data?bogus=1" % aid),
                         ("DELETE", "/v1/arrays/%s?bogus=1" % aid),
                         ("GET", "/v1/uploads/u_nope?bogus=1"),
                         ("PUT", "/v1/uploads/u_nope?offset=0&bogus=1"),
                         ("POST", "/v1/uploads/u_nope/complete?bogus=1"),
                         ("DELETE", "/v1/uploads/u_nope?bogus=1"),
                         ("GET", "/v1/info?bogus=1"), ("GET", "/v1/devices?bogus=1"),
                         ("GET", "/v1/nodes?bogus=1"),
                         ("GET", "/v1/stats?bogus=1"), ("GET", "/v1/stats/history?bogus=1"),
                         ("GET", "/healthz?bogus=1"),
                         ("GET", "/readyz?bogus=1"), ("GET", "/metrics?bogus=1"),
                         ("GET", "/openapi.json?bogus=1")]:
        st, _, _, d = call(method, path, want=400)
        if error_field(d) != "bogus":
            fail("%s %s: field %r" % (method, path, error_field(d)))
    st, _, _, d = call("POST", "/v1/jobs?bogus=1", body={"kind": "map", "params": {"expr": "x", "inputs": {"x": 1}}}, want=400)
    st, _, _, d = call("POST", "/v1/arrays?bogus=1", raw=b"[1]", ctype="application/json", want=400)
    if error_field(d) != "bogus":
        fail("POST /v1/arrays?bogus=1: field %r" % error_field(d))

    # every query parameter the spec gives a route, the server takes (a bad
    # value may be 400, never "unknown query parameter")
    for t, item in SPEC["paths"].items():
        for m, op in item.items():
            for prm in op.get("parameters", []):
                if prm.get("in") != "query":
                    continue
                path = t.replace("{id}", mid if "jobs" in t else aid).replace("{name}", "index")
                st, _, body, d = call(m.upper(), "%s?%s=1" % (path, prm["name"]),
                                      raw=b"[1]" if m == "post" else None,
                                      ctype="application/json" if m == "post" else None)
                if st == 400 and b"unknown query parameter" in body:
                    fail("%s %s: the spec's parameter %s is refused" % (m, t, prm["name"]))

    # ---- regions (API.md "Regions"): every answer against the spec
    rpath = os.path.join(os.path.realpath(D.local), "alice", "r.bin")
    with open(rpath, "wb") as f:
        f.truncate(4096)
    st, _, _, reg = call("POST", "/v1/regions", body={"path": rpath}, want=201)
    call("GET", "/v1/regions", want=200)
    call("GET", "/v1/regions/%s" % reg["id"], want=200)
    call("GET", "/v1/regions/r_nope", want=404)
    call("POST", "/v1/regions", body={"path": "/etc/passwd"}, want=403)
    st, _, _, rj = submit({"kind": "geodesic", "params": {
        "points": {"region": reg["id"], "offset": 0, "dtype": "float64", "shape": [3, 2]},
        "query": {"knn": {"k": 1}}}, "output": {"region": reg["id"], "offset": 1024}}, wait=30)
    if not rj or rj.get("status") != "succeeded" or "offset" not in rj["result"]["parts"][1]:
        fail("a job into a region: %r" % (rj,))
    call("POST", "/v1/jobs", body={"kind": "map", "params": {"expr": "x", "inputs": {"x": {
        "region": reg["id"], "offset": 4096, "dtype": "float64", "shape": [1]}}}}, want=400)
    call("DELETE", "/v1/regions/%s" % reg["id"], want=200)

    # ---- other errors
    call("GET", "/v1/jobs/j_nope", want=404)
    call("GET", "/v1/jobs/%s?wait=99" % mid, want=400)
    call("POST", "/v1/jobs/%s/cancel" % mid, want=409)
    call("POST", "/v1/jobs", raw=b"kind=map", ctype="text/plain", want=415)
    call("POST", "/v1/jobs", raw=b"{" + b" " * 300000 + b"}", ctype="application/json", want=413)
    call("POST", "/v1/jobs", body={"kind": "map", "params": {"expr": "y", "inputs": {"x": 1}}}, want=400)
    # 405 with Allow on every path
    for t in SPEC["paths"]:
        path = t.replace("{id}", mid).replace("{name}", "index")
        st, h, _, _ = call("PATCH", path, token=True, raw=b"", want=405)
        if not h.get("allow"):
            fail("405 without Allow on %s" % t)
    # 429: one job running, one queued (--queue-limit 1), the next refused
    slow = {"kind": "geodesic", "params": {"points": {"random": {"shape": [3000, 2], "low": -60, "high": 60, "seed": 1}}}}
    ids = []
    for _ in range(4):
        st, h, _, j = submit(slow, wait=0)
        if st == 202:
            ids.append(j["id"])
        elif st == 429:
            break
    else:
        fail("no 429 with --queue-limit 1")
    for i in ids:
        call("POST", "/v1/jobs/%s/cancel" % i)
    for i in ids:
        call("GET", "/v1/jobs/%s?wait=30" % i, want=200)
        call("DELETE", "/v1/jobs/" + i, want=200)
    # deletes
    call("DELETE", "/v1/jobs/" + mid, want=200)
    call("DELETE", "/v1/arrays/" + aid, want=200)
    call("DELETE", "/v1/arrays/" + aid, want=404)


if __name__ == "__main__":
    main()
