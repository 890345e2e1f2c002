"""phase_server.py — a malformed Content-Length gets one answer (issue 23,
case 9: libmicrohttpd 0.9.75 refused "-1", "+5" and "0x10" with its header
block sent twice, which a client or a proxy reads as two answers to one
request).

    phase(d)   d: run.py's running Daemon

Sends a POST with each malformed Content-Length (and a pipelined GET
/healthz behind it) on a fresh loopback connection and reads until the
server closes (at most 5 s each). The bytes must be exactly one HTTP/1.1
response: one status line (400, or 413 for a value over 64 bits), one
header block holding one Content-Length, that many bytes of JSON error
naming the field "Content-Length", nothing after (the pipelined request is
never answered). d must still answer /healthz afterwards. Results go
through run.py's check().
"""
import json
import socket
import sys


def _check(ok, what):
    return sys.modules["__main__"].check(ok, what)


def _exchange(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    out = b""
    try:
        s.sendall(data)
        while True:
            k = s.recv(65536)
            if not k:
                break
            out += k
    except OSError as e:  # a timeout or a reset is a failure below
        out += b"<%s>" % type(e).__name__.encode()
    s.close()
    return out


def _one_response(out):
    """(status, body) when out is exactly one response, else None."""
    head, sep, body = out.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1.1 "):
        return None
    lines = head.split(b"\r\n")
    cls = [ln.split(b":", 1)[1].strip() for ln in lines[1:] if ln.lower().startswith(b"content-length:")]
    if len(cls) != 1 or not cls[0].isdigit() or int(cls[0]) != len(body):
        return None
    return int(lines[0].split()[1]), body


def phase(d):
    P = b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    then = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for value, status in ((b"-1", 400), (b"+5", 400), (b"0x10", 400), (b"1e3", 400),
                          (b"99999999999999999999999", 413)):
        out = _exchange(d.port, P + b"Content-Length: " + value + b"\r\n\r\n{}" + then)
        got = _one_response(out)
        ok = got is not None and got[0] == status
        if ok:
            try:
                ok = json.loads(got[1])["error"]["field"] == "Content-Length"
            except (ValueError, KeyError, TypeError):
                ok = False
        _check(ok, f"[server] Content-Length: {value.decode()} -> {out[:300]!r}")
    st, _, _ = d.request("GET", "/healthz")
    _check(st == 200, f"[server] /healthz after the malformed Content-Lengths -> {st}")
