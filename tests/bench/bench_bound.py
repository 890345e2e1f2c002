#!/usr/bin/env python3
"""bench_bound.py — what a lone request waits while a batch of 10,000 is
inserted (issue 26's bound: /healthz or a single submit waits at most 50 ms
behind a 10,000-item POST /v1/jobs:batch).

Starts the tesseld given (SQLite store, its own data dir), then 3 rounds:
one thread sends a batch of 10,000 tiny map jobs while one keep-alive
connection alternates GET /healthz and a single POST /v1/jobs (no ?wait,
so the [sync] insert: answered after its commit) until the batch is
answered; prints per round the batch's time and each lone request's count,
p50 and max. A benchmark, not a test: the figures depend on the machine.

  /usr/bin/python3 tests/bench/bench_bound.py path/to/tesseld [--store URL]

--store URL runs the node on that store instead (a PostgreSQL conninfo:
  sh tests/cluster/with_pg.sh sh -c 'python3 tests/bench/bench_bound.py
  build/tesseld --store "$TESSEL_TEST_PG"').
"""
import http.client, json, subprocess, sys, tempfile, threading, time, re, os
binary=sys.argv[1]
d=tempfile.mkdtemp(prefix="tiny-bound-")
extra=["--store",sys.argv[sys.argv.index("--store")+1]] if "--store" in sys.argv else []
p=subprocess.Popen([binary,"--port","0","--data-dir",d,"--access-log","0"]+extra,stdout=subprocess.PIPE,stderr=subprocess.STDOUT,text=True)
port=None
t0=time.time()
while port is None and time.time()-t0<20:
    line=p.stdout.readline()
    m=re.search(r"(?:127\.0\.0\.1|localhost|0\.0\.0\.0|\]):(\d+)",line) or re.search(r"port[ =](\d+)",line)
    if m: port=int(m.group(1))
threading.Thread(target=lambda: [None for _ in p.stdout],daemon=True).start()
body=json.dumps({"jobs":[{"kind":"map","params":{"expr":"x+1","inputs":{"x":[i]}}} for i in range(10000)]})
def conn(): return http.client.HTTPConnection("127.0.0.1",port,timeout=60)
res={}
def big():
    c=conn(); s=time.time(); c.request("POST","/v1/jobs:batch",body,{"Content-Type":"application/json"}); r=c.getresponse(); r.read(); res['big']=(r.status,time.time()-s)
for rnd in range(3):
    th=threading.Thread(target=big); lat={'healthz':[], 'submit':[]}
    c=conn(); th.start(); time.sleep(0.01)
    while th.is_alive():
        s=time.time(); c.request("GET","/healthz"); c.getresponse().read(); lat['healthz'].append(time.time()-s)
        s=time.time(); c.request("POST","/v1/jobs",json.dumps({"kind":"map","params":{"expr":"x","inputs":{"x":[1]}}}),{"Content-Type":"application/json"}); r=c.getresponse(); r.read(); lat['submit'].append(time.time()-s)
    th.join()
    print(f"round {rnd}: batch of 10000 -> {res['big'][0]} in {res['big'][1]*1000:.0f} ms; during it: " + "; ".join(f"{k} n={len(v)} max {max(v)*1000:.1f} ms p50 {sorted(v)[len(v)//2]*1000:.1f} ms" for k,v in lat.items() if v))
p.kill(); p.wait()
