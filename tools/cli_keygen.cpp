// kvserve keygen: makes the secrets a deployment needs, as files only this user can read.
//   kvserve keygen --tier-secret FILE         the server secret (--kv-tier-secret-file): 32
//                                             random bytes, hex; give every replica that should
//                                             share KV the same file
//   kvserve keygen --curve-secret FILE        a CURVE key pair for KV events: the secret key
//                                             goes to FILE (--kv-events-curve-secret-file), the
//                                             public key is printed (subscribers connect with
//                                             it; run it again for each subscriber's own pair,
//                                             whose public key goes to --kv-events-curve-clients)
// An existing file is never overwritten.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/server_secret.h"
#include "server/kv_event_publisher.h"
#include "tools/cli_commands.h"

namespace kvs::cli {
namespace {

void write_private(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail(path + ": " + std::strerror(errno) + " (an existing file is never replaced)");
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) fail(path + ": cannot write it");
}

}  // namespace

void add_keygen_command(CLI::App& app) {
  auto tier = std::make_shared<std::string>();
  auto curve = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "keygen", "make the server secret or a CURVE key pair for KV events (docs/security.md)");
  cmd->add_option("--tier-secret", *tier, "write a new server secret to FILE (mode 600)");
  cmd->add_option("--curve-secret", *curve,
                  "write a new CURVE secret key to FILE (mode 600) and print its public key");
  cmd->callback([tier, curve] {
    if (tier->empty() == curve->empty())
      fail("give one of --tier-secret FILE, --curve-secret FILE");
    if (!tier->empty()) {
      write_private(*tier, random_hex(32) + "\n");
      std::printf("wrote the server secret to %s\n", tier->c_str());
      return;
    }
    auto pair = curve_keypair();
    if (!pair.is_ok()) fail(pair.status().message());
    write_private(*curve, pair->second + "\n");
    std::printf("%s\n", pair->first.c_str());
  });
}

}  // namespace kvs::cli
