#include "tiers/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/check.h"

namespace kvs {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSuffix = ".kvx";
constexpr const char* kTmpSuffix = ".kvx.tmp";
constexpr const char* kSecretName = "tier.secret";

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string mode_string(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// Opens the tier directory after the checks a daemon makes of its state directory: created
// (0700) when missing, never through a link, owned by this user, writable by nobody else.
Result<int> open_checked_directory(const std::string& dir) {
  if (dir.empty()) return invalid_argument("--kv-offload-dir is empty");
  const std::string what = "--kv-offload-dir " + dir;
  struct stat lst {};
  if (::lstat(dir.c_str(), &lst) != 0) {
    if (errno != ENOENT) return io_error(what + ": " + std::strerror(errno));
    std::error_code ec;
    const fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return invalid_argument(what + ": cannot create the directory: " + std::strerror(errno));
  } else if (S_ISLNK(lst.st_mode)) {
    return invalid_argument(what + " is a symbolic link: give the directory itself");
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR)
      return invalid_argument(what + " is not a directory (or is a symbolic link)");
    return invalid_argument(what + ": " + std::strerror(errno));
  }
  struct stat st {};
  Status bad = Status::ok();
  if (::fstat(fd, &st) != 0) {
    bad = io_error(what + ": " + std::strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    bad = invalid_argument(what + " is not a directory");
  } else if (st.st_uid != ::geteuid()) {
    bad = invalid_argument(what + " is owned by uid " + std::to_string(st.st_uid) +
                           ", not by this user (uid " + std::to_string(::geteuid()) +
                           "): the KV directory must be the server's own");
  } else if ((st.st_mode & 022) != 0) {
    bad = invalid_argument(what + " is writable by others (mode " + mode_string(st.st_mode) +
                           "): run chmod go-w on it (0700 is best)");
  } else if (::faccessat(fd, ".", R_OK | W_OK | X_OK, AT_EACCESS) != 0) {
    bad = invalid_argument(what + ": " + std::strerror(errno));
  }
  if (!bad.is_ok()) {
    ::close(fd);
    return bad;
  }
  return fd;
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

// Opens an entry of the directory for reading: never through a link, never waiting (a FIFO or a
// device opens without blocking and is then refused), only a regular file.
Result<int> open_regular(int dirfd, const std::string& name, struct stat* st) {
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) return invalid_argument(name + " is a symbolic link");
    return io_error(name + ": " + std::strerror(errno));
  }
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    ::close(fd);
    return invalid_argument(name + " is not a regular file");
  }
  return fd;
}

// The whole file (exactly `expect` bytes, or an error).
Result<std::vector<uint8_t>> read_exact(int dirfd, const std::string& name, uint64_t expect) {
  struct stat st {};
  KVS_ASSIGN_OR_RETURN(const int fd, open_regular(dirfd, name, &st));
  if (static_cast<uint64_t>(st.st_size) != expect) {
    ::close(fd);
    return invalid_argument(name + ": size differs from its header");
  }
  std::vector<uint8_t> out(expect);
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string err = r < 0 ? std::strerror(errno) : "truncated";
      ::close(fd);
      return io_error(name + ": " + err);
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return out;
}

Result<ExtentHeader> read_header(int fd, const std::string& name) {
  std::vector<uint8_t> bytes(kExtentPrefixBytes);
  if (::pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
    return invalid_argument(name + ": truncated");
  KVS_ASSIGN_OR_RETURN(const uint32_t hb, extent_header_bytes(bytes));
  bytes.resize(hb);
  if (::pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()))
    return invalid_argument(name + ": truncated header");
  return decode_extent_header(bytes);
}

