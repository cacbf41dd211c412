// KV cache manager accounting costs (no KV bytes are touched).
// Targets: block allocate+free < 50 ns; prefix lookup of a 4,096-token prompt < 20 us.
#include <benchmark/benchmark.h>

#include <numeric>
#include <random>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/kv_cache_manager.h"

namespace kvs {
namespace {

std::vector<int32_t> random_tokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = static_cast<int32_t>(rng() % 128000);
  return v;
}

// Admits, appends and commits a whole prompt.
void prefill(KvCacheManager& m, SeqId s, const std::vector<int32_t>& prompt) {
  std::vector<BlockCopy> copies;
  const uint32_t c = m.admit(s, prompt, "", &copies).value();
  if (!m.append_slots(s, static_cast<uint32_t>(prompt.size()) - c, &copies).is_ok()) abort();
  m.commit_tokens(s, std::span(prompt).subspan(c));
}

void BM_BlockAllocateFree(benchmark::State& state) {
  PrefixCache cache(4096, 16);
  BlockPool pool(4096, 0, &cache);
  pool.add_tenant();
  // Some blocks in use so the free list is not trivially empty-after-one.
  std::vector<BlockId> held;
  for (int i = 0; i < 1024; ++i) held.push_back(*pool.allocate(TenantId{0}));
  for (auto _ : state) {
    const std::optional<BlockId> b = pool.allocate(TenantId{0});
    benchmark::DoNotOptimize(b);
    pool.release(*b);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BlockAllocateFree);

// Prefix lookup (dry run) of a 4,096-token prompt whose 256 blocks of 16 are all cached.
void BM_PrefixLookup4K(benchmark::State& state) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 2048, .block_size = 16});
  const std::vector<int32_t> doc = random_tokens(4096, 1);
  prefill(m, SeqId{1}, doc);
  std::vector<int32_t> prompt = doc;
  prompt.push_back(7);  // so that all 256 blocks can be reused
  for (auto _ : state) {
    const AdmitPlan plan = m.plan_admit(prompt, "");
    benchmark::DoNotOptimize(plan);
    if (plan.cached_tokens != 4096) state.SkipWithError("expected a full hit");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PrefixLookup4K)->Unit(benchmark::kMicrosecond);

// admit (takes 256 cached blocks) + free (returns them to the LRU): a real hit round trip.
void BM_PrefixAdmitFree4K(benchmark::State& state) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 2048, .block_size = 16});
  const std::vector<int32_t> doc = random_tokens(4096, 1);
  prefill(m, SeqId{1}, doc);
  std::vector<int32_t> prompt = doc;
  prompt.push_back(7);
  std::vector<BlockCopy> copies;
  for (auto _ : state) {
    const uint32_t c = m.admit(SeqId{2}, prompt, "", &copies).value();
    benchmark::DoNotOptimize(c);
    m.free(SeqId{2});
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PrefixAdmitFree4K)->Unit(benchmark::kMicrosecond);

// fork of a 256-block sequence (+ free of the child, which only drops refcounts).
void BM_Fork256(benchmark::State& state) {
  KvCacheManager m(KvCacheConfig{.num_blocks = 2048, .block_size = 16});
  prefill(m, SeqId{1}, random_tokens(256 * 16, 2));
  for (auto _ : state) {
    if (!m.fork(SeqId{1}, SeqId{2}).is_ok()) abort();
    m.free(SeqId{2});
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Fork256)->Unit(benchmark::kMicrosecond);

// Step inputs (block tables + slot mapping + context lengths) for 256 decoding sequences of
// state.range(0) tokens each.
void BM_StepInputs256(benchmark::State& state) {
  const uint32_t ctx = static_cast<uint32_t>(state.range(0));
  const uint32_t blocks_per_seq = (ctx + 1 + 15) / 16;
  KvCacheManager m(KvCacheConfig{.num_blocks = 256 * blocks_per_seq, .block_size = 16});
  std::vector<StepRow> rows;
  for (uint64_t i = 0; i < 256; ++i) {
    prefill(m, SeqId{i}, random_tokens(ctx, 100 + i));
    if (!m.append_slots(SeqId{i}, 1, nullptr).is_ok()) abort();
    rows.push_back(StepRow{SeqId{i}, ctx, 1});
  }
  StepInputs in;
  for (auto _ : state) {
    m.build_step_inputs(rows, &in);
    benchmark::DoNotOptimize(in.slot_mapping.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StepInputs256)->Arg(1024)->Arg(4096)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvs

BENCHMARK_MAIN();
