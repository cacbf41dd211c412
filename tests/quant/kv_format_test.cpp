// The format table's count and order: all_kv_dtypes and kv_dtype_from_code are how the rest of
// kvserve enumerates formats and reads a stored format code (no "last format" elsewhere).
#include "quant/kv_format.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace kvs {
namespace {

TEST(KvFormatTable, EveryFormatOnceInEnumOrder) {
  const auto all = all_kv_dtypes();
  ASSERT_EQ(all.size(), kNumKvDtypes);
  std::set<std::string> names;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(all[i]), i);
    EXPECT_EQ(kv_dtype_info(all[i]).dtype, all[i]);
    EXPECT_TRUE(names.insert(kv_dtype_name(all[i])).second) << kv_dtype_name(all[i]);
    EXPECT_EQ(parse_kv_dtype(kv_dtype_name(all[i])).value(), all[i]);
  }
  EXPECT_EQ(all.front(), KvDtype::kF32);
  EXPECT_EQ(all.back(), KvDtype::kQ8_0Had);
}

TEST(KvFormatTable, CodesBeyondTheTableAreNoFormat) {
  for (const KvDtype d : all_kv_dtypes())
    EXPECT_EQ(kv_dtype_from_code(static_cast<uint64_t>(d)), d);
  EXPECT_FALSE(kv_dtype_from_code(kNumKvDtypes).has_value());
  EXPECT_FALSE(kv_dtype_from_code(255).has_value());
  EXPECT_FALSE(kv_dtype_from_code(uint64_t{1} << 40).has_value());
}

}  // namespace
}  // namespace kvs
