#include "strata/prefill/prefill_driver.h"

#include <chrono>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "strata/common/logging.h"

namespace strata::prefill {
namespace {

struct Job {
  std::string id;
  std::string peer;
  uint64_t remote_region = 0;
  int32_t first_block = 0;
  std::vector<int32_t> dest_blocks;  // prompt block first_block + i -> dest_blocks[i]
  int32_t num_blocks = 0;            // prompt blocks
  int32_t posted = 0;                // prompt blocks [first_block, posted) are posted
  std::vector<BlockId> leased;       // references we hold until the writes complete
  std::vector<uint64_t> transfers;   // in flight
  bool compute_done = false;         // the engine finished (or aborted) the request
  bool aborted = false;
  absl::Status error;
  v1::PrefillResponse response;
  PrefillDriver::Done done;
  std::chrono::steady_clock::time_point first_post{};
};

class PrefillDriverImpl final : public PrefillDriver {
 public:
  PrefillDriverImpl(EngineLoop* loop, transport::Agent* agent, uint64_t kv_region,
                    size_t block_bytes, int block_size, v1::KvLayout layout)
      : loop_(loop),
        agent_(agent),
        kv_region_(kv_region),
        block_bytes_(block_bytes),
        block_size_(block_size),
        layout_(std::move(layout)) {
    loop_->AddAfterStep([this](Engine& e) { PostCompleted(e); });
    poller_ = std::thread([this] { PollLoop(); });
  }

  ~PrefillDriverImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    poller_.join();
  }

  void Start(const v1::PrefillRequest& request, Done done) override {
    auto job = std::make_shared<Job>();
    job->id = request.request_id();
    job->done = std::move(done);
    absl::Status s = Validate(request, *job);
    if (!s.ok()) {
      job->done(s, {});
      return;
    }
    loop_->PostForPrompt(
        job->id, std::vector<int32_t>(request.prompt().begin(), request.prompt().end()),
        request.params().cache_salt(), [this, job, request](Engine& e) { Begin(e, job, request); });
  }

  // An abort can overtake its Prefill (they are separate RPCs, and a Prefill waits on the
  // engine thread before it becomes a job): an id not yet known is remembered, and its Prefill
  // is refused when it begins, instead of running the whole prompt for a cancelled request.
  void Abort(const std::string& request_id) override {
    {
      absl::MutexLock lock(&mu_);
      auto it = jobs_.find(request_id);
      if (it == jobs_.end()) {
        RememberAbortLocked(request_id);
        return;
      }
      it->second->aborted = true;
    }
    loop_->Abort(request_id);
  }

  PrefillStats stats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  absl::Status Validate(const v1::PrefillRequest& r, Job& job) {
    const auto& d = r.destination();
    if (d.has_layout()) {
      absl::Status same = proto::CheckSameKvLayout(layout_, d.layout(),
                                                   absl::StrCat("decode worker ", d.agent_name()));
      if (!same.ok()) return absl::InvalidArgumentError(same.message());
    }
    if (d.block_bytes() != block_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat("destination block size ", d.block_bytes(),
                                                     " B differs from ours (", block_bytes_,
                                                     " B): different model or block size"));
    }
    job.num_blocks = (r.prompt_size() + block_size_ - 1) / block_size_;
    if (d.first_block() < 0 || d.first_block() > job.num_blocks ||
        d.dest_blocks_size() != job.num_blocks - d.first_block()) {
      return absl::InvalidArgumentError("destination blocks do not cover the prompt");
    }
    job.first_block = d.first_block();
    job.posted = d.first_block();
    job.dest_blocks.assign(d.dest_blocks().begin(), d.dest_blocks().end());
    job.peer = d.agent_name();
    absl::Status s = agent_->AddPeer(d.agent_name(), d.agent_metadata());
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("decode worker: ", s.message()));
    auto region = ImportRegion(d.agent_name(), d.region());
    if (!region.ok()) return region.status();
    job.remote_region = *region;
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> ImportRegion(const std::string& peer, const std::string& blob) {
    absl::MutexLock lock(&mu_);
    const std::string key = absl::StrCat(peer, "\x1f", blob);
    auto it = imported_.find(key);
    if (it != imported_.end()) return it->second;
    auto region = agent_->ImportRegion(peer, blob);
    if (region.ok()) {
      imported_[key] = *region;
      auto path = agent_->RegionPath(*region);
      STRATA_LOG(Info) << "KV handoff to " << peer << " over "
                       << (path.ok() ? *path : std::string(path.status().message()));
    }
    return region;
  }

