// write_kv on a pool's threads (kernels/kv_write.h): the same pool bytes as on one thread, for
// per-vector formats (searched, rotated, plain) and per-channel keys, from one token (a decode
// step) to a prefill chunk, into scattered slots.
#include "kernels/kv_write.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_vector.h"
#include "kvcache/kv_block_storage.h"
#include "quant/kv_channel_groups.h"

namespace kvs {
namespace {

constexpr uint32_t kLayers = 2, kHeads = 3, kDim = 64, kBlock = 64, kBlocks = 3;

KvBlockStorage make_storage(KvDtype k, KvDtype v, uint32_t blocks = kBlocks,
                            uint32_t tail_slots = 4) {
  return std::move(KvBlockStorage::create({.num_blocks = blocks,
                                           .block_size = kBlock,
                                           .layers = kLayers,
                                           .kv_heads = kHeads,
                                           .head_dim = kDim,
                                           .k_dtype = k,
                                           .v_dtype = v,
                                           .key_tail_slots = tail_slots}))
      .value();
}

// Keys with one large channel (what per-channel keys are for) and values, n tokens.
void random_kv(uint64_t n, std::mt19937& rng, std::vector<float>& k, std::vector<float>& v) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  k.resize(n * kHeads * kDim);
  v.resize(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = nd(rng) + (i % kDim == 9 ? 8.0f : 0.0f);
    v[i] = nd(rng);
  }
}

TEST(KvWriteTest, ThePoolsThreadsWriteTheBytesOfOneThread) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::pair<KvDtype, KvDtype> formats[] = {{KvDtype::kF16, KvDtype::kF16},
                                                 {KvDtype::kInt8, KvDtype::kInt8},
                                                 {KvDtype::kInt8Had, KvDtype::kInt8Had},
                                                 {KvDtype::kInt4, KvDtype::kQ8_0},
                                                 {KvDtype::kInt4Had, KvDtype::kInt4Had},
                                                 {KvDtype::kInt3Had, KvDtype::kInt2Had},
                                                 {KvDtype::kInt4Chan64, KvDtype::kInt2Had},
                                                 {KvDtype::kInt2MixChan64, KvDtype::kInt2Had64},
                                                 {KvDtype::kInt2MixChan64, KvDtype::kInt2Tcq64}};
  ThreadPool pool(3);
  for (const auto& [k_dtype, v_dtype] : formats)
    for (const uint32_t n : {1u, 2u, 37u, 128u}) {
      // Tokens in a shuffled order of the pool's slots (a scattered block table), one group of
      // per-channel keys per block (the chunk is one sequence's run of slots for those).
      std::vector<int64_t> slots(n);
      std::iota(slots.begin(), slots.end(), int64_t{kBlock} / 2);
      if (!kv_dtype_per_channel(k_dtype)) std::shuffle(slots.begin(), slots.end(), rng);
      std::vector<float> k(uint64_t{n} * kHeads * kDim), v(k.size());
      for (size_t i = 0; i < k.size(); ++i) {
        k[i] = nd(rng) + (i % kDim == 5 ? 12.0f : 0.0f);
        v[i] = nd(rng);
      }
      KvBlockStorage one = make_storage(k_dtype, v_dtype), many = make_storage(k_dtype, v_dtype);
      const uint64_t regions = pool.regions();
      for (uint32_t layer = 0; layer < kLayers; ++layer) {
        write_kv(one.layout(), layer, n, slots.data(), k.data(), v.data());
        write_kv(many.layout(), layer, n, slots.data(), k.data(), v.data(), &pool);
      }
      // The vectors, and for per-channel keys then the groups' seals, went to the pool's threads:
      // in one region where there are fewer vectors than two per thread (kv_write.cpp).
      const bool one_region = n * kHeads < 2u * pool.num_threads();
      EXPECT_EQ(pool.regions() - regions,
                kv_dtype_per_channel(k_dtype) && !one_region ? 2 * kLayers : kLayers);
      for (uint32_t b = 0; b < kBlocks; ++b)
        ASSERT_EQ(std::memcmp(one.block_data(b), many.block_data(b), one.block_bytes()), 0)
            << kv_dtype_name(k_dtype) << " / " << kv_dtype_name(v_dtype) << " n " << n << " block "
            << b;
      // Each token's vectors at its own slot: the format's code of its own K and V.
      const PagedKvLayout& kv = many.layout();
      std::vector<uint8_t> want(kv_vector_bytes(KvDtype::kF32, kDim));
      for (uint32_t t = 0; t < n; ++t)
        for (uint32_t h = 0; h < kHeads; ++h) {
          const uint64_t block = slots[t] / kBlock, off = slots[t] % kBlock;
          const uint64_t at = (uint64_t{t} * kHeads + h) * kDim;
          kv_vector_from_f32(v_dtype, v.data() + at, kDim, want.data());
          ASSERT_EQ(std::memcmp(kv.v_head(block, 1, h) + off * kv.v_vector_bytes, want.data(),
                                kv.v_vector_bytes),
                    0)
              << "V of token " << t << " head " << h;
          if (kv_dtype_per_channel(k_dtype)) continue;
          kv_vector_from_f32(k_dtype, k.data() + at, kDim, want.data());
          ASSERT_EQ(std::memcmp(kv.k_head(block, 1, h) + off * kv.k_vector_bytes, want.data(),
                                kv.k_vector_bytes),
                    0)
              << "K of token " << t << " head " << h;
        }
    }
}

