"""The `tessel` command line (also `python3 -m tessel`): JSON out, exit
codes that say what happened.

    tessel submit JOB.json|-  [--wait S]    submit a job body (API.md); prints the job
    tessel get ID | wait ID [--timeout S] | cancel ID | delete ID
    tessel result ID [--part NAME] [-o out.npy | --all]
                                            a summary (dtype, shape, first rows);
                                            -o: the .npy file; --all: every value as JSON
    tessel ls [--arrays] [--status S]       jobs (or arrays) as JSON
    tessel upload FILE.npy|FILE.csv         prints the array's JSON
    tessel devices

A result without -o is a summary read with ?limit_rows (a 1500 x 1500
matrix prints a few lines, not 2 million); a result of several parts (a
kNN job's distance and index) names its parts, and --part picks one.

Exit codes (EXIT_CODES, printed by --help): 0 done (a job: succeeded), 1
the job failed, 2 usage, 3 the job was canceled, 4 not found, 5 another
error answered by the server (400, 409, ...), 6 the server could not be
reached or is unavailable, 65 a local input that is not what it should be
(a job file that is not JSON, a file that is not .npy), 66 a local file
that cannot be opened (read, or written by -o), 124 a wait that timed out. The server's URL, token and
CA file: --url / --token / --cafile, else $TESSEL_URL / $TESSEL_TOKEN /
$TESSEL_CAFILE.
"""
import argparse
import concurrent.futures
import json
import sys

import numpy as np

from . import errors
from .client import Client

EXIT_FAILED, EXIT_USAGE, EXIT_CANCELED, EXIT_NOT_FOUND, EXIT_ERROR, EXIT_UNAVAILABLE, EXIT_TIMEOUT = \
    1, 2, 3, 4, 5, 6, 124
EXIT_DATA, EXIT_NO_INPUT = 65, 66  # sysexits.h's EX_DATAERR and EX_NOINPUT
SUMMARY_ROWS = 5

EXIT_CODES = """exit codes:
  0    done (a job: succeeded)
  1    the job failed
  2    usage (bad arguments)
  3    the job was canceled
  4    not found (no such job, array or part)
  5    another error answered by the server (400, 409, 413, ...)
  6    the server could not be reached or is unavailable
  65   a local input that is not what it should be (a job file that is not
       JSON, a file that is not .npy)
  66   a local file that cannot be opened (read, or written by -o)
  124  a wait that timed out"""


class DataError(Exception):
    """A local input that is not what it should be (exit 65)."""


def _print(obj):
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _job_exit(info):
    return {"succeeded": 0, "failed": EXIT_FAILED, "canceled": EXIT_CANCELED}.get(info.get("status"), 0)


def _read_job_file(name):
    text = sys.stdin.read() if name == "-" else open(name).read()
    try:
        return json.loads(text)
    except ValueError as e:
        raise DataError(f"{'stdin' if name == '-' else name} is not JSON: {e}") from None


def _result(c, args):
    """tessel result: a summary, every value (--all) or a .npy file (-o)."""
    t = c._t
    if args.id.startswith("a_"):
        if args.part:
            raise ValueError("an array has no parts: --part is for job results")
        src, names = f"/v1/arrays/{args.id}/data", []
    else:
        info = t.json("GET", f"/v1/jobs/{args.id}")[1]
        names = [p["name"] for p in (info.get("result") or {}).get("parts") or []]
        src = f"/v1/jobs/{args.id}/result" + (f"/{args.part}" if args.part else "")
    part = args.part or (names[0] if names else None)
    head = {"id": args.id}
    if names:
        head.update(part=part, parts=names)
    if args.output:
        a = t.download_npy(src)
        np.save(args.output, a)
        _print(dict(head, file=args.output, dtype=str(a.dtype), shape=list(a.shape)))
        if names and not args.part:
            others = ", ".join(n for n in names if n != part)
            print(f"tessel: wrote part {part!r}; this result also has {others} "
                  f"(--part NAME -o FILE for each)", file=sys.stderr)
        return 0
    if args.all:
        _print(dict(head, **t.json("GET", src)[1]) if names else t.json("GET", src)[1])
        return 0
    j = t.json("GET", src + f"?limit_rows={SUMMARY_ROWS}")[1]
    shape = j.get("shape") or []
    rows = j.get("rows", shape[0] if shape else None)
    a = np.array(j.get("data"), dtype=np.int64 if j.get("dtype") == "int64" else float)
    what = f" part {part} (parts: {', '.join(names)})" if names else ""
    print(f"{args.id}{what}: {j.get('dtype')}, shape {tuple(shape)}")
    if shape:
        print(f"first {rows} of {shape[0]} rows:" if rows < shape[0] else f"all {rows} rows:")
    print(np.array2string(a, threshold=60, edgeitems=3, max_line_width=100))
    if not shape or rows >= shape[0]:
        return 0
    print(f"(tessel result {args.id}{' --part ' + part if names else ''} --all for every value "
          f"as JSON, -o FILE.npy for the array)")
    return 0


