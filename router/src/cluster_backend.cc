#include "cluster_backend.h"

#include <grpcpp/alarm.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "strata/common/block_hash.h"
#include "strata/common/logging.h"

namespace strata::router {
namespace {

openai::GenerateEvent ToEvent(const v1::GenerateResponse& m) {
  openai::GenerateEvent ev;
  ev.tokens.assign(m.tokens().begin(), m.tokens().end());
  ev.text = m.text();
  for (const auto& s : m.logprobs()) ev.logprobs.push_back(proto::FromProto(s));
  ev.finished = m.finished();
  const std::string& r = m.finish_reason();
  ev.finish_reason = r == "stop"     ? FinishReason::kStop
                     : r == "length" ? FinishReason::kLength
                     : r == "abort"  ? FinishReason::kAbort
                                     : FinishReason::kNone;
  if (ev.finish_reason == FinishReason::kAbort) ev.status = absl::CancelledError("aborted");
  ev.prompt_tokens = m.prompt_tokens();
  ev.cached_tokens = m.cached_tokens();
  ev.completion_tokens = m.completion_tokens();
  return ev;
}

// A worker stream of a call: a Generate (an attempt) or an Attach (a probe that took over a
// held request).
class CallStream {
 public:
  virtual ~CallStream() = default;
  virtual void TryCancel() = 0;
};

class ProbeGroup;

// One request's life on the cluster, across attempts (a retry after a worker vanished).
struct CallState {
  ClusterBackend* backend;
  openai::GenerateRequest request;
  uint64_t fingerprint = 0;  // a keyed request's (ResumeKey.fingerprint)
  absl::Mutex mu;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  // The front end's callback, dropped after the last event or on Cancel (Backend's contract):
  // it holds the front end's per-request state, which holds this call's handle, and so this
  // state; kept, the pair would never be freed. Called through Deliver.
  std::shared_ptr<const openai::EventCallback> on_event ABSL_GUARDED_BY(mu);
  std::shared_ptr<CallStream> current ABSL_GUARDED_BY(mu);
  AdmissionQueue::Ticket ticket ABSL_GUARDED_BY(mu) = AdmissionQueue::kNoTicket;  // waiting
  std::vector<std::string> exclude;  // workers that failed this request
  int attempts = 0;
  // A stream's tokens and text bytes handed to the client so far: where a resumed attempt
  // continues when its worker fails after the answer started streaming.
  std::vector<int32_t> delivered_tokens;
  uint64_t delivered_text = 0;
  int resumes = 0;
  double arrival_s = 0;     // ClusterBackend::Now() at Generate
  double failed_at_s = -1;  // when its last worker failed (-1: none has)
  // A keyed request looking for a worker that holds it (ProbeGroup); reset once decided.
  std::shared_ptr<ProbeGroup> probe;
};

// Hands an event to the front end; after the last one (finished or an error) the callback is
// dropped. A no-op once it has been dropped.
void Deliver(CallState& state, openai::GenerateEvent ev);
void StartAttempt(std::shared_ptr<CallState> state);
void PlaceOrAnswer(const std::shared_ptr<CallState>& state);
void Answer(const std::shared_ptr<CallState>& state, absl::Status status);
// How many times a request is placed again after its worker failed: from the start before its
// client saw anything, or (a stream) resumed from the tokens the client has.
constexpr int kMaxRetries = 3;
constexpr int kMaxResumes = 3;

// Asks every decode-capable worker, in parallel, to Attach to a keyed request (a client's retry,
// typically after its router died): the first whose stream has it serves the call, the other
// probes are cancelled. When none has it (NOT_FOUND, unreachable, or no answer within
// kProbeTimeoutS), the request starts as usual, or, when its client has part of the answer
// already (resume_only), is answered NOT_FOUND. On a router that has just started, the probes
// wait until the workers have had time to register again (ClusterBackend's resume settle).
// Kept alive by the call (CallState::probe) until it decides, then by its probes.
class ProbeGroup : public std::enable_shared_from_this<ProbeGroup> {
 public:
  static constexpr double kProbeTimeoutS = 1.0;
  // `only` (optional): ask just this worker (one that refused to start the request because
  // it holds the key already).
  explicit ProbeGroup(std::shared_ptr<CallState> state, std::string only = "")
      : state_(std::move(state)), only_(std::move(only)) {}
  // Probes now, or at `not_before_s` (ClusterBackend::Now() seconds) if that is later.
  void Start(double not_before_s);
  // A probe's stream has the request: true if it is the first (it now serves the call).
  bool Win(std::shared_ptr<CallStream> stream);
  // A probe ended without having the request.
  void Lost(const grpc::Status& status);

