"""Soak: randomized concurrent load against a tiny KV pool in both preemption modes, with
identical and overlapping prompts, n > 1, stop strings, and clients that abort streams or
disconnect from non-streaming requests. Afterwards the server is alive, no response was a 5xx,
every block is free or cached-free, and the cache manager's integrity check passes.

Bounded to about two minutes (KVSERVE_SOAK_SECONDS per mode, default 50). The numbers it
prints are the ones docs/serving.md reports."""
import json
import os
import random
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import requests

from conftest import API_KEY

SECONDS = float(os.environ.get("KVSERVE_SOAK_SECONDS", "50"))
SYSTEM = "You are a careful assistant. Answer briefly and precisely. "
TOPICS = ["the sea", "a mountain", "memory", "a small village", "the moon", "prime numbers"]


def make_body(rng):
    kind = rng.random()
    if kind < 0.3:  # identical prompts
        prompt = SYSTEM + "Tell me about " + rng.choice(TOPICS[:2]) + "."
    elif kind < 0.7:  # overlapping: a shared prefix, then something of its own
        prompt = SYSTEM + "Tell me about " + rng.choice(TOPICS) + f" and the number {rng.randrange(1000)}."
    else:  # unrelated
        prompt = " ".join(rng.choice(TOPICS) for _ in range(rng.randint(3, 12)))
    body = {"prompt": prompt, "max_tokens": rng.randint(1, 40), "ignore_eos": rng.random() < 0.7,
            "temperature": rng.choice([0, 0, 0.8]), "seed": rng.randrange(100)}
    if rng.random() < 0.25:
        body["n"] = rng.randint(2, 3)
    if rng.random() < 0.25:
        body["stop"] = [rng.choice([" the", ".", "\n", "a"])]
    if rng.random() < 0.3:
        body["cache_salt"] = rng.choice(["t1", "t2"])
    return body


def raw(port, body):
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
              API_KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
              str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def one_request(server, rng, statuses):
    body = make_body(rng)
    action = rng.random()
    if action < 0.15:  # streaming client that aborts after a few chunks
        body["stream"] = True
        s = raw(server.port, body)
        try:
            head = s.recv(4096)
            statuses[int(head.split(b" ")[1])] += 1
            time.sleep(rng.random() * 0.3)
        finally:
            s.close()
        statuses["aborted stream"] += 1
        return
    if action < 0.25:  # non-streaming client that disconnects before the answer
        s = raw(server.port, body)
        time.sleep(rng.random() * 0.8)
        s.close()
        statuses["disconnected"] += 1
        return
    if action < 0.5:  # a whole stream
        body["stream"] = True
        r = requests.post(server.url + "/v1/completions", json=body, headers=server.headers(),
                          stream=True, timeout=120)
        statuses[r.status_code] += 1
        if r.status_code == 200:
            events = [l for l in r.iter_lines() if l.startswith(b"data: ")]
            assert events and events[-1] == b"data: [DONE]"
        return
    r = requests.post(server.url + "/v1/completions", json=body, headers=server.headers(),
                      timeout=120)
    statuses[r.status_code] += 1
    if r.status_code == 200:
        assert len(r.json()["choices"]) == body.get("n", 1)


def soak(server, seed):
    statuses = Counter()
    deadline = time.time() + SECONDS
    errors = []

    def worker(i):
        rng = random.Random(seed * 100 + i)
        while time.time() < deadline:
            try:
                one_request(server, rng, statuses)
            except Exception as e:  # noqa: BLE001 - collected and reported below
                errors.append(repr(e))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(worker, range(8)))
    return statuses, errors


def test_soak_both_preemption_modes(start_server):
    report = []
    for seed, mode in enumerate(("recompute", "swap")):
        # 24 blocks of 16 tokens: a few sequences at a time, so preemption is routine.
        s = start_server("--kv-cache-memory", str(24 * 16 * 23040), "--max-model-len", "256",
                         "--preemption-mode", mode, "--swap-space", "4MiB",
                         "--max-queued-requests", "64", "--quiet-preemptions")
        statuses, errors = soak(s, seed)
        assert not errors, errors[:5]
        assert s.proc.poll() is None, "".join(s.log[-20:])
        assert not [k for k in statuses if isinstance(k, int) and k >= 500], statuses
        assert s.get("/health").status_code == 200
        idle = s.wait_idle(timeout=30)
        assert idle["in_use"] == 0, idle
        assert idle["free"] + idle["cached_free"] == 24
        check = s.get("/debug/integrity")
        assert check.status_code == 200 and check.json()["ok"], check.text
        metrics = s.get("/metrics").text
        preempted = [l for l in metrics.splitlines() if l.startswith("kvserve_preemptions_total")]
        total = sum(v for k, v in statuses.items() if isinstance(k, int)) + \
            statuses["disconnected"]
        report.append(f"{mode}: {total} requests in {SECONDS:.0f} s, statuses "
                      f"{dict(statuses)}, {preempted}")
    print("\n".join(report))
