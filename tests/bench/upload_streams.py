"""upload_streams.py — the Python client's upload of one array over 1, 2, 4…
connections (issue 25: picking the client's `upload_streams` default), and
nothing else, so that many rounds fit in a minute.

    /usr/bin/python3 tests/bench/upload_streams.py build/tesseld [ROUNDS=5] [STREAMS=1,2,4] [N=1e8]

A fresh tesseld (its environment passed on: TESSEL_PARTS_MAP=0,
TESSEL_PARTS_PREFILL=N to compare), then per round and per stream count
`tessel.Client(streams=s, upload_streams=s).upload(x)` of N float64
(element 0 changed every time: nothing is deduplicated), `os.sync()` before
each so no upload pays for the one before's writeback. Prints the median
seconds per stream count on one line. Nothing here asserts a speed.
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

import numpy as np  # noqa: E402

import tessel  # noqa: E402


def main():
    tesseld = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    streams = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "1,2,4").split(",")]
    n = int(float(sys.argv[4])) if len(sys.argv) > 4 else 100_000_000
    work = tempfile.mkdtemp(prefix="tessel-upload-streams-")
    p = subprocess.Popen([tesseld, "--port", "0", "--data-dir", os.path.join(work, "d"),
                          "--access-log", "0", "--max-upload", str(8 << 30),
                          "--max-upload-pending", str(16 << 30)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        m = None
        while not m:
            line = p.stdout.readline().decode(errors="replace")
            if not line and p.poll() is not None:
                raise RuntimeError("tesseld did not start")
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
        base = f"http://127.0.0.1:{m.group(1)}"
        x = np.random.default_rng(1).random(n)
        clients = {s: tessel.Client(base, same_host=False, streams=s, upload_streams=s)
                   for s in streams}
        times = {s: [] for s in streams}
        for _ in range(rounds):
            for s in streams:
                x[0] += 1.0
                os.sync()
                t0 = time.perf_counter()
                arr = clients[s].upload(x)
                times[s].append(time.perf_counter() - t0)
                arr.delete()
        for c in clients.values():
            c.close()
        print(f"{x.nbytes / 1e6:.0f} MB, medians of {rounds}, {os.cpu_count()} cores: " +
              ", ".join(f"{s} stream{'s' if s > 1 else ''} {statistics.median(v):.3f} s"
                        for s, v in times.items()), flush=True)
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
