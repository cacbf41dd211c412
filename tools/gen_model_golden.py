#!/usr/bin/env python3
"""Golden logits for the default model from an independent numpy implementation.

Reads the GGUF with the `gguf` package (its own dequantizers), runs the llama forward pass in
float64 numpy (no KV cache: full causal attention over the whole sequence) and writes
tests/data/model_golden.json: for each prompt (given as token ids, so the golden file does not
depend on our tokenizer) the top-20 logits, 64 fixed-vocabulary logits and the log-sum-exp of
the whole row (so logprob = logit - logsumexp, for the server's logprobs tests) at every
position, and a 16-token greedy continuation.

Not run by CI (CI uses the committed json). Pinned deps:
    pip install gguf==0.17.1 numpy==1.26.4 tokenizers==0.20.3
Usage: tools/gen_model_golden.py MODEL.gguf tests/data/model_golden.json
"""
import hashlib
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def load(path):
    r = GGUFReader(path)
    f = {}
    for k, v in r.fields.items():
        if len(v.data) == 1 and v.types and v.types[0].name not in ("STRING", "ARRAY"):
            f[k] = v.parts[v.data[0]][0]
    tensors = {}
    for t in r.tensors:
        arr = dequantize(t.data, t.tensor_type)
        # gguf shape order is ggml's (ne0 innermost); numpy arrays come out as [ne1, ne0]
        tensors[t.name] = np.asarray(arr, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])
    return f, tensors


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_normal(x, pos, base, rot_dim):
    # x: [T, H, D]; ggml "normal" rope: adjacent pairs (2i, 2i+1) rotated by pos * base^(-2i/rot_dim)
    T, H, D = x.shape
    out = x.copy()
    i = np.arange(rot_dim // 2)
    theta = pos[:, None] * base ** (-2.0 * i / rot_dim)  # [T, rot/2]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[:, :, 0:rot_dim:2], x[:, :, 1:rot_dim:2]
    out[:, :, 0:rot_dim:2] = x0 * c - x1 * s
    out[:, :, 1:rot_dim:2] = x0 * s + x1 * c
    return out


def forward(f, W, ids):
    L = int(f["llama.block_count"]); H = int(f["llama.attention.head_count"])
    KV = int(f["llama.attention.head_count_kv"]); E = int(f["llama.embedding_length"])
    eps = float(f["llama.attention.layer_norm_rms_epsilon"]); base = float(f["llama.rope.freq_base"])
    D = E // H; rot = int(f.get("llama.rope.dimension_count", D))
    T = len(ids); pos = np.arange(T, dtype=np.float64)
    x = W["token_embd.weight"][ids]  # [T, E]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(L):
        p = f"blk.{l}."
        h = rms_norm(x, W[p + "attn_norm.weight"], eps)
        q = (h @ W[p + "attn_q.weight"].T).reshape(T, H, D)
        k = (h @ W[p + "attn_k.weight"].T).reshape(T, KV, D)
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, KV, D)
        q = rope_normal(q, pos, base, rot); k = rope_normal(k, pos, base, rot)
        g = H // KV
        att = np.empty((T, H, D))
        for hh in range(H):
            kk, vv = k[:, hh // g, :], v[:, hh // g, :]
            s = q[:, hh, :] @ kk.T / np.sqrt(D) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True)); s /= s.sum(axis=1, keepdims=True)
            att[:, hh, :] = s @ vv
        x = x + att.reshape(T, E) @ W[p + "attn_output.weight"].T
        h = rms_norm(x, W[p + "ffn_norm.weight"], eps)
        gate = h @ W[p + "ffn_gate.weight"].T; up = h @ W[p + "ffn_up.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ W[p + "ffn_down.weight"].T
    x = rms_norm(x, W["output_norm.weight"], eps)
    out_w = W.get("output.weight", W["token_embd.weight"])
    return x @ out_w.T  # [T, vocab]


def main():
    model, out = sys.argv[1], sys.argv[2]
    sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
    f, W = load(model)
    # Prompts as token ids (ChatML user turn, plain English, code, digits). Produced once with the
    # HF tokenizers BPE built from the same GGUF vocab; kept literal so this file stands alone.
    prompts = {
        "plain": [504, 3575, 282, 4649, 314, 253],  # "The capital of France is a"
        # "<|im_start|>user\\nWhat is the capital of France?<|im_end|>"
        "chat": [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2],
        "code": [1604, 3987, 24, 94, 727, 472, 1003],  # "def fib(n):\\n    return"
        "digits": [33, 28, 216, 34, 28, 216, 35, 28, 216, 36, 28, 216, 37, 28],  # "1, 2, 3, 4, 5,"
    }
    rng = np.random.default_rng(7)
    probe = sorted(rng.choice(W["token_embd.weight"].shape[0], 64, replace=False).tolist())
    cases = []
    for name, ids in prompts.items():
        logits = forward(f, W, np.array(ids))
        gen = list(ids)
        for _ in range(16):
            nxt = int(np.argmax(forward(f, W, np.array(gen))[-1]))
            gen.append(nxt)
        per_pos = []
        for t in range(len(ids)):
            row = logits[t]
            top = np.argsort(-row)[:20]
            m = float(np.max(row))
            per_pos.append({"top_ids": top.tolist(), "top_logits": [float(row[i]) for i in top],
                            "probe_logits": [float(row[i]) for i in probe],
                            "logsumexp": m + float(np.log(np.sum(np.exp(row - m))))})
        cases.append({"name": name, "ids": ids, "positions": per_pos, "greedy": gen[len(ids):]})
        print(name, "greedy:", gen[len(ids):], file=sys.stderr)
    json.dump({"model_sha256": sha, "probe_ids": probe, "cases": cases}, open(out, "w"))


if __name__ == "__main__":
    main()
