// sim_calibrate: measures this machine for `kvserve simulate --device cpu` and writes the
// constants file it reads (data/devices/cpu.json by default).
//
// It runs the real engine (the default model unless -m) through a fixed set of steps, with the
// same scheduler and kernels `kvserve serve` uses: prefills of several lengths (one chunk, and
// chunked so that later chunks attend to long contexts) and decode batches of 1..16, 24, 32 and
// 48 sequences at 96 and of 1..8, 12 and 16 at 512 tokens of context, each sequence with its own
// prompt (prefilled once and then taken from the prefix cache, so little time goes to setting them
// up). For every step it records what the step computed (the step-time model's StepWork: tokens,
// sequences, sampled rows, attention pairs) and its wall time, measures the memory read bandwidth
// with the engine's thread pool, and fits
//
//   t = step_overhead + sequence_overhead x seqs
//       + max(linear FLOPs / linear rate + attention FLOPs / attention rate, bytes / bandwidth)
//
// by non-negative least squares on relative error, each kind of step weighing the same
// (alternating: the steps the current fit calls memory-bound constrain only the overheads). Then,
// overheads and attention rate held, it fits the linear rate again for each token count measured
// (linear_flops_by_tokens: the matmuls run far slower per token in a step of 2 tokens than in
// one of 64). It prints the model's error per step kind and writes the file; --samples also writes
// every step (work, measured and predicted seconds) as CSV.
//
//   build/bench/sim_calibrate [-m MODEL.gguf] [-t THREADS] [--out data/devices/cpu.json]
//                             [--samples steps.csv] [--refit steps.csv]
// --refit fits a samples file written before instead of measuring (the model still loads).
//   build/bench/sim_calibrate --fit-step-log steps.jsonl [--device-file FILE] [--out FILE]
// refits the linear curve to the steps a real server ran instead (kvserve serve --step-log),
// keeping the device file's attention rate and bandwidth: constants for the serving conditions
// themselves (HTTP threads, the request mix), not for the engine alone.
//   build/bench/sim_calibrate --score steps.jsonl [--device-file FILE]
// predicts every step of a step log (kvserve serve --step-log) with a device file and prints the
// error by kind of step: how well the constants describe the steps a real server ran.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "engine/engine.h"
#include "kvcache/kv_pool_plan.h"
#include "model/loaded_model.h"
#include "model/model_paths.h"
#include "planner/catalog.h"
#include "sim/device_model.h"
#include "sim/step_time_model.h"

namespace kvs {
namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
  std::string kind;
  StepWork work;
  double seconds;
};

struct Options {
  std::string model;
  int threads = 0;
  std::string out;
  std::string samples;       // CSV of every step, "" = none
  std::string refit;         // fit a samples CSV written before instead of measuring
  std::string score;         // a step log to predict with device_file instead of measuring
  std::string device_file;   // for --score ("" = data/devices/cpu.json)
  std::string fit_step_log;  // fit the steps of a server's step log instead of measuring
};

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "sim_calibrate: %s\n", m.c_str());
  std::exit(1);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// Read bandwidth: every thread sums its share of a 512 MiB buffer; the best of 5 passes.
double read_bandwidth(ThreadPool& pool) {
  const size_t n = (size_t{512} << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  std::vector<uint64_t> sums(64, 0);
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    pool.parallel_for(n, n / (4 * pool.num_threads()) + 1, [&](size_t b, size_t e, int t) {
      uint64_t s = 0;
      for (size_t i = b; i < e; ++i) s += buf[i];
      sums[static_cast<size_t>(t) * 8] += s;
    });
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / dt);
  }
  if (sums[0] == 42) std::puts("");  // keep the sums alive
  return best;
}

std::vector<int32_t> random_prompt(std::mt19937_64& rng, size_t n, uint32_t vocab) {
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % (vocab - 1000)) + 500;
  return p;
}

