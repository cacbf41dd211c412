#!/usr/bin/env bash
# The serving benchmark of docs/benchmarks.md: kvserve serve under 1..64 concurrent streaming
# clients, two workloads (a shared ~1,000-token system prompt; unique prompts), prefix caching
# on vs off, KV budget ample vs tight. Prints markdown table rows; raw JSON lines go to
# ${OUT:-/tmp/serve_bench.jsonl}.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${KVSERVE_BIN:-build/bin/kvserve}"
out="${OUT:-/tmp/serve_bench.jsonl}"
# On a small machine leave a core to the HTTP threads and the load generator (the
# workers of -t spin briefly between kernels).
threads="${THREADS:-1}"
common="-t $threads --max-model-len 2048 --max-num-seqs 64"
lg() { python3 bench/load_gen.py --kvserve "$bin" --max-tokens 32 --json "$out" "$@"; }
echo "| config | workload | clients | requests | req/s | output tok/s | decode tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | cached tokens/req | preemptions | errors |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
lg --label "prefix cache on, 1 GiB" --workload shared --concurrency 1,8,32,64 \
   --server-args "$common --kv-cache-memory 1GiB"
lg --label "prefix cache off, 1 GiB" --workload shared --concurrency 1,8 \
   --server-args "$common --kv-cache-memory 1GiB --no-enable-prefix-caching"
lg --label "ample: 1 GiB" --workload unique --concurrency 1,8,32,64 \
   --server-args "$common --kv-cache-memory 1GiB"
lg --label "tight: 48 MiB, recompute" --workload unique --concurrency 8,32,64 \
   --server-args "$common --kv-cache-memory 48MiB"
lg --label "tight: 48 MiB, swap" --workload unique --concurrency 8,32,64 \
   --server-args "$common --kv-cache-memory 48MiB --preemption-mode swap --swap-space 256MiB"
