"""The `tessel` command line (python3 -m tessel) against the real daemon:
JSON on stdout, -o file.npy, the result summary and --part, --help, and
the exit codes."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(daemon, *args, stdin=None, text=False):
    """(exit code, stdout as JSON (as text with text=True), stderr)."""
    env = dict(os.environ, PYTHONPATH=PKG, TESSEL_URL=daemon.url)
    p = subprocess.run([sys.executable, "-m", "tessel"] + list(args), input=stdin,
                       capture_output=True, text=True, env=env, timeout=120)
    out = p.stdout if text else json.loads(p.stdout) if p.stdout.strip() else None
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
    rc, js, _ = cli(daemon, "result", job["id"], "--all")
    assert rc == 0 and js["data"] == [0, 2, 4, 6, 8, 10]
    rc, txt, _ = cli(daemon, "result", job["id"], text=True)  # a summary, as text
    assert rc == 0 and "float64, shape (6,)" in txt and "first 5 of 6 rows" in txt
    assert "[0. 2. 4. 6. 8.]" in txt
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


def test_cli_help_lists_every_subcommand(daemon):
    rc, txt, _ = cli(daemon, "--help", text=True)
    assert rc == 0
    from tessel import cli as tcli
    names = tcli.parser()._subparsers._group_actions[0].choices
    assert len(names) == 9
    listed = txt.split("commands (tessel COMMAND --help for each):")[1].split("exit codes:")[0]
    for name, sp in names.items():
        # each listed with its own description, not a bare name
        line = next((ln for ln in listed.splitlines() if ln.split()[:1] == [name]), "")
        assert len(line.split()) > 3, f"{name} is not described in --help: {line!r}"
    for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "5 ", "6 ", "65 ", "66 ", "124 "):
        assert "\n  " + code in txt, f"exit code {code} not in --help"
    rc, txt, _ = cli(daemon, "result", "--help", text=True)
    assert rc == 0 and "--part NAME" in txt and "--all" in txt and "65" in txt


def test_cli_result_summary_and_parts(daemon, tmp_path):
    big = json.dumps({"kind": "map", "params": {"expr": "x", "inputs": {
        "x": {"range": {"stop": 1500 * 1500}}}}})
    rc, job, _ = cli(daemon, "submit", "-", "--wait", "60", stdin=big)
    assert rc == 0 and job["status"] == "succeeded"
    rc, txt, _ = cli(daemon, "result", job["id"], text=True)  # a summary, not 2.25M lines
    assert rc == 0 and len(txt.splitlines()) <= 10, txt
    assert "float64, shape (2250000,)" in txt and "first 5 of 2250000 rows" in txt
    assert "[0. 1. 2. 3. 4.]" in txt and "--all" in txt
    pts = [[0, 0], [0, 1], [0, 3], [1, 0]]
    knn = json.dumps({"kind": "geodesic", "params": {"points": pts, "query": {"knn": {"k": 2}}}})
    rc, job, _ = cli(daemon, "submit", "-", "--wait", "60", stdin=knn)
    assert rc == 0 and job["status"] == "succeeded"
    rc, txt, _ = cli(daemon, "result", job["id"], "--part", "index", text=True)
    assert rc == 0 and "part index (parts: distance, index): int64, shape (4, 2)" in txt
    assert "all 4 rows:\n[[3 1]\n [0 3]\n [1 0]\n [0 1]]" in txt  # 1 deg of lat < 1 of lon here
    out = tmp_path / "knn.npy"
    rc, info, err = cli(daemon, "result", job["id"], "-o", str(out))
    assert rc == 0 and info["part"] == "distance" and info["parts"] == ["distance", "index"]
    assert "index" in err and "--part" in err  # says the other part exists
    assert np.load(out).dtype == np.float64
    rc, info, _ = cli(daemon, "result", job["id"], "--part", "index", "-o", str(out))
    assert rc == 0 and info["part"] == "index"
    idx = np.load(out)
    assert idx.dtype == np.int64 and idx[0].tolist() == [3, 1]
    rc, js, _ = cli(daemon, "result", job["id"], "--part", "index", "--all")
    assert rc == 0 and js["data"][0] == [3, 1] and js["parts"] == ["distance", "index"]
    rc, _, err = cli(daemon, "result", job["id"], "--part", "nope")
    assert rc == 4 and "nope" in err


def test_cli_data_errors_are_not_usage(daemon, tmp_path):
    bad = tmp_path / "job.json"
    bad.write_text("kind: map\n")  # YAML, say: not JSON
    rc, _, err = cli(daemon, "submit", str(bad))
    assert rc == 65 and "not JSON" in err
    rc, _, err = cli(daemon, "submit", "-", stdin="{\"kind\": ")
    assert rc == 65 and "stdin is not JSON" in err
    rc, _, _ = cli(daemon, "submit", str(tmp_path / "missing.json"))
    assert rc == 66
    notnpy = tmp_path / "x.npy"
    notnpy.write_bytes(b"not an npy file")
    rc, _, err = cli(daemon, "upload", str(notnpy))
    assert rc == 65 and "not a .npy" in err
    rc, _, _ = cli(daemon, "submit")  # usage stays 2
    assert rc == 2
    arr = tmp_path / "a.npy"
    np.save(arr, np.arange(3.0))
    rc, a, _ = cli(daemon, "upload", str(arr))
    rc, _, err = cli(daemon, "result", a["id"], "--part", "x")
    assert rc == 2 and "no parts" in err
