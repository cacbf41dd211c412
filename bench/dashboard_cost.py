#!/usr/bin/env python3
"""What an open dashboard costs, and how the page keeps up (docs/serving.md, "Dashboard").

Throughput (default): one server, the load generator's shared workload (bench/load_gen.py) run
in rounds, each round once per mode, the order rotating so that drift on a shared machine hits
every mode alike:
  none     no dashboard;
  stream   one client reading /v1/kv/stream and parsing every frame (the server's whole cost);
  browser  headless Chromium showing /dashboard (adds the browser's CPU on this machine).
Reported: output tokens/s per round and mode, each mode's median ratio to `none` within the
same round, and the server's CPU time (all its threads, /proc) per output token, which other
load on a shared machine disturbs much less than wall-clock throughput.

Large pool (--large): a 100,000-block pool (block size 1), the dashboard open in Chromium, load
running (short prompts, so that engine steps stay shorter than the 100 ms tick); reports the page's own numbers: updates/s, update latency (view taken on the server ->
frame drawn), work per drawn frame, animation-frame gaps (probeFrames), first draw, long tasks,
and the server's cost per update.

  python3 bench/dashboard_cost.py --kvserve build/bin/kvserve --rounds 5
  python3 bench/dashboard_cost.py --kvserve build/bin/kvserve --large
Needs chromium, chromium-driver and selenium (scripts/install-deps) for the browser modes.
"""
import argparse
import http.client
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_gen  # noqa: E402

KEY = "bench-key"


class StreamReader:
    """Reads /v1/kv/stream and parses every frame, as a page would."""

    def __init__(self, port):
        self.frames = 0
        self.bytes = 0
        self.cost_us = []  # the server's own account per frame: view (engine thread) + encode
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(port,), daemon=True)
        self.thread.start()

    def run(self, port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/v1/kv/stream", headers={"Authorization": "Bearer " + KEY})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        while not self.stop.is_set():
            line = resp.readline()
            if not line:
                break
            self.bytes += len(line)
            if line.startswith(b"data: "):
                frame = json.loads(line[6:])
                self.cost_us.append(frame["cost_us"]["view"] + frame["cost_us"]["encode"])
                self.frames += 1
        conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)


class Browser:
    def __init__(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        self.profile = tempfile.mkdtemp(prefix="kvserve-dash-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = shutil.which("chromium")
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  f"--user-data-dir={self.profile}", "--window-size=1440,1100",
                  "--disable-background-networking", "--disable-extensions",
                  "--proxy-server=127.0.0.1:9"]:
            opts.add_argument(a)
        self.driver = webdriver.Chrome(
            service=Service(executable_path=shutil.which("chromedriver")), options=opts)
        self.driver.set_script_timeout(60)

    def open(self, port):
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
        d = self.driver
        d.get(f"http://127.0.0.1:{port}/dashboard")
        # The first time the page asks for the key; later it has it (sessionStorage of the tab).
        WebDriverWait(d, 30).until(lambda d: d.execute_script(
            "return !document.getElementById('auth').hidden || window.kvDashboard.ready()"))
        if not d.execute_script("return document.getElementById('auth').hidden"):
            d.find_element(By.ID, "auth-key").send_keys(KEY)
            d.find_element(By.CSS_SELECTOR, "#auth button").click()
        WebDriverWait(d, 60).until(lambda d: d.execute_script("return window.kvDashboard.ready()"))

    def perf(self):
        return self.driver.execute_script("return window.kvDashboard.perf()")

    def probe_frames(self, ms):
        return self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            f"window.kvDashboard.probeFrames({ms}).then(done);")

    def close_page(self):
        self.driver.get("about:blank")

    def quit(self):
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)


