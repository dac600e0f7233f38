#include "sim_worker.h"

#include <algorithm>

#include "strata/common/logging.h"

namespace strata::sim {

SimWorker::SimWorker(int index, router::WorkerRole role, const router::WorkerProfile& profile,
                     int64_t max_batch_tokens, bool record_gaps, std::vector<SimRequest>* requests,
                     WorkerListener* listener)
    : index_(index),
      role_(role),
      profile_(profile),
      block_size_(profile.block_size),
      max_batch_tokens_(max_batch_tokens),
      record_gaps_(record_gaps),
      requests_(*requests),
      listener_(listener),
      cache_(profile.num_kv_blocks) {}

void SimWorker::Enqueue(int request, Phase phase) {
  SimRequest& r = requests_[request];
  r.phase = phase;
  r.committed = 0;
  r.private_blocks = 0;
  if (phase != Phase::kDecodeOnly) queued_prefill_tokens_ += r.input;
  waiting_.push_back(request);
}

bool SimWorker::TryAdmit(int request) {
  SimRequest& r = requests_[request];
  if (static_cast<int64_t>(prefilling_.size()) + decoding_ >= profile_.max_running) return false;
  const int32_t full = static_cast<int32_t>(r.chain.size());
  const int64_t total =
      r.phase == Phase::kPrefillOnly ? BlocksFor(r.input) : BlocksFor(int64_t{r.input} + r.output);
  const int32_t matched = cache_.Match(r.chain);
  if (!cache_.Acquire(r.chain, matched, total - matched, &events_)) return false;
  r.committed = matched;
  r.private_blocks = total - matched;
  if (r.phase == Phase::kDecodeOnly) {
    // The transferred KV is complete: its full blocks join this worker's prefix cache now.
    cache_.Commit(r.chain, matched, full, &events_);
    r.private_blocks -= full - matched;
    r.committed = full;
    StartDecoding(request);
    return true;
  }
  r.cached_tokens = std::clamp(matched * block_size_, 0, std::max(0, r.input - 1));
  r.to_compute = std::max<int64_t>(1, r.input - r.cached_tokens);
  queued_prefill_tokens_ -= r.input - r.to_compute;
  prefilling_.push_back(request);
  return true;
}

// Like the engine's scheduler: a prompt is admitted (and its cached prefix looked up) only in
// a step whose token budget the running sequences leave room in, so a prompt queued behind
// another one sharing its prefix finds the blocks that one has committed so far.
bool SimWorker::HasPrefillBudget() const {
  int64_t claimed = decoding_;
  for (int request : prefilling_) claimed += requests_[request].to_compute;
  return claimed < max_batch_tokens_;
}

void SimWorker::AdmitWaiting() {
  while (!waiting_.empty()) {
    const int request = waiting_.front();
    const SimRequest& r = requests_[request];
    if (r.phase != Phase::kDecodeOnly && !HasPrefillBudget()) return;
    const int64_t total = r.phase == Phase::kPrefillOnly ? BlocksFor(r.input)
                                                         : BlocksFor(int64_t{r.input} + r.output);
    if (total > cache_.capacity()) {  // could never be admitted: fail it instead of stalling
      waiting_.pop_front();
      if (r.phase != Phase::kDecodeOnly) queued_prefill_tokens_ -= r.input;
      listener_->OnUnservable(request, index_);
      continue;
    }
    if (!TryAdmit(request)) return;  // FIFO: later requests wait behind the head
    waiting_.pop_front();
  }
}

double SimWorker::MaybeStartStep() {
  if (busy_) return -1;
  AdmitWaiting();
  int64_t budget = max_batch_tokens_ - decoding_;
  step_chunks_.clear();
  chunk_tokens_.clear();
  chunk_context_.clear();
  for (int request : prefilling_) {
    if (budget <= 0) break;
    const SimRequest& r = requests_[request];
    const int64_t c = std::min(r.to_compute, budget);
    step_chunks_.emplace_back(request, c);
    chunk_tokens_.push_back(c);
    chunk_context_.push_back(int64_t{r.input} - r.to_compute);  // cached + earlier chunks
    budget -= c;
  }
  if (decoding_ == 0 && step_chunks_.empty()) return -1;
  double seconds = 0;
  if (!chunk_tokens_.empty()) seconds += profile_.prefill.Seconds(chunk_tokens_, chunk_context_);
  if (decoding_ > 0) seconds += profile_.decode.Seconds(decoding_, context_sum_);
  seconds = std::max(seconds, 0.0);
  step_batch_ = decoding_;
  busy_ = true;
  step_ema_ = step_ema_ == 0 ? seconds : 0.8 * step_ema_ + 0.2 * seconds;
  return seconds;
}

void SimWorker::FinishStep(double now) {
  STRATA_CHECK(busy_);
  busy_ = false;
  ++step_count_;
  if (record_gaps_) step_end_.push_back(now);
  context_sum_ += step_batch_;  // every sequence of the batch gained one token
  while (!finishes_.empty() && finishes_.top().step <= step_count_) {
    const int request = finishes_.top().request;
    finishes_.pop();
    --decoding_;
    context_sum_ -= int64_t{requests_[request].input} + requests_[request].output;
    Finished(request, now);
  }
  bool any_done = false;
  for (const auto& [request, tokens] : step_chunks_) {
    SimRequest& r = requests_[request];
    r.to_compute -= tokens;
    queued_prefill_tokens_ -= tokens;
    CommitComputed(r);
    if (r.to_compute == 0) {
      any_done = true;
      EndPrefill(request, now);
    }
  }
  if (any_done) {
    std::erase_if(prefilling_, [&](int request) { return requests_[request].to_compute == 0; });
  }
}

// The engine commits every full block a step completes (CommitFullBlocks), not only at the end
// of the prompt.
void SimWorker::CommitComputed(SimRequest& r) {
  const int64_t computed = int64_t{r.input} - r.to_compute;
  const int32_t full = static_cast<int32_t>(
      std::min<int64_t>(computed / block_size_, static_cast<int64_t>(r.chain.size())));
  if (full <= r.committed) return;
  cache_.Commit(r.chain, r.committed, full, &events_);
  r.private_blocks -= full - r.committed;
  r.committed = full;
}

void SimWorker::EndPrefill(int request, double now) {
  SimRequest& r = requests_[request];
  const int32_t full = static_cast<int32_t>(r.chain.size());
  cache_.Commit(r.chain, r.committed, full, &events_);
  r.private_blocks -= full - r.committed;
  r.committed = full;
  if (r.phase == Phase::kPrefillOnly) {
    cache_.Release(r.chain, r.committed, r.private_blocks);
    r.committed = 0;
    r.private_blocks = 0;
    listener_->OnPrefillDone(request, now);
    return;
  }
  r.first_token = now;
  listener_->OnFirstToken(request, now);
  if (r.output <= 1) {
    Finished(request, now);
  } else {
    StartDecoding(request);
  }
}

void SimWorker::StartDecoding(int request) {
  SimRequest& r = requests_[request];
  ++decoding_;
  context_sum_ += int64_t{r.input} + 1;
  r.join_step = step_count_;
  finishes_.push(Finish{step_count_ + r.output - 1, request});
}

void SimWorker::Finished(int request, double now) {
  SimRequest& r = requests_[request];
  cache_.Release(r.chain, r.committed, r.private_blocks);
  r.committed = 0;
  r.private_blocks = 0;
  listener_->OnFinished(request, now, index_);
}

router::LoadReport SimWorker::Load() const {
  router::LoadReport load;
  load.queued_prefill_tokens = queued_prefill_tokens_;
  load.running = static_cast<int32_t>(prefilling_.size() + decoding_);
  load.waiting = static_cast<int32_t>(waiting_.size());
  load.free_kv_blocks = static_cast<int32_t>(std::min<int64_t>(cache_.available(), INT32_MAX));
  load.total_kv_blocks = static_cast<int32_t>(std::min<int64_t>(cache_.capacity(), INT32_MAX));
  load.step_seconds_ema = step_ema_;
  return load;
}

void SimWorker::AppendGaps(const SimRequest& r, std::vector<double>* gaps) const {
  if (!record_gaps_ || r.phase == Phase::kPrefillOnly || r.output <= 1) return;
  double prev = r.first_token;
  const int64_t last =
      std::min<int64_t>(r.join_step + r.output - 1, static_cast<int64_t>(step_end_.size()));
  for (int64_t k = r.join_step; k < last; ++k) {
    gaps->push_back(step_end_[k] - prev);
    prev = step_end_[k];
  }
}

}  // namespace strata::sim
