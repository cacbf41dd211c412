"""`kvserve serve --config FILE`: a server started from a YAML file listens on the file's host and
port with its model name, API keys (a list) and limits; flags on the command line win over the
file. (Bad files and the other subcommands: tests/cli/test_cli.py ConfigFile.)"""
import os
import socket
import subprocess
import tempfile

import pytest
import requests

from conftest import default_model, kvserve_bin, read_until_listening, require_model, stop_process


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ConfigServer:
    """`kvserve serve --config PATH ARGS...`; waits for its "listening on" line."""

    def __init__(self, path, *args):
        self.proc = subprocess.Popen([kvserve_bin(), "serve", "--config", path, *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        m = read_until_listening(self.proc, self.log,
                                 r"model '([^']*)', listening on http://([\d.]+):(\d+)")
        self.listening = (m.group(1), m.group(2), int(m.group(3))) if m else None
        if self.listening is None:
            self.stop()
            raise AssertionError("kvserve serve --config did not start:\n" + "".join(self.log))
        self.url = f"http://{self.listening[1]}:{self.listening[2]}"

    def get(self, path, key=None):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return requests.get(self.url + path, headers=headers, timeout=30)

    def stop(self):
        stop_process(self.proc)
        self.proc.stderr.close()


@pytest.fixture
def config_file():
    require_model()
    with tempfile.TemporaryDirectory(prefix="kvs-config-") as d:
        port = free_port()
        path = os.path.join(d, "serve.yaml")
        with open(path, "w") as f:
            f.write(f"""# A production-like serve, as docs/serving.md shows it.
model: {default_model()}
host: 127.0.0.1
port: {port}
served_model_name: cfg-smol
api-key:
  - key-one
  - key-two
max-model-len: 512
kv-cache-memory: 64MiB
enable-prefix-caching: false
threads: 2
""")
        yield path, port


def test_serve_listens_where_the_file_says(config_file):
    path, port = config_file
    s = ConfigServer(path)
    try:
        assert s.listening == ("cfg-smol", "127.0.0.1", port)
        assert any("max model len        512 tokens" in line for line in s.log), s.log
        for key in ("key-one", "key-two"):
            r = s.get("/v1/models", key)
            assert r.status_code == 200, r.text
            assert [m["id"] for m in r.json()["data"]] == ["cfg-smol"]
        assert s.get("/v1/models").status_code == 401
        r = requests.post(s.url + "/v1/completions", timeout=60,
                          headers={"Authorization": "Bearer key-two"},
                          json={"model": "cfg-smol", "prompt": "Hello", "max_tokens": 1})
        assert r.status_code == 200, r.text
    finally:
        s.stop()


def test_command_line_flags_win_over_the_file(config_file):
    path, port = config_file
    other = free_port()
    s = ConfigServer(path, "--port", str(other), "--served-model-name", "cli-smol",
                     "--api-key", "key-cli")
    try:
        assert s.listening == ("cli-smol", "127.0.0.1", other)
        assert s.get("/v1/models", "key-cli").json()["data"][0]["id"] == "cli-smol"
        assert s.get("/v1/models", "key-one").status_code == 401
    finally:
        s.stop()
