#!/usr/bin/env python3
"""Golden reference for Gemma 3 270M (Q4_K_M GGUF) from Hugging Face transformers.

transformers loads a GGUF by dequantizing every tensor (gguf-py's numpy dequantizers) into an
ordinary float model (Gemma3ForCausalLM; without the optional `kernels` package, which would keep the
blocks packed and run ggml's own GPU kernels, and which the script asserts is not in use), so this is an
independent float32 reference for the same weights:
its own RMSNorm, RoPE, sliding-window mask, GeGLU and tokenizer (a tokenizers BPE rebuilt from the
GGUF vocabulary). The script first checks and prints the config that transformers built from the
GGUF metadata (and defaults), then writes tests/data/gemma3_golden.json:

  - "prompts": for each prompt, its text and token ids (BOS prepended, as the GGUF's
    tokenizer.ggml.add_bos_token says); at a few positions the top-64 (id, logit) pairs, the max
    logit, logsumexp over the whole vocabulary and the logits at 64 fixed "probe" ids (seeded,
    shared by all prompts); a 32-token greedy continuation (argmax over a full recompute of the
    sequence at every step, no KV cache, not stopping at EOS) with each step's top-1/top-2 margin.
    The "kjv_long" prompt is longer than the 512-token sliding window, so its positions >= 512
    exercise the sliding layers (query p sees keys p-511..p there); "swa_check" says how much its
    logits at positions 511, 512 and the last move under a window of 511, 513 or none (about 2 at
    511 and 512 for the off-by-ones, so a test at those positions catches them).
  - "tokenizer": ids (no BOS) of tricky strings; "parse_special" ones contain control tokens
    (<start_of_turn> ...) that are matched as special tokens.

Logits are float32 values, written with the shortest decimal that round-trips a float32.
Not run by CI (CI uses the committed json). Takes 12-16 minutes on 2 CPU cores (building the
tokenizer from the GGUF vocabulary ~3, the 607-token prompt's greedy recomputes most of the rest).
Pinned deps (pip, in a venv outside the repo; torch's PyPI wheel is a CUDA build that runs on CPU):
    pip install torch==2.15.0 transformers==5.24.0 accelerate==1.15.0 gguf==0.19.0 numpy==2.4.6 \
        tokenizers==0.23.3 sentencepiece==0.2.3 protobuf==7.36.2
Usage:
    scripts/fetch-model gemma3-270m
    python3 tools/gen_gemma3_golden.py [model.gguf] [tests/data/gemma3_golden.json]
"""
import hashlib
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from the local GGUF

import numpy as np
import torch
import transformers
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(
    os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models")),
    "gemma-3-270m-q4_k_m.gguf",
)
KJV = os.path.join(ROOT, "tests", "data", "kjv_genesis_exodus.txt")

N_TOP = 64
N_PROBE = 64
N_GREEDY = 32
LONG_MIN_TOKENS = 600  # > sliding_window (512)

TRICKY = [
    ("", False),
    (" ", False),
    ("  two leading spaces", False),
    ("double  space and   triple", False),
    ("trailing spaces   ", False),
    ("line1\nline2\n\n\nline5\n", False),
    ("\tindented\t\tcode();\r\n", False),
    ("12345678901234567890 and 3.14159, -42, 1e-9", False),
    ("café naïve résumé Ünïcödé", False),
    ("日本語のテキストと中文", False),
    ("Привет, мир! Γειά σου κόσμε", False),
    ("emoji 🚀🔥 👍🏽 👨‍👩‍👧 done", False),
    ("rare chars: \U00020b9f \ue000 \u00a0nbsp \u3000ideographic", False),
    ("<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n", True),
    # User-defined (token_type 4) pieces are matched whole even without special parsing: HTML tags
    # (168-237), runs of 2-31 spaces (138-167), newlines (107-137), tabs (255968-255998). llama.cpp
    # re-types "</s>" (212) as control, so it does NOT match it whole here; transformers does.
    ("<div>html</div> <b>bold</b> and </s>", False),
]


def f32(x):
    """A float32 value as the shortest decimal that round-trips it."""
    return float(str(np.float32(x)))