// A fresh temporary file in the directory: a random name, created exclusively, never through a
// link. Returns its descriptor and name.
Result<std::pair<int, std::string>> create_temp(int dirfd) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string name = random_hex(12) + kTmpSuffix;
    const int fd =
        ::openat(dirfd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) return std::make_pair(fd, std::move(name));
    if (errno != EEXIST)
      return io_error(std::string("creating a temporary file: ") + std::strerror(errno));
  }
  return io_error("creating a temporary file: every random name was taken");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct DiskTier::State {
  struct Extent {
    std::string name;  // in the directory
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

  DiskTierConfig config;
  int dirfd = -1;
  mutable std::mutex mu;
  std::condition_variable cv;       // the writer waits for jobs
  std::condition_variable done_cv;  // flush waits for the queue to drain
  std::condition_variable read_cv;  // the loader waits for work
  std::condition_variable read_done_cv;
  std::condition_variable exit_cv;  // the destructor waits for the threads
  std::unordered_map<uint64_t, Extent> extents;
  std::unordered_map<uint64_t, Location> index;         // chain key -> where
  std::unordered_map<uint64_t, uint32_t> pending_keys;  // keys in the open extent or queue
  Job open;
  std::deque<Job> queue;
  bool writing = false;
  bool stop = false;
  int threads_running = 0;
  uint64_t next_id = 0;
  uint64_t tick = 0;
  DiskTierCounters counters;
  std::vector<CacheEvent> events;  // config.log_events
  bool logged_error = false;
  // Extents read and verified, most recently used last: consecutive blocks of a prefix cost one
  // read, and prefetched extents wait here for the step that imports them. Bounded in bytes (a
  // long prefix in small extents must fit whole) and in count.
  static constexpr uint64_t kVerifiedBytes = uint64_t{256} << 20;
  static constexpr size_t kVerifiedExtents = 4096;
  uint64_t verified_bytes = 0;
  std::deque<std::pair<uint64_t, std::shared_ptr<const std::vector<uint8_t>>>> verified;
  std::deque<uint64_t> read_queue;                // extents the loader thread will read
  std::unordered_map<uint64_t, uint8_t> reading;  // queued or being read

  ~State() {
    if (dirfd >= 0) ::close(dirfd);
  }

  Status scan();
  void writer_loop();
  void loader_loop();
  void load_extent(std::unique_lock<std::mutex>& lock, uint64_t id);
  Result<std::string> write_extent(const Job& job);
  void index_extent(uint64_t id, std::string name, ExtentHeader header);  // mu held
  void drop_extent(uint64_t id, bool count_as_evicted);                   // mu held
  void enforce_capacity();                                                // mu held
  [[nodiscard]] std::optional<Location> locate(const TierBlockMeta& want,
                                               std::span<const int32_t> tokens) const;  // mu held
  [[nodiscard]] std::shared_ptr<const std::vector<uint8_t>> verified_bytes_of(
      uint64_t id) const;  // mu held
  void note_write_error(const std::string& what);
  void queue_open_extent();           // mu held; precondition: the open extent has blocks
  void forget_verified(uint64_t id);  // mu held
  void thread_done() {
    std::lock_guard<std::mutex> lock(mu);
    --threads_running;
    exit_cv.notify_all();
  }
};

Result<ServerSecret> DiskTier::directory_secret(const std::string& dir) {
  KVS_ASSIGN_OR_RETURN(const int fd, open_checked_directory(dir));
  Result<ServerSecret> s = ServerSecret::load_or_create_in(fd, dir, kSecretName);
  ::close(fd);
  return s;
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(const DiskTierConfig& config) {
  if (config.extent_blocks == 0 || config.extent_blocks > kMaxExtentBlocks)
    return invalid_argument("--kv-offload-extent-blocks must be 1.." +
                            std::to_string(kMaxExtentBlocks));
  if (config.ns.block_bytes == 0) return invalid_argument("disk tier: block_bytes is 0");
  KVS_ASSIGN_OR_RETURN(const int fd, open_checked_directory(config.dir));
  auto state = std::make_shared<State>();
  state->config = config;
  state->dirfd = fd;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return unavailable("--kv-offload-dir " + config.dir +
                         " is in use by another kvserve process (each server needs its own "
                         "directory; replicas share KV through --kv-remote)");
    return io_error("--kv-offload-dir " + config.dir + ": cannot lock it: " + std::strerror(errno));
  }
  KVS_RETURN_IF_ERROR(state->scan());
  std::unique_ptr<DiskTier> t(new DiskTier(state));
  state->threads_running = 2;
  t->writer_ = std::thread([s = state] {
    s->writer_loop();
    s->thread_done();
  });
  t->loader_ = std::thread([s = state] {
    s->loader_loop();
    s->thread_done();
  });
  return t;
}

DiskTier::~DiskTier() {
  State& s = *s_;
  flush(s.config.shutdown_wait_seconds);
  std::unique_lock<std::mutex> lock(s.mu);
  s.stop = true;
  s.cv.notify_all();
  s.read_cv.notify_all();
  const bool exited =
      s.exit_cv.wait_for(lock, std::chrono::duration<double>(s.config.shutdown_wait_seconds),
                         [&] { return s.threads_running == 0; });
  lock.unlock();
  if (exited) {
    writer_.join();
    loader_.join();
    return;
  }
  // A thread is stuck in the device (a hung disk): leave it; it holds the state it uses.
  std::fprintf(stderr, "kvserve: disk tier %s: an I/O did not finish within %.0f s; not waiting\n",
               s.config.dir.c_str(), s.config.shutdown_wait_seconds);
  writer_.detach();
  loader_.detach();
}

const DiskTierConfig& DiskTier::config() const { return s_->config; }

Status DiskTier::State::scan() {
  struct Found {
    std::string name;
    struct timespec mtime;
    ExtentHeader header;
  };
  std::vector<Found> found;
  const int dup_fd = ::dup(dirfd);
  DIR* d = dup_fd >= 0 ? ::fdopendir(dup_fd) : nullptr;
  if (d == nullptr) {
    if (dup_fd >= 0) ::close(dup_fd);
    return io_error("--kv-offload-dir " + config.dir + ": " + std::strerror(errno));
  }
  uint64_t bad_headers = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (ends_with(name, kTmpSuffix)) {
      // An interrupted write (crash or kill): never renamed, so never indexed. Delete it (an
      // unlink removes a link itself, never what it points to).
      if (::unlinkat(dirfd, name.c_str(), 0) == 0) ++counters.torn_files_removed;
      continue;
    }
    if (!ends_with(name, kSuffix)) continue;
    struct stat st {};
    Result<int> fd = open_regular(dirfd, name, &st);
    if (!fd.is_ok()) {
      ++counters.skipped_entries;  // a link, FIFO, device or unreadable entry: never read
      continue;
    }
    Result<ExtentHeader> h = read_header(*fd, name);
    ::close(*fd);
    if (!h.is_ok() || static_cast<uint64_t>(st.st_size) != h->file_bytes()) {
      // A renamed extent is complete; a bad header or size means it was damaged afterwards.
      ++bad_headers;
      ::unlinkat(dirfd, name.c_str(), 0);
      continue;
    }
    found.push_back({name, st.st_mtim, std::move(*h)});
  }
  ::closedir(d);
  // Oldest first, so that the most recently written extents are the most recently used.
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.mtime.tv_sec, a.mtime.tv_nsec) < std::tie(b.mtime.tv_sec, b.mtime.tv_nsec);
  });
  std::lock_guard<std::mutex> lock(mu);
  counters.checksum_failures += bad_headers;
  for (Found& f : found) {
    if (!(f.header.ns == config.ns)) {
      ++counters.foreign_extents;
      continue;
    }
    index_extent(++next_id, std::move(f.name), std::move(f.header));
  }
  enforce_capacity();
  return Status::ok();
}