// Per-channel keys sealed on the pool over decode steps: several sequences' groups grow a token
// per step from their tails, in one write per layer, the way the engine batches them. The pool's
// bytes, the groups' f16 rows that this step's queries read, and the tails' bookkeeping are one
// thread's, with tails for every sequence and with fewer tails than sequences (evictions within a
// write, which seal in order).
TEST(KvWriteTest, PerChannelSealsOnThePoolAreOneThreadsOverDecodeSteps) {
  std::mt19937 rng(4);
  constexpr uint32_t kSeqs = 5, kSeqBlocks = 4;
  ThreadPool pool(3);
  for (const KvDtype k_dtype : {KvDtype::kInt4Chan64, KvDtype::kInt2Chan})
    for (const uint32_t tail_slots : {8u, 2u}) {
      auto make = [&] {
        return make_storage(k_dtype, KvDtype::kInt4Had, kSeqs * kSeqBlocks, tail_slots);
      };
      KvBlockStorage one = make(), many = make();
      const uint32_t G = kv_channel_group_tokens(k_dtype);
      // Sequence s owns blocks [s x kSeqBlocks, +kSeqBlocks); its prompt is 3 + 11 s tokens.
      std::vector<uint32_t> len(kSeqs);
      std::map<int64_t, std::vector<uint16_t>> written;  // slot -> its keys' f16, every head
      auto step = [&](const std::vector<std::pair<uint32_t, uint32_t>>& tokens) {  // (seq, count)
        std::vector<int64_t> slots;
        for (const auto& [seq, count] : tokens)
          for (uint32_t i = 0; i < count; ++i)
            slots.push_back(int64_t{seq} * kSeqBlocks * kBlock + len[seq] + i);
        const auto n = static_cast<int64_t>(slots.size());
        std::vector<float> k, v;
        random_kv(uint64_t(n), rng, k, v);
        for (int64_t t = 0; t < n; ++t)
          for (uint32_t i = 0; i < kHeads * kDim; ++i)
            written[slots[t]].push_back(channel_key_f16(k[t * kHeads * kDim + i]));
        for (uint32_t layer = 0; layer < kLayers; ++layer) {
          write_kv(one.layout(), layer, n, slots.data(), k.data(), v.data());
          const uint64_t regions = pool.regions();
          write_kv(many.layout(), layer, n, slots.data(), k.data(), v.data(), &pool);
          // With a tail for every sequence no two seals share one: they all went to the pool.
          if (tail_slots >= kSeqs) {
            ASSERT_EQ(pool.regions() - regions, 2u);
          }
          // What this layer's attention reads of each written token's own group.
          for (int64_t t = 0; t < n; ++t)
            for (uint32_t h = 0; h < kHeads; ++h) {
              const uint64_t b = uint64_t(slots[t]) / kBlock, off = uint64_t(slots[t]) % kBlock;
              for (uint64_t r = off / G * G; r <= off; ++r) {
                const uint16_t* a = one.layout().key_tails->step_key(b, uint32_t(r), kBlock, h);
                const uint16_t* c = many.layout().key_tails->step_key(b, uint32_t(r), kBlock, h);
                ASSERT_TRUE(a != nullptr && c != nullptr);
                ASSERT_EQ(std::memcmp(a, c, kDim * 2), 0) << "own group row " << r;
                // With a tail for every sequence, the rows are the keys as written, in f16 (the
                // earlier ones the tail's, the new ones the seal's); without, earlier rows may be
                // decoded from the group's codes.
                if (tail_slots >= kSeqs) {
                  const std::vector<uint16_t>& want = written.at(int64_t(b * kBlock + r));
                  ASSERT_EQ(std::memcmp(a, want.data() + h * kDim, kDim * 2), 0)
                      << "own group row " << r << " head " << h;
                }
              }
            }
        }
        for (const auto& [seq, count] : tokens) len[seq] += count;
      };
      std::vector<std::pair<uint32_t, uint32_t>> prompts;
      for (uint32_t s = 0; s < kSeqs; ++s) prompts.emplace_back(s, 3 + 11 * s);
      step(prompts);
      for (int d = 0; d < 2 * static_cast<int>(G) + 5; ++d) {
        std::vector<std::pair<uint32_t, uint32_t>> decode;
        for (uint32_t s = 0; s < kSeqs; ++s) decode.emplace_back((s + d) % kSeqs, 1);
        step(decode);
        ASSERT_EQ(one.layout().key_tails->in_use(), many.layout().key_tails->in_use());
        ASSERT_TRUE(many.layout().key_tails->check_integrity());
      }
      for (uint32_t b = 0; b < kSeqs * kSeqBlocks; ++b)
        ASSERT_EQ(std::memcmp(one.block_data(b), many.block_data(b), one.block_bytes()), 0)
            << kv_dtype_name(k_dtype) << " tails " << tail_slots << " block " << b;
    }
}

