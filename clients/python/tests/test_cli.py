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
    typed = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import os, tessel; print(os.path.dirname(tessel.__file__))"],
                           capture_output=True, text=True, cwd=str(tmp_path), timeout=60,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert os.path.isfile(os.path.join(typed.stdout.strip(), "py.typed")), typed.stderr
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


def test_build_backend_needs_neither_setuptools_nor_wheel(tmp_path):
    """The package's own PEP 517 backend builds the wheel with the standard
    library alone: `pip install --no-build-isolation` on a Python 3.11
    without `wheel` failed with "invalid command 'bdist_wheel'" under
    setuptools. Here setuptools and wheel are made unimportable first."""
    code = ("import sys, json; sys.modules['setuptools'] = None; sys.modules['wheel'] = None; "
            "sys.path.insert(0, sys.argv[1] + '/_build'); import tessel_build as b; "
            "print(json.dumps([b.get_requires_for_build_wheel(), b.build_wheel(sys.argv[2]), "
            "b.build_sdist(sys.argv[2])]))")
    p = subprocess.run([sys.executable, "-c", code, PKG, str(tmp_path)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    reqs, whl, sdist = json.loads(p.stdout)
    assert reqs == [] and whl == "tessel-0.1.0-py3-none-any.whl"
    import zipfile
    with zipfile.ZipFile(tmp_path / whl) as z:
        names = set(z.namelist())
        meta = z.read("tessel-0.1.0.dist-info/METADATA").decode()
        eps = z.read("tessel-0.1.0.dist-info/entry_points.txt").decode()
    assert {"tessel/py.typed", "tessel/client.py", "tessel/kinds.py", "tessel/array.py",
            "tessel-0.1.0.dist-info/RECORD"} <= names
    assert "Requires-Dist: numpy" in meta and "tessel = tessel.cli:main" in eps
    assert (tmp_path / sdist).exists()


def test_build_backend_reads_pyproject_without_tomllib():
    """Before 3.11 there is no tomllib: the backend's own reader must give
    what tomllib gives for pyproject.toml."""
    tomllib = pytest.importorskip("tomllib", reason="Python < 3.11: nothing to compare with")
    sys.path.insert(0, os.path.join(PKG, "_build"))
    try:
        import tessel_build
    finally:
        sys.path.pop(0)
    with open(os.path.join(PKG, "pyproject.toml"), "rb") as f:
        data = f.read()
    want = tomllib.loads(data.decode())
    got = tessel_build._parse_toml_subset(data.decode())
    assert got["project"] == {k: v for k, v in want["project"].items()
                              if k not in ("optional-dependencies", "scripts")}
    assert got["project.optional-dependencies"] == want["project"]["optional-dependencies"]
    assert got["project.scripts"] == want["project"]["scripts"]
    assert got["build-system"] == want["build-system"]


@pytest.mark.parametrize("version", ["3.8", "3.11", "3.13"])
def test_pip_installs_on_other_pythons(tmp_path, version):
    """The README's "any other Python" route on the interpreters this
    machine has (pyenv's carry neither wheel nor, from 3.12, setuptools);
    --no-deps, since they have no NumPy and there is no index."""
    import glob
    import shutil
    # pyenv's interpreters themselves (its shims fail for a version not selected)
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    py = found[-1] if found else shutil.which(f"python{version}")
    if py is None:
        pytest.skip(f"no python{version} here")
    venv = tmp_path / "venv"
    p = subprocess.run([py, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.skip(f"python{version} cannot make a venv: {p.stderr.strip()[-200:]}")
    # the README's line as written (build isolation: the backend needs
    # nothing, so no index is asked); --no-index proves it
    p = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
                        "--no-deps", PKG],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    assert os.path.isfile(os.path.join(site, "tessel", "py.typed"))
    assert os.access(venv / "bin" / "tessel", os.X_OK)
