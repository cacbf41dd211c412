// The version of kvserve and the git commit it was built from, for `kvserve --version` and
// `kvserve version`. Defined in a generated file (cmake/kvserve_version.cmake) so that a new
// commit recompiles only that file.
#pragma once

#include <string>

namespace kvs::cli {

extern const char* const kVersion;    // the project version, "0.1.0"
extern const char* const kGitCommit;  // `git rev-parse --short HEAD`, or "unknown"

// "kvserve 0.1.0 (commit 4d9999c)"
[[nodiscard]] std::string version_line();

}  // namespace kvs::cli
