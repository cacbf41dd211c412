"""Load: preemption under a tight KV budget keeps outputs (both modes), /metrics parses and
matches the activity, 64 concurrent streaming clients complete and leave no block in use."""
from concurrent.futures import ThreadPoolExecutor

from prometheus_client.parser import text_string_to_metric_families

from conftest import MODEL_NAME

PROMPTS = [f"Story {i}: once upon a time, in a village number {i} by the sea, there lived a"
           for i in range(32)]


def run_greedy(server, prompts, max_tokens=16):
    client = server.client()

    def one(p):
        r = client.completions.create(model=MODEL_NAME, prompt=p, max_tokens=max_tokens,
                                      temperature=0, extra_body={"ignore_eos": True})
        return r.choices[0].text

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, prompts))


def samples(server):
    """{(name, frozenset(labels)): value} of the current /metrics."""
    out = {}
    for fam in text_string_to_metric_families(server.get("/metrics").text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(m, name, **labels):
    return m.get((name, frozenset(labels.items())), 0.0)


def test_preemption_keeps_outputs_in_both_modes(server, start_server):
    expect = run_greedy(server, PROMPTS)
    # 12 blocks of 16 tokens: about three of the ~45-token sequences fit at once.
    tight = ["--kv-cache-memory", str(12 * 16 * 23040), "--max-model-len", "128"]
    for mode in ("recompute", "swap"):
        s = start_server(*tight, "--preemption-mode", mode, "--swap-space", "64MiB")
        assert run_greedy(s, PROMPTS) == expect, mode
        m = samples(s)
        assert value(m, "kvserve_preemptions_total", mode=mode) > 0, mode
        assert s.wait_idle()["in_use"] == 0
        assert any(f"mode={mode}" in line for line in s.log), "preemptions are logged"


def test_metrics_parse_and_match_activity(server):
    before = samples(server)
    client = server.client()
    usages = []
    for i in range(3):
        r = client.completions.create(model=MODEL_NAME, prompt=f"Metric check {i}: the sky is",
                                      max_tokens=5, temperature=0,
                                      extra_body={"ignore_eos": True, "cache_salt": "metrics"})
        usages.append(r.usage)
    after = samples(server)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("kvserve_prompt_tokens_total") == sum(u.prompt_tokens for u in usages)
    assert delta("kvserve_generation_tokens_total") == sum(u.completion_tokens for u in usages)
    assert delta("kvserve_route_prefix_cache_queries_tokens_total",
                 route="/v1/completions") == sum(u.prompt_tokens for u in usages)
    assert delta("kvserve_e2e_request_latency_seconds_count") == 3
    ttft = sum(delta("kvserve_time_to_first_token_seconds_count", prompt_tokens=b)
               for b in ("1-127", "128-511", "512-2047", "2048+"))
    assert ttft == 3
    assert delta("kvserve_inter_token_latency_seconds_count") == 3 * 4
    assert delta("kvserve_request_max_model_len_fraction_count") == 3
    assert delta("kvserve_http_requests_total", route="/v1/completions", status="200") == 3
    assert delta("kvserve_prefix_cache_queries_tokens_total") >= sum(u.prompt_tokens
                                                                     for u in usages)
    # The tenant label is a short hash, never the salt itself.
    tenant_labels = {dict(k[1]).get("tenant") for k in after
                     if k[0] == "kvserve_tenant_prefix_cache_queries_tokens_total"}
    assert tenant_labels and "metrics" not in tenant_labels
    total = value(after, "kvserve_kv_blocks_capacity")
    states = sum(value(after, "kvserve_kv_blocks", state=s)
                 for s in ("free", "cached_free", "in_use"))
    assert total > 0 and states == total
    assert 0 <= value(after, "kvserve_kv_cache_usage_ratio") <= 1
    assert 0 <= value(after, "kvserve_kv_fragmentation_ratio") <= 1
    # SmolLM2's weights, packed at load into exactly their file bytes.
    file_bytes = value(after, "kvserve_model_weight_bytes", form="file")
    assert file_bytes > 90_000_000
    assert value(after, "kvserve_model_weight_bytes", form="resident") == file_bytes
    assert 0 <= value(after, "kvserve_model_weight_pack_seconds") < 30


def test_64_concurrent_streaming_clients(server):
    client = server.client()

    def one(i):
        stream = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": f"Say a word about {i}."}],
            max_tokens=8, temperature=0.7, seed=i, stream=True,
            stream_options={"include_usage": True})
        text, usage = "", None
        for ch in stream:
            if ch.usage is not None:
                usage = ch.usage
            for c in ch.choices:
                text += c.delta.content or ""
        return usage

    with ThreadPoolExecutor(64) as pool:
        usages = list(pool.map(one, range(64)))
    assert all(u is not None and u.completion_tokens > 0 for u in usages)
    kv = server.wait_idle()
    assert kv["in_use"] == 0
    blocks = server.get("/v1/kv").json()["blocks"]
    assert all(b["state"] in ("free", "cached_free") for b in blocks)
