// edit_distance against hand counts: the CLI's "did you mean" for config keys and catalog names.
#include "core/edit_distance.h"

#include <gtest/gtest.h>

namespace kvs {
namespace {

TEST(EditDistance, HandCounts) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "ab"), 2u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("max-model-len", "max-modl-len"), 1u);
  EXPECT_EQ(edit_distance("max_model_len", "max-model-len"), 2u);
  EXPECT_EQ(edit_distance("llama-3.1-8b", "llama-3.1-8b"), 0u);
  EXPECT_EQ(edit_distance("ab", "ba"), 2u);  // no transpositions
  EXPECT_EQ(edit_distance("flaw", "lawn"), edit_distance("lawn", "flaw"));
}

}  // namespace
}  // namespace kvs
