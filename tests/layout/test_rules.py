#!/usr/bin/env python3
"""test_rules.py — check_layout.py's rules 8 (api/ calls no gpu_ or file
removing function), 10 (file circles) and 11 (named paths) on small
made-up trees, so that each can be seen to fail.

Asserts: two files that call each other are a circle, a one-way call is
none, a name two files define (a stub beside the real code) is no edge, a
static function is no edge; a comment naming a missing path is reported,
an existing one (with or without its ending) and a pattern are not.
Exit status 0 when every check holds, 1 otherwise (one line each).
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layout as cl  # noqa: E402

failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
        print("FAIL", what)


def fn(name, body="", static=False):
    return f"{'static ' if static else ''}int {name}(void) {{\n  {body}\n  return 0;\n}}\n"


# ---- rule 10 --------------------------------------------------------------
loop = {"r/a.c": fn("a_one", "b_one();"), "r/b.c": fn("b_one", "a_one();")}
check(cl.circles(loop) == [["r/a.c", "r/b.c"]], "a.c <-> b.c is a circle")
one_way = {"r/a.c": fn("a_one", "b_one();"), "r/b.c": fn("b_one")}
check(cl.circles(one_way) == [], "a.c -> b.c alone is no circle")
stub = {"r/a.c": fn("a_one", "b_one();"), "r/b.c": fn("b_one", "a_one();"),
        "r/b_none.c": fn("a_one")}
check(cl.circles(stub) == [], "a name two files define is no edge")
static = {"r/a.c": fn("a_one", "b_one();"), "r/b.c": fn("b_one", "a_one();", static=False)
          .replace("a_one();", "helper();") + fn("helper", static=True)}
check(cl.circles(static) == [], "a static function is no edge")
table = {"r/a.c": "const int table[] = {1, 2};\n" + fn("a_one", "b_one();"),
         "r/b.c": fn("b_one", "return table[0];")}
check(cl.circles(table) == [["r/a.c", "r/b.c"]], "a table another file reads is an edge")
one_line = {"r/a.c": "int a_one(void) { return b_one(); }\n",
            "r/b.c": fn("b_one", "a_one();")}
check(cl.circles(one_line) == [["r/a.c", "r/b.c"]], "a one-line definition is a definition")
stub_one = {"r/a.c": fn("a_one", "b_one();"), "r/b.c": fn("b_one", "a_one();"),
            "r/b_none.c": "int a_one(void) { return 0; }\n"}
check(cl.circles(stub_one) == [], "a one-line stub beside the real code is no edge")
static_one = {"r/a.c": "static int a_one(void) { return b_one(); }\n" + fn("a_two", "a_one();"),
              "r/b.c": fn("b_one", "a_one();")}
check(cl.circles(static_one) == [], "a static one-line function is no edge")

# ---- rule 11 --------------------------------------------------------------
with tempfile.TemporaryDirectory() as root:
    os.makedirs(os.path.join(root, "util"))
    os.makedirs(os.path.join(root, "compute", "sched"))
    open(os.path.join(root, "compute", "sched", "queue.c"), "w").close()
    with open(os.path.join(root, "util", "x.c"), "w") as f:
        f.write("/* see compute/sched/queue.c, compute/sched/queue and\n"
                " * compute/sched/*.c, tests/bench/results/auto-<date>.md;\n"
                " * compute/sched/gone.c is not there. */\n"
                "const char *s = \"compute/sched/also_gone.c\"; /* code, not read */\n")
    bad = []
    cl.check_paths(root, bad)
    check(len(bad) == 1 and "compute/sched/gone.c" in bad[0], f"one missing path: {bad}")

# ---- rule 8 ---------------------------------------------------------------
with tempfile.TemporaryDirectory() as root:
    os.makedirs(os.path.join(root, "api"))
    with open(os.path.join(root, "api", "x.c"), "w") as f:
        f.write("/* gpu_count() in a comment is not read */\n"
                "int a(void) { return gpu_count() + jobs_gpu_count(); }\n"
                "int b(const char *p) { return unlink(p); }\n")
    bad = []
    cl.check_api_calls(root, bad)
    check(len(bad) == 2 and "gpu_count" in bad[0] and "unlink" in bad[1],
          f"api/ calling gpu_count and unlink: {bad}")

print("test_rules: ok" if not failed else f"test_rules: {len(failed)} failed")
sys.exit(1 if failed else 0)
