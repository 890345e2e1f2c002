"""upload_sink.py — a plain HTTP socket sink: the peer of issue 11's upload
target ("the same curl into a trivial socket sink written in Python").

    python3 tests/bench/upload_sink.py PORT

Prints "listening on PORT" (PORT 0: any free port), accepts one
connection at a time, reads the request headers, drains
Content-Length bytes into a reused 1 MiB buffer and answers 200 "ok". No
parsing, no file, no hash: loopback TCP with HTTP framing and nothing else.
tests/bench/upload_curl.sh runs curl -T into it and into tesseld in turn.
"""
import socket
import sys

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))  # 0: any free port
s.listen(8)
print(f"listening on {s.getsockname()[1]}", flush=True)
buf = bytearray(1 << 20)
mv = memoryview(buf)
while True:
    c, _ = s.accept()
    hdr = b""
    while b"\r\n\r\n" not in hdr:
        chunk = c.recv(65536)
        if not chunk:
            break
        hdr += chunk
    head, _, rest = hdr.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    if b"100-continue" in head.lower():
        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    got = len(rest)
    while got < n:
        k = c.recv_into(mv)
        if not k:
            break
        got += k
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    c.close()
