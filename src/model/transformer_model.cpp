#include "model/transformer_model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <string>

#include "kernels/activations.h"
#include "kernels/dequantize.h"
#include "kernels/int8_isa.h"
#include "kernels/kv_write.h"
#include "kernels/packed_weights.h"
#include "kernels/paged_attention.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "model/gguf_file.h"
#include "quant/recent_window.h"

namespace kvs {
namespace {

// The per-token work between two matmuls (norms, RoPE, residual adds): fn(t0, t1) over disjoint
// token ranges, split over the pool once the step has enough of it to pay for a parallel region
// (a prefill chunk; a decode step's few tokens stay on the calling thread). Each token's bits
// are the same whatever the split. With it on the calling thread alone, the other thread spun
// through about 3% of a 2-thread prefill.
template <class Fn>
void over_tokens(ThreadPool& pool, int64_t T, int64_t floats_per_token, const Fn& fn) {
  constexpr int64_t kParallelFloats = int64_t{1} << 15;
  if (pool.num_threads() == 1 || T < 2 || T * floats_per_token < kParallelFloats) {
    fn(0, T);
    return;
  }
  const auto grain =
      static_cast<size_t>((T + 2 * pool.num_threads() - 1) / (2 * pool.num_threads()));
  pool.parallel_for(static_cast<size_t>(T), grain, [&](size_t b, size_t e, int) {
    fn(static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

std::string dims_text(const std::vector<uint64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// A 2-D weight [rows][cols] (ggml dims {cols, rows}).
Result<WeightMatrix> bind_matrix(const GgufFile& f, const std::string& name, uint64_t rows,
                                 uint64_t cols, uint64_t* total) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) return not_found("tensor '" + name + "' is missing from the model file");
  if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)
    return invalid_argument("tensor '" + name + "' has shape " + dims_text(t->dims) +
                            ", expected [" + std::to_string(cols) + ", " + std::to_string(rows) +
                            "]");
  KVS_ASSIGN_OR_RETURN(WeightType type, t->weight_type());
  *total += t->size_bytes;
  return WeightMatrix{.type = type,
                      .data = t->data,
                      .rows = static_cast<int64_t>(rows),
                      .cols = static_cast<int64_t>(cols),
                      .row_bytes = weight_row_bytes(type, cols)};
}

Result<const float*> bind_vector(const GgufFile& f, const std::string& name, uint64_t n,
                                 uint64_t* total) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) return not_found("tensor '" + name + "' is missing from the model file");
  if (t->dims.size() != 1 || t->dims[0] != n)
    return invalid_argument("tensor '" + name + "' has shape " + dims_text(t->dims) +
                            ", expected [" + std::to_string(n) + "]");
  KVS_ASSIGN_OR_RETURN(WeightType type, t->weight_type());
  if (type != WeightType::kF32)
    return unimplemented("norm tensor '" + name + "' must be F32, it is " + t->type_name());
  if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0)
    return invalid_argument("tensor '" + name + "' is not 4-byte aligned in the file");
  *total += t->size_bytes;
  return reinterpret_cast<const float*>(t->data);
}

}  // namespace

