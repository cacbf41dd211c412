// KvCacheManager: which KV blocks each sequence uses. Pure accounting: it never sees model
// tensors or KV bytes. The BlockCopy ops it returns become KvTransfers (kv_transfer.h) that the
// scheduler queues and the engine's transfer executor performs; build_step_inputs gives the
// forward pass its slot mappings and block tables once per step.
//
// Per sequence: one block table per layer group (kv_cache_groups.h; one group for uniform
// models) and two counters shared by all groups,
//   num_committed <= num_tokens <= blocks * block_size,
// num_tokens = token slots appended (append_slots), num_committed = slots whose KV is written and
// whose token ids are known (commit_tokens). At most the last block of a table is partly filled.
// A sliding-window group's table keeps an entry per block position, but the blocks before the
// window are released (the entry becomes invalid): when a step will compute positions from
// `first` on, blocks wholly before first - window + 1 go back to the pool, cached-free when
// keyed, so a 32K-token Gemma 3 sequence holds 32K tokens in its full group and about
// window + a step's chunk + a block in each sliding group.
//
// Prefix caching: every full committed block of group 0 gets a key chained from its parent's
// key, its token ids and the extra keys (tenant salt on the first block, model fingerprint, KV
// format). A lookup walks the prompt block by block; a candidate is accepted only if its stored
// token ids, its parent block (id + generation) and its tenant all match, so a hash collision can
// never hand back the wrong KV. The blocks of other groups at the same position are keyed off
// group 0's key (block_hash.h: group_block_key) and validated against group 0's block there (as
// their parent), because a sliding group does not keep its own older blocks to chain through.
// A hit of H blocks needs group 0 (full) to have blocks [0, H), every full group the same, and
// every sliding group the blocks of the window before position H * block_size (released sliding
// blocks stay cached-free, so shorter prompts can still hit them). Blocks whose refcount drops to
// zero keep their key (cached-free) until the pool needs them; eviction is LRU, chain tails first.
// Prefix caching needs group 0 to be a full group (every layer-grouped model kvserve runs has
// one); partial-block reuse (copying the first slots of a cached block) is done for one group.
//
// Copy ops: every BlockCopy returned by admit / append_slots must be performed, in the order
// returned, before the next forward pass writes any KV (the source stays intact until then: it
// is either still referenced, or a cached-free block that can be re-allocated only by calls of
// the same step, whose KV is written by that same forward pass).
//
// Thread safety: none; the engine's step loop owns the manager. Movable, not copyable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kvcache/block_hash.h"
#include "kvcache/block_pool.h"
#include "kvcache/block_table.h"
#include "kvcache/in_flight_blocks.h"
#include "kvcache/kv_cache_groups.h"
#include "kvcache/prefix_cache.h"
#include "kvcache/recent_window_slots.h"
#include "kvcache/sequence_block_tables.h"
#include "kvcache/start_token_table.h"
#include "kvcache/tenant_registry.h"
#include "kvcache/tier_key.h"
#include "quant/kv_format.h"

