"""Graceful shutdown of `kvserve serve`: on SIGTERM new requests get 503 with Retry-After and
/health says "draining", streams in flight run to their end, then the process exits 0; past
--shutdown-timeout the rest is stopped and it still exits 0."""
import json
import signal
import threading
import time

import requests

from conftest import MODEL_NAME, wait_until


def open_stream(s, max_tokens):
    """A streaming request in a thread; returns (thread, result dict)."""
    out = {"chunks": 0, "done": False, "error": None}

    def run():
        try:
            with requests.post(s.url + "/v1/completions", headers=s.headers(), stream=True,
                               timeout=120,
                               json={"model": MODEL_NAME, "prompt": "Count slowly:",
                                     "max_tokens": max_tokens, "stream": True,
                                     "ignore_eos": True}) as r:
                for line in r.iter_lines():
                    if line.startswith(b"data: [DONE]"):
                        out["done"] = True
                    elif line.startswith(b"data: "):
                        j = json.loads(line[6:])
                        if j.get("choices"):
                            out["chunks"] += 1
        except Exception as e:  # the connection cut by a stop past the timeout
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_sigterm_drains_streams_in_flight_then_exits_0(start_server):
    s = start_server("--kv-cache-memory", "64MiB", "--max-model-len", "512",
                     "--shutdown-timeout", "60")
    t, out = open_stream(s, 120)
    wait_until(lambda: out["chunks"] >= 3, what="the stream's first tokens")
    s.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: any("draining" in l for l in s.log), what="the draining line")
    r = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 503 and r.headers.get("Retry-After"), (r.status_code, r.text)
    assert "shutting down" in r.json()["error"]["message"]
    h = requests.get(s.url + "/health", timeout=10)
    assert h.status_code == 503 and h.json()["status"] == "draining"
    t.join(120)
    assert out["done"] and out["chunks"] == 120, out
    assert s.proc.wait(60) == 0
    # The refused request has its access line too.
    assert any("status=503" in l and "shutting_down" in l for l in s.log)


def test_past_the_shutdown_timeout_the_rest_is_stopped_and_it_exits_0(start_server):
    # A stream far longer than the timeout: 4,000 tokens take several seconds at any decode rate
    # this model reaches on a CPU (450 tokens, as before, could end within the 1 s).
    s = start_server("--kv-cache-memory", "256MiB", "--max-model-len", "4096",
                     "--shutdown-timeout", "1")
    t, out = open_stream(s, 4000)
    wait_until(lambda: out["chunks"] >= 3, what="the stream's first tokens")
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(60) == 0
    assert time.time() - t0 < 30
    t.join(30)
    assert not out["done"] and out["chunks"] < 4000, out
    assert any("--shutdown-timeout reached" in l for l in s.log)