Result<TransformerModel> TransformerModel::load(const GgufFile& f, const ModelSpec& s) {
  TransformerModel m;
  m.spec_ = s;
  KVS_ASSIGN_OR_RETURN(m.arch_, architecture_of(s));
  KVS_ASSIGN_OR_RETURN(m.groups_, KvCacheGroups::of_layers(s.kv_layers));
  uint64_t total = 0;
  const uint64_t E = s.d_model, Dq = uint64_t{s.n_heads} * s.head_dim,
                 Dkv = uint64_t{s.n_kv_heads} * s.head_dim, F = s.ffn_dim;
  KVS_ASSIGN_OR_RETURN(m.embedding_, bind_matrix(f, "token_embd.weight", s.vocab_size, E, &total));
  if (f.find_tensor("output.weight") != nullptr) {
    KVS_ASSIGN_OR_RETURN(m.output_, bind_matrix(f, "output.weight", s.vocab_size, E, &total));
  } else {
    m.output_ = m.embedding_;  // tied embeddings
  }
  KVS_ASSIGN_OR_RETURN(m.output_norm_, bind_vector(f, "output_norm.weight", E, &total));
  m.layers_.resize(s.n_layers);
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& w = m.layers_[l];
    KVS_ASSIGN_OR_RETURN(w.attn_norm, bind_vector(f, p + "attn_norm.weight", E, &total));
    KVS_ASSIGN_OR_RETURN(w.ffn_norm, bind_vector(f, p + "ffn_norm.weight", E, &total));
    KVS_ASSIGN_OR_RETURN(w.wq, bind_matrix(f, p + "attn_q.weight", Dq, E, &total));
    KVS_ASSIGN_OR_RETURN(w.wk, bind_matrix(f, p + "attn_k.weight", Dkv, E, &total));
    KVS_ASSIGN_OR_RETURN(w.wv, bind_matrix(f, p + "attn_v.weight", Dkv, E, &total));
    KVS_ASSIGN_OR_RETURN(w.wo, bind_matrix(f, p + "attn_output.weight", E, Dq, &total));
    KVS_ASSIGN_OR_RETURN(w.w_gate, bind_matrix(f, p + "ffn_gate.weight", F, E, &total));
    KVS_ASSIGN_OR_RETURN(w.w_up, bind_matrix(f, p + "ffn_up.weight", F, E, &total));
    KVS_ASSIGN_OR_RETURN(w.w_down, bind_matrix(f, p + "ffn_down.weight", E, F, &total));
    if (m.arch_.qk_norm) {
      KVS_ASSIGN_OR_RETURN(w.q_norm, bind_vector(f, p + "attn_q_norm.weight", s.head_dim, &total));
      KVS_ASSIGN_OR_RETURN(w.k_norm, bind_vector(f, p + "attn_k_norm.weight", s.head_dim, &total));
    }
    if (m.arch_.post_norms) {
      KVS_ASSIGN_OR_RETURN(w.post_attn_norm,
                           bind_vector(f, p + "post_attention_norm.weight", E, &total));
      KVS_ASSIGN_OR_RETURN(w.post_ffn_norm, bind_vector(f, p + "post_ffw_norm.weight", E, &total));
    }
  }
  m.weight_bytes_ = total;
  m.pack_weights(f);
  return m;
}

void TransformerModel::pack_weights(const GgufFile& f) {
  resident_weight_bytes_ = weight_bytes_;
  // Only the integer GEMM reads the packed layout; the Highway path reads the file's rows.
  if (int8_isa_active() == Int8Isa::kNone) return;
  const auto start = std::chrono::steady_clock::now();
  const bool tied = output_.data == embedding_.data;
  std::vector<WeightMatrix*> mats = {&embedding_};
  if (!tied) mats.push_back(&output_);
  for (LayerWeights& l : layers_)
    for (WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      mats.push_back(w);
  std::vector<uint64_t> offset(mats.size());
  uint64_t bytes = 0;
  for (size_t i = 0; i < mats.size(); ++i) {
    if (!packed_layout_supports(mats[i]->type)) continue;
    offset[i] = bytes;
    bytes += (packed_weight_bytes(mats[i]->type, mats[i]->rows, mats[i]->cols) + 63) / 64 * 64;
  }
  if (bytes == 0) return;
  packed_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)));
  KVS_CHECK(packed_ != nullptr);
  ThreadPool pool(ThreadPool::hardware_threads());
  for (size_t i = 0; i < mats.size(); ++i) {
    WeightMatrix& w = *mats[i];
    if (!packed_layout_supports(w.type)) continue;
    uint8_t* out = packed_.get() + offset[i];
    // A slice of groups at a time, releasing the file's pages under each slice once it is
    // packed, so that the copy never holds much more than one slice twice (Gemma 3's 178 MB
    // embedding would otherwise be resident twice at the peak).
    const int64_t groups = (w.rows + packed_layout::kRows - 1) / packed_layout::kRows;
    const uint64_t group_bytes = packed_group_bytes(w.type, w.cols);
    const int64_t slice =
        std::max<int64_t>(1, (int64_t{8} << 20) / static_cast<int64_t>(group_bytes));
    for (int64_t g0 = 0; g0 < groups; g0 += slice) {
      const int64_t g1 = std::min(groups, g0 + slice);
      pack_groups(w, g0, g1, out, pool);
      const int64_t r0 = g0 * packed_layout::kRows,
                    r1 = std::min(w.rows, g1 * packed_layout::kRows);
      f.release_pages(static_cast<const uint8_t*>(w.data) + r0 * w.row_bytes,
                      (r1 - r0) * w.row_bytes);
    }
    w.packed = out;
    resident_weight_bytes_ -= w.row_bytes * static_cast<uint64_t>(w.rows);
  }
  resident_weight_bytes_ += bytes;
  if (tied) output_ = embedding_;
  weight_pack_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void TransformerModel::ensure_workspace(int64_t T, int64_t nl) {
  const int64_t E = spec_.d_model, Dq = int64_t{spec_.n_heads} * spec_.head_dim,
                Dkv = int64_t{spec_.n_kv_heads} * spec_.head_dim, F = spec_.ffn_dim;
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  grow(ws_.x, T * E);
  grow(ws_.xn, T * E);
  grow(ws_.q, T * Dq);
  grow(ws_.k, T * Dkv);
  grow(ws_.v, T * Dkv);
  grow(ws_.att, T * Dq);
  grow(ws_.tmp, T * E);
  grow(ws_.gate, T * F);
  grow(ws_.up, T * F);
  grow(ws_.last, 2 * nl * E);
}

