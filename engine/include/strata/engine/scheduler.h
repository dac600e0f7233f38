#pragma once
// Continuous batching with chunked prefill under a token budget, and preemption by
// recompute when KV blocks run out.
//
// Every step, running requests are served first in admission order: a decoding request gets
// one token, a request still in prefill gets the next chunk of its prompt, as far as the
// step's token budget allows. Then waiting requests are admitted in order (after reusing their
// longest cached prefix) while the budget, the sequence limit and the free blocks allow. When
// a running request needs a block and none is free, the most recently admitted running
// request is preempted: its blocks are released (committed ones stay in the prefix cache) and
// it goes back to the front of the waiting queue, to be recomputed from its tokens later.
//
// Not thread-safe: owned by the engine thread.
#include <deque>
#include <vector>

#include "strata/engine/block_manager.h"
#include "strata/engine/request.h"

namespace strata {

struct SchedulerOptions {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 512;  // token budget of one step
  bool chunked_prefill = true;       // false: a prompt's prefill must fit one step
};

struct ScheduledSeq {
  Request* request;
  int32_t num_tokens;  // tokens to compute this step, from request->num_computed
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  std::vector<Request*> preempted;
  int64_t num_tokens = 0;
};

class Scheduler {
 public:
  // `hasher` hashes requests without a cache salt; a salted request's blocks are hashed with
  // hasher.Salted(its params.cache_salt), so they are shared only with the same salt.
  Scheduler(const SchedulerOptions& options, BlockManager* blocks, BlockHasher hasher);

  void Add(Request* request);
  // Adds a request whose first num_computed tokens already have KV in request->blocks (a
  // prefilled request), straight to the running batch; commits its full blocks.
  void AddRunning(Request* request);
  // Drops the request from the queues and releases its blocks.
  void Remove(Request* request);
  SchedulerOutput Schedule();
  // After the step ran: advances num_computed and commits newly filled blocks to the cache.
  void OnStepDone(const SchedulerOutput& out);

  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  uint64_t hash_seed() const { return hasher_.seed(); }
  const BlockHasher& hasher() const { return hasher_; }
  int num_running() const { return static_cast<int>(running_.size()); }
  // Tokens whose KV the running sequences hold (the decode step's attention context).
  int64_t running_context_tokens() const;
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  // Tokens of running and waiting requests whose KV is not computed yet.
  int64_t num_uncomputed_tokens() const;
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  // Grows the request's block table to hold `tokens` tokens; false if blocks ran out.
  bool EnsureBlocks(Request* r, int32_t tokens);
  void Preempt(Request* r);
  bool Admit(Request* r, int32_t budget, SchedulerOutput& out);
  void ReuseCachedPrefix(Request* r);
  void CommitFullBlocks(Request* r);

  SchedulerOptions options_;
  BlockManager* blocks_;
  BlockHasher hasher_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order
  int64_t num_preemptions_ = 0;
};

}  // namespace strata
