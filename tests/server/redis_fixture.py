"""A real redis-server (Debian's, installed by scripts/install-deps) on a free loopback port, with
its files in a temporary directory; it can be stopped and started again on the same port. It
comes with the server secret file its replicas share (secret_file)."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvs-redis-")
        self.port = free_port()
        # The secret the replicas of this Redis share (--kv-tier-secret-file): replicas with
        # different secrets never use each other's values.
        self.secret_file = os.path.join(self.dir, "tier.secret")
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(32).hex().encode())
        os.close(fd)
        self.proc = None
        self.start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--maxmemory", "512mb",
             "--maxmemory-policy", "allkeys-lru", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.cli("PING").strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def cli(self, *args):
        r = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                           text=True, timeout=10)
        return r.stdout

    def keys(self):
        return [k for k in self.cli("--scan", "--pattern", "kvs:*").split() if k]

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis_server():
    # tests/support/prerequisites.py (on sys.path through conftest.py): fails under CI=true.
    from prerequisites import require
    require(shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None,
            "redis-server not installed (scripts/install-deps installs it)")
    r = RedisServer()
    yield r
    r.close()
