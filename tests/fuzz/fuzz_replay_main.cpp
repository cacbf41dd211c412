// A libFuzzer-compatible target driven without libFuzzer, so that CTest runs it on every build
// (g++ included, and under ASan/UBSan in the sanitizer build): every seed of the corpus folder,
// then `iterations` deterministic mutations of them (bit flips, byte overwrites with boundary
// values, truncations, duplicated and deleted ranges, splices of two seeds). It cannot replace
// coverage-guided fuzzing (docs/fuzzing.md), but it keeps the target compiling and running and
// catches regressions on the corpus.
//
//   <target>_replay CORPUS_DIR ITERATIONS [SEED]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

Bytes mutate(const std::vector<Bytes>& corpus, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  Bytes b = corpus[pick(corpus.size())];
  const int rounds = 1 + static_cast<int>(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!b.empty()) b[pick(b.size())] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // a random byte
        if (!b.empty()) b[pick(b.size())] = static_cast<uint8_t>(rng());
        break;
      case 2: {  // a boundary value over 1, 2, 4 or 8 bytes (counts, sizes, offsets, types)
        static constexpr uint64_t kValues[] = {0,
                                               1,
                                               0x7f,
                                               0x80,
                                               0xff,
                                               0xffff,
                                               0x7fffffff,
                                               0xffffffff,
                                               0x7fffffffffffffff,
                                               0xffffffffffffffff,
                                               12,
                                               13,
                                               32};
        const uint64_t v = kValues[rng() % std::size(kValues)];
        const size_t width = size_t{1} << (rng() % 4);
        if (b.size() >= width) {
          const size_t at = pick(b.size() - width + 1);
          for (size_t i = 0; i < width; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
        }
        break;
      }
      case 3:  // truncate
        b.resize(pick(b.size() + 1));
        break;
      case 4: {  // duplicate a range
        if (b.empty()) break;
        const size_t from = pick(b.size()), len = 1 + pick(std::min<size_t>(64, b.size() - from));
        const Bytes range(b.begin() + from, b.begin() + from + len);
        b.insert(b.begin() + pick(b.size() + 1), range.begin(), range.end());
        break;
      }
      case 5: {  // delete a range
        if (b.empty()) break;
        const size_t from = pick(b.size()), len = 1 + pick(std::min<size_t>(64, b.size() - from));
        b.erase(b.begin() + from, b.begin() + from + len);
        break;
      }
      default: {  // splice: the head of this input, the tail of another
        const Bytes& other = corpus[pick(corpus.size())];
        const size_t cut = pick(b.size() + 1), from = pick(other.size() + 1);
        b.resize(cut);
        b.insert(b.end(), other.begin() + from, other.end());
        break;
      }
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR ITERATIONS [SEED]\n", argv[0]);
    return 2;
  }
  std::vector<Bytes> corpus;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(argv[1]))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "no seed in %s\n", argv[1]);
    return 2;
  }
  const long iterations = std::atol(argv[2]);
  std::mt19937_64 rng(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1);
  for (const Bytes& seed : corpus) LLVMFuzzerTestOneInput(seed.data(), seed.size());
  for (long i = 0; i < iterations; ++i) {
    const Bytes b = mutate(corpus, rng);
    LLVMFuzzerTestOneInput(b.data(), b.size());
  }
  std::printf("%zu seeds, %ld mutated inputs: no crash\n", corpus.size(), iterations);
  return 0;
}
