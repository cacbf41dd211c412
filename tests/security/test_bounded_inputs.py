"""Finding 11 of the trust review, the bounded-input part: every input kvserve reads has a
bound, and going past it is a clear error, never a crash (deep JSON in a config, a trace line or a
request body), an abort (a GPU count or a series length that cannot be allocated), gigabytes of
memory (a 2 GB trace line) or a silently accepted nonsense value (NaN, negatives)."""
import os
import shutil
import subprocess

import requests

from attack_helpers import private_dir
from conftest import kvserve_bin

DEEP = 100000


def run(*args, timeout=120):
    return subprocess.run([kvserve_bin(), *args], capture_output=True, text=True, timeout=timeout)


def clear_error(p, needle):
    assert p.returncode not in (0, -6, -11, 134, 139), (p.returncode, p.stderr[-500:])
    assert p.returncode > 0, p.returncode  # an exit code, not a signal
    assert needle in p.stderr, p.stderr[-500:]
    assert len(p.stderr) < 4000


def test_deeply_nested_json_is_a_clear_error_everywhere(start_server):
    d = private_dir("kvs-sec-json-")
    try:
        for name, text in [("arrays.json", "[" * DEEP + "]" * DEEP),
                           ("objects.json", '{"a":' * DEEP + "1" + "}" * DEEP),
                           ("inside.json", '{"num_hidden_layers": 2, "x": ' + "[" * DEEP +
                            "]" * DEEP + "}")]:
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(text)
            clear_error(run("plan", "-m", path), "nested deeper than")
        trace = os.path.join(d, "trace.jsonl")
        with open(trace, "w") as f:
            f.write('{"timestamp": 0, "input_length": 10, "output_length": 2, "x": ' +
                    "[" * DEEP + "]" * DEEP + "}\n")
        clear_error(run("simulate", "-m", "llama-3.1-8b", "--trace", trace), "nested deeper")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    # A request body: a 400 naming the problem, and the server keeps serving.
    server = start_server("--kv-cache-memory", "64MiB", "--max-model-len", "512")
    r = requests.post(server.url + "/v1/completions", data="[" * DEEP + "]" * DEEP,
                      headers=dict(server.headers(), **{"Content-Type": "application/json"}),
                      timeout=30)
    assert r.status_code == 400 and "nested deeper" in r.json()["error"]["message"]
    assert server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1}).status_code == 200


def small_trace(d):
    path = os.path.join(d, "small.jsonl")
    with open(path, "w") as f:
        for i in range(4):
            f.write('{"timestamp": %d, "input_length": 600, "output_length": 8, '
                    '"hash_ids": [%d, %d]}\n' % (i * 100, i, i + 10))
    return path


def test_counts_that_cannot_be_allocated_are_refused():
    d = private_dir("kvs-sec-counts-")
    try:
        trace = small_trace(d)
        clear_error(run("simulate", "-m", "llama-3.1-8b", "--trace", trace, "--gpus",
                        "4000000000"), "--gpus")
        p = run("simulate", "-m", "llama-3.1-8b", "--trace", trace, "--series-points",
                "4000000000", "--json")
        assert p.returncode > 0 and "--series-points" in p.stderr, p.stderr[-300:]
        # Within the bounds it runs.
        assert run("simulate", "-m", "llama-3.1-8b", "--trace", trace, "--gpus", "8").returncode \
            == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_huge_trace_line_costs_no_gigabytes():
    d = private_dir("kvs-sec-trace-")
    try:
        path = os.path.join(d, "line.jsonl")
        with open(path, "w") as f:
            f.write('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [')
            f.write("1," * (8 << 20) + "1]}\n")  # one 16 MiB line
        p = subprocess.run(["/usr/bin/time", "-f", "%M", kvserve_bin(), "simulate", "-m",
                            "llama-3.1-8b", "--trace", path], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode > 0 and "longer than" in p.stderr, p.stderr[-300:]
        peak_kb = int(p.stderr.strip().splitlines()[-1])
        assert peak_kb < 512 * 1024, peak_kb  # the line is refused, not parsed
        big = os.path.join(d, "big.jsonl")
        with open(big, "wb") as f:
            f.truncate((1 << 30) + 1)  # sparse: a trace over the 1 GiB bound
        clear_error(run("simulate", "-m", "llama-3.1-8b", "--trace", big), "split it")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_nan_and_negative_numbers_are_refused():
    for value in ["nan", "-5", "inf"]:
        clear_error(run("plan", "-m", "llama-3.1-8b", "--avg-tokens", value), "--avg-tokens")
    for value in ["nan", "-0.5", "0"]:
        p = run("plan", "-m", "llama-3.1-8b", "--gpu-memory-utilization", value)
        assert p.returncode > 0 and "utilization" in p.stderr, (value, p.stderr[-300:])
    d = private_dir("kvs-sec-nan-")
    try:
        trace = small_trace(d)
        for value in ["nan", "-1"]:
            p = run("simulate", "-m", "llama-3.1-8b", "--trace", trace, "--rate-scale", value)
            assert p.returncode > 0 and "--rate-scale" in p.stderr, (value, p.stderr[-300:])
    finally:
        shutil.rmtree(d, ignore_errors=True)
