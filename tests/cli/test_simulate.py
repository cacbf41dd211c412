"""CLI tests of `kvserve simulate`: a small Mooncake-format trace through the real binary (summary,
--json with prefix_cache_hit_rate, --svg, --sweep table), the CSV format, and bad input (one clear
line naming the file and line, non-zero exit). Run by CTest with KVSERVE_BIN set."""
import json
import os
import subprocess
import tempfile
import unittest

BIN = os.environ.get("KVSERVE_BIN", "build/bin/kvserve")


def run(*args, check=True):
    p = subprocess.run([BIN, "simulate", *args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}: {p.stderr}")
    return p


class Simulate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.trace = os.path.join(cls.dir.name, "t.jsonl")
        with open(cls.trace, "w") as f:
            # Ten conversations of three turns: each turn repeats the previous prompt's blocks.
            for turn in range(3):
                for c in range(10):
                    ids = [0] + [1000 * c + k for k in range(1, 2 + 2 * turn)]
                    f.write(json.dumps({"timestamp": 2000 * turn + 50 * c,
                                        "input_length": 512 * len(ids) - 100,
                                        "output_length": 40, "hash_ids": ids}) + "\n")

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_summary_json_and_svg(self):
        svg = os.path.join(self.dir.name, "run.svg")
        p = run("--model", "llama-3.1-8b", "--gpu", "H100", "--trace", self.trace, "--svg", svg)
        for key in ("TTFT", "TPOT", "prefix cache", "preemptions", "30 of 30"):
            self.assertIn(key, p.stdout)
        with open(svg) as f:
            self.assertTrue(f.read().startswith("<svg"))
        out = json.loads(run("--model", "llama-3.1-8b", "--trace", self.trace, "--json").stdout)
        self.assertEqual(out["results"]["completed"], 30)
        rate = out["prefix_cache_hit_rate"]
        self.assertGreater(rate, 0.3)
        self.assertLessEqual(rate, 1.0)
        self.assertEqual(out["results"]["prefix_cache_hit_rate"], rate)
        off = json.loads(run("--model", "llama-3.1-8b", "--trace", self.trace, "--json",
                             "--no-enable-prefix-caching").stdout)
        self.assertEqual(off["prefix_cache_hit_rate"], 0)

    def test_sweep_table(self):
        p = run("--model", "llama-3.1-8b", "--trace", self.trace, "--sweep",
                "kv-cache-dtype=bf16,fp8", "--sweep", "gpus=1,2", "--sweep", "block-size=16,32")
        rows = [line for line in p.stdout.splitlines() if line.startswith(("bf16", "fp8"))]
        self.assertEqual(len(rows), 8)
        self.assertIn("hit rate", p.stdout)
        j = json.loads(run("--model", "llama-3.1-8b", "--trace", self.trace, "--json", "--sweep",
                           "gpus=1,2").stdout)
        self.assertEqual([r["settings"]["gpus"] for r in j["sweep"]], ["1", "2"])
        self.assertEqual(j["sweep"][1]["setup"]["replicas"], 2)
        # A layer list holds commas: its sweep values are separated by ';', and a list of two
        # layers is one run (more bytes per token, fewer blocks), not two runs of one layer.
        j = json.loads(run("--model", "llama-3.1-8b", "--trace", self.trace, "--json",
                           "--kv-cache-dtype-k", "int2_chan64", "--kv-cache-dtype-v", "int2_had",
                           "--block-size", "64", "--sweep",
                           "kv-cache-dtype-k-layers=3=int4_chan64;3=int4_chan64,5=int4_chan64")
                       .stdout)["sweep"]
        self.assertEqual([r["settings"]["kv-cache-dtype-k-layers"] for r in j],
                         ["3=int4_chan64", "3=int4_chan64,5=int4_chan64"])
        self.assertLess(j[1]["setup"]["num_blocks"], j[0]["setup"]["num_blocks"])

    def test_csv_trace(self):
        csv = os.path.join(self.dir.name, "azure.csv")
        with open(csv, "w") as f:
            f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
            for i in range(20):
                f.write(f"2023-11-16 18:15:{10 + i:02d}.5,{300 + 10 * i},{20 + i}\n")
        out = json.loads(run("--model", "llama-3.1-8b", "--trace", csv, "--json").stdout)
        self.assertEqual(out["results"]["completed"], 20)
        self.assertEqual(out["prefix_cache_hit_rate"], 0)  # CSV prompts share nothing

    def test_cpu_device_file(self):
        dev = os.path.join(self.dir.name, "cpu.json")
        with open(dev, "w") as f:
            json.dump({"device": "cpu", "linear_flops_per_s": 8e9, "attention_flops_per_s": 8e9,
                       "memory_bandwidth_bytes_per_s": 8e9, "step_overhead_s": 0.01,
                       "sequence_overhead_s": 0}, f)
        args = ["--device", "cpu", "--model", "llama-3.1-8b", "--kv-cache-memory", "4GiB",
                "--trace", self.trace, "--json", "--device-file"]
        slow = json.loads(run(*args, dev).stdout)
        self.assertEqual(slow["results"]["completed"], 30)
        self.assertEqual(slow["setup"]["device"], "cpu")
        with open(dev, "w") as f:  # twice the rates: every step (compute-bound) is faster
            json.dump({"device": "cpu", "linear_flops_per_s": 16e9, "attention_flops_per_s": 16e9,
                       "memory_bandwidth_bytes_per_s": 16e9, "step_overhead_s": 0.01,
                       "sequence_overhead_s": 0}, f)
        fast = json.loads(run(*args, dev).stdout)
        self.assertLess(fast["results"]["ttft_s"]["p50"], slow["results"]["ttft_s"]["p50"])
        with open(dev, "w") as f:
            f.write('{"linear_flops_per_s": "fast"}')
        p = run(*args, dev, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("linear_flops_per_s", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_step_log(self):
        log = os.path.join(self.dir.name, "steps.jsonl")
        out = json.loads(run("--model", "llama-3.1-8b", "--trace", self.trace, "--json",
                             "--step-log", log).stdout)
        with open(log) as f:
            steps = [json.loads(line) for line in f]
        self.assertEqual(len(steps), out["results"]["steps"])
        sampled = sum(c[4] for s in steps for c in s["chunks"])
        self.assertEqual(sampled, out["results"]["output_tokens"])
        self.assertTrue(all(a["start_s"] <= b["start_s"] for a, b in zip(steps, steps[1:])))
        for args, message in [(["--sweep", "gpus=1,2"], "leave it out of a --sweep"),
                              (["--gpus", "2"], "single replica")]:
            p = run("--model", "llama-3.1-8b", "--trace", self.trace, "--step-log", log, *args,
                    check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(message, p.stderr, args)
        p = run("--model", "llama-3.1-8b", "--trace", self.trace, "--step-log",
                "/nonexistent-dir/steps.jsonl", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("step log", p.stderr)

    def test_gpu_with_memory_keeps_the_roofline_and_replaces_the_memory(self):
        # --gpu H200 --memory 100GB: the H200's compute and bandwidth, 100 GB per GPU for the pool.
        base = ("--model", "llama-3.1-8b", "--trace", self.trace, "--json")
        both = json.loads(run(*base, "--gpu", "H200", "--memory", "100GB").stdout)["setup"]
        preset = json.loads(run(*base, "--gpu", "H200").stdout)["setup"]
        memory = json.loads(run(*base, "--memory", "100GB").stdout)["setup"]
        self.assertEqual(both["device"], "H200-141GB")
        self.assertTrue(both["gpu_memory_overridden"])
        self.assertFalse(preset["gpu_memory_overridden"])
        self.assertEqual(both["gpu_memory_bytes"], 100 * 10**9)
        self.assertEqual(both["device_model"]["memory_bandwidth"],
                         preset["device_model"]["memory_bandwidth"])
        self.assertNotEqual(both["device_model"]["memory_bandwidth"],
                            memory["device_model"]["memory_bandwidth"])  # --memory alone: H100
        self.assertEqual(both["num_blocks"], memory["num_blocks"])
        self.assertLess(both["num_blocks"], preset["num_blocks"])  # 100 GB < the H200's 150.75 GB
        text = run("--model", "llama-3.1-8b", "--trace", self.trace, "--gpu", "H200", "--memory",
                   "100GB").stdout
        self.assertIn("GPU H200-141GB with --memory 100GB: 100,000,000,000 B per GPU", text)
        # A sweep of memory keeps the --gpu preset's roofline.
        rows = json.loads(run(*base, "--gpu", "H200", "--sweep", "memory=90GB,100GB").stdout)["sweep"]
        self.assertEqual([r["setup"]["device"] for r in rows], ["H200-141GB"] * 2)
        self.assertEqual(rows[1]["setup"]["gpu_memory_bytes"], 100 * 10**9)
        for args, message in [(["--gpu", "H200", "--memory", "lots"], "--memory: "),
                              (["--gpu", "H9000", "--memory", "100GB"], "--gpu: unknown GPU"),
                              (["--gpu", "H200", "--memory", "0"], "--memory: must be more")]:
            p = run("--model", "llama-3.1-8b", "--trace", self.trace, *args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(message, p.stderr, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_pool_is_the_engines_with_key_tails_and_a_recent_window(self):
        # The simulator sizes the pool as the engine does for the same flags (`kvserve plan
        # --kv-cache-memory` shows the engine's pool): per-channel keys' tails and the recent-token
        # window's rings for --max-num-seqs sequences come out of the budget first.
        model = os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models"))
        gguf = os.path.join(model, "SmolLM2-135M-Instruct.Q4_1.gguf")
        if not os.path.exists(gguf):
            self.skipTest("SmolLM2 not fetched (scripts/fetch-model)")
        flags = ["--kv-cache-memory", "64MiB", "--kv-cache-dtype-k", "int4_chan",
                 "--kv-cache-dtype-v", "int4_had", "--max-num-seqs", "16"]
        for window in ("0", "64"):
            sim = json.loads(run("--device", "cpu", "--model", gguf, "--trace", self.trace, "--json",
                                 *flags, "--kv-recent-window", window).stdout)
            plan = subprocess.run([BIN, "plan", gguf, "--json", *flags, "--kv-recent-window", window],
                                  capture_output=True, text=True, check=True, timeout=60)
            engine = json.loads(plan.stdout)["engine_pool"]
            setup = sim["setup"]
            self.assertEqual(setup["num_blocks"], engine["num_blocks"], window)
            self.assertEqual(setup["key_tail_bytes_per_rank"], engine["key_tail_bytes"], window)
            self.assertEqual(setup["recent_window_bytes_per_rank"], engine["recent_window_bytes"],
                             window)
            self.assertEqual(setup["recent_window"], int(window))
            self.assertGreater(setup["key_tail_bytes_per_rank"], 0)
            self.assertEqual(sim["results"]["completed"], 30)
        text = run("--device", "cpu", "--model", gguf, "--trace", self.trace, *flags,
                   "--kv-recent-window", "64").stdout
        self.assertIn("B of recent window (--kv-recent-window 64)", text)
        for args, message in [(["--kv-recent-window", "17"], "--kv-recent-window must be a multiple"),
                              (["--kv-recent-window", "64", "--preemption-mode", "swap",
                                "--swap-space", "64MiB"], "needs --preemption-mode recompute")]:
            p = run("--device", "cpu", "--model", gguf, "--trace", self.trace, *flags, *args,
                    check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(message, p.stderr, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_bad_input_is_one_clear_line(self):
        bad = os.path.join(self.dir.name, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"timestamp": 0, "input_length": 10, "output_length": 1}\n{"timestamp": 1}\n')
        cases = [
            (["--model", "llama-3.1-8b", "--trace", bad], "bad.jsonl line 2: 'input_length'"),
            (["--model", "llama-3.1-8b", "--trace", "/nonexistent.jsonl"], "cannot open trace"),
            (["--model", "llama-3.1-8b"], "--trace FILE is required"),
            (["--model", "deepseek-v3", "--trace", self.trace], "a model the engine can run"),
            (["--model", "llama-3.1-8b", "--trace", self.trace, "--sweep", "colour=red"],
             "unknown key 'colour'"),
            (["--model", "llama-3.1-8b", "--trace", self.trace, "--device", "cpu"],
             "--device cpu needs --kv-cache-memory"),
        ]
        for args, message in cases:
            p = run(*args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(message, p.stderr, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_config_file(self):
        """--config: the trace, an on/off pair's `false` and a list of --sweep values from YAML;
        --enable-prefix-caching on the command line wins over the file's false."""
        cfg = os.path.join(self.dir.name, "sim.yaml")
        with open(cfg, "w") as f:
            f.write(f"model: llama-3.1-8b\ntrace: {self.trace}\nenable_prefix_caching: false\n"
                    "json: true\n")
        self.assertEqual(json.loads(run("--config", cfg).stdout)["prefix_cache_hit_rate"], 0)
        on = json.loads(run("--config", cfg, "--enable-prefix-caching").stdout)
        self.assertGreater(on["prefix_cache_hit_rate"], 0.3)
        with open(cfg, "a") as f:
            f.write("sweep:\n  - kv-cache-dtype=bf16,fp8\n  - gpus=1,2\n")

        def results(p):  # without the runs' wall-clock seconds
            rows = json.loads(p.stdout)["sweep"]
            for row in rows:
                row["results"].pop("wall_s")
            return rows

        rows = results(run("--config", cfg))
        self.assertEqual(len(rows), 4)
        self.assertEqual(rows, results(run("--model", "llama-3.1-8b", "--trace", self.trace, "--json",
                                           "--no-enable-prefix-caching", "--sweep", "kv-cache-dtype=bf16,fp8",
                                           "--sweep", "gpus=1,2")))


if __name__ == "__main__":
    unittest.main()
