#include "strata/decode/decode_driver.h"

#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace strata::decode {
namespace {

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  OutputCallback callback;
  KvReservation reservation;  // engine thread
  std::string prefill_address;
  grpc::ClientContext context;
  v1::PrefillRequest request;
  v1::PrefillResponse response;
  bool cancelled = false;  // guarded by the driver's mutex
  bool decoding = false;   // handed to the engine
  absl::Time waiting_since = absl::InfinitePast();  // engine thread: waiting for blocks
};

class DecodeDriverImpl final : public DecodeDriver {
 public:
  DecodeDriverImpl(EngineLoop* loop, DecodeDriverOptions options)
      : loop_(loop), options_(std::move(options)) {
    loop_->AddAfterStep([this](Engine& e) { RetryWaiting(e); });
  }

  void Start(std::string id, std::vector<int32_t> prompt, SamplingParams params,
             std::string prefill_address, OutputCallback callback) override {
    auto job = std::make_shared<Job>();
    job->id = std::move(id);
    job->prompt = std::move(prompt);
    job->params = std::move(params);
    job->callback = std::move(callback);
    job->prefill_address = std::move(prefill_address);
    {
      absl::MutexLock lock(&mu_);
      jobs_[job->id] = job;
    }
    // Staged: the prompt's prefix may come up from this worker's lower KV tiers first, so the
    // reservation reuses more and the prefill worker sends less.
    loop_->PostForPrompt(job->id, job->prompt, job->params.cache_salt,
                         [this, job](Engine& e) { Reserve(e, job); });
  }

