#include "strata/engine/engine.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kv_staging.h"
#include "strata/common/file_util.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/engine/weight_source.h"

namespace strata {
namespace {

// A model identity for block hashes that is the same on every machine holding the same
// checkpoint: config.json plus a sample of every tensor's bytes (so two fine-tunes of one
// architecture never share KV blocks), or plus the spec of generated random weights.
absl::StatusOr<std::string> ModelIdentity(const std::string& dir) {
  STRATA_ASSIGN_OR_RETURN(std::string config, ReadFileToString(dir + "/config.json"));
  absl::StatusOr<RandomWeightsSpec> random = ReadRandomWeightsSpec(dir);
  if (random.ok()) {
    return absl::StrFormat(
        "%016x", BlockHashSeed(config, absl::StrCat("random:", random->seed, ":",
                                                    absl::StrFormat("%a", random->stddev))));
  }
  if (!absl::IsNotFound(random.status())) return random.status();
  STRATA_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(dir));
  uint64_t h = BlockHashSeed(config);
  for (const std::string& name : ckpt->TensorNames()) {
    STRATA_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt->Get(name));
    const size_t n = std::min<size_t>(t->nbytes, 4096);
    h = BlockHashSeed(std::string_view(reinterpret_cast<const char*>(t->data), n),
                      absl::StrCat(name, h));
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace

Engine::~Engine() {
  // Copies may still be in flight into staging_ (unregistered and freed before runner_ goes) or
  // into an offload target's memory (unregistered here); they are not handed on (the offload
  // function or target may be gone already: a target's reservations expire on their own).
  if ((staging_used_ > 0 || !pending_direct_.empty()) && !runner_->backend().Synchronize().ok()) {
    STRATA_LOG(Warning) << "KV staging: device synchronize failed at shutdown";
  }
  DropOffloadTarget();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const std::string& model_dir,
                                                       const EngineOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) {
    return absl::NotFoundError(absl::StrCat("model directory not found: ", model_dir));
  }
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = options;
  STRATA_ASSIGN_OR_RETURN(auto plugin, LoadPlugin(options.plugin));
  STRATA_ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::FromFile(model_dir + "/tokenizer.json"));
  STRATA_ASSIGN_OR_RETURN(e->runner_, ModelRunner::Create(plugin, model_dir, options.runner));
  STRATA_ASSIGN_OR_RETURN(std::string identity, ModelIdentity(model_dir));
  e->model_identity_ = identity;
  e->blocks_ = std::make_unique<BlockManager>(e->runner_->num_kv_blocks(), e->runner_->block_size(),
                                              options.enable_prefix_caching);
  Engine* engine = e.get();
  e->blocks_->SetEventListener([engine](const KvCacheEvent& ev) { engine->OnKvEvent(ev); });
  e->scheduler_ = std::make_unique<Scheduler>(
      options.scheduler, e->blocks_.get(),
      BlockHasher(BlockHashSeed(identity, options.cache_salt), options.kv_hash_key));
  e->max_model_len_ =
      options.max_model_len > 0 ? options.max_model_len : e->config().max_position_embeddings;
  if (e->max_model_len_ <= 0) e->max_model_len_ = 4096;
  return e;
}

absl::Status Engine::AddTextRequest(const std::string& request_id, const std::string& prompt,
                                    const SamplingParams& params) {
  return AddRequest(request_id, tokenizer_->Encode(prompt, /*add_special_tokens=*/true), params);
}

