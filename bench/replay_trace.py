#!/usr/bin/env python3
"""Replays a (scaled) Mooncake trace against a real `kvserve serve` and compares the run with
`kvserve simulate --device cpu` on the same requests (standard library only).

1. Takes --requests consecutive requests of the trace from --start, scales every length by
   --length-scale (a 512-token hash block becomes 512 x scale tokens, the partial last block keeps
   its share, so two scaled prompts share exactly the blocks the trace says), outputs by
   --output-scale (capped at --max-output), and arrivals by --time-scale; drops requests longer
   than --max-model-len (both sides would reject them). Writes the scaled trace (--scaled-trace).
2. Synthesizes the prompts' token ids exactly as `kvserve simulate` does (TokenSynthesizer:
   first token of a block = its index among its parent's children, body tokens a fixed mix of
   (id, offset), untraced tails and outputs private), so the server sees the very token ids the
   simulator replays.
3. Starts `kvserve serve` with the engine flags, sends every request at its scaled arrival time
   (streaming /v1/completions with token ids, ignore_eos, max_tokens = the trace's output), and
   measures TTFT, end-to-end latency, throughput, usage.cached_tokens, and from /metrics the
   prefix-cache hits, queries and preemptions.
4. Runs `kvserve simulate --device cpu` with the same flags on the scaled trace and prints both
   and their errors.
5. With --step-logs DIR, both write a line per engine step (`--step-log`, src/engine/step_log.h)
   and the script compares them: step counts and mean step times by kind and batch size, the
   time between steps, and when each side preempted.

Example (docs/simulate.md, "Validation"; --block-size equal to the scaled hash block keeps the
trace's sharing in whole engine blocks):
  python3 bench/replay_trace.py --kvserve build/bin/kvserve \\
      --trace ../shared/data/traces/mooncake_conversation_trace.jsonl --start 0 --requests 60 \\
      --length-scale 0.015625 --output-scale 0.0625 --time-scale 4 \\
      --kv-cache-memory 256MiB --block-size 8 --max-model-len 1024
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_gen import (Server, percentile, scrape_metrics, stream_chunks,  # noqa: E402
                      usage_tokens)

MASK = (1 << 64) - 1
ROOT = MASK


def body_token(hash_id, offset, vocab):
    """TokenSynthesizer's body(id, offset): the same 64-bit mix."""
    x = (hash_id * 0x9E3779B97F4A7C15 + offset * 0xD1B54A32D192ED03 + 0x8CB92BA72F3D8DD7) & MASK
    x ^= x >> 32
    x = (x * 0xD6E8FEB86659FD93) & MASK
    x ^= x >> 32
    return x % vocab


class Synthesizer:
    """A port of src/sim/token_synthesizer.cpp (must stay identical to it)."""

    def __init__(self, requests, block_tokens, vocab):
        self.block_tokens = block_tokens
        self.vocab = vocab
        self.first_range = vocab // 2
        children, index = {}, {}
        self.first = []
        self.own_first = []
        for r in requests:
            ids = r["hash_ids"]
            firsts = []
            own = 0
            if not ids:
                own = children.get(ROOT, 0)
                children[ROOT] = own + 1
            parent = ROOT
            for h in ids:
                key = (parent, h)
                if key not in index:
                    index[key] = children.get(parent, 0)
                    children[parent] = index[key] + 1
                firsts.append(index[key] % self.first_range)
                parent = h
            self.first.append(firsts)
            self.own_first.append(own % self.first_range)
        self.requests = requests

    def own_token(self, i):
        return self.first_range + i % (self.vocab - self.first_range)

    def prompt(self, i):
        r = self.requests[i]
        n, ids, bs = r["input_length"], r["hash_ids"], self.block_tokens
        own = self.own_token(i)
        if not ids:
            return [self.own_first[i]] + [own] * (n - 1)
        out = []
        for j, h in enumerate(ids):
            if len(out) >= n:
                break
            end = min(n, len(out) + bs)
            out.append(self.first[i][j])
            out.extend(body_token(h, q, self.vocab) for q in range(1, end - (len(out) - 1)))
        out.extend([own] * (n - len(out)))
        return out


