// KvTransfer: one movement of KV block bytes that a step needs before its forward pass. The
// scheduler decides them (it moves no bytes); the engine's transfer executor performs them in
// the order they were queued, and only then does the forward pass write the step's new KV.
// In-order execution is what makes recycling safe: a block freed and reused within the same
// step is read by the transfers queued before its reuse and written by those queued after.
//
//   kCopyTokens  device block src -> device block dst, token slots [0, num_tokens)
//                (copy-on-write of a shared partial block, partial prefix reuse)
//   kSwapOut     device block src -> host block dst (a preempted sequence's KV, whole block)
//   kSwapIn      host block src -> device block dst (its KV restored on re-admission)
#pragma once

#include <cstdint>

namespace kvs {

enum class KvTransferKind : uint8_t { kCopyTokens, kSwapOut, kSwapIn };

struct KvTransfer {
  KvTransferKind kind = KvTransferKind::kCopyTokens;
  uint32_t src = 0;
  uint32_t dst = 0;
  uint32_t num_tokens = 0;  // kCopyTokens only
  friend bool operator==(const KvTransfer&, const KvTransfer&) = default;
};

}  // namespace kvs