  // Engine thread.
  // Remembered aborts: at most kMaxEarlyAborts, each for kEarlyAbortTtl (a decode worker also
  // sends one for a request it cancels before asking for the prefill, which never comes).
  static constexpr size_t kMaxEarlyAborts = 4096;
  static constexpr absl::Duration kEarlyAbortTtl = absl::Seconds(60);

  void RememberAbortLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = absl::Now();
    while (!early_abort_order_.empty() &&
           (early_abort_order_.size() >= kMaxEarlyAborts ||
            now - early_abort_order_.front().second > kEarlyAbortTtl)) {
      auto it = early_aborts_.find(early_abort_order_.front().first);
      if (it != early_aborts_.end() && it->second == early_abort_order_.front().second) {
        early_aborts_.erase(it);
      }
      early_abort_order_.pop_front();
    }
    early_aborts_[id] = now;
    early_abort_order_.emplace_back(id, now);
  }

  // True (and forgotten) when `id` was aborted before it began.
  bool TakeEarlyAbort(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto it = early_aborts_.find(id);
    if (it == early_aborts_.end()) return false;
    const bool live = absl::Now() - it->second <= kEarlyAbortTtl;
    early_aborts_.erase(it);
    if (live) ++stats_.aborted_before_start;
    return live;
  }

  void Begin(Engine& e, std::shared_ptr<Job> job, const v1::PrefillRequest& request) {
    if (TakeEarlyAbort(job->id)) {
      job->done(absl::CancelledError("prefill aborted by the decode worker before it began"), {});
      return;
    }
    SamplingParams params = proto::FromProto(request.params());
    absl::Status s = e.AddPrefillRequest(
        job->id, std::vector<int32_t>(request.prompt().begin(), request.prompt().end()), params);
    if (!s.ok()) {
      job->done(s, {});
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      jobs_[job->id] = job;
      ++stats_.jobs;
    }
    Engine* engine = &e;  // lives as long as the loop
    loop_->TrackOnEngineThread(
        job->id, [this, job, engine](const absl::Status& st, const RequestOutput& out) {
          OnOutput(*engine, job, st, out);
        });
  }

  // Engine thread: the request's single output (first token), an abort, or an engine error.
  void OnOutput(Engine& e, const std::shared_ptr<Job>& job, const absl::Status& st,
                const RequestOutput& out) {
    if (!st.ok() || !out.finished) {
      if (!st.ok()) Fail(job, st);
      return;
    }
    std::vector<BlockId> held = e.TakeHeldBlocks(job->id);
    absl::MutexLock lock(&mu_);
    job->compute_done = true;
    if (out.finish_reason == FinishReason::kAbort || held.empty()) {
      job->aborted = true;
      return;
    }
    job->response.set_cached_tokens(out.cached_tokens);
    if (!out.new_tokens.empty()) {
      SampleResult first = out.logprobs.empty() ? SampleResult{out.new_tokens[0]} : out.logprobs[0];
      proto::ToProto(first, job->response.mutable_first());
    }
    // The held references become the leases for the blocks not yet posted (and extra ones for
    // blocks already leased, released together at the end).
    job->leased.insert(job->leased.end(), held.begin(), held.end());
    PostLocked(*job, held, job->num_blocks);
  }

  // Engine thread, after every step: post newly completed full blocks of every live job.
  void PostCompleted(Engine& e) {
    absl::MutexLock lock(&mu_);
    for (auto& [id, job] : jobs_) {
      if (job->compute_done || job->aborted || !job->error.ok()) continue;
      const Request* r = e.FindRequest(id);
      if (r == nullptr) continue;
      const int32_t full = std::min(r->num_computed, r->prompt_len) / block_size_;
      if (full <= job->posted) continue;
      std::vector<BlockId> blocks(r->blocks.begin(), r->blocks.begin() + full);
      e.PinBlocks(std::span<const BlockId>(blocks).subspan(job->posted, full - job->posted));
      job->leased.insert(job->leased.end(), blocks.begin() + job->posted, blocks.end());
      PostLocked(*job, blocks, full);
    }
  }

  // Posts prompt blocks [job.posted, upto) of `local` (prompt order) as coalesced runs.
  void PostLocked(Job& job, const std::vector<BlockId>& local, int32_t upto)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<transport::Run> runs;
    for (int32_t i = job.posted; i < upto; ++i) {
      const uint64_t src = uint64_t(local[i]) * block_bytes_;
      const uint64_t dst = uint64_t(job.dest_blocks[i - job.first_block]) * block_bytes_;
      if (!runs.empty() && runs.back().local_offset + runs.back().length == src &&
          runs.back().remote_offset + runs.back().length == dst) {
        runs.back().length += block_bytes_;
      } else {
        runs.push_back({src, dst, block_bytes_});
      }
    }
    job.posted = upto;
    if (runs.empty()) return;
    if (job.transfers.empty() && job.first_post == std::chrono::steady_clock::time_point{}) {
      job.first_post = std::chrono::steady_clock::now();
    }
    auto t = agent_->PostWrite(job.peer, kv_region_, job.remote_region, runs);
    if (!t.ok()) {
      job.error = t.status();
      return;
    }
    job.transfers.push_back(*t);
    stats_.runs += runs.size();
    for (const auto& r : runs) {
      stats_.bytes += r.length;
      job.response.set_bytes_transferred(job.response.bytes_transferred() + r.length);
    }
  }

  void Fail(const std::shared_ptr<Job>& job, const absl::Status& st) {
    absl::MutexLock lock(&mu_);
    job->compute_done = true;
    if (job->error.ok()) job->error = st;
  }

  // Completion thread: retires jobs whose writes all landed (or failed).
  void PollLoop() {
    for (;;) {
      std::vector<std::shared_ptr<Job>> finished;
      {
        absl::MutexLock lock(&mu_);
        auto wake = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !jobs_.empty(); };
        mu_.AwaitWithTimeout(absl::Condition(&wake), absl::Milliseconds(100));
        if (stopping_) return;
        for (auto it = jobs_.begin(); it != jobs_.end();) {
          if (Progress(*it->second)) {
            finished.push_back(it->second);
            jobs_.erase(it++);
          } else {
            ++it;
          }
        }
      }
      for (auto& job : finished) Complete(job);
      std::this_thread::sleep_for(std::chrono::microseconds(finished.empty() ? 200 : 0));
    }
  }

  // True when the job has nothing in flight and nothing left to post.
  bool Progress(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = job.transfers.begin(); it != job.transfers.end();) {
      auto state = agent_->Check(*it);
      if (state.ok() && *state == transport::TransferState::kInProgress) {
        ++it;
        continue;
      }
      if (!state.ok() && job.error.ok()) job.error = state.status();
      agent_->Release(*it);
      it = job.transfers.erase(it);
    }
    return job.transfers.empty() && (job.compute_done || !job.error.ok());
  }

  void Complete(const std::shared_ptr<Job>& job) {
    const double secs =
        job->first_post == std::chrono::steady_clock::time_point{}
            ? 0.0
            : std::chrono::duration<double>(std::chrono::steady_clock::now() - job->first_post)
                  .count();
    job->response.set_transfer_seconds(secs);
    // A failed job may still be running in the engine (a write failed mid-prefill): stop it.
    if (!job->compute_done) loop_->Abort(job->id);
    loop_->Post([job](Engine& e) {
      e.ReleaseBlocks(job->leased);
      job->leased.clear();
      // Blocks the engine held for a request that finished after we gave up.
      e.ReleaseBlocks(e.TakeHeldBlocks(job->id));
    });
    absl::Status st = job->error;
    if (st.ok() && job->aborted) st = absl::CancelledError("prefill aborted by the decode worker");
    if (!st.ok()) {
      absl::MutexLock lock(&mu_);
      ++stats_.failed;
    }
    job->done(st, job->response);
  }

  EngineLoop* loop_;
  transport::Agent* agent_;
  uint64_t kv_region_;
  uint64_t block_bytes_;
  int block_size_;
  const v1::KvLayout layout_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> imported_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> early_aborts_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<std::string, absl::Time>> early_abort_order_ ABSL_GUARDED_BY(mu_);
  PrefillStats stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

}  // namespace

std::unique_ptr<PrefillDriver> PrefillDriver::Create(EngineLoop* loop, transport::Agent* agent,
                                                     uint64_t kv_region, size_t block_bytes,
                                                     int block_size, v1::KvLayout layout) {
  return std::make_unique<PrefillDriverImpl>(loop, agent, kv_region, block_bytes, block_size,
                                             std::move(layout));
}

}  // namespace strata::prefill
