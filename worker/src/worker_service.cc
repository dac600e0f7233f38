#include "worker_service.h"

#include <atomic>
#include <deque>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "strata/common/logging.h"
#include "strata/decode/decode_service.h"
#include "strata/prefill/prefill_service.h"

namespace strata::worker {
namespace {

// Streams one request's outputs (Msg: GenerateResponse for Generate, AttachResponse for
// Attach). Outputs arrive on the engine thread and are queued; one write is in flight at a time.
// The reactor deletes itself in OnDone; outputs arriving after that find `alive_` false and are
// dropped. `on_end` runs once when the stream is over (cancelled, broken or complete), before
// the reactor is deleted: it cancels an unkeyed request, or detaches a held one.
template <typename Msg>
class StreamReactor final : public grpc::ServerWriteReactor<Msg>, public ResponseSink {
 public:
  explicit StreamReactor(std::function<void(ResponseSink* self, bool completed)> on_end)
      : on_end_(std::move(on_end)) {}

  // From any thread: queue a message (`last` ends the stream with OK) or end with an error.
  void Push(Msg msg, bool last) {
    absl::MutexLock lock(&mu_);
    if (!alive_ || finishing_) return;
    queue_.push_back(std::move(msg));
    if (last) end_after_queue_ = true;
    MaybeWriteLocked();
  }
  void Fail(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    if (!alive_ || finishing_) return;
    finishing_ = true;
    if (!writing_)
      this->Finish(std::move(status));
    else pending_status_ = std::move(status);
  }

  // ResponseSink (a held request's stream).
  void Begin() override {
    if constexpr (std::is_same_v<Msg, v1::AttachResponse>) {
      Msg header;
      header.set_attached(true);
      Push(std::move(header), false);
    }
  }
  void Send(const v1::GenerateResponse& response, bool last) override {
    if constexpr (std::is_same_v<Msg, v1::AttachResponse>) {
      Msg m;
      *m.mutable_response() = response;
      Push(std::move(m), last);
    } else {
      Push(response, last);
    }
  }
  void End(const grpc::Status& status) override { Fail(status); }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {  // the router went away; OnCancel will follow
      finishing_ = true;
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
      return;
    }
    if (pending_status_) {
      this->Finish(*pending_status_);
      return;
    }
    MaybeWriteLocked();
  }
  void OnCancel() override {
    StreamOver(false);
    // A held request no longer writes here; any other stream has nothing more to say.
    Fail(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }
  void OnDone() override {
    bool completed;
    {
      absl::MutexLock lock(&mu_);
      alive_ = false;
      completed = completed_;
    }
    // A stream that ended early (router gone, write failed) may not have seen OnCancel.
    StreamOver(completed);
    self_.reset();  // may delete this
  }
  std::shared_ptr<StreamReactor> self_;

 private:
  void StreamOver(bool completed) {
    if (!over_.exchange(true)) on_end_(this, completed);
  }
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return;
    if (queue_.empty()) return;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    if (queue_.empty() && end_after_queue_) {
      finishing_ = true;
      completed_ = true;
      this->StartWriteAndFinish(&current_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    writing_ = true;
    this->StartWrite(&current_);
  }

  std::function<void(ResponseSink*, bool)> on_end_;
  std::atomic<bool> over_{false};
  absl::Mutex mu_;
  std::deque<Msg> queue_ ABSL_GUARDED_BY(mu_);
  Msg current_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool end_after_queue_ ABSL_GUARDED_BY(mu_) = false;
  bool alive_ ABSL_GUARDED_BY(mu_) = true;
  bool completed_ ABSL_GUARDED_BY(mu_) = false;  // the final message was written
  std::optional<grpc::Status> pending_status_ ABSL_GUARDED_BY(mu_);
};
using GenerateReactor = StreamReactor<v1::GenerateResponse>;
using AttachReactor = StreamReactor<v1::AttachResponse>;

}  // namespace

v1::GenerateResponse ToResponse(const RequestOutput& out) {
  v1::GenerateResponse m;
  m.mutable_tokens()->Assign(out.new_tokens.begin(), out.new_tokens.end());
  m.set_text(out.new_text);
  for (const auto& lp : out.logprobs) proto::ToProto(lp, m.add_logprobs());
  m.set_finished(out.finished);
  m.set_finish_reason(FinishReasonName(out.finish_reason));
  m.set_stop_reason(out.stop_reason);
  m.set_prompt_tokens(out.prompt_tokens);
  m.set_cached_tokens(out.cached_tokens);
  m.set_completion_tokens(out.completion_tokens);
  return m;
}

grpc::Status WorkerService::CheckGenerate(const v1::GenerateRequest& request) const {
  grpc::Status bad = proto::CheckVersion(request.protocol_version());
  if (bad.ok() && role_ == v1::ROLE_PREFILL) {
    bad = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "a prefill worker does not decode");
  }
  if (bad.ok()) bad = decode::CheckRemotePrefill(request, decode_);
  const int32_t resumed = request.resumed_tokens();
  if (bad.ok() && (resumed < 0 || resumed >= request.prompt_size())) {
    bad = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "resumed_tokens must be >= 0 and below the prompt's length");
  }
  if (bad.ok() && request.has_resume() &&
      (request.resume().key().empty() || request.resume().key().size() > kMaxResumeKeyBytes ||
       request.resume().tenant().size() > kMaxResumeKeyBytes)) {
    bad = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("a resume key must have 1 to ", kMaxResumeKeyBytes,
                                    " bytes, and its tenant at most as many"));
  }
  return bad;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  const std::string id = request->request_id();
  const bool remote_prefill = decode::WantsRemotePrefill(*request);
  decode::DecodeDriver* decode = decode_;
  EngineLoop* loop = loop_;
  // Cancels only a request this call started: a refused one (bad version, no decode driver for
  // a remote prefill, a key in use) has nothing to cancel, and its id may be another request's.
  auto started = std::make_shared<std::atomic<bool>>(false);
  std::function<void()> cancel = [=] {
    if (!started->load()) return;
    if (remote_prefill)
      decode->Cancel(id);
    else
      loop->Abort(id);
  };
  const bool keyed = request->has_resume() && held_ != nullptr;
  // A keyed request is detached, not cancelled, when its stream ends (HeldRequests).
  auto held = std::make_shared<std::shared_ptr<HeldRequest>>();
  HeldRequests* registry = held_;
  auto reactor = std::make_shared<GenerateReactor>([=](ResponseSink* self, bool completed) {
    if (*held != nullptr) {
      registry->Detach(*held, self);
    } else if (!completed) {
      cancel();  // cancelling a finished request is a no-op
    }
  });
  reactor->self_ = reactor;
  grpc::Status bad = CheckGenerate(*request);
  if (!bad.ok()) {
    reactor->Fail(bad);
    return reactor.get();
  }
  OutputCallback on_output;
  if (keyed) {
    auto added = held_->Add(request->resume(), cancel, reactor.get());
    if (!added.ok()) {
      reactor->Fail(proto::ToGrpc(added.status()));
      return reactor.get();
    }
    *held = *added;
    on_output = [h = *added](const absl::Status& st, const RequestOutput& out) {
      if (!st.ok()) {
        h->Fail(proto::ToGrpc(st));
        return;
      }
      h->Output(ToResponse(out), out.finished);
    };
  } else {
    std::weak_ptr<GenerateReactor> weak = reactor;
    on_output = [weak](const absl::Status& st, const RequestOutput& out) {
      auto r = weak.lock();
      if (!r) return;
      if (!st.ok()) {
        r->Fail(proto::ToGrpc(st));
        return;
      }
      r->Push(ToResponse(out), out.finished);
    };
  }
  started->store(true);
  if (remote_prefill) {
    decode::StartRemotePrefill(*decode_, *request, std::move(on_output));
    return reactor.get();
  }
  const int32_t resumed = request->resumed_tokens();
  std::vector<int32_t> prompt(request->prompt().begin(), request->prompt().end());
  ResumedOutput resumed_output;
  resumed_output.tokens.assign(prompt.end() - resumed, prompt.end());
  resumed_output.text_emitted = request->resumed_text_bytes();
  prompt.resize(prompt.size() - size_t(resumed));
  loop_->Submit(id, std::move(prompt), proto::FromProto(request->params()), std::move(on_output),
                std::move(resumed_output));
  return reactor.get();
}

