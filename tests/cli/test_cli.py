"""CLI tests: bad input gets one clear line and a non-zero exit; --repeat shows prefix-cache reuse;
generate reports what it did. (That the planner agrees with the engine to the byte is a unit test:
tests/planner/engine_kv_shape_test.cpp.) Run by CTest with KVSERVE_BIN set."""
import json
import os
import subprocess
import tempfile
import sys
import unittest

# tests/support/prerequisites.py: a missing model skips locally and fails under CI=true.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from prerequisites import requires  # noqa: E402

BIN = os.environ.get("KVSERVE_BIN", "build/bin/kvserve")
MODEL = os.path.join(os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models")),
                     "SmolLM2-135M-Instruct.Q4_1.gguf")
# The 2-bit recipe's pool flags at a small size: 2-bit keys (the widest quarter of channels at 3
# bits) and values in blocks of 64, an int8 window with the sink, and per-layer formats.
TWO_BIT_RECIPE_FLAGS = [
    "--kv-cache-dtype-k", "int2mix_chan64", "--kv-cache-dtype-v", "int2_had64", "--block-size", "64",
    "--kv-cache-memory", "96MiB", "--max-num-seqs", "8", "--kv-recent-window", "64",
    "--kv-recent-window-dtype", "int8", "--kv-attention-sink", "--kv-cache-dtype-k-layers",
    "18=int4_chan64", "--kv-cache-dtype-v-layers", "1=int3_had"]


def run(*args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}: {p.stderr}")
    return p


