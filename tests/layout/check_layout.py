#!/usr/bin/env python3
"""check_layout.py — the layout's rules, read from the tree (run by make test).

1. Every `#include "folder/..."` in a production source file follows an allowed
   edge of the folder graph below. The graph is a DAG that points down, from
   the daemon's wiring to the utilities; an include that goes up or across
   fails, with the file, the line and the edge it would add.
2. Inside compute/kinds/, a kind's folder (compute/kinds/map/, ...) may include
   the shared compute/kinds/ headers and its own files, never another kind's.
3. Every production folder opens with a README.md, and holds at most
   MAX_FILES source files directly.
4. The graph itself is acyclic (checked here, so that an edit to ALLOWED
   cannot slip a cycle in).
5. The design card's folders exist (server/, compute/ with its rooms, api/,
   db/, web/, tests/, docker/), and no other top-level folder holds C or CUDA
   sources. A room is a folder (compute/sched) or a top folder (db); the
   room of an include is the longest room its path starts with.

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
    "compute/array": ["db", "util"],
    "compute/expr": ["compute/array", "util"],
    "compute/gpu": ["compute/array", "util"],
    "compute/kinds": ["compute/gpu", "compute/expr", "compute/array", "util"],
    "compute/sched": ["compute/kinds", "compute/gpu", "compute/expr", "compute/array", "db", "util"],
    "compute/jobs": ["compute/sched", "compute/kinds", "compute/array", "db", "util"],
    "server": ["util"],
    "api": ["compute/jobs", "server", "compute/array", "compute/gpu", "util"],
    "app": ["api", "server", "compute/jobs", "compute/sched", "compute/gpu", "db", "util"],
}
# The design card's top-level folders (with app/ and util/, which it allows).
CARD = ["server", "compute", "api", "db", "web", "tests", "docker", "app", "util"]
# Folders that hold rooms but are none themselves: a README, no sources.
HALLS = ["compute"]
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
    for top in CARD:
        if not os.path.isdir(os.path.join(root, top)):
            bad.append(f"{top}/: missing (the design card's floor plan)")
    for hall in HALLS:
        hdir = os.path.join(root, hall)
        if not os.path.isfile(os.path.join(hdir, "README.md")):
            bad.append(f"{hall}/: no README.md")
        for f in os.listdir(hdir) if os.path.isdir(hdir) else []:
            if f.endswith(SOURCE_EXT):
                bad.append(f"{hall}/{f}: sources belong in one of {hall}/'s rooms")
    for f in sorted(os.listdir(root)):
        d = os.path.join(root, f)
        if os.path.isdir(d) and f not in CARD and not f.startswith((".", "build")) \
                and f not in ("clients", "deps", "data", "node_modules"):
            for _, _, files in os.walk(d):
                if any(x.endswith(SOURCE_EXT) for x in files):
                    bad.append(f"{f}/: sources outside the design card's folders")
                    break

    def room_of(path):
        best = None
        for r in ALLOWED:
            if path == r or path.startswith(r + "/"):
                if best is None or len(r) > len(best):
                    best = r
        return best

    for top in ALLOWED:
        tdir = os.path.join(root, top)
        if not os.path.isdir(tdir):
            bad.append(f"{top}/: missing")
            continue
        for dirpath, dirs, files in os.walk(tdir):
            rel_dir = os.path.relpath(dirpath, root)
            if room_of(rel_dir) != top:  # a room of its own, walked as such
                dirs[:] = []
                continue
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
                        dst = room_of(inc)
                        if dst is None:
                            bad.append(f"{rel}:{no}: include \"{inc}\" names no production folder")
                        elif dst != top and dst not in ALLOWED[top]:
                            bad.append(f"{rel}:{no}: {top} -> {dst} is not an allowed edge (\"{inc}\")")
                        elif dst == top == "kinds":
                            src_sub = rel.split("/")[1] if rel.count("/") >= 2 else None
                            dst_sub = parts[1] if len(parts) >= 3 else None
                            if dst_sub and dst_sub != src_sub:
                                bad.append(f"{rel}:{no}: compute/kinds/{src_sub or ''} -> compute/kinds/{dst_sub}/ goes across kinds (\"{inc}\")")
                        if not os.path.isfile(os.path.join(root, inc)):
                            bad.append(f"{rel}:{no}: include \"{inc}\" does not exist")
    for b in bad:
        print(b)
    print(f"check_layout: {len(bad)} violation(s)" if bad else "check_layout: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
