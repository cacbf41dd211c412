"""Benchmark results kept as JSON between runs, and the generated Markdown they render.

Shared by the benchmark scripts that take long runs (bench/kv_quantization.py, bench/kv_goals.py):
- cached(): each run's result in RESULTS/NAME.json, so an interrupted run resumes and a render
  reads what earlier runs measured;
- llama_final_perplexity(): llama-perplexity's final estimate from its output;
- splice_generated(): a generated block written between its BEGIN/END markers in a document,
  the hand-written text around it kept.
"""
import json
import os
import re
import sys
import time


def cached(results, name, fn, render_only=False):
    """fn()'s result, from RESULTS/NAME.json when an earlier run stored it; None when render_only
    and it is not there, or when fn() gives None (a failed run, not stored)."""
    path = os.path.join(results, name + ".json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    if render_only:
        return None
    t0 = time.time()
    r = fn()
    if r is None:
        return None
    sys.stderr.write(f"{name}: {time.time() - t0:.0f} s\n")
    with open(path, "w") as f:
        json.dump(r, f)
    return r


def llama_final_perplexity(output):
    """The `Final estimate: PPL = X` of llama-perplexity's output, or None."""
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", output)
    return float(m.group(1)) if m else None


def splice_generated(path, begin, end, text, new_doc=None):
    """Writes `text` between the lines `begin` and `end` of the file at `path`. With `new_doc`, a
    missing file starts as new_doc and missing markers are appended; without, either is an
    error."""
    if os.path.exists(path):
        with open(path) as f:
            doc = f.read()
    elif new_doc is not None:
        doc = new_doc
    else:
        raise SystemExit(f"{path}: no such file")
    if begin not in doc or end not in doc:
        if new_doc is None:
            raise SystemExit(f"{path} has no markers {begin} ... {end}")
        doc += f"\n{begin}\n{end}\n"
    head, rest = doc.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w") as f:
        f.write(f"{head}{begin}\n{text}{end}{tail}")
