// End-to-end engine step on one GPU: strata's ModelRunner over the CUDA plugin (libstrata_cuda.so,
// loaded through the normal plugin loader) on Llama-3.1-8B and Qwen3-30B-A3B shapes with random
// bf16 weights (RandomWeights: generated tensor by tensor on the host, no checkpoint on disk).
//
// Decode: batch 1, 8, 64 sequences, each with 2,048 tokens of context, one new token each.
//   - KV fill: each of the 64 sequences' 2,048 tokens is prefilled for real (ModelRunner::Forward,
//     its own random prompt, 4 sequences per call), into its own blocks (a seeded shuffle of the
//     pool). Batch b decodes sequences 0..b-1, each with its own next token.
//   - Every timed step decodes at position 2,048 (the same slot each time), so the context is
//     exactly 2,049 tokens in every step. Per-step wall time of ModelRunner::Forward (which
//     returns only after the logits are on the host), after 3 warm-up steps: median and p90.
//   - Roofline = (weight bytes the step reads + KV bytes read) / device-copy bandwidth measured
//     in the same run (bench_util.h: cudaMemcpy D2D of 2 GiB, read + write bytes / s, the
//     denominator of every CUDA table). Weight bytes: all weights but the embedding table (of
//     which the step reads `batch` rows) and, for MoE layers, only the experts the step routes
//     to. Those are **counted**: one extra (untimed) step runs with the plugin's moe_experts
//     (and moe_route_experts) wrapped to copy topk_ids to the host and count distinct experts per
//     layer; the expected count under uniform routing, E (1 - (1 - k/E)^batch), is printed beside
//     it with the roofline it would give (with a prompt per sequence the two agree; sequences
//     sharing one KV made random-weight tokens route to a handful of experts:
//     plugins/cuda/NOTES.md). KV bytes: batch x 2,049 x layers x 2 x kv_heads x head_dim x 2.
//   - What the host does with the logits: the runner copies the [batch, vocab] bf16 logits to
//     the host and converts them to fp32 (timed separately here, same sizes), then the engine
//     samples each row on the host with strata::Sample (timed here: greedy, and temperature 0.7
//     + top-p 0.9). On-device sampling removes both from the step; the ratio without the
//     logits hand-off, (step - D2H+fp32) / roofline, is printed too, and so is the step as the
//     engine runs it when the plugin has the `sample` entry (ModelRunner::ForwardSampled: ids
//     come back instead of logits), greedy and temperature 0.7 + top-p 0.9.
//   - Per-op profile: 5 more steps with every ABI op followed by a stream synchronize (see
//     OpProfile): ms and calls per step for each op, and the GB/s gemm reaches on its weights.
// Prefill: one sequence of 2,048 and of 8,192 tokens, one Forward each (logits of the last
// token only), tokens/s from the median of 3 runs after a warm-up.
//
//     decode_step_bench [--quick] [--steps N] [--model llama3.1-8b|qwen3-30b-a3b]
//                       [--plugin PATH] [--batches 1,8,64] [--no-prefill] [--cuda-profile]
//                       [--chain-costs] [--without ENTRY,...] [--masks]
// --without hides optional fused entries of the plugin (attention_prologue, gemm_silu_mul,
// moe_route_experts), so the engine runs the ops they stand for: a fused entry's effect on the
// served step, side by side with the same plugin.
// --cuda-profile brackets the graph-replayed greedy steps (only those) with cudaProfilerStart /
// cudaProfilerStop, for `nsys profile --capture-range=cudaProfilerApi` or
// `ncu --profile-from-start off`: a kernel-level view of the step as served.
// --chain-costs times the graph-replayed step again without each per-layer op call in turn
// (ChainCosts): what each op costs the step where it sits in the kernel chain.
// --masks times constrained decoding (ReportMasked): the sampled step with a JSON schema's token
// mask on every row (computed on the host from the preset tokenizer's vocabulary while the
// device runs the step, applied by the plugin's mask_logits) against the same step without.
// prints one line per point and "CSV,..." lines for scripts/bench_cuda.sh.
#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_util.h"
#include "strata/common/half.h"
#include "strata/engine/engine.h"
#include "strata/engine/model_runner.h"
#include "strata/engine/presets.h"
#include "strata/engine/sampling.h"
#include "strata/engine/weight_source.h"
#include "strata/grammar/token_mask.h"
#include "strata/text/tokenizer.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kBlockSize = 16;
constexpr int kContext = 2048;
constexpr int kMaxBatch = 64;
constexpr int kWarmup = 3;

// The real models' shapes: the built-in real-shaped presets (engine/src/presets.cc).
struct ModelShape {
  const char* name;
  const char* preset;
};
constexpr ModelShape kModels[] = {{"llama3.1-8b", "llama-3.1-8b-shape"},
                                  {"qwen3-30b-a3b", "qwen3-30b-a3b-shape"}};

struct Options {
  bool quick = false;
  int steps = 30;
  std::string model;  // empty: all
  std::string plugin = "cuda";
  std::vector<int> batches;  // empty: 1, 8, 64 (1, 64 with --quick)
  bool prefill = true;
  bool cuda_profile = false;
  bool chain_costs = false;
  std::vector<std::string> without;  // optional entries hidden from the engine
  bool masks = false;                 // --masks
};

bool g_cuda_profile = false;  // --cuda-profile
bool g_chain_costs = false;   // --chain-costs
bool g_masks = false;         // --masks
const char* g_preset = "";    // the model being run's preset (--masks reads its tokenizer)

