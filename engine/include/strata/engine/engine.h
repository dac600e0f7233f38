#pragma once
// The engine: a model on a plugin backend, a paged KV cache with prefix caching, continuous
// batching, sampling, stop conditions and streaming detokenization.
//
// Usage: AddRequest(...) any number of times, then call Step() until HasUnfinished() is
// false; each Step returns the incremental output of every request that made progress.
// Generate() does exactly that for a list of prompts.
//
// Not thread-safe: one thread drives an Engine (a worker wraps it in its own loop).
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "strata/engine/model_runner.h"
#include "strata/engine/request.h"
#include "strata/engine/scheduler.h"
#include "strata/text/tokenizer.h"

namespace strata {

class KvStaging;  // engine/src/kv_staging.h

// What a request resumed on this engine had already produced elsewhere (its worker failed while
// the answer was streaming): the tokens generated so far, and how many bytes of their text the
// client has seen.
struct ResumedOutput {
  std::vector<int32_t> tokens;
  size_t text_emitted = 0;
};

struct EngineOptions {
  std::string plugin = "cpu";  // plugin name or path (see LoadPlugin)
  RunnerOptions runner;
  SchedulerOptions scheduler;
  bool enable_prefix_caching = true;
  std::string cache_salt;  // mixed into every block hash of this engine
  // The cluster's block hash key (null: unkeyed hashes); requests' own cache salts
  // (SamplingParams::cache_salt) are mixed in on top.
  std::shared_ptr<const BlockHashKey> kv_hash_key;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  uint64_t default_seed = 0;  // seeds requests without a seed (request i gets seed + i)
  // Sample on the device through the plugin's `sample` entry when it has one, so a step
  // copies back token ids instead of logits rows; the rows of requests that need the host
  // sampler (penalties) still come back as logits. Same tokens either way (one sampling rule).
  bool device_sampling = true;
  // Host staging for KV block copies to and from the lower tiers: a ring of kv_block_bytes
  // slots (page-locked when the plugin can: its copies then run asynchronously), so the
  // blocks evicted or committed during a step are copied out without a synchronize each and
  // handed to the offload function together (see FlushKvOffloads). At least one slot.
  size_t kv_staging_bytes = size_t{64} << 20;
};

struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> new_tokens;
  std::string new_text;
  std::vector<SampleResult> logprobs;  // one per new token when requested
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;
  int32_t completion_tokens = 0;
};

// The final output of a request that was aborted (no new tokens).
inline RequestOutput AbortedOutput(const std::string& request_id) {
  RequestOutput out;
  out.request_id = request_id;
  out.finished = true;
  out.finish_reason = FinishReason::kAbort;
  return out;
}

// Prompt blocks a decode worker set aside for a prompt whose KV another worker computes:
// `blocks` covers the whole prompt; its first `cached_tokens / block_size` blocks already hold
// this engine's cached prefix, the rest are fresh and must be written before the request is
// added with AddPrefilledRequest (or given back with CancelReservation).
struct KvReservation {
  std::vector<BlockId> blocks;
  int32_t cached_tokens = 0;
};

