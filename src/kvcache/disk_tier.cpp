#include "kvcache/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "core/check.h"

namespace kvs {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSuffix = ".kvx";
constexpr const char* kTmpSuffix = ".kvx.tmp";

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

Status write_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return internal_error(std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

Result<std::vector<uint8_t>> read_file(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return internal_error(path + ": " + std::strerror(errno));
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      const std::string err = std::strerror(errno);
      ::close(fd);
      return internal_error(path + ": " + err);
    }
    if (r == 0) break;
    if (out.size() + static_cast<size_t>(r) > max_bytes) {
      ::close(fd);
      return invalid_argument(path + ": larger than its header says");
    }
    out.insert(out.end(), buf, buf + r);
  }
  ::close(fd);
  return out;
}

Result<ExtentHeader> read_header(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return internal_error(path + ": " + std::strerror(errno));
  std::vector<uint8_t> bytes(kExtentPrefixBytes);
  Result<ExtentHeader> out = invalid_argument(path + ": truncated");
  if (::pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size())) {
    const Result<uint32_t> hb = extent_header_bytes(bytes);
    if (!hb.is_ok()) {
      out = hb.status();
    } else {
      bytes.resize(*hb);
      if (::pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()))
        out = decode_extent_header(bytes);
    }
  }
  ::close(fd);
  return out;
}

}  // namespace

DiskTier::DiskTier(const DiskTierConfig& config) : config_(config) {
  std::random_device rd;
  id_base_ = (uint64_t{rd()} << 32) ^ rd();
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierConfig& config) {
  if (config.dir.empty()) return invalid_argument("--kv-offload-dir is empty");
  if (config.extent_blocks == 0 || config.extent_blocks > kMaxExtentBlocks)
    return invalid_argument("--kv-offload-extent-blocks must be 1.." +
                            std::to_string(kMaxExtentBlocks));
  if (config.ns.block_bytes == 0) return invalid_argument("disk tier: block_bytes is 0");
  std::error_code ec;
  fs::create_directories(config.dir, ec);
  if (ec || !fs::is_directory(config.dir, ec))
    return invalid_argument("--kv-offload-dir " + config.dir + ": cannot create the directory" +
                            (ec ? " (" + ec.message() + ")" : ""));
  if (::access(config.dir.c_str(), W_OK | R_OK | X_OK) != 0)
    return invalid_argument("--kv-offload-dir " + config.dir + ": " + std::strerror(errno));
  std::unique_ptr<DiskTier> t(new DiskTier(config));
  KVS_RETURN_IF_ERROR(t->scan());
  t->writer_ = std::thread([p = t.get()] { p->writer_loop(); });
  t->loader_ = std::thread([p = t.get()] { p->loader_loop(); });
  return t;
}

