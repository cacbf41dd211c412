#!/usr/bin/env python3
"""Decode speed at a long context: kvserve next to llama.cpp on the same GGUF (default: Gemma 3
270M, whose sliding-window layers make long contexts cheap).

For each context C and thread count T: kvserve `generate` with a prompt of about C tokens (the
KJV text in tests/data, cut to length) and 64 greedy tokens (--ignore-eos), reading its
decode_tokens_per_s, prompt_tokens and kv_bytes_in_use; and `llama-bench -p 0 -n 64 -d C -t T`
(decode of 64 tokens after C tokens of context), reading avg_ts. kvserve and llama.cpp runs
alternate and each figure is the best of --repeats, so machine noise hits both alike.

Usage: bench/context_decode.py --llama-bench PATH [--model gemma3-270m] [--contexts 1024,8192]
                               [--threads 1,2] [--repeats 2] > table.md
"""
import argparse
import json
import os
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVSERVE = os.path.join(ROOT, "build", "bin", "kvserve")
TEXT = os.path.join(ROOT, "tests", "data", "kjv_genesis_exodus.txt")
MODELS = os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models"))
FILES = {"gemma3-270m": "gemma-3-270m-q4_k_m.gguf", "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf"}
NEW_TOKENS = 64


def cpu_model():
    for line in open("/proc/cpuinfo", encoding="utf-8"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def kvserve_run(model, prompt, context, threads):
    r = subprocess.run(
        [KVSERVE, "generate", "-m", model, "-p", prompt, "-n", str(NEW_TOKENS), "--ignore-eos",
         "--max-model-len", str(2 * context + 2 * NEW_TOKENS), "-t", str(threads), "--json"],
        capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"kvserve generate failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout)


def llama_run(llama_bench, path, context, threads):
    out = subprocess.run(
        [llama_bench, "-m", path, "-p", "0", "-n", str(NEW_TOKENS), "-d", str(context), "-t",
         str(threads), "-r", "1", "-o", "json"],
        capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--model", default="gemma3-270m", choices=sorted(FILES))
    ap.add_argument("--contexts", default="1024,8192")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    path = os.path.join(MODELS, FILES[args.model])
    text = open(TEXT, encoding="utf-8").read()
    rows = []
    chars_per_token = 4.0  # then measured on the first run; the table reports the real count
    for context in [int(c) for c in args.contexts.split(",")]:
        prompt = text[:int(context * chars_per_token)]
        for threads in [int(t) for t in args.threads.split(",")]:
            best_kv, best_llama, info = 0.0, 0.0, None
            for _ in range(args.repeats):
                r = kvserve_run(args.model, prompt, context, threads)
                chars_per_token = len(prompt) / r["prompt_tokens"]
                if r["decode_tokens_per_s"] > best_kv:
                    best_kv, info = r["decode_tokens_per_s"], r
                best_llama = max(best_llama, llama_run(args.llama_bench, path, context, threads))
            rows.append((context, threads, info, best_kv, best_llama))
    print(f"{cpu_model()}, {args.model}, decode of {NEW_TOKENS} tokens after the context, "
          f"best of {args.repeats}; kvserve f16 KV (default), llama.cpp f16 KV (default)\n")
    print("| context (kvserve prompt tokens) | threads | kvserve tok/s | llama.cpp tok/s | kvserve / llama.cpp "
          "| kvserve KV bytes in use (per context token) |")
    print("|---|---|---|---|---|---|")
    for context, threads, info, kv, llama in rows:
        tokens = info["prompt_tokens"] + info["generated_tokens"]
        print(f"| {context} ({info['prompt_tokens']}) | {threads} | {kv:.1f} | {llama:.1f} | "
              f"{kv / llama:.2f}x | {info['kv_bytes_in_use']:,} ({info['kv_bytes_in_use'] / tokens:,.0f}) |")


if __name__ == "__main__":
    main()
