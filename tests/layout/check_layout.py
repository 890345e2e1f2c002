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
6. No production code outside compute/kinds/ names a kind: no kind enum
   constant (K_MAP, ...), no kind's ops symbol (kind_map_ops, ...), and no
   comparison (strcmp and friends) with a kind's name as a string literal
   (the names read from the kinds' own kind_ops, `.name = "..."`); and of
   compute/kinds/ it includes only the contract, compute/kinds/kinds.h (not
   a kind's own code: its CUDA entry points, its BLAS). What a scheduler,
   router, API or job file needs to know of a kind is in its kind_ops;
   comments are not read.
7. No function over MAX_FUNC_LINES lines and no source file over
   MAX_FILE_LINES lines in the production folders (LENGTH_ROOTS), but for
   the offenders listed in FUNC_ALLOW / FILE_ALLOW, to be split (issue 24);
   a listed entry that no longer offends fails too, so the lists shrink. A
   function is found by matching braces (comments, literals and
   preprocessor lines blanked) and ends at a `}` alone at column 0, as
   clang-format leaves every definition.
9. The tree states its invariants: at least MIN_ASSERTS assertion sites
   (assert(, T_ASSERT, T_ASSERT_HELD, DEV_ASSERT_HELD; comments and
   #define lines not counted) in the production folders, and at least
   MIN_ASSERT_ROOMS rooms that hold MIN_ROOM_ASSERTS or more each (issue 24:
   a lock held, an index in range, a legal state change, a buffer within
   its cap; on in debug and sanitizer builds, off under NDEBUG).

8. api/ translates HTTP to calls and calls to replies: no file under api/
   calls unlink, unlinkat, remove, rename or renameat, nor a gpu_ function
   (comments are not read). Ending a job or an array, its files and its GPU
   copies, is compute/jobs/lifecycle.c's; the GPU runtime's read-only
   reports reach the API through compute/jobs/devices.c.

10. No file circles: within a room (its subfolders that are no room of
   their own included), a file that names a function or table another
   file defines (not static; a name two files define, such as a stub for
   a build without CUDA, is no edge) depends on that file, and no files
   may depend on each other in a loop. At most MAX_CIRCLES circles are
   let through, each listed in CIRCLE_ALLOW under its room and explained
   in that room's README.md (a line with "file circle"); a listed room
   whose circle is gone fails, so the list only shrinks. A definition on
   one line (`int gpu_count(void) { return g_ndev; }`) counts as one.

11. Every path a comment or a doc names exists: a word that starts with
   one of PATH_ROOTS and a slash (compute/sched/queue.c, tests/bench/) in
   the comments of the production sources and in the production folders'
   README.md files, ARCHITECTURE.md and README.md names a file or folder of
   the tree (as it is, or with a source ending: compute/array/localfile);
   a pattern (a *, <...>, {a,b}) is not checked.

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
    "compute/jobs": ["compute/sched", "compute/kinds", "compute/gpu", "compute/array", "db", "util"],
    "server": ["util"],
    "api": ["compute/jobs", "server", "compute/array", "util"],
    "app": ["api", "server", "compute/jobs", "compute/sched", "compute/gpu", "db", "util"],
}
# The design card's top-level folders (with app/ and util/, which it allows).
CARD = ["server", "compute", "api", "db", "web", "tests", "docker", "app", "util"]
# Folders that hold rooms but are none themselves: a README, no sources.
HALLS = ["compute"]
MAX_FILES = 20
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
KINDS_ROOM = "compute/kinds"
KIND_OPS_NAME = re.compile(r'const\s+kind_ops\s+\w+\s*=\s*\{[^;]*?\.name\s*=\s*"([a-z0-9_]+)"', re.S)
KIND_SYMBOL = re.compile(r'\b(K_(?:MAP|REDUCE|MATMUL|GEODESIC|_COUNT)|tkind|kind_[a-z0-9_]+_ops)\b')
ASSERT_SITE = re.compile(r'\b(?:assert|T_ASSERT|T_ASSERT_HELD|T_ASSERT_NOT_HELD|DEV_ASSERT_HELD)\s*\(')
MIN_ASSERTS = 60
MIN_ASSERT_ROOMS = 8
MIN_ROOM_ASSERTS = 4
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/', re.S)


def strip_comments(text):
    """The text with every comment blanked (newlines kept: line numbers hold)."""
    return COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def kind_names(root):
    """The kinds' names, from their kind_ops definitions in compute/kinds/."""
    names = set()
    for dirpath, _, files in os.walk(os.path.join(root, KINDS_ROOM)):
        for f in files:
            if f.endswith(".c"):
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    names.update(KIND_OPS_NAME.findall(strip_comments(fh.read())))
    return names


def kind_leaks(rel, text, names):
    """Where the file (outside compute/kinds/) names a kind: (line, what)."""
    out = []
    code = strip_comments(text)
    compare = re.compile(r'\b(?:str(?:n)?(?:case)?cmp)\s*\(([^;{}]*?)"(' +
                         "|".join(sorted(names)) + r')"') if names else None
    for no, line in enumerate(code.split("\n"), 1):
        m = KIND_SYMBOL.search(line)
        if m:
            out.append((no, m.group(1)))
        c = compare.search(line) if compare else None
        if c:
            out.append((no, f'a comparison with "{c.group(2)}"'))
    return out


# ---- rule 7: short functions, short files ---------------------------------
# Production folders whose sources the limits cover.
LENGTH_ROOTS = ["app", "api", "server", "compute", "db", "util"]
MAX_FUNC_LINES = 150
MAX_FILE_LINES = 1000
# Today's offenders, to be split (issue 24): each entry is "path:function"
# (or a path, for a file) with the length it had when listed. An entry
# that no longer offends is itself a violation, so the lists only shrink.
FUNC_ALLOW = {
}
FILE_ALLOW = {
}
HEADER_SKIP = re.compile(r'^\s*(extern\s+"C"|struct|union|enum|typedef|namespace)\b')
NAME_AT_END = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*$')


def function_name(header):
    """The name before the last top-level parenthesis of a definition's
    header (`__global__ void __launch_bounds__(128) k(args)`: k), or None
    when the header has none (an initializer, a block)."""
    depth, last = 0, -1
    for i, c in enumerate(header):
        if c == "(":
            if depth == 0:
                last = i
            depth += 1
        elif c == ")":
            depth -= 1
    m = NAME_AT_END.search(header[:last]) if last >= 0 else None
    return m.group(1) if m else None


def strip_code(text):
    """The text with comments, string and character literals and
    preprocessor lines blanked (newlines kept), so that braces count."""
    out = []
    i, n = 0, len(text)
    state = None  # None, "line", "block", '"', "'"
    at_bol, in_pp = True, False
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "\n":
            if state == "line":
                state = None
            if in_pp and not (out and out[-1] == "\\"):
                in_pp = False
            out.append("\n")
            at_bol = True
            i += 1
            continue
        if state is None and not in_pp and at_bol and c == "#":
            in_pp = True
        if not c.isspace():
            at_bol = False
        if in_pp and state is None:
            if c == "/" and nxt == "*":
                state = "block"
                out.append("  ")
                i += 2
                continue
            out.append("\\" if c == "\\" else " ")
            i += 1
            continue
        if state is None:
            if c == "/" and nxt == "/":
                state = "line"
                out.append("  ")
                i += 2
                continue
            if c == "/" and nxt == "*":
                state = "block"
                out.append("  ")
                i += 2
                continue
            if c in "\"'":
                state = c
                out.append(" ")
                i += 1
                continue
            out.append(c)
            i += 1
            continue
        if state == "block":
            if c == "*" and nxt == "/":
                state = None
                out.append("  ")
                i += 2
                continue
            out.append(" ")
            i += 1
            continue
        if state in "\"'":
            if c == "\\":
                out.append("  ")
                i += 2
                continue
            if c == state:
                state = None
            out.append(" ")
            i += 1
            continue
        out.append(" ")  # line comment
        i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of every function whose body closes
    with a `}` alone at column 0 (as clang-format leaves them)."""
    code = strip_code(text).split("\n")
    found = []
    depth = 0
    header_start = None  # first line of the text since the last ; } or {
    start = name = None
    for no, line in enumerate(code, 1):
        for col, c in enumerate(line):
            if depth == 0 and header_start is None and not c.isspace():
                header_start = no
            if c == "{":
                if depth == 0:
                    hdr = " ".join(code[(header_start or no) - 1:no - 1] + [line[:col]])
                    name = None if HEADER_SKIP.match(hdr) else function_name(hdr)
                    start = header_start or no if name else None
                depth += 1
            elif c == "}":
                depth = max(depth - 1, 0)
                if depth == 0:
                    if start is not None and col == 0 and line.strip() == "}":
                        found.append((name, start, no))
                    start = name = None
                    header_start = None
            elif c == ";" and depth == 0:
                header_start = None
    return found


def check_lengths(root, bad):
    func_seen, file_seen = set(), set()
    for top in LENGTH_ROOTS:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
                nlines = text.count("\n")
                if nlines > MAX_FILE_LINES:
                    if rel in FILE_ALLOW:
                        file_seen.add(rel)
                    else:
                        bad.append(f"{rel}: {nlines} lines (at most {MAX_FILE_LINES}): split it by concern")
                for name, first, last in functions(text):
                    length = last - first + 1
                    if length <= MAX_FUNC_LINES:
                        continue
                    key = f"{rel}:{name}"
                    if key in FUNC_ALLOW:
                        func_seen.add(key)
                    else:
                        bad.append(f"{rel}:{first}: {name} is {length} lines (at most {MAX_FUNC_LINES}): split it into steps")
    for key in sorted(set(FUNC_ALLOW) - func_seen):
        bad.append(f"{key}: within {MAX_FUNC_LINES} lines now (or gone): remove it from FUNC_ALLOW")
    for key in sorted(set(FILE_ALLOW) - file_seen):
        bad.append(f"{key}: within {MAX_FILE_LINES} lines now (or gone): remove it from FILE_ALLOW")


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


# ---- rule 8: the API removes nothing -------------------------------------
API_ROOM = "api"
API_FORBIDDEN = re.compile(r'\b(unlink|unlinkat|remove|rename|renameat|gpu_[A-Za-z0-9_]*)\s*\(')


def check_api_calls(root, bad):
    """Rule 8: api/ calls no file-removing function and no GPU call."""
    for dirpath, _, files in os.walk(os.path.join(root, API_ROOM)):
        for f in sorted(files):
            if not f.endswith(SOURCE_EXT):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                code = strip_comments(fh.read())
            for no, line in enumerate(code.split("\n"), 1):
                for m in API_FORBIDDEN.finditer(line):
                    name = m.group(1)
                    bad.append(f"{rel}:{no}: api/ calls {name}(); ending a job or an array "
                               f"(files, GPU copies) is compute/jobs/lifecycle.h's")


def check_asserts(root, room_of, bad):
    """Rule 9: count assertion sites per room."""
    per_room = {}
    for top in ALLOWED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith(SOURCE_EXT):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    text = strip_comments(fh.read())
                n = sum(len(ASSERT_SITE.findall(line)) for line in text.split("\n")
                        if not line.lstrip().startswith("#"))
                if n:
                    room = room_of(os.path.dirname(rel))
                    per_room[room] = per_room.get(room, 0) + n
    total = sum(per_room.values())
    rooms = sorted(r for r, n in per_room.items() if n >= MIN_ROOM_ASSERTS)
    if total < MIN_ASSERTS:
        bad.append(f"assertions: {total} sites in the production folders (at least {MIN_ASSERTS})")
    if len(rooms) < MIN_ASSERT_ROOMS:
        bad.append(f"assertions: {len(rooms)} rooms hold {MIN_ROOM_ASSERTS} or more "
                   f"({', '.join(rooms)}); at least {MIN_ASSERT_ROOMS}")


# ---- rule 10: no file circles -------------------------------------------
MAX_CIRCLES = 2
# room -> why its one circle stays (its README.md says more).
CIRCLE_ALLOW = {
    "db": "pg/: the writer thread orders [async] ops before [sync] writes",
}
DEF_LINE = re.compile(r'^(?!static\b)(?:const\s+)?[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*=\s*\{', re.M)
# A definition on one line, `int gpu_count(void) { return g_ndev; }`, which
# functions() (a `}` alone at column 0) does not see.
ONE_LINE_DEF = re.compile(r'^(?!static\b|__global__\b|__device__\b|typedef\b|struct\b|union\b|enum\b)'
                          r'[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{.*\}\s*$', re.M)
IDENT = re.compile(r'\b[A-Za-z_]\w*\b')


def room_files(root, room, room_of):
    """The .c/.cu files of a room, its subfolders that are no room included."""
    out = {}
    for dirpath, dirs, files in os.walk(os.path.join(root, room)):
        rel_dir = os.path.relpath(dirpath, root)
        if room_of(rel_dir) != room:
            dirs[:] = []
            continue
        for f in files:
            if f.endswith((".c", ".cu")):
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    out[os.path.join(rel_dir, f)] = fh.read()
    return out


def circles(files):
    """The loops (strongly connected sets of two or more files) of the
    graph "file names what another file defines"."""
    defs, code = {}, {}
    for f, text in files.items():
        code[f] = strip_code(text)
        lines = code[f].split("\n")
        names = {n for n, first, _ in functions(text)
                 if not re.match(r'\s*(static|__global__|__device__)\b', lines[first - 1])}
        names.update(DEF_LINE.findall(code[f]))
        names.update(ONE_LINE_DEF.findall(code[f]))
        for n in names:
            defs.setdefault(n, set()).add(f)
    graph = {f: set() for f in files}
    for f in files:
        for m in set(IDENT.findall(code[f])):
            owners = defs.get(m)
            if owners and len(owners) == 1:
                (g,) = owners
                if g != f:
                    graph[f].add(g)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_circles(root, room_of, bad):
    """Rule 10: no file circles but the explained ones."""
    if len(CIRCLE_ALLOW) > MAX_CIRCLES:
        bad.append(f"CIRCLE_ALLOW lists {len(CIRCLE_ALLOW)} circles (at most {MAX_CIRCLES})")
    seen = set()
    for room in ALLOWED:
        for comp in circles(room_files(root, room, room_of)):
            names = " <-> ".join(os.path.relpath(f, room) for f in comp)
            if room in CIRCLE_ALLOW and room not in seen:
                seen.add(room)
                readme = os.path.join(root, room, "README.md")
                text = open(readme, encoding="utf-8").read() if os.path.isfile(readme) else ""
                if "file circle" not in text.lower():
                    bad.append(f"{room}/README.md: says nothing of its file circle ({names})")
                continue
            bad.append(f"{room}: file circle {names}: move the table or function that "
                       f"closes it to a file of its own (or explain it: CIRCLE_ALLOW)")
    for room in sorted(set(CIRCLE_ALLOW) - seen):
        bad.append(f"CIRCLE_ALLOW: {room} has no file circle now; remove it from the list")


# ---- rule 11: every path named exists -------------------------------------
PATH_ROOTS = ["app", "api", "server", "compute", "db", "util", "web", "tests", "docker", "clients"]
PATH_WORD = re.compile(r'(?<![\w./<-])((?:' + "|".join(PATH_ROOTS) + r')/[\w./*<>{},-]*)')
PATH_ENDINGS = ("", ".c", ".h", ".cu", ".py", ".sh", ".md")


def named_paths(text):
    """(line, path) of each path-like word of the text."""
    for no, line in enumerate(text.split("\n"), 1):
        for m in PATH_WORD.finditer(line):
            p = m.group(1).rstrip(".,")
            if any(c in p for c in "*<>{}") or p.endswith("/*"):
                continue
            yield no, p


def check_paths(root, bad):
    """Rule 11: the paths comments and docs name exist."""
    docs = [os.path.join(root, "ARCHITECTURE.md"), os.path.join(root, "README.md")]
    srcs = []
    for top in LENGTH_ROOTS:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f == "README.md":
                    docs.append(os.path.join(dirpath, f))
                elif f.endswith(SOURCE_EXT):
                    srcs.append(os.path.join(dirpath, f))
    for path in sorted(docs) + sorted(srcs):
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if path.endswith(SOURCE_EXT):
            code = strip_comments(text)
            # the comments alone: what strip_comments blanked
            text = "".join(c if c != d or c == "\n" else " " for c, d in zip(text, code))
        rel = os.path.relpath(path, root)
        for no, p in named_paths(text):
            if any(os.path.exists(os.path.join(root, p + e)) for e in PATH_ENDINGS):
                continue
            bad.append(f"{rel}:{no}: names {p}, which does not exist")


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

    names = kind_names(root)
    if not names:
        bad.append(f"{KINDS_ROOM}/: no kind_ops with a .name found (rule 6 reads them)")
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
                if top != KINDS_ROOM:
                    with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                        for no, what in kind_leaks(rel, fh.read(), names):
                            bad.append(f"{rel}:{no}: names a kind ({what}); ask its kind_ops "
                                       f"({KINDS_ROOM}/kinds.h) instead")
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
                        if dst == KINDS_ROOM != top and inc != KINDS_ROOM + "/kinds.h":
                            bad.append(f"{rel}:{no}: includes a kind's own code (\"{inc}\"); "
                                       f"only {KINDS_ROOM}/kinds.h, the contract, outside {KINDS_ROOM}/")
                        if dst is None:
                            bad.append(f"{rel}:{no}: include \"{inc}\" names no production folder")
                        elif dst != top and dst not in ALLOWED[top]:
                            bad.append(f"{rel}:{no}: {top} -> {dst} is not an allowed edge (\"{inc}\")")
                        elif dst == top == KINDS_ROOM:
                            src_sub = rel.split("/")[2] if rel.count("/") >= 3 else None
                            dst_sub = parts[2] if len(parts) >= 4 else None
                            if dst_sub and dst_sub != src_sub:
                                bad.append(f"{rel}:{no}: compute/kinds/{src_sub or ''} -> compute/kinds/{dst_sub}/ goes across kinds (\"{inc}\")")
                        if not os.path.isfile(os.path.join(root, inc)):
                            bad.append(f"{rel}:{no}: include \"{inc}\" does not exist")
    check_lengths(root, bad)
    check_api_calls(root, bad)
    check_asserts(root, room_of, bad)
    check_circles(root, room_of, bad)
    check_paths(root, bad)
    for b in bad:
        print(b)
    print(f"check_layout: {len(bad)} violation(s)" if bad else "check_layout: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
