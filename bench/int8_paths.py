#!/usr/bin/env python3
"""End-to-end effect of the 8-bit GEMM (kernels/int8_gemm.h): kvserve generate on the default model
with the integer matmul forced onto the Highway int16 path (KVSERVE_INT8_ISA=none: the only path
before the 8-bit GEMM) and with matmul()'s default choice, alternating the two in one run so that
machine noise hits both alike. Reports the best of --repeats runs of: prefill of a ~512-token
prompt, and aggregate decode tokens/s of 1/4/8/16 parallel sequences (64 tokens each), with the
after/before ratio, both per wall-clock second and per CPU-second of the process (the latter is
what to read on a shared, oversubscribed machine; it counts prefill of the short prompt too). Greedy outputs must be identical (the paths give the same bits); the script
checks that too.

Usage: bench/int8_paths.py [--threads 1] [--repeats 3] [--paths none,default] > table.md
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVSERVE = os.path.join(ROOT, "build", "bin", "kvserve")
MODEL = os.path.join(os.environ.get("KVSERVE_MODEL_DIR", os.path.expanduser("~/.cache/kvserve/models")),
                     "SmolLM2-135M-Instruct.Q4_1.gguf")


def prompt_of(n_words):
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
             "boxing matches near the old river bank").split()
    return " ".join(words[i % len(words)] for i in range(n_words))


def run(path, threads, args):
    """The JSON result and the CPU seconds (user + sys) the process used."""
    env = dict(os.environ)
    env.pop("KVSERVE_INT8_ISA", None)
    if path != "default":
        env["KVSERVE_INT8_ISA"] = path
    proc = subprocess.Popen([KVSERVE, "generate", "-m", MODEL, "--json", "--ignore-eos", "-t", str(threads), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"kvserve generate failed ({proc.returncode}) for path {path}")
    return json.loads(out), ru.ru_utime + ru.ru_stime


def texts(res):
    return [s["text"] for r in res["runs"] for s in r["sequences"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--paths", default="none,default")
    ap.add_argument("--parallel", default="1,4,8,16")
    a = ap.parse_args()
    paths = a.paths.split(",")
    pars = [int(x) for x in a.parallel.split(",")]
    prompt = prompt_of(380)  # ~512 tokens
    best = {p: {} for p in paths}
    cpu = {p: {} for p in paths}  # tokens per CPU-second (minimum CPU time: robust to descheduling)
    outputs = {}
    for _ in range(a.repeats):
        for p in paths:
            _, c0 = run(p, a.threads, ["-p", "Hi", "-n", "1"])  # load + tokenizer: subtracted
            r, c = run(p, a.threads, ["-p", prompt, "-n", "1"])
            best[p]["prefill"] = max(best[p].get("prefill", 0), r["prefill_tokens_per_s"])
            cpu[p]["prefill"] = max(cpu[p].get("prefill", 0), r["prompt_tokens"] / max(c - c0, 1e-3))
            outputs.setdefault(("prefill", p), texts(r))
            for n in pars:
                r, c = run(p, a.threads, ["-p", "Once upon a time there was", "-n", "64", "--parallel", str(n)])
                best[p][n] = max(best[p].get(n, 0), r["decode_tokens_per_s"])
                cpu[p][n] = max(cpu[p].get(n, 0), r["generated_tokens"] / max(c - c0, 1e-3))
                outputs.setdefault((n, p), texts(r))
    same = all(outputs[(k, paths[0])] == outputs[(k, p)] for (k, _) in outputs for p in paths)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
    print(f"{model}, {a.threads} thread(s), best of {a.repeats}; greedy outputs identical across paths: {same}\n")
    cols = ["prefill 512"] + [f"decode x{n}" for n in pars]
    keys = ["prefill"] + pars
    for title, tab in (("tokens/s (wall clock)", best), ("tokens per CPU-second (process user+sys, load subtracted)", cpu)):
        print(f"{title}:\n")
        print("| path | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for p in paths:
            print(f"| {p} | " + " | ".join(f"{tab[p][k]:.0f}" for k in keys) + " |")
        for p in paths[1:]:
            print(f"| {p} / {paths[0]} | " + " | ".join(f"{tab[p][k] / tab[paths[0]][k]:.2f}x" for k in keys) + " |")
        base = paths[-1]
        print(f"\nAggregate decode over single stream ({base}): " +
              ", ".join(f"x{n}: {tab[base][n] / tab[base][pars[0]]:.2f}x" for n in pars[1:]) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
