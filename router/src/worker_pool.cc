#include "strata/router/worker_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "strata/common/logging.h"

namespace strata::router {

WorkerPool::WorkerPool(absl::Duration dead_after)
    : dead_after_(dead_after), epoch_(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))) {}

absl::StatusOr<uint64_t> WorkerPool::Register(const v1::WorkerInfo& info) {
  if (info.id().empty() || info.grpc_address().empty()) {
    return absl::InvalidArgumentError("a worker needs an id and a gRPC address");
  }
  if (info.role() == v1::ROLE_UNSPECIFIED) return absl::InvalidArgumentError("worker role unset");
  absl::MutexLock lock(&mu_);
  if (!model_identity_.empty() && info.model_identity() != model_identity_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", info.id(), " serves a different model (identity ", info.model_identity(),
        ", cluster ", model_identity_, ")"));
  }
  if (block_size_ != 0 && info.block_size() != block_size_) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", info.id(), " uses block size ",
                                                      info.block_size(), ", cluster ",
                                                      block_size_));
  }
  model_identity_ = info.model_identity();
  block_size_ = info.block_size();
  auto it = workers_.find(info.id());
  if (it != workers_.end()) (void)index_.RemoveWorker(it->second.index_id);
  WorkerView v;
  v.index_id = next_index_id_++;
  v.info = info;
  v.last_heartbeat = absl::Now();
  v.stub = v1::Worker::NewStub(proto::MakeChannel(info.grpc_address()));
  (void)index_.RegisterWorker(v.index_id);
  workers_[info.id()] = std::move(v);
  STRATA_LOG(Info) << "worker " << info.id() << " registered (" << v1::Role_Name(info.role())
                   << " at " << info.grpc_address() << ")";
  return epoch_;
}

absl::Status WorkerPool::Heartbeat(const v1::HeartbeatRequest& req) {
  WorkerId index_id;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(req.worker_id());
    if (it == workers_.end() || req.epoch() != epoch_) {
      return absl::NotFoundError(absl::StrCat("unknown worker ", req.worker_id()));
    }
    it->second.load = req.load();
    it->second.last_heartbeat = absl::Now();
    index_id = it->second.index_id;
  }
  std::vector<KvEvent> events;
  events.reserve(req.events_size());
  for (const auto& e : req.events()) {
    if (e.tier() != 0) continue;  // only device tier events exist in this version
    events.push_back({e.kind() == v1::KvEvent::STORED ? KvEvent::Kind::kStored
                                                      : KvEvent::Kind::kRemoved,
                      e.hash(), e.parent_hash()});
  }
  // A worker removed meanwhile is fine to ignore: its events no longer matter.
  (void)index_.ApplyBatch(index_id, Tier::kGpu, events);
  return absl::OkStatus();
}

void WorkerPool::Remove(const std::string& worker_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  (void)index_.RemoveWorker(it->second.index_id);
  workers_.erase(it);
  STRATA_LOG(Warning) << "worker " << worker_id << " removed: " << reason;
}

std::vector<std::string> WorkerPool::ExpireStale() {
  std::vector<std::string> stale;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const auto& [id, v] : workers_) {
      if (now - v.last_heartbeat > dead_after_) stale.push_back(id);
    }
  }
  for (const auto& id : stale) Remove(id, "missed heartbeats");
  return stale;
}

std::vector<WorkerView> WorkerPool::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerView> out;
  out.reserve(workers_.size());
  for (const auto& [id, v] : workers_) out.push_back(v);
  // A stable order, so round-robin rotates and ties break the same way every time.
  std::sort(out.begin(), out.end(),
            [](const WorkerView& a, const WorkerView& b) { return a.info.id() < b.info.id(); });
  return out;
}

void WorkerPool::AddInflight(const std::string& worker_id, int64_t delta) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) it->second.inflight += delta;
}

int WorkerPool::num_workers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

int WorkerPool::block_size() const {
  absl::MutexLock lock(&mu_);
  return block_size_;
}

std::string WorkerPool::model_identity() const {
  absl::MutexLock lock(&mu_);
  return model_identity_;
}

}  // namespace strata::router
