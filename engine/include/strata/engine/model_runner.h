#pragma once
// Runs the transformer forward pass for a batch of sequences through an engine plugin.
//
// One call = one engine step: any mix of prefill chunks and decode tokens, each sequence with
// its own paged block table. New K/V are appended to the paged cache, attention reads the
// whole context from it, and the requested logits rows are returned to the host as float32.
//
// Not thread-safe: driven by one engine thread.
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/engine/block_manager.h"
#include "strata/engine/model.h"
#include "strata/engine/sampling.h"

namespace strata {

struct RunnerOptions {
  int block_size = 16;
  // KV pool size: num_kv_blocks if > 0, else kv_cache_bytes if > 0, else memory_share of the
  // device if > 0 (KvPoolBytesForShare), else kv_cache_fraction of the backend's free memory
  // after the weights are loaded.
  int num_kv_blocks = 0;
  int64_t kv_cache_bytes = 0;
  // This runner's part of the device's total memory, weights and activations included: for
  // several processes on one device, where "free memory" depends on which one starts first.
  // 0 = off; otherwise in (0, 1] (InvalidArgument from Create when outside).
  double memory_share = 0;
  double kv_cache_fraction = 0.5;
  std::string backend_config;  // JSON passed to the plugin's create()
  // For a backend whose device memory is host memory (the CPU plugin, "cpu"): memory of the
  // given size, owned by the caller and outliving the runner, to hold the KV pool instead of the
  // backend's allocation — e.g. transport-allocated memory that peers write with plain copies.
  // Ignored for other backends.
  std::function<absl::StatusOr<void*>(size_t bytes)> host_kv_pool;
  // Decode steps that sample on the device are replayed as recorded plugin graphs when the
  // plugin can (graph_* entries): one graph per (batch bucket, context bucket), the batch padded
  // to the next size in graph_batches, recorded the second time a bucket is seen.
  bool graphs = true;
  std::vector<int> graph_batches = {1, 2, 4, 8, 16, 32, 64, 128};
};

// The KV pool bytes of RunnerOptions::memory_share: share * total_memory, less the weights, less
// a reserve for what the runner and the plugin allocate besides weights and KV (step
// activations and logits, library workspaces, recorded graphs, the device context): the larger
// of 1 GiB and 5% of the share. InvalidArgument for a share outside (0, 1]; ResourceExhausted,
// naming every number, when fewer than 2 blocks of block_bytes are left.
absl::StatusOr<int64_t> KvPoolBytesForShare(double share, uint64_t total_memory,
                                            uint64_t weight_bytes, uint64_t block_bytes);

struct ForwardSeq {
  enum class Logits { kNone, kLast, kAll };
  std::span<const int32_t> tokens;  // new tokens to run
  int32_t num_computed = 0;         // tokens already in the cache; positions start here
  std::span<const BlockId> blocks;  // covers num_computed + tokens.size() tokens
  Logits logits = Logits::kLast;
};

// Token masks of one sampled step (constrained decoding): `rows` are ascending logits-row
// indices, none of them a host row; `fill(words)` writes row rows[i]'s mask (bit t of word
// t / 32 set: token t allowed; ceil(vocab / 32) words each) at words + i * ceil(vocab / 32).
// The runner calls `fill` once, on the calling thread, after the step's forward pass is
// enqueued and before its sampler, so computing masks on the host overlaps the device's work.
struct StepMasks {
  std::vector<int32_t> rows;
  std::function<void(uint32_t* words)> fill;
};

class ModelRunner {
 public:
  // A runner over the checkpoint in `model_dir` (config.json + safetensors).
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(std::shared_ptr<Plugin> plugin,
                                                             const std::string& model_dir,
                                                             const RunnerOptions& options);
  // A runner over `weights` for the architecture `config` (e.g. RandomWeights, to run a real
  // model's shapes without a checkpoint). `weights` is only read during the call.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(std::shared_ptr<Plugin> plugin,
                                                             const ModelConfig& config,
                                                             const WeightSource& weights,
                                                             const RunnerOptions& options);
  ~ModelRunner();

  const ModelConfig& config() const { return model_->config(); }
  Backend& backend() { return *backend_; }
  int num_kv_blocks() const { return cache_.num_blocks; }
  int block_size() const { return cache_.block_size; }
  size_t kv_block_bytes() const;
  const strata_kv_cache& kv_cache() const { return cache_; }
  size_t weight_bytes() const { return model_->weight_bytes(); }