[[noreturn]] void Die(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "decode_step_bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

template <typename T>
T OrDie(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(what, v.status());
  return *std::move(v);
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// --- Counting the experts a step routes to --------------------------------------------------
// The plugin's table with moe_experts wrapped: while `enabled`, each call's topk_ids are copied
// to the host after the real call and their distinct ids counted. Off, the wrapper only
// forwards (one indirect call), so timed steps run the plugin's own code.
struct ExpertCounter {
  const strata_plugin_api_v1* real = nullptr;
  bool enabled = false;
  int64_t calls = 0;
  double distinct = 0;
};
ExpertCounter g_counter;

// Counts the distinct experts of one call's routing (copied to the host) while enabled.
strata_status CountExperts(strata_backend b, strata_stream s, const strata_tensor* topk_ids) {
  if (!g_counter.enabled) return STRATA_OK;
  const strata_plugin_api_v1& api = *g_counter.real;
  const int64_t rows = topk_ids->shape[0], k = topk_ids->shape[1];
  const int64_t stride = topk_ids->row_stride ? topk_ids->row_stride : k;
  std::vector<int32_t> ids(rows * stride);
  strata_status st = api.copy_d2h(b, s, ids.data(), topk_ids->data, ids.size() * sizeof(int32_t));
  if (st == STRATA_OK) st = api.stream_synchronize(b, s);
  if (st != STRATA_OK) return st;
  std::set<int32_t> distinct;
  for (int64_t r = 0; r < rows; ++r) distinct.insert(&ids[r * stride], &ids[r * stride + k]);
  g_counter.distinct += static_cast<double>(distinct.size());
  ++g_counter.calls;
  return STRATA_OK;
}

strata_status CountingMoeExperts(strata_backend b, strata_stream s, const strata_tensor* x,
                                 const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                                 const strata_tensor* w_gate_up, const strata_tensor* w_down,
                                 strata_tensor* out) {
  const strata_status st =
      g_counter.real->moe_experts(b, s, x, topk_weights, topk_ids, w_gate_up, w_down, out);
  return st == STRATA_OK ? CountExperts(b, s, topk_ids) : st;
}

strata_status CountingMoeRouteExperts(strata_backend b, strata_stream s, const strata_tensor* x,
                                      const strata_tensor* logits, int32_t top_k,
                                      int32_t renormalize, strata_tensor* topk_weights,
                                      strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                                      const strata_tensor* w_down, strata_tensor* out) {
  const strata_status st = g_counter.real->moe_route_experts(
      b, s, x, logits, top_k, renormalize, topk_weights, topk_ids, w_gate_up, w_down, out);
  return st == STRATA_OK ? CountExperts(b, s, topk_ids) : st;
}

// --- Per-op profile of a step ------------------------------------------------------------------
// The outer table wraps every compute op and the copies: while `enabled`, each call is followed by
// a stream synchronize and its wall time (launch + host checks + device time, serialized) is
// added to the op's slot. That overstates small ops by a launch + sync each (~10-20 us), so the
// sum exceeds an unprofiled step; the difference against the unprofiled step is roughly what
// the step loses to running ops back to back without overlap (or gains from it). Off, each
// wrapper only forwards.
constexpr const char* kOpNames[] = {
    "embedding",          "rms_norm",      "gemm",      "rope",
    "silu_mul",           "gather_rows",   "kv_append", "attention_decode",
    "moe_route",          "moe_experts",   "copy_h2d",  "copy_d2h",
    "attention_prologue", "gemm_silu_mul", "sample",    "moe_route_experts"};
constexpr int kNumOps = sizeof(kOpNames) / sizeof(kOpNames[0]);

struct OpProfile {
  strata_plugin_api_v1 inner{};  // the plugin's table with the expert counter
  strata_plugin_api_v1 outer{};  // what the runner calls
  bool enabled = false;
  double ms[kNumOps] = {};
  int64_t calls[kNumOps] = {};
};
OpProfile g_profile;

// --- In-chain cost of an op (--chain-costs) ----------------------------------------------------
// What a step as replayed would save without one op: the wrappers count each op's calls within a
// step (the embedding starts a step) and leave out the calls of op `slot` whose index i in
// [from, limit) has (i - from) % period == phase (e.g. from 0, period 3, phase 1: the second gemm
// of each layer; from = 3 x layers: the head's gemm after the layers). `stale` makes
// the next graph_launch answer UNSUPPORTED, so the runner drops the graph and records the step
// again with the skip applied. Outputs are garbage meanwhile; only the timing is read.
struct ChainSkip {
  int slot = -1;  // -1: nothing left out
  int64_t period = 1, phase = 0, from = 0, limit = 0;
  int64_t index[kNumOps] = {};  // calls of each op so far in this step
  int64_t total[kNumOps] = {};  // calls of each op so far
  bool stale = false;
};
ChainSkip g_skip;

// True if this call of op `slot` is to be left out; counts it either way.
bool SkipCall(int slot) {
  if (slot == 0) std::fill(std::begin(g_skip.index), std::end(g_skip.index), 0);
  ++g_skip.total[slot];
  const int64_t i = g_skip.index[slot]++;
  return slot == g_skip.slot && i >= g_skip.from && i < g_skip.limit &&
         (i - g_skip.from) % g_skip.period == g_skip.phase;
}

strata_status (*g_real_graph_launch)(strata_backend, strata_stream, strata_graph) = nullptr;

strata_status GraphLaunch(strata_backend b, strata_stream s, strata_graph g) {
  if (g_skip.stale) {
    g_skip.stale = false;
    return STRATA_ERR_UNSUPPORTED;  // the runner records the step again
  }
  return g_real_graph_launch(b, s, g);
}

template <auto Member, int Slot>
struct Timed;

template <typename... A,
          strata_status (*strata_plugin_api_v1::*Member)(strata_backend, strata_stream, A...),
          int Slot>
struct Timed<Member, Slot> {
  static strata_status Call(strata_backend b, strata_stream s, A... args) {
    if (SkipCall(Slot)) return STRATA_OK;
    if (!g_profile.enabled) return (g_profile.inner.*Member)(b, s, args...);
    const auto t0 = Clock::now();
    strata_status st = (g_profile.inner.*Member)(b, s, args...);
    if (st == STRATA_OK) st = g_profile.inner.stream_synchronize(b, s);
    g_profile.ms[Slot] += Seconds(t0) * 1e3;
    ++g_profile.calls[Slot];
    return st;
  }
};

template <auto Member, int Slot>
void Wrap() {
  if (g_profile.inner.*Member != nullptr) g_profile.outer.*Member = &Timed<Member, Slot>::Call;
}

std::shared_ptr<Plugin> LoadInstrumentedPlugin(const std::string& name,
                                               const std::vector<std::string>& without) {
  static std::shared_ptr<Plugin> real;  // keeps the library loaded for the table's lifetime
  real = OrDie(LoadPlugin(name), "loading plugin " + name);
  g_counter.real = &real->api();
  g_profile.inner = real->api();
  for (const std::string& e : without) {
    if (e == "attention_prologue") g_profile.inner.attention_prologue = nullptr;
    if (e == "gemm_silu_mul") g_profile.inner.gemm_silu_mul = nullptr;
    if (e == "moe_route_experts") g_profile.inner.moe_route_experts = nullptr;
  }
  if (g_profile.inner.moe_experts != nullptr) g_profile.inner.moe_experts = CountingMoeExperts;
  if (g_profile.inner.moe_route_experts != nullptr) {
    g_profile.inner.moe_route_experts = CountingMoeRouteExperts;
  }
  g_profile.outer = g_profile.inner;
  using Api = strata_plugin_api_v1;
  Wrap<&Api::embedding, 0>();
  Wrap<&Api::rms_norm, 1>();
  Wrap<&Api::gemm, 2>();
  Wrap<&Api::rope, 3>();
  Wrap<&Api::silu_mul, 4>();
  Wrap<&Api::gather_rows, 5>();
  Wrap<&Api::kv_append, 6>();
  Wrap<&Api::attention_decode, 7>();
  Wrap<&Api::moe_route, 8>();
  Wrap<&Api::moe_experts, 9>();
  Wrap<&Api::copy_h2d, 10>();
  Wrap<&Api::copy_d2h, 11>();
  Wrap<&Api::attention_prologue, 12>();
  Wrap<&Api::gemm_silu_mul, 13>();
  Wrap<&Api::sample, 14>();
  Wrap<&Api::moe_route_experts, 15>();
  if (g_profile.inner.graph_launch != nullptr) {
    g_real_graph_launch = g_profile.inner.graph_launch;
    g_profile.outer.graph_launch = GraphLaunch;
  }
  return OrDie(Plugin::FromTable(&g_profile.outer, real->origin() + " (instrumented)"),
               "wrapping plugin");
}

// --- Bytes a decode step must read -----------------------------------------------------------
struct StepBytes {
  double weights = 0;  // bytes of weights read, with `experts` experts per MoE layer
  double kv = 0;
  double all_weights = 0;  // every weight, all experts and the embedding (the runner's total)
  double gemm = 0;         // the weights `gemm` reads: projections, dense MLPs, routers, LM head
};

// `w` and `kv`: bytes per weight and per KV element (2 for the CUDA plugin's bf16).
StepBytes CountBytes(const ModelConfig& c, int batch, int context, double experts, double w,
                     double kv) {
  const double h = c.hidden_size, d = c.head_dim, hq = c.num_heads, hk = c.num_kv_heads;
  const double attn = (hq + 2 * hk) * d * h + h * hq * d + 2 * h + (c.qk_norm ? 2 * d : 0);
  const double attn_gemm = (hq + 2 * hk) * d * h + h * hq * d;
  double layers = 0, all_layers = 0, gemm = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) {
      layers += attn + 3.0 * h * c.intermediate_size;
      all_layers += attn + 3.0 * h * c.intermediate_size;
      gemm += attn_gemm + 3.0 * h * c.intermediate_size;
      continue;
    }
    const double expert = 3.0 * h * c.moe_intermediate_size, router = c.num_experts * h;
    layers += attn + router + experts * expert;
    all_layers += attn + router + c.num_experts * expert;
    gemm += attn_gemm + router;
  }
  // The LM head (the embedding when tied) is read whole; of the embedding only `batch` rows.
  const double vocab_rows = double(c.vocab_size) * h;
  StepBytes b;
  b.weights = w * (layers + h + vocab_rows + batch * h);
  b.all_weights = w * (all_layers + h + vocab_rows * (c.tie_word_embeddings ? 1 : 2));
  b.gemm = w * (gemm + vocab_rows);
  b.kv = kv * batch * double(context + 1) * c.num_layers * 2 * hk * d;
  return b;
}

