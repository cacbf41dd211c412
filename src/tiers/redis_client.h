// RedisClient: the little of Redis the remote KV tier needs, over hiredis (Debian's
// libhiredis-dev), with a timeout on connecting and on every command. One client is one
// connection and is used by one thread at a time. After any error the connection is dropped;
// the next call reconnects (the caller's circuit breaker decides when to try again).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

struct redisContext;

namespace kvs {

// redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (the port defaults to 6379, the database to 0).
// With a password the client sends AUTH (Redis 6 ACL user, or the requirepass password alone)
// on every connection. The password is never printed: url() masks it.
struct RedisEndpoint {
  std::string host;
  uint16_t port = 6379;
  uint32_t db = 0;
  std::string user;                       // empty: the default user
  std::string password;                   // empty: no AUTH
  [[nodiscard]] std::string url() const;  // the password masked as ***
};
[[nodiscard]] Result<RedisEndpoint> parse_redis_url(const std::string& url);

// One key's answer in a pipelined GET.
struct RedisValue {
  enum class Kind : uint8_t { kMissing, kValue, kError };
  Kind kind = Kind::kMissing;
  std::vector<uint8_t> bytes;  // kValue
  std::string error;           // kError: the server's reply (e.g. WRONGTYPE ...)
};

class RedisClient {
 public:
  RedisClient(RedisEndpoint endpoint, uint32_t timeout_ms);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  [[nodiscard]] const RedisEndpoint& endpoint() const { return endpoint_; }

  // The answers for `keys`, in one pipelined round trip. A per-key error reply (a key of another
  // type: WRONGTYPE) is that key's answer, never the pipeline's failure. timeout_ms bounds this
  // round trip (0: the client's timeout).
  Result<std::vector<RedisValue>> get_many(std::span<const std::string> keys,
                                           uint32_t timeout_ms = 0);
  // SET key value [EX ttl_seconds] for each pair, in one pipelined round trip (ttl 0: none).
  Status set_many(std::span<const std::pair<std::string, std::vector<uint8_t>>> items,
                  uint32_t ttl_seconds);
  Status del(const std::string& key);
  Status ping();
  // Connections made so far: a change means the server may have restarted (and lost its data).
  [[nodiscard]] uint64_t connects() const { return connects_; }

 private:
  Status connect();
  void disconnect();
  // Drops the connection and returns an unavailable error naming the endpoint and the cause.
  Status fail(const std::string& what);

  RedisEndpoint endpoint_;
  uint32_t timeout_ms_;
  redisContext* ctx_ = nullptr;
  uint64_t connects_ = 0;
};

}  // namespace kvs
