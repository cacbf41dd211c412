#include "server/kv_view.h"

#include <algorithm>
#include <chrono>

namespace kvs {

KvView take_kv_view(const Engine& engine) {
  const auto start = std::chrono::steady_clock::now();
  KvView v;
  v.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  v.blocks = engine.block_infos();
  engine.for_each_block_table([&](const SequenceBlocks& s) {
    KvViewSequence& out =
        v.sequences.emplace_back(KvViewSequence{.seq = s.seq.value,
                                                .request = s.request.value,
                                                .sample = s.sample,
                                                .num_tokens = s.num_tokens,
                                                .cache_salt = std::string(s.cache_salt)});
    out.tables.reserve(s.tables.size());
    for (const auto& t : s.tables) out.tables.emplace_back(t.begin(), t.end());
  });
  std::sort(v.sequences.begin(), v.sequences.end(),
            [](const KvViewSequence& a, const KvViewSequence& b) { return a.seq < b.seq; });
  v.tenants = engine.tenant_stats();
  v.engine = engine.snapshot();
  v.steps = engine.counters().steps;
  v.take_us = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::steady_clock::now() - start)
                                        .count());
  return v;
}

}  // namespace kvs
