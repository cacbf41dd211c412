"""The official openai client against kvserve serve: completions and chat, streaming and not,
n = 2, stop strings, seeds, usage with cached_tokens, tenant isolation."""
import uuid

from conftest import MODEL_NAME

LONG_SYSTEM = ("You are a careful assistant for a small library. " +
               " ".join(f"Rule {i}: answer briefly and cite rule {i}." for i in range(12)))


def test_models(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]


def test_health(server):
    r = server.get("/health")
    assert r.status_code == 200


def test_completion_non_streaming(server):
    r = server.client().completions.create(model=MODEL_NAME, prompt="The capital of France is",
                                           max_tokens=8, temperature=0)
    assert len(r.choices) == 1
    assert r.choices[0].text
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.prompt_tokens > 0
    assert 0 < r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_non_streaming(server):
    r = server.client().chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8,
        temperature=0)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.usage.completion_tokens <= 8


def test_completion_streaming_matches_non_streaming(server):
    c = server.client()
    full = c.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=12,
                                temperature=0, extra_body={"ignore_eos": True})
    chunks = list(c.completions.create(model=MODEL_NAME, prompt="Once upon a time",
                                       max_tokens=12, temperature=0, stream=True,
                                       extra_body={"ignore_eos": True}))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == full.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_streaming_with_usage(server):
    stream = server.client().chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=10, temperature=0, stream=True, stream_options={"include_usage": True})
    text, usage, reasons = "", None, []
    for ch in stream:
        if ch.usage is not None:
            usage = ch.usage
        for choice in ch.choices:
            text += choice.delta.content or ""
            if choice.finish_reason:
                reasons.append(choice.finish_reason)
    assert text
    assert reasons and reasons[-1] in ("length", "stop")
    assert usage is not None and 0 < usage.completion_tokens <= 10
    assert usage.prompt_tokens > 0


def test_n_2_gives_two_choices(server):
    r = server.client().completions.create(model=MODEL_NAME, prompt="My favourite colour is",
                                           max_tokens=8, temperature=1.0, seed=7, n=2)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.text for c in r.choices)
    # Greedy samples of one prompt are identical.
    g = server.client().completions.create(model=MODEL_NAME, prompt="My favourite colour is",
                                           max_tokens=8, temperature=0, n=2,
                                           extra_body={"ignore_eos": True})
    assert g.choices[0].text == g.choices[1].text
    assert g.usage.completion_tokens == 16


def test_n_2_streaming(server):
    stream = server.client().chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Name a fruit."}], max_tokens=6,
        temperature=0.8, seed=3, n=2, stream=True)
    texts = {0: "", 1: ""}
    for ch in stream:
        for c in ch.choices:
            texts[c.index] += c.delta.content or ""
    assert texts[0] and texts[1]


def test_stop_string_cuts_the_output(server):
    c = server.client()
    prompt = "1, 2, 3, 4, 5,"
    full = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=16, temperature=0,
                                extra_body={"ignore_eos": True}).choices[0].text
    assert len(full) > 4
    stop = full[2:5]
    cut = full[:full.index(stop)]
    r = c.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=16, temperature=0,
                             stop=[stop], extra_body={"ignore_eos": True})
    assert r.choices[0].text == cut
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model=MODEL_NAME, prompt=prompt, max_tokens=16, temperature=0, stop=stop, stream=True,
        extra_body={"ignore_eos": True}) if ch.choices)
    assert streamed == cut


def test_same_seed_same_text(server):
    c = server.client()

    def sample(seed):
        return c.completions.create(model=MODEL_NAME, prompt="Tell me a story about a robot.",
                                    max_tokens=16, temperature=0.9, top_p=0.95, seed=seed,
                                    extra_body={"ignore_eos": True, "top_k": 40}).choices[0].text

    a, b, other = sample(42), sample(42), sample(43)
    assert a == b
    assert a != other


def test_repeated_prefix_reports_cached_tokens(server):
    c = server.client()
    salt = uuid.uuid4().hex
    msgs = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "Hi."}]
    first = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=4,
                                      temperature=0, extra_body={"cache_salt": salt})
    msgs[1]["content"] = "Hello again."
    second = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=4,
                                       temperature=0, extra_body={"cache_salt": salt})
    assert first.usage.prompt_tokens > 100
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens >= 96


def test_tenants_never_share_cached_tokens(server):
    c = server.client()
    a, b = "tenant-a-" + uuid.uuid4().hex, "tenant-b-" + uuid.uuid4().hex
    msgs = [{"role": "system", "content": LONG_SYSTEM + " Isolation."},
            {"role": "user", "content": "Hi."}]

    def cached(salt):
        r = c.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=2,
                                      temperature=0, extra_body={"cache_salt": salt})
        return r.usage.prompt_tokens_details.cached_tokens

    assert cached(a) == 0
    assert cached(b) == 0  # same prompt, other tenant: nothing from a
    assert cached(a) > 0
    assert cached(b) > 0
    kv = server.get("/v1/kv").json()
    tenants = {blk["tenant"] for blk in kv["blocks"] if blk["tenant"]}
    assert not any(a in t or b in t for t in tenants)  # labels are hashes, never the salt
