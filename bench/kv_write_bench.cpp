// One decode step's KV writes per layer (kernels/kv_write.h): a token's K and V for every kv head
// of a layer, as the engine writes them after each layer's projections, through a pool of 2
// threads (the engine's default here). Per-channel keys reseal their group of 64 tokens at every
// token (the position cycles through a group); int2_tcq64 values run their Viterbi passes.
// Shapes: SmolLM2 (3 kv heads, head dim 64) and Gemma 3 (1 kv head, head dim 256).
//   build/bench/kv_write_bench [--benchmark_filter=REGEX]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_write.h"
#include "kvcache/kv_block_storage.h"

namespace kvs {
namespace {

struct Pair {
  KvDtype k, v;
};
constexpr Pair kPairs[] = {{KvDtype::kInt4Had, KvDtype::kInt4Had},
                           {KvDtype::kInt2MixChan64, KvDtype::kInt2Had64},
                           {KvDtype::kInt2MixChan64, KvDtype::kInt2Tcq64}};

// state.range: 0 = pair, 1 = kv heads, 2 = head dim, 3 = threads.
void BM_DecodeStepWrite(benchmark::State& state) {
  const Pair pair = kPairs[state.range(0)];
  const auto heads = static_cast<uint32_t>(state.range(1));
  const auto dim = static_cast<uint32_t>(state.range(2));
  ThreadPool pool(static_cast<int>(state.range(3)));
  auto storage = KvBlockStorage::create({.num_blocks = 2,
                                         .block_size = 64,
                                         .layers = 1,
                                         .kv_heads = heads,
                                         .head_dim = dim,
                                         .k_dtype = pair.k,
                                         .v_dtype = pair.v,
                                         .key_tail_slots = 2});
  if (!storage.is_ok()) {
    state.SkipWithError(storage.status().message().c_str());
    return;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(uint64_t{heads} * dim), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = nd(rng) + (i % dim == 7 ? 6.0f : 0.0f);
    v[i] = nd(rng);
  }
  int64_t pos = 0;
  for (auto _ : state) {
    write_kv(storage->layout(), 0, 1, &pos, k.data(), v.data(), &pool);
    // The next token of the sequence; a group of per-channel keys starts again after 64 (block
    // 0's group is written again from its first row).
    pos = (pos + 1) % 64;
  }
  state.SetLabel(std::string(kv_dtype_name(pair.k)) + "/" + kv_dtype_name(pair.v) +
                 (heads == 3 ? " smollm2" : " gemma3"));
}
BENCHMARK(BM_DecodeStepWrite)
    ->ArgsProduct({{0, 1, 2}, {3}, {64}, {2}})
    ->ArgsProduct({{0, 1, 2}, {1}, {256}, {2}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvs

BENCHMARK_MAIN();