// Runs the engine until idle, recording every step's work (from the sequences' progress) and
// wall time.
void run_recorded(Engine& e, const std::vector<SeqId>& ids, const std::string& kind,
                  std::vector<Sample>* out) {
  struct Before {
    uint32_t computed;
    size_t tokens;
    bool waiting;
  };
  std::vector<Before> before(ids.size());
  while (e.has_unfinished()) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const Sequence& s = e.sequence(ids[i]);
      before[i] = {s.status == SeqStatus::kFinished ? UINT32_MAX : s.num_computed, s.tokens.size(),
                   s.status == SeqStatus::kWaiting};
    }
    const auto t0 = Clock::now();
    (void)e.step();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    StepWork w;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (before[i].computed == UINT32_MAX) continue;
      const Sequence& s = e.sequence(ids[i]);
      // A finished sequence has committed everything it had before its last token.
      const uint32_t now = s.status == SeqStatus::kFinished
                               ? static_cast<uint32_t>(before[i].tokens)
                               : s.num_computed;
      // Admitted this step: its prefix-cache hits were not computed.
      const uint32_t start = before[i].waiting && s.status != SeqStatus::kWaiting
                                 ? std::max(before[i].computed, s.cached_tokens)
                                 : before[i].computed;
      if (now <= start) continue;
      const uint32_t n = now - start;
      w.add_chunk(start, n, start + n == before[i].tokens);
    }
    if (w.tokens > 0) out->push_back({kind, w, dt});
  }
}

SeqId add(Engine& e, std::vector<int32_t> prompt, uint32_t max_tokens) {
  SequenceRequest r{.prompt = std::move(prompt), .max_tokens = max_tokens, .ignore_eos = true};
  r.sampling.seed = 1;
  auto id = e.add_request(std::move(r));
  if (!id.is_ok()) die(id.status().message());
  return *id;
}

// The measured steps: prefills (one chunk, then long prompts in 512-token chunks) and decode
// batches. Every sequence of a decode batch has its own prompt, as a server's requests do (a
// shared prompt would keep one copy of its KV in cache for the whole batch and make attention
// look faster than it is): the prompts are prefilled once ("setup"), and each batch's sequences
// reuse them from the prefix cache except for their last token.
void measure(Engine& e, uint32_t vocab, std::vector<Sample>* samples) {
  std::mt19937_64 rng(7);
  for (uint32_t n : {16u, 64u, 128u, 256u, 512u, 1024u, 2048u}) {
    const SeqId id = add(e, random_prompt(rng, n, vocab), 1);
    run_recorded(e, {id}, n <= 512 ? "prefill" : "prefill (chunked)", samples);
  }
  struct Shape {
    uint32_t ctx;
    std::vector<uint32_t> batches;
  };
  // Every batch size up to 16: the matmul kernels work in tiles of 4 tokens, so a step of 5
  // costs about what one of 8 does, and the curve must see each step of that staircase.
  const Shape shapes[] = {{96, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 32, 48}},
                          {512, {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}}};
  for (const Shape& shape : shapes) {
    std::vector<std::vector<int32_t>> bases;
    std::vector<SeqId> setup;
    for (uint32_t i = 0; i < shape.batches.back(); ++i) {
      bases.push_back(random_prompt(rng, shape.ctx, vocab));
      setup.push_back(add(e, bases.back(), 1));
    }
    run_recorded(e, setup, "setup", samples);
    for (uint32_t batch : shape.batches) {
      std::vector<SeqId> ids;
      for (uint32_t i = 0; i < batch; ++i) {
        std::vector<int32_t> p = bases[i];
        p.back() = static_cast<int32_t>(rng() % (vocab - 1000)) + 500;
        ids.push_back(add(e, p, 12));
      }
      run_recorded(e, ids, "decode", samples);
    }
  }
  std::erase_if(*samples, [](const Sample& s) { return s.kind == "setup"; });
}

// Samples as CSV: a "#bandwidth" line, a header, one row per step (with the fit's prediction
// when `fit` is given).
void write_samples(const std::string& path, const std::vector<Sample>& samples, double bandwidth,
                   const std::function<double(const StepWork&)>* fit) {
  std::ofstream csv(path);
  csv.precision(10);
  csv << "#bandwidth," << bandwidth << "\n";
  csv << "kind,tokens,sequences,sampled,attention_pairs,kv_read_tokens,measured_s"
      << (fit ? ",predicted_s" : "") << "\n";
  for (const Sample& s : samples) {
    const StepWork& w = s.work;
    csv << s.kind << ',' << w.tokens << ',' << w.sequences << ',' << w.sampled << ','
        << w.attention_pairs << ',' << w.kv_read_tokens << ',' << s.seconds;
    if (fit) csv << ',' << (*fit)(w);
    csv << '\n';
  }
  if (!csv) die("cannot write " + path);
}

