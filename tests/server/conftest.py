"""Fixtures of the kvserve end-to-end tests: start `kvserve serve` on a free loopback port.

The binary comes from $KVSERVE_BIN (CTest sets it); the model is the default one
(scripts/fetch-model). Every server binds 127.0.0.1 with --port 0 and reports its port on stderr.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import requests

# tests/support/prerequisites.py: skip locally, fail under CI=true (for every suite that loads
# this conftest: tests/server and tests/security).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from prerequisites import require, running_in_ci  # noqa: E402,F401

API_KEY = "test-key"
MODEL_NAME = "smol"


def kvserve_bin():
    path = os.environ.get("KVSERVE_BIN")
    if not path:
        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(here, "..", "..", "build", "bin", "kvserve")
    return os.path.abspath(path)


def default_model():
    d = os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models"))
    return os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")


def stop_process(proc):
    """SIGTERM, then SIGKILL if it has not exited within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_until_listening(proc, log, pattern, timeout=60):
    """Reads a starting server's stderr lines into `log` until one matches `pattern` (the match),
    the stream ends or `timeout` seconds pass (None)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            return None
        log.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    return None


class Server:
    def __init__(self, *args, api_key=True, admin=False):
        """admin: the test key is an admin key (sees every tenant and the block hashes in
        /v1/kv), given through an --api-keys file; otherwise a bare --api-key."""
        threads = [] if "-t" in args else ["-t", "2"]
        keys = ["--api-key", API_KEY] if api_key else []
        self.keys_dir = None
        if api_key and admin:
            self.keys_dir = tempfile.mkdtemp(prefix="kvs-keys-")
            path = os.path.join(self.keys_dir, "keys")
            with open(path, "w") as f:
                f.write("tests %s admin\n" % API_KEY)
            keys = ["--api-keys", path]
        cmd = [kvserve_bin(), "serve", "--host", "127.0.0.1", "--port", "0", *threads,
               "--served-model-name", MODEL_NAME, *keys, *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.log = []
        m = read_until_listening(self.proc, self.log, r"listening on http://127\.0\.0\.1:(\d+)")
        self.port = int(m.group(1)) if m else None
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("kvserve serve did not start:\n" + "".join(self.log))
        # Keep draining stderr (preemption logs) so the pipe never fills.
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def headers(self):
        return {"Authorization": f"Bearer {API_KEY}"}

    def get(self, path, headers=None, **kw):
        h = self.headers() if headers is None else headers
        return requests.get(self.url + path, headers=h, timeout=30, **kw)

    def post(self, path, body=None, data=None, headers=None, **kw):
        h = self.headers()
        if headers is not None:
            h = headers
        if data is not None:
            return requests.post(self.url + path, data=data, headers=h, timeout=60, **kw)
        return requests.post(self.url + path, json=body, headers=h, timeout=60, **kw)

    def client(self):
        import openai
        return openai.OpenAI(base_url=self.url + "/v1", api_key=API_KEY, max_retries=0,
                             timeout=120)

    def kv_summary(self):
        return self.get("/v1/kv").json()["summary"]

    def wait_idle(self, timeout=20):
        """Waits until no block is in use; returns the /v1/kv summary."""
        deadline = time.time() + timeout
        s = self.kv_summary()
        while s["in_use"] != 0 and time.time() < deadline:
            time.sleep(0.1)
            s = self.kv_summary()
        return s

    def stop(self):
        stop_process(self.proc)
        if self.keys_dir:
            shutil.rmtree(self.keys_dir, ignore_errors=True)


def wait_until(predicate, timeout=30, what="the condition", interval=0.05):
    """Polls predicate() until it is true (returns its value) or fails the test after `timeout`
    seconds: the tests wait on a condition (a metric, a log line, a count), never a fixed sleep."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def require_binary():
    """The built kvserve: a skip without it, a failure under CI."""
    require(os.path.exists(kvserve_bin()), f"kvserve binary not found at {kvserve_bin()}")


def require_model():
    """The built kvserve and the default model: a skip without them, a failure under CI."""
    require_binary()
    require(os.path.exists(default_model()),
            f"default model not found at {default_model()} (run scripts/fetch-model)")


@pytest.fixture(scope="session")
def server():
    """The main server: ample KV pool, prefix caching on, small body limit."""
    require_model()
    s = Server("--kv-cache-memory", "256MiB", "--max-model-len", "1024", "--max-body", "64KiB")
    yield s
    s.stop()


@pytest.fixture
def start_server():
    """Starts extra servers with their own flags; stops them at the end of the test."""
    require_model()
    started = []

    def start(*args, **kwargs):
        s = Server(*args, **kwargs)
        started.append(s)
        return s

    def stop_all():
        for s in started:
            s.stop()

    start.stop_all = stop_all  # for fixtures whose teardown must follow the servers' exit
    yield start
    for s in started:
        s.stop()
