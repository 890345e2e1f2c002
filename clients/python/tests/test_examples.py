"""Runs every script of clients/python/examples/ against the test daemon.

Each example prints its result and checks it against NumPy (or geopy) itself,
so a wrong answer is a traceback and a non-zero exit: the test asserts exit
code 0, with TESSEL_URL pointing at the session's daemon (conftest.py) and
TESSEL_EXAMPLE_SMALL=1 so that all of them together take a few seconds. The
package is imported from this checkout (PYTHONPATH). A second test holds
examples/README.md to the scripts: every script listed, and the line counts
it gives (non-blank, not only a comment, without the one-line docstring)
equal to the scripts' and no more than the seed's.
"""
import ast
import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import PKG

EXAMPLES = os.path.join(PKG, "examples")
SCRIPTS = sorted(glob.glob(os.path.join(EXAMPLES, "*.py")))


def test_there_are_examples():
    assert len(SCRIPTS) >= 6, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_example_runs(daemon, script):
    env = dict(os.environ, TESSEL_URL=daemon.url, TESSEL_EXAMPLE_SMALL="1",
               PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TESSEL_TOKEN", None)
    p = subprocess.run([sys.executable, script], env=env, cwd=EXAMPLES, timeout=120,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, out
    assert out.strip(), "the example printed nothing"


def code_lines(path):
    src = open(path).read()
    doc = ast.get_docstring(ast.parse(src), clean=False)
    lines = [ln for ln in src.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return len(lines) - (len(doc.splitlines()) if doc else 0)


def test_readme_lists_every_example_with_its_line_counts():
    rows = {}
    for line in open(os.path.join(EXAMPLES, "README.md")):
        m = re.match(r"\| `([\w.]+\.py)` \|.*\| (\d+) \| (\d+) \|\s*$", line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    assert sorted(rows) == sorted(os.path.basename(s) for s in SCRIPTS)
    for s in SCRIPTS:
        seed, example = rows[os.path.basename(s)]
        assert code_lines(s) == example, (s, code_lines(s), example)
        assert example <= seed, (s, example, seed)