namespace kvs {

// The engine copies token slots [0, num_tokens) of src into dst (all layers, K and V, scales).
struct BlockCopy {
  BlockId src;
  BlockId dst;
  uint32_t num_tokens = 0;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct KvCacheConfig {
  uint32_t num_blocks = 0;
  uint32_t block_size = 16;  // tokens per block
  // Per layer group (kv_cache_groups.h): 0 = full attention, else its sliding window in tokens.
  // Full groups come first. One full group by default (a uniform model).
  std::vector<uint32_t> group_windows = {0};
  bool enable_prefix_caching = true;
  // Extra keys mixed into every block key: cached KV is only valid for the same weights and format.
  uint64_t model_fingerprint = 0;
  // Mixed into every block key of this process, so that keys cannot be predicted (or collisions
  // crafted) from outside. Engines draw it at random; tests may fix it. Keys of the lower tiers,
  // which must be stable across restarts, are computed separately (tier keys, not these).
  uint64_t hash_seed = 0;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  // Per-tenant cap on held blocks (in use + cached-free). 0 = none. If both are set the smaller
  // wins; the fraction is of num_blocks (rounded down, at least 1).
  uint32_t tenant_quota_blocks = 0;
  double tenant_quota_fraction = 0;
  // Lower tiers (kv offload): keep every cached block's tier identity (tier_key.h) and log the
  // cached blocks that eviction drops (take_tier_evictions), so they can be written down instead
  // of forgotten. One full group only (a uniform model) and prefix caching on.
  bool tier_keys = false;
  // Also log every block that becomes cached (take_completed_blocks): write-through.
  bool log_completed_blocks = false;
  // Log the cache's changes for KV events (take_cache_events; needs tier_keys).
  bool log_events = false;
  // The keys tier chains are rooted in (tier_key.h): from the server secret.
  TierSecrets tier_secrets;
  // `--kv-recent-window` (quant/recent_window.h): slots of the recent-token window, one per
  // sequence (recent_window_slots.h); 0 = no window.
  uint32_t recent_window_slots = 0;
  // `--kv-attention-sink` (quant/attention_sink.h): entries of its start-token table
  // (start_token_table.h), as many as the window's slots; 0 = no sink.
  uint32_t attention_sink_entries = 0;
};

// Answer of a dry run (plan_admit); nothing changes.
struct AdmitPlan {
  uint32_t cached_tokens = 0;  // tokens admit() would reuse (full blocks + partial CoW copy)
  uint32_t cached_blocks = 0;  // of those, whole cached blocks (the chain's length in the cache)
  // New blocks the prompt needs, all groups together (incl. a partial CoW copy); a sliding
  // group counts at most its window's blocks plus one.
  uint32_t blocks_needed = 0;
  bool fits = false;  // blocks_needed <= blocks obtainable now (free + evictable, quota)
  // The first block the cache does not have is being computed right now by another admitted
  // sequence of the same tenant (same chain key): admitting this one now would compute the same
  // KV a second time into private blocks. Waiting until that block is committed turns it into a
  // prefix hit instead.
  bool prefix_in_flight = false;
};

// Counters kept as they change: reading them is O(1) (once per step is fine).
struct KvCacheCounters {
  uint32_t num_blocks = 0;
  uint32_t block_size = 0;
  uint32_t blocks_free = 0;
  uint32_t blocks_cached_free = 0;
  uint32_t blocks_in_use = 0;
  uint64_t prefix_query_tokens = 0;  // prompt tokens looked up by admit()
  uint64_t prefix_hit_tokens = 0;    // of those, tokens reused from the cache
  // Of those, tokens of whole cached blocks: what may be shown outside (partial-block reuse
  // is counted in prefix_hit_tokens only, so no probe can read a partial match length).
  uint64_t prefix_hit_block_tokens = 0;
  uint64_t evictions = 0;   // cached-free blocks whose key was dropped for reuse
  uint64_t cow_copies = 0;  // BlockCopy ops returned (fork CoW + partial prefix reuse)
  uint32_t num_sequences = 0;
  uint32_t num_tenants = 0;
};

// The counters plus what takes a scan of every block table (O(blocks + table entries)).
struct KvCacheStats : KvCacheCounters {
  double usage = 0;              // blocks_in_use / num_blocks
  double prefix_hit_rate = 0;    // hit / query tokens (0 when no query)
  uint64_t allocated_slots = 0;  // blocks_in_use * block_size
  uint64_t unfilled_slots = 0;   // allocated slots no sequence has appended into
  double fragmentation = 0;      // unfilled_slots / allocated_slots (0 when none)
};

struct TenantStats {
  uint32_t id = 0;  // TenantId value (BlockInfo::tenant); reused after the tenant is forgotten
  std::string cache_salt;
  uint64_t prefix_query_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t prefix_hit_block_tokens = 0;  // whole cached blocks only (see KvCacheStats)
  uint32_t blocks_held = 0;              // owned blocks in use or cached-free
  uint32_t blocks_cached_free = 0;       // of those, cached-free
  uint64_t blocks_evicted = 0;           // this tenant's cached blocks evicted
};

// One block of the pool as seen by /v1/kv and debugging tools.
struct BlockInfo {
  BlockState state = BlockState::kFree;
  uint32_t refcount = 0;
  uint32_t tenant = 0;    // TenantStats::id of the owner (meaningless for kFree)
  uint32_t filled = 0;    // token slots holding KV: max over users; block_size when cached-free
  uint32_t group = 0;     // the layer group it was last used for
  uint64_t tier_key = 0;  // a cached block's tier key (tier_key.h) when tier keys are on; else 0
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);

  [[nodiscard]] const KvCacheConfig& config() const { return config_; }
  [[nodiscard]] uint32_t block_size() const { return config_.block_size; }
  [[nodiscard]] uint32_t num_groups() const {
    return static_cast<uint32_t>(config_.group_windows.size());
  }

