"""Fixtures for the client's tests: a real tesseld on a free port.

The daemon's path comes from $TESSEL_BIN or the build trees (build-dev,
build-test, build); CTest passes it (tests/tests.cmake). Each daemon gets a
temporary --data-dir and, for the same-host tests, a temporary --local-dir;
both are removed at the end. The package is imported from this checkout.
TLS_DIR holds the test-only certificate tesseld serves with --tls-cert
(tests/integration/tls, shared with test_tls.c): the https:// tests run
against the daemon's own TLS, no proxy.
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
TLS_DIR = os.path.join(ROOT, "tests", "integration", "tls")
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
            m = re.search(r"listening on (https?)://[^:]+:(\d+)", line)
            if m:
                host = "localhost" if m.group(1) == "https" else "127.0.0.1"  # the cert's name
                self.url = f"{m.group(1)}://{host}:{m.group(2)}"
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
