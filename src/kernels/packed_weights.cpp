#include "kernels/packed_weights.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/dequantize.h"

namespace kvs {
namespace {

namespace pl = packed_layout;

// One row's part of a group block, decoded from either layout: its stored integers in natural
// element order (Q4: 0..15, Q5_0: 0..31, Q8_0: the signed bytes, Q6_K: 0..63) and its scales'
// stored bits.
struct RowBlock {
  uint8_t v[256];
  uint16_t d = 0, m = 0;           // f16 bits: d (Q4_K: d and dmin; Q4_1: d and m)
  uint8_t sc[8] = {}, mn[8] = {};  // Q4_K 6-bit sub-block scales and mins
  int8_t sc16[16] = {};            // Q6_K sub-scales (one per 16 elements)
};

bool super(WeightType t) { return t == WeightType::kQ4_K || t == WeightType::kQ6_K; }

int64_t elems(WeightType t) { return super(t) ? 256 : 32; }

uint16_t u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// The element at byte p of a 32-element unit: block order, but natural order for Q6_K (whose
// halves have their own sub-scales: dwords 0-3 are elements 0..15).
int element_at(WeightType t, int p) {
  if (t == WeightType::kQ6_K) return p;
  const int j = p / 4, i = p % 4;
  return i < 2 ? 2 * j + i : 14 + 2 * j + i;
}

// GGUF block `blk` (of elems(t) elements) -> RowBlock.
void read_gguf(WeightType t, const uint8_t* blk, RowBlock* o) {
  switch (t) {
    case WeightType::kQ8_0:
      o->d = u16(blk);
      std::memcpy(o->v, blk + 2, 32);
      return;
    case WeightType::kQ4_0:
    case WeightType::kQ4_1: {
      const bool min = t == WeightType::kQ4_1;
      const uint8_t* qs = blk + (min ? 4 : 2);
      o->d = u16(blk);
      if (min) o->m = u16(blk + 2);
      for (int e = 0; e < 16; ++e) o->v[e] = qs[e] & 0x0F, o->v[e + 16] = qs[e] >> 4;
      return;
    }
    case WeightType::kQ5_0: {
      o->d = u16(blk);
      uint32_t qh;
      std::memcpy(&qh, blk + 2, 4);
      for (int e = 0; e < 16; ++e) {
        o->v[e] = static_cast<uint8_t>((blk[6 + e] & 0x0F) | (((qh >> e) & 1) << 4));
        o->v[e + 16] = static_cast<uint8_t>((blk[6 + e] >> 4) | (((qh >> (e + 16)) & 1) << 4));
      }
      return;
    }
    case WeightType::kQ4_K: {
      o->d = u16(blk), o->m = u16(blk + 2);
      for (int j = 0; j < 8; ++j) {
        int sc, mn;
        q4k_scale_min(j, blk + 4, &sc, &mn);
        o->sc[j] = static_cast<uint8_t>(sc), o->mn[j] = static_cast<uint8_t>(mn);
        const uint8_t* qs = blk + 16 + 32 * (j / 2);
        for (int e = 0; e < 32; ++e) o->v[32 * j + e] = (j & 1) ? qs[e] >> 4 : qs[e] & 0x0F;
      }
      return;
    }
    case WeightType::kQ6_K: {
      o->d = u16(blk + 208);
      std::memcpy(o->sc16, blk + 192, 16);
      for (int j = 0; j < 8; ++j) {
        const int h = j / 4, qd = j % 4;
        const uint8_t* ql = blk + 64 * h + (qd & 1) * 32;
        const uint8_t* qh = blk + 128 + 32 * h;
        for (int e = 0; e < 32; ++e) {
          const int nib = qd < 2 ? ql[e] & 0x0F : ql[e] >> 4;
          o->v[32 * j + e] = static_cast<uint8_t>(nib | (((qh[e] >> (2 * qd)) & 3) << 4));
        }
      }
      return;
    }
    default: KVS_CHECK(false);
  }
}

// RowBlock -> GGUF block (the inverse of read_gguf: every bit of the block is set).
void write_gguf(WeightType t, const RowBlock& o, uint8_t* blk) {
  switch (t) {
    case WeightType::kQ8_0:
      put16(blk, o.d);
      std::memcpy(blk + 2, o.v, 32);
      return;
    case WeightType::kQ4_0:
    case WeightType::kQ4_1: {
      const bool min = t == WeightType::kQ4_1;
      uint8_t* qs = blk + (min ? 4 : 2);
      put16(blk, o.d);
      if (min) put16(blk + 2, o.m);
      for (int e = 0; e < 16; ++e) qs[e] = static_cast<uint8_t>(o.v[e] | (o.v[e + 16] << 4));
      return;
    }
    case WeightType::kQ5_0: {
      put16(blk, o.d);
      uint32_t qh = 0;
      for (int e = 0; e < 32; ++e) qh |= uint32_t{static_cast<uint8_t>(o.v[e] >> 4)} << e;
      std::memcpy(blk + 2, &qh, 4);
      for (int e = 0; e < 16; ++e)
        blk[6 + e] = static_cast<uint8_t>((o.v[e] & 0x0F) | ((o.v[e + 16] & 0x0F) << 4));
      return;
    }
    case WeightType::kQ4_K: {
      put16(blk, o.d), put16(blk + 2, o.m);
      uint8_t* s = blk + 4;
      for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<uint8_t>((o.sc[j] & 63) | ((o.sc[j + 4] >> 4) << 6));
        s[j + 4] = static_cast<uint8_t>((o.mn[j] & 63) | ((o.mn[j + 4] >> 4) << 6));
        s[j + 8] = static_cast<uint8_t>((o.sc[j + 4] & 0x0F) | ((o.mn[j + 4] & 0x0F) << 4));
      }
      for (int p = 0; p < 4; ++p)
        for (int e = 0; e < 32; ++e)
          blk[16 + 32 * p + e] =
              static_cast<uint8_t>(o.v[64 * p + e] | (o.v[64 * p + 32 + e] << 4));
      return;
    }
    case WeightType::kQ6_K: {
      put16(blk + 208, o.d);
      std::memcpy(blk + 192, o.sc16, 16);
      std::memset(blk, 0, 192);
      for (int j = 0; j < 8; ++j) {
        const int h = j / 4, qd = j % 4;
        uint8_t* ql = blk + 64 * h + (qd & 1) * 32;
        uint8_t* qh = blk + 128 + 32 * h;
        for (int e = 0; e < 32; ++e) {
          const uint8_t q = o.v[32 * j + e];
          ql[e] |= static_cast<uint8_t>(qd < 2 ? (q & 0x0F) : (q & 0x0F) << 4);
          qh[e] |= static_cast<uint8_t>((q >> 4) << (2 * qd));
        }
      }
      return;
    }
    default: KVS_CHECK(false);
  }
}

// The 32-element unit `u` of row r: its integers' low 4 bits, Q5_0's 5th bits, Q6_K's top 2 bits
// or Q8_0's bytes, at `unit` (the unit's first vector in the group block); `to_packed` chooses
// the direction.
void move_unit(WeightType t, bool to_packed, uint8_t* v, uint8_t* unit, int r) {
  auto at = [&](int64_t vec, int i) -> uint8_t& { return unit[vec * pl::kVector + 4 * r + i]; };
  if (t == WeightType::kQ8_0) {
    for (int p = 0; p < 32; ++p) {
      uint8_t& b = at(p / 4, p % 4);
      if (to_packed)
        b = v[element_at(t, p)];
      else
        v[element_at(t, p)] = b;
    }
    return;
  }
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 4; ++i) {
      uint8_t& b = at(k, i);
      uint8_t& lo = v[element_at(t, 4 * k + i)];
      uint8_t& hi = v[element_at(t, 4 * k + 16 + i)];
      if (to_packed) {
        b = static_cast<uint8_t>((lo & 0x0F) | (hi & 0x0F) << 4);
      } else {
        lo = b & 0x0F;
        hi = b >> 4;
      }
    }
  if (t == WeightType::kQ5_0) {
    for (int i = 0; i < 4; ++i) {
      uint8_t& b = at(4, i);
      if (to_packed) b = 0;
      for (int j = 0; j < 8; ++j) {
        uint8_t& x = v[element_at(t, 4 * j + i)];
        if (to_packed)
          b = static_cast<uint8_t>(b | ((x >> 4) & 1) << j);
        else
          x = static_cast<uint8_t>(x | ((b >> j) & 1) << 4);
      }
    }
  } else if (t == WeightType::kQ6_K) {
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 4; ++i) {
        uint8_t& b = at(4 + h, i);
        if (to_packed) b = 0;
        for (int q = 0; q < 4; ++q) {
          uint8_t& x = v[element_at(t, 4 * (4 * h + q) + i)];
          if (to_packed)
            b = static_cast<uint8_t>(b | ((x >> 4) & 3) << (2 * q));
          else
            x = static_cast<uint8_t>(x | ((b >> (2 * q)) & 3) << 4);
        }
      }
  }
}