void DiskTier::State::index_extent(uint64_t id, std::string name, ExtentHeader header) {
  Extent x{.name = std::move(name),
           .file_bytes = header.file_bytes(),
           .header = std::move(header),
           .last_used = ++tick};
  for (uint32_t i = 0; i < x.header.blocks.size(); ++i) {
    const TierBlockMeta& m = x.header.blocks[i];
    const bool added = index.emplace(m.key, Location{id, i}).second;  // an older copy keeps its
    if (added && config.log_events) {
      const std::span<const int32_t> t = x.header.block_tokens(i);
      events.push_back({.stored = true,
                        .key = m.key,
                        .parent_key = m.parent_key,
                        .tokens = std::vector<int32_t>(t.begin(), t.end())});
    }
  }
  counters.extents += 1;
  counters.blocks += x.header.blocks.size();
  counters.used_bytes += x.file_bytes;
  extents.emplace(id, std::move(x));
}

void DiskTier::State::drop_extent(uint64_t id, bool count_as_evicted) {
  const auto it = extents.find(id);
  if (it == extents.end()) return;
  const Extent& x = it->second;
  for (const TierBlockMeta& m : x.header.blocks) {
    const auto loc = index.find(m.key);
    if (loc == index.end() || loc->second.extent != id) continue;
    index.erase(loc);
    if (config.log_events) events.push_back({.stored = false, .key = m.key});
  }
  ::unlinkat(dirfd, x.name.c_str(), 0);
  counters.extents -= 1;
  counters.blocks -= x.header.blocks.size();
  counters.used_bytes -= x.file_bytes;
  if (count_as_evicted) counters.blocks_evicted += x.header.blocks.size();
  forget_verified(id);
  extents.erase(it);
}

