"""CLI tests: bad input gets one clear line and a non-zero exit; --repeat shows prefix-cache reuse;
generate reports what it did. (That the planner agrees with the engine to the byte is a unit test:
tests/planner/engine_kv_shape_test.cpp.) Run by CTest with KVSERVE_BIN set."""
import json
import os
import subprocess
import unittest

BIN = os.environ.get("KVSERVE_BIN", "build/bin/kvserve")
MODEL = os.path.join(os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models")),
                     "SmolLM2-135M-Instruct.Q4_1.gguf")


def run(*args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}: {p.stderr}")
    return p


@unittest.skipUnless(os.path.exists(MODEL), "default model not fetched")
class Generate(unittest.TestCase):
    def test_repeat_reuses_the_prompt_prefix(self):
        prompt = " ".join(f"Rule {i}: answer every question politely and briefly." for i in range(20))
        out = json.loads(run("generate", "-p", prompt, "-n", "4", "--repeat", "2", "--json").stdout)
        first, second = out["runs"]
        self.assertEqual(first["cached_tokens"], 0)
        self.assertEqual(second["cached_tokens"], (first["prompt_tokens"] - 1) // 16 * 16)
        self.assertEqual(first["sequences"][0]["text"], second["sequences"][0]["text"])
        off = json.loads(run("generate", "-p", prompt, "-n", "4", "--repeat", "2", "--json",
                             "--no-enable-prefix-caching").stdout)
        self.assertEqual(off["runs"][1]["cached_tokens"], 0)
        self.assertEqual(off["runs"][1]["sequences"][0]["text"], first["sequences"][0]["text"])

    def test_parallel_reports_every_sequence(self):
        out = json.loads(run("generate", "-p", "Once upon a time", "-n", "6", "--parallel", "3", "--temp", "0.8",
                             "--seed", "5", "--json").stdout)
        seqs = out["runs"][0]["sequences"]
        self.assertEqual(len(seqs), 3)
        for s in seqs:
            self.assertGreater(s["generated_tokens"], 0)
        again = json.loads(run("generate", "-p", "Once upon a time", "-n", "6", "--parallel", "3", "--temp", "0.8",
                               "--seed", "5", "--json").stdout)
        self.assertEqual([s["text"] for s in seqs], [s["text"] for s in again["runs"][0]["sequences"]])

    def test_streams_text_and_prints_statistics(self):
        p = run("generate", "--chat", "-p", "Say hello.", "-n", "8")
        self.assertTrue(p.stdout.strip())
        for key in ("prompt tokens", "generated tokens", "prefill", "decode", "KV bytes/token", "KV bytes in use"):
            self.assertIn(key, p.stderr)
        self.assertIn("30 x 2 x 3 x 64 x 2 = 23,040 B", p.stderr)


class BadInput(unittest.TestCase):
    def assert_clean_failure(self, args, needle):
        p = run(*args, check=False)
        self.assertNotEqual(p.returncode, 0, args)
        self.assertNotIn("CHECK failed", p.stderr)
        self.assertIn(needle, p.stderr, args)
        self.assertLessEqual(len(p.stderr.strip().splitlines()), 3, p.stderr)

    def test_errors(self):
        self.assert_clean_failure(["generate", "-m", "/nonexistent.gguf", "-p", "x"], "does not exist")
        self.assert_clean_failure(["generate", "-m", __file__, "-p", "x"], "cannot load")
        self.assert_clean_failure(["perplexity", "-f", "/nonexistent.txt"], "cannot open")
        self.assert_clean_failure(["generate"], "prompt")
        self.assert_clean_failure(["frobnicate"], "frobnicate")
        if os.path.exists(MODEL):
            self.assert_clean_failure(["generate", "-p", "x", "--kv-cache-memory", "lots"], "--kv-cache-memory")
            self.assert_clean_failure(["generate", "-p", "x", "--kv-cache-memory", "1KiB"], "holds no block")
            self.assert_clean_failure(["generate", "-p", "x", "--block-size", "0"], "block")
            self.assert_clean_failure(["generate", "-p", "x", "--block-size", "300"], "block")
            self.assert_clean_failure(["generate", "-p", "x", "--kv-cache-dtype", "f12"], "f12")
            self.assert_clean_failure(["generate", "-p", "x", "--top-p", "0"], "top_p")
            self.assert_clean_failure(["generate", "-p", "x", "-n", "100000"], "maximum model length")

    def test_help_documents_every_subcommand(self):
        top = run("--help")
        for sub in ("generate", "perplexity", "plan"):
            self.assertIn(sub, top.stdout)
            h = run(sub, "--help").stdout
            self.assertIn("--", h)
        gen = run("generate", "--help").stdout
        for flag in ("--prompt", "--max-tokens", "--temp", "--top-k", "--top-p", "--seed", "--chat", "--parallel",
                     "--block-size", "--kv-cache-memory", "--json", "--threads", "--repeat"):
            self.assertIn(flag, gen)


if __name__ == "__main__":
    unittest.main()
