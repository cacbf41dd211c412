// A real redis-server (Debian's, installed by scripts/install-deps) started as a child process on
// a free loopback port, for the C++ tests of the Redis tier. Under CI=true a missing redis-server
// fails the test (REQUIRE_REDIS); elsewhere it skips with the command that installs it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "support/prerequisites.h"
#include "tiers/redis_client.h"

extern char** environ;

namespace kvs::test {

inline uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A redis-server child process for one test; `extra` are more command-line options (e.g.
// {"--requirepass", "pw"}).
class RedisProcess {
 public:
  explicit RedisProcess(std::vector<std::string> extra = {}) : port_(free_loopback_port()) {
    std::vector<std::string> args = {
        "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
        "--save",       "",       "--appendonly",        "no",     "--dir",
        "/tmp"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pid_, "redis-server", &fa, nullptr, argv.data(), environ) != 0) pid_ = 0;
    posix_spawn_file_actions_destroy(&fa);
    if (pid_ == 0) return;
    for (int i = 0; i < 250 && !up_; ++i) {
      // Any answer means the server is listening (a password-protected one answers NOAUTH).
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port_);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      up_ = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(fd);
      if (!up_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~RedisProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;
  [[nodiscard]] bool up() const { return up_; }
  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] RedisEndpoint endpoint() const { return {.host = "127.0.0.1", .port = port_}; }

 private:
  uint16_t port_;
  pid_t pid_ = 0;
  bool up_ = false;
};

}  // namespace kvs::test

// Skips (fails under CI=true) when redis-server could not be started.
#define REQUIRE_REDIS(r) \
  if (!(r).up())         \
  SKIP_OR_FAIL_IN_CI() << "redis-server did not start (scripts/install-deps installs it)"
