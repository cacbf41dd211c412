// DiskTier: L3, the disk tier under the host tier. Blocks are written as extents (kv_extent.h),
// a few consecutive blocks per file, by one background writer thread, and read back by one
// loader thread. The directory is treated as a careful daemon treats its state directory:
//   - it must be the server's own: owned by this user and writable by nobody else (a clear
//     error otherwise, as ssh gives for a private key), never reached through a symbolic link;
//     it is created with mode 0700 when missing. An exclusive lock (flock) makes a second
//     server on the same directory fail at start with a clear error instead of both enforcing
//     the size limit over their own files only;
//   - every file is opened relative to the directory's descriptor: temporary files under
//     random names with O_CREAT|O_EXCL|O_NOFOLLOW (a planted link or file is never followed or
//     reused), renamed into place without replacing anything; only regular files are read,
//     opened O_NOFOLLOW|O_NONBLOCK and checked with fstat first, so a planted link, FIFO or
//     device is skipped, never followed or waited on;
//   - an extent is written to its temporary name, fsync'd, renamed, and only then indexed:
//     nothing is readable before its write is complete, and a crash (SIGKILL) leaves at most a
//     temporary file, which the next start deletes;
//   - at start the index is rebuilt by reading every extent's header (not its payload), so a
//     restarted process finds what an earlier one stored. Extents of another model, K/V format,
//     block size, block layout or server secret are left alone and counted (foreign), never
//     loaded; entries that cannot be read are skipped and counted, never fatal;
//   - a read verifies the extent's MAC (keyed with the server secret: a file written by anyone
//     else fails) and the stored token ids before any byte is used; a bad extent is deleted and
//     counted, and the caller recomputes;
//   - reads happen only on the loader thread: prefetch() queues an extent, verified_block() hands
//   out a
//     handle on a block of an extent already read and verified, and never touches the disk. A slow
//     or hung device delays only the requests waiting for it (the scheduler gives up and
//     recomputes); shutting down never waits for it longer than a bound;
//   - a write error (disk full, I/O error) is logged once and counted, and the tier stops
//     admitting new blocks (what it holds stays readable); no request ever fails because of it;
//   - capacity: when extents exceed capacity_bytes, the least recently used ones are deleted.
// Thread safety: every public method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/server_secret.h"
#include "core/status.h"
#include "kvcache/prefix_cache.h"
#include "kvcache/tier_key.h"
#include "tiers/kv_extent.h"
#include "tiers/verified_block.h"

namespace kvs {

struct DiskTierConfig {
  std::string dir;
  uint64_t capacity_bytes = uint64_t{4} << 30;
  ExtentNamespace ns;  // ns.secret_id names the MAC key's secret
  SecretKey mac_key{};
  uint32_t extent_blocks = 16;  // blocks gathered into one extent before it is written
  bool log_events = false;      // record the index's changes (take_events), from the scan on
  // How long destruction waits for a writer or loader stuck in a hung device before leaving it.
  double shutdown_wait_seconds = 5;
};

struct DiskTierCounters {
  uint64_t extents = 0;
  uint64_t blocks = 0;
  uint64_t used_bytes = 0;
  uint64_t blocks_stored = 0;       // blocks written (extents renamed into place)
  uint64_t blocks_loaded = 0;       // blocks copied out of verified extents
  uint64_t blocks_evicted = 0;      // blocks deleted for capacity
  uint64_t checksum_failures = 0;   // extents dropped: MAC, token or header mismatch
  uint64_t io_errors = 0;           // failed writes or reads
  uint64_t foreign_extents = 0;     // extents of another model/format/block size/secret, ignored
  uint64_t torn_files_removed = 0;  // temporary files of interrupted writes, deleted at start
  uint64_t skipped_entries = 0;     // links, FIFOs, devices, unreadable files: never read
  uint64_t bytes_read = 0;
  double read_seconds = 0;
  uint64_t pending_blocks = 0;  // accepted, not yet on disk
  bool admitting = true;
};

class DiskTier {
 public:
  // Creates the directory if needed (mode 0700), checks that it is this user's own, takes its
  // lock, removes temporary files and indexes the extents.
  static Result<std::unique_ptr<DiskTier>> open(const DiskTierConfig& config);
  // The server secret kept in the directory (created on first use; see server_secret.h), for a
  // server given no --kv-tier-secret-file: what lets a restart find its own extents. Checks the
  // directory as open() does (without taking the lock).
  static Result<ServerSecret> directory_secret(const std::string& dir);
  // Flushes what is queued (bounded), then stops the threads; a thread stuck in a hung device
  // is left behind after shutdown_wait_seconds rather than waited for.
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  [[nodiscard]] const DiskTierConfig& config() const;

  // Whether an extent on disk holds this chain position (key, parent, salt check, tokens).
  [[nodiscard]] bool contains(const TierBlockMeta& want, std::span<const int32_t> tokens) const;
  enum class Readiness : uint8_t { kMissing, kPending, kReady };
  // kReady: the block's extent is read and verified (verified_block hands it out); kPending: its
  // read is queued or running; kMissing: not on disk (or dropped). Never blocks on I/O.
  [[nodiscard]] Readiness readiness(const TierBlockMeta& want,
                                    std::span<const int32_t> tokens) const;
  // Queues the read of the extent holding this block (no-op if ready, pending or missing).
  void prefetch(const TierBlockMeta& want, std::span<const int32_t> tokens);
  // Waits until a queued read finishes or timeout_seconds pass; false when nothing is queued.
  bool wait_for_reads(double timeout_seconds);
  // A handle on a block of an extent already read and verified (readiness kReady). Never reads
  // the disk: an error when the block is not ready.
  Result<VerifiedBlock> verified_block(const TierBlockMeta& want, std::span<const int32_t> tokens);

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

  // Writes `bytes` bytes to a temporary file of the directory (created as extents are), reads
  // them back and deletes the file; the read rate in bytes/s, 0 when it failed.
  double measure_read_bandwidth(uint64_t bytes);

  [[nodiscard]] DiskTierCounters counters() const;
  // The blocks the index holds (their chain keys), in no particular order.
  [[nodiscard]] std::vector<uint64_t> keys() const;
  // With config.log_events: the blocks that entered or left the index since the last call, in
  // order (KV events, medium DISK). Entries come in as their extents are renamed into place (on
  // the writer thread, or by the scan at open) and leave as extents are dropped.
  [[nodiscard]] std::vector<CacheEvent> take_events();

  struct State;  // shared with the threads, so that a thread left in a hung device stays valid

 private:
  explicit DiskTier(std::shared_ptr<State> state) : s_(std::move(state)) {}
  std::shared_ptr<State> s_;
  std::thread writer_, loader_;
};

}  // namespace kvs