absl::StatusOr<std::unique_ptr<Request>> Engine::NewRequest(const std::string& request_id,
                                                            std::vector<int32_t> prompt,
                                                            const SamplingParams& params) {
  STRATA_RETURN_IF_ERROR(params.Validate(config().vocab_size));
  if (requests_.contains(request_id)) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate request id '", request_id, "'"));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  STRATA_RETURN_IF_ERROR(CheckTokenIds(prompt, "prompt"));
  const int64_t limit = ContextLimit();
  if (static_cast<int64_t>(prompt.size()) >= limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt has ", prompt.size(), " tokens; this engine's limit is ", limit - 1));
  }
  auto r = std::make_unique<Request>();
  r->id = request_id;
  r->arrival = next_arrival_++;
  r->prompt_len = static_cast<int32_t>(prompt.size());
  r->tokens = std::move(prompt);
  r->max_total_tokens =
      static_cast<int32_t>(std::min<int64_t>(limit, int64_t{r->prompt_len} + params.max_tokens));
  r->params = params;
  r->rng = std::make_unique<Rng>(params.seed.value_or(options_.default_seed + r->arrival));
  r->detok = std::make_unique<StreamDecoder>(tokenizer_.get(), params.skip_special_tokens);
  for (const auto& s : params.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
  if (params.guided.active()) STRATA_RETURN_IF_ERROR(AttachGrammar(*r));
  return r;
}

absl::Status Engine::AddRequest(const std::string& request_id, std::vector<int32_t> prompt,
                                const SamplingParams& params) {
  return AddRequest(request_id, std::move(prompt), params, ResumedOutput{});
}

absl::Status Engine::AddRequest(const std::string& request_id, std::vector<int32_t> prompt,
                                const SamplingParams& params, const ResumedOutput& resumed) {
  STRATA_ASSIGN_OR_RETURN(auto r, NewRequest(request_id, std::move(prompt), params));
  if (!resumed.tokens.empty()) STRATA_RETURN_IF_ERROR(Resume(*r, resumed));
  Request* raw = r.get();
  requests_.emplace(request_id, std::move(r));
  if (!resumed.tokens.empty() && ResumedAtStop(raw)) {
    Finish(raw, FinishReason::kStop);  // its last worker failed before saying so
    return absl::OkStatus();
  }
  if (raw->num_tokens() >= raw->max_total_tokens) {
    raw->text += raw->detok->Flush();
    Finish(raw, FinishReason::kLength);  // nothing (left) to generate; Step reports it
    return absl::OkStatus();
  }
  scheduler_->Add(raw);
  return absl::OkStatus();
}

int64_t Engine::ContextLimit() const {
  const int64_t cache_tokens = int64_t{blocks_->num_blocks()} * blocks_->block_size();
  return std::min<int64_t>(max_model_len_, cache_tokens);
}

absl::Status Engine::CheckTokenIds(std::span<const int32_t> ids, absl::string_view what) const {
  for (int32_t t : ids) {
    if (t < 0 || t >= config().vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " token id ", t, " out of range [0, ", config().vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

bool Engine::IsStopToken(const Request& r, int32_t token) const {
  const auto& eos = config().eos_token_ids;
  const auto& stops = r.params.stop_token_ids;
  return (!r.params.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) ||
         std::find(stops.begin(), stops.end(), token) != stops.end();
}

bool Engine::BelowMinTokens(const Request& r) { return r.num_output() < r.params.min_tokens; }

void Engine::MaskStopTokens(const Request& r, std::span<float> logits) const {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  ForEachStopToken(r, [&](int32_t t) {
    if (t >= 0 && static_cast<size_t>(t) < logits.size()) logits[t] = kNegInf;
  });
}

absl::Status Engine::Resume(Request& r, const ResumedOutput& resumed) {
  STRATA_RETURN_IF_ERROR(CheckTokenIds(resumed.tokens, "resumed"));
  const int64_t total = int64_t{r.prompt_len} + int64_t(resumed.tokens.size());
  if (total >= ContextLimit()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt and resumed output have ", total,
                                                   " tokens; this engine's limit is ",
                                                   ContextLimit() - 1));
  }
  for (int32_t t : resumed.tokens) {
    if (r.grammar != nullptr) {
      AdvanceGrammar(r, t);
      if (r.grammar_state == grammar::Grammar::kDead) {
        return absl::InvalidArgumentError(
            absl::StrCat("resumed token ", t, " does not follow the request's constraint"));
      }
    }
    r.tokens.push_back(t);
    r.text += r.detok->Push(t);
    // The generator advances as it did for these tokens where they were drawn.
    if (r.params.temperature > 0.0f) r.rng->Uniform();
  }
  if (resumed.text_emitted > r.text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("resumed text_emitted ", resumed.text_emitted,
                                                   " is beyond the resumed tokens' ", r.text.size(),
                                                   " bytes of text"));
  }
  r.text_emitted = resumed.text_emitted;
  return absl::OkStatus();
}

bool Engine::ResumedAtStop(Request* r) {
  if (IsStopToken(*r, r->tokens.back())) {
    r->stop_reason = absl::StrCat(r->tokens.back());
    return true;
  }
  return CheckStopStrings(r);
}

absl::Status Engine::AddPrefillRequest(const std::string& request_id, std::vector<int32_t> prompt,
                                       const SamplingParams& params) {
  SamplingParams p = params;
  p.max_tokens = 1;
  p.stop.clear();
  STRATA_ASSIGN_OR_RETURN(auto r, NewRequest(request_id, std::move(prompt), p));
  r->hold_blocks = true;
  Request* raw = r.get();
  requests_.emplace(request_id, std::move(r));
  scheduler_->Add(raw);
  return absl::OkStatus();
}

std::vector<BlockId> Engine::TakeHeldBlocks(const std::string& request_id) {
  auto it = held_.find(request_id);
  if (it == held_.end()) return {};
  std::vector<BlockId> blocks = std::move(it->second);
  held_.erase(it);
  return blocks;
}

void Engine::PinBlocks(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) blocks_->Ref(b);
}

