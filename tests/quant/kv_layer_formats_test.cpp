// KvLayerFormats: the flags' lists parse into layer -> format maps (items, ranges), refuse what
// is malformed with the flag's name, and check_kv_layer_formats refuses layers the model lacks,
// keys grouped unlike the pool's and per-channel values.
#include "quant/kv_layer_formats.h"

#include <gtest/gtest.h>

#include <string>

namespace kvs {
namespace {

const char* kFlag = "--kv-cache-dtype-k-layers";

TEST(KvLayerFormatsTest, ParsesItemsAndRanges) {
  auto m = parse_kv_layer_formats("18=int4_chan,20=int4_chan,2-4=int3_chan", kFlag);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->size(), 5u);
  EXPECT_EQ(m->at(18), KvDtype::kInt4Chan);
  EXPECT_EQ(m->at(3), KvDtype::kInt3Chan);
  EXPECT_FALSE(m->contains(5));
  EXPECT_TRUE(parse_kv_layer_formats("", kFlag)->empty());
  EXPECT_EQ(parse_kv_layer_formats("0=fp16", kFlag)->at(0), KvDtype::kF16);  // an alias
  const KvLayerFormats f{.k = *m, .v = {{1, KvDtype::kInt4Had}}};
  EXPECT_EQ(f.k_at(18, KvDtype::kInt2Chan), KvDtype::kInt4Chan);
  EXPECT_EQ(f.k_at(19, KvDtype::kInt2Chan), KvDtype::kInt2Chan);
  EXPECT_EQ(f.v_at(1, KvDtype::kInt2Had), KvDtype::kInt4Had);
  EXPECT_EQ(kv_layer_formats_text(f, 'k'),
            "2=int3_chan,3=int3_chan,4=int3_chan,18=int4_chan,20=int4_chan");
  EXPECT_EQ(kv_layer_formats_text(f, 'v'), "1=int4_had");
  EXPECT_EQ(kv_layer_formats_suffix({.v = {{1, KvDtype::kInt4Had}}}), " + layers V 1=int4_had");
  EXPECT_EQ(kv_layer_formats_suffix({}), "");
}

TEST(KvLayerFormatsTest, MalformedListsNameTheFlag) {
  for (const char* bad :
       {"18", "18=", "=int4", "x=int4", "18=int9", "1,2=int4", "18=int4,", "4-2=int4", "1-=int4",
        "-1=int4", "18=int4,18=int8", "2-4=int4,3=int8", "99999999999=int4", " 1=int4"}) {
    auto m = parse_kv_layer_formats(bad, kFlag);
    ASSERT_FALSE(m.is_ok()) << bad;
    EXPECT_EQ(m.status().message().rfind(kFlag, 0), 0u) << bad << ": " << m.status().message();
  }
  EXPECT_NE(parse_kv_layer_formats("18=int4,18=int8", kFlag).status().message().find("twice"),
            std::string::npos);
}

TEST(KvLayerFormatsTest, ChecksLayersGroupingAndRoles) {
  const KvLayerFormats ok{.k = {{18, KvDtype::kInt4Chan}}, .v = {{1, KvDtype::kInt4Had}}};
  EXPECT_TRUE(check_kv_layer_formats(ok, 30, KvDtype::kInt2Chan).is_ok());
  EXPECT_TRUE(check_kv_layer_formats({.k = {{0, KvDtype::kInt8}}}, 30, KvDtype::kF16).is_ok());
  auto message = [](const KvLayerFormats& f, KvDtype pool_k) {
    return check_kv_layer_formats(f, 30, pool_k).message();
  };
  EXPECT_NE(message({.k = {{30, KvDtype::kInt4Chan}}}, KvDtype::kInt2Chan)
                .find("--kv-cache-dtype-k-layers: layer 30: the model has 30 layers (0 to 29)"),
            std::string::npos);
  EXPECT_NE(message({.v = {{31, KvDtype::kInt4Had}}}, KvDtype::kInt2Chan)
                .find("--kv-cache-dtype-v-layers: layer 31"),
            std::string::npos);
  // Keys grouped per token against per channel, and over 64 tokens against 16.
  EXPECT_NE(message({.k = {{1, KvDtype::kInt4Had}}}, KvDtype::kInt2Chan).find("per token"),
            std::string::npos);
  EXPECT_NE(message({.k = {{1, KvDtype::kInt4Chan64}}}, KvDtype::kInt2Chan).find("over 64 tokens"),
            std::string::npos);
  EXPECT_NE(message({.k = {{1, KvDtype::kInt4Chan}}}, KvDtype::kF16).find("grouped like"),
            std::string::npos);
  EXPECT_NE(message({.v = {{1, KvDtype::kInt4Chan}}}, KvDtype::kF16).find("K format only"),
            std::string::npos);
}

}  // namespace
}  // namespace kvs
