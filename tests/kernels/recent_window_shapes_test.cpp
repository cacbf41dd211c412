// The recent-token window's attention (kernels/attention_recent_window-inl.h) at the shapes its
// value pass is specialized for and past them: 1 to 4 query heads per kv head (accumulators in
// registers), 5 (the general loop), head dims whose vectors fill whole chunks of the pass (64,
// Gemma 3's 256) or leave some over (80, 48), f16 and int8 rows, plain and rotated values. A
// decode step whose keys all sit in the window, on every SIMD target, against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/check.h"
#include "kernel_test_util.h"
#include "kernels/attention_segments.h"
#include "kernels/paged_attention.h"
#include "kvcache/kv_block_storage.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

struct Shape {
  uint32_t heads, kv_heads, dim;
};

std::vector<float> normal(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}

TEST(RecentWindowShapesTest, EveryGroupAndHeadDimMatchesTheReference) {
  constexpr uint32_t kWindow = 64, kBs = 16;
  constexpr int32_t kPos = 40;  // decoding at 40: positions [0, 41) all in the window
  const Shape shapes[] = {{2, 2, 64}, {4, 2, 64}, {6, 2, 64}, {4, 1, 256},
                          {6, 2, 80}, {3, 1, 48}, {10, 2, 80}};
  ThreadPool pool(3);
  for (const Shape& sh : shapes)
    for (const KvDtype rows : {KvDtype::kF16, KvDtype::kInt8})
      for (const KvDtype v_dtype : {KvDtype::kF16, KvDtype::kInt4Had}) {
        if (v_dtype == KvDtype::kInt4Had && (sh.dim & (sh.dim - 1)) != 0) continue;  // 2^k dims
        std::mt19937 rng(sh.heads * 1000 + sh.dim);
        auto storage = KvBlockStorage::create({.num_blocks = 4,
                                               .block_size = kBs,
                                               .layers = 1,
                                               .kv_heads = sh.kv_heads,
                                               .head_dim = sh.dim,
                                               .k_dtype = KvDtype::kF16,
                                               .v_dtype = v_dtype});
        ASSERT_TRUE(storage.is_ok());
        RecentWindow w =
            RecentWindow::create(1, kWindow, 1, sh.kv_heads, sh.dim, false, rows).value();
        auto step = [&](int32_t first, int32_t n) {
          std::vector<int32_t> pos(n), slot(n, 0), floor(n, 0);
          for (int32_t i = 0; i < n; ++i) pos[i] = first + i;
          w.begin_step(n, pos.data(), slot.data(), floor.data());
          const size_t count = size_t(n) * sh.kv_heads * sh.dim;
          const std::vector<float> k = normal(count, 1.0f, rng), v = normal(count, 3.0f, rng);
          w.store(k.data(), v.data());
        };
        step(0, kPos);
        w.commit(0);
        step(kPos, 1);
        const int32_t ctx = kPos + 1;
        const std::vector<uint32_t> table = {0, 1, 2, 3};
        const uint32_t* tab = table.data();
        const std::vector<float> q = normal(size_t(sh.heads) * sh.dim, 1.0f, rng);
        std::vector<float> out(q.size()), ref(q.size());
        PagedKvLayout kv = storage->layout();
        kv.recent = &w;
        PagedAttentionArgs args{.kv = kv,
                                .layer = 0,
                                .model_layer = 0,
                                .num_tokens = 1,
                                .num_heads = sh.heads,
                                .scale = 2.4f / std::sqrt(float(sh.dim)),
                                .q = q.data(),
                                .out = ref.data(),
                                .context_len = &ctx,
                                .block_table = &tab};
        ASSERT_EQ(attention_recent_key(args, 0), 0);  // every key in the window
        paged_attention_reference(args);
        test::for_each_target([&] {
          args.out = out.data();
          std::fill(out.begin(), out.end(), 0.0f);
          paged_attention(args, pool);
          for (size_t i = 0; i < q.size(); ++i)
            ASSERT_NEAR(out[i], ref[i], 3e-5 * (1 + std::abs(ref[i])))
                << "heads " << sh.heads << " kv heads " << sh.kv_heads << " dim " << sh.dim
                << " rows " << kv_dtype_name(rows) << " V " << kv_dtype_name(v_dtype) << " element "
                << i;
        });
      }
}

}  // namespace
}  // namespace kvs
