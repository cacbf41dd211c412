#!/usr/bin/env python3
"""Load generator for `kvserve serve` (standard library only).

Starts a server with the given flags (or uses --url), then for each concurrency level runs C
client threads, each sending --requests-per-client streaming chat requests back to back, and
reports requests/s, output tokens/s, time to first token and inter-token latency (p50/p99).

Workloads:
  shared  every request carries the same ~1,000-token system prompt, then a short unique
          question (the prefix cache can serve the system prompt);
  unique  every request starts with its own random text of the same length (nothing to share).

Example:
  python3 bench/load_gen.py --kvserve build/bin/kvserve --workload shared \\
      --concurrency 1,8,32,64 --server-args "--kv-cache-memory 1GiB -t 2"
  python3 bench/load_gen.py --llama-server PATH/llama-server --model MODEL.gguf \\
      --workload unique --concurrency 1,16 --server-args "-t 2 -np 16 -c 32768"
(the same clients against llama.cpp's server: --server-args are then llama-server's flags)
(bench/serve_bench.sh runs the whole matrix of docs/benchmarks.md.)
Output: one markdown table row per level (and --json FILE for the raw numbers).
"""
import argparse
import http.client
import json
import os
import random
import re
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time

WORDS = ("memory cache block token request queue engine server model batch prefix "
         "latency budget stream decode prefill sequence tenant page pool").split()


def shared_system_prompt(n_sentences=37):
    rules = [f"Rule {i}: when the user asks about topic {i}, answer in one short sentence and "
             f"mention rule {i}." for i in range(n_sentences)]
    return "You are the support assistant of a library. " + " ".join(rules)


def unique_prefix(rng, n_words=60):
    return " ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(n_words))


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Server:
    def __init__(self, binary, args):
        cmd = [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--quiet-preemptions",
               *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True)
        self.port = None
        self.report = []
        for line in self.proc.stderr:
            self.report.append(line.rstrip())
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            raise SystemExit("server did not start:\n" + "\n".join(self.report))
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


class LlamaServer:
    """llama.cpp's llama-server on a free loopback port, ready once /health answers 200."""

    def __init__(self, binary, model, args):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"llama-server exited with {self.proc.returncode}: {cmd}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/health")
                ok = conn.getresponse().status == 200
                conn.close()
                if ok:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit("llama-server did not become healthy within 180 s")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def stream_chunks(host, port, route, body, api_key, timeout):
    """POSTs a streaming request; returns (t0, generator of its decoded SSE chunks until [DONE]).
    The connection closes when the generator is exhausted."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    t0 = time.perf_counter()
    conn.request("POST", route, json.dumps(body), headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")

    def chunks():
        try:
            for line in iter(resp.readline, b""):
                line = line.strip()
                if not line.startswith(b"data: "):
                    continue
                if line[6:] == b"[DONE]":
                    return
                yield json.loads(line[6:])
        finally:
            conn.close()

    return t0, chunks()


def usage_tokens(chunk):
    """(completion tokens, cached prompt tokens) of a usage chunk."""
    u = chunk["usage"]
    return u["completion_tokens"], (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def one_request(host, port, body, api_key):
    """Streams one chat completion; returns (ttft, [inter-token gaps], completion tokens)."""
    t0, chunks = stream_chunks(host, port, "/v1/chat/completions", body, api_key, timeout=600)
    ttft, first, last, gaps, tokens, cached, pieces = None, None, None, [], 0, 0, 0
    for chunk in chunks:
        if chunk.get("usage"):
            tokens, cached = usage_tokens(chunk)
        for c in chunk.get("choices", []):
            if c.get("delta", {}).get("content"):
                pieces += 1
                now = time.perf_counter()
                if ttft is None:
                    ttft = now - t0
                    first = now
                else:
                    gaps.append(now - last)
                last = now
    # A server that sends no usage chunk: one streamed piece per token.
    return ttft, gaps, tokens or pieces, cached, first, last


def scrape_metrics(host, port, api_key):
    """Every sample of /metrics: {'name{labels}': value}."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    conn.request("GET", "/metrics", headers=headers)
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def preemptions(host, port, api_key):
    """kvserve_preemptions_total summed over modes (from /metrics); 0 for a server without it."""
    try:
        samples = scrape_metrics(host, port, api_key)
    except (OSError, ValueError):
        return 0
    return sum(v for k, v in samples.items() if k.startswith("kvserve_preemptions_total{"))


