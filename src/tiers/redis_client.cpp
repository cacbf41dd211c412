#include "tiers/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <charconv>
#include <cstring>
#include <memory>
#include <vector>

#include "core/check.h"

namespace kvs {

namespace {

timeval to_timeval(uint32_t ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

template <typename T>
bool parse_uint(std::string_view s, T* out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

std::string RedisEndpoint::url() const {
  std::string creds;
  if (!password.empty()) creds = user + ":***@";
  return "redis://" + creds + host + ":" + std::to_string(port) + "/" + std::to_string(db);
}

Result<RedisEndpoint> parse_redis_url(const std::string& url) {
  constexpr std::string_view kScheme = "redis://";
  RedisEndpoint e;
  // Errors never repeat the URL itself: it may hold a password.
  const auto bad = [&](const std::string& why) {
    return invalid_argument("--kv-remote " + (e.password.empty() ? url : std::string("URL")) +
                            ": " + why + " (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])");
  };
  if (url.rfind(kScheme, 0) != 0) return bad("not a redis:// URL");
  std::string_view rest = std::string_view(url).substr(kScheme.size());
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view creds = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = creds.find(':');
    if (colon == std::string_view::npos) {
      e.password = std::string(creds);  // redis://PASSWORD@HOST, as redis-cli -u reads it
    } else {
      e.user = std::string(creds.substr(0, colon));
      e.password = std::string(creds.substr(colon + 1));
    }
    if (e.password.empty()) return bad("an empty password");
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!parse_uint(db, &e.db) || e.db > 1023)) return bad("bad database number");
    rest = rest.substr(0, slash);
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    uint32_t port = 0;
    if (!parse_uint(rest.substr(colon + 1), &port) || port == 0 || port > 65535)
      return bad("bad port");
    e.port = static_cast<uint16_t>(port);
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad("no host");
  e.host = std::string(rest);
  return e;
}

RedisClient::RedisClient(RedisEndpoint endpoint, uint32_t timeout_ms)
    : endpoint_(std::move(endpoint)), timeout_ms_(std::max<uint32_t>(1, timeout_ms)) {}

RedisClient::~RedisClient() { disconnect(); }

void RedisClient::disconnect() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

Status RedisClient::fail(const std::string& what) {
  std::string msg = endpoint_.url() + ": " + what;
  if (ctx_ != nullptr && ctx_->err != 0) msg += std::string(": ") + ctx_->errstr;
  disconnect();
  return unavailable(msg);
}

Status RedisClient::connect() {
  if (ctx_ != nullptr) return Status::ok();
  ctx_ = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, to_timeval(timeout_ms_));
  if (ctx_ == nullptr) return unavailable(endpoint_.url() + ": cannot allocate a connection");
  if (ctx_->err != 0) return fail("cannot connect");
  if (redisSetTimeout(ctx_, to_timeval(timeout_ms_)) != REDIS_OK) return fail("cannot set timeout");
  ++connects_;
  if (!endpoint_.password.empty()) {
    std::vector<const char*> argv = {"AUTH"};
    std::vector<size_t> lens = {4};
    if (!endpoint_.user.empty()) {
      argv.push_back(endpoint_.user.data());
      lens.push_back(endpoint_.user.size());
    }
    argv.push_back(endpoint_.password.data());
    lens.push_back(endpoint_.password.size());
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!r) return fail("AUTH: no reply");
    if (r->type == REDIS_REPLY_ERROR) return fail(std::string("AUTH refused: ") + r->str);
  }
  if (endpoint_.db != 0) {
    const std::string db = std::to_string(endpoint_.db);
    Reply r(static_cast<redisReply*>(redisCommand(ctx_, "SELECT %s", db.c_str())));
    if (!r || r->type == REDIS_REPLY_ERROR) return fail("SELECT " + db + " failed");
  }
  return Status::ok();
}

Result<std::vector<RedisValue>> RedisClient::get_many(std::span<const std::string> keys,
                                                      uint32_t timeout_ms) {
  KVS_RETURN_IF_ERROR(connect());
  if (timeout_ms != 0 && redisSetTimeout(ctx_, to_timeval(timeout_ms)) != REDIS_OK)
    return fail("cannot set timeout");
  for (const std::string& k : keys) {
    const char* argv[2] = {"GET", k.data()};
    const size_t lens[2] = {3, k.size()};
    if (redisAppendCommandArgv(ctx_, 2, argv, lens) != REDIS_OK) return fail("GET");
  }
  std::vector<RedisValue> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr)
      return fail("GET of " + std::to_string(keys.size()) + " keys (no reply in time)");
    Reply r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_STRING) {
      out[i].kind = RedisValue::Kind::kValue;
      out[i].bytes.assign(reinterpret_cast<const uint8_t*>(r->str),
                          reinterpret_cast<const uint8_t*>(r->str) + r->len);
    } else if (r->type == REDIS_REPLY_ERROR) {
      // This key's answer only (WRONGTYPE: someone stored another type under it); the rest of
      // the pipeline is read on.
      out[i].kind = RedisValue::Kind::kError;
      out[i].error.assign(r->str, r->len);
    }
  }
  if (timeout_ms != 0 && redisSetTimeout(ctx_, to_timeval(timeout_ms_)) != REDIS_OK)
    return fail("cannot set timeout");
  return out;
}

Status RedisClient::set_many(std::span<const std::pair<std::string, std::vector<uint8_t>>> items,
                             uint32_t ttl_seconds) {
  KVS_RETURN_IF_ERROR(connect());
  const std::string ttl = std::to_string(ttl_seconds);
  for (const auto& [key, value] : items) {
    const char* argv[5] = {"SET", key.data(), reinterpret_cast<const char*>(value.data()), "EX",
                           ttl.c_str()};
    const size_t lens[5] = {3, key.size(), value.size(), 2, ttl.size()};
    if (redisAppendCommandArgv(ctx_, ttl_seconds > 0 ? 5 : 3, argv, lens) != REDIS_OK)
      return fail("SET");
  }
  Status first_error = Status::ok();
  for (size_t i = 0; i < items.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) return fail("SET (no reply)");
    Reply r(static_cast<redisReply*>(raw));
    // An error reply fails the item, not the connection (the pipeline is drained either way).
    // Out of memory (maxmemory with noeviction) is Redis working as configured; any other
    // (READONLY after a failover, MISCONF, NOAUTH) means this instance cannot take writes.
    if (r->type == REDIS_REPLY_ERROR && first_error.is_ok()) {
      const std::string msg = endpoint_.url() + ": SET: " + r->str;
      first_error = std::string_view(r->str, r->len).rfind("OOM", 0) == 0 ? resource_exhausted(msg)
                                                                          : unavailable(msg);
    }
  }
  return first_error;
}

Status RedisClient::del(const std::string& key) {
  KVS_RETURN_IF_ERROR(connect());
  const char* argv[2] = {"DEL", key.data()};
  const size_t lens[2] = {3, key.size()};
  Reply r(static_cast<redisReply*>(redisCommandArgv(ctx_, 2, argv, lens)));
  if (!r) return fail("DEL");
  return Status::ok();
}

Status RedisClient::ping() {
  KVS_RETURN_IF_ERROR(connect());
  Reply r(static_cast<redisReply*>(redisCommand(ctx_, "PING")));
  if (!r || r->type == REDIS_REPLY_ERROR) return fail("PING");
  return Status::ok();
}

}  // namespace kvs
