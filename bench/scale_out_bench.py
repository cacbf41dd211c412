#!/usr/bin/env python3
"""Scale-out benchmark: two kvserve replicas behind round-robin, with the Redis KV tier off and on,
and the cost of KV events (docs/scale-out.md has the results).

Parts:
  peer     TTFT on replica B of a prompt only replica A has computed (a ~1,500-token document and
           a new question), with --kv-remote off and on; median over --docs documents.
  rr       the shared-prefix workload (documents reused by several questions) round-robin over
           both replicas by --clients threads: TTFT p50/p99, requests/s, hit rate, tier off/on.
  events   one server, --clients streams of short fresh prompts and 128-token answers, with
           --kv-events-endpoint off and on (a subscriber attached), alternating, --rounds times:
           engine steps/s (kvserve_engine_steps_total over the run's wall time) and output
           tokens/s.

Example:
  python3 bench/scale_out_bench.py --kvserve build/bin/kvserve peer rr events
Starts its own redis-server (Debian's) on a free loopback port.
"""
import argparse
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_gen import Server, percentile, scrape_metrics, stream_chunks, usage_tokens  # noqa: E402

WORDS = ("memory cache block token request queue engine server model batch prefix latency "
         "budget stream decode prefill sequence tenant page pool replica router shard").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvs-bench-redis-")
        self.port = free_port()
        # The secret both replicas share (--kv-tier-secret-file), so that they share KV.
        self.secret_file = os.path.join(self.dir, "tier.secret")
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(32).hex().encode())
        os.close(fd)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--maxmemory", "2gb",
             "--maxmemory-policy", "allkeys-lru"], stdout=subprocess.DEVNULL)
        for _ in range(200):
            r = subprocess.run(["redis-cli", "-p", str(self.port), "PING"], capture_output=True,
                               text=True)
            if r.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def flush(self):
        subprocess.run(["redis-cli", "-p", str(self.port), "FLUSHALL"], capture_output=True)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def document(i, n_words=480):
    rng = random.Random(i)
    return "Document %d. " % i + " ".join(rng.choice(WORDS) + str(rng.randint(0, 99))
                                          for _ in range(n_words))


def ask(port, doc, question, max_tokens):
    body = {"stream": True, "stream_options": {"include_usage": True},
            "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "system", "content": doc}, {"role": "user", "content": question}]}
    t0, chunks = stream_chunks("127.0.0.1", port, "/v1/chat/completions", body, "", 600)
    ttft, tokens, cached = None, 0, 0
    for c in chunks:
        if c.get("usage"):
            tokens, cached = usage_tokens(c)
        elif ttft is None and any(ch.get("delta", {}).get("content") for ch in c["choices"]):
            ttft = time.perf_counter() - t0
    return ttft, tokens, cached


def replicas(args, redis, tier_on):
    flags = ["-t", str(args.threads), "--kv-cache-memory", args.pool, "--max-model-len", "2048"]
    if tier_on:
        flags += ["--kv-remote", f"redis://127.0.0.1:{redis.port}",
                  "--kv-tier-secret-file", redis.secret_file]
    return [Server(args.kvserve, flags), Server(args.kvserve, flags)]


def run_peer(args, redis):
    print("\n### TTFT on replica B of a prompt only replica A has seen\n")
    print("| Redis tier | TTFT on A (cold) | TTFT on B | B cached tokens | A / B |")
    print("|---|---|---|---|---|")
    for tier_on in (False, True):
        redis.flush()
        a, b = replicas(args, redis, tier_on)
        try:
            ta, tb, cb = [], [], []
            for d in range(args.docs):
                doc = document(1000 + d)
                ta.append(ask(a.port, doc, "Summarize it in one line.", 8)[0])
                time.sleep(0.3)  # A's blocks reach Redis
                t, _, c = ask(b.port, doc, "What is its first word?", 8)
                tb.append(t)
                cb.append(c)
        finally:
            a.stop()
            b.stop()
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f"| {'on' if tier_on else 'off'} | {ma * 1000:,.1f} ms | {mb * 1000:,.1f} ms | "
              f"{statistics.median(cb):,.0f} | {ma / mb:.1f}x |")