// With a tail per sequence and no more (the engine's sizing), a prefill chunk that fills one group
// and begins the next in the same write, beside sequences in the middle of theirs, takes the slot
// its filled group frees: every other sequence keeps its tail, so every group, written a few tokens
// at a time on the pool, ends with the bytes of one write of all its tokens.
TEST(KvWriteTest, GroupsWrittenPieceByPieceOnThePoolEndAsOneWrite) {
  std::mt19937 rng(5);
  constexpr uint32_t kSeqs = 3, kSeqBlocks = 3;
  ThreadPool pool(2);
  for (const KvDtype k_dtype : {KvDtype::kInt4Chan64, KvDtype::kInt2Chan}) {
    const uint32_t G = kv_channel_group_tokens(k_dtype);
    auto make = [&] { return make_storage(k_dtype, KvDtype::kInt4Had, kSeqs * kSeqBlocks, kSeqs); };
    KvBlockStorage pieces = make(), whole = make();
    // Each sequence's tokens: seq 0 gets chunks that cross its group boundaries; 1 and 2 a token
    // or two at a time, so that they sit in the middle of a group whenever seq 0 crosses one.
    const uint32_t total = 2 * G + 7;
    std::vector<std::vector<float>> k(kSeqs), v(kSeqs);
    for (uint32_t s = 0; s < kSeqs; ++s) random_kv(total, rng, k[s], v[s]);
    auto slot_of = [&](uint32_t s, uint32_t pos) { return int64_t{s} * kSeqBlocks * kBlock + pos; };
    std::vector<uint32_t> len(kSeqs, 0);
    const uint32_t step_of[kSeqs] = {G / 2 + 3, 1, 2};
    while (len[0] < total || len[1] < total || len[2] < total) {
      std::vector<int64_t> slots;
      std::vector<float> ks, vs;
      for (uint32_t s = 0; s < kSeqs; ++s) {
        const uint32_t count = std::min(step_of[s] + (len[s] == 0 ? 5 * s : 0), total - len[s]);
        for (uint32_t i = 0; i < count; ++i) {
          slots.push_back(slot_of(s, len[s] + i));
          const uint64_t at = uint64_t{len[s] + i} * kHeads * kDim;
          ks.insert(ks.end(), k[s].begin() + at, k[s].begin() + at + kHeads * kDim);
          vs.insert(vs.end(), v[s].begin() + at, v[s].begin() + at + kHeads * kDim);
        }
        len[s] += count;
      }
      for (uint32_t layer = 0; layer < kLayers; ++layer) {
        const uint64_t regions = pool.regions();
        write_kv(pieces.layout(), layer, static_cast<int64_t>(slots.size()), slots.data(),
                 ks.data(), vs.data(), &pool);
        // The vectors, then the seals, on the pool (no two seals shared a tail); one region for
        // both where there are fewer vectors than two per thread.
        ASSERT_EQ(pool.regions() - regions,
                  slots.size() * kHeads < 2u * pool.num_threads() ? 1u : 2u)
            << "lengths " << len[0] << " " << len[1];
      }
      ASSERT_TRUE(pieces.layout().key_tails->check_integrity());
    }
    for (uint32_t s = 0; s < kSeqs; ++s) {
      std::vector<int64_t> slots(total);
      for (uint32_t i = 0; i < total; ++i) slots[i] = slot_of(s, i);
      for (uint32_t layer = 0; layer < kLayers; ++layer)
        write_kv(whole.layout(), layer, total, slots.data(), k[s].data(), v[s].data());
    }
    for (uint32_t b = 0; b < kSeqs * kSeqBlocks; ++b)
      ASSERT_EQ(std::memcmp(pieces.block_data(b), whole.block_data(b), pieces.block_bytes()), 0)
          << kv_dtype_name(k_dtype) << " block " << b;
  }
}