 private:
  void Probe();
  void Expire();
  void Decide(bool conflict) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<CallState> state_;
  const std::string only_;
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool decided_ ABSL_GUARDED_BY(mu_) = false;
  bool conflict_ ABSL_GUARDED_BY(mu_) = false;  // a worker holds the key for another request
  bool expired_ ABSL_GUARDED_BY(mu_) = false;   // the probes' time is up: none may win now
  std::vector<std::weak_ptr<CallStream>> probes_ ABSL_GUARDED_BY(mu_);
  grpc::Alarm settle_alarm_, deadline_alarm_;
};

// One gRPC server stream from a decode worker: a Generate of a placed request (Msg =
// GenerateResponse), or an Attach to a request held there (Msg = AttachResponse; see
// ProbeGroup). Keeps itself alive (self_) until OnDone. Watched for silence
// (ClusterBackend::Watch) from Start to OnDone.
template <typename Msg>
class Attempt final : public grpc::ClientReadReactor<Msg>, public WatchedStream, public CallStream {
 public:
  static constexpr bool kAttach = std::is_same_v<Msg, v1::AttachResponse>;
  Attempt(std::shared_ptr<CallState> state, Placement placement,
          std::shared_ptr<v1::Worker::Stub> decode_stub,
          std::shared_ptr<ProbeGroup> probe = nullptr)
      : state_(std::move(state)),
        placement_(std::move(placement)),
        decode_stub_(std::move(decode_stub)),
        placed_at_(absl::Now()),
        probe_(std::move(probe)) {
    // An attach was placed by another router: no prediction of this one's to check.
    observed_ = kAttach;
  }

  void CancelIfIdleSince(double cutoff) override {
    if (last_message_s_.load() >= cutoff || idle_cancelled_.exchange(true)) return;
    context_.TryCancel();  // OnDone follows (never inline) and places the request again
  }

  void Start(std::shared_ptr<Attempt> self) {
    self_ = std::move(self);
    if constexpr (kAttach) {
      StartAttach();
    } else {
      StartGenerate();
    }
    last_message_s_.store(ClusterBackend::Now());
    state_->backend->Watch(this);
    this->StartRead(&response_);
    this->StartCall();
  }
  void TryCancel() override { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status
    last_message_s_.store(ClusterBackend::Now());
    if constexpr (kAttach) {
      if (!attached_) {
        // Another worker's stream won, or the worker broke the protocol: not this one.
        if (!response_.attached() || !TakeOver()) {
          TryCancel();
          return;
        }
        attached_ = true;
        this->StartRead(&response_);
        return;
      }
      OnResponse(response_.response());
    } else {
      OnResponse(response_);
    }
    this->StartRead(&response_);
  }

 private:
  void StartGenerate() {
    const openai::GenerateRequest& r = state_->request;
    request_.set_protocol_version(proto::kProtocolVersion);
    request_.set_request_id(r.request_id);
    request_.mutable_prompt()->Assign(r.prompt.begin(), r.prompt.end());
    // A resumed stream: the tokens the client has, as the end of the prompt.
    const std::vector<int32_t>& had = state_->delivered_tokens;
    for (int32_t t : had) request_.add_prompt(t);
    request_.set_resumed_tokens(int32_t(had.size()));
    request_.set_resumed_text_bytes(state_->delivered_text);
    proto::ToProto(r.params, request_.mutable_params());
    request_.set_prefill_address(placement_.prefill_address);
    // Keyed: held by the worker past this stream, for a retry through another router to attach
    // to. Only from the start: a resumed stream's replay would not begin with the answer's
    // first event, so no other router could continue it exactly.
    if (!r.idempotency_key.empty() && had.empty()) {
      v1::ResumeKey* key = request_.mutable_resume();
      key->set_tenant(r.api_key_id);
      key->set_key(r.idempotency_key);
      key->set_fingerprint(state_->fingerprint);
    }
    decode_stub_->async()->Generate(&context_, &request_, this);
  }
  void StartAttach() {
    attach_request_.set_protocol_version(proto::kProtocolVersion);
    v1::ResumeKey* key = attach_request_.mutable_resume();
    key->set_tenant(state_->request.api_key_id);
    key->set_key(state_->request.idempotency_key);
    key->set_fingerprint(state_->fingerprint);
    decode_stub_->async()->Attach(&context_, &attach_request_, this);
  }
  // An attach probe's stream has the request: it becomes the call's stream unless another
  // probe's did first.
  bool TakeOver();

