// A token's attention output must not depend on the rest of its batch or on the thread count:
// long contexts are cut into segments at positions that depend only on the token's own context
// length (kernels/paged_attention.cpp), so results are bit-identical in every arrangement.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/kv_write.h"
#include "kernels/paged_attention.h"
#include "kvcache/kv_block_storage.h"

namespace kvs {
namespace {

TEST(PagedAttentionInvarianceTest, OutputDoesNotDependOnBatchOrThreads) {
  const uint32_t H = 9, KVH = 3, D = 64, bs = 16;
  const int32_t n = 700;  // three segments
  auto st = KvBlockStorage::create({.num_blocks = 64,
                                    .block_size = bs,
                                    .layers = 1,
                                    .kv_heads = KVH,
                                    .head_dim = D,
                                    .k_dtype = KvDtype::kF16,
                                    .v_dtype = KvDtype::kF16});
  ASSERT_TRUE(st.is_ok());
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> k(size_t(n) * KVH * D), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<uint32_t> table(64);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int64_t> slots(n);
  std::iota(slots.begin(), slots.end(), 0);
  write_kv(st->layout(), 0, n, slots.data(), k.data(), v.data());
  // Batch: positions 0..T-1 of the same sequence's last tokens; the probe is the last one.
  auto run = [&](int64_t T, int threads) {
    std::vector<float> q(T * H * D), out(T * H * D);
    std::mt19937 qr(11);
    for (auto& x : q) x = nd(qr);
    std::vector<int32_t> ctx(T);
    std::vector<const uint32_t*> tabs(T, table.data());
    for (int64_t t = 0; t < T; ++t) ctx[t] = n - static_cast<int32_t>(T - 1 - t);
    // The probe token (last) always gets the same query.
    std::mt19937 pr(99);
    for (uint32_t i = 0; i < H * D; ++i) q[(T - 1) * H * D + i] = nd(pr);
    ThreadPool pool(threads);
    PagedAttentionArgs a{.kv = st->layout(),
                         .layer = 0,
                         .num_tokens = T,
                         .num_heads = H,
                         .scale = 0.125f,
                         .q = q.data(),
                         .out = out.data(),
                         .context_len = ctx.data(),
                         .block_table = tabs.data()};
    paged_attention(a, pool);
    return std::vector<float>(out.end() - H * D, out.end());
  };
  const std::vector<float> alone = run(1, 1);
  for (int64_t T : {1, 2, 7, 40})
    for (int threads : {1, 2, 3}) {
      const std::vector<float> got = run(T, threads);
      ASSERT_EQ(0, std::memcmp(got.data(), alone.data(), alone.size() * sizeof(float)))
          << T << " " << threads;
    }
}

}  // namespace
}  // namespace kvs