DiskTier::~DiskTier() {
  flush(30.0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  read_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (loader_.joinable()) loader_.join();
}

Status DiskTier::scan() {
  struct Found {
    std::string path;
    fs::file_time_type mtime;
    uint64_t size;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(config_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (ends_with(name, kTmpSuffix)) {
      // An interrupted write (crash or kill): never renamed, so never indexed. Delete it.
      fs::remove(e.path(), ec);
      ++counters_.torn_files_removed;
      continue;
    }
    if (!ends_with(name, kSuffix) || !e.is_regular_file(ec)) continue;
    found.push_back({e.path().string(), e.last_write_time(ec), e.file_size(ec)});
  }
  if (ec) return invalid_argument("--kv-offload-dir " + config_.dir + ": " + ec.message());
  // Oldest first, so that the most recently written extents are the most recently used.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) {
    Result<ExtentHeader> h = read_header(f.path);
    if (!h.is_ok() || f.size != h->file_bytes()) {
      // A renamed extent is complete; a bad header or size means it was damaged afterwards.
      ++counters_.checksum_failures;
      fs::remove(f.path, ec);
      continue;
    }
    if (!(h->ns == config_.ns)) {
      ++counters_.foreign_extents;
      continue;
    }
    index_extent(++next_id_, f.path, std::move(*h));
  }
  enforce_capacity();
  return Status::ok();
}

void DiskTier::index_extent(uint64_t id, const std::string& path, ExtentHeader header) {
  Extent x{.path = path,
           .file_bytes = header.file_bytes(),
           .header = std::move(header),
           .last_used = ++tick_};
  for (uint32_t i = 0; i < x.header.blocks.size(); ++i) {
    const TierBlockMeta& m = x.header.blocks[i];
    const bool added = index_.emplace(m.key, Location{id, i}).second;  // an older copy keeps its
    if (added && config_.log_events) {
      const std::span<const int32_t> t = x.header.block_tokens(i);
      events_.push_back({.stored = true,
                         .key = m.key,
                         .parent_key = m.parent_key,
                         .tokens = std::vector<int32_t>(t.begin(), t.end())});
    }
  }
  counters_.extents += 1;
  counters_.blocks += x.header.blocks.size();
  counters_.used_bytes += x.file_bytes;
  extents_.emplace(id, std::move(x));
}

void DiskTier::drop_extent(uint64_t id, bool count_as_evicted) {
  const auto it = extents_.find(id);
  if (it == extents_.end()) return;
  const Extent& x = it->second;
  for (const TierBlockMeta& m : x.header.blocks) {
    const auto loc = index_.find(m.key);
    if (loc == index_.end() || loc->second.extent != id) continue;
    index_.erase(loc);
    if (config_.log_events) events_.push_back({.stored = false, .key = m.key});
  }
  std::error_code ec;
  fs::remove(x.path, ec);
  counters_.extents -= 1;
  counters_.blocks -= x.header.blocks.size();
  counters_.used_bytes -= x.file_bytes;
  if (count_as_evicted) counters_.blocks_evicted += x.header.blocks.size();
  forget_verified(id);
  extents_.erase(it);
}

void DiskTier::enforce_capacity() {
  while (counters_.used_bytes > config_.capacity_bytes && !extents_.empty()) {
    auto lru = std::min_element(extents_.begin(), extents_.end(), [](const auto& a, const auto& b) {
      return a.second.last_used < b.second.last_used;
    });
    drop_extent(lru->first, true);
  }
}

std::optional<DiskTier::Location> DiskTier::locate(const TierBlockMeta& want,
                                                   std::span<const int32_t> tokens) const {
  const auto it = index_.find(want.key);
  if (it == index_.end()) return std::nullopt;
  const Extent& x = extents_.at(it->second.extent);
  const TierBlockMeta& m = x.header.blocks[it->second.index];
  if (m.parent_key != want.parent_key || m.salt_check != want.salt_check) return std::nullopt;
  const std::span<const int32_t> stored = x.header.block_tokens(it->second.index);
  if (!std::equal(tokens.begin(), tokens.end(), stored.begin(), stored.end())) return std::nullopt;
  return it->second;
}

bool DiskTier::contains(const TierBlockMeta& want, std::span<const int32_t> tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  return locate(want, tokens).has_value();
}

Status DiskTier::load_extent(std::unique_lock<std::mutex>& lock, uint64_t id) {
  const auto it = extents_.find(id);
  if (it == extents_.end()) return not_found("disk tier: extent evicted");
  const std::string path = it->second.path;
  const uint64_t expect = it->second.file_bytes;
  const ExtentHeader header = it->second.header;
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::vector<uint8_t>> file = read_file(path, expect);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Verified outside the lock (hashing a few MiB), trusted only if every check passes.
  bool good = file.is_ok() && file->size() == expect && extent_checksum_ok(*file);
  if (good) {
    const Result<ExtentHeader> h = decode_extent_header(*file);
    good = h.is_ok() && h->ns == header.ns && h->tokens == header.tokens &&
           h->blocks.size() == header.blocks.size();
    for (size_t i = 0; good && i < header.blocks.size(); ++i)
      good = h->blocks[i].key == header.blocks[i].key &&
             h->blocks[i].parent_key == header.blocks[i].parent_key &&
             h->blocks[i].salt_check == header.blocks[i].salt_check;
  }
  lock.lock();
  if (!good) {
    if (file.is_ok() || file.status().code() == StatusCode::kInvalidArgument)
      ++counters_.checksum_failures;
    else
      ++counters_.io_errors;
    drop_extent(id, false);
    return data_loss("disk tier: extent " + path + " failed verification; dropped");
  }
  if (!extents_.contains(id)) return not_found("disk tier: extent evicted meanwhile");
  counters_.bytes_read += file->size();
  counters_.read_seconds += secs;
  forget_verified(id);
  verified_bytes_ += file->size();
  verified_.emplace_back(id, std::move(*file));
  while (verified_.size() > 1 &&
         (verified_.size() > kVerifiedExtents || verified_bytes_ > kVerifiedBytes)) {
    verified_bytes_ -= verified_.front().second.size();
    verified_.pop_front();
  }
  return Status::ok();
}

void DiskTier::forget_verified(uint64_t id) {
  for (auto it = verified_.begin(); it != verified_.end(); ++it) {
    if (it->first != id) continue;
    verified_bytes_ -= it->second.size();
    verified_.erase(it);
    return;
  }
}

DiskTier::Readiness DiskTier::readiness(const TierBlockMeta& want,
                                        std::span<const int32_t> tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::optional<Location> loc = locate(want, tokens);
  if (!loc) return Readiness::kMissing;
  for (const auto& v : verified_)
    if (v.first == loc->extent) return Readiness::kReady;
  return reading_.contains(loc->extent) ? Readiness::kPending : Readiness::kMissing;
}

void DiskTier::prefetch(const TierBlockMeta& want, std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::optional<Location> loc = locate(want, tokens);
  if (!loc || reading_.contains(loc->extent)) return;
  for (const auto& v : verified_)
    if (v.first == loc->extent) return;
  reading_.emplace(loc->extent, 0);
  read_queue_.push_back(loc->extent);
  read_cv_.notify_one();
}

bool DiskTier::wait_for_reads(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (reading_.empty()) return false;
  const size_t before = reading_.size();
  read_done_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                         [&] { return reading_.size() < before; });
  return true;
}