grpc::ServerWriteReactor<v1::AttachResponse>* WorkerService::Attach(
    grpc::CallbackServerContext* context, const v1::AttachRequest* request) {
  auto held = std::make_shared<std::shared_ptr<HeldRequest>>();
  HeldRequests* registry = held_;
  auto reactor = std::make_shared<AttachReactor>([=](ResponseSink* self, bool) {
    if (*held != nullptr) registry->Detach(*held, self);
  });
  reactor->self_ = reactor;
  grpc::Status bad = proto::CheckVersion(request->protocol_version());
  if (bad.ok() && held_ == nullptr) {
    bad = grpc::Status(grpc::StatusCode::NOT_FOUND,
                       "this worker holds no requests (--detached-request-grace-s 0)");
  }
  if (!bad.ok()) {
    reactor->Fail(bad);
    return reactor.get();
  }
  auto attached = held_->Attach(request->resume(), reactor.get());
  if (!attached.ok()) {
    reactor->Fail(proto::ToGrpc(attached.status()));
    return reactor.get();
  }
  *held = *attached;
  return reactor.get();
}

grpc::ServerUnaryReactor* WorkerService::Prefill(grpc::CallbackServerContext* context,
                                                 const v1::PrefillRequest* request,
                                                 v1::PrefillResponse* response) {
  return prefill::ServePrefill(prefill_, loop_->engine_for_config().model_identity(), context,
                               request, response);
}

grpc::ServerUnaryReactor* WorkerService::AbortPrefill(grpc::CallbackServerContext* context,
                                                      const v1::AbortPrefillRequest* request,
                                                      v1::AbortPrefillResponse* response) {
  return prefill::ServeAbortPrefill(prefill_, context, request);
}

}  // namespace strata::worker