void read_samples(const std::string& path, std::vector<Sample>* samples, double* bandwidth) {
  std::ifstream in(path);
  if (!in) die("cannot open " + path);
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    const std::string where = path + " line " + std::to_string(line_no);
    try {
      if (f.size() == 2 && f[0] == "#bandwidth") {
        *bandwidth = std::stod(f[1]);
      } else if (f.size() >= 7 && f[0] != "kind") {
        Sample s;
        s.kind = f[0];
        s.work.tokens = std::stoull(f[1]);
        s.work.sequences = static_cast<uint32_t>(std::stoul(f[2]));
        s.work.sampled = static_cast<uint32_t>(std::stoul(f[3]));
        s.work.attention_pairs = std::stod(f[4]);
        s.work.kv_read_tokens = std::stoull(f[5]);
        s.seconds = std::stod(f[6]);
        if (!(s.seconds > 0)) die(where + ": measured_s must be positive");
        samples->push_back(std::move(s));
      }
    } catch (const std::exception&) {
      die(where + ": not a samples row");
    }
  }
  if (!(*bandwidth > 0) || samples->empty()) die(path + ": no #bandwidth line or no samples");
}

// Solves A x = b (n x n, partial pivoting); false when singular.
bool solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>* x) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    if (std::fabs(a[p][c]) < 1e-300) return false;
    std::swap(a[p], a[c]);
    std::swap(b[p], b[c]);
    for (size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  x->resize(n);
  for (size_t i = 0; i < n; ++i) (*x)[i] = b[i] / a[i][i];
  return true;
}

// The fitted costs: seconds per step, per sequence, per linear FLOP and per attention FLOP.
constexpr int kUnknowns = 4;
struct Fit {
  double step_overhead = 0, seq_overhead = 0, s_per_linear = 0, s_per_attention = 0;
};

// The step-time model's own terms (step_time_model.h), so that the fit and the simulator count
// the same FLOPs and bytes (copied KV included).
double memory_seconds(const ModelCost& c, double bandwidth, const StepWork& w) {
  return step_memory_bytes(c, w) / bandwidth;
}

double predict(const Fit& f, const ModelCost& c, double bandwidth, const StepWork& w,
               bool* memory_bound) {
  const double compute =
      step_linear_flops(c, w) * f.s_per_linear + step_attention_flops(c, w) * f.s_per_attention;
  const double memory = memory_seconds(c, bandwidth, w);
  if (memory_bound) *memory_bound = memory > compute;
  return f.step_overhead + f.seq_overhead * w.sequences + std::max(compute, memory);
}

