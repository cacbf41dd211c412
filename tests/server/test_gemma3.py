"""`kvserve serve -m gemma3-270m` with the official openai client: completions (streamed and not),
a prefix hit on the second identical long prompt, and a clear 400 on the chat route because this
base model's GGUF has no chat template. Skipped until `scripts/fetch-model gemma3-270m` has run
(a failure under CI=true)."""
import os

import openai
import pytest

from conftest import Server, require, require_binary

MODEL = os.path.join(os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models")),
                     "gemma-3-270m-q4_k_m.gguf")
DATA = os.path.join(os.path.dirname(__file__), "..", "data", "kjv_genesis_exodus.txt")



@pytest.fixture(scope="module")
def gemma():
    # A skip without the model, a failure under CI=true (tests/support/prerequisites.py).
    require_binary()
    require(os.path.exists(MODEL), "gemma3-270m not fetched (scripts/fetch-model gemma3-270m)")
    s = Server("-m", "gemma3-270m", "--kv-cache-memory", "128MiB")
    yield s
    s.stop()


def test_completion_matches_transformers_greedy(gemma):
    c = gemma.client()
    r = c.completions.create(model="smol", prompt="The capital of France is", max_tokens=6, temperature=0)
    # transformers' greedy continuation (tests/data/gemma3_golden.json): " the capital of the country".
    assert r.choices[0].text.startswith(" the capital"), r.choices[0].text
    assert r.usage.prompt_tokens == 6  # <bos> + 5 pieces, as transformers tokenizes it
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model="smol", prompt="The capital of France is", max_tokens=6, temperature=0, stream=True))
    assert streamed == r.choices[0].text


def test_long_prompt_prefix_hit_past_the_window(gemma):
    c = gemma.client()
    text = open(DATA, encoding="utf-8").read()[:5000]  # ~1,200 tokens: more than the 512 window
    first = c.completions.create(model="smol", prompt=text, max_tokens=8, temperature=0)
    second = c.completions.create(model="smol", prompt=text, max_tokens=8, temperature=0)
    assert first.usage.prompt_tokens > 1000
    cached = second.usage.prompt_tokens_details.cached_tokens
    # Every whole block but the one holding the last prompt token comes from the cache, the
    # sliding layers' window included.
    assert cached == (first.usage.prompt_tokens - 1) // 16 * 16
    assert second.choices[0].text == first.choices[0].text


def test_chat_route_says_there_is_no_template(gemma):
    c = gemma.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert "no chat template" in str(e.value)