// E (1 - (1 - k/E)^batch): distinct experts per layer when every token picks k of E uniformly.
double ExpectedExperts(const ModelConfig& c, int batch) {
  if (!c.is_moe()) return 0;
  const double e = c.num_experts, k = c.num_experts_per_tok;
  return e * (1.0 - std::pow(1.0 - k / e, batch));
}

// --- The runner and its KV ---------------------------------------------------------------------
struct Setup {
  ModelConfig config;
  std::unique_ptr<ModelRunner> runner;
  std::vector<std::vector<BlockId>> tables;  // per sequence, blocks for kContext + 1 tokens
  std::vector<int32_t> next_tokens;          // per sequence
  double load_s = 0, fill_s = 0;
};

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = dist(rng);
  return t;
}

// Prefills every sequence's kContext tokens (its own random prompt), kFillBatch sequences per
// Forward. Distinct prompts matter: with random weights, a batch whose sequences shared one KV
// would see nearly the same attention output for every token, and route to the same experts.
constexpr int kFillBatch = 4;

double FillKv(Setup& s) {
  const auto start = Clock::now();
  std::vector<std::vector<int32_t>> prompts;
  for (int q = 0; q < kMaxBatch; ++q) {
    prompts.push_back(RandomTokens(kContext, s.config.vocab_size, 1000 + q));
  }
  for (int first = 0; first < kMaxBatch; first += kFillBatch) {
    std::vector<ForwardSeq> seqs;
    for (int q = first; q < std::min(kMaxBatch, first + kFillBatch); ++q) {
      seqs.push_back({prompts[q], 0, s.tables[q], ForwardSeq::Logits::kNone});
    }
    OrDie(s.runner->Forward(seqs), "kv prefill");
  }
  return Seconds(start);
}

Setup Prepare(const ModelShape& m, const std::shared_ptr<Plugin>& plugin) {
  Setup s;
  s.config = OrDie(PresetConfig(m.preset), m.name);
  const int per_seq = (kContext + 1 + kBlockSize - 1) / kBlockSize;
  RunnerOptions opts;
  opts.block_size = kBlockSize;
  opts.num_kv_blocks = kMaxBatch * per_seq;  // also >= the 8k prefill's 513 blocks
  const auto start = Clock::now();
  s.runner = OrDie(ModelRunner::Create(plugin, s.config, RandomWeights(s.config, 1), opts),
                   std::string("building ") + m.name);
  s.load_s = Seconds(start);
  std::vector<BlockId> perm(opts.num_kv_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  for (int q = 0; q < kMaxBatch; ++q) {
    s.tables.emplace_back(perm.begin() + q * per_seq, perm.begin() + (q + 1) * per_seq);
  }
  s.next_tokens = RandomTokens(kMaxBatch, s.config.vocab_size, 11);
  s.fill_s = FillKv(s);
  return s;
}

double WeightSize(const Setup& s) { return DtypeSize(s.runner->backend().info().weight_dtype); }
double KvSize(const Setup& s) { return DtypeSize(s.runner->kv_cache().dtype); }

// --- Decode -------------------------------------------------------------------------------------
struct Percentiles {
  double median = 0, p90 = 0;
};

Percentiles Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 9 / 10)]};
}

