// DiskTier: L3, the disk tier under the host tier. Blocks are written as extents (kv_extent.h),
// a few consecutive blocks per file, by one background writer thread:
//   - an extent is written to a temporary name, fsync'd, renamed, and only then indexed: nothing
//     is readable before its write is complete, and a crash (SIGKILL) leaves at most a temporary
//     file, which the next start deletes;
//   - at start the index is rebuilt by reading every extent's header (not its payload), so a
//     restarted process finds what an earlier one stored. Extents of another model, K/V format,
//     block size or block layout are left alone and counted (foreign), never loaded;
//   - a read verifies the XXH3-128 checksum and the stored token ids before any byte is used;
//     a bad extent is deleted and counted, and the caller recomputes;
//   - a write error (disk full, I/O error) is logged once and counted, and the tier stops
//     admitting new blocks (what it holds stays readable); no request ever fails because of it;
//   - capacity: when extents exceed capacity_bytes, the least recently used ones are deleted;
//   - loads can be asynchronous: prefetch() hands an extent to a loader thread, which reads and
//     verifies it into a small cache of verified extents; read_block() then costs a copy.
// Thread safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kvcache/kv_extent.h"
#include "kvcache/prefix_cache.h"
#include "kvcache/tier_key.h"

namespace kvs {

struct DiskTierConfig {
  std::string dir;
  uint64_t capacity_bytes = uint64_t{4} << 30;
  ExtentNamespace ns;
  uint32_t extent_blocks = 16;  // blocks gathered into one extent before it is written
  bool log_events = false;      // record the index's changes (take_events), from the scan on
};

struct DiskTierCounters {
  uint64_t extents = 0;
  uint64_t blocks = 0;
  uint64_t used_bytes = 0;
  uint64_t blocks_stored = 0;       // blocks written (extents renamed into place)
  uint64_t blocks_loaded = 0;       // blocks read back and verified
  uint64_t blocks_evicted = 0;      // blocks deleted for capacity
  uint64_t checksum_failures = 0;   // extents dropped: checksum, token or header mismatch
  uint64_t io_errors = 0;           // failed writes or reads
  uint64_t foreign_extents = 0;     // extents of another model/format/block size, ignored
  uint64_t torn_files_removed = 0;  // temporary files of interrupted writes, deleted at start
  uint64_t bytes_read = 0;
  double read_seconds = 0;
  uint64_t pending_blocks = 0;  // accepted, not yet on disk
  bool admitting = true;
};

class DiskTier {
 public:
  // Creates the directory if needed, removes temporary files, indexes the extents.
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierConfig& config);
  ~DiskTier();  // flushes what is queued (see flush), then stops the writer
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  [[nodiscard]] const DiskTierConfig& config() const { return config_; }

  // Whether an extent on disk holds this chain position (key, parent, salt check, tokens).
  [[nodiscard]] bool contains(const TierBlockMeta& want, std::span<const int32_t> tokens) const;
  enum class Readiness : uint8_t { kMissing, kPending, kReady };
  // kReady: the block's extent is read and verified (read_block copies it); kPending: its read
  // is queued or running; kMissing: not on disk (or dropped). Never blocks on I/O.
  [[nodiscard]] Readiness readiness(const TierBlockMeta& want,
                                    std::span<const int32_t> tokens) const;
  // Queues the read of the extent holding this block (no-op if ready, pending or missing).
  void prefetch(const TierBlockMeta& want, std::span<const int32_t> tokens);
  // Waits until a queued read finishes or timeout_seconds pass; false when nothing is queued.
  bool wait_for_reads(double timeout_seconds);
  // Reads the block into out (block_bytes bytes), verifying its extent. On a checksum, token or
  // header mismatch the extent is deleted and counted; on any failure nothing is written to out
  // that the caller may use, and an error is returned (the caller recomputes).
  Status read_block(const TierBlockMeta& want, std::span<const int32_t> tokens, uint8_t* out);

