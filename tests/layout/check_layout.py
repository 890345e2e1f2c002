#!/usr/bin/env python3
"""check_layout.py — the layout's rules, read from the tree (run by make test).

1. Every `#include "folder/..."` in a production source file follows an allowed
   edge of the folder graph below. The graph is a DAG that points down, from
   the daemon's wiring to the utilities; an include that goes up or across
   fails, with the file, the line and the edge it would add.
2. Inside kinds/, a kind's folder (kinds/map/, ...) may include the shared
   kinds/ headers and its own files, never another kind's folder.
3. Every production folder opens with a README.md, and holds at most
   MAX_FILES source files directly.
4. The graph itself is acyclic (checked here, so that an edit to ALLOWED
   cannot slip a cycle in).

Usage: check_layout.py [source root]   (default: two folders up from here)
Exit status 0 when every rule holds, 1 with one line per violation.
"""
import os
import re
import sys

# folder -> the folders its files may include (itself always allowed).
ALLOWED = {
    "util": [],
    "db": ["util"],
    "array": ["db", "util"],
    "expr": ["array", "util"],
    "gpu": ["array", "util"],
    "kinds": ["gpu", "expr", "array", "util"],
    "sched": ["kinds", "gpu", "expr", "array", "db", "util"],
    "jobs": ["sched", "kinds", "array", "db", "util"],
    "http": ["util"],
    "api": ["jobs", "http", "array", "gpu", "util"],
    "app": ["api", "http", "jobs", "sched", "gpu", "db", "util"],
}
MAX_FILES = 20
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def acyclic(graph):
    state = {}

    def visit(n, path):
        if state.get(n) == 1:
            return path + [n]
        if state.get(n) == 2:
            return None
        state[n] = 1
        for m in graph.get(n, []):
            cyc = visit(m, path + [n])
            if cyc:
                return cyc
        state[n] = 2
        return None

    for n in graph:
        cyc = visit(n, [])
        if cyc:
            return cyc
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..")
    root = os.path.abspath(root)
    bad = []
    cyc = acyclic(ALLOWED)
    if cyc:
        bad.append("ALLOWED has a cycle: " + " -> ".join(cyc))
    for top in ALLOWED:
        tdir = os.path.join(root, top)
        if not os.path.isdir(tdir):
            bad.append(f"{top}/: missing")
            continue
        for dirpath, _, files in os.walk(tdir):
            rel_dir = os.path.relpath(dirpath, root)
            srcs = [f for f in files if f.endswith(SOURCE_EXT)]
            if "README.md" not in files:
                bad.append(f"{rel_dir}/: no README.md saying what it holds and what it may call")
            if len(srcs) > MAX_FILES:
                bad.append(f"{rel_dir}/: {len(srcs)} source files (at most {MAX_FILES})")
            for f in sorted(srcs):
                rel = os.path.join(rel_dir, f)
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    for no, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        parts = inc.split("/")
                        if len(parts) < 2:
                            bad.append(f"{rel}:{no}: include \"{inc}\" is not rooted at a folder")
                            continue
                        dst = parts[0]
                        if dst not in ALLOWED:
                            bad.append(f"{rel}:{no}: include \"{inc}\" names no production folder")
                        elif dst != top and dst not in ALLOWED[top]:
                            bad.append(f"{rel}:{no}: {top} -> {dst} is not an allowed edge (\"{inc}\")")
                        elif dst == top == "kinds":
                            src_sub = rel.split("/")[1] if rel.count("/") >= 2 else None
                            dst_sub = parts[1] if len(parts) >= 3 else None
                            if dst_sub and dst_sub != src_sub:
                                bad.append(f"{rel}:{no}: kinds/{src_sub or ''} -> kinds/{dst_sub}/ goes across kinds (\"{inc}\")")
                        if not os.path.isfile(os.path.join(root, inc)):
                            bad.append(f"{rel}:{no}: include \"{inc}\" does not exist")
    for b in bad:
        print(b)
    print(f"check_layout: {len(bad)} violation(s)" if bad else "check_layout: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