void DiskTier::State::enforce_capacity() {
  while (counters.used_bytes > config.capacity_bytes && !extents.empty()) {
    auto lru = std::min_element(extents.begin(), extents.end(), [](const auto& a, const auto& b) {
      return a.second.last_used < b.second.last_used;
    });
    drop_extent(lru->first, true);
  }
}

std::optional<DiskTier::State::Location> DiskTier::State::locate(
    const TierBlockMeta& want, std::span<const int32_t> tokens) const {
  const auto it = index.find(want.key);
  if (it == index.end()) return std::nullopt;
  const Extent& x = extents.at(it->second.extent);
  const TierBlockMeta& m = x.header.blocks[it->second.index];
  if (m.parent_key != want.parent_key || m.salt_check != want.salt_check) return std::nullopt;
  const std::span<const int32_t> stored = x.header.block_tokens(it->second.index);
  if (!std::equal(tokens.begin(), tokens.end(), stored.begin(), stored.end())) return std::nullopt;
  return it->second;
}

std::shared_ptr<const std::vector<uint8_t>> DiskTier::State::verified_bytes_of(uint64_t id) const {
  for (const auto& v : verified)
    if (v.first == id) return v.second;
  return nullptr;
}

bool DiskTier::contains(const TierBlockMeta& want, std::span<const int32_t> tokens) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->locate(want, tokens).has_value();
}

void DiskTier::State::load_extent(std::unique_lock<std::mutex>& lock, uint64_t id) {
  const auto it = extents.find(id);
  if (it == extents.end()) return;  // evicted meanwhile
  const std::string name = it->second.name;
  const uint64_t expect = it->second.file_bytes;
  const ExtentHeader header = it->second.header;
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::vector<uint8_t>> file = read_exact(dirfd, name, expect);
  const double secs = seconds_since(t0);
  // Verified outside the lock (a MAC over a few MiB), trusted only if every check passes.
  bool good = file.is_ok() && extent_mac_ok(config.mac_key, *file);
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
      ++counters.checksum_failures;
    else
      ++counters.io_errors;
    drop_extent(id, false);
    return;
  }
  if (!extents.contains(id)) return;  // evicted meanwhile
  counters.bytes_read += file->size();
  counters.read_seconds += secs;
  forget_verified(id);
  verified_bytes += file->size();
  verified.emplace_back(id, std::make_shared<const std::vector<uint8_t>>(std::move(*file)));
  while (verified.size() > 1 &&
         (verified.size() > kVerifiedExtents || verified_bytes > kVerifiedBytes)) {
    verified_bytes -= verified.front().second->size();
    verified.pop_front();
  }
}

void DiskTier::State::forget_verified(uint64_t id) {
  for (auto it = verified.begin(); it != verified.end(); ++it) {
    if (it->first != id) continue;
    verified_bytes -= it->second->size();
    verified.erase(it);
    return;
  }
}

