"""tessel/wire.py, the whole-answer HTTP exchange the transport speaks for
JSON requests: answers framed every way HTTP/1.1 allows (Content-Length,
chunked, to the end of the connection, after 1xx interim answers),
delivered in any pieces, and hostile or broken answers (truncated, over
the head limit, garbage) raising only the http.client errors the
transport turns into `Unavailable`. No daemon: a socketpair plays the
server. The transport's use of it against a real daemon is covered by
every other test here."""
import http.client
import random
import socket
import threading

import pytest

from tessel import wire


class Pieces:
    """A socket whose recv hands out `data` in the given piece sizes."""

    def __init__(self, data, sizes=None):
        self.data, self.sizes, self.pos = data, list(sizes or []), 0

    def _next(self, n):
        k = self.sizes.pop(0) if self.sizes else n
        out = self.data[self.pos:self.pos + min(n, k)]
        self.pos += len(out)
        return out

    def recv(self, n):
        return self._next(n)

    def recv_into(self, view):
        got = self._next(len(view))
        view[:len(got)] = got
        return len(got)


BODY = b'{"id": "j_1", "status": "succeeded", "result": {"data": [1.0, 4.0]}}'
CL = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
      b"Retry-After: 2\r\n\r\n" % len(BODY)) + BODY


def test_content_length_in_any_pieces():
    for sizes in ([], [1] * len(CL), [5, 17, 3, 100], [len(CL) - 1, 1]):
        r = wire.read_reply(Pieces(CL, sizes), "POST")
        assert (r.status, r.body, r.will_close) == (200, BODY, False)
        assert r.getheader("content-type") == "application/json"
        assert r.getheader("Retry-After") == "2"
        assert r.getheader("X-None", "d") == "d"


def test_chunked_and_trailers():
    data = (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n")
    for sizes in ([], [1] * len(data), [40, 3]):
        r = wire.read_reply(Pieces(data, sizes), "GET")
        assert (r.status, r.body) == (201, b"hello, world")


def test_interim_answers_skipped_and_no_body_statuses():
    data = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n"
    r = wire.read_reply(Pieces(data), "DELETE")
    assert (r.status, r.body) == (204, b"")
    r = wire.read_reply(Pieces(CL), "HEAD")
    assert (r.status, r.body) == (200, b"")


def test_close_and_http10():
    r = wire.read_reply(Pieces(b"HTTP/1.1 503 Busy\r\nConnection: close\r\n"
                               b"Content-Length: 2\r\n\r\n{}"), "GET")
    assert (r.status, r.body, r.will_close) == (503, b"{}", True)
    r = wire.read_reply(Pieces(b"HTTP/1.0 200 OK\r\n\r\nto the end"), "GET")
    assert (r.body, r.will_close) == (b"to the end", True)
    r = wire.read_reply(Pieces(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"
                               b"Content-Length: 0\r\n\r\n"), "GET")
    assert r.will_close is False


def test_closed_before_answer_is_remote_disconnected():
    with pytest.raises(http.client.RemoteDisconnected):
        wire.read_reply(Pieces(b""), "GET")


@pytest.mark.parametrize("data", [
    b"HTTP/1.1 200 OK\r\nContent-Len",                       # head cut
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",     # body cut
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"SSH-2.0-OpenSSH\r\n\r\n",                               # not HTTP
    b"HTTP/1.1 abc OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: " + b"a" * (wire.MAX_HEAD + 10),  # head over the limit
])
def test_broken_answers_raise_http_errors(data):
    with pytest.raises(http.client.HTTPException):
        wire.read_reply(Pieces(data, [7] * 10), "GET")


def test_mutated_answers_never_raise_anything_else():
    """A fuzz round: random cuts, flips and insertions of a good answer
    end in a Reply or an http.client error, never another exception and
    never a hang (the pieces run out: the peer closed)."""
    rng = random.Random(26)
    good = [CL, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"]
    for _ in range(3000):
        d = bytearray(rng.choice(good))
        for _ in range(rng.randint(1, 4)):
            op, i = rng.randrange(3), rng.randrange(len(d) + 1)
            if op == 0:
                del d[i:i + rng.randint(1, 8)]
            elif op == 1 and i < len(d):
                d[i] = rng.randrange(256)
            else:
                d[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        try:
            r = wire.read_reply(Pieces(bytes(d), [rng.randint(1, 40) for _ in range(50)]), "GET")
            assert isinstance(r.body, bytes)
        except http.client.HTTPException:
            pass


def test_request_head_and_one_send():
    head = wire.request_head("POST", "/v1/jobs?wait=1", b"Host: h\r\n",
                             {"Content-Type": "application/json"}, 2)
    assert head == (b"POST /v1/jobs?wait=1 HTTP/1.1\r\nHost: h\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n")
    assert wire.request_head("GET", "/x", b"", {}, None) == b"GET /x HTTP/1.1\r\n\r\n"
    a, b = socket.socketpair()
    try:
        sends = []
        orig = a.sendall

        class Counting:
            def sendall(self, data):
                sends.append(bytes(data))
                orig(data)
        wire.send(Counting(), head, [b"{}"])
        assert sends == [head + b"{}"]  # a small body goes with its head
        assert _drain(b, len(head) + 2) == head + b"{}"
        big = bytes(70 << 10)
        got = []
        t = threading.Thread(target=lambda: got.append(_drain(b, len(head) + len(big))))
        t.start()
        sends.clear()
        wire.send(Counting(), head, [big])
        t.join()
        assert len(sends) == 2 and got[0] == head + big
    finally:
        a.close()
        b.close()


def _drain(s, n):
    out = b""
    while len(out) < n:
        out += s.recv(1 << 16)
    return out


def test_request_head_refuses_what_would_add_a_line():
    """An id with a line break (c.job("j\r\nX: y")) or a space never reaches
    the wire: ValueError, as http.client's InvalidURL was."""
    for target in ("/v1/jobs/j\r\nX: y", "/v1/jobs/a b", "/v1/jobs/\x00"):
        with pytest.raises(ValueError):
            wire.request_head("GET", target, b"", {}, None)
    with pytest.raises(ValueError):
        wire.request_head("GET", "/x", b"", {"Range": "bytes=0-1\r\nX: y"}, None)
    from tessel.transport import Transport
    with pytest.raises(ValueError):
        Transport("http://127.0.0.1:1", token="t\r\nX: y")
