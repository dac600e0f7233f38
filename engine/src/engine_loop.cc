#include "strata/engine/engine_loop.h"

#include <algorithm>
#include <chrono>

#include "absl/synchronization/notification.h"
#include "strata/common/logging.h"

namespace strata {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  engine_->SetKvEventListener([this](const KvCacheEvent& e) {
    if (kv_observer_) kv_observer_(e);
    absl::MutexLock lock(&mu_);
    events_.push_back(e);
  });
  RefreshLoad(0);
  thread_ = std::thread([this] { Run(); });
}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Post(std::function<void(Engine&)> fn) {
  absl::MutexLock lock(&mu_);
  posted_.push_back(std::move(fn));
}

void EngineLoop::AddAfterStep(std::function<void(Engine&)> fn) {
  Post([this, fn = std::move(fn)](Engine&) { after_step_.push_back(fn); });
}

void EngineLoop::PostForPrompt(const std::string& id, std::span<const int32_t> prompt,
                               std::string_view cache_salt, EngineTask fn) {
  if (stager_ == nullptr) {
    Post(std::move(fn));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    staging_.insert(id);
  }
  stager_->Stage(prompt, cache_salt, [this, id, fn = std::move(fn)](EngineTask before) mutable {
    Post([this, id, fn = std::move(fn), before = std::move(before)](Engine& e) {
      if (before) before(e);
      fn(e);
      bool aborted;
      {
        absl::MutexLock lock(&mu_);
        staging_.erase(id);
        aborted = aborted_while_staging_.erase(id) > 0;
      }
      if (aborted) AbortOnEngineThread(e, id);
    });
  });
}

void EngineLoop::Submit(std::string id, std::vector<int32_t> prompt, SamplingParams params,
                        OutputCallback callback, ResumedOutput resumed) {
  auto shared_prompt = std::make_shared<std::vector<int32_t>>(std::move(prompt));
  // The tokens whose KV the request needs: the prompt, then what it had generated elsewhere
  // (a copy only for a resumed request).
  std::vector<int32_t> staged;
  if (!resumed.tokens.empty()) {
    staged = *shared_prompt;
    staged.insert(staged.end(), resumed.tokens.begin(), resumed.tokens.end());
  }
  if (stall_for_testing_.marker_token >= 0) {
    callback = WithStallForTesting(*shared_prompt, std::move(callback));
  }
  // A constraint is compiled here, on the submitting thread, not on the engine thread (which
  // then finds it in the engine's cache); `prepared` keeps it alive until the request is added.
  std::shared_ptr<grammar::TokenMasker> prepared;
  if (params.guided.active()) {
    auto masker = engine_->PrepareGrammar(params.guided);
    if (!masker.ok()) {
      callback(masker.status(), RequestOutput{});
      return;
    }
    prepared = *std::move(masker);
  }
  const std::string key = id;
  const std::string salt = params.cache_salt;  // copied: `params` moves into the task
  PostForPrompt(key, resumed.tokens.empty() ? *shared_prompt : staged, salt,
                [this, id = std::move(id), shared_prompt, params = std::move(params),
                 callback = std::move(callback), resumed = std::move(resumed),
                 prepared = std::move(prepared)](Engine& e) mutable {
                  absl::Status s = e.AddRequest(id, std::move(*shared_prompt), params, resumed);
                  if (!s.ok()) {
                    callback(s, RequestOutput{});
                    return;
                  }
                  callbacks_[id] = std::move(callback);
                });
}

OutputCallback EngineLoop::WithStallForTesting(const std::vector<int32_t>& prompt,
                                               OutputCallback callback) {
  const StallForTesting stall = stall_for_testing_;
  if (std::find(prompt.begin(), prompt.end(), stall.marker_token) == prompt.end()) return callback;
  auto produced = std::make_shared<int>(0);  // engine thread only
  return [stall, produced, callback = std::move(callback)](const absl::Status& s,
                                                           const RequestOutput& out) {
    const bool before = *produced >= stall.after_tokens;
    *produced += int(out.new_tokens.size());
    if (!before && *produced >= stall.after_tokens) {
      STRATA_LOG(Warning) << "test fault: the engine thread sleeps "
                          << absl::FormatDuration(stall.sleep) << " inside a step";
      absl::SleepFor(stall.sleep);
    }
    callback(s, out);
  };
}

void EngineLoop::TrackOnEngineThread(const std::string& id, OutputCallback callback) {
  callbacks_[id] = std::move(callback);
}

void EngineLoop::Abort(const std::string& id) {
  {
    absl::MutexLock lock(&mu_);
    if (staging_.contains(id)) aborted_while_staging_.insert(id);
  }
  Post([this, id](Engine& e) { AbortOnEngineThread(e, id); });
}

void EngineLoop::AbortOnEngineThread(Engine& e, const std::string& id) {
  const bool was_running = e.Abort(id);
  auto it = callbacks_.find(id);
  if (it == callbacks_.end()) return;
  OutputCallback cb = std::move(it->second);
  callbacks_.erase(it);
  if (!was_running) return;
  cb(absl::OkStatus(), AbortedOutput(id));
}

