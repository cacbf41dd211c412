"""bench/kv_goals.py's verdicts: each recipe against its bound, against llama.cpp, and the
capacity and speed ratios, from results given to its renderer (no model runs)."""
import argparse
import importlib.util
import os
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("kv_goals", os.path.join(ROOT, "bench", "kv_goals.py"))
kv_goals = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kv_goals)

CELLS = [(m, c) for m in kv_goals.MODELS for c in kv_goals.CONTEXTS]
F32_BYTES = {"SmolLM2": 46080, "Gemma 3": 36864}


def perplexities(change_of):
    """kvserve results: f32 = 4.0 in every cell, each recipe 4.0 x (1 + its change)."""
    ppl = {}
    for m, c in CELLS:
        ppl[("f32", m, c)] = {"perplexity": 4.0, "scored_tokens": 40800 if c == 512 else 40920,
                              "kv_bytes_per_token": F32_BYTES[m]}
        for key, change in change_of.items():
            # 72 B per token and KV head at head dim 64 are 4.5 bits per element.
            ppl[(key, m, c)] = {"perplexity": 4.0 * (1 + change(m, c) / 100),
                                "scored_tokens": 40800, "kv_bytes_per_token": F32_BYTES[m] * 4.5 / 32}
    return ppl


def render(ppl, llama=None, plans=None, speed=None, recipes=None):
    a = argparse.Namespace(rounds=2, recipes=recipes)
    return kv_goals.render(a, ppl, llama or {}, plans or {}, speed or {})


def recipe_line(text, key):
    name = next(r[1] for r in kv_goals.RECIPES if r[0] == key)
    return next(l for l in text.splitlines() if l.startswith(f"| {name} |"))


class Goal1(unittest.TestCase):
    def test_within_every_bound_is_met(self):
        text = render(perplexities({"2bit": lambda m, c: 5.9, "4bit": lambda m, c: 1.4,
                                    "3bit": lambda m, c: 2.9, "q8_0": lambda m, c: 0.19}))
        for key in ("2bit", "4bit", "3bit", "q8_0"):
            self.assertTrue(recipe_line(text, key).endswith("| met |"), recipe_line(text, key))
        self.assertIn("| 4.50 |", recipe_line(text, "4bit"))
        self.assertIn("40,800/40,920 scored tokens", text)

    def test_one_cell_over_the_bound_is_not_met_and_shown(self):
        text = render(perplexities(
            {"2bit": lambda m, c: 6.1 if (m, c) == ("SmolLM2", 2048) else 1.0}))
        line = recipe_line(text, "2bit")
        self.assertTrue(line.endswith("| **not met** |"), line)
        self.assertIn("(**+6.10%**)", line)
        self.assertEqual(line.count("(+1.00%)"), 3)

    def test_a_missing_cell_is_not_met(self):
        ppl = perplexities({"4bit": lambda m, c: 0.5})
        del ppl[("4bit", "Gemma 3", 2048)]
        line = recipe_line(render(ppl), "4bit")
        self.assertIn("| - |", line)
        self.assertTrue(line.endswith("| **not met** |"), line)


class Goal2(unittest.TestCase):
    def test_better_counts_each_cell_against_llamas_own_f16(self):
        ppl = perplexities({"4bit": lambda m, c: 1.0, "q8_0": lambda m, c: 0.1})
        llama = {}
        for m, c in CELLS:
            llama[("f16", m, c)] = {"perplexity": 5.0}
            # q4_0 +2% everywhere but Gemma 3 at 512 (+0.5%, better than the recipe's +1%).
            q4 = 0.5 if (m, c) == ("Gemma 3", 512) else 2.0
            llama[("q4_0", m, c)] = {"perplexity": 5.0 * (1 + q4 / 100)}
            llama[("q8_0", m, c)] = {"perplexity": 5.0 * 1.0005}
        text = render(ppl, llama)
        self.assertIn("better than `q4_0` (4.5 bits) in 3 of 4 cells", text)
        self.assertNotIn("iq4_nl` (4.5 bits) in", text)  # no iq4_nl results, no verdict
        self.assertIn("8-bit: `q8_0`: better than `q8_0` (8.5 bits) in 0 of 4 cells", text)
        self.assertIn("| `q4_0` | 4.5 | 5.1000 (+2.00%) |", text)
        self.assertNotIn("| `iq4_nl` |", text)  # a type that was not run has no row


