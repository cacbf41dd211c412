// Decode attention over one sequence, per KV format: the attention kernel alone, reading a
// context of 1K-32K tokens through its block table, over every layer of the default model's
// shape (SmolLM2-135M: 30 layers, 9 query heads, 3 KV heads, head dim 64) — one decode step.
// Reported as KV bytes read per second and as a fraction of the machine's read bandwidth,
// measured here by a STREAM-like sum over a 1 GiB buffer with the same threads.
//
//   build/bench/attention_bench [--contexts 1024,4096,16384,32768] [--formats f16,int8,K/V,...]
//                               [--threads N] [--block-size N] [--min-seconds S] [--markdown]
//                               [--sequences N --shared-prefix TOKENS]
//                               [--recent-window W [--recent-window-dtype f16|int8] [--sink]]
//                               [--prefill] [--shape smollm2|gemma3]
//
// With --recent-window W, each sequence also reads its newest W..W+15 positions in f16 from the
// recent-token window (quant/recent_window.h), as the engine's --kv-recent-window does, and with
// --sink position 0 from the attention sink's rows (quant/attention_sink.h).
//
// With --sequences N, one decode step of N sequences whose first TOKENS positions are the same
// physical blocks (a cached system prompt), timed with shared-prefix attention on and off in the
// same run (PagedAttentionArgs::share_segments).
//
// With --prefill, each context is one prefill chunk of that many tokens of one sequence (token i
// sees positions 0..i), timed with shared and causal-group attention on and off in the same run.
// --shape gemma3 takes Gemma 3 270M's shape (18 layers, 4 query heads, 1 KV head, head dim 256;
// five of every six layers see only their last 512 positions).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_vector.h"
#include "kernels/kv_write.h"
#include "kernels/paged_attention.h"
#include "kvcache/kv_block_storage.h"
#include "kvcache/kv_geometry.h"
#include "quant/kv_channel_groups.h"
#include "quant/kv_format.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t q = std::min(s.find(',', p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

// Read bandwidth: every thread sums its slice of a 1 GiB buffer (4 independent 64-bit
// accumulators so the loop is load-bound). Best of `reps` passes, bytes / second.
double measure_read_bandwidth(ThreadPool& pool, int reps) {
  const size_t bytes = size_t{1} << 30;
  const size_t words = bytes / sizeof(uint64_t);
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(64, bytes));
  pool.parallel_for(words, words / 64, [&](size_t b, size_t e, int) {
    for (size_t i = b; i < e; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  });
  const size_t grain = words / static_cast<size_t>(pool.num_threads());
  std::vector<uint64_t> sink(pool.num_threads() * 8);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    pool.parallel_for(words, grain, [&](size_t b, size_t e, int th) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      size_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      for (; i < e; ++i) s0 += buf[i];
      sink[th * 8] += s0 + s1 + s2 + s3;
    });
    best = std::max(best, double(bytes) / seconds_since(t0));
  }
  std::free(buf);
  if (std::accumulate(sink.begin(), sink.end(), uint64_t{0}) == 42) std::puts("");
  return best;
}

struct Model {
  uint32_t layers = 30, heads = 9, kv_heads = 3, head_dim = 64, block_size = 16;
  uint32_t recent_window = 0;           // --recent-window
  KvDtype window_rows = KvDtype::kF16;  // --recent-window-dtype
  bool sink = false;                    // --sink
  // Sliding-window layers: every layer but each global_every-th sees its last `window` positions.
  uint32_t window = 0, global_every = 0;
};

struct Result {
  double step_seconds;  // one decode step: attention of every layer (median wall time)
  double cpu_seconds;   // CPU time of all threads per step (mean): robust on a busy machine
  double kv_bytes;      // KV bytes read by that step
};

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// One decode step of `sequences` tokens at context ctx whose first `shared_tokens` positions
// (rounded down to whole blocks) are the same blocks for all of them.
struct Batch {
  int sequences = 1;
  int shared_tokens = 0;
  bool share = true;
  bool prefill = false;  // one sequence's chunk of ctx tokens at positions 0..ctx-1 instead
};