  // ---- dry runs (change nothing) ----
  // max_cached_tokens (here and in admit): reuse at most this many prompt tokens (a scored
  // prompt needs the logits of its positions from score_from on, so it reuses at most those
  // before).
  [[nodiscard]] AdmitPlan plan_admit(std::span<const int32_t> prompt, std::string_view cache_salt,
                                     uint32_t max_cached_tokens = UINT32_MAX) const;
  // New blocks append_slots(seq, num_tokens) would take, all groups (incl. CoW copies), before
  // releasing any out-of-window block.
  [[nodiscard]] uint32_t blocks_needed_to_append(SeqId seq, uint32_t num_tokens) const;
  [[nodiscard]] bool can_append(SeqId seq, uint32_t num_tokens) const;
  // Blocks obtainable now by a sequence of this tenant (free + evictable, within quota).
  [[nodiscard]] uint32_t available_blocks(std::string_view cache_salt) const;

  // ---- commits ----
  // Adds a sequence (precondition: seq unknown, prompt non-empty; else invalid_argument). Matches
  // the longest cached prefix (never the whole prompt: at least the last prompt token is always
  // recomputed, so logits exist). Returns the cached token count c: num_committed == c
  // afterwards. If the match ends inside a block (one group only), a fresh block receives the
  // first c % block_size slots of a cached block: `copies` gets that BlockCopy (skipped, and c
  // rounded down, if `copies` is null). Then the first chunk is appended: num_tokens == c +
  // min(chunk_budget, prompt.size() - c). All or nothing: when the blocks for the partial copy
  // and the chunk are not available it fails with resource_exhausted and changes nothing
  // (`copies` included). The prompt's full blocks that are not cached are registered as in
  // flight (see AdmitPlan::prefix_in_flight) until they are committed or the sequence is freed.
  // `cacheable_tokens`: only the blocks that end at or before it become prefix-cache entries (and
  // are registered in flight): with a recent-token window the sequence's window floor, since the
  // positions above it are computed reading the window, so their bytes are this sequence's own
  // (quant/recent_window.h).
  Result<uint32_t> admit(SeqId seq, std::span<const int32_t> prompt, std::string_view cache_salt,
                         std::vector<BlockCopy>* copies, uint32_t chunk_budget = 0,
                         uint32_t max_cached_tokens = UINT32_MAX,
                         uint32_t cacheable_tokens = UINT32_MAX);
  // Makes room for the next num_tokens slots in every group: first releases the blocks the
  // step cannot read (sliding groups), then allocates, evicting, and CoW-copying a shared
  // partial last block into `copies`. Fails with resource_exhausted and allocates nothing if it
  // cannot (the out-of-window blocks are released either way: no later step reads them).
  // num_tokens(seq) grows by num_tokens.
  Status append_slots(SeqId seq, uint32_t num_tokens, std::vector<BlockCopy>* copies);
  // Records that the KV of these tokens (positions [num_committed, +n)) has been written;
  // precondition: num_committed + n <= num_tokens. Full blocks become prefix-cache entries.
  // Once every appended slot is committed, the sliding groups release what the next step (from
  // num_tokens) cannot read.
  void commit_tokens(SeqId seq, std::span<const int32_t> tokens);
  // The child shares every block of the parent (refcount++), same tenant, same counters; the
  // first write into a shared partly filled block copies it (append_slots returns the copy).
  // invalid_argument if the parent is unknown, the child exists, or the parent has appended
  // slots whose KV is not committed yet (their KV would be written for only one of the two).
  Status fork(SeqId parent, SeqId child);
  // Re-admits a sequence whose KV the caller restores itself (swap-in): takes fresh blocks for
  // what resident_blocks() would list for tokens.size() committed tokens (no prefix lookup),
  // marks every slot appended and committed (full resident blocks become prefix-cache entries),
  // counts no prefix query, then appends `chunk` slots. Returns the restored blocks in
  // resident_blocks() order: the caller must write their KV before any forward pass reads them.
  // All or nothing: resource_exhausted (nothing changed) when the blocks for both are not
  // available; invalid_argument if seq exists or tokens is empty.
  Result<std::vector<BlockId>> admit_restored(SeqId seq, std::span<const int32_t> tokens,
                                              std::string_view cache_salt, uint32_t chunk = 0);
  // Releases the sliding groups' blocks that no later step can read (before the window of the
  // next position, num_tokens). Swap-out calls it so that only needed blocks are copied.
  void release_out_of_window(SeqId seq);
  // Drops the sequence: its blocks are released last to first (tails evicted first) and go to
  // cached-free (if keyed) or free. Unknown seq: no-op.
  void free(SeqId seq);
  // Forgets tenants that have held no block and run no sequence since `idle_seconds` before
  // `now` (seconds on any monotonic clock; the caller passes its own every so often): their
  // salt, counters and slot are dropped and the slot is reused. Bounds the tenant table by
  // the tenants that hold blocks or ran recently, whatever the number of distinct salts seen.
  // Returns how many were forgotten.
  uint32_t forget_idle_tenants(double now, double idle_seconds);
  [[nodiscard]] uint32_t num_tenants() const;