def scale_trace(lines, args):
    """The scaled slice: lengths x length_scale in whole scaled blocks, arrivals x time_scale."""
    block = max(1, round(512 * args.length_scale))
    picked = lines[args.start:args.start + args.requests]
    if not picked:
        raise SystemExit(f"--start {args.start}: the trace has only {len(lines)} requests")
    t0 = picked[0]["timestamp"]
    out, dropped = [], 0
    for r in picked:
        ids = r["hash_ids"]
        last_fill = r["input_length"] - (len(ids) - 1) * 512 if ids else r["input_length"]
        scaled_last = max(1, round(last_fill * args.length_scale))
        n_in = (len(ids) - 1) * block + min(block, scaled_last) if ids else scaled_last
        n_out = min(args.max_output, max(1, round(r["output_length"] * args.output_scale)))
        if n_in + n_out > args.max_model_len:
            dropped += 1
            continue
        out.append({"timestamp": round((r["timestamp"] - t0) * args.time_scale),
                    "input_length": n_in, "output_length": n_out, "hash_ids": ids})
    return out, block, dropped


def metrics(host, port, api_key):
    """/metrics summed over labels: {'name': value}."""
    out = {}
    for name, value in scrape_metrics(host, port, api_key).items():
        base = name.split("{")[0]
        out[base] = out.get(base, 0.0) + value
    return out


def tier_hits(host, port, api_key):
    """Prompt tokens served by each KV offload tier (kvserve_kv_offload_..._hits_tokens_total)."""
    prefix = 'kvserve_kv_offload_prefix_cache_hits_tokens_total{tier="'
    return {k[len(prefix):].split('"')[0]: v
            for k, v in scrape_metrics(host, port, api_key).items() if k.startswith(prefix)}


def send(host, port, api_key, prompt, max_tokens):
    """Streams one completion; returns (t0, ttft, end, completion tokens, cached tokens)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    t0, chunks = stream_chunks(host, port, "/v1/completions", body, api_key, timeout=3600)
    ttft, tokens, cached = None, 0, 0
    for chunk in chunks:
        if chunk.get("usage"):
            tokens, cached = usage_tokens(chunk)
        if chunk.get("choices") and ttft is None:
            ttft = time.perf_counter() - t0
    return t0, ttft, time.perf_counter(), tokens, cached


def read_step_log(path, zero=0.0):
    """A --step-log file's steps, times shifted by -zero (seconds)."""
    steps = []
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            e["start_s"] -= zero
            e["end_s"] -= zero
            steps.append(e)
    return steps


def step_kind(e):
    """(kind, batch bucket) of a logged step: prefill only, mixed or decode; sequences."""
    prefill = sum(1 for c in e["chunks"] if c[1] < c[3])
    n = len(e["chunks"])
    kind = "decode" if prefill == 0 else ("prefill" if prefill == n else "mixed")
    bucket = next(b for b in ("1", "2-3", "4-7", "8-15", "16+")
                  if n <= {"1": 1, "2-3": 3, "4-7": 7, "8-15": 15, "16+": 1 << 30}[b])
    return kind, bucket


def compare_step_logs(serve_steps, sim_steps):
    """Prints the two step logs side by side (times relative to the trace's zero)."""
    def summary(steps):
        busy = sum(e["end_s"] - e["start_s"] for e in steps)
        gaps = [b["start_s"] - a["end_s"] for a, b in zip(steps, steps[1:])]
        by = {}
        for e in steps:
            k = step_kind(e)
            n, t, tok = by.get(k, (0, 0.0, 0))
            by[k] = (n + 1, t + e["end_s"] - e["start_s"], tok + sum(c[2] for c in e["chunks"]))
        pre = [(round(e["start_s"], 2), e["preempted_recompute"] + e["preempted_swap"])
               for e in steps if e["preempted_recompute"] + e["preempted_swap"]]
        return busy, gaps, by, pre

    rb, rg, rby, rpre = summary(serve_steps)
    sb, sg, sby, spre = summary(sim_steps)
    small = [g for g in rg if g < 0.05]
    print(f"\nsteps: serve {len(serve_steps)}, simulate {len(sim_steps)}; busy {rb:.2f} s vs "
          f"{sb:.2f} s; serve's gaps under 50 ms between steps: {len(small)}, "
          f"{sum(small) * 1000:.0f} ms in all (the simulator has none)")
    print("| step kind | sequences | steps serve / sim | mean tokens | mean ms serve / sim | "
          "ratio |")
    print("|---|---|---|---|---|---|")
    for k in sorted(set(rby) | set(sby)):
        rn, rt, rtok = rby.get(k, (0, 0.0, 0))
        sn, st, stok = sby.get(k, (0, 0.0, 0))
        rm = rt / rn * 1000 if rn else float("nan")
        sm = st / sn * 1000 if sn else float("nan")
        tok = (rtok + stok) / max(1, rn + sn)
        ratio = f"{sm / rm:.3f}" if rn and sn else "-"
        print(f"| {k[0]} | {k[1]} | {rn} / {sn} | {tok:.0f} | {rm:.1f} / {sm:.1f} | {ratio} |")
    print(f"preemptions (s after the first arrival, count): serve {rpre}; simulate {spre}")


