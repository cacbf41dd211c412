#!/usr/bin/env python3
"""Issue 28's four goals for the low-bit KV formats, measured in one run -> markdown.

On a held-out text (--text; the docs use the pydoc pages of 20 standard-library modules that
no tuning read), for SmolLM2-135M (3 KV heads, head dim 64) and Gemma 3 270M (1 KV head, head
dim 256), at context 512 and 2,048:

  1. quality: `kvserve perplexity --json` of each recipe (8, 4, 3 and 2 bits) against f32 KV,
     over at least 40K scored tokens per cell (--windows-512 160, --windows-2048 40: the second
     half of each window is scored), with the bound the issue sets for its bits;
  2. llama.cpp on the same GGUF and text (`llama-perplexity -fa on -ctk T -ctv T`, built
     outside the repository), against its own f16 KV: each recipe beside llama.cpp's formats of
     the fewest bits that are not fewer than the recipe's;
  3. users per GiB: the engine's pool (`kvserve plan --json`, 8 GiB, 64 sequences' window and
     sink rows counted) with each 2-bit recipe against f16;
  4. decode attention at 16K (`attention_bench`, both models' shapes): the 4- and 2-bit recipes
     against int4_had, alternating rounds, 1 and 2 threads; with --generate-rounds N also decode
     end to end (`kvserve generate` after a 16K-token prompt of tests/data's KJV text, 128
     tokens), the same rows alternating, N rounds; with --decode-bench the same rows end to end
     in one process per model (`decode_bench`: every format prefilled once with the 16K prompt,
     then slices of decode steps interleaved, so a shared machine's slow minutes hit all alike).

--recipes runs and shows some recipes only (a recipe changed after a text was read is judged on
a new text, alone), --llama-cells some of llama.cpp's cells, and --block names the markers, so
that a second run's tables sit beside the first's in one file.

Each run's result is cached as JSON in --results, so an interrupted run resumes and
--render-only rebuilds the tables. With --out FILE the tables replace the part of FILE between
the kv_goals BEGIN/END markers.

Usage:
  bench/kv_goals.py --text pydoc2.txt --llama-perplexity /path/llama-perplexity \
      [--attention-bench build/bench/attention_bench] [--out docs/kv-quantization.md] \
      [--recipes f32,2bit400 --llama-cells SmolLM2:2048 --block NAME] [--generate-rounds 3]
      [--decode-bench build/bench/decode_bench [--decode-rounds 48 --decode-steps 16]]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_cache import cached, llama_final_perplexity, splice_generated  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models"))
# name -> (GGUF, --kv-cache-memory for perplexity, attention_bench --shape)
MODELS = {"SmolLM2": ("SmolLM2-135M-Instruct.Q4_1.gguf", "1GiB", "smollm2"),
          "Gemma 3": ("gemma-3-270m-q4_k_m.gguf", "2GiB", "gemma3")}
WINDOW_SINK_128 = ["--kv-recent-window", "128", "--kv-attention-sink"]
TWO_BIT = ["--block-size", "64", "--kv-cache-dtype-k", "int2mix_chan64", "--kv-cache-dtype-v",
           "int2_had64", "--kv-recent-window", "256", "--kv-recent-window-dtype", "int8",
           "--kv-attention-sink"]
# SmolLM2's three layer parts (chosen on the KJV calibration text); Gemma 3's block groups
# refuse per-layer formats and it meets the bound without them.
TWO_BIT_SMOLLM2_LAYERS = ["--kv-cache-dtype-k-layers", "18=int4_chan64,20=int4_chan64",
                          "--kv-cache-dtype-v-layers", "1=int3_had"]
THREE_BIT = ["--block-size", "64", "--kv-cache-dtype-k", "int3_chan64", "--kv-cache-dtype-v",
             "int3_had", "--kv-recent-window", "256", "--kv-recent-window-dtype", "int8",
             "--kv-attention-sink"]
THREE_BIT_SMOLLM2_LAYERS = ["--kv-cache-dtype-k-layers", "18=int4_chan64,20=int4_chan64",
                            "--kv-cache-dtype-v-layers", "1=int4_had"]
# The 2-bit recipe since the held-out text of stop 54 (its +6.16% at SmolLM2 2,048 is that text's;
# this one was chosen on the calibration text, `pydoc.txt` of "Measured (issue 28)"): a window of
# 400 int8 rows, paid for on SmolLM2 by its layer 20 keys going back to 2 bits (at 2,048 on the
# calibration text: +4.74%, where the window of 256 with both layers' keys gave +5.41%).
TWO_BIT_400 = [f if f != "256" else "400" for f in TWO_BIT]
TWO_BIT_400_SMOLLM2_LAYERS = ["--kv-cache-dtype-k-layers", "18=int4_chan64",
                              "--kv-cache-dtype-v-layers", "1=int3_had"]
# The 2-bit recipe of stop 57: TWO_BIT_400 with its values trellis-coded (int2_tcq64, the same 18
# bytes per 64 elements as int2_had64), the same SmolLM2 layer parts.
TWO_BIT_TCQ = [f if f != "int2_had64" else "int2_tcq64" for f in TWO_BIT_400]
# (key, name, bound in % over f32 or None, flags, SmolLM2-only flags); keys starting "2bit" are
# goal 3's and goal 4's 2-bit recipes.
RECIPES = [
    ("f32", "f32", None, ["--kv-cache-dtype", "f32"], []),
    ("2bit", "2-bit: `int2mix_chan64 / int2_had64`, window 256 int8 + sink", 6.0, TWO_BIT,
     TWO_BIT_SMOLLM2_LAYERS),
    ("2bit400", "2-bit: `int2mix_chan64 / int2_had64`, window 400 int8 + sink", 6.0, TWO_BIT_400,
     TWO_BIT_400_SMOLLM2_LAYERS),
    ("2bittcq", "2-bit: `int2mix_chan64 / int2_tcq64`, window 400 int8 + sink", 6.0, TWO_BIT_TCQ,
     TWO_BIT_400_SMOLLM2_LAYERS),
    ("4bit", "4-bit: `int4_chan64 / int4_had`, window 128 + sink", 1.5,
     ["--block-size", "64", "--kv-cache-dtype-k", "int4_chan64", "--kv-cache-dtype-v", "int4_had",
      *WINDOW_SINK_128], []),
    ("3bit", "3-bit: `int3_chan64 / int3_had`, window 256 int8 + sink", 3.0, THREE_BIT,
     THREE_BIT_SMOLLM2_LAYERS),
    ("q8_0", "8-bit: `q8_0`", 0.2, ["--kv-cache-dtype", "q8_0"], []),
]
# llama.cpp's cache types: name -> bits per element (its blocks of 32 with an f16 scale).
LLAMA = {"f16": 16.0, "q8_0": 8.5, "q4_0": 4.5, "iq4_nl": 4.5}
CONTEXTS = (512, 2048)
# Decode attention rows: (name, formats, flags, the recipe's key or None) for attention_bench;
# a recipe's row runs when the recipe does.
SPEED_ROWS = [
    ("`int4_had`, block size 16", "int4_had", ["--block-size", "16"], None),
    ("`int4_had`, block size 64", "int4_had", ["--block-size", "64"], None),
    ("4-bit recipe (window 128 + sink)", "int4_chan64/int4_had",
     ["--block-size", "64", "--recent-window", "128", "--sink"], "4bit"),
    ("2-bit recipe (window 256 int8 + sink)", "int2mix_chan64/int2_had64",
     ["--block-size", "64", "--recent-window", "256", "--recent-window-dtype", "int8", "--sink"],
     "2bit"),
    ("2-bit recipe (window 400 int8 + sink)", "int2mix_chan64/int2_had64",
     ["--block-size", "64", "--recent-window", "400", "--recent-window-dtype", "int8", "--sink"],
     "2bit400"),
    ("2-bit trellis recipe (window 400 int8 + sink)", "int2mix_chan64/int2_tcq64",
     ["--block-size", "64", "--recent-window", "400", "--recent-window-dtype", "int8", "--sink"],
     "2bittcq"),
]


# Goal 4 end to end: (name, recipe key or None, flags without a recipe).
GENERATE_ROWS = [
    ("`int4_had`, block size 16", None, ["--kv-cache-dtype", "int4_had"]),
    ("4-bit recipe (window 128 + sink)", "4bit", None),
    ("2-bit trellis recipe (window 400 int8 + sink)", "2bittcq", None),
]
GENERATE_CONTEXT, GENERATE_TOKENS = 16384, 128
KJV = os.path.join(ROOT, "tests", "data", "kjv_genesis_exodus.txt")


def selected(a, key):
    """Whether --recipes (all when not given) holds `key`; f32 always runs."""
    keys = getattr(a, "recipes", None)
    return key is None or key == "f32" or not keys or key in keys.split(",")


def speed_rows(a):
    return [r for r in SPEED_ROWS if selected(a, r[3])]


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return out.stdout + out.stderr


def model_path(model):
    return os.path.join(MODEL_DIR, MODELS[model][0])


def recipe_flags(recipe, model):
    return recipe[3] + (recipe[4] if model == "SmolLM2" else [])


def windows(a, ctx):
    return a.windows_512 if ctx == 512 else a.windows_2048


def kvserve_perplexity(a, recipe, model, ctx):
    cmd = [a.kvserve, "perplexity", "-m", model_path(model), "-f", a.text, "--ctx", str(ctx),
           "--max-windows", str(windows(a, ctx)), "-t", str(a.threads), "--kv-cache-memory",
           MODELS[model][1], *recipe_flags(recipe, model), "--json"]
    j = json.loads(run(cmd))
    return {k: j[k] for k in ("perplexity", "scored_tokens", "text_tokens", "windows",
                              "kv_bytes_per_token")}


def llama_perplexity(a, t, model, ctx):
    cmd = [a.llama_perplexity, "-m", model_path(model), "-f", a.text, "-c", str(ctx), "-b",
           str(ctx), "--chunks", str(windows(a, ctx)), "-t", str(a.threads), "-fa", "on", "-ctk",
           t, "-ctv", t]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(a.llama_perplexity))
    ppl = llama_final_perplexity(run(cmd, env))
    if ppl is None:
        raise SystemExit(f"no final estimate from: {' '.join(cmd)}")
    return {"perplexity": ppl}


def plan_tokens(a, model, flags):
    cmd = [a.kvserve, "plan", "-m", model_path(model), "--memory", "8GiB", "--kv-cache-memory",
           "8GiB", *flags, "--json"]
    return {"tokens": json.loads(run(cmd))["engine_pool"]["num_tokens"]}


def attention_ms(a, shape, formats, flags, threads):
    cmd = [a.attention_bench, "--contexts", "16384", "--formats", formats, "--threads",
           str(threads), "--min-seconds", "0.5", "--shape", shape, *flags]
    rows = [l.split() for l in run(cmd).splitlines() if l.startswith(formats + " ")]
    if len(rows) != 1:
        raise SystemExit(f"no result row from: {' '.join(cmd)}")
    return float(rows[0][3])


def generate_rate(a, model, flags):
    # ~3.9 characters per token for this text (SmolLM2's tokenizer; Gemma 3's takes a few more
    # tokens): generate reports the exact count.
    with open(KJV) as f:
        prompt = f.read()[: int((GENERATE_CONTEXT - GENERATE_TOKENS) * 3.9)]
    cmd = [a.kvserve, "generate", "-m", model_path(model), "-p", prompt, "-n",
           str(GENERATE_TOKENS), "--ignore-eos", "--temp", "0", "--max-model-len",
           str(GENERATE_CONTEXT + 1024), "--kv-cache-memory", "2GiB", "-t", str(a.threads), *flags,
           "--json"]
    j = json.loads(run(cmd))
    return {"tok_s": j["decode_tokens_per_s"], "prompt_tokens": j["prompt_tokens"]}


def generate_row_flags(key, flags, model):
    """A goal 4 row's flags for `model`: its recipe's (key) or its own."""
    return flags if key is None else recipe_flags(next(r for r in RECIPES if r[0] == key), model)


def decode_bench(a, model):
    """Goal 4's rows end to end in one decode_bench run (its JSON)."""
    cmd = [a.decode_bench, "-m", model_path(model), "--context", str(GENERATE_CONTEXT), "--rounds",
           str(a.decode_rounds), "--steps", str(a.decode_steps), "-t", str(a.threads), "--json"]
    for name, key, flags in generate_rows(a):
        cmd += ["--case", f"{name}: {' '.join(generate_row_flags(key, flags, model))}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-2000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return json.loads(out.stdout)


def generate_rows(a):
    return [r for r in GENERATE_ROWS if selected(a, r[1])]


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def pct(x, base):
    return 100 * (x / base - 1)


def render(a, ppl, llama, plans, speed, generated=None, interleaved=None):
    lines = []
    w = lines.append
    cells = [(m, c) for m in MODELS for c in CONTEXTS]
    head = " | ".join(f"{m} {c}" for m, c in cells)
    f32 = {cell: ppl.get(("f32",) + cell) for cell in cells}
    any_f32 = next((r for r in f32.values() if r), None)
    if any_f32:
        scored = sorted({r["scored_tokens"] for r in f32.values() if r})
        w(f"Goal 1, perplexity against f32 KV ({'/'.join(f'{s:,}' for s in scored)} scored tokens "
          "per cell); bits per element from the blocks' bytes per token, SmolLM2 / Gemma 3 where they "
          "differ (the window's and the sink's per-sequence rows come on top, and are in goal "
          "3's count):")
        w("")
        w(f"| recipe | bits | bound | {head} | met |")
        w("|---|---:|---:|" + "---:|" * len(cells) + "---|")
        f16_bpt = {m: None for m in MODELS}
        for recipe in [r for r in RECIPES if selected(a, r[0])]:
            key, name, bound = recipe[0], recipe[1], recipe[2]
            row, ok, bits = [], True, {}
            for cell in cells:
                r, base = ppl.get((key,) + cell), f32[cell]
                if not r or not base:
                    row.append("-")
                    ok = False
                    continue
                if key == "f32":
                    row.append(f"{r['perplexity']:.4f}")
                    f16_bpt[cell[0]] = r["kv_bytes_per_token"] / 2
                    continue
                d = pct(r["perplexity"], base["perplexity"])
                within = bound is None or d <= bound
                ok = ok and within
                row.append(f"{r['perplexity']:.4f} ({d:+.2f}%)" if within else
                           f"{r['perplexity']:.4f} (**{d:+.2f}%**)")
                if f16_bpt[cell[0]]:
                    bits[cell[0]] = f"{16 * r['kv_bytes_per_token'] / f16_bpt[cell[0]]:.2f}"
            # Per model (SmolLM2 / Gemma 3) where they differ.
            shown = list(dict.fromkeys(bits.values()))
            bits_s = " / ".join(bits.values()) if len(shown) > 1 else (
                shown[0] if shown else ("32" if key == "f32" else "-"))
            bound_s = f"+{bound:g}%" if bound is not None else "-"
            met = "-" if bound is None else ("met" if ok else "**not met**")
            w(f"| {name} | {bits_s} | {bound_s} | " + " | ".join(row) + f" | {met} |")
    if llama:
        w("")
        w("Goal 2, llama.cpp on the same GGUF, text and windows, against its own f16 KV "
          "(`llama-perplexity -c C -b C --chunks N -fa on -ctk T -ctv T`):")
        w("")
        w(f"| llama.cpp | bits | {head} |")
        w("|---|---:|" + "---:|" * len(cells))
        for t, bits in LLAMA.items():
            if not any(llama.get((t,) + cell) for cell in cells):
                continue  # not run
            row = []
            for cell in cells:
                r, base = llama.get((t,) + cell), llama.get(("f16",) + cell)
                if not r:
                    row.append("-")
                elif t == "f16" or not base:
                    row.append(f"{r['perplexity']:.4f}")
                else:
                    row.append(f"{r['perplexity']:.4f} ({pct(r['perplexity'], base['perplexity']):+.2f}%)")
            w(f"| `{t}` | {bits:g} | " + " | ".join(row) + " |")
        w("")
        for recipe in [r for r in RECIPES[1:] if selected(a, r[0])]:
            key, name = recipe[0], recipe[1]
            vs = ["q8_0"] if key == "q8_0" else ["q4_0", "iq4_nl"]
            verdicts = []
            for t in vs:
                better = []
                for cell in cells:
                    r, base = ppl.get((key,) + cell), f32[cell]
                    lr, lbase = llama.get((t,) + cell), llama.get(("f16",) + cell)
                    if not (r and base and lr and lbase):
                        continue
                    mine = pct(r["perplexity"], base["perplexity"])
                    theirs = pct(lr["perplexity"], lbase["perplexity"])
                    better.append(mine < theirs)
                if better:
                    verdicts.append(f"better than `{t}` ({LLAMA[t]:g} bits) in "
                                    f"{sum(better)} of {len(better)} cells")
            if verdicts:
                w(f"- {name}: " + "; ".join(verdicts) + ".")
    if plans:
        w("")
        w("Goal 3, `kvserve plan -m M --memory 8GiB --kv-cache-memory 8GiB FLAGS --json`'s engine "
          "pool (64 sequences' window and sink rows counted), each 2-bit recipe against f16:")
        w("")
        w("| model | 2-bit recipe | f16 tokens | 2-bit recipe tokens | x f16 |")
        w("|---|---|---:|---:|---:|")
        for m in MODELS:
            for recipe in RECIPES:
                f16, two = plans.get((m, "f16")), plans.get((m, recipe[0]))
                if recipe[0].startswith("2bit") and f16 and two:
                    w(f"| {m} | {recipe[1].split(', ', 1)[1]} | {f16['tokens']:,} | "
                      f"{two['tokens']:,} | {two['tokens'] / f16['tokens']:.2f}x |")
    if speed:
        w("")
        w(f"Goal 4, decode attention at 16K (`attention_bench --contexts 16384 --min-seconds 0.5 "
          f"--shape S --threads T`), ms per step, {a.rounds} alternating rounds (each cell: the "
          "rounds' values, then their best against `int4_had`'s best at block size 16):")
        w("")
        shapes = [(m, t) for m in MODELS for t in (1, 2)]
        w("| decode attention | " + " | ".join(f"{m}, {t} thread{'s' if t > 1 else ''}"
                                               for m, t in shapes) + " |")
        w("|---|" + "---|" * len(shapes))
        rows = speed_rows(a)
        for name, formats, flags, _ in rows:
            row = []
            for m, t in shapes:
                v = speed.get((name, m, t))
                ref = speed.get((SPEED_ROWS[0][0], m, t))
                if not v:
                    row.append("-")
                    continue
                s = ", ".join(f"{x:.1f}" for x in v)
                if ref and name != SPEED_ROWS[0][0]:
                    s += f" ({min(ref) / min(v):.2f}x)"
                row.append(s)
            w(f"| {name} | " + " | ".join(row) + " |")
    if generated:
        prompts = sorted({p for v in generated.values() for p in v["prompts"]})
        rounds = max(len(v["tok_s"]) for v in generated.values())
        w("")
        w(f"Goal 4 end to end, `kvserve generate -n {GENERATE_TOKENS} --ignore-eos --temp 0 "
          f"-t {a.threads}` after a prompt of {'/'.join(f'{p:,}' for p in prompts)} tokens (the "
          f"KJV text), decode tokens/s, {rounds} alternating rounds (each cell: the rounds' "
          "values, then their median against `int4_had`'s median):")
        w("")
        w("| decode end to end | " + " | ".join(MODELS) + " |")
        w("|---|" + "---|" * len(MODELS))
        first = GENERATE_ROWS[0][0]
        for name, _, _ in generate_rows(a):
            row = []
            for m in MODELS:
                v, ref = generated.get((name, m)), generated.get((first, m))
                if not v:
                    row.append("-")
                    continue
                s = ", ".join(f"{x:.1f}" for x in v["tok_s"])
                if ref and name != first:
                    s += f" ({median(v['tok_s']) / median(ref['tok_s']):.2f}x)"
                row.append(s)
            w(f"| {name} | " + " | ".join(row) + " |")
    if interleaved:
        j = next(iter(interleaved.values()))
        w("")
        w(f"Goal 4 end to end, interleaved (`bench/decode_bench --context {j['context']} --rounds "
          f"{j['rounds']} --steps {j['steps']} -t {a.threads}`): each format's engine prefilled "
          f"with the first {j['context']:,} tokens of the KJV text, then {j['rounds']} rounds in "
          f"which each runs {j['steps']} decode steps in turn. Each cell: decode tokens/s (median "
          "of the rounds), then the median of the rounds' ratios to `int4_had` in the same round "
          "and the rounds in which the format was the faster:")
        w("")
        w("| decode end to end, interleaved | " + " | ".join(MODELS) + " |")
        w("|---|" + "---|" * len(MODELS))
        for name, _, _ in generate_rows(a):
            row = []
            for m in MODELS:
                c = next((c for c in interleaved.get(m, {"cases": []})["cases"]
                          if c["name"] == name), None)
                if not c:
                    row.append("-")
                    continue
                s = f"{1000 / c['median_ms']:.1f}"
                base = interleaved[m]["cases"][0]["ms_per_step"]
                if name != GENERATE_ROWS[0][0]:
                    ahead = sum(1 for b, x in zip(base, c["ms_per_step"]) if x < b)
                    s += f" ({c['ratio_median']:.3f}x, ahead in {ahead} of {len(base)})"
                row.append(s)
            w(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", help="held-out text (required unless --skip-quality)")
    p.add_argument("--skip-quality", action="store_true",
                   help="no perplexity runs (goals 1 and 2): capacity and speed only")
    p.add_argument("--kvserve", default=os.path.join(ROOT, "build", "bin", "kvserve"))
    p.add_argument("--llama-perplexity")
    p.add_argument("--llama-types", default="f16,q4_0,q8_0",
                   help="llama.cpp cache types to run (of %s)" % ",".join(LLAMA))
    p.add_argument("--llama-cells",
                   help="llama.cpp's cells to run, MODEL:CONTEXT,... (default: all four)")
    p.add_argument("--recipes", help="recipe keys to run and show, comma-separated (of %s; "
                   "default: all; f32 always)" % ",".join(r[0] for r in RECIPES))
    p.add_argument("--block", default="",
                   help="with --out: the markers' name (`<!-- BEGIN generated by "
                        "bench/kv_goals.py NAME -->`), for a second run's tables in the same file")
    p.add_argument("--attention-bench")
    p.add_argument("--windows-512", type=int, default=160)
    p.add_argument("--windows-2048", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="alternating attention_bench rounds")
    p.add_argument("--generate-rounds", type=int, default=0,
                   help="alternating rounds of end-to-end decode at 16K (kvserve generate)")
    p.add_argument("--decode-bench", help="build/bench/decode_bench: goal 4 end to end, interleaved")
    p.add_argument("--decode-rounds", type=int, default=48)
    p.add_argument("--decode-steps", type=int, default=16)
    p.add_argument("--results", default="/tmp/kvserve-kv-goals")
    p.add_argument("--render-only", action="store_true")
    p.add_argument("--out")
    a = p.parse_args()
    if not a.skip_quality and not a.text:
        raise SystemExit("--text is required (or --skip-quality)")
    if a.text and not os.path.exists(a.text):
        raise SystemExit(f"--text {a.text}: no such file")
    for key in a.recipes.split(",") if a.recipes else []:
        if key not in [r[0] for r in RECIPES]:
            raise SystemExit(f"--recipes: {key} is not one of {', '.join(r[0] for r in RECIPES)}")
    cells = [(m, c) for m in MODELS for c in CONTEXTS]
    if a.llama_cells:
        wanted = a.llama_cells.split(",")
        for w in wanted:
            if w not in [f"{m}:{c}" for m, c in cells]:
                raise SystemExit(f"--llama-cells: {w} is not MODEL:CONTEXT of "
                                 f"{', '.join(f'{m}:{c}' for m, c in cells)}")
        cells = [(m, c) for m, c in cells if f"{m}:{c}" in wanted]
    os.makedirs(a.results, exist_ok=True)
    # The text's results are named by its content too: another text under the same file name
    # never reads them.
    tag = ""
    if a.text:
        with open(a.text, "rb") as f:
            tag = (os.path.basename(a.text).replace(".", "_") + "_" +
                   hashlib.sha1(f.read()).hexdigest()[:8])
    ppl, llama, plans, speed = {}, {}, {}, {}

    def result(name, fn):
        return cached(a.results, name, fn, a.render_only)

    def flags_hash(recipe, m):
        return hashlib.sha1(" ".join(recipe_flags(recipe, m)).encode()).hexdigest()[:8]

    for m in MODELS:
        plans[(m, "f16")] = result(f"plan_{m[0]}_f16", lambda: plan_tokens(a, m, []))
        for recipe in RECIPES:
            if recipe[0].startswith("2bit") and selected(a, recipe[0]):
                plans[(m, recipe[0])] = result(
                    f"plan_{m[0]}_{recipe[0]}_{flags_hash(recipe, m)}",
                    lambda: plan_tokens(a, m, recipe_flags(recipe, m)))
    # Recipes first (f32 and the goals' formats), then llama.cpp's rows.
    for recipe in [r for r in RECIPES if selected(a, r[0]) and not a.skip_quality]:
        for m in MODELS:
            for c in CONTEXTS:
                ppl[(recipe[0], m, c)] = result(
                    f"ppl_{tag}_{recipe[0]}_{flags_hash(recipe, m)}_{m[0]}_{c}_{windows(a, c)}",
                    lambda: kvserve_perplexity(a, recipe, m, c))
    if a.llama_perplexity and not a.skip_quality:
        for c in CONTEXTS:
            for t in a.llama_types.split(","):
                if t not in LLAMA:
                    raise SystemExit(f"--llama-types: {t} is not one of {', '.join(LLAMA)}")
                for m in MODELS:
                    if (m, c) not in cells:
                        continue
                    llama[(t, m, c)] = result(f"llama_{tag}_{t}_{m[0]}_{c}_{windows(a, c)}",
                                              lambda: llama_perplexity(a, t, m, c))
    if a.attention_bench:
        for m, (_, _, shape) in MODELS.items():
            for t in (1, 2):
                for i in range(a.rounds):
                    for name, formats, flags, _ in speed_rows(a):
                        v = result(f"attn_{m[0]}_{t}_{i}_{formats.replace('/', '_')}_"
                                      f"{'_'.join(f.strip('-') for f in flags)}",
                                   lambda: {"ms": attention_ms(a, shape, formats, flags, t)})
                        if v:
                            speed.setdefault((name, m, t), []).append(v["ms"])
    generated = {}
    for m in MODELS:
        for i in range(a.generate_rounds):
            for name, key, flags in generate_rows(a):
                flags = generate_row_flags(key, flags, m)
                digest = hashlib.sha1(" ".join(flags).encode()).hexdigest()[:8]
                v = result(f"generate_{m[0]}_{i}_{digest}", lambda: generate_rate(a, m, flags))
                if v:
                    g = generated.setdefault((name, m), {"tok_s": [], "prompts": set()})
                    g["tok_s"].append(v["tok_s"])
                    g["prompts"].add(v["prompt_tokens"])
    interleaved = {}
    if a.decode_bench:
        for m in MODELS:
            digest = hashlib.sha1(repr((generate_rows(a), a.decode_rounds, a.decode_steps,
                                        a.threads)).encode()).hexdigest()[:8]
            v = result(f"decode_bench_{m[0]}_{digest}", lambda: decode_bench(a, m))
            if v:
                interleaved[m] = v
    text = render(a, {k: v for k, v in ppl.items() if v}, {k: v for k, v in llama.items() if v},
                  {k: v for k, v in plans.items() if v}, speed, generated, interleaved)
    if not a.out or a.out == "-":
        sys.stdout.write(text)
        return
    name = f" {a.block}" if a.block else ""
    splice_generated(a.out, f"<!-- BEGIN generated by bench/kv_goals.py{name} -->",
                     f"<!-- END generated by bench/kv_goals.py{name} -->", text)


if __name__ == "__main__":
    main()