// Seals that share a tail run in the plan's order, on the calling thread: with one tail slot per
// layer and three sequences in the middle of their groups, a decode write hands the slot from
// sequence to sequence, so its seals must not go to the pool (counted, not raced: a plan that
// let them would show as a second region), and the bytes are one thread's. With a slot each they
// go to the pool.
TEST(KvWriteTest, SealsThatShareATailSlotRunInOrder) {
  std::mt19937 rng(7);
  constexpr uint32_t kSeqs = 3;
  ThreadPool pool(3);
  for (const uint32_t tail_slots : {1u, kSeqs}) {
    KvBlockStorage one = make_storage(KvDtype::kInt4Chan64, KvDtype::kInt4Had, kSeqs, tail_slots);
    KvBlockStorage many = make_storage(KvDtype::kInt4Chan64, KvDtype::kInt4Had, kSeqs, tail_slots);
    std::vector<uint32_t> len(kSeqs, 0);
    auto write = [&](const std::vector<uint32_t>& seqs, uint32_t count, uint64_t want_regions) {
      std::vector<int64_t> slots;
      for (const uint32_t s : seqs)
        for (uint32_t i = 0; i < count; ++i) slots.push_back(int64_t{s} * kBlock + len[s] + i);
      const auto n = static_cast<int64_t>(slots.size());
      std::vector<float> k, v;
      random_kv(uint64_t(n), rng, k, v);
      for (uint32_t layer = 0; layer < kLayers; ++layer) {
        write_kv(one.layout(), layer, n, slots.data(), k.data(), v.data());
        const uint64_t regions = pool.regions();
        write_kv(many.layout(), layer, n, slots.data(), k.data(), v.data(), &pool);
        ASSERT_EQ(pool.regions() - regions, want_regions) << "tail slots " << tail_slots;
      }
      for (const uint32_t s : seqs) len[s] += count;
    };
    for (uint32_t s = 0; s < kSeqs; ++s) write({s}, 5 + s, 2);  // a prompt each: one seal
    for (int step = 0; step < 4; ++step)  // decode: the vectors, then the seals if disjoint
      write({0, 1, 2}, 1, tail_slots >= kSeqs ? 2 : 1);
    ASSERT_TRUE(many.layout().key_tails->check_integrity());
    for (uint32_t b = 0; b < kSeqs; ++b)
      ASSERT_EQ(std::memcmp(one.block_data(b), many.block_data(b), one.block_bytes()), 0)
          << "tail slots " << tail_slots << " block " << b;
  }
}