DiskTier::Readiness DiskTier::readiness(const TierBlockMeta& want,
                                        std::span<const int32_t> tokens) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  const std::optional<State::Location> loc = s_->locate(want, tokens);
  if (!loc) return Readiness::kMissing;
  if (s_->verified_bytes_of(loc->extent) != nullptr) return Readiness::kReady;
  return s_->reading.contains(loc->extent) ? Readiness::kPending : Readiness::kMissing;
}

void DiskTier::prefetch(const TierBlockMeta& want, std::span<const int32_t> tokens) {
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::optional<State::Location> loc = s.locate(want, tokens);
  if (!loc || s.reading.contains(loc->extent) || s.verified_bytes_of(loc->extent) != nullptr)
    return;
  s.reading.emplace(loc->extent, 0);
  s.read_queue.push_back(loc->extent);
  s.read_cv.notify_one();
}

bool DiskTier::wait_for_reads(double timeout_seconds) {
  State& s = *s_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.reading.empty()) return false;
  const size_t before = s.reading.size();
  s.read_done_cv.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                          [&] { return s.reading.size() < before; });
  return true;
}

void DiskTier::State::loader_loop() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    read_cv.wait(lock, [&] { return stop || !read_queue.empty(); });
    if (stop) break;
    const uint64_t id = read_queue.front();
    read_queue.pop_front();
    load_extent(lock, id);  // failures are counted and the extent dropped
    reading.erase(id);
    read_done_cv.notify_all();
  }
}

Result<VerifiedBlock> DiskTier::verified_block(const TierBlockMeta& want,
                                               std::span<const int32_t> tokens) {
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::optional<State::Location> loc = s.locate(want, tokens);
  if (!loc) return not_found("disk tier: block not found");
  std::shared_ptr<const std::vector<uint8_t>> bytes = s.verified_bytes_of(loc->extent);
  if (bytes == nullptr) return unavailable("disk tier: the block's extent has not been read yet");
  State::Extent& x = s.extents.at(loc->extent);
  x.last_used = ++s.tick;
  const uint64_t block_bytes = s.config.ns.block_bytes;
  ++s.counters.blocks_loaded;
  return VerifiedBlock{.buffer = std::move(bytes),
                       .offset = x.header.header_bytes + loc->index * block_bytes,
                       .bytes = block_bytes};
}

bool DiskTier::add(const TierBlockMeta& meta, std::span<const int32_t> tokens,
                   const uint8_t* bytes) {
  State& s = *s_;
  KVS_CHECK(tokens.size() == s.config.ns.block_size);
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.counters.admitting) return false;
  if (s.index.contains(meta.key) || s.pending_keys.contains(meta.key)) return true;
  ExtentHeader& h = s.open.header;
  h.blocks.push_back(
      {.key = meta.key, .parent_key = meta.parent_key, .salt_check = meta.salt_check});
  h.tokens.insert(h.tokens.end(), tokens.begin(), tokens.end());
  s.open.payload.insert(s.open.payload.end(), bytes, bytes + s.config.ns.block_bytes);
  s.pending_keys.emplace(meta.key, 0);
  if (h.blocks.size() >= s.config.extent_blocks) s.queue_open_extent();
  return true;
}

void DiskTier::State::queue_open_extent() {
  open.id = ++next_id;
  open.header.ns = config.ns;
  open.header.header_bytes =
      extent_header_size(static_cast<uint32_t>(open.header.blocks.size()), config.ns.block_size);
  queue.push_back(std::move(open));
  open = Job{};
  cv.notify_one();
}

void DiskTier::close_open_extent() {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (!s_->open.header.blocks.empty()) s_->queue_open_extent();
}

bool DiskTier::flush(double timeout_seconds) {
  close_open_extent();
  State& s = *s_;
  std::unique_lock<std::mutex> lock(s.mu);
  return s.done_cv.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                            [&] { return s.queue.empty() && !s.writing; });
}