// The runner's logits hand-off at this batch: the D2H copy of [batch, vocab] activations and
// their conversion to fp32, as ModelRunner::RunHead does it. Median ms of 10.
double LogitsToHostMs(ModelRunner& r, int batch) {
  Backend& be = r.backend();
  const size_t n = size_t(batch) * r.config().vocab_size;
  const strata_dtype act = be.info().act_dtype;
  const bool f32 = act == STRATA_DTYPE_F32;
  DeviceBuffer buf = OrDie(DeviceBuffer::Allocate(&be, n * (f32 ? 4 : 2)), "alloc");
  std::vector<uint16_t> half(n);
  std::vector<float> out(n);
  std::vector<double> ms;
  for (int rep = 0; rep < 10; ++rep) {
    const auto t0 = Clock::now();
    if (f32) {
      if (auto st = be.CopyToHost(out.data(), buf.data(), n * 4); !st.ok()) Die("d2h", st);
    } else {
      if (auto st = be.CopyToHost(half.data(), buf.data(), n * 2); !st.ok()) Die("d2h", st);
      for (size_t j = 0; j < n; ++j) {
        out[j] = act == STRATA_DTYPE_BF16 ? Bf16ToFloat(half[j]) : F16ToFloat(half[j]);
      }
    }
    ms.push_back(Seconds(t0) * 1e3);
  }
  return Summarize(ms).median;
}

// Host sampling of every row of `logits` with the engine's sampler: ms per step, median of 3.
double SampleMs(const std::vector<float>& logits, int vocab, const SamplingParams& params) {
  const size_t rows = logits.size() / vocab;
  std::vector<double> ms;
  std::vector<float> row(vocab);
  for (int rep = 0; rep < 3; ++rep) {
    Rng rng(42 + rep);
    double total = 0;
    for (size_t r = 0; r < rows; ++r) {
      std::copy_n(logits.begin() + r * vocab, vocab, row.begin());
      const auto t0 = Clock::now();
      SampleResult res = Sample(row, params, {}, {}, rng);
      total += Seconds(t0) * 1e3;
      if (res.token < 0 || res.token >= vocab) std::abort();
    }
    ms.push_back(total);
  }
  return Summarize(ms).median;
}

// One decode token for each of sequences 0..batch-1, at position kContext (every timed step
// decodes the same position, so every call sees the same KV).
std::vector<ForwardSeq> DecodeSeqs(Setup& s, int batch) {
  std::vector<ForwardSeq> seqs(batch);
  for (int q = 0; q < batch; ++q) {
    seqs[q] = {std::span(&s.next_tokens[q], 1), kContext, s.tables[q], ForwardSeq::Logits::kLast};
  }
  return seqs;
}

struct DecodePoint {
  Percentiles step_ms;
  double experts = 0;  // distinct experts per MoE layer, counted over one step
  std::vector<float> logits;
};

DecodePoint TimeDecode(Setup& s, int batch, int steps) {
  const std::vector<ForwardSeq> seqs = DecodeSeqs(s, batch);
  DecodePoint p;
  for (int i = 0; i < kWarmup; ++i) OrDie(s.runner->Forward(seqs), "decode warm-up");
  g_counter.calls = 0;
  g_counter.distinct = 0;
  g_counter.enabled = true;
  p.logits = OrDie(s.runner->Forward(seqs), "decode (counting experts)");
  g_counter.enabled = false;
  p.experts = g_counter.calls ? g_counter.distinct / g_counter.calls : 0;
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    OrDie(s.runner->Forward(seqs), "decode");
    ms.push_back(Seconds(t0) * 1e3);
  }
  p.step_ms = Summarize(ms);
  return p;
}

// Greedy ids of one sampled decode step (every sequence at the same position as the timed
// steps, so every call sees the same KV and must give the same ids).
std::vector<int32_t> GreedyIds(Setup& s, int batch) {
  const std::vector<ForwardSeq> seqs = DecodeSeqs(s, batch);
  strata_sample_params g{};
  g.top_p = 1.0f, g.num_logprobs = -1;
  std::vector<strata_sample_params> rows(batch, g);
  std::vector<int32_t> ids;
  for (const SampleResult& r : OrDie(s.runner->ForwardSampled(seqs, rows), "greedy ids")) {
    ids.push_back(r.token);
  }
  return ids;
}

// The step as the engine runs it with the plugin's `sample` entry (ModelRunner::ForwardSampled:
// ids come back instead of logits): median ms per step, every row with `params` and a fresh
// uniform draw.
double TimeSampledDecode(Setup& s, int batch, int steps, strata_sample_params params) {
  const std::vector<ForwardSeq> seqs = DecodeSeqs(s, batch);
  std::vector<strata_sample_params> rows(batch, params);
  Rng rng(7);
  for (int i = 0; i < kWarmup; ++i) OrDie(s.runner->ForwardSampled(seqs, rows), "sampled warm-up");
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    for (auto& r : rows) r.uniform = params.temperature > 0 ? rng.Uniform() : 0.0;
    const auto t0 = Clock::now();
    OrDie(s.runner->ForwardSampled(seqs, rows), "sampled decode");
    ms.push_back(Seconds(t0) * 1e3);
  }
  return Summarize(ms).median;
}

// --- Constrained decoding (--masks) ---------------------------------------------------------------
// A JSON schema with nested objects, arrays and enums, long enough that a row spends many steps
// inside it (each row restarts the schema when it completes).
constexpr char kMaskSchema[] = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":24},
  "age":{"type":"integer"},
  "address":{"type":"object","properties":{"street":{"type":"string","maxLength":32},
    "zip":{"type":"string","pattern":"[0-9]{5}"}},"required":["street","zip"]},
  "tags":{"type":"array","items":{"enum":["red","green","blue","cyan"]},"maxItems":6},
  "scores":{"type":"array","items":{"type":"number"},"maxItems":8},
  "ok":{"type":"boolean"}},
  "required":["name","age","address","tags","scores","ok"],"additionalProperties":false})";

