#include "strata/engine/scheduler.h"

#include <algorithm>

#include "strata/common/logging.h"

namespace strata {

Scheduler::Scheduler(const SchedulerOptions& options, BlockManager* blocks, BlockHasher hasher)
    : options_(options), blocks_(blocks), hasher_(std::move(hasher)) {
  STRATA_CHECK(options.max_num_batched_tokens > 0 && options.max_num_seqs > 0);
}

void Scheduler::Add(Request* request) {
  request->hasher = hasher_.Salted(request->params.cache_salt);
  request->state = Request::State::kWaiting;
  waiting_.push_back(request);
}

void Scheduler::AddRunning(Request* request) {
  request->hasher = hasher_.Salted(request->params.cache_salt);
  request->state = Request::State::kRunning;
  running_.push_back(request);
  CommitFullBlocks(request);
}

int64_t Scheduler::num_uncomputed_tokens() const {
  int64_t n = 0;
  for (const Request* r : running_) n += r->num_tokens() - r->num_computed;
  for (const Request* r : waiting_) n += r->num_tokens() - r->num_computed;
  return n;
}

int64_t Scheduler::running_context_tokens() const {
  int64_t n = 0;
  for (const Request* r : running_) n += r->num_computed;
  return n;
}

void Scheduler::Remove(Request* request) {
  std::erase(running_, request);
  std::erase(waiting_, request);
  blocks_->ReleaseAll(request->blocks);
  request->blocks.clear();
  request->num_computed = 0;
}

bool Scheduler::EnsureBlocks(Request* r, int32_t tokens) {
  const int bs = blocks_->block_size();
  const size_t needed = static_cast<size_t>((tokens + bs - 1) / bs);
  while (r->blocks.size() < needed) {
    auto block = blocks_->Allocate();
    if (!block.ok()) return false;
    r->blocks.push_back(*block);
  }
  return true;
}

void Scheduler::Preempt(Request* r) {
  std::erase(running_, r);
  blocks_->ReleaseAll(r->blocks);
  r->blocks.clear();
  r->num_computed = 0;
  r->block_hashes.clear();
  r->state = Request::State::kWaiting;
  ++r->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(r);
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  int32_t budget = options_.max_num_batched_tokens;
  // Running requests first, oldest first; a victim is always the newest running request.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int32_t n = std::min(r->num_tokens() - r->num_computed, budget);
    bool preempted_self = false;
    while (!EnsureBlocks(r, r->num_computed + n)) {
      Request* victim = running_.back();
      Preempt(victim);
      out.preempted.push_back(victim);
      if (victim == r) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;  // r was the newest; nothing after it runs
    if (n > 0) {
      out.seqs.push_back({r, n});
      budget -= n;
    }
    ++i;
  }
  // Admit waiting requests only when nothing had to be preempted this step.
  while (out.preempted.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_num_seqs) {
    if (!Admit(waiting_.front(), budget, out)) break;
    budget -= out.seqs.back().num_tokens;
  }
  for (const auto& s : out.seqs) out.num_tokens += s.num_tokens;
  return out;
}

void Scheduler::ReuseCachedPrefix(Request* r) {
  if (!blocks_->prefix_caching() || r->num_computed > 0) return;
  const int bs = blocks_->block_size();
  // At least one token must be computed to produce logits: never reuse the last token.
  const int32_t usable = (r->num_tokens() - 1) / bs;
  std::vector<BlockHash> hashes =
      r->hasher.Chain(std::span<const int32_t>(r->tokens.data(), size_t(usable) * bs), bs);
  r->blocks = blocks_->AcquireCachedPrefix(hashes);
  r->block_hashes.assign(hashes.begin(), hashes.begin() + r->blocks.size());
  r->num_computed = static_cast<int32_t>(r->blocks.size()) * bs;
  r->num_cached_prompt = std::min(r->num_computed, r->prompt_len);
}

bool Scheduler::Admit(Request* r, int32_t budget, SchedulerOutput& out) {
  ReuseCachedPrefix(r);
  const int32_t remaining = r->num_tokens() - r->num_computed;
  const int32_t n = std::min(remaining, budget);
  if (!options_.chunked_prefill && n < remaining) return false;
  if (!EnsureBlocks(r, r->num_computed + n)) {
    // Not enough memory now: give back what we took and wait for running requests to finish.
    blocks_->ReleaseAll(r->blocks);
    r->blocks.clear();
    r->block_hashes.clear();
    r->num_computed = 0;
    return false;
  }
  waiting_.pop_front();
  r->state = Request::State::kRunning;
  running_.push_back(r);
  out.seqs.push_back({r, n});
  return true;
}

void Scheduler::CommitFullBlocks(Request* r) {
  const int bs = blocks_->block_size();
  const size_t full = static_cast<size_t>(r->num_computed / bs);
  while (r->block_hashes.size() < full) {
    const size_t b = r->block_hashes.size();
    const BlockHash parent = b == 0 ? kRootBlockHash : r->block_hashes[b - 1];
    const BlockHash h =
        r->hasher.Hash(parent, std::span<const int32_t>(r->tokens.data() + b * bs, size_t(bs)));
    r->block_hashes.push_back(h);
    blocks_->Commit(r->blocks[b], h, parent);
  }
}

void Scheduler::OnStepDone(const SchedulerOutput& out) {
  for (const auto& s : out.seqs) {
    s.request->num_computed += s.num_tokens;
    CommitFullBlocks(s.request);
  }
}

}  // namespace strata