// Row r's part of group block gb <-> RowBlock.
void move_row(WeightType t, bool to_packed, RowBlock* o, uint8_t* gb, int r) {
  auto f16_slot = [&](int64_t off) { return gb + off + 2 * r; };
  auto move16 = [&](uint16_t* x, int64_t off) {
    if (to_packed)
      put16(f16_slot(off), *x);
    else
      *x = u16(f16_slot(off));
  };
  switch (t) {
    case WeightType::kQ4_K:
      for (int j = 0; j < 8; ++j) {
        move_unit(t, to_packed, o->v + 32 * j, gb + pl::kLowBits * j, r);
        uint8_t& sc = gb[pl::kQ4KSc + 16 * j + r];
        uint8_t& mn = gb[pl::kQ4KMn + 16 * j + r];
        if (to_packed)
          sc = o->sc[j], mn = o->mn[j];
        else
          o->sc[j] = sc, o->mn[j] = mn;
      }
      move16(&o->d, pl::kQ4KD);
      move16(&o->m, pl::kQ4KDmin);
      return;
    case WeightType::kQ6_K:
      for (int j = 0; j < 8; ++j) {
        move_unit(t, to_packed, o->v + 32 * j, gb + pl::kQ6KUnit * j, r);
        for (int s = 0; s < 2; ++s) {
          auto& x = reinterpret_cast<int8_t&>(gb[pl::kQ6KSc + 32 * j + 16 * s + r]);
          if (to_packed)
            x = o->sc16[2 * j + s];
          else
            o->sc16[2 * j + s] = x;
        }
      }
      move16(&o->d, pl::kQ6KD);
      return;
    default: {
      move_unit(t, to_packed, o->v, gb, r);
      const int64_t d_off = pl::block_bytes(t) - (t == WeightType::kQ4_1 ? 2 : 1) * pl::kF16;
      move16(&o->d, d_off);
      if (t == WeightType::kQ4_1) move16(&o->m, d_off + pl::kF16);
    }
  }
}

}  // namespace

