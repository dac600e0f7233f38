#pragma once
// Runs an Engine on its own thread and makes it usable from many threads: gRPC handlers,
// HTTP handlers and the heartbeat all talk to the engine through this loop.
//
// Work is posted as closures that run on the engine thread between steps (so they see the
// engine in a consistent state); the thread steps the engine while it has requests, and sleeps
// when idle. Per-request output callbacks run on the engine thread and must be cheap (queue the
// output for a network writer; never block).
//
// Thread-safety: every public method is thread-safe.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/engine/engine.h"

namespace strata {

// A snapshot of the engine's load, refreshed after every step.
struct EngineLoad {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t queued_prefill_tokens = 0;
  int32_t free_kv_blocks = 0;
  int32_t total_kv_blocks = 0;
  double step_seconds_ema = 0;
  int64_t steps = 0;
  // Prompt tokens computed per second of step time (EMA over steps that computed prompts).
  double prefill_tokens_per_second = 0;
  int64_t decode_context_tokens = 0;  // total context of the running sequences
  int64_t prompt_tokens_computed = 0;  // since start (tokens served from a cache excluded)
};

using EngineTask = std::function<void(Engine&)>;

// Brings a prompt's cached prefix up from lower KV tiers before its request is added (the
// worker's tiered store implements it; the engine knows no tiers). Stage() is called on the
// submitting thread and must call `ready` exactly once, from any thread, possibly before
// returning: with a task to run on the engine thread just before the request is added (e.g.
// Engine::ImportCachedBlocks of fetched blocks), or with an empty task when nothing is fetched.
class PromptStager {
 public:
  virtual ~PromptStager() = default;
  // `cache_salt` is the request's (SamplingParams::cache_salt), which its blocks' hashes depend
  // on; like `prompt`, valid only during the call.
  virtual void Stage(std::span<const int32_t> prompt, std::string_view cache_salt,
                     std::function<void(EngineTask)> ready) = 0;
};

// Output of one request: called for each increment, the last one finished (or with an error
// status, e.g. the engine failed; nothing follows an error).
using OutputCallback = std::function<void(const absl::Status&, const RequestOutput&)>;

class EngineLoop {
 public:
  explicit EngineLoop(std::unique_ptr<Engine> engine);
  ~EngineLoop();  // Stop()s

  // Runs `fn` on the engine thread before the next step.
  void Post(std::function<void(Engine&)> fn);
  // Runs `fn` on the engine thread and returns when it has run; once the loop is stopped, runs
  // it on the calling thread (the engine is idle then). Not from the engine thread.
  void RunOnEngine(std::function<void(Engine&)> fn);
  // Runs `fn` on the engine thread after every step that ran (e.g. posting KV transfers for
  // newly computed blocks), after the functions added before it. Add before the first request.
  void AddAfterStep(std::function<void(Engine&)> fn);

  // Stages every later prompt through `stager` (not owned; outlives the loop). Set before the
  // first request.
  void SetPromptStager(PromptStager* stager) { stager_ = stager; }
  // Observes every KV cache event on the engine thread (cheap; e.g. a mirror of the cache).
  // Set before the first request.
  void SetKvEventObserver(std::function<void(const KvCacheEvent&)> observer) {
    kv_observer_ = std::move(observer);
  }
  // Post() of `fn` after the prompt stager has staged `prompt` (at once without a stager).
  // If Abort(id) arrives while staging, `fn` still runs and the request it adds is aborted
  // right after, so its callback sees the abort as usual.
  void PostForPrompt(const std::string& id, std::span<const int32_t> prompt,
                     std::string_view cache_salt, EngineTask fn);

  // Adds a request (AddRequest, or AddPrefilledRequest via Post + Track). Errors from the
  // engine (bad parameters) come back through `callback`. A non-empty `resumed` continues a
  // request another worker had started (Engine::AddRequest with ResumedOutput).
  void Submit(std::string id, std::vector<int32_t> prompt, SamplingParams params,
              OutputCallback callback, ResumedOutput resumed = {});
  // Registers `callback` for a request added by a posted closure (engine thread only).
  void TrackOnEngineThread(const std::string& id, OutputCallback callback);
  // Aborts the request if it is still running; its callback gets a final output with
  // FinishReason::kAbort. No-op for unknown ids.
  void Abort(const std::string& id);

  // KV cache events (stored/removed) since the last call, in order.
  std::vector<KvCacheEvent> TakeKvEvents();
  // Replaces the pending events with one kStored event per block the prefix cache holds now
  // (parents unknown: kRootBlockHash), e.g. after (re-)registering with a router whose index
  // of this worker starts empty. Runs on the engine thread; later events follow in order.
  void ResyncKvEvents();
  EngineLoad load() const;
  // How long the loop has had work (unfinished requests or posted closures) without finishing
  // a step or a batch of posted closures: the time since its last progress while busy, zero
  // while it sleeps idle. Each step counts (a long prompt's chunks are separate steps), so only
  // a step or closure that does not return makes it grow. Cheap; any thread.
  absl::Duration StallAge() const;
  // Test-only fault injection: once per request whose prompt contains `marker_token`, after it
  // has produced `after_tokens` tokens, the engine thread sleeps for `sleep` inside the step
  // that delivered them (a hung device as the rest of the worker sees it). Off when
  // marker_token < 0. Set before the first request.
  struct StallForTesting {
    int32_t marker_token = -1;
    int after_tokens = 1;
    absl::Duration sleep = absl::ZeroDuration();
  };
  void SetStallForTesting(StallForTesting stall) { stall_for_testing_ = stall; }
  const Engine& engine_for_config() const { return *engine_; }  // immutable parts only

  // Stops the thread; outstanding requests get an Unavailable error. Idempotent.
  void Stop();

 private:
  void Run();
  void StepOnce();
  void RefreshLoad(double step_seconds);
  void FailAll(const absl::Status& status);
  void AbortOnEngineThread(Engine& e, const std::string& id);
  void MarkProgress(bool busy);
  OutputCallback WithStallForTesting(const std::vector<int32_t>& prompt, OutputCallback callback);

  std::unique_ptr<Engine> engine_;
  absl::Mutex stop_mu_;  // held by Stop() and RunOnEngine(): neither runs during the other
  mutable absl::Mutex mu_;
  std::vector<std::function<void(Engine&)>> posted_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<KvCacheEvent> events_ ABSL_GUARDED_BY(mu_);
  EngineLoad load_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> staging_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> aborted_while_staging_ ABSL_GUARDED_BY(mu_);
  PromptStager* stager_ = nullptr;
  std::function<void(const KvCacheEvent&)> kv_observer_;
  int64_t last_prompt_tokens_computed_ = 0;  // engine thread
  std::vector<std::function<void(Engine&)>> after_step_;
  // The loop's last progress (steady clock, ns) and whether it has work since: StallAge().
  std::atomic<int64_t> progress_ns_{0};
  std::atomic<bool> busy_{false};
  StallForTesting stall_for_testing_;
  // Engine thread only.
  absl::flat_hash_map<std::string, OutputCallback> callbacks_;
  std::thread thread_;
};

}  // namespace strata
