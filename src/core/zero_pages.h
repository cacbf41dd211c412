// ZeroPages: anonymous memory mapped from the kernel, zero and page-aligned, and committed only
// where it is first written. The KV pool and the recent-token rings are sized up front for the
// worst case (every block, every --max-num-seqs sequence); with this they cost memory as they
// fill, not at startup, and a page nobody wrote reads as zeros, never as another buffer's
// bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "core/status.h"

namespace kvs {

class ZeroPages {
 public:
  // `bytes` of zeroed memory (none for 0); `what` names it in the error when the system refuses
  // (resource_exhausted: "could not allocate N bytes for <what>").
  static Result<ZeroPages> map(uint64_t bytes, std::string_view what);

  ZeroPages() = default;

  [[nodiscard]] uint8_t* data() const { return memory_.get(); }
  // The pages as an array of T (page-aligned, so aligned for any T).
  template <typename T>
  [[nodiscard]] T* as() const {
    return reinterpret_cast<T*>(memory_.get());
  }
  [[nodiscard]] uint64_t size() const { return memory_.get_deleter().bytes; }

 private:
  struct Unmapper {
    uint64_t bytes = 0;
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Unmapper> memory_{nullptr, Unmapper{}};
};

}  // namespace kvs
