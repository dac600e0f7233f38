#include "strata/engine/model_runner.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model_runner_internal.h"
#include "strata/common/half.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/engine/weight_source.h"

namespace strata {

namespace {

size_t ElemSize(strata_dtype d) { return DtypeSize(d); }

// Blocks of the KV pool as RunnerOptions describes; at least 2.
absl::StatusOr<int64_t> KvPoolBlocks(const RunnerOptions& options, const strata_backend_info& info,
                                     size_t weight_bytes, size_t block_bytes) {
  int64_t blocks = options.num_kv_blocks;
  if (blocks <= 0) {
    int64_t budget = options.kv_cache_bytes;
    if (budget <= 0 && options.memory_share > 0) {
      STRATA_ASSIGN_OR_RETURN(budget, KvPoolBytesForShare(options.memory_share, info.total_memory,
                                                          weight_bytes, block_bytes));
    }
    if (budget <= 0) budget = static_cast<int64_t>(info.free_memory * options.kv_cache_fraction);
    blocks = budget / static_cast<int64_t>(block_bytes);
  }
  if (blocks < 2) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache too small: ", blocks, " blocks of ",
                                                     block_bytes, " bytes (raise the budget)"));
  }
  return blocks;
}

}  // namespace

absl::StatusOr<int64_t> KvPoolBytesForShare(double share, uint64_t total_memory,
                                            uint64_t weight_bytes, uint64_t block_bytes) {
  if (!(share > 0 && share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory share must be in (0, 1], got ", share));
  }
  constexpr double kGiB = double(int64_t{1} << 30);
  const double share_bytes = share * static_cast<double>(total_memory);
  const double reserve = std::max(kGiB, 0.05 * share_bytes);
  const double pool = share_bytes - static_cast<double>(weight_bytes) - reserve;
  if (pool < 2.0 * static_cast<double>(block_bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "memory share %g of %.2f GiB is %.2f GiB, too small for %.2f GiB of weights, a %.2f GiB "
        "reserve for activations and 2 KV blocks of %d bytes (raise the share or size the pool "
        "in blocks or MiB)",
        share, total_memory / kGiB, share_bytes / kGiB, weight_bytes / kGiB, reserve / kGiB,
        block_bytes));
  }
  return static_cast<int64_t>(pool);
}

