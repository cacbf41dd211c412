// Tokenizer unit tests on tiny hand-made vocabularies, plus the golden test against ids from HF
// `tokenizers` (tools/gen_tokenizer_golden.py) on the real SmolLM2 vocabulary.
#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf_file.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"
#include "model/tokenizer_test_util.h"
#include "model/unicode.h"
#include "support/prerequisites.h"

namespace kvs {
namespace {

using namespace test;

Ids bytes_of(std::string_view s) {
  Ids ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Unicode helpers.

TEST(TokenizerUnicodeTest, Classes) {
  EXPECT_TRUE(unicode::is_letter('a'));
  EXPECT_TRUE(unicode::is_letter(U'é'));
  EXPECT_TRUE(unicode::is_letter(U'中'));
  EXPECT_TRUE(unicode::is_letter(U'ß'));
  EXPECT_FALSE(unicode::is_letter('1'));
  EXPECT_FALSE(unicode::is_letter(0x301));  // combining acute: Mn, not L
  EXPECT_FALSE(unicode::is_letter(U'😀'));
  EXPECT_TRUE(unicode::is_number('7'));
  EXPECT_TRUE(unicode::is_number(U'٣'));  // Arabic-Indic three (Nd)
  EXPECT_TRUE(unicode::is_number(U'²'));  // No
  EXPECT_TRUE(unicode::is_number(U'Ⅻ'));  // Nl
  EXPECT_FALSE(unicode::is_number('x'));
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', char32_t(0x85), char32_t(0xA0),
                     char32_t(0x3000), char32_t(0x2028), char32_t(0x2029), char32_t(0x202F)}) {
    EXPECT_TRUE(unicode::is_whitespace(c)) << uint32_t(c);
  }
  // Python's isspace() says yes to U+001C..U+001F; White_Space (and \s of the regexes) does not.
  EXPECT_FALSE(unicode::is_whitespace(0x1C));
  EXPECT_FALSE(unicode::is_whitespace(0x200B));  // zero width space is Cf
  EXPECT_FALSE(unicode::is_whitespace('a'));
}

TEST(TokenizerUnicodeTest, DecodeMaximalSubparts) {
  using unicode::Utf8Status;
  const auto d = [](std::string_view s) { return unicode::decode_utf8(s, 0); };
  EXPECT_EQ(d("\xF0\x9F\x98\x80").cp, U'😀');
  EXPECT_EQ(d("\xF0\x9F\x98\x80").len, 4u);
  EXPECT_EQ(d("\xF0\x9F\x98").status, Utf8Status::kTruncated);
  EXPECT_EQ(d("\xF0\x9F\x98").len, 3u);
  EXPECT_EQ(d("\xF0\x9F"
              "A")
                .status,
            Utf8Status::kInvalid);
  EXPECT_EQ(d("\xF0\x9F"
              "A")
                .len,
            2u);
  EXPECT_EQ(d("\x80").status, Utf8Status::kInvalid);
  EXPECT_EQ(d("\xC0\xAF").len, 1u);          // overlong lead byte
  EXPECT_EQ(d("\xED\xA0\x80").len, 1u);      // surrogate
  EXPECT_EQ(d("\xF4\x90\x80\x80").len, 1u);  // above U+10FFFF
  std::string out;
  EXPECT_EQ(unicode::append_sanitized_utf8(out,
                                           "a\xFF"
                                           "b\xE2\x82"),
            0u);
  EXPECT_EQ(out,
            "a\uFFFD"
            "b\uFFFD");
  out.clear();
  EXPECT_EQ(unicode::append_sanitized_utf8(out, "a\xE2\x82", /*keep_truncated_tail=*/true), 2u);
  EXPECT_EQ(out, "a");
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers (checked against Python's `regex` module on random strings during development).

Pieces split(PreTokenizer rule, std::string_view text) { return pre_tokenize(rule, text); }

TEST(TokenizerPreTest, Gpt2) {
  EXPECT_EQ(split(PreTokenizer::kGpt2, "Hello world's end, it'S 2024!"),
            (Pieces{"Hello", " world", "'s", " end", ",", " it", "'", "S", " 2024", "!"}));
  // \s+(?!\S): a run of spaces leaves its last space to the next word; at the end it stays whole.
  EXPECT_EQ(split(PreTokenizer::kGpt2, "a   b\t\n c  "),
            (Pieces{"a", "  ", " b", "\t\n", " c", "  "}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "x \tb"), (Pieces{"x", " ", "\t", "b"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "we'll they're I've"),
            (Pieces{"we", "'ll", " they", "'re", " I", "'ve"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "café 中文 ?!"), (Pieces{"café", " 中文", " ?!"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, ""), Pieces{});
}

TEST(TokenizerPreTest, SmolLmSplitsEveryDigit) {
  EXPECT_EQ(split(PreTokenizer::kSmolLm, "abc 123x"), (Pieces{"abc", " ", "1", "2", "3", "x"}));
  // The gpt2 rule runs within the text between digits: its lookahead stops at the digit.
  EXPECT_EQ(split(PreTokenizer::kSmolLm, "a  9 b"), (Pieces{"a", "  ", "9", " b"}));
  EXPECT_EQ(split(PreTokenizer::kSmolLm, "x²٣"), (Pieces{"x", "²", "٣"}));
}

TEST(TokenizerPreTest, Llama3) {
  EXPECT_EQ(
      split(PreTokenizer::kLlama3, "Hello WORLD'S 1234567 (x)\n\n  y"),
      (Pieces{"Hello", " WORLD", "'S", " ", "123", "456", "7", " (", "x", ")\n\n", " ", " y"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "a \n\n b"), (Pieces{"a", " \n\n", " b"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "\tfoo ...\r\nbar"), (Pieces{"\tfoo", " ...\r\n", "bar"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "it'ſt"),
            (Pieces{"it", "'ſ", "t"}));  // (?i): ſ folds to s
}

TEST(TokenizerPreTest, Qwen2) {
  EXPECT_EQ(split(PreTokenizer::kQwen2, "x 123 WE'LL"),
            (Pieces{"x", " ", "1", "2", "3", " WE", "'LL"}));
  EXPECT_EQ(split(PreTokenizer::kQwen2, "it'ſt"), (Pieces{"it", "'ſ", "t"}));
}

TEST(TokenizerPreTest, IllFormedUtf8StaysByteForByte) {
  const std::string text = "ab\xFF\xFE cd\xE2\x82";
  std::string joined;
  for (auto p : split(PreTokenizer::kGpt2, text)) joined += p;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(split(PreTokenizer::kGpt2, text), (Pieces{"ab", "\xFF\xFE", " cd", "\xE2\x82"}));
}

TEST(TokenizerPreTest, Names) {
  EXPECT_EQ(parse_pre_tokenizer("gpt2").value(), PreTokenizer::kGpt2);
  EXPECT_EQ(parse_pre_tokenizer("smollm").value(), PreTokenizer::kSmolLm);
  EXPECT_EQ(parse_pre_tokenizer("llama-bpe").value(), PreTokenizer::kLlama3);
  EXPECT_EQ(parse_pre_tokenizer("llama3").value(), PreTokenizer::kLlama3);
  EXPECT_EQ(parse_pre_tokenizer("qwen2").value(), PreTokenizer::kQwen2);
  EXPECT_EQ(parse_pre_tokenizer("deepseek-coder").status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// BPE.

TEST(TokenizerTest, MergesApplyByRank) {
  TokenizerConfig c = byte_vocab({"ab", "bc"});
  c.merges = {"b c", "a b"};  // "b c" first: abc -> a bc
  Tokenizer t1 = make(c);
  EXPECT_EQ(t1.encode("abc", false, false), (Ids{'a', id_of(t1, "bc")}));
  c.merges = {"a b", "b c"};  // "a b" first: abc -> ab c
  Tokenizer t2 = make(c);
  EXPECT_EQ(t2.encode("abc", false, false), (Ids{id_of(t2, "ab"), 'c'}));
}

TEST(TokenizerTest, MergesChainAndPreferLeftmost) {
  TokenizerConfig c = byte_vocab({"aa", "aaaa", bl(" a"), bl(" aa")});
  c.merges = {"a a", "aa aa", bl(" ") + " a", bl(" a") + " a"};
  Tokenizer t = make(c);
  const int32_t aa = id_of(t, "aa"), aaaa = id_of(t, "aaaa");
  EXPECT_EQ(t.encode("aaa", false, false), (Ids{aa, 'a'}));  // leftmost pair first
  EXPECT_EQ(t.encode("aaaaa", false, false), (Ids{aaaa, 'a'}));
  // " aa": "a a" (rank 0) beats the leftmost "Ġ a" (rank 2), and "Ġ aa" is no merge.
  EXPECT_EQ(t.encode(" aa", false, false), (Ids{' ', aa}));
  EXPECT_EQ(t.encode(" a", false, false), (Ids{id_of(t, bl(" a"))}));
  // A long piece (beyond the inline symbol buffer) merges the same way.
  const std::string long_piece(201, 'a');
  Ids expect(50, aaaa);
  expect.push_back('a');
  EXPECT_EQ(t.encode(long_piece, false, false), expect);
}

TEST(TokenizerTest, FallsBackToByteTokens) {
  Tokenizer t = make(byte_vocab({"he"}));
  EXPECT_EQ(t.encode("xyz", false, false), bytes_of("xyz"));
  // Non-ASCII text without merges is one token per UTF-8 byte; so is ill-formed input.
  EXPECT_EQ(t.encode("é😀", false, false), bytes_of("é😀"));
  EXPECT_EQ(t.encode("a\xFF\xC3", false, false), bytes_of("a\xFF\xC3"));
  EXPECT_EQ(t.encode("", false, false), Ids{});
}

TEST(TokenizerTest, MissingByteTokensBecomeUnkOrAreDropped) {
  TokenizerConfig c;
  c.tokens = {"<unk>", "a", "b"};
  Tokenizer no_unk = make(c);
  EXPECT_EQ(no_unk.encode("axb", false, false), (Ids{1, 2}));
  c.unk_id = 0;
  Tokenizer with_unk = make(c);
  EXPECT_EQ(with_unk.encode("axb", false, false), (Ids{1, 0, 2}));
  EXPECT_EQ(with_unk.encode("x", false, false), (Ids{0}));
}

TEST(TokenizerTest, SpecialTokensOnlyWithParseSpecial) {
  Tokenizer t = make(chat_vocab());
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const int32_t user = id_of(t, "user"), hi = id_of(t, "hi");
  EXPECT_EQ(t.encode(text, false, true), (Ids{257, user, '\n', hi, 258}));
  // Without parse_special the markers are plain text (here: bytes plus the merges).
  const Ids plain = t.encode(text, false, false);
  Ids expect = bytes_of("<|im_start|>");
  expect.insert(expect.end(), {user, '\n', hi});
  for (int32_t id : bytes_of("<|im_end|>")) expect.push_back(id);
  EXPECT_EQ(plain, expect);
  EXPECT_EQ(t.decode(plain), text);
  EXPECT_EQ(t.decode(t.encode(text, false, true)), text);
  // Longest match first: "<|im_end|>" wins over its prefix "<|im"; "<|im" alone matches too.
  EXPECT_EQ(t.encode("<|im<|im_end|>", false, true), (Ids{259, 258}));
  // A user-defined token is matched whatever parse_special says.
  EXPECT_EQ(t.encode("a<tool>b", false, false), (Ids{'a', 260, 'b'}));
  EXPECT_EQ(t.encode("a<tool>b", false, true), (Ids{'a', 260, 'b'}));
}

TEST(TokenizerTest, AddSpecialAddsBosAndEos) {
  TokenizerConfig c = chat_vocab();
  c.add_bos = true;
  c.add_eos = true;
  Tokenizer t = make(c);
  EXPECT_EQ(t.encode("hi", true, false), (Ids{257, id_of(t, "hi"), 258}));
  EXPECT_EQ(t.encode("hi", false, false), (Ids{id_of(t, "hi")}));
  EXPECT_EQ(t.encode("", true, false), (Ids{257, 258}));
}

TEST(TokenizerTest, DecodeAndTokenBytes) {
  Tokenizer t = make(chat_vocab());
  EXPECT_EQ(t.token_text(' '), "Ġ");
  EXPECT_EQ(t.token_bytes(' '), " ");
  EXPECT_EQ(t.token_bytes(257), "<|im_start|>");
  EXPECT_EQ(t.token_bytes(0xC3), "\xC3");  // half a character
  const Ids ids = t.encode("<|im_start|>user\nCafé 😀 ok<|im_end|>", false, true);
  EXPECT_EQ(t.decode(ids), "<|im_start|>user\nCafé 😀 ok<|im_end|>");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "user\nCafé 😀 ok");
  // A cut character decodes to U+FFFD, never to ill-formed UTF-8.
  EXPECT_EQ(t.decode(Ids{'a', 0xF0, 0x9F}), "a\uFFFD");
}

TEST(TokenizerTest, ByteTypeTokensDecodeToTheirByte) {
  TokenizerConfig c;
  c.tokens = {"a", "<0xE2>", "<0x82>", "<0xAC>", "<0xZZ>"};
  c.token_types = {1, 6, 6, 6, 6};
  Tokenizer t = make(c);
  EXPECT_EQ(t.decode(Ids{0, 1, 2, 3}), "a€");
  EXPECT_EQ(t.token_bytes(4), "<0xZZ>");  // malformed: the text itself
}

TEST(TokenizerTest, EndOfGenerationTokens) {
  TokenizerConfig c = chat_vocab();
  c.eos_id = 256;  // <|endoftext|>
  c.extra_eog_ids = {'x'};
  Tokenizer t = make(c);
  EXPECT_TRUE(t.is_eog(256));
  EXPECT_TRUE(t.is_eog(258));  // <|im_end|>: a control token named like an end of turn
  EXPECT_TRUE(t.is_eog('x'));
  EXPECT_FALSE(t.is_eog(257));
  EXPECT_FALSE(t.is_eog('a'));
  EXPECT_EQ(t.bos_id(), 257);
  EXPECT_EQ(t.eos_id(), 256);
  EXPECT_EQ(t.vocab_size(), 265);
  EXPECT_TRUE(t.is_special(257));
  EXPECT_FALSE(t.is_special(260));  // user-defined tokens are text
}

TEST(TokenizerTest, UntypedVocabTreatsConfiguredIdsAsControl) {
  TokenizerConfig c = byte_vocab({"<s>", "</s>"});
  c.bos_id = 256;
  c.eos_id = 257;
  Tokenizer t = make(c);
  EXPECT_EQ(t.encode("<s>x</s>", false, true), (Ids{256, 'x', 257}));
  EXPECT_EQ(t.encode("<s>", false, false), bytes_of("<s>"));
  EXPECT_TRUE(t.is_eog(257));
}

TEST(TokenizerTest, CreateRejectsBadConfigs) {
  const auto code = [](TokenizerConfig c) {
    return Tokenizer::create(std::move(c)).status().code();
  };
  EXPECT_EQ(code(TokenizerConfig{}), StatusCode::kInvalidArgument);  // empty vocabulary
  TokenizerConfig c = byte_vocab({"ab"});
  c.merges = {"ab"};
  EXPECT_EQ(code(c), StatusCode::kInvalidArgument);  // no space
  c.merges = {"a "};
  EXPECT_EQ(code(c), StatusCode::kInvalidArgument);  // empty right part
  c.merges = {"a c"};
  EXPECT_EQ(code(c), StatusCode::kInvalidArgument);  // "ac" is not a token
  c.merges = {"a b"};
  EXPECT_EQ(code(c), StatusCode::kOk);
  TokenizerConfig bad_id = c;
  bad_id.eos_id = 257;
  EXPECT_EQ(code(bad_id), StatusCode::kInvalidArgument);
  bad_id.eos_id = -1;
  EXPECT_EQ(code(bad_id), StatusCode::kInvalidArgument);
  TokenizerConfig bad_eog = c;
  bad_eog.extra_eog_ids = {1000};
  EXPECT_EQ(code(bad_eog), StatusCode::kInvalidArgument);
  TokenizerConfig bad_types = c;
  bad_types.token_types = {1, 1};
  EXPECT_EQ(code(bad_types), StatusCode::kInvalidArgument);
  TokenizerConfig bad_pre = c;
  bad_pre.pre = "no-such-rule";
  EXPECT_EQ(code(bad_pre), StatusCode::kInvalidArgument);
  TokenizerConfig bos_missing = c;
  bos_missing.add_bos = true;
  EXPECT_EQ(code(bos_missing), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Golden ids from HF `tokenizers` on the real SmolLM2 vocabulary.

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string test_data_dir() {
  const char* env = std::getenv("KVSERVE_TEST_DATA_DIR");
  return env != nullptr ? env : KVSERVE_TEST_DATA_DIR;
}

class TokenizerGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = default_model_path();
    if (!std::filesystem::exists(path)) return;
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().to_string();
    // The production glue from GGUF metadata, so the golden test covers it too.
    auto config = tokenizer_config_from_gguf(*file);
    ASSERT_TRUE(config.is_ok()) << config.status().to_string();
    auto t = Tokenizer::create(std::move(config).value());
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    tokenizer_ = new Tokenizer(std::move(t).value());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) SKIP_OR_FAIL_IN_CI() << "model missing; run scripts/fetch-model";
  }
  static inline Tokenizer* tokenizer_ = nullptr;
};

TEST_F(TokenizerGoldenTest, MatchesHuggingFaceTokenizers) {
  const Tokenizer& t = *tokenizer_;
  EXPECT_EQ(t.vocab_size(), 49152);
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::kSmolLm);
  EXPECT_TRUE(t.is_eog(2));  // <|im_end|>
  EXPECT_TRUE(t.is_eog(0));  // <|endoftext|>
  const std::string json_text = read_file(test_data_dir() + "/tokenizer_golden.json");
  ASSERT_FALSE(json_text.empty());
  const auto golden = nlohmann::json::parse(json_text);
  const auto& cases = golden.at("cases");
  ASSERT_GE(cases.size(), 40u);
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const bool parse_special = c.value("parse_special", true);
    const Ids expect = c.at("ids").get<Ids>();
    const Ids got = t.encode(text, /*add_special=*/false, parse_special);
    EXPECT_EQ(got, expect) << "text: " << nlohmann::json(text).dump()
                           << " parse_special=" << parse_special;
    EXPECT_EQ(t.decode(got), text) << nlohmann::json(text).dump();
  }
}

// Not a pass/fail speed test: prints the rate so that regressions show in the log. The text is
// pseudo-English with many distinct words, so the per-call piece cache does not do all the work.
TEST_F(TokenizerGoldenTest, EncodesLongTextAndRoundTrips) {
  constexpr std::string_view kSyllables[] = {"the",  "an", "in", "ter", "pro",  "con", "ing", "ly",
                                             "tion", "al", "er", "ous", "ment", "re",  "st",  "o"};
  std::string text;
  uint64_t state = 42;
  const auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  while (text.size() < 100'000) {
    std::string word;
    for (uint64_t k = 0, n = 1 + next(4); k < n; ++k) word += kSyllables[next(16)];
    if (next(10) == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
    text += word;
    const uint64_t sep = next(40);
    text += sep == 0   ? ", "
            : sep == 1 ? ".\n"
            : sep == 2 ? " " + std::to_string(next(2025)) + " "
                       : " ";
  }
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = tokenizer_->encode(text, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encoded %zu bytes into %zu tokens in %.1f ms (%.2f M tokens/s)\n", text.size(),
              ids.size(), s * 1e3, static_cast<double>(ids.size()) / s / 1e6);
  EXPECT_EQ(tokenizer_->decode(ids), text);
}

}  // namespace
}  // namespace kvs