def run_level(host, port, workload, concurrency, per_client, max_tokens, api_key, seed):
    rng = random.Random(seed)
    system = shared_system_prompt()
    bodies = []
    for i in range(concurrency * per_client):
        question = f"Question {seed}-{i}: what does rule {rng.randint(0, 74)} say?"
        if workload == "shared":
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        else:
            msgs = [{"role": "system", "content": unique_prefix(rng)},
                    {"role": "user", "content": question}]
        bodies.append({"messages": msgs, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    results, errors = [], []
    lock = threading.Lock()

    def client(k):
        for j in range(per_client):
            try:
                r = one_request(host, port, bodies[k * per_client + j], api_key)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - report, keep going
                with lock:
                    errors.append(str(e))

    preempted_before = preemptions(host, port, api_key)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    preempted = preemptions(host, port, api_key) - preempted_before
    ttfts = [r[0] for r in results if r[0] is not None]
    gaps = [g for r in results for g in r[1]]
    tokens = sum(r[2] for r in results)
    # Aggregate decode throughput: tokens after each stream's first token, over the union of
    # the streams' [first token, last token] intervals (time in which some stream decoded;
    # prefill steps interleaved with decodes count, idle gaps between requests do not).
    spans = sorted((r[4], r[5]) for r in results if r[4] is not None and r[1])
    busy, cur_start, cur_end = 0.0, None, None
    for a, b in spans:
        if cur_end is None or a > cur_end:
            if cur_end is not None:
                busy += cur_end - cur_start
            cur_start, cur_end = a, b
        else:
            cur_end = max(cur_end, b)
    if cur_end is not None:
        busy += cur_end - cur_start
    decode_tps = sum(len(r[1]) for r in results) / busy if busy > 0 else 0
    return {"workload": workload, "concurrency": concurrency, "requests": len(results),
            "errors": len(errors), "wall_s": wall, "requests_per_s": len(results) / wall,
            "output_tokens_per_s": tokens / wall,
            "decode_tokens_per_s": decode_tps,
            "ttft_p50_ms": percentile(ttfts, 50) * 1e3, "ttft_p99_ms": percentile(ttfts, 99) * 1e3,
            "itl_p50_ms": percentile(gaps, 50) * 1e3, "itl_p99_ms": percentile(gaps, 99) * 1e3,
            "preemptions": preempted,
            "cached_tokens_mean": statistics.mean([r[3] for r in results]) if results else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvserve", help="kvserve binary: start a server with --server-args")
    ap.add_argument("--server-args", default="",
                    help="flags for kvserve serve (or for llama-server with --llama-server)")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary: start it instead")
    ap.add_argument("--model", help="GGUF for --llama-server (default: the cached default model)")
    ap.add_argument("--url", help="use a running server instead, e.g. http://127.0.0.1:8000")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--workload", choices=["shared", "unique"], default="shared")
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--min-requests", type=int, default=8,
                    help="requests per level at least (clients send ceil(this / C) each)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--label", default="", help="first column of the table rows")
    ap.add_argument("--json", help="append the raw results (JSON lines) to this file")
    args = ap.parse_args()
    server = None
    if args.url:
        m = re.match(r"http://([^:/]+):(\d+)", args.url)
        host, port = m.group(1), int(m.group(2))
    elif args.llama_server:
        fetch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                             "fetch-model")
        model = args.model or subprocess.run([fetch], check=True, text=True,
                                              capture_output=True).stdout.strip().splitlines()[-1]
        server = LlamaServer(args.llama_server, model, shlex.split(args.server_args))
        host, port = "127.0.0.1", server.port
    else:
        if not args.kvserve:
            raise SystemExit("give --kvserve, --llama-server or --url")
        server = Server(args.kvserve, shlex.split(args.server_args))
        host, port = "127.0.0.1", server.port
    try:
        # Warm-up (not measured; for the shared workload it also fills the prefix cache, as a
        # long-running server's would be).
        run_level(host, port, args.workload, 1, 1, 4, args.api_key, seed=999)
        for c in [int(x) for x in args.concurrency.split(",")]:
            per_client = max(1, -(-args.min_requests // c))
            r = run_level(host, port, args.workload, c, per_client, args.max_tokens,
                          args.api_key, seed=c)
            r["label"] = args.label
            print(f"| {args.label} | {args.workload} | {c} | {r['requests']} | "
                  f"{r['requests_per_s']:.2f} | {r['output_tokens_per_s']:.1f} | "
                  f"{r['decode_tokens_per_s']:.1f} | "
                  f"{r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} | {r['itl_p50_ms']:.1f} | "
                  f"{r['itl_p99_ms']:.1f} | {r['cached_tokens_mean']:.0f} | "
                  f"{r['preemptions']:.0f} | {r['errors']} |",
                  flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
    finally:
        if server:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