  void Cancel(const std::string& id) override {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(id);
      if (it == jobs_.end()) return;
      job = it->second;
      job->cancelled = true;
      if (job->decoding) {
        jobs_.erase(it);
        loop_->Abort(id);
        return;
      }
    }
    // Still reserving or prefilling: tell the prefill worker; the Prefill reply then frees
    // the reservation (Finish checks `cancelled`).
    auto req = std::make_shared<v1::AbortPrefillRequest>();
    req->set_protocol_version(proto::kProtocolVersion);
    req->set_request_id(id);
    auto ctx = std::make_shared<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto resp = std::make_shared<v1::AbortPrefillResponse>();
    Stub(job->prefill_address)
        ->async()
        ->AbortPrefill(ctx.get(), req.get(), resp.get(), [req, ctx, resp](grpc::Status) {});
  }

  DecodeStats stats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  // Engine thread: a new job reserves, or queues behind the jobs waiting for blocks.
  void Reserve(Engine& e, const std::shared_ptr<Job>& job) {
    if (!waiting_.empty()) {
      Wait(job);
      RetryWaiting(e);
      return;
    }
    TryReserve(e, job);
  }

  // Engine thread. False when the job must wait for blocks (queued by the caller's rules).
  bool TryReserve(Engine& e, const std::shared_ptr<Job>& job) {
    {
      absl::MutexLock lock(&mu_);
      if (job->cancelled) {  // cancelled while it waited
        Drop(job->id);
        job->callback(absl::OkStatus(), AbortedOutput(job->id));
        return true;
      }
    }
    auto res = e.ReservePrompt(job->prompt, job->params.cache_salt);
    if (!res.ok()) {
      const int64_t needed =
          (static_cast<int64_t>(job->prompt.size()) + options_.block_size - 1) /
          options_.block_size;
      const bool could_fit = needed <= e.runner().num_kv_blocks();
      const bool in_time = job->waiting_since == absl::InfinitePast() ||
                           absl::Now() - job->waiting_since < options_.reserve_wait;
      if (absl::IsResourceExhausted(res.status()) && could_fit && in_time &&
          options_.reserve_wait > absl::ZeroDuration()) {
        if (job->waiting_since == absl::InfinitePast()) Wait(job);
        return false;
      }
      absl::MutexLock lock(&mu_);
      ++stats_.reserve_failures;
      Drop(job->id);
      job->callback(res.status(), {});
      return true;
    }
    job->reservation = std::move(*res);
    {
      absl::MutexLock lock(&mu_);
      if (job->cancelled) {  // cancelled before the prefill was asked for
        AbortReserved(e, *job);
        return true;
      }
    }
    const int first_block = job->reservation.cached_tokens / options_.block_size;
    v1::PrefillRequest& req = job->request;
    req.set_protocol_version(proto::kProtocolVersion);
    req.set_request_id(job->id);
    req.mutable_prompt()->Assign(job->prompt.begin(), job->prompt.end());
    proto::ToProto(job->params, req.mutable_params());
    req.set_model_identity(options_.model_identity);
    *req.mutable_destination() = options_.self;
    req.mutable_destination()->set_first_block(first_block);
    for (size_t i = first_block; i < job->reservation.blocks.size(); ++i) {
      req.mutable_destination()->add_dest_blocks(job->reservation.blocks[i]);
    }
    Stub(job->prefill_address)
        ->async()
        ->Prefill(&job->context, &job->request, &job->response,
                  [this, job](grpc::Status status) { OnPrefilled(job, std::move(status)); });
    return true;
  }

  // Engine thread: queues a job whose prompt the pool cannot take now.
  void Wait(const std::shared_ptr<Job>& job) {
    job->waiting_since = absl::Now();
    waiting_.push_back(job);
    absl::MutexLock lock(&mu_);
    ++stats_.reserve_waits;
  }

  // Engine thread (after each step, and when blocks come back): reserves for the waiting jobs
  // in arrival order while the pool can take them; fails those waiting past reserve_wait.
  void RetryWaiting(Engine& e) {
    while (!waiting_.empty()) {
      std::shared_ptr<Job> job = waiting_.front();
      if (!TryReserve(e, job)) {
        // Still no room: the first job keeps its place; later ones only fail by the clock.
        for (auto it = waiting_.begin() + 1; it != waiting_.end();) {
          if (absl::Now() - (*it)->waiting_since >= options_.reserve_wait) {
            std::shared_ptr<Job> late = *it;
            it = waiting_.erase(it);
            TryReserve(e, late);  // out of time: fails it, unless blocks came back
          } else {
            ++it;
          }
        }
        return;
      }
      waiting_.pop_front();
    }
  }

  // gRPC thread: the prefill worker replied; nothing more will be written into the blocks.
  void OnPrefilled(const std::shared_ptr<Job>& job, grpc::Status status) {
    loop_->Post([this, job, status = std::move(status)](Engine& e) {
      bool cancelled;
      {
        absl::MutexLock lock(&mu_);
        cancelled = job->cancelled;
        ++stats_.prefills;
        if (!status.ok()) ++stats_.prefill_failures;
        stats_.bytes_received += job->response.bytes_transferred();
        stats_.transfer_seconds_sum += job->response.transfer_seconds();
      }
      if (status.ok() && options_.on_transfer) {
        options_.on_transfer(job->response.transfer_seconds(), job->response.bytes_transferred());
      }
      if (cancelled || !status.ok()) {
        e.CancelReservation(job->reservation);
        RetryWaiting(e);
        absl::MutexLock lock(&mu_);
        Drop(job->id);
        if (cancelled) {
          job->callback(absl::OkStatus(), AbortedOutput(job->id));
        } else {
          // The prefill worker's own verdict (e.g. a prompt it rejects) passes through; only
          // an unreachable prefill worker is UNAVAILABLE, marked so the router drops it.
          absl::Status st = proto::FromGrpc(status);
          if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
            st = absl::UnavailableError(absl::StrCat(proto::kPrefillUnavailablePrefix,
                                                     job->prefill_address, ": ",
                                                     status.error_message()));
          }
          job->callback(st, {});
        }
        return;
      }
      Decode(e, job);
    });
  }

  // Engine thread.
  void Decode(Engine& e, const std::shared_ptr<Job>& job) {
    // Under the lock from the cancelled check to `decoding = true`, so a Cancel either sees
    // the request in the engine (and aborts it there) or is seen here.
    absl::MutexLock lock(&mu_);
    if (job->cancelled) {
      AbortReserved(e, *job);
      return;
    }
    // Report the prompt tokens that came from a cache on either side.
    job->reservation.cached_tokens =
        std::max(job->reservation.cached_tokens, job->response.cached_tokens());
    const SampleResult first = proto::FromProto(job->response.first());
    absl::Status s =
        e.AddPrefilledRequest(job->id, job->prompt, job->params, job->reservation, first);
    if (!s.ok()) {
      e.CancelReservation(job->reservation);
      Drop(job->id);
      job->callback(s, {});
      return;
    }
    job->decoding = true;
    loop_->TrackOnEngineThread(job->id, [this, job](const absl::Status& st,
                                                    const RequestOutput& out) {
      if (!st.ok() || out.finished) {
        absl::MutexLock lock(&mu_);
        Drop(job->id);
      }
      job->callback(st, out);
    });
  }

  void Drop(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { jobs_.erase(id); }

  // Engine thread: a cancelled job that still holds its reservation gives it back and ends.
  void AbortReserved(Engine& e, Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    e.CancelReservation(job.reservation);  // the next step's RetryWaiting reuses the blocks
    Drop(job.id);
    job.callback(absl::OkStatus(), AbortedOutput(job.id));
  }

  v1::Worker::Stub* Stub(const std::string& address) {
    absl::MutexLock lock(&stub_mu_);
    auto& stub = stubs_[address];
    if (!stub) stub = v1::Worker::NewStub(proto::MakeChannel(address));
    return stub.get();
  }

  EngineLoop* loop_;
  DecodeDriverOptions options_;
  std::deque<std::shared_ptr<Job>> waiting_;  // engine thread: waiting for free blocks, in order
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  DecodeStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Mutex stub_mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<v1::Worker::Stub>> stubs_
      ABSL_GUARDED_BY(stub_mu_);
};

}  // namespace

std::unique_ptr<DecodeDriver> DecodeDriver::Create(EngineLoop* loop, DecodeDriverOptions options) {
  return std::make_unique<DecodeDriverImpl>(loop, std::move(options));
}

}  // namespace strata::decode
