#include "local_backend.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace strata::worker {
namespace {

class LocalHandle final : public openai::GenerationHandle {
 public:
  LocalHandle(EngineLoop* loop, std::string id, std::shared_ptr<std::atomic<bool>> done)
      : loop_(loop), id_(std::move(id)), done_(std::move(done)) {}
  ~LocalHandle() override = default;  // a finished request needs no cancel; see backend.h
  void Cancel() override {
    if (!done_->exchange(true)) loop_->Abort(id_);
  }

 private:
  EngineLoop* loop_;
  std::string id_;
  std::shared_ptr<std::atomic<bool>> done_;
};

}  // namespace

openai::GenerateEvent ToEvent(const RequestOutput& out) {
  openai::GenerateEvent ev;
  ev.tokens = out.new_tokens;
  ev.text = out.new_text;
  ev.logprobs = out.logprobs;
  ev.finished = out.finished;
  ev.finish_reason = out.finish_reason;
  ev.prompt_tokens = out.prompt_tokens;
  ev.cached_tokens = out.cached_tokens;
  ev.completion_tokens = out.completion_tokens;
  if (out.finish_reason == FinishReason::kAbort) {
    ev.status = absl::CancelledError("request aborted");
  }
  return ev;
}

openai::BackendLoad LocalBackend::Load() const {
  const EngineLoad load = loop_->load();
  openai::BackendLoad out;
  out.running = load.running;
  out.waiting = load.waiting;
  out.tokens = load.decode_context_tokens + load.queued_prefill_tokens;
  out.kv_capacity_tokens = int64_t{load.total_kv_blocks} * block_size_;
  return out;
}

std::unique_ptr<openai::GenerationHandle> LocalBackend::Generate(openai::GenerateRequest request,
                                                                 openai::EventCallback on_event) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto handle = std::make_unique<LocalHandle>(loop_, request.request_id, done);
  if (max_waiting_ > 0) {
    const EngineLoad load = loop_->load();
    if (load.waiting >= max_waiting_) {
      // Overloaded: refused before it queues, with a retry hint of about one step per waiting
      // request ahead of it (at least a second).
      absl::Status busy = absl::ResourceExhaustedError(absl::StrCat(
          "the worker is overloaded: ", load.waiting, " requests are waiting; retry later"));
      const double wait_s = std::max(1.0, load.step_seconds_ema * load.waiting);
      busy.SetPayload(openai::kRetryAfterPayload, absl::Cord(absl::StrCat(wait_s)));
      done->store(true);
      openai::GenerateEvent ev;
      ev.status = std::move(busy);
      on_event(std::move(ev));
      return handle;
    }
  }
  loop_->Submit(request.request_id, std::move(request.prompt), std::move(request.params),
                [on_event = std::move(on_event), done](const absl::Status& st,
                                                       const RequestOutput& out) {
                  if (!st.ok()) {
                    done->store(true);
                    openai::GenerateEvent ev;
                    ev.status = st;
                    on_event(std::move(ev));
                    return;
                  }
                  if (out.finished) done->store(true);
                  on_event(ToEvent(out));
                });
  return handle;
}

}  // namespace strata::worker
