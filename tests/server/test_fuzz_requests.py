"""Randomized bad input: mutated request bodies never crash the server or produce a 5xx.

Besides flat wrong values, the generator builds wrongly typed nested fields: numbers where
strings go, objects where arrays go, arrays of the wrong things inside messages and content
parts, and deep nesting."""
import json
import random

FIELDS = ["model", "prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "seed",
          "stop", "n", "priority", "cache_salt", "stream", "stream_options", "ignore_eos",
          "max_completion_tokens"]
VALUES = [None, True, False, 0, -1, 1, 2, 3.5, -0.5, 1e308, -1e308, 2**63, -2**63, 2**64 - 1,
          2**64 + 7, 9.3e18, 3e-39, "", "x", "smol", "\u00e9\u4e2d", [], [1, 2], ["a"], [None],
          {}, {"include_usage": "yes"}, {"role": "user"}, [{"role": "user", "content": 5}],
          [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], list(range(3))]
SCALARS = [None, True, 0, -1, 2**64 - 1, 1.5, 1e308, "", "user", "text", "<|im_end|>"]


def nested(rng, depth=0):
    """A random JSON value, biased towards containers while shallow."""
    r = rng.random()
    if depth > 4 or r < 0.3:
        return rng.choice(SCALARS)
    if r < 0.65:
        return [nested(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["role", "content", "type", "text", "include_usage", "x"]
    return {rng.choice(keys): nested(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def deep(rng):
    """(opener, closer, depth) of a deeply nested value."""
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return opener, closer, rng.choice([50, 1000, 20000])


def message(rng):
    m = {"role": rng.choice(["user", "system", "assistant", 5, None, ["user"], {"r": 1}, "root"])}
    content = rng.random()
    if content < 0.3:
        m["content"] = nested(rng)
    elif content < 0.6:
        m["content"] = [rng.choice([{"type": nested(rng), "text": nested(rng)},
                                    {"type": "text", "text": nested(rng)},
                                    nested(rng)]) for _ in range(rng.randint(1, 3))]
    else:
        m["content"] = "hello"
    return m


def mutate(rng):
    body = {"prompt": "Hello", "max_tokens": 2}
    if rng.random() < 0.4:
        body = {"messages": [message(rng) for _ in range(rng.randint(1, 3))], "max_tokens": 2}
    for _ in range(rng.randint(1, 4)):
        body[rng.choice(FIELDS)] = rng.choice(VALUES) if rng.random() < 0.6 else nested(rng)
    if "max_tokens" in body and isinstance(body["max_tokens"], int) and body["max_tokens"] > 4:
        body["max_tokens"] = 4  # keep the valid ones short
    if isinstance(body.get("n"), int) and body["n"] > 2:
        body["n"] = 2
    text = json.dumps(body).encode()
    if rng.random() < 0.1:  # a field nested thousands deep
        opener, closer, n = deep(rng)
        field = rng.choice(FIELDS).encode()
        text = b'{"' + field + b'":' + (opener * n).encode() + b"1" + (closer * n).encode() + b"}"
    if rng.random() < 0.3:  # byte-level damage
        b = bytearray(text)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        text = bytes(b)
    return text


def test_mutated_bodies_never_5xx(server):
    rng = random.Random(1234)
    for i in range(500):
        body = mutate(rng)
        route = "/v1/chat/completions" if i % 2 else "/v1/completions"
        r = server.post(route, data=body)
        assert r.status_code < 500, (body[:300], r.status_code, r.text)
        if r.status_code != 200:
            assert "error" in r.json()
    assert server.get("/health").status_code == 200
    assert server.wait_idle()["in_use"] == 0
    assert server.get("/debug/integrity").json()["ok"]