  // Logits rows in order: for each sequence, none / its last token / all its tokens.
  // Each row has vocab_size floats.
  absl::StatusOr<std::vector<float>> Forward(std::span<const ForwardSeq> seqs);
  // Forward, then every logits row sampled on the device by the plugin's `sample` entry
  // (can_sample()), params[i] for the i-th row: copies back ids (and the logprobs rows that
  // ask for them) instead of vocab_size floats per row. FailedPrecondition without the entry.
  // Rows listed in `host_rows` (ascending logits-row indices) are not sampled there: their
  // logits come back as float into *host_logits (vocab_size each, in host_rows order) and
  // their results are left default, for the caller's host sampler (penalties need the
  // request's token history); their params are ignored.
  // With `masks`, the rows it lists are masked on the device before they are sampled (see
  // StepMasks); InvalidArgument unless can_mask().
  absl::StatusOr<std::vector<SampleResult>> ForwardSampled(
      std::span<const ForwardSeq> seqs, std::span<const strata_sample_params> params,
      std::span<const int32_t> host_rows = {}, std::vector<float>* host_logits = nullptr,
      const StepMasks* masks = nullptr);
  bool can_sample() const { return backend_->plugin().has_sample(); }
  // Token masks applied on the device (the plugin's mask_logits entry) before sampling.
  bool can_mask() const { return can_sample() && backend_->plugin().has_mask_logits(); }
  // Graph replay of decode steps (RunnerOptions::graphs), switchable at run time (benchmarks
  // time both); `batches` empty: off. Counts: graph launches, recordings, failed recordings.
  void set_graph_batches(std::vector<int> batches) { graph_batches_ = std::move(batches); }
  struct GraphStats {
    int64_t launches = 0, recordings = 0, fallbacks = 0;
  };
  GraphStats graph_stats() const;

  struct Scratch;     // model_runner_internal.h
  struct StepInputs;  // model_runner_internal.h

 private:
  ModelRunner();  // out of line: Graphs is complete only in model_runner_graph.cc
  absl::Status EnsureScratch(int64_t tokens, int64_t rows);
  absl::Status Upload(const StepInputs& in);
  absl::Status RunLayer(int layer, const StepInputs& in);
  absl::Status RunQkv(int layer, const StepInputs& in, strata_tensor* q);
  absl::Status RunAttention(int layer, const StepInputs& in);
  absl::Status RunMlp(int layer, const StepInputs& in);
  absl::Status RunMoe(int layer, const StepInputs& in);
  absl::Status RunBody(std::span<const ForwardSeq> seqs, StepInputs& in);
  absl::Status PrepareStep(const StepInputs& in);
  absl::Status EnqueueBody(const StepInputs& in);
  absl::Status GrowScratch(DeviceBuffer& buf, size_t bytes);
  absl::Status ComputeLogits(const StepInputs& in);
  absl::StatusOr<std::vector<float>> RunHead(const StepInputs& in);
  absl::StatusOr<std::vector<SampleResult>> SampleLogits(
      const StepInputs& in, std::span<const strata_sample_params> params,
      std::span<const int32_t> host_rows, std::vector<float>* host_logits,
      const StepMasks* masks);
  static std::vector<strata_sample_params> DeviceParams(
      std::span<const strata_sample_params> requested, std::span<const int32_t> host_rows,
      int64_t rows);
  static bool AnyLogprobs(std::span<const strata_sample_params> params);
  absl::Status PrepareSample(std::span<const strata_sample_params> params, bool logprobs);
  absl::Status EnqueueSample(int64_t rows, bool logprobs);
  absl::StatusOr<std::vector<SampleResult>> FinishSample(
      std::span<const strata_sample_params> params, int64_t rows, bool logprobs,
      std::span<const int32_t> host_rows, std::vector<float>* host_logits);
  // Graph replay of decode steps (model_runner_graph.cc).
  bool GraphEligible(const StepInputs& in) const;
  absl::StatusOr<std::vector<SampleResult>> ForwardSampledGraph(
      StepInputs& in, std::span<const strata_sample_params> params,
      std::span<const int32_t> host_rows, std::vector<float>* host_logits,
      const StepMasks* masks);
  absl::Status EnqueueStep(const StepInputs& in, int64_t rows, bool logprobs, bool sample);
  absl::Status RunBucket(const std::tuple<int64_t, int64_t, int64_t, bool, bool>& key,
                         const StepInputs& in);
  // The masks' fill, their upload and mask_logits over the logits rows they list.
  absl::Status EnqueueMasks(const StepMasks& masks);
  // Logits rows [first, first + count) of the last step, as float, appended to *out.
  absl::Status CopyLogitsRows(int64_t first, int64_t count, std::vector<float>* out);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  DeviceBuffer kv_pool_;
  strata_kv_cache cache_{};
  std::unique_ptr<Scratch> scratch_;
  struct Graphs;  // model_runner_graph.cc
  std::vector<int> graph_batches_;  // empty: graphs off
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace strata