def check_config(model, reader):
    """Prints the config transformers built and checks it is Gemma 3 270M as the GGUF says."""
    c = model.config
    fields = {k: v.contents() for k, v in reader.fields.items()
              if not k.startswith("tokenizer.") and v.types and v.types[0].name != "ARRAY"}
    summary = {
        "architectures": c.architectures, "model_type": c.model_type, "dtype": str(model.dtype),
        "hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads, "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim, "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
        "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.rms_norm_eps,
        "hidden_activation": c.hidden_activation, "query_pre_attn_scalar": c.query_pre_attn_scalar,
        "sliding_window": c.sliding_window, "layer_types": c.layer_types,
        "rope_parameters": c.rope_parameters, "final_logit_softcapping": c.final_logit_softcapping,
        "attn_logit_softcapping": c.attn_logit_softcapping,
        "use_bidirectional_attention": c.use_bidirectional_attention,
        "tie_word_embeddings": c.tie_word_embeddings, "attn_implementation": c._attn_implementation,
        "embed_scale": float(model.model.embed_tokens.embed_scale),
    }
    for k, v in summary.items():
        print(f"config {k} = {v}", file=sys.stderr)
    assert type(model).__name__ == "Gemma3ForCausalLM" and c.model_type == "gemma3_text"
    expect = {
        "hidden_size": fields["gemma3.embedding_length"], "num_hidden_layers": fields["gemma3.block_count"],
        "num_attention_heads": fields["gemma3.attention.head_count"],
        "num_key_value_heads": fields["gemma3.attention.head_count_kv"],
        "head_dim": fields["gemma3.attention.key_length"],
        "intermediate_size": fields["gemma3.feed_forward_length"],
        "sliding_window": fields["gemma3.attention.sliding_window"],
    }
    for k, v in expect.items():
        assert summary[k] == v, (k, summary[k], v)
    assert c.vocab_size == 262144 and c.hidden_activation == "gelu_pytorch_tanh"
    assert c.query_pre_attn_scalar == 256 and c.final_logit_softcapping is None and c.attn_logit_softcapping is None
    assert abs(c.rms_norm_eps - fields["gemma3.attention.layer_norm_rms_epsilon"]) < 1e-12
    assert [i for i, t in enumerate(c.layer_types) if t == "full_attention"] == [5, 11, 17]
    assert c.rope_parameters["full_attention"]["rope_theta"] == fields["gemma3.rope.freq_base"] == 1e6
    assert c.rope_parameters["sliding_attention"]["rope_theta"] == 1e4  # not in the GGUF: default
    assert all(p["rope_type"] == "default" for p in c.rope_parameters.values())
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    # A float model: every weight dequantized at load. (With the hub's `kernels` GGUF matmul kernel,
    # transformers 5 would instead keep blocks packed in Gguf* modules that run ggml's own gemv.)
    packed = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.startswith("Gguf")})
    assert not packed, packed
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # The GGUF stores Gemma's RMSNorm weights as (1 + w); transformers subtracts the 1 on load.
    gguf_norm = {t.name: np.asarray(t.data, dtype=np.float32) for t in reader.tensors if t.name.endswith("norm.weight")}
    assert np.array_equal(model.model.norm.weight.detach().numpy() + 1, gguf_norm["output_norm.weight"])
    assert np.array_equal(model.model.layers[3].self_attn.q_norm.weight.detach().numpy() + 1,
                          gguf_norm["blk.3.attn_q_norm.weight"])
    return summary


@torch.no_grad()
def logits_at(model, ids, positions):
    """Logits [len(positions), vocab] at the given positions of one full (uncached) forward pass.
    The lm_head runs only on those rows (final_logit_softcapping is None for this model)."""
    hidden = model.model(input_ids=torch.tensor([ids]), use_cache=False).last_hidden_state[0]
    return model.lm_head(hidden[positions]).float().numpy()


def position_record(row, t, probe):
    top = np.argsort(-row, kind="stable")[:N_TOP]
    m = float(row.max())
    lse = m + math.log(float(np.exp(row.astype(np.float64) - m).sum()))
    return {"pos": t, "top_ids": top.tolist(), "top_logits": [f32(row[i]) for i in top],
            "max": f32(m), "logsumexp": f32(lse), "probe_logits": [f32(row[i]) for i in probe]}


