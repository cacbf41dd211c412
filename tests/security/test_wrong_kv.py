"""Finding 1 of the trust issue: a host tier smaller than the working set must never serve one
prompt's KV for another. A, then B (fills the pool and pushes A's blocks through a 4 MiB host
tier), then A again: the second A must match the first, and a server without tiers."""
import random


def prompts():
    rng = random.Random(7)
    a = [rng.randrange(200, 40000) for _ in range(152)]
    b = [rng.randrange(200, 40000) for _ in range(500)]
    return a, b


def answers(server, sequence):
    out = []
    for p in sequence:
        r = server.post("/v1/completions", {"prompt": p, "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, r.text
        j = r.json()
        out.append((j["choices"][0]["text"], j["usage"]["prompt_tokens_details"]["cached_tokens"]))
    return out


def test_small_host_tier_serves_the_right_kv(start_server):
    a, b = prompts()
    small = start_server("--kv-cache-memory", "11796480", "--max-model-len", "512",
                         "--kv-offload-memory", "4MiB")
    got = answers(small, [a, b, a, a])
    plain = start_server("--kv-cache-memory", "11796480", "--max-model-len", "512",
                         "--no-enable-prefix-caching")
    expect = answers(plain, [a])[0][0]
    assert got[0][0] == expect
    # The repeats of A are served from the tiers (whole blocks cached) and say the same thing.
    assert got[2][1] > 0 and got[3][1] > 0
    assert got[2][0] == expect and got[3][0] == expect
    assert small.get("/debug/integrity").json()["ok"] is True