  // Accepts one block for writing (its bytes are copied now). Blocks are gathered into the open
  // extent, which is queued for the writer when it holds extent_blocks blocks (or on
  // close_open_extent). A block already on disk or pending is skipped. Returns false when the
  // tier is not admitting (after a write error).
  bool add(const TierBlockMeta& meta, std::span<const int32_t> tokens, const uint8_t* bytes);
  // Queues the open extent even if it is not full.
  void close_open_extent();
  // Closes the open extent and waits until every queued write is on disk or `timeout_seconds`
  // pass. Returns whether everything was written.
  bool flush(double timeout_seconds);

  [[nodiscard]] DiskTierCounters counters() const;
  // The blocks the index holds (their chain keys), in no particular order.
  [[nodiscard]] std::vector<uint64_t> keys() const;
  // With config.log_events: the blocks that entered or left the index since the last call, in
  // order (KV events, medium DISK). Entries come in as their extents are renamed into place (on
  // the writer thread, or by the scan at open) and leave as extents are dropped.
  [[nodiscard]] std::vector<PrefixCache::Event> take_events();

 private:
  struct Extent {
    std::string path;
    uint64_t file_bytes = 0;
    ExtentHeader header;
    uint64_t last_used = 0;
  };
  struct Location {
    uint64_t extent = 0;
    uint32_t index = 0;
  };
  struct Job {
    uint64_t id = 0;
    ExtentHeader header;
    std::vector<uint8_t> payload;
  };

  explicit DiskTier(const DiskTierConfig& config);
  Status scan();
  void writer_loop();
  void loader_loop();
  // Reads and verifies extent `id` (no lock held during the I/O) and keeps it among the verified
  // extents; on a failed check the extent is dropped and counted.
  Status load_extent(std::unique_lock<std::mutex>& lock, uint64_t id);
  // Writes one extent durably; returns its final path or an error.
  Result<std::string> write_extent(const Job& job);
  void index_extent(uint64_t id, const std::string& path, ExtentHeader header);  // mu_ held
  void drop_extent(uint64_t id, bool count_as_evicted);                          // mu_ held
  void enforce_capacity();                                                       // mu_ held
  [[nodiscard]] std::optional<Location> locate(const TierBlockMeta& want,
                                               std::span<const int32_t> tokens) const;  // mu_ held
  void note_write_error(const std::string& what);
  void queue_open_extent();           // mu_ held; precondition: the open extent has blocks
  void forget_verified(uint64_t id);  // mu_ held

  DiskTierConfig config_;
  uint64_t id_base_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // the writer waits for jobs
  std::condition_variable done_cv_;  // flush waits for the queue to drain
  std::unordered_map<uint64_t, Extent> extents_;
  std::unordered_map<uint64_t, Location> index_;         // chain key -> where
  std::unordered_map<uint64_t, uint32_t> pending_keys_;  // keys in the open extent or queue
  Job open_;
  std::deque<Job> queue_;
  bool writing_ = false;
  bool stop_ = false;
  uint64_t next_id_ = 0;
  uint64_t tick_ = 0;
  DiskTierCounters counters_;
  std::vector<PrefixCache::Event> events_;  // config.log_events
  bool logged_error_ = false;
  // Extents read and verified, most recently used last: consecutive blocks of a prefix cost one
  // read, and prefetched extents wait here for the step that imports them. Bounded in bytes (a
  // long prefix in small extents must fit whole) and in count.
  static constexpr uint64_t kVerifiedBytes = uint64_t{256} << 20;
  static constexpr size_t kVerifiedExtents = 4096;
  uint64_t verified_bytes_ = 0;
  std::deque<std::pair<uint64_t, std::vector<uint8_t>>> verified_;
  std::deque<uint64_t> read_queue_;                // extents the loader thread will read
  std::unordered_map<uint64_t, uint8_t> reading_;  // queued or being read
  std::condition_variable read_cv_;                // the loader waits for work
  std::condition_variable read_done_cv_;           // wait_for_reads
  std::thread writer_;
  std::thread loader_;
};

}  // namespace kvs
