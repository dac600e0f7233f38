// Decode steps replayed as recorded plugin graphs (RunnerOptions::graphs; abi.h graph_*).
//
// A pure decode step (one new token per sequence, every sequence sampled on the device) is
// padded to the next batch size in graph_batches (padding sequences write no KV: slot -1; they
// attend to one token of block 0 and are sampled greedily, results dropped), its block tables
// to the context bucket's width, and its attention hint to the bucket (the next power of two of
// at least 512 tokens), so steps of one (batch, context) bucket enqueue identical ops on the
// same scratch buffers. The first step of a bucket runs normally (it grows every workspace the
// ops need); the second records the ops (embedding, layers, head, sampler) as a graph; later
// ones upload their inputs in place and launch it. A graph is dropped when the runner's scratch
// was reallocated since it was recorded, or when the plugin says it can no longer be replayed.
// A step with token masks records its own graphs without the sampler: the masks are computed on
// the host while the graph runs, then uploaded, applied and sampled op by op.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "model_runner_internal.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"

namespace strata {

struct ModelRunner::Graphs {
  // batch, context, table width, logprobs, sampler recorded (false: a masked step's sampler
  // runs after the graph, behind its masks)
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool>;
  struct Entry {
    strata_graph graph = nullptr;
    int64_t generation = 0;
  };
  Backend* backend = nullptr;
  std::map<Key, Entry> recorded;
  std::set<Key> warmed;
  int64_t launches = 0, recordings = 0, fallbacks = 0;