  // ---- lower tiers (config.tier_keys) ----
  // The tier identity (key, parent key, salt check) of the prompt's first `max_blocks` full
  // blocks: the chain a lookup walks down the tiers.
  [[nodiscard]] std::vector<TierBlockMeta> tier_chain(std::span<const int32_t> prompt,
                                                      std::string_view cache_salt,
                                                      uint32_t max_blocks) const;
  // Puts blocks loaded from a lower tier into the cache: blocks [first_block, first_block +
  // metas.size()) of the prompt, where first_block must be exactly the length of the cached
  // chain (AdmitPlan::cached_blocks). Takes fresh blocks, keys them as cached-free (most recently
  // used), and returns them in order: the caller must write their KV (load transfers) before any
  // forward pass reads them; the next admit() of this prompt hits them. Leaves room for at
  // least `keep_free` more blocks; resource_exhausted (nothing changed) if it cannot.
  Result<std::vector<BlockId>> import_blocks(std::span<const int32_t> prompt,
                                             std::string_view cache_salt, uint32_t first_block,
                                             std::span<const TierBlockMeta> metas,
                                             uint32_t keep_free);
  // Cached blocks that eviction dropped since the last call, with their tier identity and
  // tokens; their bytes are intact until the transfers of the step that evicted them run.
  [[nodiscard]] std::vector<EvictedBlock> take_tier_evictions() {
    return tiers_ ? tiers_->take_evicted() : std::vector<EvictedBlock>{};
  }
  // Blocks (group 0) that became cached or left the cache since the last call, in order
  // (config.log_events).
  [[nodiscard]] std::vector<CacheEvent> take_cache_events() {
    return tiers_ ? tiers_->take_events() : std::vector<CacheEvent>{};
  }
  // Blocks that became cached since the last call (config.log_completed_blocks).
  [[nodiscard]] std::vector<BlockId> take_completed_blocks() {
    return tiers_ ? tiers_->take_completed() : std::vector<BlockId>{};
  }
  [[nodiscard]] const TierBlockMeta& tier_meta(BlockId b) const { return tiers_->meta(b); }
  [[nodiscard]] std::span<const int32_t> cached_tokens_of(BlockId b) const {
    return cache_->tokens(b);
  }
  // Every cached block (in use or cached-free) of group 0, for persisting at shutdown.
  [[nodiscard]] std::vector<BlockId> cached_blocks() const;

  // ---- queries ----
  // The sequences' block tables (sequence_block_tables.h): block_table, resident_blocks,
  // num_tokens, num_committed, slot, build_step_inputs.
  [[nodiscard]] const SequenceBlockTables& tables() const { return tables_; }
  [[nodiscard]] bool contains(SeqId seq) const { return tables_.contains(seq); }
  [[nodiscard]] std::span<const BlockId> block_table(SeqId seq, uint32_t group = 0) const {
    return tables_.block_table(seq, group);
  }
  [[nodiscard]] std::vector<BlockId> resident_blocks(SeqId seq) const {
    return tables_.resident_blocks(seq);
  }
  [[nodiscard]] uint32_t num_tokens(SeqId seq) const { return tables_.num_tokens(seq); }
  [[nodiscard]] uint32_t num_committed(SeqId seq) const { return tables_.num_committed(seq); }
  [[nodiscard]] uint64_t slot(SeqId seq, uint32_t pos) const { return tables_.slot(seq, pos); }
  void build_step_inputs(std::span<const StepRow> rows, StepInputs* out) const {
    tables_.build_step_inputs(rows, out);
  }
  // The sequence's recent-window slot (-1: none), and the slots' hand-overs since the last call
  // (recent_window_slots.h: resets and forks' copies), for the model runner to apply in order.
  [[nodiscard]] int32_t recent_slot(SeqId seq) const { return recent_.slot_of(seq); }
  [[nodiscard]] std::vector<RecentSlotChange> take_recent_changes() {
    return recent_.take_changes();
  }
  // The attention sink's start-token table (start_token_table.h). A prefix hit needs the table
  // to know the first token (sink_knows); a sequence admitted with one adopts that token's rows,
  // and one that computes position 0 this step publishes its rows after the forward pass. The
  // copies are recorded against the sequences' window slots for the model runner
  // (take_start_row_copies: adoptions before the forward pass, publications after it).
  [[nodiscard]] bool has_attention_sink() const { return sink_.num_entries() > 0; }
  [[nodiscard]] bool sink_knows(int32_t token) const { return sink_.knows(token); }
  void adopt_start_rows(SeqId seq, int32_t first_token);
  void publish_start_rows(SeqId seq, int32_t first_token);
  // The step's forward pass ran: the window's and the sink's copies recorded for it were applied
  // (a backend without rows, the simulator's, drops them) and the sink's publications written.
  void forward_done();
  [[nodiscard]] std::vector<StartRowCopy> take_start_row_copies() {
    return std::exchange(start_row_copies_, {});
  }
  [[nodiscard]] const StartTokenTable& start_tokens() const { return sink_; }
  [[nodiscard]] uint32_t refcount(BlockId b) const { return pool_.refcount(b); }
  [[nodiscard]] BlockState block_state(BlockId b) const { return pool_.state(b); }

