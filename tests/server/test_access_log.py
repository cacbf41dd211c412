"""The access log of `kvserve serve`: one line per request on the generation routes (success,
refusal, a client that goes away), in text and JSON, with the tenant's label and token counts,
and never the prompt's text."""
import json
import socket
import threading

import pytest

from conftest import MODEL_NAME, Server, require_model, wait_until

SECRET = "zebra-quartz-umbrella-4417 is the launch code"


def access_lines(server):
    out = []
    for line in server.log:
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            if j.get("event") == "request":
                out.append(j)
    return out


@pytest.fixture(scope="module")
def json_server():
    require_model()
    s = Server("--kv-cache-memory", "64MiB", "--max-model-len", "512", "--log-format", "json")
    yield s
    s.stop()


def test_each_request_gets_one_json_line_without_its_prompt(json_server):
    s = json_server
    before = len(access_lines(s))
    r = s.client().completions.create(model=MODEL_NAME, prompt=SECRET, max_tokens=3,
                                      temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3
    wait_until(lambda: len(access_lines(s)) > before, what="the access line")
    line = access_lines(s)[-1]
    assert line["route"] == "/v1/completions" and line["status"] == 200
    assert line["request_id"] == r.id and line["outcome"] == "ok"
    assert line["prompt_tokens"] == r.usage.prompt_tokens and line["output_tokens"] == 3
    # A bare --api-key's tenant is named by a keyed hash of the key, never the key itself.
    assert line["tenant"].startswith("key:") and "test-key" not in line["tenant"]
    assert 0 <= line["ttft_s"] <= line["total_s"]
    # Refusals are logged too: a wrong key (401) and a bad field (400).
    assert s.post("/v1/completions", {"prompt": SECRET},
                  headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert s.post("/v1/completions", {"prompt": SECRET, "max_tokens": -1}).status_code == 400
    wait_until(lambda: len(access_lines(s)) >= before + 3, what="the refusals' lines")
    statuses = [l["status"] for l in access_lines(s)[before:]]
    assert 401 in statuses and 400 in statuses
    text = "".join(s.log)
    assert "zebra" not in text and "test-key" not in text


def test_a_stream_whose_client_leaves_is_logged_as_client_gone(json_server):
    s = json_server
    before = len(access_lines(s))
    body = json.dumps({"model": MODEL_NAME, "prompt": "Count to a thousand:", "max_tokens": 400,
                       "stream": True, "ignore_eos": True})
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key\r\n"
                  "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body)).encode())
    assert b"data:" in sock.recv(4096) or b"data:" in sock.recv(4096)
    sock.close()
    wait_until(lambda: any(l["outcome"] == "client_gone" for l in access_lines(s)[before:]),
               what="a client_gone line")


def test_text_format_and_level_warning(start_server):
    s = start_server("--kv-cache-memory", "64MiB", "--max-model-len", "512")
    s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1})
    wait_until(lambda: any("kvserve access: id=cmpl-" in l for l in s.log), what="a text line")
    quiet = start_server("--kv-cache-memory", "64MiB", "--max-model-len", "512",
                         "--log-level", "warning")
    quiet.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1, "frobnicate": 1})
    wait_until(lambda: any("request field 'frobnicate'" in l for l in quiet.log),
               what="the warning")
    assert not any("kvserve access:" in l for l in quiet.log)


def test_preemption_lines_follow_the_log_format(start_server):
    # 11 blocks of 16 tokens; six 100-token requests cannot all hold their KV at once.
    s = start_server("--kv-cache-memory", "4MiB", "--max-model-len", "128", "--log-format",
                     "json")
    client = s.client()
    threads = []
    for i in range(6):
        t = threading.Thread(target=lambda i=i: client.completions.create(
            model=MODEL_NAME, prompt=f"Story {i}: " + "once upon a time " * 8, max_tokens=60,
            temperature=0, extra_body={"ignore_eos": True}), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(120)
    wait_until(lambda: len(access_lines(s)) >= 6, what="six access lines")
    preempted = [l for l in s.log if "preempted request" in l]
    assert preempted, "no preemption happened; the pool is too large for this test"
    for line in preempted:
        j = json.loads(line)
        assert j["level"] == "info" and j["message"].startswith("preempted request"), line
