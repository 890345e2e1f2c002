"""The `tessel` command line (python3 -m tessel) against the real daemon:
JSON on stdout, -o file.npy, and the exit codes."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(daemon, *args, stdin=None):
    env = dict(os.environ, PYTHONPATH=PKG, TESSEL_URL=daemon.url)
    p = subprocess.run([sys.executable, "-m", "tessel"] + list(args), input=stdin,
                       capture_output=True, text=True, env=env, timeout=120)
    out = json.loads(p.stdout) if p.stdout.strip() else None
    return p.returncode, out, p.stderr


def test_cli_round_trip(daemon, tmp_path):
    src = tmp_path / "x.npy"
    np.save(src, np.arange(6.0))
    rc, arr, _ = cli(daemon, "upload", str(src))
    assert rc == 0 and arr["shape"] == [6]
    body = json.dumps({"kind": "map", "params": {"expr": "x*2", "inputs": {"x": {"array": arr["id"]}}}})
    rc, job, _ = cli(daemon, "submit", "-", stdin=body)
    assert rc == 0 and job["id"].startswith("j_")
    rc, done, _ = cli(daemon, "wait", job["id"])
    assert rc == 0 and done["status"] == "succeeded"
    rc, got, _ = cli(daemon, "get", job["id"])
    assert rc == 0 and got["id"] == job["id"]
    out = tmp_path / "y.npy"
    rc, info, _ = cli(daemon, "result", job["id"], "-o", str(out))
    assert rc == 0 and info["shape"] == [6]
    np.testing.assert_array_equal(np.load(out), np.arange(6.0) * 2)
    rc, js, _ = cli(daemon, "result", job["id"])
    assert rc == 0 and js["data"] == [0, 2, 4, 6, 8, 10]
    rc, ls, _ = cli(daemon, "ls", "--limit", "5")
    assert rc == 0 and any(j["id"] == job["id"] for j in ls["jobs"])
    rc, ls, _ = cli(daemon, "ls", "--arrays")
    assert rc == 0 and any(a["id"] == arr["id"] for a in ls["arrays"])
    rc, dev, _ = cli(daemon, "devices")
    assert rc == 0 and "cpu" in dev
    rc, _, _ = cli(daemon, "cancel", job["id"])
    assert rc == 5  # 409: it had finished
    rc, d, _ = cli(daemon, "delete", job["id"])
    assert rc == 0 and d["deleted"] is True
    rc, _, err = cli(daemon, "get", job["id"])
    assert rc == 4 and "not_found" in err


def test_cli_exit_codes(daemon):
    bad = json.dumps({"kind": "map", "params": {"expr": "x+y", "inputs": {"x": 1}}})
    rc, _, err = cli(daemon, "submit", "-", stdin=bad)
    assert rc == 5 and "params.expr" in err
    slow = json.dumps({"kind": "reduce", "backend": "serial", "timeout_s": 0.05, "params": {
        "op": "sum", "expr": "sin(x)*exp(x)", "inputs": {"x": {"random": {"shape": [50000000]}}}}})
    rc, job, _ = cli(daemon, "submit", "-", "--wait", "60", stdin=slow)
    assert rc == 1 and job["status"] == "failed"
    rc, _, _ = cli(daemon, "nonsense")
    assert rc == 2
    env = dict(os.environ, PYTHONPATH=PKG)
    p = subprocess.run([sys.executable, "-m", "tessel", "--url", "http://127.0.0.1:1", "devices"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 6


def test_pip_installs_offline(daemon, tmp_path):
    """The README's install: a venv that sees the system NumPy, pip with no
    index and no build isolation; the installed console script and python -m
    tessel reach the daemon."""
    venv = tmp_path / "venv"
    p = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.skip("no venv with pip for %s (apt-get install python3-venv): %s"
                    % (sys.executable, p.stderr.strip()[-200:]))
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-index",
                        "--no-build-isolation", PKG], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for cmd in ([str(venv / "bin" / "python"), "-m", "tessel"], [str(venv / "bin" / "tessel")]):
        q = subprocess.run(cmd + ["--url", daemon.url, "devices"], capture_output=True,
                           text=True, env=env, timeout=60)
        assert q.returncode == 0 and "cpu" in json.loads(q.stdout), q.stderr