double DiskTier::measure_read_bandwidth(uint64_t bytes) {
  Result<std::pair<int, std::string>> tmp = create_temp(s_->dirfd);
  if (!tmp.is_ok()) return 0;
  const auto [fd, name] = *tmp;
  std::vector<uint8_t> a(bytes, 1), b(bytes, 0);
  double rate = 0;
  if (write_all(fd, a.data(), a.size()).is_ok() && ::fsync(fd) == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    if (::pread(fd, b.data(), b.size(), 0) == static_cast<ssize_t>(b.size()))
      rate = static_cast<double>(bytes) / std::max(seconds_since(t0), 1e-9);
  }
  ::close(fd);
  ::unlinkat(s_->dirfd, name.c_str(), 0);
  return rate;
}

std::vector<uint64_t> DiskTier::keys() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  std::vector<uint64_t> out;
  out.reserve(s_->index.size());
  for (const auto& [key, loc] : s_->index) out.push_back(key);
  return out;
}

std::vector<CacheEvent> DiskTier::take_events() {
  std::lock_guard<std::mutex> lock(s_->mu);
  return std::exchange(s_->events, {});
}

DiskTierCounters DiskTier::counters() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  DiskTierCounters c = s_->counters;
  c.pending_blocks = s_->pending_keys.size();
  return c;
}

void DiskTier::State::note_write_error(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu);
  ++counters.io_errors;
  counters.admitting = false;
  if (!logged_error) {
    logged_error = true;
    std::fprintf(stderr,
                 "kvserve: disk tier %s: %s; it stops admitting blocks (what it holds stays "
                 "readable)\n",
                 config.dir.c_str(), what.c_str());
  }
}

Result<std::string> DiskTier::State::write_extent(const Job& job) {
  const std::vector<uint8_t> header = encode_extent_header(job.header);
  uint8_t mac[kExtentMacBytes];
  extent_mac(config.mac_key, header, job.payload, mac);
  KVS_ASSIGN_OR_RETURN(auto tmp, create_temp(dirfd));
  const auto& [fd, tmp_name] = tmp;
  Status st = write_all(fd, header.data(), header.size());
  if (st.is_ok()) st = write_all(fd, job.payload.data(), job.payload.size());
  if (st.is_ok()) st = write_all(fd, mac, sizeof(mac));
  if (st.is_ok() && ::fsync(fd) != 0) st = internal_error(std::strerror(errno));
  if (::close(fd) != 0 && st.is_ok()) st = internal_error(std::strerror(errno));
  // Into place under a fresh random name, never replacing anything that is there.
  std::string final_name;
  for (int attempt = 0; st.is_ok() && attempt < 8; ++attempt) {
    final_name = random_hex(12) + kSuffix;
    if (::renameat2(dirfd, tmp_name.c_str(), dirfd, final_name.c_str(), RENAME_NOREPLACE) == 0)
      break;
    final_name.clear();
    if (errno != EEXIST) st = internal_error(std::strerror(errno));
  }
  if (st.is_ok() && final_name.empty()) st = internal_error("every random name was taken");
  if (!st.is_ok()) {
    ::unlinkat(dirfd, tmp_name.c_str(), 0);
    return internal_error("writing " + config.dir + "/" + tmp_name + ": " + st.message());
  }
  // The rename is durable once the directory is synced.
  ::fsync(dirfd);
  return final_name;
}

void DiskTier::State::writer_loop() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [&] { return stop || !queue.empty(); });
    if (queue.empty()) break;  // stop and nothing left
    Job job = std::move(queue.front());
    queue.pop_front();
    writing = true;
    const uint64_t bytes = job.header.file_bytes();
    const bool fits = counters.admitting && bytes <= config.capacity_bytes;
    if (fits) {
      // Room first: the least recently used extents go.
      counters.used_bytes += bytes;
      enforce_capacity();
      counters.used_bytes -= bytes;
    }
    lock.unlock();
    Result<std::string> name = fits ? write_extent(job) : invalid_argument("skipped");
    if (fits && !name.is_ok()) note_write_error(name.status().message());
    lock.lock();
    for (const TierBlockMeta& m : job.header.blocks) pending_keys.erase(m.key);
    if (name.is_ok()) {
      counters.blocks_stored += job.header.blocks.size();
      index_extent(job.id, std::move(*name), std::move(job.header));
      enforce_capacity();
    }
    writing = false;
    done_cv.notify_all();
  }
}

}  // namespace kvs