// The schema's token masker over the model preset's own tokenizer (the vocabulary the engine
// would mask: ids past the tokenizer's and special tokens never allowed), as Engine builds it.
// A fresh masker each call (no state's mask computed yet); the vocabulary is built once.
std::shared_ptr<grammar::TokenMasker> SchemaMasker(const char* preset, const ModelConfig& c) {
  static std::string built_for;
  static std::shared_ptr<const grammar::TokenVocabulary> vocab;
  if (built_for != preset) {
    const std::string dir = "/tmp/decode_step_bench_" + std::string(preset);
    if (auto st = WritePreset(preset, dir); !st.ok()) Die("writing the preset's tokenizer", st);
    auto tok = OrDie(Tokenizer::FromFile(dir + "/tokenizer.json"), "tokenizer");
    vocab = Engine::MaskVocabulary(*tok, c.vocab_size);
    built_for = preset;
  }
  grammar::MaskerCache cache(vocab);
  return OrDie(cache.Get({GuidedDecoding::Kind::kJsonSchema, kMaskSchema}), "schema");
}

// Sampled decode steps (graph replay when the plugin has it, as the engine runs them) with every
// row constrained by `masker`: each step fills the rows' masks from their automata (what
// Engine::DeviceMask does: the cached mask of the state, EOS allowed where complete) while the
// device runs the forward pass, masks and samples on the device, and moves each automaton over
// its drawn id (back to the start when complete). Returns per-step ms: the first `cold` steps
// (masks met for the first time) and the `steps` after them.
struct MaskedTimes {
  std::vector<double> cold, warm;
  int64_t outside = 0;  // drawn ids the masks did not allow (must stay 0)
};
MaskedTimes TimeMaskedDecode(Setup& s, int batch, int cold, int steps, strata_sample_params params,
                             const std::shared_ptr<grammar::TokenMasker>& masker) {
  const std::vector<ForwardSeq> seqs = DecodeSeqs(s, batch);
  std::vector<strata_sample_params> rows(batch, params);
  const grammar::Grammar& g = masker->grammar();
  std::vector<int32_t> state(batch, g.start());
  const size_t words = grammar::MaskWords(s.config.vocab_size);
  StepMasks masks;
  for (int q = 0; q < batch; ++q) masks.rows.push_back(q);
  std::vector<uint32_t> last(static_cast<size_t>(batch) * words);  // the step's masks, to check
  masks.fill = [&](uint32_t* out) {
    for (int q = 0; q < batch; ++q) {
      const auto m = masker->Mask(state[q]);
      uint32_t* w = out + size_t(q) * words;
      std::copy(m->begin(), m->end(), w);
      if (g.IsAccepting(state[q])) {
        for (int32_t e : s.config.eos_token_ids) w[e >> 5] |= 1u << (e & 31);
      }
    }
    std::copy_n(out, last.size(), last.begin());
  };
  Rng rng(11);
  MaskedTimes t;
  for (int i = 0; i < cold + steps; ++i) {
    for (auto& r : rows) r.uniform = params.temperature > 0 ? rng.Uniform() : 0.0;
    const auto t0 = Clock::now();
    const auto ids = OrDie(s.runner->ForwardSampled(seqs, rows, {}, nullptr, &masks), "masked");
    // The automata move on as the engine's do after a step (counted in the step's time).
    for (int q = 0; q < batch; ++q) {
      const int32_t id = ids[q].token;
      t.outside += ((last[size_t(q) * words + (id >> 5)] >> (id & 31)) & 1u) == 0;
      const bool eos = std::find(s.config.eos_token_ids.begin(), s.config.eos_token_ids.end(),
                                 id) != s.config.eos_token_ids.end();
      const int32_t next = eos ? grammar::Grammar::kDead : masker->Advance(state[q], id);
      state[q] = next == grammar::Grammar::kDead || (g.IsAccepting(next) && !g.CanContinue(next))
                     ? g.start()
                     : next;
    }
    (i < cold ? t.cold : t.warm).push_back(Seconds(t0) * 1e3);
  }
  return t;
}

// The masked step against the same step without masks, in alternating rounds (graph replay on
// when the plugin has it): greedy and temperature 0.7 + top-p 0.9.
void ReportMasked(const char* name, const char* preset, Setup& s, int batch, int steps) {
  if (!s.runner->can_mask()) {
    std::printf("%-14s masks: the plugin has no mask_logits entry\n", name);
    return;
  }
  if (s.runner->backend().plugin().has_graphs()) {
    s.runner->set_graph_batches(RunnerOptions{}.graph_batches);
  }
  strata_sample_params g{}, t{};
  g.top_p = 1.0f, g.num_logprobs = -1;
  t = g, t.temperature = 0.7f, t.top_p = 0.9f;
  for (const auto& [label, params] : {std::pair{"greedy", g}, std::pair{"top-p 0.9", t}}) {
    std::vector<double> plain, cold, warm;
    int64_t outside = 0;
    for (int round = 0; round < 3; ++round) {
      // A fresh masker each round: its first steps meet states for the first time.
      const auto masker = SchemaMasker(preset, s.config);
      const double p = TimeSampledDecode(s, batch, steps, params);
      const MaskedTimes m = TimeMaskedDecode(s, batch, 5, steps, params, masker);
      plain.push_back(p);
      cold.insert(cold.end(), m.cold.begin(), m.cold.end());
      warm.push_back(Summarize(m.warm).median);
      outside += m.outside;
    }
    const double pm = Summarize(plain).median, wm = Summarize(warm).median;
    double cm = 0;
    for (double v : cold) cm += v / cold.size();
    std::printf(
        "%-14s decode b %2d %s: step %7.3f ms, with a JSON-schema mask on every row %7.3f ms "
        "(+%.1f%%); first 5 steps of a fresh schema (masks computed) %7.3f ms (+%.1f%%); "
        "ids outside their mask: %lld\n",
        name, batch, label, pm, wm, (wm / pm - 1) * 100, cm, (cm / pm - 1) * 100,
        static_cast<long long>(outside));
    std::printf("CSV,masked,%s,%d,%s,%.4f,%.4f,%.4f,%lld\n", name, batch, label, pm, wm, cm,
                static_cast<long long>(outside));
    std::fflush(stdout);
  }
}

