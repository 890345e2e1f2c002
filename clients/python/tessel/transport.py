"""HTTP to the server on the standard library: one persistent connection per
thread, JSON requests, and .npy bodies streamed straight between NumPy
buffers and the socket. A request whose answer is JSON (every request but
the .npy downloads) is spoken by wire.py on the connection's socket: its
head made from bytes built once, head and a small body in one send, the
answer read whole without http.client's per-answer objects (a tiny `c.map`
spent most of the client's own CPU there); downloads go through
http.client, whose answer is read straight into an array. Every
connection has TCP_NODELAY.

Threads: a Transport is shared by every thread of a Client; each thread gets
its own http.client.HTTPConnection (threading.local), so no lock is held
across a request. A connection that the server closed while idle is opened
again once and the request resent (every request this client sends is safe
to resend: reads, uploads of the same bytes, and job submissions carry a
request_id). Retries on 429 / 503 + Retry-After happen only when the Client
was made with retries=N.

Transfers: an upload sends a .npy header and then memoryview(array) — the
array's own buffer, no copy. A download reads the .npy header (a few hundred
bytes, parsed here), allocates numpy.empty of its shape and readinto()s the
body into it. A same-host result read into a caller's `out` goes the same
way from the file (read_npy_file: readinto, no mapping, no page faults).

Parallel streams: an array of PARALLEL_MIN bytes (64 MiB) or more goes up
in parts (POST /v1/uploads, then PUT ?offset= from worker threads, each on
its own connection, then complete): as many at once as the server advises
(the upload's `streams`: up to 8 where its parts beat one stream, else 1,
and then one PUT carries the whole array) unless `upload_streams` says how
many (1: one POST /v1/arrays, no parts); and it comes down
in byte ranges fetched at once (Range: bytes=a-b on the .npy, each range
readinto() its own slice of the one numpy.empty array: no extra copy). A
server without /v1/uploads (404) or without ranges (a 200 to a Range
request) is used the one-stream way, and remembered.

HTTPS: an https:// URL is spoken with http.client.HTTPSConnection and an
ssl context made once per Transport: the system's CAs (or $SSL_CERT_FILE),
verify=PATH for a CA bundle of one's own (a self-signed server), or
verify=False to skip the certificate check (said in the name: insecure).
"""
import ast
import concurrent.futures
import os
import http.client
import json
import mmap
import socket
import ssl
import threading
import time
import urllib.parse

from typing import Optional

import numpy as np

from . import errors, wire

_NPY_MAGIC = b"\x93NUMPY"

#: Arrays of this many bytes or more are moved over several connections.
PARALLEL_MIN = 64 << 20
#: Connections a Transport uses for one big transfer unless told otherwise.
DEFAULT_STREAMS = 8
# Uploads default to what the server advises (None): on an H200 host
# (2026-11-29, 800 MB) one stream took 0.20-0.25 s and 8 parts 0.15-0.18 s
# once the server copied parts into the file's mapping and hashed behind
# them as they came (before that, 8 parts lost: 0.30 s); on a 2-core server
# parts at once are no faster than one, and it advises 1.
DEFAULT_UPLOAD_STREAMS = None
UPLOAD_STREAMS_MAX = 16  # the most parts at once an advice is followed to
_HEAD_PROBE = 1 << 16  # the first range of a download: header and some data


def npy_header(dtype, shape):
    """The bytes of a .npy 1.0 header for a C-order array (padded to 64)."""
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
         "shape": tuple(int(s) for s in shape)}
    text = repr(d).encode("latin1")
    total = len(_NPY_MAGIC) + 2 + 2 + len(text) + 1
    pad = (64 - total % 64) % 64
    text = text + b" " * pad + b"\n"
    return _NPY_MAGIC + b"\x01\x00" + len(text).to_bytes(2, "little") + text


def _read_exact(resp, n):
    data = resp.read(n)
    if len(data) != n:
        raise errors.Unavailable("the .npy ended in its header", status=0, code="io_error")
    return data


class _NoParts(Exception):
    """The server answered 404 to POST /v1/uploads."""


def parse_npy_header(buf: bytes):
    """(dtype, shape, fortran_order, data offset) of the .npy whose first
    bytes are buf, or None when buf does not hold the whole header yet."""
    if len(buf) < 10 or buf[:6] != _NPY_MAGIC:
        if len(buf) >= 6 and buf[:6] != _NPY_MAGIC:
            raise errors.TesselError("the server's body is not .npy", code="io_error")
        return None
    width = 2 if buf[6] == 1 else 4
    if len(buf) < 8 + width:
        return None
    hlen = int.from_bytes(buf[8:8 + width], "little")
    if hlen > 100000:
        raise errors.TesselError("a .npy header over 100000 bytes", code="io_error")
    off = 8 + width + hlen
    if len(buf) < off:
        return None
    hdr = ast.literal_eval(buf[8 + width:off].decode("latin1"))
    return np.dtype(hdr["descr"]), tuple(hdr["shape"]), bool(hdr["fortran_order"]), off


