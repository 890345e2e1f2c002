"""The top-level README as a user pastes it: its curl walk-through (the
```sh block under "A walk through the seeds' examples with curl") run by
bash -e against a real tesseld, and /v1/stats against its field list in
api/API.md.

The walk-through passes when every command exits 0 (curl -f on the lines
that save a file), every request it made was answered below 400 (the
daemon's access log), the ids it captured with jq are job and array ids
(no literal j_... left in the text), result.npy is the array the first job
computed, and the long reduce it cancels ends canceled. It needs bash,
curl and jq (deps/packages.txt installs them; a machine without them
skips, saying which) and runs with PY set to this Python, which has NumPy:
the README names PY for the one line that needs NumPy.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from conftest import Daemon, ROOT

README = os.path.join(ROOT, "README.md")
API_MD = os.path.join(ROOT, "api", "API.md")


def walkthrough():
    text = open(README, encoding="utf-8").read()
    at = text.index("## A walk through the seeds' examples with curl")
    start = text.index("```sh\n", at) + len("```sh\n")
    return text[start:text.index("```\n", start)]


def test_walkthrough_has_no_placeholder_ids():
    sh = walkthrough()
    code = "\n".join(line for line in sh.splitlines() if not line.lstrip().startswith("#"))
    assert "j_..." not in code and "j_…" not in code
    assert re.search(r"^T=http://127\.0\.0\.1:8080$", sh, re.M)
    for line in code.splitlines():  # a saved file is never an error's JSON
        if re.search(r"\s-o\s", line):
            assert re.search(r"curl -\w*f|--fail", line), line


@pytest.fixture(scope="module")
def logged_daemon():
    d = Daemon(extra=("--access-log", "1"))
    yield d
    d.stop()


def test_walkthrough_runs(logged_daemon, tmp_path):
    for tool in ("bash", "curl", "jq"):
        if shutil.which(tool) is None:
            pytest.skip(f"no {tool} here (deps/packages.txt installs it)")
    d = logged_daemon
    sh = walkthrough().replace("T=http://127.0.0.1:8080", f"T={d.url}", 1)
    # Echo the variables jq captured, to check them after the block ran.
    sh += '\necho "CAPTURED J=$J K=$K L=$L W=$W X=$X B=$B"\n'
    env = dict(os.environ, PY=sys.executable)
    p = subprocess.run(["bash", "-e", "-c", sh], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout: {p.stdout[-3000:]}\nstderr: {p.stderr[-3000:]}"
    got = dict(re.findall(r"(\w)=(\S+)", p.stdout.rsplit("CAPTURED", 1)[1]))
    for k in "JKL":
        assert re.fullmatch(r"j_[0-9a-z]{26}", got.get(k, "")), (k, got)
    for k in "WXB":
        assert re.fullmatch(r"a_[0-9a-z]{26}", got.get(k, "")), (k, got)
    np.testing.assert_array_equal(np.load(tmp_path / "result.npy"),
                                  np.arange(1000000.0) ** 2 + 2 * np.arange(1000000.0) + 1)
    assert '"canceled"' in p.stdout
    with open(os.path.join(d.dir, "daemon.log"), errors="replace") as f:
        statuses = [(m.group(1), int(m.group(2)))
                    for m in re.finditer(r"access method=\S+ path=(\S+).*? status=(\d+)", f.read())]
    assert len(statuses) >= 20, statuses
    bad = [s for s in statuses if s[1] >= 400]
    assert not bad, f"the walk-through got error answers: {bad}"


def documented_stats_fields():
    """The names in API.md's `GET /v1/stats` skeleton, {…} left out."""
    text = open(API_MD, encoding="utf-8").read()
    at = text.index("- `GET /v1/stats` — `")
    skeleton = text[at:text.index("}`.", at)]
    return set(re.findall(r'"(\w+)"', skeleton))


def live_fields(v, out, skip=("jobs_by_status",)):
    if isinstance(v, dict):
        for k, x in v.items():
            out.add(k)
            if k not in skip:
                live_fields(x, out, skip)
    elif isinstance(v, list):
        for x in v:
            live_fields(x, out, skip)
    return out


def test_stats_fields_are_documented(client, daemon):
    client.map("x*2", x=[1.0, 2.0])  # a succeeded group, so by_kind has rows
    with urllib.request.urlopen(daemon.url + "/v1/stats", timeout=60) as r:
        stats = json.load(r)
    assert stats["by_kind"], stats
    live, doc = live_fields(stats, set()), documented_stats_fields()
    assert "result_bytes" in live
    assert live == doc, f"undocumented: {sorted(live - doc)}; documented, not sent: {sorted(doc - live)}"
