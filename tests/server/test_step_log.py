"""`kvserve serve --step-log`: a JSON line per engine step (src/engine/step_log.h), what
bench/replay_trace.py compares with `kvserve simulate --step-log` and sim_calibrate fits."""
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

from conftest import MODEL_NAME, kvserve_bin, require_model


def test_step_log_accounts_for_every_token(start_server, tmp_path):
    log = tmp_path / "steps.jsonl"
    # A small pool, so that the four requests also preempt.
    s = start_server("--kv-cache-memory", "2MiB", "--max-model-len", "64", "--step-log", str(log))
    prompts = [[100 + i] * (30 + 3 * i) for i in range(4)]

    def complete(p):
        r = s.post("/v1/completions", {"model": MODEL_NAME, "prompt": p, "max_tokens": 16,
                                        "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        return r.json()["usage"]["completion_tokens"]

    with ThreadPoolExecutor(4) as pool:
        tokens = sum(pool.map(complete, prompts))
    metrics = s.get("/metrics").text
    s.stop()  # a clean stop flushes and closes the log

    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert steps
    assert sum(c[4] for e in steps for c in e["chunks"]) == tokens
    for a, b in zip(steps, steps[1:]):
        assert a["start_s"] <= a["end_s"] <= b["start_s"]
    preempted = sum(e["preempted_recompute"] + e["preempted_swap"] for e in steps)
    total = sum(float(line.split()[-1]) for line in metrics.splitlines()
                if line.startswith("kvserve_preemptions_total"))
    assert preempted == total


def test_step_log_in_a_missing_folder_is_a_clear_error():
    require_model()
    p = subprocess.run([kvserve_bin(), "serve", "--port", "0", "--step-log",
                        "/nonexistent-dir/steps.jsonl"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert "step log /nonexistent-dir/steps.jsonl" in p.stderr