// In-chain cost of each op of the graph-replayed greedy step (--chain-costs; see ChainSkip): the
// step's median without some of an op's calls (one call of each layer, the head's calls, the
// sampler, the input and output copies) against the whole step timed before and after. Ops the
// engine calls on other sequences' data (the MoE at batch > 1) route differently on the garbage
// a skip leaves, so only batch 1 reads cleanly.
void ChainCosts(const char* name, Setup& s, int batch, int steps) {
  const int64_t layers = s.config.num_layers;
  s.runner->set_graph_batches({});  // op by op, so the wrappers count one step's calls
  (void)GreedyIds(s, batch);
  int64_t calls[kNumOps];
  std::copy(std::begin(g_skip.index), std::end(g_skip.index), calls);
  s.runner->set_graph_batches(RunnerOptions{}.graph_batches);
  strata_sample_params greedy{};
  greedy.top_p = 1.0f, greedy.num_logprobs = -1;
  // Which calls a row leaves out: call `phase` of each layer's `period`, the calls after the
  // layers (the head's), or all of them; `n` per step.
  enum class Kind { kLayer, kAfter, kAll };
  struct Row {
    int slot;
    Kind kind;
    int64_t from, limit, period, phase, n;
    double ms = 0;
  };
  auto time_without = [&](const Row& r) {
    g_skip.slot = r.slot, g_skip.from = r.from, g_skip.limit = r.limit;
    g_skip.period = r.period, g_skip.phase = r.phase;
    g_skip.stale = true;  // record the step again with (or without) the skip
    return TimeSampledDecode(s, batch, steps, greedy);
  };
  const Row whole{-1, Kind::kAll, 0, 0, 1, 0, 0};
  (void)time_without(whole);  // a graph of the bucket exists before `stale` is used
  // The copies (step inputs up, ids down) happen outside the graph, before and after the
  // embedding: all of them are left out, counted over the replayed steps timed here.
  int64_t totals[kNumOps];
  std::copy(std::begin(g_skip.total), std::end(g_skip.total), totals);
  const double before = time_without(whole);
  std::vector<Row> rows;
  for (int op : {10, 11}) {
    const int64_t n = (g_skip.total[op] - totals[op]) / (kWarmup + steps);
    if (n > 0) rows.push_back({op, Kind::kAll, 0, std::numeric_limits<int64_t>::max(), 1, 0, n});
  }
  // Each per-layer call of an op (its phase within a layer), then its calls after the layers
  // (the head's), or all its calls where it runs less than once per layer (the sampler). Not the
  // embedding: it marks a step's start.
  for (int op = 1; op < kNumOps; ++op) {
    if (op == 10 || op == 11) continue;
    const int64_t period = calls[op] / layers, rest = calls[op] - period * layers;
    for (int64_t phase = 0; phase < period; ++phase) {
      rows.push_back({op, Kind::kLayer, 0, period * layers, period, phase, layers});
    }
    if (rest > 0) {
      const Kind kind = period > 0 ? Kind::kAfter : Kind::kAll;
      rows.push_back({op, kind, period * layers, calls[op], 1, 0, rest});
    }
  }
  for (Row& r : rows) r.ms = time_without(r);
  const double after = time_without(whole);
  const double base = (before + after) / 2;
  std::printf("%-14s chain b %2d: whole step %.3f ms (before %.3f, after %.3f)\n", name, batch,
              base, before, after);
  for (const Row& r : rows) {
    const double saved_us = (base - r.ms) * 1e3 / double(r.n);
    char what[64];
    if (r.kind == Kind::kLayer) {
      std::snprintf(what, sizeof(what), "call %ld of %ld per layer", long(r.phase + 1),
                    long(r.period));
    } else {
      std::snprintf(what, sizeof(what), "%s %ld call(s) %s", r.kind == Kind::kAll ? "all" : "the",
                    long(r.n), r.kind == Kind::kAll ? "of the step" : "after the layers");
    }
    std::printf("%-14s chain b %2d: without %s %s: %.3f ms, %.2f us per call\n", name, batch,
                kOpNames[r.slot], what, r.ms, saved_us);
    const char* kind = r.kind == Kind::kLayer ? "layer" : (r.kind == Kind::kAll ? "all" : "after");
    std::printf("CSV,chain,%s,%d,%s,%s,%ld,%ld,%ld,%.4f,%.4f,%.3f\n", name, batch, kOpNames[r.slot],
                kind, long(r.n), long(r.phase + 1), long(r.period), r.ms, base, saved_us);
  }
  std::fflush(stdout);
}

// Per-op wall time of a step with a synchronize after every op (see OpProfile), averaged over
// kProfileSteps steps; printed per op, with the GB/s the GEMMs reach on their weights.
constexpr int kProfileSteps = 5;

void ProfileDecode(const char* name, Setup& s, int batch, double gemm_bytes, double step_ms) {
  const std::vector<ForwardSeq> seqs = DecodeSeqs(s, batch);
  std::fill(std::begin(g_profile.ms), std::end(g_profile.ms), 0.0);
  std::fill(std::begin(g_profile.calls), std::end(g_profile.calls), 0);
  g_profile.enabled = true;
  for (int i = 0; i < kProfileSteps; ++i) OrDie(s.runner->Forward(seqs), "decode (profiled)");
  g_profile.enabled = false;
  double sum = 0;
  std::string line;
  for (int op = 0; op < kNumOps; ++op) {
    if (g_profile.calls[op] == 0) continue;
    const double ms = g_profile.ms[op] / kProfileSteps;
    const double calls = double(g_profile.calls[op]) / kProfileSteps;
    sum += ms;
    char buf[96];
    std::snprintf(buf, sizeof(buf), " %s %.3f (%.0f)", kOpNames[op], ms, calls);
    line += buf;
    std::printf("CSV,op,%s,%d,%s,%.1f,%.4f\n", name, batch, kOpNames[op], calls, ms);
  }
  std::printf("%-14s profile b %2d, ms/step (calls), synced per op:%s\n", name, batch,
              line.c_str());
  // The dense projections run in gemm and (the MLP's gate_up) in gemm_silu_mul when fused.
  const double gemm_ms = (g_profile.ms[2] + g_profile.ms[13]) / kProfileSteps;
  std::printf(
      "%-14s profile b %2d: sum %.3f ms vs unprofiled step %.3f ms; gemm weights %.0f GB/s\n", name,
      batch, sum, step_ms, gemm_bytes / (gemm_ms * 1e-3) / 1e9);
  std::printf("CSV,opsum,%s,%d,%.4f,%.4f,%.1f\n", name, batch, sum, step_ms,
              gemm_bytes / (gemm_ms * 1e-3) / 1e9);
  std::fflush(stdout);
}

