"""Request fields as vLLM handles them, through the official openai client: presence, frequency
and repetition penalties and min_tokens change what is generated; features kvserve lacks are a
400 naming the field; unknown fields are accepted and logged once."""
import collections

import openai
import pytest

from conftest import MODEL_NAME, wait_until

# Greedy SmolLM2 answers this with "Monday," twenty times.
STORY = "Monday, Tuesday, Monday, Tuesday, Monday, Tuesday,"


def complete(client, prompt=STORY, max_tokens=40, **extra):
    r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=max_tokens,
                                  temperature=0, extra_body={"ignore_eos": False, **extra})
    return r.choices[0].text, r.usage.completion_tokens, r.choices[0].finish_reason


def most_repeated(text):
    words = [w.strip(".,!?'\"").lower() for w in text.split()]
    words = [w for w in words if w]
    return collections.Counter(words).most_common(1)[0][1] if words else 0


def test_penalties_make_greedy_output_less_repetitive(server):
    client = server.client()
    plain, _, _ = complete(client)
    assert most_repeated(plain) >= 10, plain  # the premise: greedy repeats itself here
    for extra in ({"frequency_penalty": 1.5}, {"presence_penalty": 2.0},
                  {"repetition_penalty": 1.8}):
        text, _, _ = complete(client, **extra)
        assert text != plain, extra
        assert most_repeated(text) < most_repeated(plain), (extra, plain, text)
    # Greedy with penalties is still deterministic.
    assert complete(client, frequency_penalty=1.5) == complete(client, frequency_penalty=1.5)


def test_min_tokens_holds_back_the_end_of_generation(server):
    client = server.client()
    msgs = [{"role": "user", "content": "Reply with one word: yes or no?"}]
    r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=60,
                                       temperature=0)
    short = r.usage.completion_tokens
    assert r.choices[0].finish_reason == "stop" and short < 20, (short, r.choices[0])
    r = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=60,
                                       temperature=0, extra_body={"min_tokens": 20})
    assert r.usage.completion_tokens >= 20, r.usage
    # min_tokens above max_tokens is refused.
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=5,
                                       extra_body={"min_tokens": 6})
    assert "min_tokens" in str(e.value)


@pytest.mark.parametrize("field,kwargs", [
    ("response_format", {"response_format": {"type": "json_object"}}),
    ("tools", {"tools": [{"type": "function",
                          "function": {"name": "f", "parameters": {"type": "object"}}}]}),
    ("prompt_logprobs", {"extra_body": {"prompt_logprobs": 2}}),
    ("logit_bias", {"logit_bias": {"42": 5}}),
])
def test_unsupported_features_are_a_400_naming_the_field(server, field, kwargs):
    client = server.client()
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, max_tokens=2,
                                       messages=[{"role": "user", "content": "Hi"}], **kwargs)
    assert field in str(e.value) and "not supported" in str(e.value), str(e.value)


def test_out_of_range_penalties_are_a_400(server):
    client = server.client()
    for extra in ({"presence_penalty": 3}, {"frequency_penalty": -2.5},
                  {"repetition_penalty": 0}):
        with pytest.raises(openai.BadRequestError) as e:
            complete(client, max_tokens=2, **extra)
        assert list(extra)[0] in str(e.value)


def test_unknown_fields_are_accepted_and_logged_once(server):
    client = server.client()
    for _ in range(3):
        text, n, _ = complete(client, max_tokens=2, frobnicate_level=7)
        assert n >= 1
    line = "request field 'frobnicate_level' is not known"
    wait_until(lambda: any(line in l for l in server.log), what="the unknown-field log line")
    assert sum(line in l for l in server.log) == 1


def test_stop_strings_wait_for_min_tokens(server):
    client = server.client()
    # Without min_tokens the first " Monday" is a stop: nothing is left.
    text, _, reason = complete(client, max_tokens=20, stop=["Monday"])
    assert reason == "stop" and "Monday" not in text, text
    # With it, stop strings are looked for only from the min_tokens-th token on (as vLLM).
    text, n, reason = complete(client, max_tokens=20, stop=["Monday"], min_tokens=5)
    assert reason == "stop" and n >= 5, (text, n)
    assert text.count("Monday") >= 2 and not text.rstrip().endswith("Monday"), text