  [[nodiscard]] KvCacheCounters counters() const;
  [[nodiscard]] KvCacheStats stats() const;
  // Every block's state, refcount, owner tenant, fill and group (O(blocks + table entries)).
  [[nodiscard]] std::vector<BlockInfo> block_infos() const;
  [[nodiscard]] std::vector<TenantStats> tenant_stats() const;
  // Recounts everything (O(blocks + table entries)); an error names the broken invariant.
  [[nodiscard]] Status check_integrity() const;

  // Test hook: replace the block key hash (e.g. a constant) to force collisions. Only valid
  // while the cache is empty (no keyed blocks).
  void set_hash_function_for_testing(BlockHashFn fn);

 private:
  // The result of a prefix lookup: per group, the cached blocks a hit of `hit_blocks` blocks uses
  // (group 0 and the full groups: [0, hit_blocks); a sliding group: its window before the hit
  // point), then maybe a partial match in the next block (one group only).
  struct Match {
    uint32_t hit_blocks = 0;
    std::vector<std::vector<BlockId>> blocks;  // [group]: blocks of positions [first_block[g], hit)
    std::vector<uint32_t> first_block;         // [group]
    uint64_t last_key = 0;                     // group 0's key of block hit - 1 (root key if none)
    BlockRef last_ref;                         // that block (invalid = root)
    std::optional<PrefixCache::PartialMatch> partial;
    [[nodiscard]] uint32_t full_tokens(uint32_t block_size) const {
      return hit_blocks * block_size;
    }
  };

  [[nodiscard]] uint32_t window(uint32_t group) const { return config_.group_windows[group]; }
  void lookup(std::span<const int32_t> prompt, std::optional<TenantId> tenant, Match* m,
              uint32_t max_cached_tokens = UINT32_MAX) const;
  // Blocks [first, end) a group needs for a sequence of `tokens` slots whose next step starts
  // at `next`: [first_held_block(window, next), ceil(tokens / block_size)).
  [[nodiscard]] uint32_t held_from(uint32_t group, uint32_t next) const;
  void release_before(SeqBlocks& s, uint32_t group, uint32_t first_kept);
  void commit_full_block(SeqId seq, SeqBlocks& s, uint32_t block_index,
                         std::span<const int32_t> tokens);
  void register_in_flight(SeqId seq, std::span<const int32_t> prompt, uint32_t first_block,
                          uint64_t parent_key);
  void take_block(BlockId b, uint32_t group);  // records the group a block now serves

  KvCacheConfig config_;
  // On the heap so that the pool's pointer to it survives moving the manager (which is
  // move-only).
  std::unique_ptr<PrefixCache> cache_;
  BlockPool pool_;
  std::unique_ptr<TenantRegistry> tenants_;
  BlockHashFn hash_fn_;
  SequenceBlockTables tables_;
  std::vector<uint8_t> block_group_;  // per block: the group it last served
  uint64_t cow_copies_ = 0;
  // Prompt blocks being computed now (AdmitPlan::prefix_in_flight).
  InFlightBlocks in_flight_;
  // The lower tiers' view of the cache (config.tier_keys; else null). On the heap so that the
  // prefix cache's pointer to it survives moving the manager.
  std::unique_ptr<TierBridge> tiers_;
  RecentWindowSlots recent_;
  StartTokenTable sink_;
  std::vector<StartRowCopy> start_row_copies_;
};

}  // namespace kvs