struct DecodeRow {
  int batch = 0;
  Percentiles step_ms;
  StepBytes bytes;
  double experts = 0, uniform_experts = 0;
  double roof_ms = 0, uniform_roof_ms = 0;  // counted experts; uniform routing's expectation
  double d2h_ms = 0, greedy_ms = 0, top_p_ms = 0;
};

void PrintDecode(const char* name, const DecodeRow& r) {
  const double med = r.step_ms.median;
  std::printf(
      "%-14s decode b %2d ctx %d: step %7.3f ms (p90 %7.3f)  roofline %7.3f ms  ratio %5.2f  "
      "(without logits d2h+cvt %5.2f)  weights %6.2f GB  kv %5.2f GB  experts/layer %5.1f "
      "(uniform %5.1f: roofline %7.3f ms, ratio %5.2f)  logits d2h+cvt %6.3f ms  host sample "
      "greedy %7.3f ms, top-p %8.3f ms\n",
      name, r.batch, kContext, med, r.step_ms.p90, r.roof_ms, med / r.roof_ms,
      (med - r.d2h_ms) / r.roof_ms, r.bytes.weights / 1e9, r.bytes.kv / 1e9, r.experts,
      r.uniform_experts, r.uniform_roof_ms, med / r.uniform_roof_ms, r.d2h_ms, r.greedy_ms,
      r.top_p_ms);
  std::printf(
      "CSV,step,%s,%d,%d,%.4f,%.4f,%.4f,%.3f,%.4f,%.4f,%.2f,%.2f,%.4f,%.3f,%.4f,%.3f,%.4f,%.4f\n",
      name, r.batch, kContext, med, r.step_ms.p90, r.roof_ms, med / r.roof_ms,
      r.bytes.weights / 1e9, r.bytes.kv / 1e9, r.experts, r.uniform_experts, r.uniform_roof_ms,
      med / r.uniform_roof_ms, r.d2h_ms, (med - r.d2h_ms) / r.roof_ms, r.greedy_ms, r.top_p_ms);
  std::fflush(stdout);
}

void ReportDecode(const char* name, Setup& s, int batch, int steps, double copy_gbs) {
  const ModelConfig& c = s.config;
  const DecodePoint p = TimeDecode(s, batch, steps);
  DecodeRow r;
  r.batch = batch;
  r.step_ms = p.step_ms;
  r.experts = c.is_moe() ? p.experts : 0;
  r.uniform_experts = ExpectedExperts(c, batch);
  auto roofline_ms = [&](const StepBytes& b) {
    return (b.weights + b.kv) / (copy_gbs * 1e9) * 1e3;
  };
  r.bytes = CountBytes(c, batch, kContext, r.experts, WeightSize(s), KvSize(s));
  r.roof_ms = roofline_ms(r.bytes);
  r.uniform_roof_ms =
      roofline_ms(CountBytes(c, batch, kContext, r.uniform_experts, WeightSize(s), KvSize(s)));
  r.d2h_ms = LogitsToHostMs(*s.runner, batch);
  SamplingParams greedy;
  greedy.temperature = 0;
  SamplingParams top_p;
  top_p.temperature = 0.7f;
  top_p.top_p = 0.9f;
  r.greedy_ms = SampleMs(p.logits, c.vocab_size, greedy);
  r.top_p_ms = SampleMs(p.logits, c.vocab_size, top_p);
  PrintDecode(name, r);
  if (s.runner->can_sample()) {
    strata_sample_params g{}, t{};
    g.top_p = 1.0f, g.num_logprobs = -1;
    t = g, t.temperature = 0.7f, t.top_p = 0.9f;
    s.runner->set_graph_batches({});  // op by op
    const double gm = TimeSampledDecode(s, batch, steps, g);
    const double tm = TimeSampledDecode(s, batch, steps, t);
    std::printf(
        "%-14s decode b %2d with on-device sampling: greedy step %7.3f ms (ratio %5.2f), "
        "top-p 0.9 step %7.3f ms (ratio %5.2f)\n",
        name, batch, gm, gm / r.roof_ms, tm, tm / r.roof_ms);
    std::printf("CSV,sampled,%s,%d,%.4f,%.3f,%.4f,%.3f\n", name, batch, gm, gm / r.roof_ms, tm,
                tm / r.roof_ms);
    if (s.runner->backend().plugin().has_graphs()) {
      const std::vector<int32_t> op_by_op = GreedyIds(s, batch);
      s.runner->set_graph_batches(RunnerOptions{}.graph_batches);  // replayed as a graph
      int mismatched = 0;  // steps whose ids differ from op by op: warm-up, recording, replays
      for (int i = 0; i < 4; ++i) mismatched += GreedyIds(s, batch) != op_by_op;
      uint64_t ids_hash = 1469598103934665603ull;  // FNV-1a: compare builds and settings
      for (int32_t id : op_by_op) ids_hash = (ids_hash ^ uint32_t(id)) * 1099511628211ull;
      std::printf(
          "%-14s decode b %2d graph replay gives the op-by-op ids: %s (%d of 4 differ); "
          "ids hash %016llx\n",
          name, batch, mismatched == 0 ? "yes" : "NO", mismatched,
          static_cast<unsigned long long>(ids_hash));
      if (g_cuda_profile) BENCH_CHECK(cudaProfilerStart());
      const double ggm = TimeSampledDecode(s, batch, steps, g);
      if (g_cuda_profile) BENCH_CHECK(cudaProfilerStop());
      const double gtm = TimeSampledDecode(s, batch, steps, t);
      const auto stats = s.runner->graph_stats();
      std::printf(
          "%-14s decode b %2d sampled, graph replay: greedy step %7.3f ms (ratio %5.2f), "
          "top-p 0.9 step %7.3f ms (ratio %5.2f); graphs launched %ld, recorded %ld, failed %ld\n",
          name, batch, ggm, ggm / r.roof_ms, gtm, gtm / r.roof_ms, long(stats.launches),
          long(stats.recordings), long(stats.fallbacks));
      std::printf("CSV,graph,%s,%d,%.4f,%.3f,%.4f,%.3f,%ld,%ld\n", name, batch, ggm,
                  ggm / r.roof_ms, gtm, gtm / r.roof_ms, long(stats.recordings),
                  long(stats.fallbacks));
      if (g_chain_costs) ChainCosts(name, s, batch, steps);
    }
    if (g_masks) ReportMasked(name, g_preset, s, batch, steps);
    std::fflush(stdout);
  }
  ProfileDecode(name, s, batch, r.bytes.gemm, r.step_ms.median);
}