// Non-negative least squares on relative error (weight 1 / t^2) of
//   t = overhead + seq_overhead x seqs + (compute-bound rows) s_linear x L + s_attention x A
//   t - memory = overhead + seq_overhead x seqs                     (memory-bound rows)
// With four unknowns the exact NNLS is the best of the 15 non-empty subsets' unconstrained
// solutions that are non-negative. Which rows are memory-bound depends on the fit: alternate
// until the classification no longer changes.
Fit fit(const std::vector<Sample>& samples, const ModelCost& c, double bandwidth) {
  std::vector<bool> memory_bound(samples.size(), false);
  std::map<std::string, double> kind_count;
  for (const Sample& s : samples) kind_count[s.kind] += 1;
  Fit best;
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<std::array<double, kUnknowns>> rows;
    std::vector<double> targets, weights;
    for (size_t i = 0; i < samples.size(); ++i) {
      const StepWork& w = samples[i].work;
      std::array<double, kUnknowns> row = {1.0, static_cast<double>(w.sequences), 0, 0};
      double target = samples[i].seconds;
      if (memory_bound[i]) {
        target -= memory_seconds(c, bandwidth, w);
      } else {
        row[2] = step_linear_flops(c, w);
        row[3] = step_attention_flops(c, w);
      }
      rows.push_back(row);
      targets.push_back(target);
      // Relative error, each kind of step weighing the same in all (hundreds of decode steps
      // would otherwise drown the few long prefills).
      weights.push_back(1.0 /
                        (samples[i].seconds * samples[i].seconds * kind_count[samples[i].kind]));
    }
    double best_residual = INFINITY;
    std::array<double, kUnknowns> best_x{};
    for (unsigned mask = 1; mask < (1u << kUnknowns); ++mask) {
      std::vector<int> vars;
      for (int k = 0; k < kUnknowns; ++k)
        if (mask & (1u << k)) vars.push_back(k);
      const size_t n = vars.size();
      // Columns span 1 (the step) to ~1e11 (FLOPs): solve for column-normalized unknowns, or
      // the normal equations lose every digit.
      std::vector<double> scale(n, 0);
      for (size_t r = 0; r < rows.size(); ++r)
        for (size_t i = 0; i < n; ++i) scale[i] += weights[r] * rows[r][vars[i]] * rows[r][vars[i]];
      if (std::any_of(scale.begin(), scale.end(), [](double v) { return v <= 0; })) continue;
      for (double& v : scale) v = std::sqrt(v);
      std::vector<std::vector<double>> ata(n, std::vector<double>(n, 0));
      std::vector<double> atb(n, 0);
      for (size_t r = 0; r < rows.size(); ++r)
        for (size_t i = 0; i < n; ++i) {
          const double ri = rows[r][vars[i]] / scale[i];
          for (size_t j = 0; j < n; ++j) ata[i][j] += weights[r] * ri * rows[r][vars[j]] / scale[j];
          atb[i] += weights[r] * ri * targets[r];
        }
      std::vector<double> x;
      if (!solve(ata, atb, &x)) continue;
      for (size_t i = 0; i < n; ++i) x[i] /= scale[i];
      if (std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) continue;
      std::array<double, kUnknowns> full{};
      for (size_t i = 0; i < n; ++i) full[vars[i]] = x[i];
      double residual = 0;
      for (size_t r = 0; r < rows.size(); ++r) {
        double p = 0;
        for (int k = 0; k < kUnknowns; ++k) p += rows[r][k] * full[k];
        residual += weights[r] * (p - targets[r]) * (p - targets[r]);
      }
      if (residual < best_residual) {
        best_residual = residual;
        best_x = full;
      }
    }
    if (!std::isfinite(best_residual)) die("the fit is singular (too few distinct steps)");
    best = {best_x[0], best_x[1], best_x[2], best_x[3]};
    std::fprintf(stderr,
                 "  fit %d: %.3g s/step + %.3g s/sequence, %.3g s/linear FLOP, %.3g s/attention "
                 "FLOP\n",
                 iter, best.step_overhead, best.seq_overhead, best.s_per_linear,
                 best.s_per_attention);
    if (best.s_per_linear <= 0 || best.s_per_attention <= 0)
      die("the fit found no cost per linear or attention FLOP: the timings are dominated by "
          "noise (is the machine busy?); run again");
    bool changed = false;
    for (size_t i = 0; i < samples.size(); ++i) {
      bool mem = false;
      predict(best, c, bandwidth, samples[i].work, &mem);
      changed |= mem != memory_bound[i];
      memory_bound[i] = mem;
    }
    if (!changed) break;
  }
  return best;
}

// The linear layers' effective rate by the step's token count: for every token count the
// samples have, the seconds per linear FLOP that minimize those samples' relative error with the
// fit's attention rate held and no separate overheads (closed form of a one-unknown least
// squares). Within one token count the step and per-sequence overheads cannot be told apart from
// the matmul time (each is the same for every sample), so the curve's rate includes them: the
// device file then has zero overheads. The curve is what the kernels do: a step of few tokens
// reuses each weight tile for few tokens, and they work in tiles of 4 tokens, so a step of 5
// costs about what one of 8 does.
std::vector<std::pair<double, double>> linear_rate_curve(const std::vector<Sample>& samples,
                                                         const Fit& f, const ModelCost& c) {
  // Token counts up to 16 each have a point (the tile staircase); larger ones share a point per
  // half octave (a server's steps have every count), placed at their mean token count.
  const auto bucket = [](uint64_t t) -> uint64_t {
    return t <= 16
               ? t
               : static_cast<uint64_t>(std::lround(2 * std::log2(static_cast<double>(t)))) << 32;
  };
  struct Sums {
    double ar = 0, aa = 0, tokens = 0, n = 0;  // sum L/m x r/m, sum (L/m)^2, sum tokens, count
  };
  std::map<uint64_t, Sums> sums;
  for (const Sample& s : samples) {
    const StepWork& w = s.work;
    const double linear = step_linear_flops(c, w);
    const double rest = step_attention_flops(c, w) * f.s_per_attention;
    const double a = linear / s.seconds, r = (s.seconds - rest) / s.seconds;
    Sums& b = sums[bucket(w.tokens)];
    b.ar += a * r;
    b.aa += a * a;
    b.tokens += static_cast<double>(w.tokens);
    b.n += 1;
  }
  std::vector<std::pair<double, double>> curve;
  for (const auto& [key, b] : sums) {  // keys grow with the token count
    const double s_per_flop = b.ar / b.aa;
    if (s_per_flop > 0) curve.emplace_back(b.tokens / b.n, 1.0 / s_per_flop);
  }
  return curve;
}

