// Utf8StreamDecoder: streamed text never holds half a UTF-8 character.
#include "model/utf8_stream_decoder.h"

#include <gtest/gtest.h>

#include "model/tokenizer_test_util.h"

namespace kvs {
namespace {

using namespace test;

TEST(Utf8StreamDecoderTest, NeverEmitsHalfACharacter) {
  Tokenizer t = make(byte_vocab({bl("\xF0\x9F"), bl("\x98\x80")}));
  // 😀 = F0 9F 98 80, as single bytes and as two 2-byte tokens.
  const int32_t first = id_of(t, bl("\xF0\x9F")), second = id_of(t, bl("\x98\x80"));
  Utf8StreamDecoder d(t);
  EXPECT_EQ(d.push('a'), "a");
  EXPECT_EQ(d.push(first), "");
  EXPECT_EQ(d.push(second), "😀");
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0x98), "");
  EXPECT_EQ(d.push(0x80), "😀");
  EXPECT_EQ(d.push('b'), "b");
  EXPECT_EQ(d.flush(), "");
  // Every push result is well-formed on its own: a ZWJ family emoji fed byte by byte.
  const std::string family = "👨‍👩‍👧 é!";
  std::string all;
  for (char ch : family) {
    const std::string out = d.push(static_cast<uint8_t>(ch));
    std::string check;
    EXPECT_EQ(unicode::append_sanitized_utf8(check, out), 0u);
    EXPECT_EQ(check, out);
    all += out;
  }
  all += d.flush();
  EXPECT_EQ(all, family);
}

TEST(Utf8StreamDecoderTest, IllFormedBytesBecomeReplacementCharacters) {
  Tokenizer t = make(chat_vocab());
  Utf8StreamDecoder d(t);
  EXPECT_EQ(d.push(0xFF), "\uFFFD");  // can never complete: replaced at once
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push('x'), "\uFFFDx");  // the pending lead byte was cut off by 'x'
  EXPECT_EQ(d.push(0xE2), "");
  EXPECT_EQ(d.push(0x82), "");
  EXPECT_EQ(d.flush(), "\uFFFD");  // a truncated character at the end
  EXPECT_EQ(d.flush(), "");
  Utf8StreamDecoder skipping(t, /*skip_special=*/true);
  EXPECT_EQ(skipping.push(257), "");
  EXPECT_EQ(skipping.push('h'), "h");
  EXPECT_EQ(d.push(257), "<|im_start|>");
}

}  // namespace
}  // namespace kvs