  void OnResponse(const v1::GenerateResponse& msg) {
    openai::GenerateEvent ev = ToEvent(msg);
    if (!got_any_ && !ev.tokens.empty() && !observed_) {
      ObserveFirstToken(absl::Now() - placed_at_);
      state_->backend->WakeQueue();  // the prefill is done: its queue slot is free
    }
    got_any_ = true;
    if (ev.finished) finished_ = true;
    // Events are held until the client would see one: a stream's first event with tokens or
    // text, a non-streaming answer's end. So a worker that dies before that leaves nothing
    // delivered, and the request can start over elsewhere (held events are dropped).
    const bool visible = state_->request.stream && (!ev.tokens.empty() || !ev.text.empty());
    held_.push_back(std::move(ev));
    if (visible || finished_) {
      delivered_ = true;
      for (openai::GenerateEvent& e : held_) {
        if (state_->request.stream) {
          state_->delivered_tokens.insert(state_->delivered_tokens.end(), e.tokens.begin(),
                                          e.tokens.end());
          state_->delivered_text += e.text.size();
        }
        Deliver(*state_, std::move(e));
      }
      held_.clear();
    }
  }

 public:
  void OnDone(const grpc::Status& grpc_status) override {
    ClusterBackend* b = state_->backend;
    b->Unwatch(this);
    if (kAttach && !attached_) {  // a probe that found nothing (or lost): its group decides
      ProbeDone(grpc_status);
      self_.reset();  // may delete this
      return;
    }
    // Cancelled for silence: the worker is as good as gone (a hung engine), and the request
    // moves on as when a worker dies.
    const bool idle = idle_cancelled_.load() && !finished_;
    const grpc::Status status =
        idle ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrFormat("no message from the worker for %gs (the router's "
                                            "worker stream idle timeout)",
                                            b->stream_idle_timeout_s()))
             : grpc_status;
    if (idle && b->metrics().idle_timeouts) b->metrics().idle_timeouts->Increment();
    if (!observed_) ObserveFirstToken(absl::InfiniteDuration());  // releases the ledger only
    b->pool()->AddInflight(placement_.decode_id, -1);
    if (!placement_.prefill_id.empty()) b->pool()->AddInflight(placement_.prefill_id, -1);
    if (b->metrics().inflight) b->metrics().inflight->Decrement();
    bool cancelled;
    {
      absl::MutexLock lock(&state_->mu);
      cancelled = state_->cancelled;
      if (state_->current.get() == this) state_->current.reset();
    }
    // A worker that died or vanished: the decode worker, or the prefill worker it was sent to
    // when the decode worker says that one is unreachable.
    const bool gone = !status.ok() && !finished_ && !cancelled &&
                      status.error_code() == grpc::StatusCode::UNAVAILABLE;
    const bool prefill_down =
        !placement_.prefill_id.empty() &&
        absl::StartsWith(status.error_message(), proto::kPrefillUnavailablePrefix);
    const std::string& down = prefill_down ? placement_.prefill_id : placement_.decode_id;
    const bool streamed = !state_->delivered_tokens.empty();  // the client has tokens
    // The worker holds this key already (a retry whose probes missed it, e.g. a router that
    // has just started): attach to that request rather than answer 409.
    if constexpr (!kAttach) {
      if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS && !delivered_ && !streamed &&
          !cancelled && state_->attempts <= kMaxRetries) {
        auto group = std::make_shared<ProbeGroup>(state_, placement_.decode_id);
        {
          absl::MutexLock lock(&state_->mu);
          state_->probe = group;
        }
        group->Start(0);
        b->WakeQueue();
        self_.reset();  // may delete this
        return;
      }
    }
    // A client that resumes has part of the answer from another router: it cannot start over.
    if (gone && !streamed && !delivered_ && state_->attempts <= kMaxRetries &&
        !state_->request.resume_only) {
      // Before the client saw anything (before the first token of a stream; any time before
      // the end of a non-streaming request, whose tokens so far are dropped): forget it and
      // place again.
      b->pool()->Remove(down, status.error_message());
      state_->exclude.push_back(down);
      state_->failed_at_s = ClusterBackend::Now();
      if (b->metrics().retries) b->metrics().retries->Default()->Increment();
      StartAttempt(state_);
    } else if (gone && streamed && state_->resumes < kMaxResumes) {
      // After the stream started: continue it on another worker from the tokens the client
      // has (they end the prompt there and count as output), so nothing it saw is sent twice.
      b->pool()->Remove(down, status.error_message());
      state_->exclude.push_back(down);
      state_->failed_at_s = ClusterBackend::Now();
      ++state_->resumes;
      if (b->metrics().resumes) b->metrics().resumes->Increment();
      PlaceOrAnswer(state_);
    } else if (!status.ok() && !finished_) {
      openai::GenerateEvent ev;
      ev.status = cancelled ? absl::CancelledError("cancelled") : proto::FromGrpc(status);
      if (gone) {  // say which worker went away and why the request was not placed again
        ev.status = absl::UnavailableError(
            absl::StrCat("worker ", down, " failed ",
                         streamed ? absl::StrCat("after the answer had started streaming (resumed ",
                                                 state_->resumes, " times already)")
                         : delivered_ ? std::string("after the answer had started streaming")
                                      : absl::StrCat("on the request's try ", state_->attempts),
                         ": ", status.error_message()));
      }
      Deliver(*state_, std::move(ev));
    }
    b->WakeQueue();  // a decode slot (and the stream's share of the batch) is free
    self_.reset();   // may delete this
  }

