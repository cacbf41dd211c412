"""Randomized bad input: mutated request bodies never crash the server or produce a 5xx."""
import json
import random

FIELDS = ["model", "prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "seed",
          "stop", "n", "priority", "cache_salt", "stream", "stream_options", "ignore_eos",
          "max_completion_tokens"]
VALUES = [None, True, False, 0, -1, 1, 2, 3.5, -0.5, 1e308, -1e308, 2**63, -2**63, "", "x",
          "smol", "\u00e9\u4e2d", [], [1, 2], ["a"], [None], {}, {"include_usage": "yes"},
          {"role": "user"}, [{"role": "user", "content": 5}],
          [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], list(range(3))]


def mutate(rng):
    body = {"prompt": "Hello", "max_tokens": 2}
    for _ in range(rng.randint(1, 4)):
        body[rng.choice(FIELDS)] = rng.choice(VALUES)
    if "max_tokens" in body and isinstance(body["max_tokens"], int) and body["max_tokens"] > 4:
        body["max_tokens"] = 4  # keep the valid ones short
    text = json.dumps(body).encode()
    if rng.random() < 0.3:  # byte-level damage
        b = bytearray(text)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        text = bytes(b)
    return text


def test_mutated_bodies_never_5xx(server):
    rng = random.Random(1234)
    for i in range(400):
        body = mutate(rng)
        route = "/v1/chat/completions" if i % 2 else "/v1/completions"
        r = server.post(route, data=body)
        assert r.status_code < 500, (body, r.status_code, r.text)
        if r.status_code != 200:
            assert "error" in r.json()
    assert server.get("/health").status_code == 200
    assert server.wait_idle()["in_use"] == 0