bool packed_layout_supports(WeightType t) { return packed_layout::block_bytes(t) != 0; }

uint64_t packed_group_bytes(WeightType t, int64_t cols) {
  return static_cast<uint64_t>(cols / elems(t) * pl::block_bytes(t));
}

uint64_t packed_weight_bytes(WeightType t, int64_t rows, int64_t cols) {
  return static_cast<uint64_t>((rows + pl::kRows - 1) / pl::kRows) * packed_group_bytes(t, cols);
}

void pack_group(const WeightMatrix& w, int64_t g, uint8_t* out) {
  KVS_CHECK(packed_layout_supports(w.type) && w.rows > 0 && g * pl::kRows < w.rows);
  const int64_t nb = w.cols / elems(w.type), bb = weight_type_info(w.type).block_bytes;
  RowBlock o;
  for (int r = 0; r < pl::kRows; ++r) {
    const int64_t row = std::min(g * pl::kRows + r, w.rows - 1);
    const auto* src = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      read_gguf(w.type, src + b * bb, &o);
      move_row(w.type, true, &o, out + b * pl::block_bytes(w.type), r);
    }
  }
}

void pack_groups(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out, ThreadPool& pool) {
  KVS_CHECK(reinterpret_cast<uintptr_t>(out) % 64 == 0 && 0 <= g0 && g0 <= g1);
  const uint64_t gbytes = packed_group_bytes(w.type, w.cols);
  pool.parallel_for(static_cast<size_t>(g1 - g0), 4, [&](size_t b, size_t e, int) {
    for (size_t g = b; g < e; ++g) {
      const int64_t gi = g0 + static_cast<int64_t>(g);
      pack_group(w, gi, out + gi * gbytes);
    }
  });
}

void pack_weight(const WeightMatrix& w, uint8_t* out, ThreadPool& pool) {
  pack_groups(w, 0, (w.rows + pl::kRows - 1) / pl::kRows, out, pool);
}

void packed_row_to_gguf(const WeightMatrix& w, int64_t row, uint8_t* out) {
  KVS_CHECK(w.packed != nullptr && row >= 0 && row < w.rows);
  const int64_t nb = w.cols / elems(w.type), bb = weight_type_info(w.type).block_bytes;
  // move_row only reads the group block when unpacking; the cast lets it share the code.
  auto* group =
      const_cast<uint8_t*>(w.packed) + (row / pl::kRows) * packed_group_bytes(w.type, w.cols);
  RowBlock o;
  for (int64_t b = 0; b < nb; ++b) {
    std::memset(o.v, 0, sizeof o.v);
    move_row(w.type, false, &o, group + b * pl::block_bytes(w.type),
             static_cast<int>(row % pl::kRows));
    write_gguf(w.type, o, out + b * bb);
  }
}

}  // namespace kvs
