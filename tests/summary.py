#!/usr/bin/python3
"""tests/summary.py — the closing lines of `make test`, from what each suite
left in the results folder (the Makefile's TEST_RESULTS):

  SUITE.xml      CTest's JUnit file (ctest --output-junit): one testcase per
                 CTest test, status "run", "fail" or "notrun"; a notrun with
                 <skipped message="SKIP_RETURN_CODE=77"> (or the regular
                 expression's message) is a skip, its reason the first
                 "SKIPPED: ..." / "SKIP name: ..." / "skipped: ..." line of its
                 output; any other notrun (no executable, a failed fixture)
                 is a failure, as CTest itself counts it.
  SUITE*.tap     node --test's TAP report (tests/browser/run.sh): its
                 "# pass / # fail / # cancelled / # skipped" totals, the
                 reasons from "# SKIP" lines.
  SUITE.verdict  one line, "passed", "skipped: WHY" or "failed: WHY"
                 (tests/docker/run.sh), one test.
  SUITE.missing  written by the Makefile when a suite's step stopped
                 (a build error, a crash) before it left any of the above:
                 one failure, with the step's exit status.

It prints one line per suite, every skip with its reason, every failure,
then "N passed, N failed, N skipped" alone as the last line (CI reads it).
Exit status 1 when anything failed or no suite left a result, else 0.
Standard library only (Debian's python3).
"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

SKIP_LINE = re.compile(r"^\s*(SKIPPED:|SKIP \S+:|skipped:|docker test: SKIPPED:)\s*(.*)$")
SKIP_MESSAGES = ("SKIP_RETURN_CODE", "SKIP_REGULAR_EXPRESSION")


def reason_of(out):
    """The first skip line of a test's output, else its last line."""
    lines = [l for l in (out or "").splitlines() if l.strip()]
    for l in lines:
        m = SKIP_LINE.match(l)
        if m:
            return l.strip()
    return lines[-1].strip() if lines else "(no output)"


def read_junit(path):
    """(passed, failed names, [(name, why)] skipped) of one CTest run."""
    passed, failed, skipped = 0, [], []
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        return 0, ["(unreadable %s: %s)" % (os.path.basename(path), e)], []
    for tc in root.iter("testcase"):
        name = tc.get("name", "?")
        status = tc.get("status", "")
        out = tc.findtext("system-out") or ""
        sk = tc.find("skipped")
        if status == "run" and tc.find("failure") is None:
            passed += 1
        elif status == "notrun" and sk is not None and \
                (sk.get("message") or "").startswith(SKIP_MESSAGES):
            skipped.append((name, reason_of(out)))
        else:
            failed.append(name)
    return passed, failed, skipped


def read_tap(path):
    passed = failed = 0
    skipped, failed_names = [], []
    totals = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^# (pass|fail|cancelled|skipped|todo) (\d+)\s*$", line)
            if m:
                totals[m.group(1)] = int(m.group(2))
                continue
            m = re.match(r"^\s*(not )?ok \d+ - (.*?)(?:\s+# SKIP\s*(.*))?$", line)
            if m and m.group(3) is not None:
                skipped.append((m.group(2), m.group(3) or "skipped"))
            elif m and m.group(1) and line.startswith("not ok"):
                failed_names.append(m.group(2))
    if not totals:
        return 0, ["(no totals in %s: the run stopped)" % os.path.basename(path)], []
    passed = totals.get("pass", 0)
    failed = totals.get("fail", 0) + totals.get("cancelled", 0)
    names = failed_names[:failed] + ["(unnamed)"] * max(0, failed - len(failed_names))
    return passed, names, skipped[: totals.get("skipped", len(skipped))]


def read_verdict(path):
    text = open(path, errors="replace").read().strip() or "failed: empty verdict"
    word, _, why = text.partition(":")
    if word == "passed":
        return 1, [], []
    if word == "skipped":
        return 0, [], [("", why.strip())]
    return 0, [why.strip() or text], []


def main():
    if len(sys.argv) != 2:
        print("usage: summary.py RESULTS_DIR", file=sys.stderr)
        return 2
    d = sys.argv[1]
    suites = {}
    for path in sorted(glob.glob(os.path.join(d, "*"))):
        base = os.path.basename(path)
        suite, ext = os.path.splitext(base)
        if ext == ".tap":
            suite = suite.split("-")[0]
            r = read_tap(path)
        elif ext == ".xml":
            r = read_junit(path)
        elif ext == ".verdict":
            r = read_verdict(path)
        elif ext == ".missing":
            why = open(path, errors="replace").read().strip()
            r = (0, ["(the step stopped: %s)" % why], [])
        else:
            continue
        p, f, s = suites.get(suite, (0, [], []))
        suites[suite] = (p + r[0], f + r[1], s + r[2])
    tp = tf = ts = 0
    print("make test: per suite")
    for suite, (p, f, s) in suites.items():
        print("  %-8s %d passed, %d failed, %d skipped" % (suite, p, len(f), len(s)))
        tp, tf, ts = tp + p, tf + len(f), ts + len(s)
    if ts:
        print("skipped (what did not run, and why):")
        for suite, (_, _, s) in suites.items():
            for name, why in s:
                print("  %s%s: %s" % (suite, " " + name if name else "", why))
    if tf:
        print("failed:")
        for suite, (_, f, _) in suites.items():
            for name in f:
                print("  %s %s" % (suite, name))
    if not suites:
        print("make test: no suite left a result in %s" % d)
        tf = max(tf, 1)
    elif not tf and not ts:
        print("make test: all suites passed")
    elif not tf:
        print("make test: nothing failed, %d skipped (listed above)" % ts)
    print("%d passed, %d failed, %d skipped" % (tp, tf, ts))
    return 1 if tf else 0


if __name__ == "__main__":
    sys.exit(main())