 private:
  // Reports a probe's end to its group (ProbeGroup).
  void ProbeDone(const grpc::Status& status);
  // Tells the placer the prefill is over; a finite `ttft` also feeds its TTFT correction.
  void ObserveFirstToken(absl::Duration ttft) {
    observed_ = true;
    const bool timed = ttft != absl::InfiniteDuration();
    ClusterBackend* b = state_->backend;
    b->placer()->OnFirstToken(placement_, timed ? absl::ToDoubleSeconds(ttft) : -1);
    if (!timed || placement_.predicted_ttft_s <= 0) return;
    const std::string& at =
        placement_.prefill_id.empty() ? placement_.decode_id : placement_.prefill_id;
    const ClusterBackendMetrics& m = b->metrics();
    if (m.ttft_correction) m.ttft_correction->WithLabels({at})->Set(b->placer()->TtftCorrection(at));
    if (m.ttft_error) {
      m.ttft_error->Default()->Observe(absl::ToDoubleSeconds(ttft) / placement_.predicted_ttft_s);
    }
  }

  std::shared_ptr<CallState> state_;
  Placement placement_;
  // Declared before context_, so it outlives the call: its channel is then destroyed where
  // proto::ShareCallbackStub says, never inside OnDone's `self_.reset()`.
  std::shared_ptr<v1::Worker::Stub> decode_stub_;
  absl::Time placed_at_;
  bool observed_ = false;
  std::shared_ptr<Attempt> self_;
  std::shared_ptr<ProbeGroup> probe_;  // an attach probe's group
  bool attached_ = false;  // an attach: the worker has the request, and this serves the call
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::AttachRequest attach_request_;
  Msg response_;
  bool finished_ = false, got_any_ = false;
  bool delivered_ = false;                   // an event reached the front end
  std::atomic<double> last_message_s_{0};    // ClusterBackend::Now() of the last message
  std::atomic<bool> idle_cancelled_{false};  // cancelled by the idle check
  std::vector<openai::GenerateEvent> held_;  // events the client would not have seen yet
};

template <typename Msg>
bool Attempt<Msg>::TakeOver() {
  if (!probe_->Win(self_)) return false;
  ClusterBackend* b = state_->backend;
  b->pool()->AddInflight(placement_.decode_id, 1);
  if (b->metrics().inflight) b->metrics().inflight->Increment();
  return true;
}

template <typename Msg>
void Attempt<Msg>::ProbeDone(const grpc::Status& status) {
  probe_->Lost(status);
}

void ProbeGroup::Start(double not_before_s) {
  const double wait_s = not_before_s - ClusterBackend::Now();
  if (wait_s <= 0) {
    Probe();
    return;
  }
  std::weak_ptr<ProbeGroup> weak = weak_from_this();
  settle_alarm_.Set(
      std::chrono::system_clock::now() + std::chrono::microseconds(int64_t(wait_s * 1e6)),
      [weak](bool ok) {
        auto g = weak.lock();
        if (g == nullptr) return;
        if (ok) {
          g->Probe();
        } else {  // the process is shutting down
          g->Decide(false);
        }
      });
}

void ProbeGroup::Probe() {
  ClusterBackend* b = state_->backend;
  std::vector<std::shared_ptr<v1::Worker::Stub>> stubs;
  const std::vector<WorkerView> workers =
      b->pool()->SnapshotModel(state_->request.model, &stubs);
  std::vector<std::shared_ptr<Attempt<v1::AttachResponse>>> probes;
  for (size_t i = 0; i < workers.size(); ++i) {
    if (workers[i].role != WorkerRole::kDecode && workers[i].role != WorkerRole::kMixed) continue;
    if (!only_.empty() && workers[i].id != only_) continue;
    Placement at;
    at.decode_id = workers[i].id;
    probes.push_back(std::make_shared<Attempt<v1::AttachResponse>>(state_, std::move(at), stubs[i],
                                                                   shared_from_this()));
  }
  if (probes.empty()) {
    // No decode worker registered yet (a router that has just started): ask them once the
    // first registers, within the router's worker grace.
    std::weak_ptr<ProbeGroup> weak = weak_from_this();
    const bool parked = only_.empty() && b->AwaitDecodeWorker(state_->request.model, -1,
                                                              [weak](const absl::Status& s) {
      if (auto g = weak.lock()) {
        if (s.ok()) {
          g->Probe();
        } else {
          g->Decide(false);
        }
      }
    });
    if (!parked) Decide(false);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    pending_ = int(probes.size());
    for (const auto& p : probes) probes_.push_back(p);
  }
  std::weak_ptr<ProbeGroup> weak = weak_from_this();
  deadline_alarm_.Set(
      std::chrono::system_clock::now() + std::chrono::milliseconds(int64_t(kProbeTimeoutS * 1000)),
      [weak](bool ok) {
        if (auto g = weak.lock(); g != nullptr && ok) g->Expire();
      });
  for (auto& p : probes) p->Start(p);
}