std::string device_file_or_default(const std::string& path) {
  if (!path.empty()) return path;
  auto dir = find_data_dir();
  if (!dir.is_ok()) die(dir.status().message());
  return *dir + "/devices/cpu.json";
}

// The steps of a step log (kvserve serve --step-log, engine/step_log.h) as samples: what each
// step computed and how long it took; kind "prefill" (every chunk a prompt chunk), "mixed" or
// "decode".
void read_step_log(const std::string& path, std::vector<Sample>* out) {
  std::ifstream in(path);
  if (!in) die("cannot open " + path);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto bad = [&] { die(path + ":" + std::to_string(lineno) + ": not a step log line"); };
    if (j.is_discarded() || !j.is_object() || !j.contains("chunks") || !j["chunks"].is_array() ||
        !j.contains("start_s") || !j["start_s"].is_number() || !j.contains("end_s") ||
        !j["end_s"].is_number())
      bad();
    StepWork w;
    uint32_t prefill = 0;
    for (const auto& c : j["chunks"]) {
      if (!c.is_array() || c.size() != 5 ||
          !std::all_of(c.begin(), c.end(), [](const auto& v) { return v.is_number_unsigned(); }))
        bad();
      w.add_chunk(c[1].get<uint32_t>(), c[2].get<uint32_t>(), c[4].get<int>() == 1);
      prefill += c[1].get<uint32_t>() < c[3].get<uint32_t>() ? 1 : 0;
    }
    const double seconds = j["end_s"].get<double>() - j["start_s"].get<double>();
    if (w.tokens == 0 || !(seconds > 0)) continue;
    out->push_back({prefill == 0             ? "decode"
                    : prefill == w.sequences ? "prefill"
                                             : "mixed",
                    w, seconds});
  }
  if (out->empty()) die(path + ": no steps");
}

// --score: the device file's step times for every step of a step log (serve --step-log), next to
// the measured ones, by kind of step and number of sequences.
int score(const Options& o) {
  auto path = resolve_model_path(o.model);
  if (!path.is_ok()) die(path.status().message());
  auto planner_model = load_planner_model(*path);
  if (!planner_model.is_ok()) die(planner_model.status().message());
  auto spec = load_model(*path);
  if (!spec.is_ok()) die(spec.status().message());
  auto pool =
      plan_kv_pool(spec->spec.kv_shape(KvDtype::kF16, KvDtype::kF16), uint64_t{1} << 30, 16);
  if (!pool.is_ok()) die(pool.status().message());
  auto cost = model_cost(*planner_model, *planner_model->weight_bytes, *pool, 1, false);
  if (!cost.is_ok()) die(cost.status().message());
  const std::string device_path = device_file_or_default(o.device_file);
  auto device = read_device_file(device_path);
  if (!device.is_ok()) die(device.status().message());

  struct Row {
    int steps = 0;
    double measured = 0, predicted = 0, err2 = 0;
  };
  std::map<std::string, Row> rows;
  std::vector<Sample> steps;
  read_step_log(o.score, &steps);
  for (const Sample& s : steps) {
    const double predicted = step_time(*device, *cost, s.work, 0).total_s;
    const uint32_t n = s.work.sequences;
    const char* seqs = n == 1 ? "1" : n <= 3 ? "2-3" : n <= 7 ? "4-7" : n <= 15 ? "8-15" : "16+";
    for (const std::string& key : {s.kind + " " + seqs, std::string("all")}) {
      Row& r = rows[key];
      ++r.steps;
      r.measured += s.seconds;
      r.predicted += predicted;
      r.err2 += (predicted - s.seconds) * (predicted - s.seconds) / (s.seconds * s.seconds);
    }
  }
  std::printf(
      "%s with %s\n| steps | count | measured s | predicted s | predicted / measured | "
      "rms error |\n|---|---|---|---|---|---|\n",
      o.score.c_str(), device_path.c_str());
  for (const auto& [key, r] : rows)
    std::printf("| %s | %d | %.3f | %.3f | %.3f | %.1f%% |\n", key.c_str(), r.steps, r.measured,
                r.predicted, r.predicted / r.measured, 100 * std::sqrt(r.err2 / r.steps));
  return 0;
}