def read_npy(resp, out=None):
    """Read a .npy body from an http.client response (or an unbuffered file:
    anything with read and readinto) into a new array (or `out`, which must
    have the header's shape and dtype)."""
    pre = _read_exact(resp, 8)
    if pre[:6] != _NPY_MAGIC:
        raise errors.TesselError("the server's body is not .npy", code="io_error")
    major = pre[6]
    hl = _read_exact(resp, 2 if major == 1 else 4)
    hlen = int.from_bytes(hl, "little")
    if hlen > 100000:
        raise errors.TesselError("a .npy header over 100000 bytes", code="io_error")
    hdr = ast.literal_eval(_read_exact(resp, hlen).decode("latin1"))
    dtype = np.dtype(hdr["descr"])
    shape = tuple(hdr["shape"])
    if out is None:
        out = empty_array(shape, dtype, "F" if hdr["fortran_order"] else "C")
    elif out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out has {out.shape} {out.dtype}, the result {shape} {dtype}")
    view = memoryview(out.reshape(-1, order="A") if out.size else out).cast("B")
    got, n = 0, view.nbytes
    while got < n:
        k = resp.readinto(view[got:])
        if not k:
            raise errors.Unavailable(f"the .npy ended after {got} of {n} bytes",
                                     code="io_error")
        got += k
    return out


def read_npy_file(path, out=None):
    """A .npy file read into a new array (or `out`) with readinto."""
    with open(path, "rb", buffering=0) as f:
        return read_npy(f, out)


def ssl_context(verify=True):
    """The ssl context of https:// URLs: verify True (the system's CAs),
    a path (a CA bundle: PEM file) or False (no certificate check)."""
    if verify is False:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if verify is True or verify is None:
        return ssl.create_default_context()
    if not os.path.isfile(verify):
        raise ValueError(f"verify: {verify!r} is not a CA bundle file")
    return ssl.create_default_context(cafile=verify)


