"""The `tessel` command line (also `python3 -m tessel`): JSON out, exit
codes that say what happened.

    tessel submit JOB.json|-  [--wait S]    submit a job body (API.md); prints the job
    tessel get ID | wait ID [--timeout S] | cancel ID | delete ID
    tessel result ID [-o out.npy]           the result: .npy file, or JSON on stdout
    tessel ls [--arrays] [--status S]       jobs (or arrays) as JSON
    tessel upload FILE.npy|FILE.csv         prints the array's JSON
    tessel devices

Exit codes: 0 done (a job: succeeded), 1 the job failed, 2 usage, 3 the job
was canceled, 4 not found, 5 another error answered by the server (400,
409, ...), 6 the server could not be reached or is unavailable, 124 a wait
that timed out. The server's URL and token: --url / --token, else
$TESSEL_URL / $TESSEL_TOKEN.
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


def _print(obj):
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _job_exit(info):
    return {"succeeded": 0, "failed": EXIT_FAILED, "canceled": EXIT_CANCELED}.get(info.get("status"), 0)


def _run(args):
    c = Client(args.url, args.token, same_host=False)
    t = c._t
    if args.cmd == "submit":
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()
        body = json.loads(text)
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
        src = f"/v1/arrays/{args.id}/data" if args.id.startswith("a_") else f"/v1/jobs/{args.id}/result"
        if args.output:
            a = t.download_npy(src)
            np.save(args.output, a)
            _print({"id": args.id, "file": args.output, "dtype": str(a.dtype), "shape": list(a.shape)})
        else:
            _print(t.json("GET", src)[1])
        return 0
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
            _print(c.upload(np.load(args.file, mmap_mode="r")).info)
        return 0
    if args.cmd == "devices":
        _print(c.devices())
        return 0
    return EXIT_USAGE


def parser():
    p = argparse.ArgumentParser(prog="tessel", description="Tessel from the command line.")
    p.add_argument("--url", default=None, help="the server (default $TESSEL_URL or http://127.0.0.1:8080)")
    p.add_argument("--token", default=None, help="bearer token (default $TESSEL_TOKEN)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="submit a job body (JSON file or - for stdin)")
    s.add_argument("file")
    s.add_argument("--wait", type=float, default=0, help="wait up to S seconds (at most 60)")
    for name in ("get", "cancel", "delete"):
        sub.add_parser(name).add_argument("id")
    s = sub.add_parser("wait", help="wait until a job ends (no 60 s limit)")
    s.add_argument("id")
    s.add_argument("--timeout", type=float, default=None)
    s = sub.add_parser("result", help="a job's result (or an array's data)")
    s.add_argument("id")
    s.add_argument("-o", "--output", help="write .npy here (else JSON on stdout)")
    s = sub.add_parser("ls")
    s.add_argument("--arrays", action="store_true")
    s.add_argument("--status")
    s.add_argument("--limit", type=int, default=50)
    sub.add_parser("upload").add_argument("file")
    sub.add_parser("devices")
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
    except (OSError, ValueError) as e:
        print(f"tessel: {e}", file=sys.stderr)
        return EXIT_USAGE
    except concurrent.futures.TimeoutError:
        return EXIT_TIMEOUT
