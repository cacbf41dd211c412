// BlockTable: blocks to add for n more slots, slots and the slot mapping across block boundaries.
#include "kvcache/block_table.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvs {
namespace {

TEST(BlockTableTest, BlocksToAddAndPartialTokens) {
  BlockTable t(4);
  EXPECT_EQ(t.blocks_to_add(0), 0u);
  EXPECT_EQ(t.blocks_to_add(1), 1u);
  EXPECT_EQ(t.blocks_to_add(4), 1u);
  EXPECT_EQ(t.blocks_to_add(5), 2u);
  t.push_block(BlockId{7});
  t.add_tokens(3);
  EXPECT_EQ(t.partial_tokens(), 3u);
  EXPECT_EQ(t.blocks_to_add(1), 0u);  // fits in the last block
  EXPECT_EQ(t.blocks_to_add(2), 1u);
  t.push_block(BlockId{2});
  t.add_tokens(1);
  EXPECT_EQ(t.partial_tokens(), 0u);
  EXPECT_EQ(t.num_tokens(), 4u);
  EXPECT_EQ(t.num_blocks(), 2u);
}

TEST(BlockTableTest, SlotsFollowTheBlocks) {
  BlockTable t(4);
  t.push_block(BlockId{5});
  t.push_block(BlockId{1});
  t.push_block(BlockId{9});
  t.add_tokens(10);
  EXPECT_EQ(t.slot(0), 20u);  // block 5, offset 0
  EXPECT_EQ(t.slot(3), 23u);
  EXPECT_EQ(t.slot(4), 4u);   // block 1
  EXPECT_EQ(t.slot(9), 37u);  // block 9, offset 1
  std::vector<int64_t> slots;
  t.append_slot_mapping(2, 7, &slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{22, 23, 4, 5, 6, 7, 36}));
  t.set_block(1, BlockId{0});  // copy-on-write replaced block 1
  slots.clear();
  t.append_slot_mapping(4, 2, &slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{0, 1}));
}

}  // namespace
}  // namespace kvs
