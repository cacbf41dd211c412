#!/usr/bin/env python3
"""Benchmarks of the KV offload tiers against a real `kvserve serve` (standard library only).
Results go to docs/offload.md.

  ttft        TTFT of a 2K-token prompt: cold, an L1 (pool) hit, an L2 (host tier) hit and an
              L3 (disk tier) hit after a server restart; each the median over --reps prompts.
              With --drop-caches (root) the L3 case also runs with the page cache dropped.
  working-set 20 distinct 1,500-token documents cycled by 8 clients through a pool of about a
              tenth of them: hit rate (by tier) and TTFT p50/p99 with tiers off, L2, L2+L3, and
              L3 alone after a restart (the first pass warms the disk, the second is measured).
  admit       the working set with L2+L3 for --kv-offload-disk-admit 0, 1, 2: disk hit rate and
              blocks written.
  extent      L3 TTFT of the 2K prompt for --kv-offload-extent-blocks 1, 4, 16, 64.
  quality     perplexity (kvserve perplexity, --ctx 512) computed, then again with every window's
              first half (the positions it does not score) loaded back from a disk tier written
              by the first run, for each --kv-offload-dtype.

Example:
  python3 bench/offload_bench.py --kvserve build/bin/kvserve ttft working-set admit extent
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_gen import (Server, percentile, scrape_metrics, stream_chunks,  # noqa: E402
                      usage_tokens)

BLOCK_BYTES = 16 * 23040  # SmolLM2-135M, f16, 16-token blocks


def doc(i, n):
    rng = random.Random(1000 + i)
    return [rng.randrange(1000, 40000) for _ in range(n)]


def ttft_of(port, prompt):
    """(TTFT seconds, cached tokens) of one streaming completion of one token."""
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0, chunks = stream_chunks("127.0.0.1", port, "/v1/completions", body, "", timeout=600)
    first, cached = None, 0
    for c in chunks:
        if first is None and c.get("choices"):
            first = time.perf_counter() - t0
        if c.get("usage"):
            cached = usage_tokens(c)[1]
    return first, cached


def serve(args, *flags):
    return Server(args.kvserve, ["-t", str(args.threads), *flags])


def run_ttft(args, extent_blocks=16, only_l3=False):
    n = 2048
    pool = ["--kv-cache-memory", str(3 * 130 * BLOCK_BYTES), "--max-model-len", "2304"]
    res = {"cold": [], "l1": [], "l2": [], "l3": [], "l3_dropped": []}
    tmp = tempfile.mkdtemp(prefix="kvs-offload-bench-")
    try:
        if not only_l3:
            s = serve(args, *pool, "--kv-offload-memory", "2GiB")
            try:
                for r in range(args.reps):
                    a = doc(100 + r, n)
                    res["cold"].append(ttft_of(s.port, a)[0])
                    res["l1"].append(ttft_of(s.port, a)[0])
                    for k in range(3):  # three other 2K prompts push `a` out of the pool
                        ttft_of(s.port, doc(200 + 10 * r + k, n))
                    t, cached = ttft_of(s.port, a)
                    assert cached == 2032, cached
                    res["l2"].append(t)
            finally:
                s.stop()
        disk = ["--kv-offload-dir", tmp, "--kv-offload-disk-admit", "0",
                "--kv-offload-extent-blocks", str(extent_blocks)]
        s = serve(args, *pool, *disk)
        try:
            for r in range(args.reps):
                ttft_of(s.port, doc(300 + r, n))
        finally:
            s.stop()  # writes the pool's cached blocks to disk
        for key in ["l3"] + (["l3_dropped"] if args.drop_caches else []):
            s = serve(args, *pool, *disk)
            try:
                for r in range(args.reps):
                    if key == "l3_dropped":
                        subprocess.run(["sync"])
                        with open("/proc/sys/vm/drop_caches", "w") as f:
                            f.write("3\n")
                    t, cached = ttft_of(s.port, doc(300 + r, n))
                    assert cached == 2032, cached
                    res[key].append(t)
            finally:
                s.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {k: statistics.median(v) for k, v in res.items() if v}


def run_clients(port, docs, clients, per_client):
    """8 clients cycling through the documents; returns TTFTs and cached tokens."""
    ttfts, cached = [], []
    lock = threading.Lock()

    def client(c):
        for k in range(per_client):
            d = docs[(c * 7 + k * 3) % len(docs)]
            t, h = ttft_of(port, d)
            with lock:
                ttfts.append(t)
                cached.append(h)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttfts, cached


def run_working_set(args, configs):
    docs = [doc(500 + i, 1500) for i in range(20)]
    l1_blocks = 20 * 94 // 10  # a tenth of the working set
    base = ["--kv-cache-memory", str(l1_blocks * BLOCK_BYTES), "--max-model-len", "1600",
            "--quiet-preemptions"]
    rows = {}
    for name, flags, restart in configs:
        tmp = tempfile.mkdtemp(prefix="kvs-offload-ws-")
        flags = [f.replace("{dir}", tmp) for f in flags]
        try:
            if restart:  # a first server fills the disk tier, the measured one restarts on it
                s = serve(args, *base, *flags)
                try:
                    run_clients(s.port, docs, args.clients, args.per_client)
                finally:
                    s.stop()
            s = serve(args, *base, *flags)
            try:
                before = scrape_metrics("127.0.0.1", s.port, "")
                t0 = time.perf_counter()
                ttfts, cached = run_clients(s.port, docs, args.clients, args.per_client)
                wall = time.perf_counter() - t0
                after = scrape_metrics("127.0.0.1", s.port, "")
            finally:
                s.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        query = len(ttfts) * 1500
        tier = lambda t: d.get(  # noqa: E731
            'kvserve_kv_offload_prefix_cache_hits_tokens_total{tier="%s"}' % t, 0)
        rows[name] = {
            "hit_rate": sum(cached) / query,
            "host_hit_rate": tier("host") / query,
            "disk_hit_rate": tier("disk") / query,
            "ttft_p50_s": percentile(ttfts, 50),
            "ttft_p99_s": percentile(ttfts, 99),
            "wall_s": wall,
            "disk_blocks_stored": d.get('kvserve_kv_offload_blocks_stored_total{tier="disk"}', 0),
            "recompute_decisions": sum(v for k, v in d.items() if "decision=\"recompute\"" in k),
        }
        print(name, json.dumps(rows[name]), flush=True)
    return rows


def run_quality(args):
    rows = {}
    for dtype in ("same", "fp8", "int8", "int4_had"):
        tmp = tempfile.mkdtemp(prefix="kvs-offload-q-")
        try:
            cmd = [args.kvserve, "perplexity", "-f", args.text, "--ctx", "512", "--max-windows",
                   str(args.windows), "--json", "-t", str(args.threads), "--kv-offload-dir", tmp,
                   "--kv-offload-disk-admit", "0", "--kv-offload-dtype", dtype]
            first = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                              check=True).stdout)
            second = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                               check=True).stdout)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        rows[dtype] = {"computed": first["perplexity"], "prefix_from_tier": second["perplexity"],
                       "tier_hit_tokens": second["kv_offload"]["disk"]["hit_tokens"],
                       "scored_tokens": second["scored_tokens"]}
        print(dtype, json.dumps(rows[dtype]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="+",
                    choices=["ttft", "working-set", "admit", "extent", "quality"])
    ap.add_argument("--kvserve", default="build/bin/kvserve")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--per-client", type=int, default=6)
    ap.add_argument("--drop-caches", action="store_true",
                    help="also measure L3 with the page cache dropped (needs root)")
    ap.add_argument("--text", default="tests/data/kjv_genesis_exodus.txt", help="for quality")
    ap.add_argument("--windows", type=int, default=40, help="perplexity windows for quality")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args()
    out = {}
    if "ttft" in args.parts:
        out["ttft"] = run_ttft(args)
        t = out["ttft"]
        print("| case | TTFT (median) | vs cold |\n|---|---|---|")
        for k, v in t.items():
            print(f"| {k} | {v * 1e3:.1f} ms | {t['cold'] / v:.1f}x |")
    if "working-set" in args.parts:
        out["working_set"] = run_working_set(args, [
            ("tiers off", [], False),
            ("L2 (10x L1)", ["--kv-offload-memory", str(10 * 188 * BLOCK_BYTES)], False),
            ("L2 (1x L1) + L3", ["--kv-offload-memory", str(188 * BLOCK_BYTES),
                                 "--kv-offload-dir", "{dir}", "--kv-offload-disk-admit", "0"],
             False),
            ("L3 alone, after a restart", ["--kv-offload-dir", "{dir}",
                                           "--kv-offload-disk-admit", "0"], True),
        ])
    if "admit" in args.parts:
        out["admit"] = run_working_set(args, [
            (f"admit {n}", ["--kv-offload-memory", str(188 * BLOCK_BYTES), "--kv-offload-dir",
                            "{dir}", "--kv-offload-disk-admit", str(n)], False)
            for n in (0, 1, 2)])
    if "extent" in args.parts:
        out["extent"] = {}
        for e in (1, 4, 16, 64):
            r = run_ttft(args, extent_blocks=e, only_l3=True)
            out["extent"][e] = r
            print(f"extent {e}: " + json.dumps(r), flush=True)
    if "quality" in args.parts:
        out["quality"] = run_quality(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
