// UcxAgent: device regions and the ipc path (a peer's device allocation mapped here, written by
// one batched device copy per transfer on the agent's copy thread).
#include <utility>

#include "absl/strings/str_cat.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "ucx_agent.h"

namespace strata::transport {

const char* MemoryKindName(MemoryKind kind) {
  return kind == MemoryKind::kDevice ? "device" : "host";
}

absl::StatusOr<uint64_t> UcxAgent::RegisterDeviceMemory(void* addr, size_t length) {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(
        "RegisterMemory: device memory needs an agent created with DeviceMemory services");
  }
  // Exported once here, so ExportRegion is cheap and every peer gets the same handle.
  STRATA_ASSIGN_OR_RETURN(std::string handle, device_->Export(addr));
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  LocalRegion r;
  r.addr = static_cast<char*>(addr);
  r.length = length;
  r.kind = MemoryKind::kDevice;
  r.device_handle = std::move(handle);
  local_regions_[id] = std::move(r);
  return id;
}

absl::StatusOr<std::shared_ptr<const UcxAgent::Mapping>> UcxAgent::OpenMapping(
    const std::string& handle) {
  {
    absl::MutexLock lock(&mu_);
    auto it = mappings_.find(handle);
    if (it != mappings_.end()) {
      if (auto m = it->second.lock()) return m;
    }
  }
  // Opening maps memory through the device driver: not under mu_.
  STRATA_ASSIGN_OR_RETURN(void* base, device_->Open(handle));
  auto m = std::make_shared<Mapping>();
  m->device = device_;
  m->handle = handle;
  m->base = base;
  absl::MutexLock lock(&mu_);
  auto& slot = mappings_[handle];
  if (auto existing = slot.lock()) {
    // Another thread opened it meanwhile; ours is closed when `m` goes out of scope. A backend
    // that refuses a second open of one handle made the other thread's open fail instead.
    return existing;
  }
  slot = m;
  return std::shared_ptr<const Mapping>(std::move(m));
}

absl::StatusOr<uint64_t> UcxAgent::ImportDeviceRegion(const std::string& peer,
                                                      const wire::RegionDescriptor& d) {
  if (device_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "peer '", peer, "' exported device memory, and this agent has no device memory services"));
  }
  {
    absl::MutexLock lock(&mu_);
    STRATA_RETURN_IF_ERROR(UsablePeerLocked(peer).status());
  }
  // Mapped when this process can (same host, a device that reaches it); staged otherwise.
  std::shared_ptr<const Mapping> mapping;
  std::string why;
  if (stage_always_) {
    why = "staging is chosen by configuration";
  } else if (d.host_id != host_id_) {
    why = absl::StrCat("the peer is on another host (", d.host_id, "; this host ", host_id_, ")");
  } else {
    auto opened = OpenMapping(d.device_handle);
    if (opened.ok()) {
      mapping = std::move(*opened);
    } else {
      why = absl::StrCat("it cannot be mapped here (", device_->Describe(),
                         "): ", opened.status().message());
    }
  }
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Peer> p, UsablePeerLocked(peer));
  const uint64_t id = next_id_++;
  RemoteRegion r{std::move(p), d.address, d.length, nullptr, std::move(mapping)};
  if (r.mapping != nullptr) {
    stats_.device_regions_mapped++;
  } else {
    r.staged = true;
    STRATA_LOG(Info) << "transport agent '" << name_ << "': writes to peer '" << peer
                     << "''s device memory are staged through host memory: " << why;
  }
  remote_regions_[id] = std::move(r);
  return id;
}

absl::Status UcxAgent::PostDeviceLocked(Transfer* t, const LocalRegion& local,
                                        const RemoteRegion& remote, std::span<const Run> runs) {
  CopyJob job;
  job.transfer = t;
  job.dst = remote.mapping->base;
  job.src = local.addr;
  job.mapping = remote.mapping;
  job.runs.reserve(runs.size());
  for (const Run& r : runs) job.runs.push_back({r.local_offset, r.remote_offset, r.length});
  t->phase = Phase::kCopying;
  if (!EnqueueCopy(std::move(job))) {
    transfers_.erase(t->id);
    stats_.transfers_failed++;
    return absl::UnavailableError("transport agent is shutting down");
  }
  return absl::OkStatus();
}

bool UcxAgent::EnqueueCopy(CopyJob job) {
  absl::MutexLock lock(&copy_mu_);
  if (copy_stopping_) return false;
  copy_queue_.push_back(std::move(job));
  return true;
}

// One copy at a time, in queue order: copies of one agent share the device's copy bandwidth, so
// running them side by side would not finish any sooner, and order keeps per-peer writes FIFO.
// The staged path's copies out and in share this thread with ipc writes.
void UcxAgent::CopyLoop() {
  while (true) {
    CopyJob job;
    {
      absl::MutexLock lock(&copy_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy_mu_) {
        return copy_stopping_ || !copy_queue_.empty();
      };
      copy_mu_.Await(absl::Condition(&ready));
      if (copy_queue_.empty()) return;  // stopping, nothing left
      job = std::move(copy_queue_.front());
      copy_queue_.pop_front();
    }
    absl::Status s = device_->Copy(job.dst, job.src, job.runs);
    uint64_t bytes = 0;
    for (const CopyRun& r : job.runs) bytes += r.length;
    absl::MutexLock lock(&mu_);
    if (job.kind == CopyKind::kStageOut) {
      StageOutDoneLocked(job, std::move(s));
      continue;
    }
    if (job.kind == CopyKind::kStageIn) {
      StageInDoneLocked(job, std::move(s));
      continue;
    }
    Transfer* t = job.transfer;
    if (!s.ok()) {
      FinishLocked(t, absl::InternalError(absl::StrCat("transfer ", t->id, " device copy to peer '",
                                                      t->peer->name, "': ", s.message())));
      continue;
    }
    stats_.device_copies++;
    stats_.device_bytes += bytes;
    if (t->notification.empty()) {
      FinishLocked(t, absl::OkStatus());
    } else {
      StartNotifyLocked(t);
      WakeProgressThread();
    }
  }
}

// The copy in progress completes; transfers still queued fail as the agent goes away.
void UcxAgent::StopCopyThread() {
  if (!copy_thread_.joinable()) return;
  std::deque<CopyJob> dropped;
  {
    absl::MutexLock lock(&copy_mu_);
    copy_stopping_ = true;
    dropped.swap(copy_queue_);
  }
  copy_thread_.join();
  absl::MutexLock lock(&mu_);
  const absl::Status stopping = absl::UnavailableError("transport agent is shutting down");
  for (CopyJob& job : dropped) {
    switch (job.kind) {
      case CopyKind::kIpc:
        FinishLocked(job.transfer, stopping);
        break;
      case CopyKind::kStageOut:
        StageOutDoneLocked(job, stopping);
        break;
      case CopyKind::kStageIn:
        StageInDoneLocked(job, stopping);
        break;
    }
  }
}

}  // namespace strata::transport