def replay(host, port, api_key, trace, synth, zero_out=None):
    prompts = [synth.prompt(i) for i in range(len(trace))]
    results = [None] * len(trace)
    errors = []
    start = time.perf_counter() + 0.5
    if zero_out is not None:  # the trace's zero on the epoch clock the step log uses
        zero_out.append(time.time() + (start - time.perf_counter()))

    def worker(i):
        delay = start + trace[i]["timestamp"] / 1000.0 - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        try:
            results[i] = send(host, port, api_key, prompts[i], trace[i]["output_length"])
        except Exception as e:  # noqa: BLE001 - counted and reported
            errors.append(f"request {i}: {e}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(trace))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = [r for r in results if r is not None]
    first = min(r[0] for r in done)
    last = max(r[2] for r in done)
    makespan = last - first
    out_tokens = sum(r[3] for r in done)
    in_tokens = sum(trace[i]["input_length"] for i, r in enumerate(results) if r is not None)
    ttft = [r[1] for r in done if r[1] is not None]
    e2e = [r[2] - r[0] for r in done]
    return {"completed": len(done), "errors": errors, "makespan_s": makespan,
            "output_tokens_per_s": out_tokens / makespan, "input_tokens_per_s": in_tokens / makespan,
            "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
            "e2e_p50_s": percentile(e2e, 50), "e2e_p99_s": percentile(e2e, 99),
            "cached_tokens": sum(r[4] for r in done), "input_tokens": in_tokens}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvserve", default="build/bin/kvserve")
    ap.add_argument("--trace", required=True, help="Mooncake JSONL (read in place)")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--length-scale", type=float, default=1 / 16)
    ap.add_argument("--output-scale", type=float, default=None, help="default: --length-scale")
    ap.add_argument("--max-output", type=int, default=256)
    ap.add_argument("--time-scale", type=float, default=1.0, help="arrival times x this")
    ap.add_argument("--vocab", type=int, default=49152, help="the served model's vocabulary")
    ap.add_argument("--kv-cache-memory", default="64MiB")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="-t for serve (0 = all cores)")
    ap.add_argument("--device-file", default="", help="for simulate (default: data/devices/cpu.json)")
    ap.add_argument("--scaled-trace", default="/tmp/kvserve_replay_trace.jsonl")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--json", help="write both runs' numbers to this file")
    ap.add_argument("--no-serve", action="store_true", help="only write the scaled trace and simulate")
    ap.add_argument("--serve-args", default="",
                    help="more flags for serve only, e.g. the KV offload tiers (docs/offload.md); "
                         "the report then adds the hit rate by tier")
    ap.add_argument("--no-simulate", action="store_true", help="only replay against the server")
    ap.add_argument("--step-logs", default="",
                    help="DIR: serve and simulate write a line per step there (serve_steps.jsonl, "
                         "sim_steps.jsonl), compared at the end")
    args = ap.parse_args()
    if args.output_scale is None:
        args.output_scale = args.length_scale

    with open(args.trace) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    trace, block, dropped = scale_trace(lines, args)
    if not trace:
        raise SystemExit(f"every request is longer than --max-model-len {args.max_model_len}")
    with open(args.scaled_trace, "w") as f:
        for r in trace:
            f.write(json.dumps(r) + "\n")
    print(f"scaled trace: {len(trace)} requests ({dropped} longer than --max-model-len dropped), "
          f"{block}-token blocks, {trace[-1]['timestamp'] / 1000:.1f} s of arrivals, mean prompt "
          f"{sum(r['input_length'] for r in trace) / len(trace):.0f}, mean output "
          f"{sum(r['output_length'] for r in trace) / len(trace):.0f} -> {args.scaled_trace}",
          flush=True)
    engine_flags = ["--kv-cache-memory", args.kv_cache_memory, "--max-model-len",
                    str(args.max_model_len), "--max-num-seqs", str(args.max_num_seqs),
                    "--max-num-batched-tokens", str(args.max_num_batched_tokens), "--block-size",
                    str(args.block_size)]
    real = None
    if not args.no_serve:
        serve_flags = engine_flags + ["--max-queued-requests", str(len(trace) + 16)]
        if args.threads:
            serve_flags += ["-t", str(args.threads)]
        serve_flags += shlex.split(args.serve_args)
        if args.step_logs:
            os.makedirs(args.step_logs, exist_ok=True)
            serve_flags += ["--step-log", os.path.join(args.step_logs, "serve_steps.jsonl")]
        server = Server(args.kvserve, serve_flags)
        zero = []
        try:
            synth = Synthesizer(trace, block, args.vocab)
            before = metrics("127.0.0.1", server.port, args.api_key)
            tiers_before = tier_hits("127.0.0.1", server.port, args.api_key)
            real = replay("127.0.0.1", server.port, args.api_key, trace, synth, zero)
            after = metrics("127.0.0.1", server.port, args.api_key)
            tiers_after = tier_hits("127.0.0.1", server.port, args.api_key)
        finally:
            server.stop()
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        real["prefix_queries"] = delta.get("kvserve_prefix_cache_queries_tokens_total", 0)
        real["prefix_hits"] = delta.get("kvserve_prefix_cache_hits_tokens_total", 0)
        real["prefix_cache_hit_rate"] = (real["prefix_hits"] / real["prefix_queries"]
                                         if real["prefix_queries"] else 0)
        real["preemptions"] = delta.get("kvserve_preemptions_total", 0)
        for tier, hits in tiers_after.items():
            q = real["prefix_queries"]
            real[f"{tier}_tier_hit_rate"] = (hits - tiers_before.get(tier, 0)) / q if q else 0
        if real["errors"]:
            print(f"{len(real['errors'])} errors, first: {real['errors'][0]}", file=sys.stderr)

    if args.no_simulate:
        print(json.dumps(real, indent=2))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"serve": real, "args": vars(args)}, f, indent=2)
        return 0
    sim_cmd = [args.kvserve, "simulate", "--device", "cpu", "--trace", args.scaled_trace,
               "--trace-block-tokens", str(block), "--vocab-size", str(args.vocab), "--json",
               "--series-points", "0", *engine_flags]
    if args.device_file:
        sim_cmd += ["--device-file", args.device_file]
    if args.step_logs:
        sim_cmd += ["--step-log", os.path.join(args.step_logs, "sim_steps.jsonl")]
    sim_out = subprocess.run(sim_cmd, capture_output=True, text=True, check=True).stdout
    s = json.loads(sim_out)["results"]
    sim = {"completed": s["completed"], "makespan_s": s["makespan_s"],
           "output_tokens_per_s": s["output_tokens_per_s"],
           "input_tokens_per_s": s["input_tokens_per_s"],
           "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
           "e2e_p50_s": s["e2e_s"]["p50"], "e2e_p99_s": s["e2e_s"]["p99"],
           "prefix_cache_hit_rate": s["prefix_cache_hit_rate"],
           "preemptions": s["preemptions"]["recompute"] + s["preemptions"]["swap"],
           "wall_s": s["wall_s"]}
    print("| metric | kvserve serve | simulate --device cpu | error |")
    print("|---|---|---|---|")
    for key in ["completed", "makespan_s", "output_tokens_per_s", "input_tokens_per_s",
                "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "prefix_cache_hit_rate",
                "preemptions"]:
        sv = sim[key]
        if real is None:
            print(f"| {key} | - | {sv:.4g} | - |")
            continue
        rv = real[key]
        if key == "prefix_cache_hit_rate":
            err = f"{(sv - rv) * 100:+.2f} points"
        elif key in ("completed", "preemptions"):
            err = f"{sv - rv:+.0f}"
        else:
            err = f"{(sv - rv) / rv * 100:+.1f}%" if rv else "-"
        print(f"| {key} | {rv:.4g} | {sv:.4g} | {err} |")
    if args.step_logs and real is not None:
        compare_step_logs(
            read_step_log(os.path.join(args.step_logs, "serve_steps.jsonl"), zero[0]),
            read_step_log(os.path.join(args.step_logs, "sim_steps.jsonl")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"serve": real, "simulate": sim, "args": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