int run(const Options& o) {
  if (!o.score.empty()) return score(o);
  auto path = resolve_model_path(o.model);
  if (!path.is_ok()) die(path.status().message());
  auto loaded = load_model(*path);
  if (!loaded.is_ok()) die(loaded.status().message());
  LoadedModel& m = *loaded;
  EngineConfig cfg;
  cfg.kv_cache_memory = uint64_t{1} << 30;
  cfg.threads = o.threads;
  cfg.max_num_batched_tokens = 512;  // kvserve serve's default
  cfg.max_num_seqs = 64;
  cfg.model_fingerprint = m.fingerprint;
  cfg.prefix_hash_seed = 1;
  auto engine = Engine::create(*m.model, cfg);
  if (!engine.is_ok()) die(engine.status().message());
  Engine& e = **engine;

  auto planner_model = load_planner_model(*path);
  if (!planner_model.is_ok()) die(planner_model.status().message());
  auto pool = plan_kv_pool(m.spec.kv_shape(cfg.k_dtype, cfg.v_dtype), cfg.kv_cache_memory, 16);
  if (!pool.is_ok()) die(pool.status().message());
  auto cost = model_cost(*planner_model, *planner_model->weight_bytes, *pool, 1, false);
  if (!cost.is_ok()) die(cost.status().message());

  std::vector<Sample> samples;
  double bandwidth = 0;
  const auto t_start = Clock::now();
  if (!o.refit.empty()) {
    read_samples(o.refit, &samples, &bandwidth);
  } else if (!o.fit_step_log.empty()) {
    read_step_log(o.fit_step_log, &samples);
  } else {
    std::fprintf(stderr, "sim_calibrate: %s, %d threads\n", path->c_str(), e.num_threads());
    measure(e, m.spec.vocab_size, &samples);
    ThreadPool threads(e.num_threads());
    bandwidth = read_bandwidth(threads);
    // The raw measurements first, so that a failed fit can be redone with --refit.
    if (!o.samples.empty()) write_samples(o.samples, samples, bandwidth, nullptr);
  }
  // A server's steps have short contexts, so they say little about attention: the attention rate
  // and the bandwidth come from the engine's calibration (--device-file), the curve from the log.
  DeviceModel base;
  if (!o.fit_step_log.empty()) {
    auto b = read_device_file(device_file_or_default(o.device_file));
    if (!b.is_ok()) die(b.status().message());
    base = std::move(b).value();
    bandwidth = base.memory_bandwidth;
    if (!(base.attention_flops > 0)) die("--fit-step-log: the device file has no attention rate");
  }
  const Fit f = o.fit_step_log.empty()
                    ? fit(samples, *cost, bandwidth)
                    : Fit{0, 0, 1.0 / base.peak_flops, 1.0 / base.attention_flops};
  if (!o.samples.empty() && !o.fit_step_log.empty())
    write_samples(o.samples, samples, bandwidth, nullptr);
  DeviceModel d;
  d.name = "cpu";
  d.description = "this machine's CPU (" + cpu_model_name() + ", " +
                  std::to_string(e.num_threads()) + " threads), calibrated by bench/sim_calibrate";
  d.peak_flops = 1.0 / f.s_per_linear;
  d.attention_flops = 1.0 / f.s_per_attention;
  d.memory_bandwidth = bandwidth;
  d.step_overhead_s = f.step_overhead;
  d.sequence_overhead_s = f.seq_overhead;
  d.linear_flops_by_tokens = linear_rate_curve(samples, f, *cost);
  if (!d.linear_flops_by_tokens.empty()) d.step_overhead_s = d.sequence_overhead_s = 0;

  // Error of the model (the simulator's own step_time, with the curve) per kind of step.
  const std::function<double(const StepWork&)> predicted = [&](const StepWork& w) {
    return step_time(d, *cost, w, 0).total_s;
  };
  std::string report = "{";
  for (const char* kind : {"prefill", "prefill (chunked)", "mixed", "decode"}) {
    double err2 = 0, worst = 0, measured = 0, total_predicted = 0;
    int n = 0;
    for (const Sample& s : samples) {
      if (s.kind != kind) continue;
      const double p = predicted(s.work);
      const double rel = (p - s.seconds) / s.seconds;
      err2 += rel * rel;
      worst = std::max(worst, std::fabs(rel));
      measured += s.seconds;
      total_predicted += p;
      ++n;
    }
    if (n == 0) continue;
    std::fprintf(stderr,
                 "  %-18s %3d steps: rms error %5.1f%%, worst %5.1f%%, total %.3f s measured, "
                 "%.3f s predicted\n",
                 kind, n, 100 * std::sqrt(err2 / n), 100 * worst, measured, total_predicted);
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s\"%s\": {\"steps\": %d, \"rms_rel_error\": %.4f, \"max_rel_error\": %.4f}",
                  report.size() > 1 ? ", " : "", kind, n, std::sqrt(err2 / n), worst);
    report += buf;
  }
  report += "}";
  if (!o.samples.empty()) write_samples(o.samples, samples, bandwidth, &predicted);

  // A refit says which samples it fitted instead of how long measuring took.
  const std::string origin =
      o.refit.empty() && o.fit_step_log.empty()
          ? "\"calibration_seconds\": " +
                std::to_string(std::chrono::duration<double>(Clock::now() - t_start).count())
          : "\"refit_of\": " + nlohmann::json(o.refit.empty() ? o.fit_step_log : o.refit).dump();
  char extra[1536];
  std::snprintf(extra, sizeof extra,
                "{\"cpu_model\": \"%s\", \"threads\": %d, \"hardware_threads\": %d, "
                "\"calibration_model\": \"%s\", \"calibration_steps\": %zu, %s, \"fit\": %s}",
                cpu_model_name().c_str(), e.num_threads(), ThreadPool::hardware_threads(),
                std::filesystem::path(*path).filename().string().c_str(), samples.size(),
                origin.c_str(), report.c_str());
  const std::string json = device_model_json(d, extra);
  std::fprintf(stderr,
               "  linear %.1f GFLOP/s, attention %.1f GFLOP/s, read bandwidth %.1f GB/s, "
               "%.2f ms/step + %.3f ms/sequence\n",
               d.peak_flops / 1e9, d.attention_flops / 1e9, bandwidth / 1e9,
               d.step_overhead_s * 1e3, d.sequence_overhead_s * 1e3);
  std::string curve;
  for (const auto& [tokens, rate] : d.linear_flops_by_tokens)
    curve += " " + std::to_string(static_cast<int>(tokens)) + ":" +
             std::to_string(static_cast<int>(std::lround(rate / 1e9)));
  std::fprintf(stderr, "  linear GFLOP/s by tokens in the step:%s\n", curve.c_str());
  std::string out = o.out;
  if (out.empty()) {
    auto dir = find_data_dir();
    if (!dir.is_ok()) die(dir.status().message());
    out = *dir + "/devices/cpu.json";
  }
  std::ofstream f_out(out);
  f_out << json;
  if (!f_out) die("cannot write " + out);
  std::fprintf(stderr, "sim_calibrate: wrote %s\n", out.c_str());
  return 0;
}

}  // namespace
}  // namespace kvs

int main(int argc, char** argv) {
  kvs::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) kvs::die(a + " needs a value");
      return argv[++i];
    };
    if (a == "-m" || a == "--model") {
      o.model = next();
    } else if (a == "-t" || a == "--threads") {
      o.threads = std::stoi(next());
    } else if (a == "--out") {
      o.out = next();
    } else if (a == "--samples") {
      o.samples = next();
    } else if (a == "--refit") {
      o.refit = next();
    } else if (a == "--fit-step-log") {
      o.fit_step_log = next();
    } else if (a == "--score") {
      o.score = next();
    } else if (a == "--device-file") {
      o.device_file = next();
    } else {
      kvs::die(
          "usage: sim_calibrate [-m MODEL.gguf] [-t THREADS] [--out FILE] [--samples CSV] [--refit "
          "CSV] [--fit-step-log STEP_LOG] | --score STEP_LOG [--device-file FILE]");
    }
  }
  return kvs::run(o);
}