def _run(args):
    c = Client(args.url, args.token, same_host=False, verify=args.cafile)
    t = c._t
    if args.cmd == "submit":
        body = _read_job_file(args.file)
        job = c._t.request("POST", "/v1/jobs" + (f"?wait={min(args.wait, 60)}" if args.wait else ""),
                           json.dumps(body).encode(), {"Content-Type": "application/json"})[1]
        _print(job)
        return _job_exit(job)
    if args.cmd == "get":
        path = f"/v1/arrays/{args.id}" if args.id.startswith("a_") else f"/v1/jobs/{args.id}"
        _print(t.json("GET", path)[1])
        return 0
    if args.cmd == "wait":
        j = c.job(args.id)
        if not j.wait(args.timeout):
            _print(j.info)
            return EXIT_TIMEOUT
        _print(j.info)
        return _job_exit(j.info)
    if args.cmd == "result":
        return _result(c, args)
    if args.cmd == "cancel":
        _print(t.request("POST", f"/v1/jobs/{args.id}/cancel")[1])
        return 0
    if args.cmd == "delete":
        path = f"/v1/arrays/{args.id}" if args.id.startswith("a_") else f"/v1/jobs/{args.id}"
        _print(t.request("DELETE", path)[1])
        return 0
    if args.cmd == "ls":
        if args.arrays:
            _print(t.json("GET", f"/v1/arrays?limit={args.limit}")[1])
        else:
            q = f"?limit={args.limit}" + (f"&status={args.status}" if args.status else "")
            _print(t.json("GET", "/v1/jobs" + q)[1])
        return 0
    if args.cmd == "upload":
        if args.file.endswith(".csv"):
            with open(args.file, "rb") as f:
                _print(t.request("POST", "/v1/arrays", f.read(), {"Content-Type": "text/csv"})[1])
        else:
            try:
                a = np.load(args.file, mmap_mode="r")
            except ValueError as e:
                raise DataError(f"{args.file} is not a .npy file: {e}") from None
            _print(c.upload(a).info)
        return 0
    if args.cmd == "devices":
        _print(c.devices())
        return 0
    return EXIT_USAGE


def parser():
    p = argparse.ArgumentParser(
        prog="tessel", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Tessel from the command line: submit jobs, wait for them, read results. "
                    "JSON on stdout (a result: a short summary unless -o or --all).",
        epilog=EXIT_CODES + "\n\nexample:\n  tessel submit job.json --wait 60 && "
               "tessel result j_... --part index -o index.npy")
    p.add_argument("--url", default=None, help="the server (default $TESSEL_URL or http://127.0.0.1:8080)")
    p.add_argument("--token", default=None, help="bearer token (default $TESSEL_TOKEN)")
    p.add_argument("--cafile", default=None,
                   help="CA file to check an https:// server's certificate against (default "
                        "$TESSEL_CAFILE, else the system's CAs)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                           title="commands (tessel COMMAND --help for each)")

    def cmd(name, text):
        return sub.add_parser(name, help=text, description=text, epilog=EXIT_CODES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    s = cmd("submit", "submit a job body (API.md; a JSON file, or - for stdin); prints the job")
    s.add_argument("file", help="the job's JSON (kind, params, ...), or - to read stdin")
    s.add_argument("--wait", type=float, default=0, help="wait up to S seconds (at most 60)")
    for name, text in (("get", "print a job's (or an array's, a_...) JSON"),
                       ("cancel", "cancel a queued or running job"),
                       ("delete", "delete an ended job and its result, or an array (a_...)")):
        cmd(name, text).add_argument("id", help="j_... (or a_... for get and delete)")
    s = cmd("wait", "wait until a job ends (no 60 s limit); prints it; exit 1 failed, 3 canceled")
    s.add_argument("id", help="j_...")
    s.add_argument("--timeout", type=float, default=None, help="give up after S seconds (exit 124)")
    s = cmd("result", "a job's result (or an array's data): a summary of dtype, shape and "
                      "the first rows; -o writes the .npy, --all prints every value as JSON")
    s.add_argument("id", help="j_... (or a_...)")
    s.add_argument("--part", metavar="NAME",
                   help="one part of a result of several (a kNN job's distance or index; "
                        "a radius job's i, j or distance); default the first")
    out = s.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="FILE", help="write the .npy here")
    out.add_argument("--all", action="store_true",
                     help="print every value as JSON (large results are long)")
    s = cmd("ls", "list jobs (or arrays) as JSON, newest first")
    s.add_argument("--arrays", action="store_true", help="arrays instead of jobs")
    s.add_argument("--status", help="only jobs in this status (queued, running, succeeded, ...)")
    s.add_argument("--limit", type=int, default=50, help="at most N (default 50)")
    cmd("upload", "upload a .npy or .csv file as an array kept on the server; prints its JSON"
        ).add_argument("file", help="FILE.npy or FILE.csv")
    cmd("devices", "the server's CPU and GPUs as JSON")
    return p


def main(argv=None):
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else 0
    try:
        return _run(args)
    except errors.NotFound as e:
        print(f"tessel: {e}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except errors.Unavailable as e:
        print(f"tessel: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except errors.TesselError as e:
        print(f"tessel: {e}", file=sys.stderr)
        return EXIT_ERROR
    except DataError as e:
        print(f"tessel: {e}", file=sys.stderr)
        return EXIT_DATA
    except OSError as e:
        print(f"tessel: {e}", file=sys.stderr)
        return EXIT_NO_INPUT
    except ValueError as e:
        print(f"tessel: {e}", file=sys.stderr)
        return EXIT_USAGE
    except concurrent.futures.TimeoutError:
        return EXIT_TIMEOUT
