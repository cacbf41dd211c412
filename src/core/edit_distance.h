// Levenshtein distance between two byte strings (insertions, deletions and substitutions cost 1):
// how the CLI suggests the closest spelling of an unknown name (a catalog model, a config key).
#pragma once

#include <cstddef>
#include <string_view>

namespace kvs {

[[nodiscard]] size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace kvs
