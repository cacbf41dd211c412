// int2_tcq64's AVX512-VBMI value pass (kernels/trellis_values.h): against a scalar loop over the
// codec's own dequantization (the same floats, bit for bit), and through paged attention against
// the Highway reader on every SIMD target (the same output bits).
#include "kernels/trellis_values.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/kv_write.h"
#include "kernels/paged_attention.h"
#include "kvcache/kv_block_storage.h"
#include "quant/kv_trellis_groups.h"

namespace kvs {
namespace {

// A pool of int2_tcq64 values (keys f16), one layer, its blocks shuffled; the values' floats as
// the codec decodes them, [position][kv head][D].
struct TrellisPool {
  std::optional<KvBlockStorage> storage;
  std::vector<uint32_t> table;
  std::vector<float> v;  // dequantized

  TrellisPool(uint32_t D, uint32_t KVH, uint32_t bs, int n, std::mt19937& rng) {
    const uint32_t nblocks = (n + bs - 1) / bs;
    auto s = KvBlockStorage::create({.num_blocks = nblocks,
                                     .block_size = bs,
                                     .layers = 1,
                                     .kv_heads = KVH,
                                     .head_dim = D,
                                     .k_dtype = KvDtype::kF16,
                                     .v_dtype = KvDtype::kInt2Tcq64});
    KVS_CHECK(s.is_ok());
    storage.emplace(std::move(*s));
    table.resize(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> k(size_t(n) * KVH * D), raw(k.size());
    for (auto& x : k) x = nd(rng);
    // Groups of very different magnitudes, so that the scales differ within a vector.
    for (size_t i = 0; i < raw.size(); ++i)
      raw[i] = nd(rng) * std::pow(4.0f, float((i / kTrellisGroup) % 5) - 2.0f);
    std::vector<int64_t> slots(n);
    for (int j = 0; j < n; ++j) slots[j] = int64_t{table[j / bs]} * bs + j % bs;
    write_kv(storage->layout(), 0, n, slots.data(), k.data(), raw.data());
    const PagedKvLayout kv = storage->layout();
    v.resize(raw.size());
    for (int j = 0; j < n; ++j)
      for (uint32_t h = 0; h < KVH; ++h) {
        const uint8_t* src = kv.v_head(table[j / bs], 0, h) + (j % bs) * kv.v_vector_bytes;
        dequantize_trellis(src, D, v.data() + (size_t(j) * KVH + h) * D);
      }
  }
};

// The kernel's sums are the scalar loop's: out += p x v, one fused multiply-add per key in key
// order, from the codec's floats (level x scale / 128, exact). Ranges start and end inside
// blocks, span several tiles of keys, and take 1 to 4 heads.
TEST(TrellisValues, SameBitsAsTheScalarLoop) {
  if (!trellis_values::supported()) GTEST_SKIP() << "this CPU has no AVX512-VBMI";
  const trellis_values::AccumulateFn fn = trellis_values::accumulate_avx512vbmi();
  std::mt19937 rng(31);
  for (uint32_t D : {64u, 128u, 256u, trellis_values::kMaxHeadDim}) {
    for (uint32_t bs : {16u, 64u}) {
      const uint32_t KVH = 2;
      const int n = D == trellis_values::kMaxHeadDim ? 90 : 300;
      TrellisPool pool(D, KVH, bs, n, rng);
      const PagedKvLayout kv = pool.storage->layout();
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (int trial = 0; trial < 12; ++trial) {
        const int ng = 1 + trial % 4;
        const uint32_t kvh = trial % KVH;
        const int32_t j0 = static_cast<int32_t>(rng() % (n / 2));
        const int32_t j1 = j0 + 1 + static_cast<int32_t>(rng() % (n - j0));
        const int32_t len = j1 - j0;
        std::vector<float> p(size_t(ng) * len), out(size_t(ng) * D), want(out.size());
        for (auto& x : p) x = u(rng);
        if (trial % 3 == 0) p[rng() % p.size()] = 0.0f;
        for (auto& x : out) x = u(rng);
        want = out;
        for (int g = 0; g < ng; ++g)
          for (int32_t j = j0; j < j1; ++j) {
            const float* vj = pool.v.data() + (size_t(j) * KVH + kvh) * D;
            for (uint32_t e = 0; e < D; ++e)
              want[g * D + e] = std::fma(p[g * len + (j - j0)], vj[e], want[g * D + e]);
          }
        fn(kv, pool.table.data(), 0, kvh, j0, j1, p.data(), ng, out.data());
        ASSERT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0)
            << "D " << D << " bs " << bs << " heads " << ng << " keys [" << j0 << ", " << j1 << ")";
      }
    }
  }
}

// Through paged attention (segments of long contexts, head groups over one pass, a short tail
// block): the VBMI kernel and the Highway reader give the same output bits on every SIMD target
// (the scalar target always takes its own reader).
TEST(TrellisValues, PagedAttentionSameBitsEitherPath) {
  if (!trellis_values::supported()) GTEST_SKIP() << "this CPU has no AVX512-VBMI";
  std::mt19937 rng(32);
  for (uint32_t D : {64u, 256u}) {
    const uint32_t H = 10, KVH = 2, bs = 16;
    const int n = 700;
    TrellisPool pool(D, KVH, bs, n, rng);
    const int T = 3;
    std::vector<int32_t> ctx = {n, n - 300, 5};
    std::vector<const uint32_t*> tab(T, pool.table.data());
    std::normal_distribution<float> nd(0.0f, 1.5f);
    std::vector<float> q(size_t(T) * H * D), out(q.size()), highway(q.size());
    for (auto& x : q) x = nd(rng);
    ThreadPool threads(3);
    PagedAttentionArgs args{.kv = pool.storage->layout(),
                            .layer = 0,
                            .num_tokens = T,
                            .num_heads = H,
                            .scale = 1.0f / std::sqrt(float(D)),
                            .q = q.data(),
                            .out = highway.data(),
                            .context_len = ctx.data(),
                            .block_table = tab.data()};
    test::for_each_target([&] {
      trellis_values::set_for_test(false);
      args.out = highway.data();
      paged_attention(args, threads);
      trellis_values::set_for_test(true);
      args.out = out.data();
      std::fill(out.begin(), out.end(), 0.0f);
      paged_attention(args, threads);
      trellis_values::set_for_test(std::nullopt);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_EQ(out[i], highway[i]) << "D " << D << " at " << i;
    });
  }
}

}  // namespace
}  // namespace kvs