bool ProbeGroup::Win(std::shared_ptr<CallStream> stream) {
  std::vector<std::weak_ptr<CallStream>> others;
  {
    absl::MutexLock lock(&mu_);
    if (decided_ || expired_) return false;
    decided_ = true;
    others.swap(probes_);
  }
  bool cancelled;
  {
    absl::MutexLock lock(&state_->mu);
    cancelled = state_->cancelled;
    state_->current = stream;
    state_->probe.reset();
  }
  if (cancelled) stream->TryCancel();
  for (auto& weak : others) {
    auto other = weak.lock();
    if (other != nullptr && other != stream) other->TryCancel();
  }
  if (auto* m = state_->backend->metrics().attaches) m->WithLabels({"attached"})->Increment();
  return true;
}

void ProbeGroup::Lost(const grpc::Status& status) {
  bool conflict;
  {
    absl::MutexLock lock(&mu_);
    if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) conflict_ = true;
    if (--pending_ > 0 || decided_) return;
    conflict = conflict_;
  }
  Decide(conflict);
}

void ProbeGroup::Expire() {
  std::vector<std::weak_ptr<CallStream>> probes;
  {
    absl::MutexLock lock(&mu_);
    if (decided_) return;
    expired_ = true;
    probes = probes_;
  }
  for (auto& weak : probes) {
    if (auto p = weak.lock()) p->TryCancel();  // ends as a probe that found nothing
  }
}

void ProbeGroup::Decide(bool conflict) {
  {
    absl::MutexLock lock(&mu_);
    decided_ = true;
    probes_.clear();
  }
  bool cancelled;
  {
    absl::MutexLock lock(&state_->mu);
    cancelled = state_->cancelled;
    state_->probe.reset();  // may leave this alive only through the caller's reference
  }
  if (cancelled) return;  // its client left while the workers were asked
  const ClusterBackendMetrics& m = state_->backend->metrics();
  if (conflict) {
    if (m.attaches) m.attaches->WithLabels({"conflict"})->Increment();
    Answer(state_, absl::AlreadyExistsError(
                       "the Idempotency-Key was used for another request (a different prompt or "
                       "parameters) whose answer is still held: use a new key"));
    return;
  }
  if (m.attaches) m.attaches->WithLabels({"not_found"})->Increment();
  if (state_->request.resume_only) {
    Answer(state_, absl::NotFoundError(
                       "no worker holds the request with this Idempotency-Key any longer (its "
                       "grace period ran out, or its worker failed), so the stream cannot be "
                       "continued: send the request again without Last-Event-ID to start over"));
    return;
  }
  StartAttempt(state_);
}

// What a key's worker checks that a retry is the same request: the prompt, the sampling
// parameters and the model.
uint64_t RequestFingerprint(const openai::GenerateRequest& r) {
  v1::SamplingParams params;
  proto::ToProto(r.params, &params);
  std::string bytes;
  params.SerializeToString(&bytes);
  return HashBlock(BlockHashSeed(r.model, bytes), 0, std::span<const int32_t>(r.prompt));
}

// The hashes of the prompt's full blocks, in its model's pool.
std::vector<BlockHash> PromptChain(const WorkerPool& pool, std::string_view model,
                                   const std::vector<int32_t>& prompt,
                                   std::string_view cache_salt) {
  const int bs = pool.block_size(model);
  if (bs <= 0) return {};
  const size_t full = prompt.size() / size_t(bs);
  return pool.Hasher(cache_salt, model)
      .Chain(std::span<const int32_t>(prompt.data(), full * bs), bs);
}

// The Worker stub of the placement's decode worker, from the snapshot it was placed on.
std::shared_ptr<v1::Worker::Stub> DecodeStub(
    const std::vector<WorkerView>& workers,
    const std::vector<std::shared_ptr<v1::Worker::Stub>>& stubs, const Placement& placed) {
  for (size_t i = 0; i < workers.size(); ++i) {
    if (workers[i].id == placed.decode_id) return stubs[i];
  }
  STRATA_LOG(Fatal) << "placed on " << placed.decode_id << ", which is not in the snapshot";
  return nullptr;
}