class Goals3And4(unittest.TestCase):
    def test_capacity_and_speed_ratios(self):
        plans = {("SmolLM2", "f16"): {"tokens": 372816}, ("SmolLM2", "2bit"): {"tokens": 2243648},
                 ("SmolLM2", "2bit400"): {"tokens": 2239488}}
        first, second = kv_goals.SPEED_ROWS[0][0], kv_goals.SPEED_ROWS[3][0]
        speed = {(first, "SmolLM2", 1): [34.0, 33.0], (second, "SmolLM2", 1): [30.0, 31.0]}
        text = render(perplexities({}), plans=plans, speed=speed)
        self.assertIn("| SmolLM2 | window 256 int8 + sink | 372,816 | 2,243,648 | 6.02x |", text)
        self.assertIn("| SmolLM2 | window 400 int8 + sink | 372,816 | 2,239,488 | 6.01x |", text)
        self.assertNotIn("| Gemma 3 |", text)
        self.assertIn(f"| {second} | 30.0, 31.0 (1.10x) | - | - | - |", text)
        self.assertIn(f"| {first} | 34.0, 33.0 | - | - | - |", text)


class Goal4EndToEnd(unittest.TestCase):
    def test_each_row_is_its_rounds_and_the_median_ratio(self):
        first, tcq = kv_goals.GENERATE_ROWS[0][0], kv_goals.GENERATE_ROWS[2][0]
        generated = {(first, "SmolLM2"): {"tok_s": [44.0, 40.0, 42.0], "prompts": {16103}},
                     (tcq, "SmolLM2"): {"tok_s": [46.2, 30.0, 43.0], "prompts": {16103}},
                     (first, "Gemma 3"): {"tok_s": [60.0, 58.0], "prompts": {15000}}}
        a = argparse.Namespace(rounds=2, recipes="f32,2bittcq", threads=2)
        text = kv_goals.render(a, perplexities({}), {}, {}, {}, generated)
        self.assertIn("after a prompt of 15,000/16,103 tokens", text)
        self.assertIn("3 alternating rounds", text)
        self.assertIn(f"| {first} | 44.0, 40.0, 42.0 | 60.0, 58.0 |", text)
        # median 43.0 against 42.0; no Gemma 3 result for the recipe
        self.assertIn(f"| {tcq} | 46.2, 30.0, 43.0 (1.02x) | - |", text)
        # the 4-bit recipe was not asked for
        self.assertNotIn(kv_goals.GENERATE_ROWS[1][0], text)

    def test_interleaved_rows_are_tokens_per_second_and_the_rounds_ratio(self):
        first, four, tcq = (r[0] for r in kv_goals.GENERATE_ROWS)
        case = lambda name, ms, ratio, rounds: {"name": name, "flags": "", "median_ms": ms,
                                                "best_ms": ms, "ratio_median": ratio,
                                                "ms_per_step": rounds}
        interleaved = {"SmolLM2": {"context": 16384, "rounds": 4, "steps": 16, "cases": [
            case(first, 25.0, 1.0, [25.0, 26.0, 24.0, 25.0]),
            case(tcq, 24.0, 1.043, [24.0, 27.0, 23.0, 25.0])]}}
        a = argparse.Namespace(rounds=2, recipes="f32,2bittcq", threads=2)
        text = kv_goals.render(a, perplexities({}), {}, {}, {}, None, interleaved)
        self.assertIn("--context 16384 --rounds 4 --steps 16 -t 2", text)
        self.assertIn(f"| {first} | 40.0 | - |", text)
        # tok/s from the median ms per step, then the median of the rounds' ratios
        # and the rounds it was faster in (a tie is not ahead)
        self.assertIn(f"| {tcq} | 41.7 (1.043x, ahead in 2 of 4) | - |", text)
        self.assertNotIn(four, text)


class RecipesShown(unittest.TestCase):
    def test_only_the_recipes_asked_for_are_judged(self):
        # A run of the new 2-bit recipe alone (--recipes f32,2bit400): no other recipe's row, no
        # verdict and no speed row for a recipe not run, and the one run is judged by its bound.
        ppl = perplexities({"2bit400": lambda m, c: 4.5, "4bit": lambda m, c: 9.0})
        text = render(ppl, recipes="f32,2bit400")
        self.assertTrue(recipe_line(text, "2bit400").endswith("| met |"))
        self.assertTrue(recipe_line(text, "f32").endswith("| - |"))
        for key in ("2bit", "4bit", "3bit", "q8_0"):
            name = next(r[1] for r in kv_goals.RECIPES if r[0] == key)
            self.assertNotIn(f"| {name} |", text)
        speed = {(r[0], "SmolLM2", 1): [30.0] for r in kv_goals.SPEED_ROWS}
        text = render(ppl, speed=speed, recipes="f32,2bit400")
        shown = [r[0] for r in kv_goals.SPEED_ROWS if f"| {r[0]} |" in text]
        self.assertEqual(shown, [r[0] for r in kv_goals.SPEED_ROWS if r[3] in (None, "2bit400")])
        # Without --recipes every recipe is shown (one over its bound: not met).
        self.assertTrue(recipe_line(render(ppl), "4bit").endswith("| **not met** |"))


if __name__ == "__main__":
    unittest.main()
