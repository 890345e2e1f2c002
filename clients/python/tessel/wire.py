"""One HTTP/1.1 exchange with a JSON (or empty) answer, spoken straight on a
kept-alive socket: the request's bytes made here and sent with one sendall
(a small body with its head), the answer read with as few recv calls as it
came in and parsed with bytes operations.

Why not http.client for these: per answer it makes a socket.makefile (a
SocketIO and a BufferedReader), reads the head line by line through that
buffer and parses the headers with the email package's feedparser; for a
tiny synchronous job (issue 26: one `POST /v1/jobs?wait&include=result`
of ~200 bytes, an answer of ~1.5 KiB) that was most of the client's own
CPU per call (tests/bench/results/sync-2core-2026-11-29b.md). Transfers of
arrays (.npy downloads read into NumPy buffers) keep http.client: the
socket is the same one (transport.py's per-thread connection), used by one
or the other at a time.

What is spoken: requests with Content-Length (never chunked), no Expect;
answers with Content-Length, chunked, or (HTTP/1.0, Connection: close)
read to the end; 1xx interim answers skipped. An answer head over
MAX_HEAD bytes or a malformed one raises http.client.BadStatusLine (or
http.client.RemoteDisconnected when the peer closed before answering),
so the transport's retry and error handling see what http.client raises.
"""
import http.client
import re

MAX_HEAD = 64 << 10  # bytes of an answer's status line and headers
_RECV = 1 << 16      # bytes asked for per recv
_PREALLOC = 16 << 20  # a body up to this long is read into one buffer made at once
_BAD_TARGET = re.compile(r"[\x00-\x20\x7f]")  # as http.client refuses in a URL
_BAD_VALUE = re.compile(r"[\r\n\x00]")       # would end or split a header line


class Reply:
    """An answer read whole: status (int), headers (lower-cased name to
    str), body (bytes), will_close (the server closes the connection)."""

    __slots__ = ("status", "headers", "body", "will_close")

    def __init__(self, status, headers, body, will_close):
        self.status, self.headers, self.body, self.will_close = \
            status, headers, body, will_close

    def getheader(self, name, default=None):
        return self.headers.get(name.lower(), default)

    def read(self):
        return self.body


def request_head(method: str, target: str, fixed: bytes, headers, length) -> bytes:
    """The bytes of a request's head: the request line, `fixed` (the
    transport's own lines, made once: Host, Accept, Authorization), the
    caller's headers and Content-Length (None: no body and no header).
    A target with a space or control character, or a header value with a
    line break, is a ValueError (nothing sent): an id never adds a line."""
    if _BAD_TARGET.search(target):
        raise ValueError(f"a request target with a space or control character: {target!r}")
    lines = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), fixed]
    for k, v in headers.items():
        if _BAD_VALUE.search(f"{k}{v}"):
            raise ValueError(f"a header with a line break: {k!r}")
        lines.append(f"{k}: {v}\r\n".encode("latin-1"))
    if length is not None:
        lines.append(b"Content-Length: %d\r\n" % length)
    lines.append(b"\r\n")
    return b"".join(lines)


def send(sock, head: bytes, parts) -> None:
    """The head and the body's parts (bytes-like); a small body goes in one
    send with the head (one segment, one wake-up of the server)."""
    if len(parts) == 1 and len(parts[0]) <= (64 << 10):
        sock.sendall(head + bytes(parts[0]))
        return
    sock.sendall(head)
    for p in parts:
        sock.sendall(p)


class _Reader:
    """The bytes received so far and the position parsed up to."""

    __slots__ = ("sock", "buf", "pos")

    def __init__(self, sock):
        self.sock, self.buf, self.pos = sock, b"", 0

    def more(self, eof_ok=False) -> bool:
        got = self.sock.recv(_RECV)
        if not got:
            if eof_ok:
                return False
            raise http.client.IncompleteRead(self.buf[self.pos:])
        self.buf = self.buf[self.pos:] + got if self.pos else self.buf + got
        self.pos = 0
        return True

    def line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                out, self.pos = self.buf[self.pos:i], i + 2
                return out
            if len(self.buf) - self.pos > MAX_HEAD:
                raise http.client.LineTooLong("chunk size")
            self.more()

    def take(self, n: int) -> bytes:
        """n bytes. Memory is taken as they arrive beyond _PREALLOC, so a
        length the peer states but never sends costs nothing."""
        have = len(self.buf) - self.pos
        if have >= n:
            out, self.pos = self.buf[self.pos:self.pos + n], self.pos + n
            return out
        first = self.buf[self.pos:]
        self.buf, self.pos = b"", 0
        if n > _PREALLOC:
            parts, got = [first], have
            while got < n:
                piece = self.sock.recv(min(n - got, 1 << 20))
                if not piece:
                    raise http.client.IncompleteRead(b"", n - got)
                parts.append(piece)
                got += len(piece)
            return b"".join(parts)
        out = bytearray(n)
        out[:have] = first
        view, got = memoryview(out), have
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise http.client.IncompleteRead(bytes(out[:got]), n - got)
            got += k
        return bytes(out)

    def rest(self) -> bytes:
        while self.more(eof_ok=True):
            pass
        out, self.pos = self.buf[self.pos:], len(self.buf)
        return out


def _head(r: _Reader):
    """(status, version 1.x minor, headers) of one answer head."""
    while True:
        end = r.buf.find(b"\r\n\r\n", r.pos)
        if end >= 0:
            break
        if len(r.buf) - r.pos > MAX_HEAD:
            raise http.client.BadStatusLine("an answer head over %d bytes" % MAX_HEAD)
        if not r.more(eof_ok=True):
            if len(r.buf) == r.pos:
                raise http.client.RemoteDisconnected(
                    "Remote end closed connection without response")
            raise http.client.BadStatusLine(repr(r.buf[r.pos:r.pos + 80]))
    lines = r.buf[r.pos:end].decode("latin-1").split("\r\n")
    r.pos = end + 4
    first = lines[0].split(None, 2)
    if len(first) < 2 or not first[0].startswith("HTTP/1.") or not first[1].isdigit():
        raise http.client.BadStatusLine(lines[0][:80])
    headers = {}
    for ln in lines[1:]:
        k, sep, v = ln.partition(":")
        if not sep:
            raise http.client.BadStatusLine(ln[:80])
        k = k.strip().lower()
        v = v.strip()
        headers[k] = headers[k] + ", " + v if k in headers else v
    return int(first[1]), first[0][7:], headers


def _chunked(r: _Reader) -> bytes:
    out = []
    while True:
        size = r.line().split(b";", 1)[0].strip()
        try:
            n = int(size, 16)
        except ValueError:
            raise http.client.IncompleteRead(b"".join(out)) from None
        if n == 0:
            while r.line():  # trailers, up to the empty line
                pass
            return b"".join(out)
        out.append(r.take(n))
        r.line()  # the CRLF after the chunk


def read_reply(sock, method: str) -> Reply:
    """Read one whole answer from sock (interim 1xx answers skipped)."""
    r = _Reader(sock)
    while True:
        status, minor, headers = _head(r)
        if not 100 <= status < 200:
            break
    conn = headers.get("connection", "").lower()
    will_close = "close" in conn or (minor == "0" and "keep-alive" not in conn)
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = _chunked(r)
    elif "content-length" in headers:
        try:
            n = int(headers["content-length"])
        except ValueError:
            raise http.client.BadStatusLine("Content-Length: "
                                            + headers["content-length"][:40]) from None
        body = r.take(n)
    else:  # to the end of the connection
        body, will_close = r.rest(), True
    return Reply(status, headers, body, will_close)