@requires(os.path.exists(MODEL), "default model not fetched (scripts/fetch-model)")
class KvOffload(unittest.TestCase):
    def test_a_second_generate_finds_what_the_first_stored_on_disk(self):
        prompt = " ".join(f"Clause {i}: the tenant keeps the garden tidy." for i in range(25))
        with tempfile.TemporaryDirectory() as d:
            flags = ["-n", "6", "--json", "--kv-offload-dir", d, "--kv-offload-disk-admit", "0"]
            first = json.loads(run("generate", "-p", prompt, *flags).stdout)
            second = json.loads(run("generate", "-p", prompt, *flags).stdout)
        a, b = first["runs"][0], second["runs"][0]
        self.assertEqual(a["cached_tokens"], 0)
        self.assertEqual(b["cached_tokens"], (a["prompt_tokens"] - 1) // 16 * 16)
        self.assertEqual(b["sequences"][0]["text"], a["sequences"][0]["text"])
        self.assertEqual(second["kv_offload"]["disk"]["hit_tokens"], b["cached_tokens"])

    def test_perplexity_with_each_window_prefix_from_the_tier_is_unchanged(self):
        text = os.path.join(os.path.dirname(__file__), "..", "data", "kjv_genesis_exodus.txt")
        with tempfile.TemporaryDirectory() as d:
            flags = ["perplexity", "-f", text, "--ctx", "256", "--max-windows", "4", "--json",
                     "--kv-offload-dir", d, "--kv-offload-disk-admit", "0"]
            first = json.loads(run(*flags).stdout)
            second = json.loads(run(*flags).stdout)
        self.assertEqual(first["kv_offload"]["disk"]["hit_tokens"], 0)
        self.assertEqual(second["kv_offload"]["disk"]["hit_tokens"], 4 * 128)
        self.assertEqual(second["perplexity"], first["perplexity"])

    def test_bad_offload_flags_are_one_clear_line(self):
        for args, needle in [
            (["--kv-offload-memory", "lots"], "--kv-offload-memory"),
            (["--kv-offload-policy", "sometimes"], "--kv-offload-policy"),
            (["--kv-offload-dtype", "int3"], "--kv-offload-dtype"),
            (["--kv-offload-dir", "/proc/no-such-dir/x"], "--kv-offload-dir"),
            (["--kv-offload-dir", "/tmp", "--kv-offload-extent-blocks", "0"],
             "--kv-offload-extent-blocks"),
        ]:
            p = run("generate", "-p", "hi", "-n", "1", *args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(needle, p.stderr, args)
            self.assertLessEqual(len(p.stderr.strip().splitlines()), 2, p.stderr)

    def test_plan_reports_prefix_tokens_per_tier_and_format(self):
        out = json.loads(run("plan", "--model", "SmolLM2-135M", "--memory", "24GiB",
                             "--kv-offload-memory", "1GiB", "--kv-offload-disk-bytes", "4GiB",
                             "--json").stdout)
        rows = {r["kv_cache_dtype"]: r for r in out["kv_offload"]["formats"]}
        self.assertEqual(rows["f16"]["host_prefix_tokens"], (1 << 30) // (23040 * 16) * 16)
        self.assertGreater(rows["int4_had"]["disk_prefix_tokens"], 3 * rows["f16"]["disk_prefix_tokens"])


@requires(os.path.exists(MODEL), "default model not fetched (scripts/fetch-model)")
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

    def test_json_reports_the_weights_in_the_file_and_in_memory(self):
        out = json.loads(run("generate", "-p", "Hi", "-n", "2", "--json").stdout)
        # SmolLM2's Q4_1 and Q8_0 weights are packed at load into exactly their file bytes.
        self.assertGreater(out["weights_bytes"], 90_000_000)
        self.assertEqual(out["weights_resident_bytes"], out["weights_bytes"])
        self.assertGreaterEqual(out["weights_pack_seconds"], 0)
        self.assertLess(out["weights_pack_seconds"], 30)
        none = subprocess.run([BIN, "generate", "-p", "Hi", "-n", "2", "--json"], env={
            **os.environ, "KVSERVE_INT8_ISA": "none"}, capture_output=True, text=True, check=True,
            timeout=300)
        self.assertEqual(json.loads(none.stdout)["weights_pack_seconds"], 0)

    def generate_and_plan(self, flags):
        # `generate --json` and `plan --json`'s engine pool with the same flags.
        gen = json.loads(run("generate", "-p", "The sea", "-n", "20", "--ignore-eos", "--json",
                             *flags).stdout)
        plan = json.loads(run("plan", MODEL, "--context", "2048", "--json", *flags).stdout)
        return gen, plan["engine_pool"]

    def assert_generate_refuses(self, *cases):
        # Each (flags, message): `generate` with those flags fails with that message, no crash.
        for bad, says in cases:
            r = run("generate", "-p", "Hi", "-n", "1", *bad, check=False)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(says, r.stderr)
            self.assertNotIn("internal error", r.stderr)

    def test_recent_window_pool_is_the_planners_to_the_byte(self):
        # --kv-recent-window keeps each sequence's newest tokens in f16 beside the pool: rings
        # for --max-num-seqs sequences come out of the budget first, in the engine and the plan.
        flags = ["--kv-cache-dtype-k", "int2_chan", "--kv-cache-dtype-v", "int2_had",
                 "--kv-cache-memory", "96MiB", "--max-num-seqs", "8", "--kv-recent-window", "64"]
        gen, pool = self.generate_and_plan(flags)
        self.assertEqual(gen["kv_recent_window"], 64)
        self.assertEqual(gen["kv_recent_window_bytes"], 8 * 30 * 3 * (64 + 16) * 64 * 2 * 2)
        self.assertEqual(pool["recent_window_bytes"], gen["kv_recent_window_bytes"])
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        self.assertEqual(pool["num_blocks"],
                         (96 * 2**20 - gen["kv_key_tail_bytes"] - gen["kv_recent_window_bytes"])
                         // (16 * gen["kv_bytes_per_token"]))
        text = run("plan", MODEL, "--context", "2048", *flags).stdout
        self.assertIn("recent window 8 (--max-num-seqs) x 30 layers", text)
        # Windows the engine cannot keep exact: one clear line each.
        self.assert_generate_refuses(
            (["--kv-recent-window", "24"], "multiple of 16"),
            (["--kv-recent-window", "64", "--kv-cache-memory", "8MiB"],
             "does not hold the recent-token window"))

    def test_int8_window_and_the_6x_pair_are_the_planners_to_the_byte(self):
        # --kv-recent-window-dtype int8: rows of 64 int8 and an f16 scale (66 B) where f16 takes
        # 128, the sink's rows still f16; with the 2-bit pair int2mix_chan64/int2_had64 in blocks
        # of 64 and per-layer formats, the engine's pool is the plan's, to the byte.
        flags = TWO_BIT_RECIPE_FLAGS
        gen, pool = self.generate_and_plan(flags)
        rows = 8 * 30 * 3
        self.assertEqual(gen["kv_recent_window_bytes"],
                         rows * (64 + 16) * 66 * 2 + rows * 2 * 64 * 2 * 2)
        self.assertEqual(pool["recent_window_bytes"], gen["kv_recent_window_bytes"])
        self.assertEqual(pool["recent_window_dtype"], "int8")
        self.assertEqual(gen["kv_recent_window_dtype"], "int8")
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        # 40 B per token and KV head, + the listed layers' 14 (K) and 10 (V) x 3 heads.
        self.assertEqual(gen["kv_bytes_per_token"], 30 * 3 * 40 + 3 * 14 + 3 * 10)
        self.assertGreater(gen["generated_tokens"], 0)
        text = run("plan", MODEL, "--context", "2048", *flags).stdout
        self.assertIn("(64 + 16) x (64 + 2) B x 2 (K, V)", text)
        self.assert_generate_refuses(
            (["--kv-recent-window", "64", "--kv-recent-window-dtype", "int4_had"],
             "--kv-recent-window-dtype must be f16 or int8"),
            (["--kv-recent-window", "64", "--kv-recent-window-dtype", "int9"],
             "--kv-recent-window-dtype must be f16 or int8"))

    def test_trellis_values_take_int2_had64s_bytes_in_the_engine_and_the_plan(self):
        # int2_tcq64 (trellis-coded values) in the 2-bit recipe: the same 18 B per 64 elements as
        # int2_had64, so the same bytes per token, and the engine's pool is the plan's.
        flags = [f if f != "int2_had64" else "int2_tcq64" for f in TWO_BIT_RECIPE_FLAGS]
        gen, pool = self.generate_and_plan(flags)
        self.assertEqual(gen["kv_bytes_per_token"], 30 * 3 * 40 + 3 * 14 + 3 * 10)
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        self.assertEqual(pool["recent_window_bytes"], gen["kv_recent_window_bytes"])
        self.assertGreater(gen["generated_tokens"], 0)
        text = run("plan", MODEL, "--context", "2048", *flags).stdout
        self.assertIn("int2_tcq64", text)

    def test_attention_sink_pool_is_the_planners_to_the_byte(self):
        # --kv-attention-sink adds two f16 rows of position 0 per sequence (its own and a start
        # token's) to the window's, in the engine and the plan; without a window it is refused.
        flags = ["--kv-cache-dtype-k", "int2_chan", "--kv-cache-dtype-v", "int2_had",
                 "--kv-cache-memory", "96MiB", "--max-num-seqs", "8", "--kv-recent-window", "64",
                 "--kv-attention-sink"]
        gen, pool = self.generate_and_plan(flags)
        self.assertTrue(gen["kv_attention_sink"])
        self.assertTrue(pool["attention_sink"])
        self.assertEqual(gen["kv_recent_window_bytes"], 8 * 30 * 3 * (64 + 16 + 2) * 64 * 2 * 2)
        self.assertEqual(pool["recent_window_bytes"], gen["kv_recent_window_bytes"])
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        self.assertGreater(gen["generated_tokens"], 0)
        text = run("plan", MODEL, "--context", "2048", *flags).stdout
        self.assertIn("(64 + 16 + 2) x 64", text)
        self.assertIn("attention sink", text)
        self.assert_generate_refuses(
            (["--kv-attention-sink"], "--kv-attention-sink needs --kv-recent-window"))

    def test_plan_counts_the_engines_rows_in_every_request(self):
        # Without --kv-cache-memory the plan answers how many requests fit: each request holds
        # its window's and sink's rows and its key tail beside its blocks, as the engine's pool
        # holds them for each of its sequences.
        fmt = ["--kv-cache-dtype-k", "int2_chan", "--kv-cache-dtype-v", "int2_had"]
        window = ["--kv-recent-window", "128", "--kv-attention-sink"]

        def plan(*extra):
            return json.loads(run("plan", MODEL, "--memory", "8GiB", "--context", "4096",
                                  "--json", *fmt, *extra).stdout)

        bare, windowed = plan(), plan(*window)
        tail = 30 * 3 * 16 * 64 * 2
        rows = 30 * 3 * (128 + 16 + 2) * 64 * 2 * 2 + tail
        self.assertEqual(bare["per_token"]["row_bytes_per_sequence"], tail)
        self.assertEqual(windowed["per_token"]["row_bytes_per_sequence"], rows)
        self.assertEqual(windowed["per_request"]["paged_bytes"],
                         bare["per_request"]["paged_bytes"] + rows - tail)
        budget = windowed["memory"]["total_kv_budget_bytes"]
        self.assertEqual(windowed["capacity"]["c_max_worst"],
                         budget // windowed["per_request"]["paged_bytes"])
        self.assertLess(windowed["capacity"]["c_max_worst"], bare["capacity"]["c_max_worst"])
        _, pool = self.generate_and_plan(fmt + window + ["--kv-cache-memory", "96MiB",
                                                         "--max-num-seqs", "8"])
        self.assertEqual(pool["recent_window_bytes"] + pool["key_tail_bytes"], 8 * rows)
        text = run("plan", MODEL, "--memory", "8GiB", "--context", "4096", *fmt,
                   *window).stdout
        self.assertIn("recent window (128 + 16 + 2 sink tokens of K and V)", text)
        self.assertIn("of which f16 rows beside the blocks", text)
        r = run("plan", MODEL, "--kv-attention-sink", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--kv-attention-sink needs --kv-recent-window", r.stderr)

    def test_per_channel_keys_pool_is_the_planners_to_the_byte(self):
        # Per-channel keys take one f16 key tail per sequence (--max-num-seqs) from the budget
        # before the blocks; the planner sizes the same pool.
        flags = ["--kv-cache-dtype-k", "int4_chan", "--kv-cache-dtype-v", "int4_had",
                 "--kv-cache-memory", "96MiB", "--max-num-seqs", "8"]
        gen, pool = self.generate_and_plan(flags)
        self.assertEqual(gen["kv_key_tail_bytes"], 8 * 30 * 3 * 16 * 64 * 2)
        self.assertEqual(pool["key_tail_bytes"], gen["kv_key_tail_bytes"])
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        self.assertEqual(pool["pool_bytes"], gen["kv_pool_bytes"])
        self.assertEqual(gen["kv_bytes_per_token"], 30 * 3 * (48 + 36))
        self.assertEqual(pool["num_blocks"],
                         (96 * 2**20 - gen["kv_key_tail_bytes"]) // (16 * gen["kv_bytes_per_token"]))
        self.assertGreater(gen["generated_tokens"], 0)
        # Keys only, and whole 16-token groups: one clear line each.
        self.assert_generate_refuses(
            (["--kv-cache-dtype", "int4_chan"], "holds keys only"),
            (["--kv-cache-dtype-k", "int2_chan", "--block-size", "8"], "multiple of 16"))

    def test_rotated_int8_takes_int8s_bytes_and_the_planners_pool(self):
        # int8_had: int8 of the Hadamard-rotated vector, one f16 scale per token and head (66
        # bytes per head vector at head dim 64), in the engine and the plan alike.
        flags = ["--kv-cache-dtype", "int8_had", "--kv-cache-memory", "64MiB"]
        gen, pool = self.generate_and_plan(flags)
        self.assertEqual(gen["kv_bytes_per_token"], 30 * 2 * 3 * (64 + 2))
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        self.assertEqual(pool["pool_bytes"], gen["kv_pool_bytes"])
        self.assertEqual(pool["num_blocks"], 64 * 2**20 // (16 * gen["kv_bytes_per_token"]))
        self.assertEqual(gen["generated_tokens"], 20)

    def test_rotated_q8_0_takes_q8_0s_bytes_and_the_planners_pool(self):
        # q8_0_had: q8_0's blocks of the Hadamard-rotated vector (34 bytes per 32 elements), in
        # the engine and the plan alike.
        flags = ["--kv-cache-dtype", "q8_0_had", "--kv-cache-memory", "64MiB"]
        gen, pool = self.generate_and_plan(flags)
        self.assertEqual(gen["kv_bytes_per_token"], 30 * 2 * 3 * 64 // 32 * 34)
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        self.assertEqual(pool["pool_bytes"], gen["kv_pool_bytes"])
        self.assertEqual(gen["generated_tokens"], 20)

    def test_keys_per_64_tokens_take_int4_hads_bytes_and_the_planners_pool(self):
        # int4_chan64 keys (per channel over 64 tokens) with int4_had values: int4_had's bytes per
        # token (36 + 36 per head), tails of 64 rows per sequence, and the planner's pool.
        flags = ["--kv-cache-dtype-k", "int4_chan64", "--kv-cache-dtype-v", "int4_had",
                 "--kv-cache-memory", "96MiB", "--max-num-seqs", "8", "--block-size", "64"]
        gen, pool = self.generate_and_plan(flags)
        self.assertEqual(gen["kv_bytes_per_token"], 30 * 3 * (36 + 36))
        self.assertEqual(gen["kv_key_tail_bytes"], 8 * 30 * 3 * 64 * 64 * 2)
        self.assertEqual(pool["key_tail_bytes"], gen["kv_key_tail_bytes"])
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        self.assertEqual(pool["pool_bytes"], gen["kv_pool_bytes"])
        self.assertEqual(pool["num_blocks"],
                         (96 * 2**20 - gen["kv_key_tail_bytes"]) // (64 * gen["kv_bytes_per_token"]))
        self.assertGreater(gen["generated_tokens"], 0)
        self.assert_generate_refuses(
            (["--kv-cache-dtype-k", "int2_chan64", "--block-size", "32"], "multiple of 64"),
            (["--kv-cache-dtype", "int3_chan64", "--block-size", "64"], "holds keys only"))

    def test_per_layer_formats_pool_is_the_planners_to_the_byte(self):
        # Keys of layers 18 and 20 and values of layer 1 at 4 bits in a 2-bit pool: each layer's
        # bytes in its own formats, in generate, perplexity and the plan alike.
        layers = ["--kv-cache-dtype-k-layers", "18=int4_chan,20=int4_chan",
                  "--kv-cache-dtype-v-layers", "1=int4_had"]
        flags = ["--kv-cache-dtype-k", "int2_chan", "--kv-cache-dtype-v", "int2_had",
                 "--kv-cache-memory", "96MiB", "--max-num-seqs", "8", *layers]
        gen, pool = self.generate_and_plan(flags)
        self.assertEqual(gen["kv_bytes_per_token"], 3 * (28 * 32 + 2 * 48 + 29 * 20 + 36))
        self.assertEqual(gen["kv_cache_dtype_k_layers"], "18=int4_chan,20=int4_chan")
        self.assertEqual(gen["kv_cache_dtype_v_layers"], "1=int4_had")
        self.assertEqual(pool["num_blocks"], gen["kv_pool_blocks"])
        self.assertEqual(pool["pool_bytes"], gen["kv_pool_bytes"])
        self.assertEqual(pool["bytes_per_token"], gen["kv_bytes_per_token"])
        self.assertIn("[K int4_chan, V int2_had]", pool["formula"])
        plan = json.loads(run("plan", MODEL, "--json", *flags).stdout)
        self.assertEqual(plan["kv_format"]["k_layers"], "18=int4_chan,20=int4_chan")
        self.assertEqual(plan["per_token"]["bytes"], gen["kv_bytes_per_token"])
        text = os.path.join(os.path.dirname(__file__), "..", "data", "kjv_genesis_exodus.txt")
        ppl = run("perplexity", "-f", text, "--ctx", "128", "--max-windows", "1", *flags).stdout
        self.assertIn("KV int2_chan/int2_had + layers K 18=int4_chan,20=int4_chan; V 1=int4_had", ppl)
        self.assert_generate_refuses(
            (["--kv-cache-dtype-k-layers", "18"], "--kv-cache-dtype-k-layers: \"18\" is not"),
            (["--kv-cache-dtype-k-layers", "30=int8"], "layer 30: the model has 30 layers"),
            (["--kv-cache-dtype-k", "int2_chan", "--kv-cache-dtype-v", "int2_had",
              "--kv-cache-dtype-k-layers", "3=int8"], "grouped like the pool's"),
            (["--kv-cache-dtype-v-layers", "2=int4_chan"], "K format only"),
            (["--kv-cache-dtype-v-layers", "2=int4,2=int8"], "given twice"))

    def test_rank_layers_runs_each_layer_and_suggests_the_best(self):
        # One run per layer with its keys at 4 bits in a 2-bit pool, ranked; each row is what a
        # plain run with that layer listed gives, and the suggestion lists the best ones.
        text = os.path.join(os.path.dirname(__file__), "..", "data", "kjv_genesis_exodus.txt")
        flags = ["perplexity", "-f", text, "--ctx", "64", "--max-windows", "2",
                 "--kv-cache-dtype-k", "int2_chan", "--kv-cache-dtype-v", "int2_had",
                 "--kv-cache-memory", "64MiB", "--max-num-seqs", "4"]
        out = json.loads(run(*flags, "--rank-layers", "k", "--rank-format", "int4_chan",
                             "--rank-top", "2", "--json").stdout)
        rows = out["layers"]
        self.assertEqual(sorted(r["layer"] for r in rows), list(range(30)))
        self.assertEqual([r["perplexity"] for r in rows], sorted(r["perplexity"] for r in rows))
        best = rows[0]
        plain = json.loads(run(*flags, "--json", "--kv-cache-dtype-k-layers",
                               f"{best['layer']}=int4_chan").stdout)
        self.assertEqual(plain["perplexity"], best["perplexity"])
        base = json.loads(run(*flags, "--json").stdout)
        self.assertEqual(out["base_perplexity"], base["perplexity"])
        top = sorted(r["layer"] for r in rows[:2] if r["perplexity"] < base["perplexity"])
        self.assertEqual(out["suggested"], "--kv-cache-dtype-k-layers " +
                         ",".join(f"{l}=int4_chan" for l in top))
        # A layer already listed is not tried again.
        listed = json.loads(run(*flags, "--kv-cache-dtype-k-layers", "5=int4_chan", "--rank-layers",
                                "k", "--json").stdout)
        self.assertNotIn(5, [r["layer"] for r in listed["layers"]])
        self.assertIn("5=int4_chan", listed["suggested"])
        self.assert_clean_failure_of(flags + ["--rank-layers", "q"], "--rank-layers must be k or v")
        self.assert_clean_failure_of(flags + ["--rank-layers", "v", "--rank-format", "int4_chan"],
                                     "K format only")

    def test_kl_divergence_reference_scores_the_same_windows_twice(self):
        # A second engine in the reference format scores the same windows: the run's perplexity
        # is a plain run's, the reference's a plain run's in that format, and the divergence
        # from a format to itself is zero.
        text = os.path.join(os.path.dirname(__file__), "..", "data", "kjv_genesis_exodus.txt")
        flags = ["perplexity", "-f", text, "--ctx", "64", "--max-windows", "3",
                 "--kv-cache-memory", "64MiB", "--max-num-seqs", "4", "--json"]
        out = json.loads(run(*flags, "--kv-cache-dtype", "int4_had",
                             "--kl-divergence-reference", "f32").stdout)
        kl = out["kl_divergence"]
        self.assertEqual(out["scored_tokens"], 3 * 31)
        self.assertEqual(kl["reference_kv_cache_dtype"], "f32")
        plain = json.loads(run(*flags, "--kv-cache-dtype", "int4_had").stdout)
        ref = json.loads(run(*flags, "--kv-cache-dtype", "f32").stdout)
        self.assertEqual(out["perplexity"], plain["perplexity"])
        self.assertEqual(kl["reference_perplexity"], ref["perplexity"])
        self.assertGreater(kl["mean"], 0)
        self.assertLessEqual(kl["median"], kl["p99"])
        self.assertLessEqual(kl["p99"], kl["max"])
        self.assertGreater(kl["same_top"], 0.5)
        same = json.loads(run(*flags, "--kv-cache-dtype", "f32",
                              "--kl-divergence-reference", "f32").stdout)["kl_divergence"]
        self.assertEqual((same["mean"], same["max"], same["same_top"]), (0, 0, 1))
        human = run(*flags[:-1], "--kv-cache-dtype", "q8_0", "--kl-divergence-reference", "f16").stdout
        self.assertIn("KL divergence from f16 KV: mean", human)
        self.assert_clean_failure_of(flags + ["--kl-divergence-reference", "f33"],
                                     "--kl-divergence-reference")
        self.assert_clean_failure_of(flags + ["--kl-divergence-reference", "f32", "--rank-layers", "k"],
                                     "separate runs")

    def assert_clean_failure_of(self, args, needle):
        p = run(*args, check=False)
        self.assertNotEqual(p.returncode, 0, args)
        self.assertIn(needle, p.stderr, args)
        self.assertNotIn("CHECK failed", p.stderr)

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
        # -p "$(cat missing.txt)" gives -p an empty prompt: say so, not "give a prompt with -p".
        self.assert_clean_failure(["generate", "-p", ""], "-p/--prompt is empty")
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


class Version(unittest.TestCase):
    def test_version_flag_and_subcommand_print_version_and_commit(self):
        for args in (["--version"], ["version"]):
            line = run(*args).stdout.strip()
            # "kvserve 0.1.0 (commit 4d9999c)"; "unknown" when built outside a git checkout.
            self.assertRegex(line, r"^kvserve \d+\.\d+\.\d+ \(commit ([0-9a-f]{7,40}|unknown)\)$", args)


class Plan(unittest.TestCase):
    """Issue 14's planner fixes seen from the command line (catalog entries; no model needed). Every
    expected number is derived in the comment next to it."""

    def plan_json(self, *args):
        return json.loads(run("plan", *args, "--json").stdout)

    def test_tensor_parallel_never_rounds_kv_heads_down(self):
        # Llama 3.1 70B: 80 layers, 8 KV heads of 128. tp 3 cannot split 8 heads (vLLM refuses it):
        # one clear line naming the tp values that work, instead of 8 // 3 = 2 heads per GPU.
        p = run("plan", "-m", "llama-3.1-70b", "--gpu", "H100", "--tp", "3", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("8 KV heads cannot be split over tp 3", p.stderr)
        self.assertIn("(1, 2, 4, 8)", p.stderr)
        self.assertLessEqual(len(p.stderr.strip().splitlines()), 3, p.stderr)
        # tp 2: 4 heads per GPU, 80 x 2 x 4 x 128 x 2 = 163,840 B; tp 16: each head on two GPUs,
        # 1 head per GPU, 80 x 2 x 1 x 128 x 2 = 40,960 B.
        self.assertEqual(self.plan_json("-m", "llama-3.1-70b", "--gpu", "H100", "--tp", "2")["per_token"]["bytes"],
                         163840)
        self.assertEqual(self.plan_json("-m", "llama-3.1-70b", "--gpu", "H100", "--tp", "16")["per_token"]["bytes"],
                         40960)
        # SmolLM2-135M has 3 KV heads: the "2x GPUs" lever is n/a with the same reason.
        levers = self.plan_json("-m", "smollm2-135m", "--gpu", "H100")["levers"]
        tp2 = [l for l in levers if l["name"].startswith("more memory")]
        self.assertEqual(len(tp2), 1)
        self.assertIn("3 KV heads cannot be split over tp 2", tp2[0]["why_not"])

    def test_gpu_presets_are_reported_totals_with_sources(self):
        # nvidia-smi totals: H100 81,559 MiB = 85,520,809,984 B; H200 143,771 MiB = 150,754,820,096 B.
        self.assertEqual(self.plan_json("-m", "smollm2-135m", "--gpu", "H100")["memory"]["gpu_memory"]["bytes"],
                         81559 << 20)
        self.assertEqual(self.plan_json("-m", "smollm2-135m", "--gpu", "H200")["memory"]["gpu_memory"]["bytes"],
                         143771 << 20)
        out = run("plan", "--list-gpus").stdout
        names = [l.split()[0] for l in out.splitlines() if l and not l.startswith(" ")]
        self.assertIn("H100-80GB", names)
        self.assertEqual(out.count("source: "), len(names), out)

    def test_gpu_with_memory_replaces_the_preset_memory(self):
        # --gpu H100 --memory 200GB: the plan of --memory 200GB alone (90% of 200 GB - 16.06 GB of
        # Llama 3.1 8B weights = 163.94 GB of KV), reported under the preset's name.
        both = self.plan_json("-m", "llama-3.1-8b", "--gpu", "H100", "--memory", "200GB")
        alone = self.plan_json("-m", "llama-3.1-8b", "--memory", "200GB")
        preset = self.plan_json("-m", "llama-3.1-8b", "--gpu", "H100")
        self.assertEqual(both["memory"]["gpu"], "H100-80GB")
        self.assertTrue(both["memory"]["gpu_memory_overridden"])
        self.assertFalse(preset["memory"]["gpu_memory_overridden"])
        self.assertEqual(both["memory"]["gpu_memory"]["bytes"], 200 * 10**9)
        self.assertEqual(both["capacity"]["kv_budget_bytes"], alone["capacity"]["kv_budget_bytes"])
        self.assertEqual(both["capacity"]["c_max_worst"], alone["capacity"]["c_max_worst"])
        self.assertGreater(both["capacity"]["c_max_worst"], 2 * preset["capacity"]["c_max_worst"])
        text = run("plan", "-m", "llama-3.1-8b", "--gpu", "H100", "--memory", "200GB").stdout
        self.assertIn("GPU H100-80GB with --memory 200GB: 200GB = 200,000,000,000 B", text)
        self.assertIn("instead of its 85,520,809,984 B", text)
        for args, needle in [(["--gpu", "H100", "--memory", "lots"], "--memory: "),
                             (["--gpu", "H9000", "--memory", "80GB"], "--gpu: unknown GPU"),
                             (["--gpu", "H100", "--memory", "-5GB"], "--memory: ")]:
            p = run("plan", "-m", "llama-3.1-8b", *args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(needle, p.stderr, args)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_windowed_layers_per_step(self):
        # Mistral 7B v0.1: 32 windowed layers (4,096) of 8 KV heads x 128, 131,072 B per token.
        # Default: min(32768, 4096) = 4,096 tokens = 256 blocks of 16.
        base = ("-m", "mistral-7b-v0.1", "--gpu", "H100", "--context", "32768")
        j = self.plan_json(*base)
        self.assertEqual(j["per_request"]["paged_bytes"], 4096 * 131072)
        self.assertNotIn("window_step_tokens", j["per_request"])
        # A 512-token step ending at m reads [m - 512 - 4095, m): 4,607 tokens. At m = 32,768 they
        # span blocks 1760..2047 (288 blocks of 16); at m = 32,753, on the way, blocks 1759..2047
        # (289, the most 4,607 positions can span: ceil(4606 / 16) + 1). The plan counts 289.
        j = self.plan_json(*base, "--max-num-batched-tokens", "512")
        self.assertEqual(j["per_request"]["bytes"], 4607 * 131072)
        self.assertEqual(j["per_request"]["paged_bytes"], 289 * 16 * 131072)
        self.assertEqual(j["per_request"]["window_step_tokens"], 512)

    def test_config_fixes(self):
        # Falcon 7B (catalog): multi_query, so 1 KV head: 32 x 2 x 1 x 64 x 2 = 8,192 B.
        self.assertEqual(self.plan_json("-m", "falcon-7b", "--gpu", "H100")["per_token"]["formula"],
                         "32 x 2 x 1 x 64 x 2 = 8,192 B")
        # google/gemma-3-27b-it's text_config has no sliding_window_pattern: transformers' default 6
        # makes layers 5, 11, ..., 59 full (10) and the other 52 windowed (1,024), 8,192 B per layer
        # and token (16 KV heads x 128 x 2 x 2 B).
        text = {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                "sliding_window": 1024}
        cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
               "torch_dtype": "bfloat16"}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(cfg, f)
        try:
            j = self.plan_json("-m", f.name, "--gpu", "H100", "--context", "32768")
        finally:
            os.unlink(f.name)
        kinds = j["per_token"]["by_layer_kind"]
        self.assertEqual(kinds["full_attention"]["layers"], 10)
        self.assertEqual(kinds["sliding_window"]["layers"], 52)
        self.assertEqual(j["per_request"]["bytes"], 10 * 8192 * 32768 + 52 * 8192 * 1024)


def shown_default(help_text, flag):
    """The "=VALUE" --help shows after FLAG's type ("--block-size UINT=16" gives "16"), or None."""
    for line in help_text.splitlines():
        head = line.strip().split("  ")[0]  # the names and type, before the help column
        names, _, rest = head.partition(" ")
        if flag in names.split(",") and "=" in rest:
            return rest.rsplit("=", 1)[1]
    return None


class VllmHabits(unittest.TestCase):
    """Issue 29 item 8: what vLLM users type works. No server is started: serve's cases end at the
    model load, whose error names the model the command read."""

    def assert_clean_failure(self, args, *needles):
        p = run(*args, check=False)
        self.assertNotEqual(p.returncode, 0, args)
        self.assertNotIn("CHECK failed", p.stderr)
        for needle in needles:
            self.assertIn(needle, p.stderr, args)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        return p.stderr

    def test_the_model_is_a_positional_argument(self):
        self.assertEqual(run("plan", "llama-3.1-8b", "--json").stdout,
                         run("plan", "-m", "llama-3.1-8b", "--json").stdout)
        self.assertEqual(run("plan", "llama-3.1-8b", "-m", "llama-3.1-8b", "--json").stdout,
                         run("plan", "-m", "llama-3.1-8b", "--json").stdout)
        # serve/generate MODEL: the load error names the positional's path, so it was read.
        missing = "/nonexistent/positional-model.gguf"
        for sub in (["serve"], ["generate", "-p", "hi"], ["perplexity", "-f", __file__]):
            self.assert_clean_failure([sub[0], missing, *sub[1:]], missing, "does not exist")
            self.assert_clean_failure([sub[0], missing, "-m", missing, *sub[1:]], missing, "does not exist")
        usage = run("serve", "--help").stdout
        self.assertIn("[MODEL]", usage)

    def test_a_model_given_twice_differently_is_an_error(self):
        for sub in (["serve"], ["generate", "-p", "hi"], ["plan"], ["simulate"]):
            err = self.assert_clean_failure([sub[0], "llama-3.1-8b", "-m", "qwen3-8b", *sub[1:]],
                                            "given twice", "llama-3.1-8b", "qwen3-8b")
            self.assertNotIn("does not exist", err)

    def test_plan_max_model_len_is_context(self):
        ctx = run("plan", "llama-3.1-8b", "--context", "32768", "--json").stdout
        self.assertEqual(run("plan", "llama-3.1-8b", "--max-model-len", "32768", "--json").stdout, ctx)
        self.assertEqual(run("plan", "llama-3.1-8b", "--max-model-len", "32768", "--context", "32768",
                             "--json").stdout, ctx)
        self.assertNotEqual(run("plan", "llama-3.1-8b", "--json").stdout, ctx)
        self.assert_clean_failure(["plan", "llama-3.1-8b", "--context", "4096", "--max-model-len", "8192"],
                                  "--context 4096", "--max-model-len 8192")
        for sub in ("serve", "generate", "perplexity", "simulate", "plan"):
            self.assertIn("--max-model-len", run(sub, "--help").stdout, sub)

    def test_catalog_lookup_by_hugging_face_id(self):
        for name, ids in [("llama-3.1-8b", ["meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct",
                                            "META-LLAMA/llama-3.1-8b-instruct"]),
                          ("qwen3-8b", ["Qwen/Qwen3-8B"]),
                          ("mistral-7b-v0.3", ["mistralai/Mistral-7B-Instruct-v0.3"]),
                          ("gemma-3-4b", ["google/gemma-3-4b-it"])]:
            want = run("plan", "-m", name, "--json").stdout
            for hf in ids:
                self.assertEqual(run("plan", "--model", hf, "--json").stdout, want, hf)
        self.assertIn("meta-llama/Llama-3.1-8B-Instruct", run("plan", "--list-models").stdout)

    def test_an_unknown_model_is_one_clear_line_with_close_matches(self):
        err = self.assert_clean_failure(["plan", "--model", "meta-llama/Llama-3.1-8B-Instrct"],
                                        "meta-llama/Llama-3.1-8B-Instrct", "downloads nothing",
                                        "did you mean meta-llama/Llama-3.1-8B-Instruct")
        self.assertIn("catalog: ", err)
        self.assertIn("did you mean Qwen/Qwen3-8B",
                      self.assert_clean_failure(["plan", "Qwen/Qwen3-8B-Instruct"], "Qwen/Qwen3-8B-Instruct"))
        self.assertNotIn("did you mean", self.assert_clean_failure(["plan", "no-such-org/zzzz"], "zzzz"))

    def test_help_shows_the_real_defaults(self):
        helps = {sub: run(sub, "--help").stdout for sub in ("serve", "generate", "perplexity", "plan", "simulate")}
        for sub, text in helps.items():
            # CLI11's "--x,--no-x{false}" reads as a default of false; no flag is shown that way.
            self.assertNotIn("{false}", text, sub)
            self.assertNotIn("{true}", text, sub)
        caching = [l for l in helps["serve"].splitlines() if l.split()[:1] == ["--enable-prefix-caching"]]
        self.assertEqual(len(caching), 1, helps["serve"])
        self.assertIn("(default: on)", caching[0])
        # plan's shown --context and --gpu-memory-utilization are what it uses when they are left out.
        plan = helps["plan"]
        context, util = shown_default(plan, "--context"), shown_default(plan, "--gpu-memory-utilization")
        self.assertEqual((context, util), ("8192", "0.9"))
        default = run("plan", "llama-3.1-8b", "--json").stdout
        self.assertEqual(run("plan", "llama-3.1-8b", "--context", context, "--gpu-memory-utilization", util,
                             "--json").stdout, default)
        self.assertNotEqual(run("plan", "llama-3.1-8b", "--context", "4096", "--json").stdout, default)
        self.assertNotEqual(run("plan", "llama-3.1-8b", "--gpu-memory-utilization", "0.8", "--json").stdout,
                            default)

    @requires(os.path.exists(MODEL), "default model not fetched (scripts/fetch-model)")
    def test_engine_defaults_shown_are_the_engines(self):
        serve = run("serve", "--help").stdout
        block, memory = shown_default(serve, "--block-size"), shown_default(serve, "--kv-cache-memory")
        self.assertEqual((block, memory), ("16", "512MiB"))
        default = json.loads(run("generate", "-p", "hi", "-n", "1", "--json").stdout)
        given = json.loads(run("generate", "-p", "hi", "-n", "1", "--json", "--block-size", block,
                               "--kv-cache-memory", memory).stdout)
        self.assertEqual(default["block_size"], int(block))
        for key in ("block_size", "kv_pool_bytes", "kv_pool_blocks"):
            self.assertEqual(default[key], given[key], key)
        # Prefix caching on by default (as shown), and the last of --[no-]enable-prefix-caching wins.
        prompt = " ".join(f"Rule {i}: answer every question politely and briefly." for i in range(20))
        for flags, cached in [([], True), (["--no-enable-prefix-caching"], False),
                              (["--no-enable-prefix-caching", "--enable-prefix-caching"], True),
                              (["--enable-prefix-caching", "--no-enable-prefix-caching"], False)]:
            out = json.loads(run("generate", "-p", prompt, "-n", "1", "--repeat", "2", "--json", *flags).stdout)
            self.assertEqual(out["runs"][1]["cached_tokens"] > 0, cached, flags)


class ConfigFile(unittest.TestCase):
    """--config FILE, as vLLM's: keys are long flag names, the command line wins, an unknown key,
    a malformed file or a bad value is one clear line and exit code 2 (serve's end before the
    model load; tests/server/test_config_file.py starts a server from one)."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def config(self, text, name="kvserve.yaml"):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def assert_usage_error(self, args, *needles):
        p = run(*args, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertNotIn("CHECK failed", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        for needle in needles:
            self.assertIn(needle, p.stderr, args)

    def test_plan_reads_the_flags_from_the_file(self):
        cfg = self.config("# a plan as flags would give it\nmodel: llama-3.1-8b\n"
                          "max_model_len: 32768\ngpu: A100-80GB\nkv-cache-dtype: fp8\n")
        want = run("plan", "llama-3.1-8b", "--max-model-len", "32768", "--gpu", "A100-80GB",
                   "--kv-cache-dtype", "fp8", "--json").stdout
        self.assertEqual(run("plan", "--config", cfg, "--json").stdout, want)
        self.assertNotEqual(run("plan", "llama-3.1-8b", "--json").stdout, want)
        # The same with the flags' own spelling and a boolean switch from the file.
        cfg2 = self.config("model: llama-3.1-8b\nmax-model-len: 32768\ngpu: A100-80GB\n"
                           "kv_cache_dtype: fp8\njson: true\n", "dashes.yaml")
        self.assertEqual(run("plan", "--config", cfg2).stdout, want)

    def test_the_command_line_wins(self):
        cfg = self.config("model: llama-3.1-8b\nmax-model-len: 32768\ngpu: A100-80GB\n")
        want = run("plan", "qwen3-8b", "--max-model-len", "4096", "--gpu", "A100-80GB", "--json").stdout
        self.assertEqual(run("plan", "qwen3-8b", "--config", cfg, "--max-model-len", "4096",
                             "--json").stdout, want)
        self.assertEqual(run("plan", "--config", cfg, "-m", "qwen3-8b", "--max-model-len", "4096",
                             "--json").stdout, want)

    def test_an_unknown_key_names_the_key_and_the_file(self):
        cfg = self.config("model: llama-3.1-8b\nmax-modle-len: 4096\n")
        self.assert_usage_error(["plan", "--config", cfg], cfg, "line 2", "unknown key 'max-modle-len'",
                                "did you mean max-model-len?")
        # A flag of another subcommand is unknown here.
        cfg = self.config("model: llama-3.1-8b\nport: 8000\n", "port.yaml")
        self.assert_usage_error(["plan", "--config", cfg], cfg, "unknown key 'port'")

    def test_malformed_missing_and_wrongly_typed_files(self):
        bad = self.config("model: llama-3.1-8b\nmax-model-len: [4096\ngpu: H100\n")
        self.assert_usage_error(["plan", "--config", bad], bad, "line 3", "malformed YAML")
        missing = os.path.join(self.dir.name, "absent.yaml")
        self.assert_usage_error(["plan", "--config", missing], missing, "no such file")
        for sub in ("serve", "generate", "simulate"):
            typed = self.config("port: abc\n" if sub == "serve" else "max-model-len: abc\n",
                                sub + ".yaml")
            key = "port" if sub == "serve" else "max-model-len"
            self.assert_usage_error([sub, "--config", typed], typed, key + ": 'abc' is not")
        twice = self.config("max-model-len: 1\nmax_model_len: 2\n", "twice.yaml")
        self.assert_usage_error(["plan", "--config", twice], "given twice")
        self.assertIn("--config FILE", run("serve", "--help").stdout)

    @requires(os.path.exists(MODEL), "default model not fetched (scripts/fetch-model)")
    def test_generate_takes_its_flags_and_switches_from_the_file(self):
        prompt = " ".join(f"Rule {i}: answer every question politely and briefly." for i in range(20))
        # The prompt's ": " would start a mapping: a double-quoted scalar (JSON's quoting is YAML's).
        cfg = self.config(f"model: {MODEL}\nprompt: {json.dumps(prompt)}\nmax_tokens: 2\nrepeat: 2\njson: true\n"
                          "enable-prefix-caching: false\nkv-cache-memory: 64MiB\n")
        out = json.loads(run("generate", "--config", cfg).stdout)
        self.assertEqual(out["model"], MODEL)
        self.assertEqual(out["kv_pool_bytes"], json.loads(run("generate", "-p", "hi", "-n", "1", "--json",
                                                               "--kv-cache-memory", "64MiB").stdout)["kv_pool_bytes"])
        self.assertEqual([r["generated_tokens"] for r in out["runs"]], [2, 2])
        self.assertEqual(out["runs"][1]["cached_tokens"], 0)
        on = json.loads(run("generate", "--config", cfg, "--enable-prefix-caching", "-n", "1").stdout)
        self.assertGreater(on["runs"][1]["cached_tokens"], 0)
        self.assertEqual(on["runs"][1]["generated_tokens"], 1)


if __name__ == "__main__":
    unittest.main()