size_t ModelRunner::kv_block_bytes() const {
  return static_cast<size_t>(cache_.num_layers) * 2 * cache_.block_size * cache_.num_kv_heads *
         cache_.head_dim * ElemSize(cache_.dtype);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(std::shared_ptr<Plugin> plugin,
                                                                 const std::string& model_dir,
                                                                 const RunnerOptions& options) {
  STRATA_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromDirectory(model_dir));
  absl::StatusOr<RandomWeightsSpec> random = ReadRandomWeightsSpec(model_dir);
  if (random.ok()) {
    return Create(std::move(plugin), config, RandomWeights(config, random->seed, random->stddev),
                  options);
  }
  if (!absl::IsNotFound(random.status())) return random.status();
  STRATA_ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(model_dir));
  return Create(std::move(plugin), config, CheckpointWeights(*checkpoint), options);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(std::shared_ptr<Plugin> plugin,
                                                                 const ModelConfig& config,
                                                                 const WeightSource& weights,
                                                                 const RunnerOptions& options) {
  if (config.is_moe() && !plugin->has_moe()) {
    return absl::FailedPreconditionError(absl::StrCat(
        plugin->origin(), ": plugin has no MoE ops but ", weights.origin(), " is a MoE model"));
  }
  if (options.memory_share != 0 && !(options.memory_share > 0 && options.memory_share <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory share must be in (0, 1] (0 = off), got ", options.memory_share));
  }
  std::unique_ptr<ModelRunner> runner(new ModelRunner());
  STRATA_ASSIGN_OR_RETURN(runner->backend_, Backend::Create(plugin, options.backend_config));
  runner->graph_batches_ = options.graphs ? options.graph_batches : std::vector<int>();
  STRATA_ASSIGN_OR_RETURN(runner->model_, Model::Load(config, weights, runner->backend_.get()));
  strata_kv_cache& c = runner->cache_;
  const strata_backend_info& info = runner->backend_->info();
  c.dtype = info.kv_dtype;
  c.num_layers = config.num_layers;
  c.block_size = options.block_size;
  c.num_kv_heads = config.num_kv_heads;
  c.head_dim = config.head_dim;
  const size_t block_bytes = runner->kv_block_bytes();
  STRATA_ASSIGN_OR_RETURN(const int64_t blocks,
                          KvPoolBlocks(options, info, runner->weight_bytes(), block_bytes));
  c.num_blocks = static_cast<int32_t>(std::min<int64_t>(blocks, 1 << 30));
  const size_t pool_bytes = block_bytes * size_t(c.num_blocks);
  if (options.host_kv_pool && std::string_view(info.name) == "cpu") {
    STRATA_ASSIGN_OR_RETURN(c.data, options.host_kv_pool(pool_bytes));
  } else {
    STRATA_ASSIGN_OR_RETURN(runner->kv_pool_,
                            DeviceBuffer::Allocate(runner->backend_.get(), pool_bytes));
    c.data = runner->kv_pool_.data();
  }
  runner->scratch_ = std::make_unique<Scratch>();
  return runner;
}

absl::Status ModelRunner::GrowScratch(DeviceBuffer& buf, size_t bytes) {
  if (buf.size() >= bytes && buf.data() != nullptr) return absl::OkStatus();
  buf.Reset();
  STRATA_ASSIGN_OR_RETURN(buf, DeviceBuffer::Allocate(backend_.get(), std::max<size_t>(bytes, 1)));
  ++scratch_->generation;
  return absl::OkStatus();
}

absl::Status ModelRunner::EnsureScratch(int64_t tokens, int64_t rows) {
  Scratch& s = *scratch_;
  const ModelConfig& c = config();
  const strata_dtype act = backend_->info().act_dtype;
  const size_t a = ElemSize(act);
  if (tokens > s.tokens) {
    s.tokens = std::max<int64_t>(tokens, 2 * s.tokens);
    const int64_t t = s.tokens, h = c.hidden_size, d = c.head_dim;
    int64_t width = c.intermediate_size;
    for (const auto& l : model_->layers()) width = std::max<int64_t>(width, l.mlp_width);
    const int64_t k = std::max(c.num_experts_per_tok, 1);
    STRATA_RETURN_IF_ERROR(GrowScratch(s.hidden, t * h * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.residual, t * h * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.normed, t * h * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.qkv, t * (c.num_heads + 2 * c.num_kv_heads) * d * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.attn, t * c.num_heads * d * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.mlp_in, t * 2 * width * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.mlp_act, t * width * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.router, t * std::max(c.num_experts, 1) * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.topk_w, t * k * sizeof(float)));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.topk_ids, t * k * sizeof(int32_t)));
  }
  if (rows > s.rows) {
    s.rows = std::max<int64_t>(rows, 2 * s.rows);
    STRATA_RETURN_IF_ERROR(GrowScratch(s.head_in, s.rows * c.hidden_size * a));
    STRATA_RETURN_IF_ERROR(GrowScratch(s.logits, s.rows * c.vocab_size * a));
  }
  return absl::OkStatus();
}

// One copy for the step's seven index arrays: packed into the host staging block in a fixed
// order, each part starting 16 bytes aligned, and uploaded into `inputs`; the scratch pointers
// are set to the parts.
absl::Status ModelRunner::Upload(const StepInputs& in) {
  Scratch& s = *scratch_;
  const std::vector<int32_t>* parts[] = {&in.ids,    &in.positions,    &in.slots,     &in.q_start,
                                         &in.kv_len, &in.block_tables, &in.logit_rows};
  int32_t** dst[] = {&s.ids,    &s.positions,    &s.slots,     &s.q_start,
                     &s.kv_len, &s.block_tables, &s.logit_rows};
  auto aligned = [](size_t n) { return (n + 3) / 4 * 4; };  // 4 int32 = 16 bytes
  size_t total = 0;
  for (const auto* p : parts) total += aligned(p->size());
  STRATA_RETURN_IF_ERROR(GrowScratch(s.inputs, std::max<size_t>(total, 1) * sizeof(int32_t)));
  s.staging.assign(total, 0);
  auto* base = static_cast<int32_t*>(s.inputs.data());
  size_t at = 0;
  for (size_t i = 0; i < std::size(parts); ++i) {
    std::copy(parts[i]->begin(), parts[i]->end(), s.staging.begin() + static_cast<ptrdiff_t>(at));
    *dst[i] = base + at;
    at += aligned(parts[i]->size());
  }
  if (total == 0) return absl::OkStatus();
  return backend_->CopyToDevice(base, s.staging.data(), total * sizeof(int32_t));
}

}  // namespace strata