// Places the request and starts its attempt; the placement's error when it cannot be placed.
absl::Status TryStart(const std::shared_ptr<CallState>& state) {
  ClusterBackend* b = state->backend;
  WorkerPool* pool = b->pool();
  // A resumed stream's prompt ends with the tokens its client has; its prefill stays local.
  std::vector<int32_t> resumed_prompt;
  const std::vector<int32_t>* prompt = &state->request.prompt;
  if (!state->delivered_tokens.empty()) {
    resumed_prompt = *prompt;
    resumed_prompt.insert(resumed_prompt.end(), state->delivered_tokens.begin(),
                          state->delivered_tokens.end());
    prompt = &resumed_prompt;
  }
  PlacementRequest pr;
  pr.prompt_tokens = int32_t(prompt->size());
  pr.local_prefill = prompt != &state->request.prompt;
  const std::string& model = state->request.model;
  pr.block_size = pool->block_size(model);
  pr.exclude = state->exclude;
  pr.slo_class = state->request.slo_class;
  pr.max_tokens = state->request.params.max_tokens;
  pr.waited_s = ClusterBackend::Now() - state->arrival_s;
  const std::vector<BlockHash> chain =
      PromptChain(*pool, model, *prompt, state->request.params.cache_salt);
  const std::vector<WorkerMatch> matches = pool->MatchPrefix(chain, model);
  // Only the request's model's workers: another model's could neither read its KV nor run it.
  std::vector<std::shared_ptr<v1::Worker::Stub>> stubs;
  std::vector<WorkerView> workers = pool->SnapshotModel(model, &stubs);
  auto placed = b->placer()->Place(workers, matches, pr);
  if (absl::IsUnavailable(placed.status()) && !pr.exclude.empty()) {
    // Every decode worker has failed this request once; those registered now are back (a
    // restarted process, a healed link): better one of them than no answer.
    pr.exclude.clear();
    workers = pool->SnapshotModel(model, &stubs);
    placed = b->placer()->Place(workers, matches, pr);
  }
  if (!placed.ok()) return placed.status();
  pool->AddInflight(placed->decode_id, 1);
  if (!placed->prefill_id.empty()) pool->AddInflight(placed->prefill_id, 1);
  // The prompt's KV will be there (computed, or received from the prefill worker) before the
  // workers' next heartbeats say so.
  pool->NoteRouted(placed->decode_id, chain, model);
  if (!placed->prefill_id.empty()) pool->NoteRouted(placed->prefill_id, chain, model);
  if (b->metrics().inflight) b->metrics().inflight->Increment();
  if (b->metrics().placements) {
    b->metrics().placements->WithLabels({placed->prefill_id.empty() ? "local" : "remote"})
        ->Increment();
  }
  auto attempt = std::make_shared<Attempt<v1::GenerateResponse>>(
      state, std::move(*placed), DecodeStub(workers, stubs, *placed));
  {
    absl::MutexLock lock(&state->mu);
    state->current = attempt;
    if (state->cancelled) attempt->TryCancel();
  }
  attempt->Start(attempt);
  return absl::OkStatus();
}

void Deliver(CallState& state, openai::GenerateEvent ev) {
  std::shared_ptr<const openai::EventCallback> callback;
  {
    absl::MutexLock lock(&state.mu);
    callback = ev.finished || !ev.status.ok() ? std::move(state.on_event) : state.on_event;
  }
  if (callback != nullptr) (*callback)(std::move(ev));
}

void Answer(const std::shared_ptr<CallState>& state, absl::Status status) {
  openai::GenerateEvent ev;
  ev.status = std::move(status);
  Deliver(*state, std::move(ev));
}

// The request waits in the admission queue (or the queue rejects it at once).
void Enqueue(const std::shared_ptr<CallState>& state, const absl::Status& placement_error) {
  ClusterBackend* b = state->backend;
  AdmissionWaiter w;
  w.deadline_s = state->arrival_s + b->placer()->TargetsFor(state->request.slo_class).ttft_s;
  w.try_place = [state]() -> absl::Status {
    {
      absl::MutexLock lock(&state->mu);
      // Its client left: done with it (Cancel is taking it out of the queue right now).
      if (state->cancelled) return absl::OkStatus();
    }
    return TryStart(state);
  };
  w.reject = [state](AdmissionReject, const absl::Status& status) {
    {
      absl::MutexLock lock(&state->mu);
      if (state->cancelled) return;
    }
    Answer(state, status);
  };
  // Offer may answer at once (through `reject`), so it runs without the call's lock.
  const AdmissionQueue::Ticket ticket =
      b->queue()->Offer(ClusterBackend::Now(), placement_error, std::move(w));
  if (ticket == AdmissionQueue::kNoTicket) return;
  bool cancelled;
  {
    absl::MutexLock lock(&state->mu);
    state->ticket = ticket;
    cancelled = state->cancelled;
  }
  if (cancelled) b->queue()->Remove(ticket);  // Cancel ran before the ticket was known
}

