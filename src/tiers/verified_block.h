// VerifiedBlock: a handle on one block's bytes that a tier's loader thread read and verified
// (disk extent or Redis value, MAC checked). The schedule carries these handles, never bytes:
// the handle shares ownership of the verified buffer, so the bytes stay valid until the step's
// transfers ran even if the tier's cache of verified reads drops them meanwhile. The transfer
// executor is the one reader (kReadLoad).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvs {

struct VerifiedBlock {
  std::shared_ptr<const std::vector<uint8_t>> buffer;
  size_t offset = 0;  // of the block's bytes in buffer
  size_t bytes = 0;
  [[nodiscard]] const uint8_t* data() const { return buffer->data() + offset; }
};

}  // namespace kvs
