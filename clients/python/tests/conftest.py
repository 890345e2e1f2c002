"""Fixtures for the client's tests: a real tesseld on a free port.

The daemon's path comes from $TESSEL_BIN or the build trees (build-dev,
build-test, build); CTest passes it (tests/tests.cmake). Each daemon gets a
temporary --data-dir and, for the same-host tests, a temporary --local-dir;
both are removed at the end. The package is imported from this checkout.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(PKG))
sys.path.insert(0, PKG)


def _binary():
    b = os.environ.get("TESSEL_BIN")
    if b:
        return b
    for d in ("build-dev", "build-test", "build"):
        p = os.path.join(ROOT, d, "tesseld")
        if os.access(p, os.X_OK):
            return p
    pytest.skip("no tesseld: set TESSEL_BIN or build it")


class Daemon:
    def __init__(self, extra=(), env=None):
        self.dir = tempfile.mkdtemp(prefix="tessel-py-")
        self.local = os.path.join(self.dir, "local")
        os.mkdir(self.local)
        self.log = open(os.path.join(self.dir, "daemon.log"), "wb")
        self.proc = subprocess.Popen(
            [_binary(), "--port", "0", "--data-dir", os.path.join(self.dir, "data"),
             "--threads", "2", "--access-log", "0", "--local-dir", self.local] + list(extra),
            stdout=subprocess.PIPE, stderr=self.log,
            env=None if env is None else dict(os.environ, **env))
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stdout.readline().decode(errors="replace")
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.url = f"http://127.0.0.1:{m.group(1)}"
                return
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError("tesseld did not start; see " + self.dir)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture(scope="session")
def client(daemon):
    import tessel
    c = tessel.Client(daemon.url, same_host=False)
    yield c
    c.close()


@pytest.fixture
def other_dir():
    d = tempfile.mkdtemp(prefix="tessel-py-other-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


class TLSProxy:
    """A local HTTPS endpoint for the client's https:// tests (the daemon
    has no TLS yet): a self-signed certificate for localhost / 127.0.0.1
    made with `openssl req`, and a thread per connection that unwraps TLS
    and forwards the bytes both ways to the daemon's plain port (one select
    loop, so each SSL object is used by one thread)."""

    def __init__(self, target_port):
        import socket
        import ssl
        import threading
        self.dir = tempfile.mkdtemp(prefix="tessel-py-tls-")
        self.cert = os.path.join(self.dir, "cert.pem")
        key = os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out",
                        self.cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
                        "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, capture_output=True)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(self.cert, key)
        self.target = target_port
        self.ls = socket.create_server(("127.0.0.1", 0))
        self.port = self.ls.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while True:
            try:
                conn, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        import select
        import socket
        import ssl
        try:
            tls = self.ctx.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            conn.close()
            return
        up = socket.create_connection(("127.0.0.1", self.target))
        try:
            while True:
                r = [tls] if tls.pending() else select.select([tls, up], [], [], 60)[0]
                if not r:
                    return
                for s, d in ((tls, up), (up, tls)):
                    if s in r:
                        data = s.recv(1 << 18)
                        if not data:
                            return
                        d.sendall(data)
        except (ssl.SSLError, OSError):
            return
        finally:
            tls.close()
            up.close()

    def stop(self):
        self.ls.close()
        shutil.rmtree(self.dir, ignore_errors=True)
