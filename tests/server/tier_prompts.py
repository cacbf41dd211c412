"""What the KV tier suites send: token-id prompts distinct per index, through a small pool, and a
greedy completion that returns (text, cached_tokens)."""

POOL = ["--kv-cache-memory", "15MiB", "--max-model-len", "512"]  # 42 blocks of 16 tokens


def doc(i, n=300):
    """A prompt of n token ids, distinct per i."""
    return [1000 + (i * 7919 + k * 31) % 40000 for k in range(n)]


def complete(s, prompt, salt=None, max_tokens=8):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    r = s.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["text"], j["usage"]["prompt_tokens_details"]["cached_tokens"]