def empty_array(shape, dtype, order="C") -> np.ndarray:
    """np.empty(shape, dtype, order), except that an array of PARALLEL_MIN
    bytes and more lies in private anonymous memory asked for huge pages
    (MADV_HUGEPAGE; the array holds the mapping as its base and frees it
    with itself). A download fills every page of a new array, and 4 KiB
    pages are each a fault the copy waits for: on the H200 host 16 threads
    filled fresh anonymous memory at 26-34 GB/s with huge pages
    (tests/bench/bench_fill `anonhuge`) where a fresh file's pages came at
    12-16 GB/s. Where the platform has no MADV_HUGEPAGE: np.empty."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if nbytes < PARALLEL_MIN or not hasattr(mmap, "MADV_HUGEPAGE") \
            or not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.empty(shape, dtype=dt, order=order)
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except OSError:
        pass  # a kernel without transparent huge pages: 4 KiB pages
    return np.ndarray(shape, dtype=dt, buffer=m, order=order)


class _Conn:
    """What Transport adds to http.client's connections: TCP_NODELAY (a
    request or an answer never waits for the ACK of the one before), and
    the last answer http.client gave, remembered so that the whole-answer
    path (Transport._exchange, wire.py) never speaks on a socket whose
    answer is still being read. Small requests send their head and body in
    one send (wire.send); http.client is left the answers read into arrays."""

    _open = None  # the last http.client answer on this connection

    def connect(self):
        super().connect()  # type: ignore[misc]
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # not TCP (a test's socket pair, say)

    def getresponse(self):
        self._open = super().getresponse()  # type: ignore[misc]
        return self._open

    def busy(self) -> bool:
        """An http.client answer on this connection is not read to its end."""
        return self._open is not None and not self._open.isclosed()


class _HTTPConn(_Conn, http.client.HTTPConnection):
    pass


class _HTTPSConn(_Conn, http.client.HTTPSConnection):
    pass


class Transport:
    """Requests to one server. url: http://host:port[/prefix]; token or None;
    retries: how many times a 429 / 503 with Retry-After is retried;
    verify: the certificate check of https:// (ssl_context)."""

    def __init__(self, url, token=None, retries=0, timeout=120.0, verify=True,
                 streams: int = DEFAULT_STREAMS, parallel_min: int = PARALLEL_MIN,
                 upload_streams: Optional[int] = DEFAULT_UPLOAD_STREAMS):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"url: expected http:// or https://, got {url!r}")
        self.url = url
        self.https = u.scheme == "https"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self.token = token
        # the head lines every request carries, as bytes once (wire.py)
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != (443 if self.https else 80):
            host += f":{self.port}"
        if token and any(ch in token for ch in "\r\n\x00"):
            raise ValueError("token: a line break or NUL in it")
        fixed = f"Host: {host}\r\n" + (f"Authorization: Bearer {token}\r\n" if token else "")
        self._fixed = fixed.encode("latin-1")
        self._fixed_accept = (fixed + "Accept: application/json\r\n").encode("latin-1")
        self.retries = retries
        self.timeout = timeout
        self._ssl = ssl_context(verify) if self.https else None
        self._local = threading.local()
        self.refused = set()  # fields this server refused (newer())
        if int(streams) < 1:
            raise ValueError(f"streams: expected 1 or more, got {streams!r}")
        self.streams = int(streams)
        if upload_streams is not None and int(upload_streams) < 1:
            raise ValueError(f"upload_streams: expected 1 or more, got {upload_streams!r}")
        # None: as many parts at once as the server advises (upload_parts)
        self.upload_streams = None if upload_streams is None else int(upload_streams)
        self.parallel_min = int(parallel_min)
        self._pool = None
        self._pool_lock = threading.Lock()
        self._no_parts = False   # the server has no /v1/uploads
        self._no_ranges = False  # the server answered a Range with 200
        #: Counters for tests and benchmarks: connections opened, requests
        #: sent; on_request(method, path, headers) is called before each.
        self.connections_opened = 0
        self.requests_sent = 0
        self.on_request = None
        self._count_lock = threading.Lock()

    # -- connections -------------------------------------------------------
    def _conn(self, fresh=False):
        c = getattr(self._local, "conn", None)
        if c is not None and not fresh:
            return c, True
        if c is not None:
            c.close()
        if self.https:
            c = _HTTPSConn(self.host, self.port, timeout=self.timeout, context=self._ssl)
        else:
            c = _HTTPConn(self.host, self.port, timeout=self.timeout)
        self._local.conn = c
        with self._count_lock:
            self.connections_opened += 1
        return c, False

    def close(self):
        """Close this thread's connection (and the transfer threads')."""
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    def shutdown(self):
        """Stop the transfer threads (their connections close with them)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.map(lambda _: self.close(), range(self._nworkers()))
            pool.shutdown(wait=True)
        self.close()

    def share(self, n: int) -> None:
        """This thread's upload is one of n made at once: it takes 1/n of the
        parts the server advises (two 800 MB uploads on an H200 host: 0.286 s
        with 4 parts each against 0.361 s with 8 each through 8 threads)."""
        self._local.share = max(1, int(n))

    def _nworkers(self) -> int:
        return max(self.streams, self.upload_streams or DEFAULT_STREAMS)

    def _workers(self) -> concurrent.futures.ThreadPoolExecutor:
        """The transfer threads: `streams` of them, each keeping its own
        connection (threading.local) from one transfer to the next."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._nworkers(), thread_name_prefix="tessel-xfer")
            return self._pool

    def _headers(self, extra):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(extra or {})
        return h

    # -- one exchange --------------------------------------------------------
    def _send(self, method, path, body, headers, timeout, extra=None):
        """Send and return the answer. body: None, bytes, or a list of
        buffers sent one after the other. extra None: http.client's
        HTTPResponse, status and headers read, the body not; else (the
        caller's own headers) the whole answer, read by _exchange."""
        for attempt in (0, 1):
            conn, reused = self._conn(fresh=attempt > 0)
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                parts = [] if body is None else ([body] if isinstance(body, (bytes, bytearray)) else body)
                with self._count_lock:
                    self.requests_sent += 1
                if self.on_request is not None:
                    self.on_request(method, path, headers)
                if extra is not None:
                    return self._exchange(conn, method, path, parts, extra)
                conn.putrequest(method, self.prefix + path, skip_accept_encoding=True)
                h = dict(headers)
                if body is not None or method in ("POST", "PUT"):
                    h["Content-Length"] = str(sum(memoryview(p).nbytes for p in parts))
                for k, v in h.items():
                    conn.putheader(k, v)
                conn.endheaders()
                for p in parts:
                    conn.sock.sendall(p)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    http.client.CannotSendRequest, http.client.BadStatusLine) as e:
                conn.close()
                self._local.conn = None
                if reused and attempt == 0:
                    continue  # the server closed an idle connection: once more
                raise errors.Unavailable(f"{self.url}: {e!r}", code="unavailable") from e
            except (ConnectionRefusedError, socket.gaierror, socket.timeout, OSError,
                    http.client.HTTPException) as e:
                conn.close()
                self._local.conn = None
                raise errors.Unavailable(f"{self.url}: {e}", code="unavailable") from e
        raise AssertionError("unreachable")

    def _exchange(self, conn, method, path, parts, extra):
        """One request and its whole answer (a wire.Reply) spoken on the
        connection's socket by wire.py: one sendall for a small body, the
        answer parsed from as few recv calls as it came in, none of
        http.client's per-answer objects. The Accept, Host and
        Authorization lines are the transport's bytes made once."""
        if conn.busy():  # an earlier download was left half read
            raise http.client.CannotSendRequest("a download on this connection is unread")
        if conn.sock is None:
            conn.connect()
        length = (sum(memoryview(p).nbytes for p in parts)
                  if parts or method in ("POST", "PUT") else None)
        head = wire.request_head(method, self.prefix + path,
                                 self._fixed if "Accept" in extra else self._fixed_accept,
                                 extra, length)
        wire.send(conn.sock, head, parts)
        rep = wire.read_reply(conn.sock, method)
        if rep.will_close:
            conn.close()
            self._local.conn = None
        return rep

    def newer(self, field, new, old):
        """new(): a request that uses a field or parameter `field` older
        servers lack (include, fields). A server that refuses it answers 400
        naming it and makes nothing; then old(), and every later call of
        this transport goes straight to old()."""
        if field not in self.refused:
            try:
                return new()
            except errors.InvalidArgument as e:
                if e.field != field:
                    raise
                self.refused.add(field)
        return old()

    def request(self, method, path, body=None, headers=None, timeout=None, raw=False):
        """One request with the retry policy. Returns (status, parsed JSON)
        for a 2xx; with raw=True returns the open response instead (the
        caller reads it to the end). An error answer raises TesselError.
        Without raw the answer is read whole by _exchange (wire.py)."""
        extra = None if raw else (headers or {})
        headers = self._headers(headers)
        tries = 0
        while True:
            resp = self._send(method, path, body, headers, timeout or self.timeout, extra)
            if resp.status < 300:
                if raw:
                    return resp
                data = resp.read()
                return resp.status, (json.loads(data) if data else None)
            data = resp.read()
            ra = resp.getheader("Retry-After")
            retry_after = float(ra) if ra and ra.replace(".", "", 1).isdigit() else None
            if resp.getheader("Connection", "").lower() == "close":
                self.close()
            err = errors.from_response(resp.status, data, retry_after)
            if isinstance(err, errors.TooManyRequests) and tries < self.retries:
                tries += 1
                time.sleep(min(retry_after if retry_after is not None else 1.0, 60.0))
                continue
            raise err

    def json(self, method, path, obj=None, timeout=None):
        body = None if obj is None else json.dumps(obj).encode()
        hdr = {"Content-Type": "application/json"} if body is not None else {}
        return self.request(method, path, body, hdr, timeout)

    def upload_npy(self, a: np.ndarray, query: str = ""):
        """POST /v1/arrays with a C-contiguous native array, streamed from
        its buffer; PARALLEL_MIN bytes and more go in parts over several
        connections (upload_parts). Returns (status, array JSON)."""
        assert a.flags.c_contiguous and a.dtype.isnative
        if (a.nbytes >= self.parallel_min and self.upload_streams != 1 and not query
                and not self._no_parts):
            try:
                return self.upload_parts(a)
            except _NoParts:
                pass  # an older server: one stream (remembered)
        parts = [npy_header(a.dtype, a.shape)]
        if a.size:
            parts.append(memoryview(a.reshape(-1)).cast("B"))
        return self.request("POST", "/v1/arrays" + query, parts,
                            {"Content-Type": "application/x-npy"})

    def _part_bounds(self, n: int, streams: Optional[int] = None):
        """[a, b) pieces of n bytes: twice as many as streams (so a slow
        connection does not hold the end back), 8 MiB at least."""
        k = max(1, min((streams or self.streams) * 2, -(-n // (8 << 20))))
        step = -(-n // k)
        return [(o, min(n, o + step)) for o in range(0, n, step)]

    def upload_parts(self, a: np.ndarray):
        """The array in parts sent at once: POST /v1/uploads, one PUT
        ?offset= per part, then complete. The parts are slices of the
        array's own buffer (no copy), taken in file order by `k` worker
        threads, k = upload_streams, or when that is None the server's
        advice (the upload's `streams`; 1: one PUT of the whole array on
        this thread). Returns (status, array JSON) as upload_npy. A 404 on
        the create means the server has no parts uploads: _NoParts (the
        caller falls back)."""
        try:
            _, up = self.json("POST", "/v1/uploads",
                              {"dtype": a.dtype.name, "shape": list(a.shape)})
        except errors.NotFound as e:
            self._no_parts = True
            raise _NoParts() from e
        uid = up["id"]
        view = memoryview(a.reshape(-1)).cast("B")
        k = self.upload_streams
        if k is None:
            advice = up.get("streams")
            k = advice if isinstance(advice, int) and advice >= 1 else 1
            k = min(k, UPLOAD_STREAMS_MAX)
            # several uploads at once (a job's big inputs, Client._inputs):
            # the advice is the server's best for all of them together
            k = max(1, k // max(1, getattr(self._local, "share", 1)))

        def put(bounds):
            lo, hi = bounds
            self.request("PUT", f"/v1/uploads/{uid}?offset={lo}", [view[lo:hi]],
                         {"Content-Type": "application/octet-stream"})

        try:
            if k == 1:
                put((0, view.nbytes))
            else:
                todo = iter(self._part_bounds(view.nbytes, k))
                lock = threading.Lock()

                def worker():  # the next part in file order, until none is left
                    while True:
                        with lock:
                            b = next(todo, None)
                        if b is None:
                            return
                        put(b)

                for f in [self._workers().submit(worker) for _ in range(k)]:
                    f.result()
            return self.request("POST", f"/v1/uploads/{uid}/complete")
        except BaseException:
            try:
                self.request("DELETE", f"/v1/uploads/{uid}")
            except errors.TesselError:
                pass  # gone already, or the server is: it expires anyway
            raise

    def download_npy(self, path: str, out: Optional[np.ndarray] = None) -> np.ndarray:
        """GET a .npy into a new array (or `out`). Big ones (PARALLEL_MIN
        bytes and more, learnt from the first range's Content-Range) come
        in ranges over several connections, each read into its own slice."""
        if self.streams > 1 and not self._no_ranges:
            return self._download_ranges(path, out)
        resp = self.request("GET", path, headers={"Accept": "application/x-npy"}, raw=True)
        try:
            return read_npy(resp, out)
        except BaseException:
            self.close()  # a half-read body: the connection cannot be reused
            raise

    def _get_range(self, path: str, lo: int, hi: int):
        """GET bytes lo..hi-1 of path; the open response (206, or a 200 from
        a server that ignores Range)."""
        return self.request("GET", path, raw=True, headers={
            "Accept": "application/x-npy", "Range": f"bytes={lo}-{hi - 1}"})

    def _download_ranges(self, path, out):
        resp = self._get_range(path, 0, _HEAD_PROBE)
        try:
            if resp.status != 206:  # ranges not served: this body is the whole
                self._no_ranges = True
                return read_npy(resp, out)
            total = int(resp.getheader("Content-Range", "").rpartition("/")[2])
            first = resp.read()
        except BaseException:
            self.close()
            raise
        head = parse_npy_header(first)
        if head is None:
            raise errors.TesselError("a .npy header longer than the first range",
                                     code="io_error")
        dtype, shape, fortran, off = head
        if out is None:
            out = empty_array(shape, dtype, "F" if fortran else "C")
        elif out.shape != shape or out.dtype != dtype:
            raise ValueError(f"out has {out.shape} {out.dtype}, the result {shape} {dtype}")
        view = memoryview(out.reshape(-1, order="A") if out.size else out).cast("B")
        if total - off != view.nbytes:
            raise errors.TesselError("the .npy's length does not match its header",
                                     code="io_error")
        have = min(len(first), total) - off
        view[:have] = first[off:off + have]
        rest = total - (off + have)
        if rest <= 0:
            return out
        bounds = [(off + have + a, off + have + b) for a, b in (
            self._part_bounds(rest) if total >= self.parallel_min else [(0, rest)])]

        def fetch(b):
            lo, hi = b
            r = self._get_range(path, lo, hi)
            try:
                if r.status != 206:
                    raise errors.TesselError(f"a range of {path} came back {r.status}",
                                             code="io_error")
                part = view[lo - off:hi - off]
                got = 0
                while got < part.nbytes:
                    k = r.readinto(part[got:])
                    if not k:
                        raise errors.Unavailable(
                            f"the range ended after {got} of {part.nbytes} bytes",
                            code="io_error")
                    got += k
            except BaseException:
                self.close()
                raise

        if len(bounds) == 1:
            fetch(bounds[0])
        else:
            for f in [self._workers().submit(fetch, b) for b in bounds]:
                f.result()
        return out