// Places the request, queues it, parks it until a decode worker registers, or answers it.
void PlaceOrAnswer(const std::shared_ptr<CallState>& state) {
  ClusterBackend* b = state->backend;
  const absl::Status placed = TryStart(state);
  if (placed.ok()) return;
  if (b->queue() != nullptr && !b->draining() && MinTtftIfWaited(placed).has_value()) {
    Enqueue(state, placed);
    return;
  }
  // No decode worker of its model (a router that has just started, or this request's worker
  // failed and none is left): wait for one to register.
  if (placed.code() == absl::StatusCode::kUnavailable) {
    const bool parked = b->AwaitDecodeWorker(
        state->request.model, state->failed_at_s, [state](const absl::Status& resumed) {
          {
            absl::MutexLock lock(&state->mu);
            if (state->cancelled) return;  // its client left while it waited
          }
          if (resumed.ok()) {
            PlaceOrAnswer(state);
          } else {
            Answer(state, resumed);
          }
        });
    if (parked) return;
  }
  if (b->metrics().rejections) {
    const bool slo = RetryAfterSeconds(placed).has_value();
    b->metrics()
        .rejections->WithLabels({slo ? "slo" : absl::StatusCodeToString(placed.code())})
        ->Increment();
  }
  Answer(state, placed);
}

void StartAttempt(std::shared_ptr<CallState> state) {
  ++state->attempts;
  PlaceOrAnswer(state);
}

// The handle the front end holds: cancels whichever attempt is running.
class CallHandle final : public openai::GenerationHandle {
 public:
  explicit CallHandle(std::shared_ptr<CallState> state) : state_(std::move(state)) {}
  void Cancel() override {
    AdmissionQueue::Ticket ticket;
    std::shared_ptr<const openai::EventCallback> dropped;  // released outside the lock
    {
      absl::MutexLock lock(&state_->mu);
      state_->cancelled = true;
      if (state_->current) state_->current->TryCancel();
      ticket = state_->ticket;
      dropped = std::move(state_->on_event);
    }
    // A waiting request leaves the queue (a ticket that was placed or answered is ignored).
    if (ticket != AdmissionQueue::kNoTicket) state_->backend->queue()->Remove(ticket);
  }

 private:
  std::shared_ptr<CallState> state_;
};

}  // namespace

ClusterBackend::ClusterBackend(WorkerPool* pool, Placer* placer, ClusterBackendMetrics metrics,
                               TrafficRecorder* recorder, AdmissionQueue* queue,
                               double worker_grace_s, double stream_idle_timeout_s,
                               double resume_settle_s)
    : pool_(pool),
      placer_(placer),
      metrics_(metrics),
      recorder_(recorder),
      queue_(queue),
      worker_grace_s_(worker_grace_s),
      started_s_(Now()),
      stream_idle_timeout_s_(stream_idle_timeout_s),
      resume_settle_s_(resume_settle_s) {
  if (stream_idle_timeout_s_ > 0) watch_thread_ = std::thread([this] { CheckIdleStreams(); });
}

ClusterBackend::~ClusterBackend() {
  stop_watch_.Notify();
  if (watch_thread_.joinable()) watch_thread_.join();
}

void ClusterBackend::Watch(WatchedStream* stream) {
  if (stream_idle_timeout_s_ <= 0) return;
  absl::MutexLock lock(&watch_mu_);
  watched_.insert(stream);
}

void ClusterBackend::Unwatch(WatchedStream* stream) {
  if (stream_idle_timeout_s_ <= 0) return;
  absl::MutexLock lock(&watch_mu_);
  watched_.erase(stream);
}

void ClusterBackend::CheckIdleStreams() {
  // A tenth of the timeout, between 10 ms and 1 s: a silent stream is cancelled within that
  // much of its timeout.
  const absl::Duration period = std::clamp(absl::Seconds(stream_idle_timeout_s_ / 10),
                                           absl::Milliseconds(10), absl::Seconds(1));
  while (!stop_watch_.WaitForNotificationWithTimeout(period)) {
    const double cutoff = Now() - stream_idle_timeout_s_;
    absl::MutexLock lock(&watch_mu_);  // Unwatch waits, so no stream is destroyed meanwhile
    for (WatchedStream* s : watched_) s->CancelIfIdleSince(cutoff);
  }
}