// One group's slots in two runs of one write (another sequence's tokens between them), the later
// run filling the group from the tail the earlier one starts: the seals run in order and the
// group ends as one write of its tokens, on the pool as on one thread.
TEST(KvWriteTest, AGroupInTwoRunsOfOneWriteEndsAsOneWrite) {
  std::mt19937 rng(6);
  ThreadPool pool(2);
  for (const KvDtype k_dtype : {KvDtype::kInt4Chan64, KvDtype::kInt2Chan}) {
    const uint32_t G = kv_channel_group_tokens(k_dtype);
    auto make = [&] { return make_storage(k_dtype, KvDtype::kF16, 2, 2); };
    // Group 0 of block 0 in two runs: rows [0, 3) and [3, G), block 1's first 5 rows between.
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < 3; ++i) slots.push_back(i);
    for (int64_t i = 0; i < 5; ++i) slots.push_back(kBlock + i);
    for (int64_t i = 3; i < G; ++i) slots.push_back(i);
    const auto n = static_cast<int64_t>(slots.size());
    const uint64_t row = uint64_t{kHeads} * kDim;
    std::vector<float> k, v;
    random_kv(uint64_t(n), rng, k, v);
    // The same tokens in slot order: block 0's group, then block 1's rows, a write each.
    std::vector<int64_t> order(slots.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return slots[a] < slots[b]; });
    std::vector<int64_t> sorted;
    std::vector<float> sk, sv;
    for (const int64_t i : order) {
      sorted.push_back(slots[i]);
      sk.insert(sk.end(), k.begin() + i * row, k.begin() + (i + 1) * row);
      sv.insert(sv.end(), v.begin() + i * row, v.begin() + (i + 1) * row);
    }
    KvBlockStorage split = make(), single = make(), whole = make();
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
      write_kv(split.layout(), layer, n, slots.data(), k.data(), v.data(), &pool);
      write_kv(single.layout(), layer, n, slots.data(), k.data(), v.data());
      write_kv(whole.layout(), layer, G, sorted.data(), sk.data(), sv.data());
      write_kv(whole.layout(), layer, 5, sorted.data() + G, sk.data() + G * row,
               sv.data() + G * row);
    }
    for (uint32_t b = 0; b < 2; ++b) {
      ASSERT_EQ(std::memcmp(split.block_data(b), single.block_data(b), split.block_bytes()), 0)
          << kv_dtype_name(k_dtype) << " block " << b;
      ASSERT_EQ(std::memcmp(split.block_data(b), whole.block_data(b), split.block_bytes()), 0)
          << kv_dtype_name(k_dtype) << " block " << b << " against one write per block";
    }
  }
}

// A decode step's write (fewer vectors than two per thread) splits int2_tcq64 values into their
// trellis groups, one item each: at Gemma 3's shape (one kv head, head dim 256: four groups) and
// with several heads, with per-channel keys and keys per token, the bytes are one thread's,
// token after token through a group of per-channel keys.
TEST(KvWriteTest, TrellisValuesSplitIntoGroupsWriteOneThreadsBytes) {
  std::mt19937 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2);
  for (const uint32_t heads : {1u, 3u})
    for (const KvDtype k_dtype : {KvDtype::kInt2MixChan64, KvDtype::kInt4Had}) {
      constexpr uint32_t kDim256 = 256;
      auto make = [&] {
        return std::move(KvBlockStorage::create({.num_blocks = 2,
                                                 .block_size = kBlock,
                                                 .layers = 1,
                                                 .kv_heads = heads,
                                                 .head_dim = kDim256,
                                                 .k_dtype = k_dtype,
                                                 .v_dtype = KvDtype::kInt2Tcq64,
                                                 .key_tail_slots = 2}))
            .value();
      };
      KvBlockStorage one = make(), many = make();
      for (int64_t pos = 0; pos < 70; ++pos) {  // into the second block's group
        std::vector<float> k(uint64_t{heads} * kDim256), v(k.size());
        for (size_t i = 0; i < k.size(); ++i) {
          k[i] = nd(rng) + (i % kDim256 == 3 ? 6.0f : 0.0f);
          v[i] = nd(rng) * (i % 64 == 0 ? 20.0f : 1.0f);
        }
        const uint64_t regions = pool.regions();
        write_kv(one.layout(), 0, 1, &pos, k.data(), v.data());
        write_kv(many.layout(), 0, 1, &pos, k.data(), v.data(), &pool);
        ASSERT_EQ(pool.regions() - regions, 1u);
        for (uint32_t b = 0; b < 2; ++b)
          ASSERT_EQ(std::memcmp(one.block_data(b), many.block_data(b), one.block_bytes()), 0)
              << kv_dtype_name(k_dtype) << " heads " << heads << " position " << pos;
      }
      // And the values are the codec's: one head's vector, as kv_vector_from_f32 writes it.
      if (heads == 1) {
        const PagedKvLayout& kv = many.layout();
        std::vector<uint8_t> want(kv.v_vector_bytes);
        std::vector<float> v(kDim256);
        for (float& x : v) x = nd(rng);
        const int64_t pos = 70;  // block 1, offset 6
        write_kv(many.layout(), 0, 1, &pos, v.data(), v.data(), &pool);
        kv_vector_from_f32(KvDtype::kInt2Tcq64, v.data(), kDim256, want.data());
        ASSERT_EQ(std::memcmp(kv.v_head(1, 0, 0) + 6 * kv.v_vector_bytes, want.data(), want.size()),
                  0);
      }
    }
}

}  // namespace
}  // namespace kvs
