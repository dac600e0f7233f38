// Engine::Step and what happens to each sampled token: stop conditions, detokenization.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"
#include "strata/engine/engine.h"

namespace strata {

absl::StatusOr<std::vector<RequestOutput>> Engine::Step() {
  FlushKvOffloads();  // blocks staged since the last step (their copies are done by now)
  SchedulerOutput sched = scheduler_->Schedule();
  stats_.preemptions += static_cast<int64_t>(sched.preempted.size());
  std::vector<ForwardSeq> seqs;
  seqs.reserve(sched.seqs.size());
  for (const auto& s : sched.seqs) {
    Request* r = s.request;
    ForwardSeq f;
    f.tokens = std::span<const int32_t>(r->tokens.data() + r->num_computed, size_t(s.num_tokens));
    f.num_computed = r->num_computed;
    f.blocks = r->blocks;
    f.logits = r->num_computed + s.num_tokens == r->num_tokens() ? ForwardSeq::Logits::kLast
                                                                 : ForwardSeq::Logits::kNone;
    seqs.push_back(f);
  }
  // On the device when the plugin samples; each sampled row draws from its request's
  // generator exactly as the host sampler would. Rows whose request needs the host sampler
  // (penalties) come back as logits and are sampled here, the rest as ids. Rows with a token
  // mask (a constraint, or min_tokens' ban on stop tokens) are masked on the device when the
  // plugin can, with masks computed while the device runs the step; else on the host.
  const bool on_device = options_.device_sampling && runner_->can_sample();
  const bool device_masks = on_device && runner_->can_mask();
  std::vector<strata_sample_params> params;
  std::vector<int32_t> host_rows;
  std::vector<float> logits;  // all rows (host path) or the host_rows (device path)
  std::vector<SampleResult> sampled;
  StepMasks masks;
  std::vector<const Request*> masked;  // masks.rows' requests
  std::vector<uint8_t> unspellable;    // per masks.rows entry: its mask allows nothing
  if (!seqs.empty()) {
    if (on_device) {
      for (size_t i = 0; i < sched.seqs.size(); ++i) {
        if (seqs[i].logits != ForwardSeq::Logits::kLast) continue;
        const Request* r = sched.seqs[i].request;
        strata_sample_params p = ToSampleParams(r->params);
        const bool needs_mask = r->grammar != nullptr || BelowMinTokens(*r);
        const int32_t row = static_cast<int32_t>(params.size());
        if (NeedsHostSampling(r->params) || (needs_mask && !device_masks)) {
          host_rows.push_back(row);
        } else {
          if (needs_mask) {
            masks.rows.push_back(row);
            masked.push_back(r);
          }
          if (r->params.temperature != 0.0f) p.uniform = r->rng->Uniform();
        }
        params.push_back(p);
      }
      unspellable.assign(masked.size(), 0);
      const size_t words = grammar::MaskWords(config().vocab_size);
      masks.fill = [&](uint32_t* out) {
        for (size_t m = 0; m < masked.size(); ++m) {
          unspellable[m] = !DeviceMask(*masked[m], out + m * words);
        }
      };
      STRATA_ASSIGN_OR_RETURN(
          sampled, runner_->ForwardSampled(seqs, params, host_rows, &logits, &masks));
    } else {
      STRATA_ASSIGN_OR_RETURN(logits, runner_->Forward(seqs));
    }
    ++stats_.steps;
  }
  scheduler_->OnStepDone(sched);
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  size_t row = 0, next_host = 0, next_masked = 0;
  for (size_t i = 0; i < sched.seqs.size(); ++i) {
    Request* r = sched.seqs[i].request;
    if (r->num_computed <= r->prompt_len) {
      stats_.prompt_tokens_computed += sched.seqs[i].num_tokens;
    }
    if (seqs[i].logits != ForwardSeq::Logits::kLast) continue;
    RequestOutput out;
    if (!on_device) {
      ProcessSample(r, std::span<float>(logits.data() + row * vocab, vocab), out);
    } else if (next_host < host_rows.size() && host_rows[next_host] == static_cast<int32_t>(row)) {
      ProcessSample(r, std::span<float>(logits.data() + next_host * vocab, vocab), out);
      ++next_host;
    } else if (next_masked < masks.rows.size() &&
               masks.rows[next_masked] == static_cast<int32_t>(row) &&
               unspellable[next_masked++]) {
      EndUnspellable(r, out);
    } else {
      ApplySample(r, sampled[row], out);
    }
    ++row;
    outputs.push_back(std::move(out));
  }
  ReportFinished(outputs);
  // Going idle: nothing would flush the blocks this step staged (write-through commits are
  // staged after the forward pass) until the next request.
  if (!HasUnfinished()) FlushKvOffloads();
  return outputs;
}

// Marks the outputs of finished requests (adding one for requests that finished without
// running, e.g. max_tokens 0) and drops those requests.
void Engine::ReportFinished(std::vector<RequestOutput>& outputs) {
  for (Request* r : finished_) {
    auto found = std::find_if(outputs.begin(), outputs.end(),
                              [&](const RequestOutput& o) { return o.request_id == r->id; });
    if (found == outputs.end()) {
      outputs.emplace_back();
      found = outputs.end() - 1;
      found->request_id = r->id;
      found->prompt_tokens = r->prompt_len;
      found->cached_tokens = r->num_cached_prompt;
      // A resumed request with nothing left to generate: the text its client has not seen.
      if (r->text.size() > r->text_emitted) found->new_text = r->text.substr(r->text_emitted);
    }
    found->finished = true;
    found->finish_reason = r->finish;
    found->stop_reason = r->stop_reason;
    found->completion_tokens = r->num_output();
    const std::string id = r->id;  // the key must outlive the erase that destroys *r
    requests_.erase(id);
  }
  finished_.clear();
}

void Engine::ProcessSample(Request* r, std::span<float> logits, RequestOutput& out) {
  if (BelowMinTokens(*r)) MaskStopTokens(*r, logits);
  if (r->grammar != nullptr && !MaskGrammar(*r, logits)) {
    // No token continues the constrained output: end it rather than sample outside it.
    EndUnspellable(r, out);
    return;
  }
  ApplySample(r, Sample(logits, r->params, r->prompt(), r->output(), *r->rng), out);
}

// Appends a sampled token and applies the stop conditions and detokenization.
void Engine::ApplySample(Request* r, const SampleResult& s, RequestOutput& out) {
  if (r->grammar != nullptr) AdvanceGrammar(*r, s.token);
  r->tokens.push_back(s.token);
  ++stats_.generated_tokens;
  out.request_id = r->id;
  out.new_tokens.push_back(s.token);
  if (r->params.logprobs >= 0) out.logprobs.push_back(s);
  out.prompt_tokens = r->prompt_len;
  out.cached_tokens = r->num_cached_prompt;
  out.completion_tokens = r->num_output();

  const bool may_stop = !BelowMinTokens(*r);
  if (may_stop && IsStopToken(*r, s.token)) {
    r->stop_reason = absl::StrCat(s.token);
    // The stop token's text (special tokens still obey skip_special_tokens) only on request.
    if (r->params.include_stop_str_in_output) r->text += r->detok->Push(s.token);
    r->text += r->detok->Flush();
    Finish(r, FinishReason::kStop);
  } else {
    r->text += r->detok->Push(s.token);
    if (may_stop && CheckStopStrings(r)) {
      Finish(r, FinishReason::kStop);
    } else if (GrammarComplete(*r)) {
      r->text += r->detok->Flush();
      Finish(r, FinishReason::kStop);
    } else if (r->num_tokens() >= r->max_total_tokens) {
      r->text += r->detok->Flush();
      Finish(r, FinishReason::kLength);
    }
  }
  EmitText(r, out);
}

// Truncates the text at the first stop string, if any appeared; true if one did.
bool Engine::CheckStopStrings(Request* r) {
  if (r->params.stop.empty()) return false;
  // Only the tail that can contain a new match needs scanning.
  const size_t from = r->text_emitted > max_stop_len_ ? r->text_emitted - max_stop_len_ : 0;
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& stop : r->params.stop) {
    const size_t pos = r->text.find(stop, from);
    if (pos < best) {
      best = pos;
      which = &stop;
    }
  }
  if (which == nullptr) return false;
  r->text.resize(r->params.include_stop_str_in_output ? best + which->size() : best);
  r->stop_reason = *which;
  return true;
}