struct Completion {
  std::string request_id;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<SampleResult> logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t cached_tokens = 0;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t prompt_tokens_computed = 0;
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const std::string& model_dir,
                                                        const EngineOptions& options);
  ~Engine();

  const ModelConfig& config() const { return runner_->config(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  ModelRunner& runner() { return *runner_; }
  size_t kv_block_bytes() const { return runner_->kv_block_bytes(); }
  const BlockManager& block_manager() const { return *blocks_; }
  const EngineStats& stats() const { return stats_; }
  int64_t max_model_len() const { return max_model_len_; }

  // InvalidArgument for bad parameters, an empty or too long prompt, or a duplicate id.
  absl::Status AddRequest(const std::string& request_id, std::vector<int32_t> prompt,
                          const SamplingParams& params);
  // A request that continues after `resumed`: its tokens count as generated (max_tokens,
  // penalties, the seeded generator's draws, completion_tokens), their KV is computed with the
  // prompt's, and the first output is the text after the first `resumed.text_emitted` bytes
  // (a tail held back for stop strings included) with the next token. InvalidArgument as
  // AddRequest, and for a token id out of range or text_emitted beyond the tokens' text.
  absl::Status AddRequest(const std::string& request_id, std::vector<int32_t> prompt,
                          const SamplingParams& params, const ResumedOutput& resumed);
  // Encodes `prompt` with the model's tokenizer (adding its special tokens, e.g. BOS).
  absl::Status AddTextRequest(const std::string& request_id, const std::string& prompt,
                              const SamplingParams& params);
  // Finishes the request with reason "abort" and frees its blocks; false if unknown.
  bool Abort(const std::string& request_id);

  // --- Disaggregated serving ---------------------------------------------------------------
  // Prefill side: runs the prompt and samples exactly one token (max_tokens is forced to 1;
  // stop strings are ignored), and on finishing keeps a reference on every block of the prompt
  // instead of freeing them, for TakeHeldBlocks().
  absl::Status AddPrefillRequest(const std::string& request_id, std::vector<int32_t> prompt,
                                 const SamplingParams& params);
  // The blocks a finished prefill request kept (prompt order); the caller owns one reference on
  // each and gives it back with ReleaseBlocks. Empty if unknown or already taken.
  std::vector<BlockId> TakeHeldBlocks(const std::string& request_id);
  // Extra references, e.g. while a transfer reads the blocks (a lease); ReleaseBlocks undoes.
  void PinBlocks(std::span<const BlockId> blocks);
  void ReleaseBlocks(std::span<const BlockId> blocks);
  // A live request (nullptr when unknown or finished): for progress of its prefill.
  const Request* FindRequest(const std::string& request_id) const;

  // Decode side: reserves the prompt's blocks, reusing this engine's cached prefix (never the
  // last prompt token, as for a local request). ResourceExhausted if blocks are short.
  absl::StatusOr<KvReservation> ReservePrompt(std::span<const int32_t> prompt,
                                              std::string_view cache_salt = {});
  void CancelReservation(KvReservation& reservation);
  // Adds a request whose prompt KV is already in `reservation`'s blocks and whose first token
  // `first` was sampled by the prefill side (with the same params and seed). The first token is
  // reported by the next Step() like any other; the request then decodes here. The
  // reservation is consumed on success and left to the caller on error.
  absl::Status AddPrefilledRequest(const std::string& request_id, std::vector<int32_t> prompt,
                                   const SamplingParams& params, KvReservation& reservation,
                                   const SampleResult& first);

  // Load, for heartbeats: sequences running and waiting, prompt tokens not yet computed.
  int num_running() const { return scheduler_->num_running(); }
  int num_waiting() const { return scheduler_->num_waiting(); }
  int64_t queued_prefill_tokens() const;
  int64_t running_context_tokens() const { return scheduler_->running_context_tokens(); }
  // Observes every KV block stored in or evicted from the prefix cache (engine thread).
  void SetKvEventListener(std::function<void(const KvCacheEvent&)> listener) {
    kv_listener_ = std::move(listener);
  }

  // --- Lower KV tiers (kvstore/, wired by the worker; the engine knows no tiers) -------------
  // A block's bytes (every layer, the pool layout; valid only during the call) handed to a
  // lower tier when the prefix cache evicts it (kEvict: write-back) or as soon as it is
  // committed (kCommit: write-through). Engine thread; must not call back into the engine.
  // The device-to-host copy is enqueued when the event happens (ahead of any device work that
  // could overwrite the block) and `fn` runs at the next flush: the start of the next Step,
  // the end of a Step that leaves nothing unfinished, ReservePrompt, ImportCachedBlocks,
  // FlushKvOffloads, or when the staging ring is full.
  enum class OffloadOn { kEvict, kCommit };
  using BlockOffloadFn =
      std::function<void(BlockHash hash, BlockHash parent, std::span<const std::byte> data)>;
  void SetBlockOffload(OffloadOn when, BlockOffloadFn fn);
  // The same hand-out without the staging copy: the block's bytes are copied from the device
  // straight into host memory the target reserves for it. `reserve(hash, parent)` returns
  // kv_block_bytes of memory inside `memory` and an id, or an error (the block is then not
  // offloaded: AlreadyExists when the target holds it, ResourceExhausted when it has no room,
  // anything else is logged); the copy is enqueued at once, and `finish(id, copied)` runs at
  // the next flush (copied false when the copy or the synchronize failed: the target frees the
  // memory). The engine registers `memory` with the backend where the plugin can (asynchronous
  // copies into it) and unregisters it when the offload is set again or the engine goes: it
  // must outlive both (or be given up through SetBlockOffload first). Replaces SetBlockOffload's
  // function; an error (registration failed) leaves the previous offload in place.
  struct BlockOffloadSlot {
    uint64_t id = 0;
    std::span<std::byte> bytes;
  };
  struct BlockOffloadTarget {
    std::function<absl::StatusOr<BlockOffloadSlot>(BlockHash hash, BlockHash parent)> reserve;
    std::function<void(uint64_t id, bool copied)> finish;
  };
  absl::Status SetBlockOffloadTarget(OffloadOn when, BlockOffloadTarget target,
                                     std::span<std::byte> memory);
  // Fills `dst` (kv_block_bytes of host memory) with block i's bytes; an error stops the import.
  using BlockFillFn = std::function<absl::Status(size_t i, std::span<std::byte> dst)>;
  struct ImportedBlock {
    BlockHash hash = 0;
    BlockHash parent = kRootBlockHash;
  };
  // Brings `blocks` (a run of one chain, in order) into the prefix cache as cached, unreferenced
  // blocks, so that the next request with that prefix reuses them. The chain before blocks[0]
  // should be cached already (`keep_cached` lists it: it is held for the duration so importing
  // cannot evict it). Blocks already cached are kept and skipped. Returns how many leading
  // blocks of `blocks` are cached afterwards (the import stops at the first fill error or when
  // no block can be allocated).
  int ImportCachedBlocks(std::span<const BlockHash> keep_cached,
                         std::span<const ImportedBlock> blocks, const BlockFillFn& fill);
  // Waits for the staged block copies and hands every pending offload to the offload function
  // (a no-op when none is pending). The engine's loop calls it when it goes idle.
  void FlushKvOffloads();
  // Offloads waiting for a flush.
  size_t pending_kv_offloads() const { return pending_offloads_.size(); }
  // Number of leading `hashes` in the prefix cache now.
  int CountCachedPrefix(std::span<const BlockHash> hashes) const {
    return blocks_->CountCachedPrefix(hashes);
  }
  uint64_t block_hash_seed() const { return scheduler_->hash_seed(); }
  // Hashes unsalted requests' blocks; Salted(cache_salt) for the others.
  const BlockHasher& block_hasher() const { return scheduler_->hasher(); }
  const std::string& model_identity() const { return model_identity_; }

  bool HasUnfinished() const { return !requests_.empty(); }
  absl::StatusOr<std::vector<RequestOutput>> Step();

  // Runs prompts as one continuous batch to completion.
  absl::StatusOr<std::vector<Completion>> Generate(const std::vector<std::string>& prompts,
                                                   const SamplingParams& params);
  // Compiles (or finds in the cache) a constraint over this engine's vocabulary, building the
  // vocabulary's token trie on first use. Thread-safe and independent of the engine thread:
  // callers that receive requests compile their constraints before handing them over, so the
  // engine thread only finds them in the cache. InvalidArgument for a bad constraint.
  // The vocabulary constraints mask, as the model sees it: ids past the tokenizer's (padding
  // rows of the embedding) and special tokens are never allowed.
  static std::shared_ptr<const grammar::TokenVocabulary> MaskVocabulary(const Tokenizer& tokenizer,
                                                                        int32_t vocab_size);
  absl::StatusOr<std::shared_ptr<grammar::TokenMasker>> PrepareGrammar(
      const GuidedDecoding& spec) const;
  // Logits of every position of `tokens` (a fresh sequence, no caching): for tests/tools.
  absl::StatusOr<std::vector<float>> ComputeLogits(const std::vector<int32_t>& tokens);

 private:
  Engine() = default;
  void ProcessSample(Request* r, std::span<float> logits, RequestOutput& out);
  void ReportFinished(std::vector<RequestOutput>& outputs);
  bool CheckStopStrings(Request* r);
  absl::Status Resume(Request& r, const ResumedOutput& resumed);
  // min(max_model_len, tokens the KV pool holds): a request's tokens stay below it.
  int64_t ContextLimit() const;
  absl::Status CheckTokenIds(std::span<const int32_t> ids, absl::string_view what) const;
  // EOS (unless ignore_eos) or one of the request's stop_token_ids.
  bool IsStopToken(const Request& r, int32_t token) const;
  // Fewer than the request's min_tokens generated: no stop token may be drawn, no stop string
  // ends it.
  static bool BelowMinTokens(const Request& r);
  // Calls fn(token) for each token IsStopToken would stop on (EOS unless ignore_eos, then the
  // request's stop_token_ids; repeats possible).
  template <typename Fn>
  void ForEachStopToken(const Request& r, Fn&& fn) const {
    if (!r.params.ignore_eos) {
      for (int32_t t : config().eos_token_ids) fn(t);
    }
    for (int32_t t : r.params.stop_token_ids) fn(t);
  }
  // Sets the logits of the tokens IsStopToken would stop on to -inf.
  void MaskStopTokens(const Request& r, std::span<float> logits) const;
  // Structured output (engine_grammar.cc). Compiles (or finds) the request's constraint.
  absl::Status AttachGrammar(Request& r);
  // Sets the logits of the tokens the constraint does not allow next to -inf; stop tokens are
  // allowed only where the output is complete. False when no token is allowed at all.
  bool MaskGrammar(const Request& r, std::span<float> logits) const;
  // The same rule (and min_tokens' ban on stop tokens) as a device mask: the allowed tokens'
  // bits set in `words` (ceil(vocab / 32) of them). False when no token is allowed at all.
  bool DeviceMask(const Request& r, uint32_t* words) const;
  // A request no token can continue (a vocabulary that cannot spell what its constraint needs
  // next) ends with "stop", stop_reason "constraint".
  void EndUnspellable(Request* r, RequestOutput& out);
  // Moves the request's automaton over `token` (stop tokens leave it where it is).
  void AdvanceGrammar(Request& r, int32_t token) const;
  // The output is complete and nothing may follow: the request ends with "stop".
  static bool GrammarComplete(const Request& r);
  // A resumed request whose output already ends with a stop token or holds a stop string.
  bool ResumedAtStop(Request* r);
  void Finish(Request* r, FinishReason reason);
  void EmitText(Request* r, RequestOutput& out);
  void ApplySample(Request* r, const SampleResult& s, RequestOutput& out);
  absl::StatusOr<std::unique_ptr<Request>> NewRequest(const std::string& request_id,
                                                      std::vector<int32_t> prompt,
                                                      const SamplingParams& params);

  void OnKvEvent(const KvCacheEvent& event);
  void OffloadBlock(const KvCacheEvent& event);
  // The next free staging slot; flushes first when the ring is full. ResourceExhausted when the
  // ring cannot be allocated.
  absl::StatusOr<std::span<std::byte>> AcquireStagingSlot();

  EngineOptions options_;
  std::function<void(const KvCacheEvent&)> kv_listener_;
  // Gives up the target's memory registration (after a flush).
  void DropOffloadTarget();

  OffloadOn offload_on_ = OffloadOn::kEvict;
  BlockOffloadFn offload_;
  BlockOffloadTarget target_;
  void* target_registered_ = nullptr;  // the target's memory, while registered with the backend
  std::vector<uint64_t> pending_direct_;  // reserved slots being copied into
  struct PendingOffload {
    BlockHash hash = 0;
    BlockHash parent = kRootBlockHash;
    size_t slot = 0;
  };
  std::vector<PendingOffload> pending_offloads_;  // copied (or being copied) into their slots
  std::unique_ptr<ModelRunner> runner_;
  // After runner_: released (unregistered) while the backend still exists.
  std::unique_ptr<KvStaging> staging_;  // created on first use
  size_t staging_used_ = 0;             // slots handed out since the last flush
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<Scheduler> scheduler_;
  absl::flat_hash_map<std::string, std::unique_ptr<Request>> requests_;
  std::vector<Request*> finished_;      // finished since the last Step, still in requests_
  std::vector<RequestOutput> pending_;  // outputs produced outside Step (prefilled requests)
  absl::flat_hash_map<std::string, std::vector<BlockId>> held_;  // finished prefill requests
  uint64_t next_arrival_ = 0;
  int64_t max_model_len_ = 0;
  std::string model_identity_;
  size_t max_stop_len_ = 0;
  // Compiled constraints over this engine's vocabulary, built on the first guided request.
  // Built on first use by PrepareGrammar, from any thread.
  mutable absl::once_flag maskers_once_;
  mutable std::unique_ptr<grammar::MaskerCache> maskers_;
  EngineStats stats_;
};

}  // namespace strata
