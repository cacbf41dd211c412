#!/usr/bin/env python3
"""What polling the KV views costs decode (the trust review's finding 9).

Starts `kvserve serve`, runs a decode workload (--streams concurrent streaming requests of
--tokens tokens each, ignore_eos) and measures output tokens/s, alternating rounds without
pollers and with --pollers clients each polling /v1/kv (and one /metrics and one /v1/kv/stream
reader) as fast as they can. Prints the median of each and their ratio, and how many views the
engine thread took (kvserve_kv_views_taken_total).

    python3 bench/kv_view_poll_bench.py --kvserve build/bin/kvserve --threads 1 --rounds 3
"""
import argparse
import http.client
import json
import os
import re
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_gen import Server, stream_chunks, usage_tokens  # noqa: E402


def decode_rate(port, streams, tokens):
    done = []

    def one(i):
        body = {"prompt": "Tell a long story about the number %d." % i, "max_tokens": tokens,
                "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        _, chunks = stream_chunks("127.0.0.1", port, "/v1/completions", body, "", 600)
        n = 0
        for c in chunks:
            if c.get("usage"):
                n = usage_tokens(c)[0]
        done.append(n)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - t0)


def poller(port, route, stop, counter):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not stop.is_set():
        conn.request("GET", route)
        r = conn.getresponse()
        r.read()
        counter[0] += 1


def stream_reader(port, stop):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/v1/kv/stream")
    r = conn.getresponse()
    while not stop.is_set():
        if not r.fp.readline():
            break
    conn.close()


def views_taken(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    m = re.search(r"^kvserve_kv_views_taken_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvserve", default="build/bin/kvserve")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=192)
    ap.add_argument("--pollers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    server = Server(args.kvserve, ["-t", str(args.threads), "--kv-cache-memory", "256MiB",
                                   "--max-model-len", "1024"])
    try:
        decode_rate(server.port, 1, 8)  # warm up
        quiet, polled, polls, taken = [], [], [], []
        for _ in range(args.rounds):
            quiet.append(decode_rate(server.port, args.streams, args.tokens))
            stop, counter = threading.Event(), [0]
            before = views_taken(server.port)
            workers = [threading.Thread(target=poller, args=(server.port, "/v1/kv", stop, counter))
                       for _ in range(args.pollers)]
            workers.append(threading.Thread(target=poller,
                                            args=(server.port, "/metrics", stop, counter)))
            workers.append(threading.Thread(target=stream_reader, args=(server.port, stop)))
            for w in workers:
                w.daemon = True
                w.start()
            t0 = time.perf_counter()
            polled.append(decode_rate(server.port, args.streams, args.tokens))
            secs = time.perf_counter() - t0
            stop.set()
            polls.append(counter[0] / secs)
            taken.append((views_taken(server.port) - before) / secs)
        q, p = statistics.median(quiet), statistics.median(polled)
        print(json.dumps({"threads": args.threads, "streams": args.streams,
                          "decode_tok_s_quiet": round(q, 1), "decode_tok_s_polled": round(p, 1),
                          "polled_over_quiet": round(p / q, 3),
                          "polls_per_s": round(statistics.median(polls), 1),
                          "engine_views_per_s": round(statistics.median(taken), 1),
                          "rounds": args.rounds}))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