std::vector<KvCacheEvent> EngineLoop::TakeKvEvents() {
  absl::MutexLock lock(&mu_);
  std::vector<KvCacheEvent> out;
  out.swap(events_);
  return out;
}

void EngineLoop::ResyncKvEvents() {
  Post([this](Engine& e) {
    std::vector<BlockHash> hashes = e.block_manager().CachedHashes();
    absl::MutexLock lock(&mu_);
    events_.clear();
    events_.push_back({KvCacheEvent::Kind::kCleared, kRootBlockHash, -1});
    for (BlockHash h : hashes) events_.push_back({KvCacheEvent::Kind::kStored, h, -1});
  });
}

EngineLoad EngineLoop::load() const {
  absl::MutexLock lock(&mu_);
  return load_;
}

namespace {
int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void EngineLoop::MarkProgress(bool busy) {
  // The time first, then the flag: a reader that sees busy_ sees this period's time or newer.
  progress_ns_.store(SteadyNanos());
  busy_.store(busy);
}

absl::Duration EngineLoop::StallAge() const {
  if (!busy_.load()) return absl::ZeroDuration();
  return absl::Nanoseconds(std::max<int64_t>(0, SteadyNanos() - progress_ns_.load()));
}

void EngineLoop::RunOnEngine(std::function<void(Engine&)> fn) {
  absl::MutexLock stop(&stop_mu_);  // the loop cannot stop meanwhile
  absl::Notification done;
  bool posted = false;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      posted_.push_back([&](Engine& e) {
        fn(e);
        done.Notify();
      });
      posted = true;
    }
  }
  if (!posted) {
    fn(*engine_);  // stopped: Stop() joined the thread while it held stop_mu_
    return;
  }
  done.WaitForNotification();
}

void EngineLoop::Stop() {
  absl::MutexLock stop(&stop_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::Run() {
  for (;;) {
    std::vector<std::function<void(Engine&)>> work;
    {
      absl::MutexLock lock(&mu_);
      // Sleep while there is nothing to post and nothing to step.
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !posted_.empty(); };
      if (!engine_->HasUnfinished()) {
        MarkProgress(/*busy=*/false);
        mu_.Await(absl::Condition(&ready));
      }
      if (stopping_) break;
      work.swap(posted_);
    }
    // Each pass (posted closures, then a step) is one unit of progress.
    MarkProgress(/*busy=*/true);
    for (auto& fn : work) fn(*engine_);
    if (engine_->HasUnfinished()) {
      StepOnce();
    } else {
      engine_->FlushKvOffloads();  // blocks posted work evicted (e.g. for a reservation)
      RefreshLoad(0);  // posted work (aborts, released leases) changed the load
    }
  }
  MarkProgress(/*busy=*/false);
  FailAll(absl::UnavailableError("the worker is shutting down"));
}

void EngineLoop::StepOnce() {
  const auto start = std::chrono::steady_clock::now();
  auto outputs = engine_->Step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!outputs.ok()) {
    // A failed forward pass leaves no request in a trustworthy state: fail them all.
    STRATA_LOG(Error) << "engine step failed: " << outputs.status();
    FailAll(outputs.status());
    return;
  }
  for (const RequestOutput& o : *outputs) {
    auto it = callbacks_.find(o.request_id);
    if (it == callbacks_.end()) continue;
    it->second(absl::OkStatus(), o);
    if (o.finished) callbacks_.erase(it);
  }
  for (auto& fn : after_step_) fn(*engine_);
  RefreshLoad(seconds);
}

void EngineLoop::RefreshLoad(double step_seconds) {
  EngineLoad l;
  l.running = engine_->num_running();
  l.waiting = engine_->num_waiting();
  l.queued_prefill_tokens = engine_->queued_prefill_tokens();
  l.free_kv_blocks = engine_->block_manager().num_free_blocks();
  l.total_kv_blocks = engine_->block_manager().num_blocks();
  l.decode_context_tokens = engine_->running_context_tokens();
  const int64_t computed = engine_->stats().prompt_tokens_computed;
  l.prompt_tokens_computed = computed;
  const int64_t new_prompt_tokens = computed - last_prompt_tokens_computed_;
  last_prompt_tokens_computed_ = computed;
  absl::MutexLock lock(&mu_);
  l.prefill_tokens_per_second = load_.prefill_tokens_per_second;
  if (step_seconds > 0 && new_prompt_tokens > 0) {
    const double rate = static_cast<double>(new_prompt_tokens) / step_seconds;
    l.prefill_tokens_per_second = load_.prefill_tokens_per_second > 0
                                      ? 0.8 * load_.prefill_tokens_per_second + 0.2 * rate
                                      : rate;
  }
  l.steps = load_.steps + (step_seconds > 0 ? 1 : 0);
  l.step_seconds_ema =
      step_seconds > 0 ? 0.8 * load_.step_seconds_ema + 0.2 * step_seconds : load_.step_seconds_ema;
  load_ = l;
}

void EngineLoop::FailAll(const absl::Status& status) {
  auto callbacks = std::move(callbacks_);
  callbacks_.clear();
  for (auto& [id, cb] : callbacks) {
    engine_->Abort(id);
    cb(status, RequestOutput{});
  }
}

}  // namespace strata