@torch.no_grad()
def greedy(model, ids):
    seq, margins = list(ids), []
    for _ in range(N_GREEDY):
        row = logits_at(model, seq, [len(seq) - 1])[0]
        a, b = np.argsort(-row, kind="stable")[:2]
        seq.append(int(a))
        margins.append(f32(row[a] - row[b]))
    return seq[len(ids):], margins


def kjv_long(tok):
    """Whole lines from the start of the KJV text until the prompt is >= LONG_MIN_TOKENS tokens."""
    lines = open(KJV, encoding="utf-8").read().split("\n")
    text = ""
    for line in lines:
        text += line + "\n"
        if len(tok(text)["input_ids"]) >= LONG_MIN_TOKENS:
            return text
    raise SystemExit("kjv text too short")


def main():
    model_path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "data", "gemma3_golden.json")
    torch.manual_seed(0)
    sha = hashlib.sha256(open(model_path, "rb").read()).hexdigest()
    d, name = os.path.split(os.path.abspath(model_path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model, info = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    model.eval()
    print("loading info:", {k: v for k, v in info.items() if v}, file=sys.stderr)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    config = check_config(model, GGUFReader(model_path))

    prompts = [
        ("capital", "The capital of France is"),
        ("kjv", "And God said, Let there be light: and there was light."),
        ("digits_unicode", "On 2024-03-14, π ≈ 3.14159 and 2³ = 8; the café in Zürich sold 12 crêpes 🥞 for €37.50."),
        ("kjv_long", kjv_long(tok)),
    ]
    rng = np.random.default_rng(20250301)
    probe = sorted(rng.choice(config["vocab_size"], N_PROBE, replace=False).tolist())
    cases = []
    for pname, text in prompts:
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id == 2
        T = len(ids)
        positions = sorted({0, T // 2, T - 1} | ({511, 512} if T > 512 else set()))
        logits = logits_at(model, ids, positions)
        gen, margins = greedy(model, ids)
        case = {"name": pname, "text": text, "ids": ids,
                "positions": [position_record(row, t, probe) for row, t in zip(logits, positions)],
                "greedy": gen, "greedy_text": tok.decode(gen), "greedy_margins": margins}
        if T > 512:
            # How far the logits at each recorded position >= 511 move (max |diff| over the vocabulary)
            # if the window were 511 or 513 tokens instead of 512, or if there were none.
            late = [i for i, t in enumerate(positions) if t >= 511]
            diffs = {}
            for label, window in (("window_511", 511), ("window_513", 513), ("no_window", 1 << 20)):
                model.config.sliding_window = window
                other = logits_at(model, ids, [positions[i] for i in late])
                diffs[label] = {str(positions[i]): f32(np.abs(o - logits[i]).max()) for i, o in zip(late, other)}
            model.config.sliding_window = config["sliding_window"]
            case["swa_check"] = {"max_abs_logit_diff": diffs}
            print(pname, "swa_check", diffs, file=sys.stderr)
        cases.append(case)
        print(f"{pname}: {T} tokens; top1 {positions[-1]}: {case['positions'][-1]['top_ids'][:5]}; "
              f"greedy {gen} {tok.decode(gen)!r}; min margin {min(margins)}", file=sys.stderr)

    tricky = []
    for text, special in TRICKY:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        tricky.append({"text": text, "parse_special": special, "ids": ids,
                       "pieces": tok.convert_ids_to_tokens(ids)})
        print(f"tokenizer {text!r}: {ids}", file=sys.stderr)

    golden = {
        "generator": f"tools/gen_gemma3_golden.py (transformers {transformers.__version__}, torch "
                     f"{torch.__version__}, gguf-py dequantization, float32, eager attention)",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "numpy": np.__version__, "tokenizers": __import__("tokenizers").__version__,
                     "gguf": __import__("importlib.metadata").metadata.version("gguf")},
        "model": name, "model_sha256": sha,
        "config": {k: config[k] for k in (
            "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size", "rms_norm_eps", "query_pre_attn_scalar", "sliding_window",
            "layer_types", "rope_parameters", "final_logit_softcapping", "embed_scale")},
        "bos_id": tok.bos_token_id, "eos_id": tok.eos_token_id,
        "probe_ids": probe,
        "prompts": cases,
        "tokenizer": tricky,
    }
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, ensure_ascii=False, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {out} ({os.path.getsize(out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