// --- Prefill ------------------------------------------------------------------------------------
void ReportPrefill(const char* name, Setup& s, int tokens, int reps) {
  const int blocks = (tokens + kBlockSize - 1) / kBlockSize;
  std::vector<BlockId> table(blocks);
  std::iota(table.begin(), table.end(), 0);  // overwrites the decode KV: run after the decode
  const std::vector<int32_t> prompt = RandomTokens(tokens, s.config.vocab_size, 17);
  ForwardSeq seq{prompt, 0, table, ForwardSeq::Logits::kLast};
  OrDie(s.runner->Forward(std::span(&seq, 1)), "prefill warm-up");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    OrDie(s.runner->Forward(std::span(&seq, 1)), "prefill");
    ms.push_back(Seconds(t0) * 1e3);
  }
  const double med = Summarize(ms).median;
  std::printf("%-14s prefill %5d tokens: %8.2f ms  %9.0f tokens/s\n", name, tokens, med,
              tokens / (med * 1e-3));
  std::printf("CSV,prefill,%s,%d,%.3f,%.1f\n", name, tokens, med, tokens / (med * 1e-3));
  std::fflush(stdout);
}

void RunModel(const ModelShape& m, const Options& o, const std::shared_ptr<Plugin>& plugin,
              double copy_gbs) {
  Setup s = Prepare(m, plugin);
  g_preset = m.preset;
  const StepBytes all =
      CountBytes(s.config, 0, kContext, s.config.num_experts, WeightSize(s), KvSize(s));
  std::printf(
      "# %s: %.3f GB of %s weights (the runner uploaded %.3f GB), built in %.1f s; "
      "KV pool %d blocks of %zu bytes\n",
      m.name, all.all_weights / 1e9, DtypeName(s.runner->backend().info().weight_dtype),
      s.runner->weight_bytes() / 1e9, s.load_s, s.runner->num_kv_blocks(),
      s.runner->kv_block_bytes());
  std::printf("# KV of %d sequences x %d tokens prefilled in %.1f s\n", kMaxBatch, kContext,
              s.fill_s);
  if (std::abs(all.all_weights - double(s.runner->weight_bytes())) > 1e6) {
    std::fprintf(stderr, "decode_step_bench: the byte count disagrees with the runner's\n");
    std::exit(1);
  }
  std::printf("CSV,model,%s,%.4f,%.4f,%.2f\n", m.name, all.all_weights / 1e9,
              s.runner->weight_bytes() / 1e9, s.load_s);
  std::vector<int> batches = o.quick ? std::vector<int>{1, 64} : std::vector<int>{1, 8, 64};
  if (!o.batches.empty()) batches = o.batches;
  for (int b : batches) ReportDecode(m.name, s, b, o.steps, copy_gbs);
  if (!o.prefill) return;
  const std::vector<int> prompts = o.quick ? std::vector<int>{2048} : std::vector<int>{2048, 8192};
  for (int n : prompts) ReportPrefill(m.name, s, n, o.quick ? 2 : 3);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      o.quick = true;
      o.steps = 10;
    } else if (a == "--steps" && has_value) {
      o.steps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--model" && has_value) {
      o.model = argv[++i];
    } else if (a == "--plugin" && has_value) {
      o.plugin = argv[++i];
    } else if (a == "--batches" && has_value) {
      o.batches.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long b = std::strtol(p, &end, 10);
        if (end == p || b < 1 || b > kMaxBatch || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr,
                       "decode_step_bench: --batches wants numbers 1-%d separated by commas\n",
                       kMaxBatch);
          std::exit(2);
        }
        o.batches.push_back(static_cast<int>(b));
        p = *end == ',' ? end + 1 : end;
      }
    } else if (a == "--masks") {
      o.masks = true;
    } else if (a == "--no-prefill") {
      o.prefill = false;
    } else if (a == "--cuda-profile") {
      o.cuda_profile = true;
    } else if (a == "--chain-costs") {
      o.chain_costs = true;
    } else if (a == "--without" && has_value) {
      const std::string list = argv[++i];
      for (size_t from = 0; from <= list.size();) {
        const size_t comma = std::min(list.find(',', from), list.size());
        const std::string e = list.substr(from, comma - from);
        if (e != "attention_prologue" && e != "gemm_silu_mul" && e != "moe_route_experts") {
          std::fprintf(stderr,
                       "decode_step_bench: --without takes attention_prologue, gemm_silu_mul "
                       "and moe_route_experts, not '%s'\n",
                       e.c_str());
          std::exit(2);
        }
        o.without.push_back(e);
        from = comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: decode_step_bench [--quick] [--steps N] [--model NAME] [--plugin P] "
                   "[--batches 1,8,64] [--no-prefill] [--cuda-profile] [--chain-costs] "
                   "[--without ENTRY,...] [--masks]\n");
      std::exit(2);
    }
  }
  return o;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  const Options o = ParseArgs(argc, argv);
  g_cuda_profile = o.cuda_profile;
  g_chain_costs = o.chain_costs;
  g_masks = o.masks;
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const double copy = cuda::bench::CopyBandwidthGBs();
  std::printf("# device copy (D2D 2 GiB, read+write): %.0f GB/s\nCSV,copy,%.1f\n", copy, copy);
  const std::shared_ptr<Plugin> plugin = LoadInstrumentedPlugin(o.plugin, o.without);
  for (const std::string& e : o.without) std::printf("# without the plugin's %s\n", e.c_str());
  for (const ModelShape& m : kModels) {
    if (o.model.empty() || o.model == m.name) RunModel(m, o, plugin, copy);
  }
  return 0;
}