def run_rr(args, redis):
    print("\n### Round-robin over two replicas, shared-prefix workload\n")
    print("| Redis tier | requests | TTFT p50 | TTFT p99 | requests/s | cached / prompt tokens "
          "| of which from Redis |")
    print("|---|---|---|---|---|---|---|")
    for tier_on in (False, True):
        redis.flush()
        servers = replicas(args, redis, tier_on)
        ttfts, lock = [], threading.Lock()
        next_req = [0]
        ports = [s.port for s in servers]
        try:
            def client(k):
                rng = random.Random(k)
                while True:
                    with lock:
                        i = next_req[0]
                        next_req[0] += 1
                    if i >= args.requests:
                        return
                    doc = document(rng.randrange(args.docs))
                    t, _, _ = ask(ports[i % 2], doc, f"Question {i}: what is item {i}?", 16)
                    with lock:
                        ttfts.append(t)

            t0 = time.perf_counter()
            threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            q = h = r = 0
            for s in servers:
                m = scrape_metrics("127.0.0.1", s.port, "")
                q += m.get("kvserve_prefix_cache_queries_tokens_total", 0)
                # Blocks loaded from a tier are imported into the pool first, so the pool's hit
                # count includes them; the remote count says how many came from Redis.
                h += m.get("kvserve_prefix_cache_hits_tokens_total", 0)
                r += m.get('kvserve_kv_offload_prefix_cache_hits_tokens_total{tier="remote"}', 0)
        finally:
            for s in servers:
                s.stop()
        print(f"| {'on' if tier_on else 'off'} | {len(ttfts)} | "
              f"{percentile(ttfts, 50) * 1000:,.0f} ms | {percentile(ttfts, 99) * 1000:,.0f} ms | "
              f"{len(ttfts) / wall:.2f} | {h / max(q, 1):.1%} | {r / max(q, 1):.1%} |")


def run_events(args):
    import zmq
    print("\n### KV events overhead (one server)\n")
    print("| KV events | round | steps/s | output tokens/s | batches published "
          "| engine time per step | engine share | publisher thread share |")
    print("|---|---|---|---|---|---|---|---|")
    rows = {False: [], True: []}
    for rnd in range(args.rounds):
        for events_on in (False, True):
            flags = ["-t", str(args.threads), "--kv-cache-memory", "64MiB",
                     "--max-model-len", "2048", "--max-num-seqs", str(args.clients)]
            ctx = sub = None
            if events_on:
                port = free_port()
                flags += ["--kv-events-endpoint", f"tcp://127.0.0.1:{port}"]
            s = Server(args.kvserve, flags)
            stop = threading.Event()
            drainer = None
            if events_on:
                ctx = zmq.Context()
                sub = ctx.socket(zmq.SUB)
                sub.setsockopt(zmq.SUBSCRIBE, b"")
                sub.connect(f"tcp://127.0.0.1:{port}")

                def drain():
                    while not stop.is_set():
                        if sub.poll(50):
                            sub.recv_multipart()
                drainer = threading.Thread(target=drain, daemon=True)
                drainer.start()
            try:
                tokens, lock = [0], threading.Lock()

                def client(k):
                    rng = random.Random(rnd * 100 + k)
                    for i in range(args.per_client):
                        # Fresh prompts and long answers: mostly decode steps, and each
                        # sequence completes a block (an event) every 16 tokens.
                        doc = document(100000 + rnd * 1000 + k * 100 + i, 40)
                        _, n, _ = ask(s.port, doc, "Go on.", 128)
                        with lock:
                            tokens[0] += n
                m0 = scrape_metrics("127.0.0.1", s.port, "")
                t0 = time.perf_counter()
                threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - t0
                m1 = scrape_metrics("127.0.0.1", s.port, "")
            finally:
                stop.set()
                if drainer is not None:
                    drainer.join()
                s.stop()
                if sub is not None:
                    sub.close(linger=0)
                    ctx.term()
            steps = m1.get("kvserve_engine_steps_total", 0) - m0.get("kvserve_engine_steps_total", 0)
            rows[events_on].append(steps / wall)
            eng = (m1.get("kvserve_kv_events_engine_seconds_total", 0) -
                   m0.get("kvserve_kv_events_engine_seconds_total", 0))
            pub = (m1.get("kvserve_kv_events_publisher_seconds_total", 0) -
                   m0.get("kvserve_kv_events_publisher_seconds_total", 0))
            print(f"| {'on' if events_on else 'off'} | {rnd + 1} | {steps / wall:.1f} | "
                  f"{tokens[0] / wall:.1f} | "
                  f"{m1.get('kvserve_kv_events_batches_published_total', 0):.0f} | "
                  f"{eng * 1e6 / max(steps, 1):.1f} us | {eng / wall:.4%} | {pub / wall:.4%} |")
    on, off = statistics.median(rows[True]), statistics.median(rows[False])
    print(f"\nmedian steps/s on / off = {on / off:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="+", choices=["peer", "rr", "events"])
    ap.add_argument("--kvserve", default="build/bin/kvserve")
    ap.add_argument("--threads", type=int, default=1, help="-t of each replica")
    ap.add_argument("--pool", default="256MiB", help="--kv-cache-memory of each replica")
    ap.add_argument("--docs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--per-client", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"kvserve {args.kvserve}; CPU: " + next(
        (l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
        "?"))
    redis = Redis() if {"peer", "rr"} & set(args.parts) else None
    try:
        if "peer" in args.parts:
            run_peer(args, redis)
        if "rr" in args.parts:
            run_rr(args, redis)
        if "events" in args.parts:
            run_events(args)
    finally:
        if redis is not None:
            redis.stop()


if __name__ == "__main__":
    main()