  void Drop(const Key& key) {
    auto it = recorded.find(key);
    if (it == recorded.end()) return;
    backend->api().graph_destroy(backend->handle(), it->second.graph);
    recorded.erase(it);
  }
  ~Graphs() {
    for (auto& [key, e] : recorded) backend->api().graph_destroy(backend->handle(), e.graph);
  }
};

ModelRunner::ModelRunner() = default;
ModelRunner::~ModelRunner() = default;

namespace {

int64_t ContextBucket(int64_t kv) {
  int64_t b = 512;
  while (b < kv) b *= 2;
  return b;
}

// Pads `in` (a decode step of n sequences) to `batch` sequences and block tables of `width`
// blocks, with `context` as the attention hint.
void Pad(ModelRunner::StepInputs& in, int64_t batch, int64_t width, int64_t context) {
  const int64_t n = in.num_seqs;
  std::vector<int32_t> tables(static_cast<size_t>(batch * width), 0);
  for (int64_t s = 0; s < n; ++s) {
    std::copy_n(in.block_tables.begin() + s * in.max_blocks, in.max_blocks,
                tables.begin() + s * width);
  }
  in.block_tables = std::move(tables);
  for (int64_t s = n; s < batch; ++s) {
    in.ids.push_back(0);
    in.positions.push_back(0);
    in.slots.push_back(-1);  // writes no KV
    in.q_start.push_back(static_cast<int32_t>(s + 1));
    in.kv_len.push_back(1);  // attends to token 0 of block 0: valid memory, result unused
    in.logit_rows.push_back(static_cast<int32_t>(s));
  }
  in.num_seqs = static_cast<int32_t>(batch);
  in.num_tokens = batch;
  in.max_blocks = static_cast<int32_t>(width);
  in.max_kv = static_cast<int32_t>(context);
}

}  // namespace

ModelRunner::GraphStats ModelRunner::graph_stats() const {
  if (graphs_ == nullptr) return {};
  return {graphs_->launches, graphs_->recordings, graphs_->fallbacks};
}

bool ModelRunner::GraphEligible(const StepInputs& in) const {
  if (graph_batches_.empty() || !backend_->plugin().has_graphs()) return false;
  if (in.num_tokens == 0 || !in.all_decode) return false;
  if (in.logit_rows.size() != static_cast<size_t>(in.num_seqs)) return false;
  return in.num_seqs <= *std::max_element(graph_batches_.begin(), graph_batches_.end());
}

// The step's device work: embedding, layers, head, and (with `sample`) the sampler over
// `rows` rows.
absl::Status ModelRunner::EnqueueStep(const StepInputs& in, int64_t rows, bool logprobs,
                                      bool sample) {
  STRATA_RETURN_IF_ERROR(EnqueueBody(in));
  STRATA_RETURN_IF_ERROR(ComputeLogits(in));
  return sample ? EnqueueSample(rows, logprobs) : absl::OkStatus();
}

absl::StatusOr<std::vector<SampleResult>> ModelRunner::ForwardSampledGraph(
    StepInputs& in, std::span<const strata_sample_params> requested,
    std::span<const int32_t> host_rows, std::vector<float>* host_logits, const StepMasks* masks) {
  if (graphs_ == nullptr) {
    graphs_ = std::make_unique<Graphs>();
    graphs_->backend = backend_.get();
  }
  const int64_t n = in.num_seqs;
  int64_t batch = 0;
  for (int b : graph_batches_) {
    if (b >= n && (batch == 0 || b < batch)) batch = b;
  }
  const int64_t context = ContextBucket(in.max_kv);
  const int64_t width = std::max<int64_t>(in.max_blocks, context / cache_.block_size);
  Pad(in, batch, width, context);
  STRATA_RETURN_IF_ERROR(PrepareStep(in));
  const std::vector<strata_sample_params> params = DeviceParams(requested, host_rows, batch);
  const bool logprobs = AnyLogprobs(params);
  STRATA_RETURN_IF_ERROR(PrepareSample(params, logprobs));

  STRATA_RETURN_IF_ERROR(RunBucket({batch, context, width, logprobs, masks == nullptr}, in));
  if (masks != nullptr) {  // filled while the graph runs; then masked and sampled op by op
    STRATA_RETURN_IF_ERROR(EnqueueMasks(*masks));
    STRATA_RETURN_IF_ERROR(EnqueueSample(batch, logprobs));
  }
  // Only the real rows come back (and the host rows' logits).
  return FinishSample(params, n, logprobs, host_rows, host_logits);
}

// Runs a padded step of bucket `key` (batch, context, width, logprobs): replays its graph, or
// records one if the bucket ran once before, or runs it op by op (and marks it warm).
absl::Status ModelRunner::RunBucket(const std::tuple<int64_t, int64_t, int64_t, bool, bool>& key,
                                    const StepInputs& in) {
  Graphs& g = *graphs_;
  const auto [batch, context, width, logprobs, sample] = key;
  const auto& api = backend_->api();
  auto* b = backend_->handle();
  auto* s = backend_->stream();
  if (auto it = g.recorded.find(key); it != g.recorded.end()) {
    if (it->second.generation == scratch_->generation) {
      const strata_status st = api.graph_launch(b, s, it->second.graph);
      if (st == STRATA_OK) {
        ++g.launches;
        return absl::OkStatus();
      }
      if (st != STRATA_ERR_UNSUPPORTED) return backend_->Check(st, "graph_launch");
    }
    g.Drop(key);  // stale: record again below
  }
  if (g.warmed.count(key) != 0) {
    STRATA_RETURN_IF_ERROR(backend_->Check(api.graph_capture_begin(b, s), "graph_capture_begin"));
    const absl::Status recorded = EnqueueStep(in, batch, logprobs, sample);
    strata_graph graph = nullptr;
    const strata_status ended = api.graph_capture_end(b, s, &graph);
    if (recorded.ok() && ended == STRATA_OK) {
      g.recorded[key] = {graph, scratch_->generation};
      ++g.recordings;
      STRATA_RETURN_IF_ERROR(backend_->Check(api.graph_launch(b, s, graph), "graph_launch"));
      ++g.launches;
      return absl::OkStatus();
    }
    if (graph != nullptr) api.graph_destroy(b, graph);
    ++g.fallbacks;
    STRATA_LOG(Warning) << "decode step of batch " << batch << ", context " << context
                        << " could not be recorded as a graph ("
                        << (recorded.ok() ? backend_->Check(ended, "graph_capture_end") : recorded)
                        << "); running it op by op";
    g.warmed.erase(key);  // warm it again: a workspace may have had to grow
  }
  STRATA_RETURN_IF_ERROR(EnqueueStep(in, batch, logprobs, sample));
  g.warmed.insert(key);
  return absl::OkStatus();
}

}  // namespace strata