def cpu_seconds(pid):
    """User + system CPU time of a process, all its threads (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(args):
    server = load_gen.Server(args.kvserve, shlex.split(args.server_args) + ["--api-key", KEY])
    port = server.port
    modes = args.modes.split(",")
    browser = Browser() if "browser" in modes else None
    results = {m: [] for m in modes}
    cpu_ms = {m: [] for m in modes}  # server CPU ms (all its threads) per output token
    try:
        load_gen.run_level("127.0.0.1", port, "shared", 1, 1, 4, KEY, seed=999)  # warm-up
        per_client = max(1, -(-args.requests // args.concurrency))
        for r in range(args.rounds):
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            for k, mode in enumerate(order):
                reader = None
                if mode == "stream":
                    reader = StreamReader(port)
                elif mode == "browser":
                    browser.open(port)
                time.sleep(1)
                cpu0 = cpu_seconds(server.proc.pid)
                res = load_gen.run_level("127.0.0.1", port, "shared", args.concurrency,
                                         per_client, args.max_tokens, KEY,
                                         # Fresh questions for every run: the same seed twice
                                         # in a round made the second run's prompts whole
                                         # prefix-cache hits (1.25x "faster" for whichever mode
                                         # ran second).
                                         seed=r * len(modes) + k)
                tokens = res["output_tokens_per_s"] * res["wall_s"]
                cpu_ms[mode].append(1e3 * (cpu_seconds(server.proc.pid) - cpu0) / tokens)
                extra = ""
                if reader:
                    reader.close()
                    extra = (f" frames={reader.frames} bytes={reader.bytes} server cost per "
                             f"frame p50={statistics.median(reader.cost_us):.0f} us "
                             f"max={max(reader.cost_us)} us")
                if mode == "browser":
                    p = browser.perf()
                    extra = f" updates/s={p['updates_per_s']:.1f}"
                    browser.close_page()
                results[mode].append(res["output_tokens_per_s"])
                print(f"round {r} {mode:8s} {res['output_tokens_per_s']:8.1f} output tok/s "
                      f"{cpu_ms[mode][-1]:7.1f} server CPU ms/token "
                      f"({res['requests']} requests, {res['errors']} errors){extra}", flush=True)
    finally:
        if browser:
            browser.quit()
        server.stop()
    print("\n| mode | output tok/s per round | median | median ratio to none (same round) "
          "| server CPU ms per output token, median |")
    print("|---|---|---|---|---|")
    for m in modes:
        ratios = [v / n for v, n in zip(results[m], results.get("none", []))]
        ratio = f"{statistics.median(ratios):.3f}" if ratios else "-"
        print(f"| {m} | {', '.join(f'{v:.1f}' for v in results[m])} | "
              f"{statistics.median(results[m]):.1f} | {ratio} | "
              f"{statistics.median(cpu_ms[m]):.1f} |")


def large(args):
    server = load_gen.Server(args.kvserve, [
        "--kv-cache-memory", "2304000000", "--block-size", "1", "--max-model-len", "2048",
        "--max-num-seqs", "16", "--api-key", KEY] + shlex.split(args.large_args))
    browser = Browser()
    stop = threading.Event()
    try:
        browser.open(server.port)
        first = browser.perf()

        done = {"requests": 0, "errors": 0, "output_tokens": 0}
        lock = threading.Lock()

        def client(k):
            # Short prompts (about 60 tokens, a distinct one per request): steps stay short, so
            # the update rate is the server's tick, not the engine's step time (a ~1,000-token
            # prefill step takes seconds on a loaded 2-vCPU machine, and no update can be
            # taken inside a step).
            i = 0
            while not stop.is_set():
                body = {"messages": [{"role": "user", "content":
                                      f"Client {k}, question {i}: name three rivers and one "
                                      "fact about each, in one short sentence per river."}],
                        "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                        "stream": True, "stream_options": {"include_usage": True}}
                try:
                    r = load_gen.one_request("127.0.0.1", server.port, body, KEY)
                    with lock:
                        done["requests"] += 1
                        done["output_tokens"] += r[2]
                except Exception:  # noqa: BLE001 - counted, reported, fails the run
                    with lock:
                        done["errors"] += 1
                i += 1

        threads = [threading.Thread(target=client, args=(k,), daemon=True)
                   for k in range(args.large_concurrency)]
        for t in threads:
            t.start()
        time.sleep(3)
        frames = browser.probe_frames(args.seconds * 1000)
        perf = browser.perf()
        stop.set()
        for t in threads:
            t.join(timeout=600)
        print(json.dumps({"load": done, "first_draw_ms": first["first_draw_ms"],
                          "frame_gaps_ms": frames, **perf}, indent=1))
        if done["errors"] or not done["requests"]:
            sys.exit(f"the load failed: {done}")
    finally:
        browser.quit()
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvserve", required=True)
    ap.add_argument("--server-args",
                    default="--kv-cache-memory 1GiB --max-model-len 2048 --max-num-seqs 64 -t 1")
    ap.add_argument("--modes", default="none,stream,browser")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--large", action="store_true", help="the 100,000-block page measurement")
    ap.add_argument("--large-args", default="-t 1")
    ap.add_argument("--large-concurrency", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=10, help="--large: frame-probe duration")
    args = ap.parse_args()
    if args.large:
        large(args)
    else:
        throughput(args)


if __name__ == "__main__":
    main()
