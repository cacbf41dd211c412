#!/usr/bin/env python3
"""End-to-end speed of kvserve on the default model, next to llama.cpp on the same GGUF.

Measures, with 1 and 2 threads: single-stream prefill and decode tokens/s, aggregate decode
tokens/s for 1/4/16/64 parallel sequences, the machine's streaming read bandwidth (matmul_bench's
BM_MemoryRead) and the fraction of it each decode figure reaches (bytes touched per token =
weights read per step / tokens in the step + KV bytes read per token). Each figure is the best of
--repeats runs; kvserve and llama.cpp runs alternate, so machine noise hits both alike.

With --llama-server PATH it also serves both workloads of bench/load_gen.py (a shared ~1,000-token
system prompt; unique prompts) at 1, 16 and 32 streaming clients, 64 output tokens each, from
`kvserve serve` and from llama.cpp's llama-server with the same threads (the largest of
--threads), one after the other, and prints one table of both.

With --ik-llama-bench PATH it also runs ik_llama.cpp's llama-bench (the CPU-focused fork, the speed
to beat) on the same GGUF, prompt length and threads, alternating with the other two.

It ends with the prefill of a ~2,000-token prompt: cold against cached (the prefix cache), and cold
against the peers' llama-bench at the same prompt length with flash attention, where attention's
share of the work grows with the context.

Usage: bench/run_benchmarks.py [--llama-bench PATH] [--ik-llama-bench PATH] [--llama-server PATH]
                               [--model GGUF] [--repeats 3] [--sections generate,serving] > table.md
llama.cpp and ik_llama.cpp are optional: build them outside the repository and pass their paths.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVSERVE = os.path.join(ROOT, "build", "bin", "kvserve")
MATMUL_BENCH = os.path.join(ROOT, "build", "bench", "matmul_bench")
MODEL_DIR = os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models"))
MODEL = os.path.join(MODEL_DIR, "SmolLM2-135M-Instruct.Q4_1.gguf")


PARALLEL = (1, 4, 16, 64)  # aggregate decode of this many sequences (issue 12: 16 >= 5x, 64 >= 8x)


def sh(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def bandwidth(threads):
    out = json.loads(sh([MATMUL_BENCH, f"--benchmark_filter=BM_MemoryRead/{threads}", "--benchmark_format=json",
                         "--benchmark_repetitions=3"]))
    return max(b["GB/s"] for b in out["benchmarks"] if b.get("run_type") == "iteration") * 1e9


def prompt_of(n_words):
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
             "boxing matches near the old river bank").split()
    return " ".join(words[i % len(words)] for i in range(n_words))


def kvserve(args, threads):
    return json.loads(sh([KVSERVE, "generate", "-m", MODEL, "--json", "--ignore-eos", "-t", str(threads), *args]))


def llama_bench(path, threads, p, n, extra=()):
    out = json.loads(sh([path, "-m", MODEL, "-t", str(threads), "-p", str(p), "-n", str(n), "-r", "3", "-o", "json",
                         *extra]))
    res = {}
    for r in out:
        if r["n_prompt"] > 0:
            res["prefill"] = r["avg_ts"]
        else:
            res["decode"] = r["avg_ts"]
    return res


SERVING_CLIENTS = (1, 16, 32)


def serving(llama_server, threads):
    """The serving head-to-head: load_gen.py against kvserve serve, then llama-server."""
    here = os.path.dirname(os.path.abspath(__file__))
    clients = ",".join(str(c) for c in SERVING_CLIENTS)
    slots = max(SERVING_CLIENTS)
    servers = [
        ("kvserve", ["--kvserve", KVSERVE, "--server-args",
                     f"-t {threads} --max-model-len 2048 --max-num-seqs 64 --kv-cache-memory 1GiB"]),
        ("llama-server", ["--llama-server", llama_server, "--server-args",
                          f"-t {threads} -np {slots} -c {slots * 2048}"]),
    ]
    print(f"\nServing, {threads} threads, 64 output tokens per request "
          f"(bench/load_gen.py; llama-server with {slots} slots of 2,048 tokens):\n")
    print("| server | workload | clients | output tok/s | vs 1 client | TTFT p50 ms | ITL p50 ms | errors |")
    print("|---|---|---|---|---|---|---|---|")
    results = {}
    for workload in ("unique", "shared"):
        for name, flags in servers:
            with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
                subprocess.run([sys.executable, os.path.join(here, "load_gen.py"), *flags,
                                "--workload", workload, "--concurrency", clients,
                                "--min-requests", "32", "--max-tokens", "64", "--json", f.name],
                               check=True, stdout=subprocess.DEVNULL)
                rows = [json.loads(l) for l in open(f.name) if l.strip()]
            one = next(r for r in rows if r["concurrency"] == 1)["output_tokens_per_s"]
            for r in rows:
                results[(name, workload, r["concurrency"])] = r["output_tokens_per_s"]
                print(f"| {name} | {workload} | {r['concurrency']} | {r['output_tokens_per_s']:.1f} | "
                      f"{r['output_tokens_per_s'] / one:.2f}x | {r['ttft_p50_ms']:.0f} | "
                      f"{r['itl_p50_ms']:.1f} | {r['errors']} |", flush=True)
    print("\nkvserve / llama-server output tokens/s: " + ", ".join(
        f"{w} {c}: {results[('kvserve', w, c)] / results[('llama-server', w, c)]:.2f}x"
        for w in ("unique", "shared") for c in SERVING_CLIENTS
        if results.get(("llama-server", w, c))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bench")
    ap.add_argument("--ik-llama-bench")
    ap.add_argument("--llama-server")
    ap.add_argument("--model", help="GGUF to run (default: the default model, SmolLM2 Q4_1)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sections", default="generate,serving")
    a = ap.parse_args()
    global MODEL
    if a.model:
        MODEL = os.path.abspath(a.model)
    lscpu = sh(["lscpu"])
    cpu = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
    sections = a.sections.split(",")
    if "generate" not in sections:
        print(f"Machine: {cpu}, {os.cpu_count()} cores.")
        if a.llama_server and "serving" in sections:
            serving(a.llama_server, max(int(x) for x in a.threads.split(",")))
        return 0
    prompt = prompt_of(380)  # ~512 tokens
    rows = []
    for t in [int(x) for x in a.threads.split(",")]:
        bw = bandwidth(t)
        best = {}
        for _ in range(a.repeats):
            single = kvserve(["-p", prompt, "-n", "128"], t)
            best["prefill"] = max(best.get("prefill", 0), single["prefill_tokens_per_s"])
            best["decode"] = max(best.get("decode", 0), single["decode_tokens_per_s"])
            meta = single
            for n in PARALLEL:
                par = kvserve(["-p", "Once upon a time there was", "-n", "64", "--parallel", str(n)], t)
                best[f"par{n}"] = max(best.get(f"par{n}", 0), par["decode_tokens_per_s"])
            for key, path in (("ll", a.llama_bench), ("ik", a.ik_llama_bench)):
                if path:
                    lb = llama_bench(path, t, 512, 128)
                    best[f"{key}_prefill"] = max(best.get(f"{key}_prefill", 0), lb["prefill"])
                    best[f"{key}_decode"] = max(best.get(f"{key}_decode", 0), lb["decode"])
        w = meta["weights_bytes"]
        kv = meta["kv_bytes_per_token"]
        prompt_tokens = meta["prompt_tokens"]
        # Decode at context ~prompt+64 reads the weights once and the sequence's KV once per token.
        single_bytes = w + (prompt_tokens + 64) * kv
        rows.append((t, bw, best, single_bytes, w, kv, prompt_tokens))
    print(f"Machine: {cpu}, {os.cpu_count()} cores. Model: {os.path.basename(MODEL)} "
          f"(weights read per step: {rows[0][4] / 1e6:.1f} MB; KV {rows[0][5]} B/token f16).\n")
    print("| threads | read bandwidth | prefill tok/s (512) | decode tok/s | decode GB/s (% of bw) | "
          "llama.cpp prefill | llama.cpp decode | ik_llama.cpp prefill | ik_llama.cpp decode | "
          "prefill vs llama.cpp / ik | decode vs llama.cpp / ik | "
          + " | ".join(f"{n} seq{'s' if n > 1 else ''}" for n in PARALLEL) + " | "
          + " | ".join(f"{n} / 1" for n in PARALLEL[1:]) + " |")
    print("|---" * (11 + 2 * len(PARALLEL) - 1) + "|")

    def peer(b, key, what):
        return f"{b[f'{key}_{what}']:.0f}" if f"{key}_{what}" in b else "-"

    def ratios(b, what):
        return " / ".join(f"{b[what] / b[f'{key}_{what}']:.2f}x" if f"{key}_{what}" in b else "-"
                          for key in ("ll", "ik"))

    for t, bw, b, sb, w, kv, pt in rows:
        gbs = b["decode"] * sb / 1e9
        par = []
        for n in PARALLEL:
            tps = b[f"par{n}"]
            step_bytes = w + n * 40 * kv  # weights once per step + each sequence's KV (~40 tokens)
            par.append(f"{tps:.0f} ({tps / n * step_bytes / bw * 100:.0f}%)")
        print(f"| {t} | {bw / 1e9:.1f} GB/s | {b['prefill']:.0f} | {b['decode']:.0f} | {gbs:.1f} ({gbs * 1e9 / bw * 100:.0f}%) | "
              f"{peer(b, 'll', 'prefill')} | {peer(b, 'll', 'decode')} | {peer(b, 'ik', 'prefill')} | "
              f"{peer(b, 'ik', 'decode')} | {ratios(b, 'prefill')} | {ratios(b, 'decode')} | "
              + " | ".join(par) + " | "
              + " | ".join(f"{b[f'par{n}'] / b['par1']:.1f}x" for n in PARALLEL[1:]) + " |")
    print("\nParallel columns: aggregate decode tokens/s (percentage: bytes touched per step / step time "
          "as a fraction of read bandwidth).")

    # Prefix caching: time to first token of a ~2,000-token prompt, cold and then cached.
    long_prompt = prompt_of(1500)
    best_cold = best_warm = None
    for _ in range(a.repeats):
        out = kvserve(["-p", long_prompt, "-n", "1", "--repeat", "2"], max(int(x) for x in a.threads.split(",")))
        cold, warm = out["runs"]
        if best_cold is None or cold["prefill_ms"] < best_cold["prefill_ms"]:
            best_cold = cold
        if best_warm is None or warm["prefill_ms"] < best_warm["prefill_ms"]:
            best_warm = warm
    print(f"\nTime to first token, {best_cold['prompt_tokens']}-token prompt "
          f"({max(int(x) for x in a.threads.split(','))} threads): cold {best_cold['prefill_ms']:.0f} ms; "
          f"second run {best_warm['prefill_ms']:.1f} ms with {best_warm['cached_tokens']} tokens from the prefix "
          f"cache ({best_cold['prefill_ms'] / best_warm['prefill_ms']:.0f}x faster).")
    long_prefill(a, long_prompt, best_cold["prompt_tokens"])
    if a.llama_server and "serving" in sections:
        serving(a.llama_server, max(int(x) for x in a.threads.split(",")))


def long_prefill(a, prompt, tokens):
    """Prefill of the long prompt, cold, next to the peers' llama-bench at the same length: where
    attention, not the weights, sets the pace (its cost grows with the context)."""
    print(f"\nPrefill of a {tokens}-token prompt, cold (tokens/s; the peers' llama-bench -p {tokens}, "
          "flash attention on):\n")
    print("| threads | kvserve | llama.cpp | ik_llama.cpp | vs llama.cpp / ik |")
    print("|---|---|---|---|---|")
    for t in [int(x) for x in a.threads.split(",")]:
        best = {}
        for _ in range(a.repeats):
            best["kv"] = max(best.get("kv", 0), kvserve(["-p", prompt, "-n", "1"], t)["prefill_tokens_per_s"])
            for key, path in (("ll", a.llama_bench), ("ik", a.ik_llama_bench)):
                if path:
                    best[key] = max(best.get(key, 0), llama_bench(path, t, tokens, 0, ["-fa", "1"])["prefill"])
        cells = " | ".join(f"{best[k]:.0f}" if k in best else "-" for k in ("ll", "ik"))
        ratios = " / ".join(f"{best['kv'] / best[k]:.2f}x" if k in best else "-" for k in ("ll", "ik"))
        print(f"| {t} | {best['kv']:.0f} | {cells} | {ratios} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
