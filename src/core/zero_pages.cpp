#include "core/zero_pages.h"

#include <sys/mman.h>

#include <string>

namespace kvs {

void ZeroPages::Unmapper::operator()(uint8_t* p) const {
  if (p != nullptr) munmap(p, bytes);
}

Result<ZeroPages> ZeroPages::map(uint64_t bytes, std::string_view what) {
  ZeroPages z;
  if (bytes == 0) return z;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return resource_exhausted("could not allocate " + std::to_string(bytes) + " bytes for " +
                              std::string(what));
  z.memory_ = std::unique_ptr<uint8_t, Unmapper>(static_cast<uint8_t*>(p), Unmapper{bytes});
  return z;
}

}  // namespace kvs