void Engine::ReleaseBlocks(std::span<const BlockId> blocks) { blocks_->ReleaseAll(blocks); }

const Request* Engine::FindRequest(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  if (it == requests_.end() || it->second->state == Request::State::kFinished) return nullptr;
  return it->second.get();
}

int64_t Engine::queued_prefill_tokens() const { return scheduler_->num_uncomputed_tokens(); }

absl::StatusOr<KvReservation> Engine::ReservePrompt(std::span<const int32_t> prompt,
                                                    std::string_view cache_salt) {
  const int bs = blocks_->block_size();
  KvReservation res;
  if (blocks_->prefix_caching() && !prompt.empty()) {
    const size_t usable = (prompt.size() - 1) / bs;
    std::vector<BlockHash> hashes =
        scheduler_->hasher().Salted(cache_salt).Chain(prompt.subspan(0, usable * bs), bs);
    res.blocks = blocks_->AcquireCachedPrefix(hashes);
    res.cached_tokens = static_cast<int32_t>(res.blocks.size()) * bs;
  }
  const size_t needed = (prompt.size() + bs - 1) / bs;
  while (res.blocks.size() < needed) {
    auto b = blocks_->Allocate();
    if (!b.ok()) {
      CancelReservation(res);
      FlushKvOffloads();
      return absl::ResourceExhaustedError(absl::StrCat(
          "no free KV blocks for a ", prompt.size(), "-token prompt (", needed, " blocks)"));
    }
    res.blocks.push_back(*b);
  }
  // The caller hands these blocks to a KV transfer that writes them from outside the stream:
  // the copies out of the blocks evicted for them must be complete first.
  FlushKvOffloads();
  return res;
}

void Engine::CancelReservation(KvReservation& reservation) {
  blocks_->ReleaseAll(reservation.blocks);
  reservation.blocks.clear();
  reservation.cached_tokens = 0;
}

absl::Status Engine::AddPrefilledRequest(const std::string& request_id,
                                         std::vector<int32_t> prompt,
                                         const SamplingParams& params, KvReservation& reservation,
                                         const SampleResult& first) {
  const size_t bs = static_cast<size_t>(blocks_->block_size());
  if (reservation.blocks.size() != (prompt.size() + bs - 1) / bs) {
    return absl::InvalidArgumentError("reservation does not cover the prompt");
  }
  if (first.token < 0 || first.token >= config().vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("first token ", first.token, " out of range"));
  }
  if (params.max_tokens < 1) return absl::InvalidArgumentError("max_tokens must be >= 1");
  STRATA_ASSIGN_OR_RETURN(auto r, NewRequest(request_id, std::move(prompt), params));
  // The prefill side drew from the same seeded generator once for a sampled first token.
  if (params.temperature > 0.0f) r->rng->Uniform();
  r->blocks = std::move(reservation.blocks);
  r->num_computed = r->prompt_len;
  r->num_cached_prompt = reservation.cached_tokens;
  reservation = KvReservation{};
  Request* raw = r.get();
  requests_.emplace(request_id, std::move(r));
  scheduler_->AddRunning(raw);
  RequestOutput out;
  ApplySample(raw, first, out);
  pending_.push_back(std::move(out));
  return absl::OkStatus();
}

bool Engine::Abort(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  std::erase(finished_, it->second.get());
  scheduler_->Remove(it->second.get());
  requests_.erase(it);
  return true;
}

void Engine::Finish(Request* r, FinishReason reason) {
  r->finish = reason;
  r->state = Request::State::kFinished;
  if (r->hold_blocks) {
    PinBlocks(r->blocks);
    held_[r->id] = r->blocks;
  }
  scheduler_->Remove(r);
  finished_.push_back(r);
}

}  // namespace strata