Result run(const Model& m, KvDtype dtype, KvDtype v_dtype, int ctx, ThreadPool& pool,
           double min_seconds, const Batch& batch = {}) {
  const uint32_t per_seq = (ctx + m.block_size - 1) / m.block_size;
  const uint32_t shared_blocks = std::min<uint32_t>(per_seq, batch.shared_tokens / m.block_size);
  const uint32_t nblocks = shared_blocks + uint32_t(batch.sequences) * (per_seq - shared_blocks);
  auto storage = KvBlockStorage::create({.num_blocks = nblocks,
                                         .block_size = m.block_size,
                                         .layers = m.layers,
                                         .kv_heads = m.kv_heads,
                                         .head_dim = m.head_dim,
                                         .k_dtype = dtype,
                                         .v_dtype = v_dtype});
  if (!storage.is_ok()) {
    std::fprintf(stderr, "%s\n", storage.status().to_string().c_str());
    std::exit(1);
  }
  const PagedKvLayout& kv = storage->layout();
  // Fill: a few hundred distinct quantized vectors (quantizing every slot of a 32K context
  // would dominate the run), copied to every slot of every layer and head.
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int distinct = 256;
  // Per-channel keys (quant/kv_channel_groups.h) are sealed a group of G tokens at a time.
  const ChannelBits k_bits = channel_bits(dtype);
  const uint32_t G = kv_channel_group_tokens(dtype);
  const uint64_t gb = k_bits.bits ? channel_group_bytes(k_bits, G, m.head_dim) : 0;
  const uint64_t kb = kv.k_vector_bytes, vb = kv.v_vector_bytes;
  std::vector<uint8_t> k_bytes(distinct * (k_bits.bits ? gb : kb)), v_bytes(distinct * vb);
  std::vector<float> x(m.head_dim), group(uint64_t{std::max(1u, G)} * m.head_dim);
  for (int i = 0; i < distinct; ++i) {
    if (k_bits.bits) {
      for (auto& v : group) v = nd(rng);
      quantize_channel_group(k_bits, group.data(), m.head_dim, G, m.head_dim,
                             k_bytes.data() + i * gb);
    } else {
      for (auto& v : x) v = nd(rng);
      kv_vector_from_f32(dtype, x.data(), m.head_dim, k_bytes.data() + i * kb);
    }
    for (auto& v : x) v = nd(rng);
    kv_vector_from_f32(v_dtype, x.data(), m.head_dim, v_bytes.data() + i * vb);
  }
  // Blocks in a shuffled physical order, as a long-running pool would hand them out.
  std::vector<uint32_t> table(nblocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  for (uint32_t b = 0; b < nblocks; ++b)
    for (uint32_t l = 0; l < m.layers; ++l)
      for (uint32_t h = 0; h < m.kv_heads; ++h)
        for (uint32_t s = 0; s < m.block_size; ++s) {
          if (k_bits.bits == 0)
            std::memcpy(kv.k_head(b, l, h) + s * kb, k_bytes.data() + (rng() % distinct) * kb, kb);
          else if (s % G == 0)
            std::memcpy(kv.k_head(b, l, h) + (s / G) * gb, k_bytes.data() + (rng() % distinct) * gb,
                        gb);
          std::memcpy(kv.v_head(b, l, h) + s * vb, v_bytes.data() + (rng() % distinct) * vb, vb);
        }
  // Sequence s: the shared blocks, then its own.
  std::vector<std::vector<uint32_t>> tables(batch.sequences);
  for (int sq = 0; sq < batch.sequences; ++sq) {
    tables[sq].assign(table.begin(), table.begin() + shared_blocks);
    const auto own = table.begin() + shared_blocks + sq * (per_seq - shared_blocks);
    tables[sq].insert(tables[sq].end(), own, own + (per_seq - shared_blocks));
  }
  const int tokens = batch.prefill ? ctx : batch.sequences;
  std::vector<float> q(size_t(tokens) * m.heads * m.head_dim), out(q.size());
  for (auto& v : q) v = nd(rng);
  std::vector<int32_t> context_len(batch.sequences, ctx);
  std::vector<const uint32_t*> tabs;
  for (const auto& t : tables) tabs.push_back(t.data());
  if (batch.prefill) {
    context_len.resize(ctx);
    std::iota(context_len.begin(), context_len.end(), 1);
    tabs.assign(ctx, tables[0].data());
  }
  // The recent-token window: one slot per sequence, its rows before the step committed to every
  // layer's ring, the step's own row stored (what the forward pass does before attention).
  std::unique_ptr<RecentWindow> recent;
  PagedKvLayout with_window = kv;
  if (m.recent_window > 0) {
    recent = std::make_unique<RecentWindow>(RecentWindow::create(batch.sequences, m.recent_window,
                                                                 m.layers, m.kv_heads, m.head_dim,
                                                                 m.sink, m.window_rows)
                                                .value());
    const int32_t before = std::min<int32_t>(ctx - 1, int32_t(recent->capacity()));
    std::vector<int32_t> pos, slot, floor;
    if (m.sink) {  // position 0 of every sequence, computed by an earlier step
      pos.assign(batch.sequences, 0);
      slot.resize(batch.sequences);
      std::iota(slot.begin(), slot.end(), 0);
      floor.assign(batch.sequences, 0);
      std::vector<float> first(pos.size() * m.kv_heads * m.head_dim);
      for (auto& v : first) v = nd(rng);
      recent->begin_step(int64_t(pos.size()), pos.data(), slot.data(), floor.data());
      recent->store(first.data(), first.data());
      for (uint32_t l = 0; l < m.layers; ++l) recent->commit(l);
      pos.clear();
      slot.clear();
      floor.clear();
    }
    for (int sq = 0; sq < batch.sequences; ++sq)
      for (int32_t p = ctx - 1 - before; p < ctx - 1; ++p) {
        pos.push_back(p);
        slot.push_back(sq);
        floor.push_back(0);
      }
    std::vector<float> rows(pos.size() * m.kv_heads * m.head_dim);
    for (auto& v : rows) v = nd(rng);
    recent->begin_step(int64_t(pos.size()), pos.data(), slot.data(), floor.data());
    recent->store(rows.data(), rows.data());
    for (uint32_t l = 0; l < m.layers; ++l) recent->commit(l);
    pos.assign(batch.sequences, ctx - 1);
    slot.resize(batch.sequences);
    std::iota(slot.begin(), slot.end(), 0);
    floor.assign(batch.sequences, 0);
    recent->begin_step(batch.sequences, pos.data(), slot.data(), floor.data());
    recent->store(rows.data(), rows.data());
    with_window.recent = recent.get();
  }
  PagedAttentionArgs args{.kv = with_window,
                          .num_tokens = tokens,
                          .num_heads = m.heads,
                          .scale = 1.0f / 8,
                          .q = q.data(),
                          .out = out.data(),
                          .context_len = context_len.data(),
                          .block_table = tabs.data(),
                          .share_segments = batch.share};
  auto step = [&] {
    for (uint32_t l = 0; l < m.layers; ++l) {
      args.layer = l;
      args.model_layer = l;
      args.window = m.window != 0 && (l + 1) % m.global_every != 0 ? m.window : 0;
      paged_attention(args, pool);
    }
  };
  step();  // warm-up
  std::vector<double> times;
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  while (times.size() < 5 || seconds_since(t0) < min_seconds) {
    const auto t = Clock::now();
    step();
    times.push_back(seconds_since(t));
  }
  const double cpu = (process_cpu_seconds() - cpu0) / double(times.size());
  std::sort(times.begin(), times.end());
  const KvTokenBytes tb = kv_token_bytes({.layers = m.layers,
                                          .kv_heads = m.kv_heads,
                                          .head_dim_k = m.head_dim,
                                          .head_dim_v = m.head_dim,
                                          .k_dtype = dtype,
                                          .v_dtype = v_dtype});
  // The bytes a step must read at least: the shared prefix once, each sequence's own part.
  const double tokens_read =
      batch.prefill
          ? double(ctx)
          : double(shared_blocks) * m.block_size +
                double(batch.sequences) * (double(ctx) - double(shared_blocks) * m.block_size);
  return {times[times.size() / 2], cpu, double(tb.bytes_per_token) * tokens_read};
}

// Each format (a name, or "K/V") with `on` and with `on` but sharing off, in the same run; one
// markdown row per (context, format).
int run_on_off(const Model& m, const std::vector<int>& contexts,
               const std::vector<std::string>& formats, ThreadPool& pool, double min_seconds,
               const Batch& on) {
  std::printf(
      "| format | context | ms shared | ms unshared | speedup | CPU ms shared | CPU ms unshared "
      "|\n|---|---:|---:|---:|---:|---:|---:|\n");
  Batch off = on;
  off.share = false;
  for (int ctx : contexts)
    for (const auto& name : formats) {
      const size_t slash = name.find('/');
      auto d = parse_kv_dtype(name.substr(0, slash));
      auto dv = parse_kv_dtype(slash == std::string::npos ? name : name.substr(slash + 1));
      if (!d.is_ok() || !dv.is_ok()) {
        std::fprintf(stderr, "%s\n", (d.is_ok() ? dv : d).status().message().c_str());
        return 2;
      }
      const Result a = run(m, *d, *dv, ctx, pool, min_seconds, on);
      const Result b = run(m, *d, *dv, ctx, pool, min_seconds, off);
      std::printf("| %s | %d | %.3f | %.3f | %.2fx | %.3f | %.3f |\n", name.c_str(), ctx,
                  a.step_seconds * 1e3, b.step_seconds * 1e3, b.step_seconds / a.step_seconds,
                  a.cpu_seconds * 1e3, b.cpu_seconds * 1e3);
      std::fflush(stdout);
    }
  return 0;
}

void print_window(const Model& m) {
  if (m.window != 0)
    std::printf("sliding window: the last %u positions, on every layer but each %u-th\n\n",
                m.window, m.global_every);
}

int main_impl(int argc, char** argv) {
  std::vector<int> contexts = {1024, 4096, 16384, 32768};
  std::vector<std::string> formats = {
      "f32",  "f16",  "bf16",     "fp8_e4m3", "fp8_e5m2", "fp8_e4m3_dyn", "int8",       "int8_had",
      "q8_0", "int4", "int4_had", "int3_had", "int2_had", "int2_had64",   "int2_tcq64", "q4_0"};
  int threads = ThreadPool::hardware_threads();
  double min_seconds = 1.0;
  bool markdown = false;
  uint32_t block_size = 16;
  int sequences = 1, shared_tokens = 0;
  uint32_t recent_window = 0;
  bool prefill = false;
  Model m;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--contexts") {
      contexts.clear();
      for (const auto& s : split(next())) contexts.push_back(std::atoi(s.c_str()));
    } else if (a == "--formats") {
      formats = split(next());
    } else if (a == "--threads") {
      threads = std::atoi(next().c_str());
    } else if (a == "--min-seconds") {
      min_seconds = std::atof(next().c_str());
    } else if (a == "--block-size") {
      block_size = static_cast<uint32_t>(std::atoi(next().c_str()));
      if (block_size == 0) {
        std::fprintf(stderr, "--block-size must be at least 1\n");
        return 2;
      }
    } else if (a == "--sequences") {
      sequences = std::atoi(next().c_str());
      if (sequences < 1) {
        std::fprintf(stderr, "--sequences must be at least 1\n");
        return 2;
      }
    } else if (a == "--shared-prefix") {
      shared_tokens = std::atoi(next().c_str());
      if (shared_tokens < 0) {
        std::fprintf(stderr, "--shared-prefix must be at least 0\n");
        return 2;
      }
    } else if (a == "--recent-window") {
      recent_window = static_cast<uint32_t>(std::atoi(next().c_str()));
      if (recent_window % kRecentWindowAlign != 0 || recent_window > kMaxRecentWindow) {
        std::fprintf(stderr, "--recent-window must be a multiple of 16 up to %u\n",
                     kMaxRecentWindow);
        return 2;
      }
    } else if (a == "--recent-window-dtype") {
      const auto d = parse_kv_dtype(next());
      if (!d.is_ok() || !check_recent_window_dtype(*d).is_ok()) {
        std::fprintf(stderr, "--recent-window-dtype must be f16 or int8\n");
        return 2;
      }
      m.window_rows = *d;
    } else if (a == "--sink") {
      m.sink = true;
    } else if (a == "--markdown") {
      markdown = true;
    } else if (a == "--prefill") {
      prefill = true;
    } else if (a == "--shape") {
      const std::string shape = next();
      if (shape == "gemma3") {
        m.layers = 18, m.heads = 4, m.kv_heads = 1, m.head_dim = 256;
        m.window = 512, m.global_every = 6;
      } else if (shape != "smollm2") {
        std::fprintf(stderr, "--shape must be smollm2 or gemma3\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  ThreadPool pool(threads);
  const double bw = measure_read_bandwidth(pool, 5);
  std::printf("measured read bandwidth (%d threads, sum over 1 GiB): %.2f GB/s\n", threads,
              bw / 1e9);
  m.block_size = block_size;
  m.recent_window = recent_window;
  if (prefill) {
    if (sequences > 1 || recent_window > 0) {
      std::fprintf(stderr, "--prefill takes neither --sequences nor --recent-window\n");
      return 2;
    }
    // Shared and causal-group attention on and off; the context is the chunk's length.
    std::printf(
        "prefill attention, one chunk of one sequence, %u layers x %u heads (%u KV heads) x head "
        "dim %u, block size %u\n\n",
        m.layers, m.heads, m.kv_heads, m.head_dim, m.block_size);
    print_window(m);
    return run_on_off(m, contexts, formats, pool, min_seconds, {.share = true, .prefill = true});
  }
  if (sequences > 1) {
    std::printf("%d sequences, the first %d positions shared\n\n", sequences, shared_tokens);
    print_window(m);
    return run_on_off(m, contexts, formats, pool, min_seconds,
                      {.sequences = sequences, .shared_tokens = shared_tokens, .share = true});
  }
  std::printf(
      "decode attention, one sequence, %u layers x %u heads (%u KV heads) x head dim %u, block "
      "size %u\n\n",
      m.layers, m.heads, m.kv_heads, m.head_dim, m.block_size);
  print_window(m);
  if (m.sink && m.recent_window == 0) {
    std::fprintf(stderr, "--sink needs --recent-window\n");
    return 2;
  }
  if (m.recent_window > 0)
    std::printf("recent-token window: the newest %u-%u positions read in f16%s\n\n",
                m.recent_window, m.recent_window + 15, m.sink ? ", and position 0 (the sink)" : "");
  if (markdown)
    std::printf(
        "| format | context | KV bytes read | ms / step | KV GB/s | of bandwidth | vs f16 | CPU ms "
        "/ "
        "step |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n");
  else
    std::printf("%-14s %8s %12s %10s %9s %8s %7s %10s\n", "format", "context", "KV MB read",
                "ms/step", "KV GB/s", "of bw", "vs f16", "CPU ms");
  for (int ctx : contexts) {
    double f16_time = 0;
    std::vector<std::pair<std::string, Result>> rows;
    for (const auto& name : formats) {
      // "K/V" names the two formats, a single name both.
      const size_t slash = name.find('/');
      auto d = parse_kv_dtype(name.substr(0, slash));
      auto dv = parse_kv_dtype(slash == std::string::npos ? name : name.substr(slash + 1));
      if (!d.is_ok() || !dv.is_ok()) {
        std::fprintf(stderr, "%s\n", (d.is_ok() ? dv : d).status().message().c_str());
        return 2;
      }
      const Result r = run(m, *d, *dv, ctx, pool, min_seconds);
      if (*d == KvDtype::kF16) f16_time = r.step_seconds;
      rows.push_back({name, r});
    }
    for (const auto& [name, r] : rows) {
      const double gbs = r.kv_bytes / r.step_seconds / 1e9;
      const std::string vs =
          f16_time > 0 ? std::to_string(f16_time / r.step_seconds).substr(0, 4) + "x" : "-";
      if (markdown)
        std::printf("| %s | %d | %.1f MB | %.3f | %.2f | %.0f%% | %s | %.3f |\n", name.c_str(), ctx,
                    r.kv_bytes / 1e6, r.step_seconds * 1e3, gbs, 100 * gbs * 1e9 / bw, vs.c_str(),
                    r.cpu_seconds * 1e3);
      else
        std::printf("%-14s %8d %12.1f %10.3f %9.2f %7.0f%% %7s %10.3f\n", name.c_str(), ctx,
                    r.kv_bytes / 1e6, r.step_seconds * 1e3, gbs, 100 * gbs * 1e9 / bw, vs.c_str(),
                    r.cpu_seconds * 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kvs

int main(int argc, char** argv) { return kvs::main_impl(argc, argv); }