void TransformerModel::mm(const WeightMatrix& w, const float* x, int64_t T, float* y,
                          ThreadPool& pool) const {
  if (reference_matmul_) {
    matmul_reference(w, x, T, y, pool);
  } else {
    matmul(w, x, T, y, pool);
  }
}

void TransformerModel::mm_group(std::span<const MatmulOutput> outputs, const float* x, int64_t T,
                                ThreadPool& pool) const {
  if (reference_matmul_) {
    for (const MatmulOutput& o : outputs) matmul_reference(*o.w, x, T, o.y, pool);
  } else {
    matmul_group(outputs, x, T, pool);
  }
}

void TransformerModel::mm_gated(const WeightMatrix& gate, const WeightMatrix& up,
                                GateActivation act, const float* x, int64_t T, float* out,
                                float* up_scratch, ThreadPool& pool) const {
  if (reference_matmul_) {
    matmul_reference(gate, x, T, out, pool);
    matmul_reference(up, x, T, up_scratch, pool);
    gated_activation(act, out, up_scratch, T * gate.rows, out);
  } else {
    matmul_gated(gate, up, act, x, T, out, up_scratch, pool);
  }
}

const RopeAngles& TransformerModel::rope_angles(const RopeConfig& cfg, const int32_t* positions,
                                                int64_t T) {
  for (size_t i = 0; i < ws_.rope_used; ++i)
    if (ws_.rope[i].config() == cfg) return ws_.rope[i];
  if (ws_.rope.size() == ws_.rope_used) ws_.rope.emplace_back();
  RopeAngles& a = ws_.rope[ws_.rope_used++];
  a.compute(positions, T, cfg);
  return a;
}

