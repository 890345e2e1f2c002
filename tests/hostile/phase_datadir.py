"""phase_datadir.py — a second tesseld against the running one (issue 23,
case 7: nothing locked the data directory and SO_REUSEPORT let a second
daemon bind the same port; each newcomer re-ran the job that was running).

    phase(d)   d: run.py's running Daemon

Starts another tesseld (a) on d's data directory and another port, (b) on
d's data directory and d's port, (c) on a fresh data directory and d's
port. Each must exit non-zero without ever printing its "listening on"
line; (a) and (b) name d's pid and the lock file, (c) says it cannot
listen. d must still answer /healthz afterwards. Loopback only; each start
is bounded by 30 s (a daemon that does listen is killed at once).
Results go through run.py's check().
"""
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time


def _check(ok, what):
    return sys.modules["__main__"].check(ok, what)


def _second(binary, data, port):
    """(exit status, listened, stderr text) of another tesseld."""
    p = subprocess.Popen([binary, "--port", str(port), "--data-dir", data,
                          "--threads", "1", "--access-log", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    listened = False
    out = b""
    deadline = time.time() + 30
    while time.time() < deadline and p.poll() is None:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            chunk = os.read(p.stdout.fileno(), 4096)
            out += chunk
            if b"listening on" in out:
                listened = True
                break
            if not chunk:
                break
    if p.poll() is None:
        p.kill()
    p.wait()
    err = p.stderr.read().decode(errors="replace")
    p.stdout.close()
    p.stderr.close()
    return p.returncode, listened, err


def phase(d):
    pid = "pid %d" % d.proc.pid
    for what, port in (("same data dir", 0), ("same data dir and port", d.port)):
        rc, listened, err = _second(d.binary, d.data, port)
        _check(not listened and rc not in (0, None) and rc > 0,
               f"[datadir] a second tesseld on the {what}: exit {rc}, "
               f"listened {listened}")
        _check(pid in err and "tesseld.lock" in err,
               f"[datadir] {what}: the refusal names {pid} and the lock "
               f"file: {err.strip()[-300:]!r}")
    other = tempfile.mkdtemp(prefix="tessel-hostile-port-")
    try:
        rc, listened, err = _second(d.binary, other, d.port)
        _check(not listened and rc not in (0, None) and rc > 0,
               f"[datadir] a second tesseld on port {d.port}: exit {rc}, "
               f"listened {listened}")
        _check("cannot listen" in err,
               f"[datadir] port {d.port}: {err.strip()[-300:]!r}")
    finally:
        shutil.rmtree(other, ignore_errors=True)
    st, _, _ = d.request("GET", "/healthz")
    _check(d.alive() and st == 200,
           f"[datadir] the first daemon still answers: {st}")
