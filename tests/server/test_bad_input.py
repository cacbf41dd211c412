"""Raw HTTP: every bad input gets an OpenAI-style error with the right status; overload is 429
with Retry-After; a client that disconnects mid-stream frees its blocks."""
import json
import socket
import time

from conftest import API_KEY, MODEL_NAME


def error_of(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "type" in body["error"]
    return body["error"]


def test_malformed_json(server):
    error_of(server.post("/v1/completions", data=b'{"prompt": "x",'), 400)
    error_of(server.post("/v1/chat/completions", data=b"[1, 2"), 400)
    error_of(server.post("/v1/completions", body=[1, 2, 3]), 400)


def test_unknown_model(server):
    e = error_of(server.post("/v1/completions", {"model": "gpt-9", "prompt": "x"}), 404)
    assert e["code"] == "model_not_found"


def test_wrong_or_missing_api_key(server):
    body = {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1}
    error_of(server.post("/v1/completions", body, headers={"Authorization": "Bearer nope"}), 401)
    error_of(server.post("/v1/completions", body, headers={}), 401)
    error_of(server.get("/v1/models", headers={"Authorization": "Bearer " + API_KEY + "x"}), 401)


def test_prompt_longer_than_max_model_len(server):
    e = error_of(server.post("/v1/completions", {"prompt": list(range(100, 1200)),
                                                 "max_tokens": 1}), 400)
    assert e["code"] == "context_length_exceeded"


def test_max_tokens_beyond_what_fits(server):
    error_of(server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 5000}), 400)
    error_of(server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 0}), 400)
    error_of(server.post("/v1/completions", {"prompt": "Hello", "max_tokens": "ten"}), 400)


def test_invalid_sampling_values(server):
    for extra in ({"temperature": -1}, {"temperature": 3}, {"top_p": 0}, {"top_p": 1.5},
                  {"top_k": -5}, {"n": 0}, {"n": 1000}, {"seed": "x"}, {"stop": 5},
                  {"stop": [""]}, {"stop": "x" * 300}, {"stream": "yes"}, {"priority": 1.5},
                  {"cache_salt": 3}, {"cache_salt": "s" * 300}):
        error_of(server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2, **extra}),
                 400)
    error_of(server.post("/v1/chat/completions", {"messages": []}), 400)
    error_of(server.post("/v1/chat/completions", {"messages": [{"content": "x"}]}), 400)
    error_of(server.post("/v1/completions", {"max_tokens": 2}), 400)
    error_of(server.post("/v1/completions", {"prompt": [10, -1]}), 400)


def test_oversized_body(server):
    r = server.post("/v1/completions", data=json.dumps({"prompt": "x" * 200_000}).encode())
    error_of(r, 413)


def test_unknown_route(server):
    error_of(server.get("/v1/nothing"), 404)


def test_server_survives_bad_input(server):
    r = server.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    assert r.status_code == 200


def open_stream(server, max_tokens=400):
    """A raw streaming request on a socket we can drop mid-stream."""
    body = json.dumps({"model": MODEL_NAME, "prompt": "Write a very long story.",
                       "max_tokens": max_tokens, "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Authorization: Bearer " + API_KEY.encode() + b"\r\n"
              b"Content-Type: application/json\r\nContent-Length: " +
              str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def read_some(sock, need=3):
    data = b""
    while data.count(b"data: ") < need:
        chunk = sock.recv(65536)
        assert chunk, "stream ended early"
        data += chunk
    return data


def test_disconnect_mid_stream_frees_blocks(server):
    server.wait_idle()
    sock = open_stream(server)
    first = read_some(sock)
    assert b"200 OK" in first
    busy = server.kv_summary()
    assert busy["in_use"] > 0
    sock.close()
    idle = server.wait_idle()
    assert idle["in_use"] == 0
    metrics = server.get("/metrics").text
    assert 'kvserve_kv_blocks{state="in_use"} 0' in metrics
    assert 'kvserve_request_finished_total{finish_reason="abort"}' in metrics


def test_full_queue_is_429_with_retry_after(start_server):
    s = start_server("--kv-cache-memory", "64MiB", "--max-model-len", "1024",
                     "--max-num-seqs", "1", "--max-queued-requests", "1")
    # Long streams (1,000 tokens) so that the first is still running while we look for the
    # second in the queue, even on a fast, idle machine. The second is sent only once the first
    # streams: sent together, either could be admitted first (the server's HTTP threads race).
    socks = [open_stream(s, max_tokens=1000)]
    read_some(socks[0], 2)  # the first is running
    socks.append(open_stream(s, max_tokens=1000))  # ...so the second waits in the queue
    deadline = time.time() + 20
    while "kvserve_num_requests_waiting 1" not in s.get("/metrics").text:
        assert time.time() < deadline, "the second request never reached the queue"
        time.sleep(0.05)
    r = s.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
    err = error_of(r, 429)
    assert err["code"] == "rate_limit_exceeded"
    assert r.headers.get("Retry-After") == "1"
    for sock in socks:
        sock.close()
    assert s.wait_idle()["in_use"] == 0
    # Capacity comes back once the streams are gone.
    deadline = time.time() + 10
    while True:
        r = s.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
        if r.status_code == 200 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert r.status_code == 200


def test_refuses_to_start_when_one_request_cannot_fit():
    from conftest import kvserve_bin, require_model
    import subprocess
    require_model()
    r = subprocess.run([kvserve_bin(), "serve", "--port", "0", "--kv-cache-memory", "4MiB",
                        "--max-model-len", "1024"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "maximum concurrency at --max-model-len 1024" in r.stderr
    assert "raise --kv-cache-memory by" in r.stderr
    assert "lower --max-model-len to" in r.stderr


def test_priority_lower_number_is_served_first(start_server):
    import threading
    s = start_server("--kv-cache-memory", "64MiB", "--max-model-len", "1024",
                     "--max-num-seqs", "1")
    blocker = open_stream(s, max_tokens=300)
    read_some(blocker, 2)  # running; the next two wait
    done = []

    def send(name, priority):
        r = s.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2,
                                       "priority": priority})
        assert r.status_code == 200
        done.append(name)

    low = threading.Thread(target=send, args=("low", 10))
    low.start()
    deadline = time.time() + 20
    while "kvserve_num_requests_waiting 1" not in s.get("/metrics").text:
        assert time.time() < deadline
        time.sleep(0.02)
    high = threading.Thread(target=send, args=("high", -5))  # arrives later, more important
    high.start()
    while "kvserve_num_requests_waiting 2" not in s.get("/metrics").text:
        assert time.time() < deadline
        time.sleep(0.02)
    blocker.close()  # frees the only slot
    low.join(60)
    high.join(60)
    assert done == ["high", "low"]


def test_invalid_utf8_body_is_a_400(server):
    error_of(server.post("/v1/completions", data=b'{"prompt": "\xff\xfe", "max_tokens": 2}'), 400)
    error_of(server.post("/v1/completions", data=b'\xff{'), 400)