std::unique_ptr<openai::GenerationHandle> ClusterBackend::Generate(
    openai::GenerateRequest request, openai::EventCallback on_event) {
  if (recorder_ != nullptr)
    recorder_->Record(request.prompt, request.params.max_tokens, request.params.cache_salt);
  auto state = std::make_shared<CallState>();
  state->backend = this;
  state->arrival_s = Now();
  state->request = std::move(request);
  {
    absl::MutexLock lock(&state->mu);
    state->on_event = std::make_shared<const openai::EventCallback>(std::move(on_event));
  }
  if (state->request.idempotency_key.empty()) {
    StartAttempt(state);
    return std::make_unique<CallHandle>(std::move(state));
  }
  // Keyed: a retry is served from the generation a worker holds for the key, if one does.
  state->fingerprint = RequestFingerprint(state->request);
  auto group = std::make_shared<ProbeGroup>(state);
  {
    absl::MutexLock lock(&state->mu);
    state->probe = group;
  }
  group->Start(started_s_ + resume_settle_s_);
  return std::make_unique<CallHandle>(std::move(state));
}

void ClusterBackend::SetDraining() {
  draining_ = true;
  ResumeAwaiting();
  if (queue_ != nullptr) queue_->RejectAll(absl::UnavailableError("the router is shutting down"));
}

void ClusterBackend::WakeQueue() {
  if (awaiting_count_.load(std::memory_order_relaxed) > 0) ResumeAwaiting();
  if (queue_ != nullptr) queue_->Wake(Now());
}

bool ClusterBackend::AwaitDecodeWorker(std::string model, double failed_at_s,
                                       std::function<void(const absl::Status&)> resume) {
  const double now = Now();
  const double deadline = (failed_at_s >= 0 ? failed_at_s : started_s_) + worker_grace_s_;
  if (now >= deadline) return false;
  {
    absl::MutexLock lock(&await_mu_);
    // Checked under the lock: SetDraining answers everything kept before it took the lock.
    if (draining_ || awaiting_.size() >= kMaxAwaiting) return false;
    awaiting_.push_back({deadline, std::move(model), std::move(resume)});
    awaiting_count_.store(int(awaiting_.size()), std::memory_order_relaxed);
    if (metrics_.awaiting) metrics_.awaiting->Set(double(awaiting_.size()));
  }
  return true;
}

void ClusterBackend::ResumeAwaiting() {
  // Per request taken: OK (place it now) or the error to answer.
  const absl::Status no_worker = absl::UnavailableError(absl::StrFormat(
      "no decode worker is available (none registered within the router's worker grace of "
      "%gs)",
      worker_grace_s_));
  const bool draining = draining_;
  const double now = Now();
  std::vector<std::pair<Awaiting, absl::Status>> taken;
  {
    absl::MutexLock lock(&await_mu_);
    // Each model is asked once; a request whose model has no decode worker yet keeps waiting
    // until its grace is over.
    absl::flat_hash_map<std::string, bool> has_worker;
    std::vector<Awaiting> kept;
    for (Awaiting& a : awaiting_) {
      absl::Status status;
      if (draining) {
        status = absl::UnavailableError("the router is shutting down");
      } else {
        auto [it, added] = has_worker.try_emplace(a.model, false);
        if (added) it->second = HasDecodeWorker(a.model);
        if (!it->second) {
          if (a.deadline_s > now) {
            kept.push_back(std::move(a));
            continue;
          }
          status = no_worker;
        }
      }
      taken.emplace_back(std::move(a), std::move(status));
    }
    awaiting_ = std::move(kept);
    awaiting_count_.store(int(awaiting_.size()), std::memory_order_relaxed);
    if (metrics_.awaiting) metrics_.awaiting->Set(double(awaiting_.size()));
  }
  for (auto& [a, status] : taken) {
    if (!status.ok() && metrics_.rejections) {
      metrics_.rejections->WithLabels({absl::StatusCodeToString(status.code())})->Increment();
    }
    a.resume(status);
  }
}

double ClusterBackend::Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ClusterBackend::Ready() const { return !draining_ && HasDecodeWorker(std::nullopt); }

openai::BackendLoad ClusterBackend::Load() const {
  openai::BackendLoad load;
  for (const std::string& model : pool_->ServedModels()) {
    const int64_t block_size = pool_->block_size(model);
    for (const auto& w : pool_->SnapshotModel(model)) {
      if (w.role == WorkerRole::kKvstore) continue;
      load.running += w.load.running;
      load.waiting += w.load.waiting;
      load.tokens += w.load.decode_context_tokens + w.load.queued_prefill_tokens;
      load.kv_capacity_tokens += int64_t{w.load.total_kv_blocks} * block_size;
    }
  }
  if (queue_ != nullptr) load.waiting += queue_->size();  // waiting here for capacity
  return load;
}

bool ClusterBackend::HasDecodeWorker(const std::optional<std::string>& model) const {
  for (const auto& w : model ? pool_->SnapshotModel(*model) : pool_->Snapshot()) {
    if (w.role == WorkerRole::kDecode || w.role == WorkerRole::kMixed) return true;
  }
  return false;
}

}  // namespace strata::router
