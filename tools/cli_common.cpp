#include "tools/cli_common.h"

#include <cstdio>

#include "core/byte_size.h"
#include "model/model_paths.h"
#include "quant/recent_window.h"
#include "tools/cli_commands.h"
#include "tools/cli_common_flags.h"

namespace kvs::cli {

void add_engine_flags(CLI::App* cmd, EngineFlags* f) {
  add_model_flag(*cmd, &f->model, FlagRole::kEngine);
  add_kv_cache_memory_flag(*cmd, &f->kv_cache_memory, FlagRole::kEngine);
  add_block_size_flag(*cmd, &f->block_size, FlagRole::kEngine);
  add_kv_cache_dtype_flags(*cmd, &f->kv_cache_dtype, &f->kv_cache_dtype_k, &f->kv_cache_dtype_v,
                           FlagRole::kEngine);
  add_kv_layer_dtype_flags(*cmd, &f->kv_cache_dtype_k_layers, &f->kv_cache_dtype_v_layers,
                           FlagRole::kEngine);
  cmd->add_option("-t,--threads", f->threads, "worker threads (default: all cores)");
  add_max_num_batched_tokens_flag(*cmd, &f->max_num_batched_tokens, FlagRole::kEngine);
  add_max_num_seqs_flag(*cmd, &f->max_num_seqs, FlagRole::kEngine);
  add_kv_recent_window_flag(*cmd, &f->kv_recent_window, FlagRole::kEngine);
  add_kv_recent_window_dtype_flag(*cmd, &f->kv_recent_window_dtype, FlagRole::kEngine);
  add_kv_attention_sink_flag(*cmd, &f->kv_attention_sink, FlagRole::kEngine);
  add_prefix_caching_flag(*cmd, &f->enable_prefix_caching);
  add_max_model_len_flag(*cmd, &f->max_model_len);
  add_kv_offload_memory_flag(*cmd, &f->kv_offload_memory, FlagRole::kEngine);
  cmd->add_option("--kv-offload-dir", f->kv_offload_dir,
                  "directory of the disk KV tier (L3); survives restarts (default: off)");
  add_kv_offload_disk_bytes_flag(*cmd, &f->kv_offload_disk_bytes, FlagRole::kEngine);
  cmd->add_option("--kv-offload-policy", f->kv_offload_policy,
                  "write-back (blocks go down when evicted) or write-through (as soon as cached)")
      ->capture_default_str();
  cmd->add_option("--kv-offload-disk-admit", f->kv_offload_disk_admit,
                  "prefix hits a block must have served before it is written to disk "
                  "(write-back; docs/offload.md measures the choice)")
      ->capture_default_str();
  cmd->add_option("--kv-offload-dtype", f->kv_offload_dtype,
                  "element format of the tiers' blocks: same (the pool's), or a KV format such as "
                  "fp8, int8, int4_had: blocks are re-encoded as they leave the pool and decoded "
                  "back on load (more prefix tokens per byte; quality in docs/offload.md)")
      ->capture_default_str();
  cmd->add_option("--kv-offload-extent-blocks", f->kv_offload_extent_blocks,
                  "blocks per disk extent, the unit of disk I/O (1..256; docs/offload.md)")
      ->capture_default_str();
  cmd->add_option("--kv-remote", f->kv_remote,
                  "a Redis instance of the shared KV tier (L4), redis://HOST:PORT[/DB]; repeat "
                  "to spread blocks over several by consistent hashing (docs/scale-out.md)");
  cmd->add_option("--kv-remote-ttl", f->kv_remote_ttl,
                  "seconds a block stays in Redis (0: until Redis evicts it)")
      ->capture_default_str();
  cmd->add_option("--kv-remote-timeout-ms", f->kv_remote_timeout_ms,
                  "timeout of every Redis connect and command (a fetch's deadline adds time for "
                  "its bytes); a slow or down Redis is a miss")
      ->capture_default_str();
  cmd->add_option("--kv-tier-secret-file", f->kv_tier_secret_file,
                  "the server secret (>= 32 bytes, mode 600): keys tenants, tier keys and the MAC "
                  "of every disk/Redis value. Replicas that share KV need the same file (default: "
                  "kept in --kv-offload-dir, else random per process; docs/security.md)");
}

std::unique_ptr<LoadedModel> load_model_or_fail(const EngineFlags& flags) {
  auto path = resolve_model_path(flags.model);
  if (!path.is_ok()) fail(path.status().message());
  auto model = load_model(*path);
  if (!model.is_ok()) fail("cannot load " + *path + ": " + model.status().message());
  return std::make_unique<LoadedModel>(std::move(model).value());
}

EngineConfig engine_config_or_fail(const EngineFlags& f, const LoadedModel& model) {
  EngineConfig c;
  auto mem = parse_byte_size(f.kv_cache_memory);
  if (!mem.is_ok()) fail("--kv-cache-memory: " + mem.status().message());
  c.kv_cache_memory = *mem;
  c.block_size = f.block_size;
  auto dtype = [&](const std::string& name, const char* flag) {
    auto d = parse_kv_dtype(name);
    if (!d.is_ok()) fail(std::string(flag) + ": " + d.status().message());
    return *d;
  };
  const KvDtype both =
      dtype(f.kv_cache_dtype == "auto" ? "f16" : f.kv_cache_dtype, "--kv-cache-dtype");
  c.k_dtype = f.kv_cache_dtype_k.empty() ? both : dtype(f.kv_cache_dtype_k, "--kv-cache-dtype-k");
  c.v_dtype = f.kv_cache_dtype_v.empty() ? both : dtype(f.kv_cache_dtype_v, "--kv-cache-dtype-v");
  auto layers = parse_kv_layer_flags(f.kv_cache_dtype_k_layers, f.kv_cache_dtype_v_layers);
  if (!layers.is_ok()) fail(layers.status().message());
  c.layer_formats = std::move(layers).value();
  if (f.threads < 0) fail("--threads must be positive");
  c.threads = f.threads;
  c.max_num_batched_tokens = f.max_num_batched_tokens;
  c.max_num_seqs = f.max_num_seqs;
  c.recent_window = f.kv_recent_window;
  auto window_dtype = parse_recent_window_dtype(f.kv_recent_window_dtype);
  if (!window_dtype.is_ok()) fail(window_dtype.status().message());
  c.recent_window_dtype = *window_dtype;
  c.attention_sink = f.kv_attention_sink;
  c.enable_prefix_caching = f.enable_prefix_caching;
  c.max_model_len = f.max_model_len;
  c.model_fingerprint = model.fingerprint;
  auto offload_mem = parse_byte_size(f.kv_offload_memory);
  if (!offload_mem.is_ok()) fail("--kv-offload-memory: " + offload_mem.status().message());
  c.offload.host_bytes = *offload_mem;
  c.offload.disk_dir = f.kv_offload_dir;
  auto disk = parse_byte_size(f.kv_offload_disk_bytes);
  if (!disk.is_ok()) fail("--kv-offload-disk-bytes: " + disk.status().message());
  c.offload.disk_bytes = *disk;
  auto policy = parse_offload_policy(f.kv_offload_policy);
  if (!policy.is_ok()) fail(policy.status().message());
  c.offload.policy = *policy;
  c.offload.disk_admit_hits = f.kv_offload_disk_admit;
  c.offload.extent_blocks = f.kv_offload_extent_blocks;
  c.offload.remote_urls = f.kv_remote;
  c.offload.remote_ttl_seconds = f.kv_remote_ttl;
  c.offload.remote_timeout_ms = f.kv_remote_timeout_ms;
  if (f.kv_offload_dtype != "same")
    c.offload.tier_dtype = dtype(f.kv_offload_dtype, "--kv-offload-dtype");
  if (!f.kv_tier_secret_file.empty()) {
    auto secret = ServerSecret::read_file(f.kv_tier_secret_file);
    if (!secret.is_ok()) fail("--kv-tier-secret-file: " + secret.status().message());
    c.secret = std::move(secret).value();
  } else if (!f.kv_remote.empty()) {
    std::fprintf(stderr,
                 "kvserve: --kv-remote without --kv-tier-secret-file: this process keys its Redis "
                 "values with a secret of its own, so no other replica (and no restart) can use "
                 "them; give every replica the same --kv-tier-secret-file to share KV\n");
  }
  c.eog_ids = model.eog_ids;
  return c;
}

std::unique_ptr<Engine> create_engine_or_fail(LoadedModel& model, const EngineConfig& config) {
  auto engine = Engine::create(*model.model, config);
  if (!engine.is_ok()) fail(engine.status().message());
  return std::move(engine).value();
}

}  // namespace kvs::cli