void DiskTier::loader_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    read_cv_.wait(lock, [&] { return stop_ || !read_queue_.empty(); });
    if (stop_) break;
    const uint64_t id = read_queue_.front();
    read_queue_.pop_front();
    (void)load_extent(lock, id);  // failures are counted and the extent dropped
    reading_.erase(id);
    read_done_cv_.notify_all();
  }
}

Status DiskTier::read_block(const TierBlockMeta& want, std::span<const int32_t> tokens,
                            uint8_t* out) {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<Location> loc = locate(want, tokens);
  if (!loc) return not_found("disk tier: block not found");
  const auto verified = [&]() -> const std::vector<uint8_t>* {
    for (const auto& v : verified_)
      if (v.first == loc->extent) return &v.second;
    return nullptr;
  };
  if (verified() == nullptr) {
    KVS_RETURN_IF_ERROR(load_extent(lock, loc->extent));
    loc = locate(want, tokens);
    if (!loc || verified() == nullptr) return not_found("disk tier: extent evicted meanwhile");
  }
  Extent& x = extents_.at(loc->extent);
  x.last_used = ++tick_;
  const uint64_t block_bytes = config_.ns.block_bytes;
  std::memcpy(out, verified()->data() + x.header.header_bytes + loc->index * block_bytes,
              block_bytes);
  ++counters_.blocks_loaded;
  return Status::ok();
}

bool DiskTier::add(const TierBlockMeta& meta, std::span<const int32_t> tokens,
                   const uint8_t* bytes) {
  KVS_CHECK(tokens.size() == config_.ns.block_size);
  std::lock_guard<std::mutex> lock(mu_);
  if (!counters_.admitting) return false;
  if (index_.contains(meta.key) || pending_keys_.contains(meta.key)) return true;
  ExtentHeader& h = open_.header;
  h.blocks.push_back(
      {.key = meta.key, .parent_key = meta.parent_key, .salt_check = meta.salt_check});
  h.tokens.insert(h.tokens.end(), tokens.begin(), tokens.end());
  open_.payload.insert(open_.payload.end(), bytes, bytes + config_.ns.block_bytes);
  pending_keys_.emplace(meta.key, 0);
  if (h.blocks.size() >= config_.extent_blocks) queue_open_extent();
  return true;
}