void TransformerModel::forward(const ForwardBatch& b, const PagedKvLayout& kv, ThreadPool& pool,
                               float* logits) {
  const int64_t T = b.num_tokens;
  if (T == 0) return;
  KVS_CHECK(kv.head_dim == spec_.head_dim && kv.kv_heads == spec_.n_kv_heads);
  KVS_CHECK(b.num_groups == groups_.num_groups());
  ensure_workspace(T, b.num_logits);
  ws_.rope_used = 0;  // the angles of the previous step's positions are stale
  const int64_t E = spec_.d_model, H = spec_.n_heads, KVH = spec_.n_kv_heads, D = spec_.head_dim;
  float* x = ws_.x.data();
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = b.tokens[t];
    KVS_CHECK(id >= 0 && static_cast<uint32_t>(id) < spec_.vocab_size);
    const uint8_t* row = static_cast<const uint8_t*>(embedding_.data) + id * embedding_.row_bytes;
    if (embedding_.packed != nullptr) {
      // The file's pages were released: read the row back out of the packed copy.
      ws_.embedding_row.resize(embedding_.row_bytes);
      packed_row_to_gguf(embedding_, id, ws_.embedding_row.data());
      row = ws_.embedding_row.data();
    }
    dequantize_row(embedding_.type, row, x + t * E, E);
  }
  if (arch_.embedding_scale != 1.0f)
    for (int64_t i = 0; i < T * E; ++i) x[i] *= arch_.embedding_scale;
  PagedAttentionArgs attn{.kv = kv,
                          .layer = 0,
                          .num_tokens = T,
                          .num_heads = static_cast<uint32_t>(H),
                          .scale = arch_.attention_scale,
                          .q = ws_.q.data(),
                          .out = ws_.att.data(),
                          .context_len = b.context_len};
  // The recent-token window (quant/recent_window.h): the step's tokens, then per layer its new
  // K and V before attention and into the rings after it.
  RecentWindow* recent = kv.recent;
  if (recent != nullptr) {
    KVS_CHECK(b.recent_slot != nullptr && b.recent_floor != nullptr);
    recent->begin_step(T, b.positions, b.recent_slot, b.recent_floor);
  }
  for (uint32_t l = 0; l < spec_.n_layers; ++l) {
    const LayerWeights& w = layers_[l];
    const KvLayerSlot slot = groups_.layer_slots[l];
    const LayerAttention& la = arch_.layers[l];
    over_tokens(pool, T, E, [&](int64_t t0, int64_t t1) {
      rms_norm_rows(x + t0 * E, w.attn_norm, t1 - t0, E, spec_.norm_eps, ws_.xn.data() + t0 * E);
    });
    // Q, K and V in one parallel region where the weights allow (matmul_group).
    const std::array<MatmulOutput, 3> qkv = {
        {{&w.wq, ws_.q.data()}, {&w.wk, ws_.k.data()}, {&w.wv, ws_.v.data()}}};
    mm_group(qkv, ws_.xn.data(), T, pool);
    const RopeConfig rope{.head_dim = D,
                          .rot_dim = spec_.rope_dim,
                          .freq_base = la.rope_base,
                          .mode = arch_.rope_mode};
    const RopeAngles& angles = rope_angles(rope, b.positions, T);
    over_tokens(pool, T, (H + KVH) * D, [&](int64_t t0, int64_t t1) {
      float* q = ws_.q.data() + t0 * H * D;
      float* k = ws_.k.data() + t0 * KVH * D;
      if (arch_.qk_norm) {
        rms_norm_rows(q, w.q_norm, (t1 - t0) * H, D, spec_.norm_eps, q);
        rms_norm_rows(k, w.k_norm, (t1 - t0) * KVH, D, spec_.norm_eps, k);
      }
      rope_inplace_qk(ws_.q.data(), H, ws_.k.data(), KVH, angles, t0, t1);
    });
    // This layer's formats (per-layer formats, quant/kv_layer_formats.h; kv itself otherwise).
    attn.kv = kv.layer_view(slot.index);
    write_kv(attn.kv, slot.index, T, b.slot_mapping + slot.group * T, ws_.k.data(), ws_.v.data(),
             &pool);
    if (recent != nullptr) recent->store(ws_.k.data(), ws_.v.data());
    attn.layer = slot.index;
    attn.model_layer = l;
    attn.window = la.window;
    attn.block_table = b.block_table + slot.group * T;
    paged_attention(attn, pool);
    if (recent != nullptr) recent->commit(l);
    mm(w.wo, ws_.att.data(), T, ws_.tmp.data(), pool);
    over_tokens(pool, T, E, [&](int64_t t0, int64_t t1) {
      float* o = ws_.tmp.data() + t0 * E;
      if (arch_.post_norms) rms_norm_rows(o, w.post_attn_norm, t1 - t0, E, spec_.norm_eps, o);
      add_inplace(x + t0 * E, o, (t1 - t0) * E);
      rms_norm_rows(x + t0 * E, w.ffn_norm, t1 - t0, E, spec_.norm_eps, ws_.xn.data() + t0 * E);
    });
    const GateActivation act =
        arch_.ffn == FfnKind::kGeGluTanh ? GateActivation::kGeluTanh : GateActivation::kSilu;
    mm_gated(w.w_gate, w.w_up, act, ws_.xn.data(), T, ws_.gate.data(), ws_.up.data(), pool);
    mm(w.w_down, ws_.gate.data(), T, ws_.tmp.data(), pool);
    over_tokens(pool, T, E, [&](int64_t t0, int64_t t1) {
      float* o = ws_.tmp.data() + t0 * E;
      if (arch_.post_norms) rms_norm_rows(o, w.post_ffn_norm, t1 - t0, E, spec_.norm_eps, o);
      add_inplace(x + t0 * E, o, (t1 - t0) * E);
    });
  }
  if (b.num_logits == 0) return;
  float* sel = ws_.last.data();
  float* seln = sel + b.num_logits * E;
  for (int64_t i = 0; i < b.num_logits; ++i) {
    const int32_t row = b.logits_rows[i];
    KVS_CHECK(row >= 0 && row < T);
    std::copy(x + row * E, x + (row + 1) * E, sel + i * E);
  }
  rms_norm_rows(sel, output_norm_, b.num_logits, E, spec_.norm_eps, seln);
  mm(output_, seln, b.num_logits, logits, pool);
  if (arch_.final_logit_softcap > 0) {
    const float cap = arch_.final_logit_softcap;
    const int64_t n = b.num_logits * static_cast<int64_t>(spec_.vocab_size);
    for (int64_t i = 0; i < n; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace kvs