// Returns new text, holding back a tail that could still become a stop string.
void Engine::EmitText(Request* r, RequestOutput& out) {
  size_t upto = r->text.size();
  if (r->state != Request::State::kFinished && !r->params.stop.empty()) {
    const size_t hold = max_stop_len_ - 1;
    upto = upto > hold ? upto - hold : 0;
  }
  if (upto > r->text_emitted) {
    out.new_text = r->text.substr(r->text_emitted, upto - r->text_emitted);
    r->text_emitted = upto;
  }
}

absl::StatusOr<std::vector<Completion>> Engine::Generate(const std::vector<std::string>& prompts,
                                                         const SamplingParams& params) {
  std::vector<Completion> results(prompts.size());
  absl::flat_hash_map<std::string, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = absl::StrCat("generate-", next_arrival_, "-", i);
    std::vector<int32_t> ids = tokenizer_->Encode(prompts[i], /*add_special_tokens=*/true);
    results[i].request_id = id;
    results[i].prompt_tokens = ids;
    STRATA_RETURN_IF_ERROR(AddRequest(id, std::move(ids), params));
    index[id] = i;
  }
  while (HasUnfinished()) {
    STRATA_ASSIGN_OR_RETURN(auto outputs, Step());
    for (auto& o : outputs) {
      auto it = index.find(o.request_id);
      if (it == index.end()) continue;
      Completion& c = results[it->second];
      c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      c.text += o.new_text;
      c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      c.cached_tokens = o.cached_tokens;
      if (o.finished) c.finish_reason = o.finish_reason;
    }
  }
  return results;
}

absl::StatusOr<std::vector<float>> Engine::ComputeLogits(const std::vector<int32_t>& tokens) {
  const int bs = blocks_->block_size();
  std::vector<BlockId> blocks;
  auto release = [&] { blocks_->ReleaseAll(blocks); };
  for (size_t n = 0; n < (tokens.size() + bs - 1) / bs; ++n) {
    auto b = blocks_->Allocate();
    if (!b.ok()) {
      release();
      return b.status();
    }
    blocks.push_back(*b);
  }
  ForwardSeq seq;
  seq.tokens = tokens;
  seq.blocks = blocks;
  seq.logits = ForwardSeq::Logits::kAll;
  auto logits = runner_->Forward(std::span<const ForwardSeq>(&seq, 1));
  release();
  FlushKvOffloads();
  return logits;
}

}  // namespace strata