void DiskTier::queue_open_extent() {
  open_.id = ++next_id_;
  open_.header.ns = config_.ns;
  open_.header.header_bytes =
      extent_header_size(static_cast<uint32_t>(open_.header.blocks.size()), config_.ns.block_size);
  queue_.push_back(std::move(open_));
  open_ = Job{};
  cv_.notify_one();
}

void DiskTier::close_open_extent() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_.header.blocks.empty()) queue_open_extent();
}

bool DiskTier::flush(double timeout_seconds) {
  close_open_extent();
  std::unique_lock<std::mutex> lock(mu_);
  return done_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                           [&] { return queue_.empty() && !writing_; });
}

std::vector<uint64_t> DiskTier::keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  out.reserve(index_.size());
  for (const auto& [key, loc] : index_) out.push_back(key);
  return out;
}

std::vector<PrefixCache::Event> DiskTier::take_events() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(events_, {});
}

DiskTierCounters DiskTier::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  DiskTierCounters c = counters_;
  c.pending_blocks = pending_keys_.size();
  return c;
}

void DiskTier::note_write_error(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.io_errors;
  counters_.admitting = false;
  if (!logged_error_) {
    logged_error_ = true;
    std::fprintf(stderr,
                 "kvserve: disk tier %s: %s; it stops admitting blocks (what it holds stays "
                 "readable)\n",
                 config_.dir.c_str(), what.c_str());
  }
}

Result<std::string> DiskTier::write_extent(const Job& job) {
  char name[40];
  std::snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(id_base_ + job.id));
  const std::string final_path = (fs::path(config_.dir) / (std::string(name) + kSuffix)).string();
  const std::string tmp_path = final_path + ".tmp";
  const std::vector<uint8_t> header = encode_extent_header(job.header);
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  XXH3_128bits_update(state, header.data(), header.size());
  XXH3_128bits_update(state, job.payload.data(), job.payload.size());
  const XXH128_hash_t c = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  uint8_t checksum[kExtentChecksumBytes];
  std::memcpy(checksum, &c.low64, 8);
  std::memcpy(checksum + 8, &c.high64, 8);
  const int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return internal_error(tmp_path + ": " + std::strerror(errno));
  Status st = write_all(fd, header.data(), header.size());
  if (st.is_ok()) st = write_all(fd, job.payload.data(), job.payload.size());
  if (st.is_ok()) st = write_all(fd, checksum, sizeof(checksum));
  if (st.is_ok() && ::fsync(fd) != 0) st = internal_error(std::strerror(errno));
  if (::close(fd) != 0 && st.is_ok()) st = internal_error(std::strerror(errno));
  if (st.is_ok() && std::rename(tmp_path.c_str(), final_path.c_str()) != 0)
    st = internal_error(std::strerror(errno));
  if (!st.is_ok()) {
    ::unlink(tmp_path.c_str());
    return internal_error("writing " + tmp_path + ": " + st.message());
  }
  // The rename is durable once the directory is synced.
  const int dfd = ::open(config_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return final_path;
}

void DiskTier::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stop_ and nothing left
    Job job = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    const uint64_t bytes = job.header.file_bytes();
    const bool fits = counters_.admitting && bytes <= config_.capacity_bytes;
    if (fits) {
      // Room first: the least recently used extents go.
      counters_.used_bytes += bytes;
      enforce_capacity();
      counters_.used_bytes -= bytes;
    }
    lock.unlock();
    Result<std::string> path = fits ? write_extent(job) : invalid_argument("skipped");
    if (fits && !path.is_ok()) note_write_error(path.status().message());
    lock.lock();
    for (const TierBlockMeta& m : job.header.blocks) pending_keys_.erase(m.key);
    if (path.is_ok()) {
      counters_.blocks_stored += job.header.blocks.size();
      index_extent(job.id, *path, std::move(job.header));
      enforce_capacity();
    }
    writing_ = false;
    done_cv_.notify_all();
  }
}

}  // namespace kvs
