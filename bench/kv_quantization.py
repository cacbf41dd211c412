#!/usr/bin/env python3
"""Quality, capacity and speed of every KV cache format on the default model -> markdown.

For each format (and the useful K/V combinations):
  * perplexity on tests/data/kjv_genesis_exodus.txt (public domain, ~90K tokens), windows of
    512 tokens, the second half of each scored (`kvserve perplexity --json`), and its change
    vs f32;
  * KV bytes per token (kv_geometry's formula, scales included) and the tokens that fit in a
    fixed KV budget (the engine's pool as `kvserve plan` sizes it: whole blocks, after the f16
    rows of --max-num-seqs sequences that per-channel keys, a window and the sink keep);
  * decode tokens/s at 1K, 4K and 16K context (`kvserve generate --json`, a prompt of that
    many tokens of the same text, then --decode-tokens greedy tokens);
  * optionally llama.cpp's KV formats on the same GGUF and text (`llama-perplexity -ctk/-ctv`,
    built outside the repository): pass --llama-perplexity PATH.
and, if --attention-bench is given, appends build/bench/attention_bench's table (decode
attention alone vs the machine's measured read bandwidth).

Results of each run are cached as JSON in --results (rerun = only the missing runs), so the
table can be built up over several sessions and re-rendered with --render-only. With --out FILE
the tables replace the part of FILE between the BEGIN/END markers; the rest is kept.

Usage:
  bench/kv_quantization.py [--kvserve build/bin/kvserve] [--windows 40 | --windows 0 (all)]
      [--contexts 1024,4096,16384] [--llama-perplexity /path/llama-perplexity]
      [--attention-bench build/bench/attention_bench] [--results DIR] [--out docs/kv-quantization.md]
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_cache import cached, llama_final_perplexity, splice_generated  # noqa: E402
import kv_goals  # noqa: E402 (issue 28's recipes, the recipe:KEY rows)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(ROOT, "tests", "data", "kjv_genesis_exodus.txt")
MODEL = os.path.join(os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models")),
                     "SmolLM2-135M-Instruct.Q4_1.gguf")

# Rows "K/V[@W[+sink]]": K and V formats, and optionally a recent-token window of W tokens in f16
# (--kv-recent-window) with or without the attention sink (--kv-attention-sink). Every format with
# K = V, then mixed K/V combinations people ask for, then per-channel keys (keys only) with the
# values they are paired with, and the 4-, 3- and 2-bit pairs with a window and the sink. Keys per
# channel over 64 tokens (*_chan64) run in blocks of 64.
FORMATS = ["f32/f32", "f16/f16", "bf16/bf16", "fp8_e4m3/fp8_e4m3", "fp8_e5m2/fp8_e5m2",
           "fp8_e4m3_dyn/fp8_e4m3_dyn", "int8/int8", "int8_had/int8_had", "q8_0/q8_0", "int4/int4",
           "int4_had/int4_had", "int3_had/int3_had", "int2_had/int2_had", "int2_had64/int2_had64",
           "q4_0/q4_0",
           "int8/int4", "int8/int4_had", "f16/int4", "f16/int8", "q8_0/q4_0",
           "int4_chan/int4_had", "int4_chan64/int4_had", "int3_chan/int3_had",
           "int3_chan64/int3_had", "int2_chan/int2_had", "int2_chan64/int2_had",
           "int2mix_chan64/int2_had64",
           "int4_chan64/int4_had@128+sink", "int3_chan/int3_had@128+sink",
           "int2_chan/int2_had@128+sink", "int2_chan64/int2_had@128+sink",
           "int2mix_chan64/int2_had64@128+sink",
           "int2_tcq64/int2_tcq64", "int2mix_chan64/int2_tcq64",
           "int2mix_chan64/int2_tcq64@400i8+sink",
           # issue 28's recipes as bench/kv_goals.py defines them (SmolLM2's flags)
           "recipe:4bit", "recipe:3bit", "recipe:2bit400", "recipe:2bittcq"]
SPEED_FORMATS = [f for f in FORMATS if "@" not in f and ":" not in f and
                 f.split("/")[0] == f.split("/")[1]] + [
    f for f in FORMATS if "chan" in f] + ["int8/int4_had"] + [
    f for f in FORMATS if f.startswith("recipe:")]
LLAMA_FORMATS = [("f32", "f32"), ("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "q4_0")]


def run_json(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return json.loads(out.stdout)


ROW = re.compile(r"^([a-z0-9_]+)/([a-z0-9_]+)(?:@([0-9]+)(i8)?(\+sink)?)?$")


def parse_row(row):
    # "K/V[@W[i8][+sink]]" -> (K, V, W, window rows in int8, sink).
    m = ROW.match(row)
    if not m:
        raise SystemExit(f"bad row '{row}': expected K/V, K/V@W[i8] or K/V@W[i8]+sink (e.g. "
                         "int2_chan/int2_had@128+sink, int2mix_chan64/int2_tcq64@400i8+sink), or "
                         "recipe:KEY (bench/kv_goals.py's recipes)")
    return (m.group(1), m.group(2), int(m.group(3) or 0), m.group(4) is not None,
            m.group(5) is not None)


def goals_recipe(row):
    # "recipe:KEY" -> bench/kv_goals.py's recipe KEY, or None for a K/V row.
    if not row.startswith("recipe:"):
        return None
    for r in kv_goals.RECIPES:
        if r[0] == row.split(":", 1)[1]:
            return r
    raise SystemExit(f"bad row '{row}': no such recipe in bench/kv_goals.py")


def block_size_of(a, row):
    recipe = goals_recipe(row)
    if recipe:
        flags = recipe[3]
        return int(flags[flags.index("--block-size") + 1]) if "--block-size" in flags else a.block_size
    return 64 if parse_row(row)[0].endswith("_chan64") else a.block_size


def row_flags(a, row):
    recipe = goals_recipe(row)
    if recipe:
        return kv_goals.recipe_flags(recipe, "SmolLM2")
    k, v, window, int8_rows, sink = parse_row(row)
    flags = ["--kv-cache-dtype-k", k, "--kv-cache-dtype-v", v, "--block-size",
             str(block_size_of(a, row))]
    if window:
        flags += ["--kv-recent-window", str(window)]
    if int8_rows:
        flags += ["--kv-recent-window-dtype", "int8"]
    if sink:
        flags += ["--kv-attention-sink"]
    return flags


def row_key(a, row):
    # A file name for the row's cached results (its flags, the block size included; a recipe's
    # key names its flags' hash, so that a changed recipe is run again).
    if goals_recipe(row):
        digest = hashlib.sha256(" ".join(row_flags(a, row)).encode()).hexdigest()[:8]
        return row.replace(":", "_") + "_" + digest
    return (row.replace("/", "_").replace("@", "_w").replace("+sink", "s") +
            f"_bs{block_size_of(a, row)}")


def perplexity(a, row):
    cmd = [a.kvserve, "perplexity", "-f", TEXT, "--ctx", "512", *row_flags(a, row), "--json"]
    if a.windows:
        cmd += ["--max-windows", str(a.windows)]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    return run_json(cmd)


def llama_perplexity(a, k, v):
    cmd = [a.llama_perplexity, "-m", MODEL, "-f", TEXT, "-c", "512", "-b", "512", "-fa", "on",
           "-ctk", k, "-ctv", v]
    if a.windows:
        cmd += ["--chunks", str(a.windows)]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(a.llama_perplexity))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    ppl = llama_final_perplexity(out.stdout + out.stderr)
    if ppl is None:
        sys.stderr.write(out.stderr[-2000:])
        return None
    chunks = re.findall(r"\[(\d+)\][0-9.]+", out.stdout + out.stderr)
    return {"perplexity": ppl, "chunks": int(chunks[-1]) if chunks else 0}


def prompt_of_tokens(n):
    # ~3.9 characters per token for this text and tokenizer; generate reports the exact count.
    with open(TEXT) as f:
        text = f.read()
    return text[: int(n * 3.9)]


def pool_tokens(a, row):
    # Tokens the engine's pool holds in the budget with these flags, as `kvserve plan` sizes it
    # (equal to the engine's to the byte): per-sequence f16 rows (key tails, window, sink) for
    # --max-num-seqs sequences come out of the budget before the blocks.
    cmd = [a.kvserve, "plan", MODEL, "--kv-cache-memory", f"{a.budget_gib:g}GiB", "--max-num-seqs",
           str(a.max_num_seqs), "--context", "2048", *row_flags(a, row), "--json"]
    return run_json(cmd)["engine_pool"]


def decode_speed(a, row, ctx):
    cmd = [a.kvserve, "generate", "-p", prompt_of_tokens(ctx - a.decode_tokens), "-n",
           str(a.decode_tokens), "--ignore-eos", "--temp", "0", "--json", *row_flags(a, row),
           "--max-model-len", str(ctx + 1024), "--kv-cache-memory", "2GiB"]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    # Best of --decode-repeats runs: one 64-token run on a shared machine can lose a third of
    # its rate to a neighbour.
    j = max((run_json(cmd) for _ in range(max(1, a.decode_repeats))),
            key=lambda r: r["decode_tokens_per_s"])
    j["decode_runs"] = max(1, a.decode_repeats)
    j.pop("runs", None)
    j.pop("text", None)
    return j


def fmt_name(k, v):
    return k if k == v else f"{k} / {v}"


def row_name(row):
    recipe = goals_recipe(row)
    if recipe:
        return recipe[1] + (" (SmolLM2's layer parts)" if recipe[4] else "")
    k, v, window, int8_rows, sink = parse_row(row)
    return (fmt_name(k, v) + (f", window {window}" if window else "") +
            (" int8" if int8_rows else "") + (" + sink" if sink else ""))


def render(a, ppl, llama, speed, pools):
    lines = []
    w = lines.append
    f32 = ppl.get("f32/f32")
    base = f32["perplexity"] if f32 else None
    scored = f32["scored_tokens"] if f32 else 0
    text_tokens = f32["text_tokens"] if f32 else 0
    f16 = ppl.get("f16/f16")
    w("| K / V format | perplexity | vs f32 | vs f16 | KV bytes / token | tokens in %g GiB | %s |"
      % (a.budget_gib, " | ".join(f"decode tok/s @{c // 1024}K" for c in a.contexts)))
    w("|---|---:|---:|---:|---:|---:|" + "---:|" * len(a.contexts))
    for row in FORMATS:
        r = ppl.get(row)
        if not r:
            continue
        bpt = r["kv_bytes_per_token"]
        pool = pools.get(row)
        tokens = f"{pool['num_tokens']:,}" if pool else "-"
        delta = f"{100 * (r['perplexity'] / base - 1):+.2f}%" if base else "-"
        d16 = f"{100 * (r['perplexity'] / f16['perplexity'] - 1):+.2f}%" if f16 else "-"
        sp = []
        for c in a.contexts:
            s = speed.get((row, c))
            sp.append(f"{s['decode_tokens_per_s']:.1f}" if s else "-")
        w(f"| {row_name(row)} | {r['perplexity']:.4f} | {delta} | {d16} | {bpt:,} | {tokens} | "
          + " | ".join(sp) + " |")
    w("")
    w(f"Tokens in {a.budget_gib:g} GiB: the engine's pool as `kvserve plan --kv-cache-memory "
      f"{a.budget_gib:g}GiB --max-num-seqs {a.max_num_seqs}` sizes it with the row's flags (whole "
      f"blocks of {a.block_size} tokens, 64 for keys per channel over 64 tokens, after the f16 rows "
      f"that {a.max_num_seqs} sequences keep beside them: per-channel keys' unfinished groups, the "
      "window, the sink). KV bytes / token counts the blocks only.")
    if speed:
        ctx_words = []
        for c in a.contexts:
            runs = [s for (row, cc), s in speed.items() if cc == c]
            if runs:
                ctx_words.append(f"@{c // 1024}K = a prompt of {runs[0]['prompt_tokens']:,} tokens + "
                                 f"{runs[0]['generated_tokens']} generated")
        w("")
        runs_of = []
        for c in a.contexts:
            n = sorted({s.get("decode_runs", 1) for (row, cc), s in speed.items() if cc == c})
            if n:
                runs_of.append(f"@{c // 1024}K best of {'/'.join(str(x) for x in n)}")
        w("Decode tok/s: `kvserve generate --temp 0 --ignore-eos -n %d --json` on one stream, %s "
          "threads, prompt = the start of the same text (%s); the rate of the decode steps only "
          "(%s runs)."
          % (a.decode_tokens, a.threads or "all (2)", "; ".join(ctx_words), ", ".join(runs_of)))
    if llama:
        lf32, lf16 = llama.get(("f32", "f32")), llama.get(("f16", "f16"))
        w("")
        chunks = f" --chunks {a.windows}" if a.windows else ""
        w(f"llama.cpp (`llama-perplexity -c 512 -b 512 -fa on -ctk K -ctv V{chunks}`, built outside the "
          "repository, same GGUF, text and windows; its changes are vs its own f32 / f16 KV cache):")
        w("")
        w("| llama.cpp K / V | perplexity | vs llama.cpp f32 | vs llama.cpp f16 | KV bytes / token |")
        w("|---|---:|---:|---:|---:|")
        bytes_of = {"f32": 46080 // 2, "f16": 23040 // 2, "q8_0": 12240 // 2, "q4_0": 6480 // 2}
        for k, v in LLAMA_FORMATS:
            r = llama.get((k, v))
            if not r:
                continue
            d32 = f"{100 * (r['perplexity'] / lf32['perplexity'] - 1):+.2f}%" if lf32 else "-"
            d = f"{100 * (r['perplexity'] / lf16['perplexity'] - 1):+.2f}%" if lf16 else "-"
            w(f"| {fmt_name(k, v)} | {r['perplexity']:.4f} | {d32} | {d} | {bytes_of[k] + bytes_of[v]:,} |")
    # The quality targets, checked on these numbers.
    def change(r, ref):
        return 100 * (r["perplexity"] / ref["perplexity"] - 1) if r and ref else None
    checks = []
    for k, limit in (("int8", 0.5), ("fp8_e4m3", 2.0), ("int4", 5.0), ("int4_had", 5.0)):
        c = change(ppl.get(f"{k}/{k}"), f32)
        if c is not None:
            checks.append(f"- {k}: {c:+.2f}% vs f32 (target <= +{limit}%): "
                          + ("met" if c <= limit else "NOT met"))
    # Against llama.cpp: each engine's change vs its own f32 KV cache (f16 if llama.cpp's f32
    # run is missing), since the two engines' baselines differ slightly.
    lbase = llama.get(("f32", "f32")) or llama.get(("f16", "f16"))
    obase = f32 if llama.get(("f32", "f32")) else f16
    bname = "f32" if llama.get(("f32", "f32")) else "f16"
    if lbase and obase:
        f16, lf16 = obase, lbase
        for ours, theirs in (("int8", "q8_0"), ("fp8_e4m3", "q8_0"), ("int4", "q4_0"),
                             ("int4_had", "q4_0"), ("q4_0", "q4_0"), ("q8_0", "q8_0")):
            c, t = change(ppl.get(f"{ours}/{ours}"), f16), change(llama.get((theirs, theirs)), lf16)
            if c is not None and t is not None:
                checks.append(f"- {ours} {c:+.2f}% vs kvserve {bname}, llama.cpp {theirs} {t:+.2f}% vs "
                              f"llama.cpp {bname}: " + ("no worse" if c <= t + 0.05 else "WORSE"))
        mixed, lmixed = ppl.get("int8/int4"), llama.get(("q8_0", "q4_0"))
        c, t = change(mixed, f16), change(lmixed, lf16)
        if c is not None and t is not None:
            checks.append(f"- int8 / int4 {c:+.2f}% vs kvserve {bname}, llama.cpp q8_0 / q4_0 {t:+.2f}%: "
                          + ("no worse" if c <= t + 0.05 else "WORSE"))
    if checks:
        w("")
        w("Targets:")
        w("")
        lines.extend(checks)
    return "\n".join(lines), scored, text_tokens


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kvserve", default=os.path.join(ROOT, "build", "bin", "kvserve"))
    p.add_argument("--windows", type=int, default=40, help="windows of 512 tokens (0 = the whole text)")
    p.add_argument("--contexts", default="1024,4096,16384")
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--decode-repeats", type=int, default=2, help="best of N generate runs per cell")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--budget-gib", type=float, default=1.0)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--llama-perplexity", default="")
    p.add_argument("--attention-bench", default="")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--skip-perplexity", action="store_true")
    p.add_argument("--max-num-seqs", type=int, default=16,
                   help="sequences whose f16 rows (key tails, window, sink) the pool column keeps")
    p.add_argument("--formats", default="",
                   help="rows K/V[@W[+sink]] for the perplexity runs, in this order (default: all)")
    p.add_argument("--speed-formats", default=",".join(SPEED_FORMATS),
                   help="rows for the decode runs, e.g. f16/f16,int8/int8,int2_chan/int2_had@128+sink")
    p.add_argument("--render-only", action="store_true", help="only use cached results")
    p.add_argument("--only", action="store_true",
                   help="run and render the rows of --formats alone (e.g. a new format's, with "
                        "f32/f32 and f16/f16 for its vs columns), not the whole table")
    p.add_argument("--results", default="/tmp/kvserve-kv-quantization")
    p.add_argument("--out", default="-", help="markdown table file (default: stdout)")
    a = p.parse_args()
    a.contexts = [int(c) for c in a.contexts.split(",") if c]
    os.makedirs(a.results, exist_ok=True)
    get = (lambda name, fn: cached(a.results, name, (lambda: None) if a.render_only else fn))
    tag = f"w{a.windows}"
    ppl = {}
    pools = {}
    run_first = [row for row in a.formats.split(",") if row]
    rows = run_first if a.only else run_first + [f for f in FORMATS if f not in run_first]
    for row in rows:
        r = get(f"ppl_{tag}_{row_key(a, row)}",
                (lambda: None) if a.skip_perplexity else (lambda: perplexity(a, row)))
        if r:
            ppl[row] = r
            pools[row] = get(f"pool_{a.budget_gib}_{a.max_num_seqs}_{row_key(a, row)}",
                             lambda: pool_tokens(a, row))
    llama = {}
    if a.llama_perplexity or a.render_only:
        for k, v in LLAMA_FORMATS:
            r = get(f"llama_{tag}_{k}_{v}", lambda: llama_perplexity(a, k, v))
            if r:
                llama[(k, v)] = r
    speed = {}
    speed_formats = [row for row in a.speed_formats.split(",") if row]
    if not a.skip_speed:
        for c in a.contexts:
            for row in speed_formats:
                r = get(f"decode_{c}_{row_key(a, row)}", lambda: decode_speed(a, row, c))
                if r:
                    speed[(row, c)] = r
    table, scored, text_tokens = render(a, ppl, llama, speed, pools)
    which = (f"the first {a.windows} windows ({text_tokens:,} tokens)" if a.windows else
             f"all {text_tokens:,} tokens")
    whole = "" if not a.windows else " (about 91K tokens in all)"
    out = [table, "",
           f"Perplexity over {scored:,} scored tokens: {which} of tests/data/kjv_genesis_exodus.txt"
           f"{whole}, in windows of 512 tokens whose second half is scored."]
    if a.attention_bench:
        res = subprocess.run([a.attention_bench, "--markdown"], capture_output=True, text=True, check=True)
        out += ["", "```", "attention_bench --markdown", "```", "", res.stdout]
    text = "\n".join(out) + "\n"
    if a.out == "-":
        sys.stdout.write(text)
        return
    # The generated part sits between markers; the hand-written analysis around it is kept.
    begin, end = "<!-- BEGIN generated by bench/kv_quantization.py -->", "<!-- END generated -->"
    splice_generated(a.out, begin, end, text, new_doc=f"# KV cache quantization\n\n{begin}\n{end}\n")


if __name__ == "__main__":
    main()
