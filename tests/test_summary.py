#!/usr/bin/python3
"""tests/test_summary.py — tests/summary.py, the closing lines of make test,
on results made up here: a CTest JUnit file with a pass, a failure, a skip
(exit 77, with its reason in the output) and a test CTest could not run
(no executable: a failure, as CTest counts it); a TAP report of the browser
tests with a skip; the Docker test's verdict "skipped: ..."; a suite that
left only a .missing note. Asserts the per-suite counts, that every skip is
listed with its reason, that a skip alone never reads "all suites passed",
and that the last line is "N passed, N failed, N skipped" alone. Standard
library only; run by CTest (unit label).
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY = os.path.join(HERE, "summary.py")

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="x" tests="4" failures="1" disabled="0" skipped="2">
 <testcase name="unit/test_a" status="run"><system-out>3 passed, 0 failed
</system-out></testcase>
 <testcase name="unit/test_b" status="fail"><failure message="Failed"/>
  <system-out>x.c:1: CHECK failed</system-out></testcase>
 <testcase name="integration/test_metrics" status="notrun">
  <skipped message="SKIP_RETURN_CODE=77"/>
  <system-out>ok   a
SKIP promtool_accepts_it: promtool not installed
1 passed, 0 failed, 1 skipped
</system-out></testcase>
 <testcase name="unit/test_gone" status="notrun">
  <skipped message="Unable to find executable"/>
  <system-out>Unable to find executable: unit_test_gone</system-out></testcase>
</testsuite>
"""

TAP = """TAP version 13
ok 1 - draws the map
ok 2 - phone layout # SKIP no chromium
1..2
# tests 2
# pass 1
# fail 0
# cancelled 0
# skipped 1
"""

failed = 0


def check(cond, what):
    global failed
    if not cond:
        failed += 1
        print("CHECK failed:", what)


def run(files):
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, SUMMARY, d], capture_output=True, text=True)
    return p.returncode, p.stdout


def main():
    rc, out = run({"main.xml": JUNIT, "browser-dashboard.tap": TAP,
                   "docker.verdict": "skipped: no Docker engine answers\n",
                   "fuzz.missing": "make test-fuzz exited 2 without a result\n"})
    lines = out.rstrip("\n").split("\n")
    print(out)
    check(lines[-1] == "2 passed, 3 failed, 3 skipped", "last line: %r" % lines[-1])
    check(rc == 1, "exit status %d with failures" % rc)
    check("promtool_accepts_it: promtool not installed" in out, "the skip's reason")
    check("docker: no Docker engine answers" in out, "the Docker skip's reason")
    check("phone layout: no chromium" in out, "the browser skip's reason")
    check("main unit/test_gone" in out, "no executable is a failure")
    check("fuzz (the step stopped" in out, "a suite without a result is a failure")
    # Only a skip: exit 0, and never "all suites passed".
    rc, out = run({"main.xml": JUNIT.replace('status="fail"><failure message="Failed"/>',
                                             'status="run">')
                   .replace('name="unit/test_gone" status="notrun"', 'name="unit/test_gone" status="run"')
                   .replace('<skipped message="Unable to find executable"/>', ''),
                   "docker.verdict": "skipped: no Docker engine answers\n"})
    lines = out.rstrip("\n").split("\n")
    check(lines[-1] == "3 passed, 0 failed, 2 skipped", "last line: %r" % lines[-1])
    check(rc == 0, "exit status %d with skips only" % rc)
    check("all suites passed" not in out, "a skip read as 'all suites passed'")
    check("make test: nothing failed, 2 skipped" in out, "the skips said")
    # Everything passed: said so.
    rc, out = run({"docker.verdict": "passed\n", "browser-a.tap": TAP.replace(
        "ok 2 - phone layout # SKIP no chromium", "ok 2 - phone layout").replace(
        "# pass 1", "# pass 2").replace("# skipped 1", "# skipped 0")})
    lines = out.rstrip("\n").split("\n")
    check(lines[-1] == "3 passed, 0 failed, 0 skipped", "last line: %r" % lines[-1])
    check("make test: all suites passed" in out and rc == 0, "all passed")
    # No result at all: a failure, not a pass.
    rc, out = run({})
    check(rc == 1 and out.rstrip("\n").split("\n")[-1] == "0 passed, 1 failed, 0 skipped",
          "no result: %r" % out)
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
