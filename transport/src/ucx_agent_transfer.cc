// UcxAgent: posting transfers, driving them to completion, and worker progress.
#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "strata/common/status_macros.h"
#include "ucx_agent.h"
#include "wire_format.h"

namespace strata::transport {
namespace {

// How long Wait() progresses the worker itself before it sleeps until the transfer finishes:
// long enough to catch a loopback TCP round trip by polling (handing the completion over from
// the progress thread costs two wake-ups), short enough that a waiter on a slow or stuck
// transfer costs at most this much CPU.
constexpr absl::Duration kWaitSpin = absl::Microseconds(500);

}  // namespace

absl::StatusOr<uint64_t> UcxAgent::PostWrite(const std::string& peer, uint64_t local_region,
                                             uint64_t remote_region, std::span<const Run> runs,
                                             std::string notification) {
  return Post(true, peer, local_region, remote_region, runs, std::move(notification));
}

absl::StatusOr<uint64_t> UcxAgent::PostRead(const std::string& peer, uint64_t local_region,
                                            uint64_t remote_region, std::span<const Run> runs,
                                            std::string notification) {
  return Post(false, peer, local_region, remote_region, runs, std::move(notification));
}

absl::Status UcxAgent::ValidateRuns(const LocalRegion& local, const RemoteRegion& remote,
                                    std::span<const Run> runs) const {
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const bool local_ok = r.local_offset <= local.length && r.length <= local.length - r.local_offset;
    const bool remote_ok =
        r.remote_offset <= remote.length && r.length <= remote.length - r.remote_offset;
    if (r.length == 0 || !local_ok || !remote_ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "run ", i, " {local_offset=", r.local_offset, ", remote_offset=", r.remote_offset,
          ", length=", r.length, "} is empty or outside the regions (local ", local.length,
          " bytes, remote ", remote.length, " bytes)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> UcxAgent::Post(bool is_write, const std::string& peer,
                                        uint64_t local_region, uint64_t remote_region,
                                        std::span<const Run> runs, std::string notification) {
  if (runs.empty() && notification.empty()) {
    return absl::InvalidArgumentError("transfer has no runs and no notification");
  }
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Peer> p, UsablePeerLocked(peer));
  auto local = local_regions_.find(local_region);
  if (local == local_regions_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown local region ", local_region));
  }
  auto remote = remote_regions_.find(remote_region);
  if (remote == remote_regions_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown remote region ", remote_region));
  }
  if (remote->second.peer != p) {
    return absl::InvalidArgumentError(absl::StrCat("remote region ", remote_region,
                                                   " was not imported from peer '", peer, "'"));
  }
  STRATA_RETURN_IF_ERROR(ValidateRuns(local->second, remote->second, runs));
  const RemoteRegion& rr = remote->second;
  const bool remote_device = rr.mapping != nullptr || rr.staged;
  if ((local->second.kind == MemoryKind::kDevice || remote_device) && !runs.empty()) {
    if (!is_write) return absl::UnimplementedError("reads of device regions are not supported");
    if (local->second.kind != MemoryKind::kDevice || !remote_device) {
      return absl::InvalidArgumentError(
          "a transfer between a host region and a device region is not supported");
    }
    Transfer* t = AddTransferLocked(std::move(p), is_write, runs, notification);
    if (rr.staged) {
      if (absl::Status s = PostStagedLocked(t, local->second, rr, runs, notification); !s.ok()) {
        transfers_.erase(t->id);
        stats_.transfers_failed++;
        return s;
      }
      WakeProgressThread();
      return t->id;
    }
    STRATA_RETURN_IF_ERROR(PostDeviceLocked(t, local->second, rr, runs));
    return t->id;
  }
  if (absl::Status s = PostRunsLocked(is_write, *p, local->second, remote->second, runs);
      !s.ok()) {
    stats_.transfers_failed++;
    return p->failed ? PeerFailedError(peer, p->error) : s;
  }
  Transfer* t = AddTransferLocked(std::move(p), is_write, runs, notification);
  StartFlushLocked(t);
  WakeProgressThread();
  return t->id;
}

UcxAgent::Transfer* UcxAgent::AddTransferLocked(std::shared_ptr<Peer> peer, bool is_write,
                                                std::span<const Run> runs,
                                                const std::string& notification) {
  auto t = std::make_unique<Transfer>();
  t->id = next_id_++;
  t->peer = std::move(peer);
  t->is_write = is_write;
  for (const Run& r : runs) t->bytes += r.length;
  if (!notification.empty()) t->notification = wire::EncodeNotification(name_, notification);
  Transfer* raw = t.get();
  transfers_[raw->id] = std::move(t);
  stats_.transfers_posted++;
  return raw;
}

absl::Status UcxAgent::PostRunsLocked(bool is_write, const Peer& peer, const LocalRegion& local,
                                      const RemoteRegion& remote, std::span<const Run> runs) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
  param.memh = local.memh;
  for (const Run& r : runs) {
    char* buffer = local.addr + r.local_offset;
    const uint64_t remote_addr = remote.addr + r.remote_offset;
    ucs_status_ptr_t req =
        is_write ? ucp_put_nbx(peer.ep, buffer, r.length, remote_addr, remote.rkey, &param)
                 : ucp_get_nbx(peer.ep, buffer, r.length, remote_addr, remote.rkey, &param);
    if (UCS_PTR_IS_ERR(req)) {
      return UcxError(UCS_PTR_STATUS(req), is_write ? "ucp_put_nbx" : "ucp_get_nbx", peer.name);
    }
    // Completion of the individual operations is observed through the endpoint flush that
    // follows; the request handle itself is returned to UCX right away.
    if (req != nullptr) ucp_request_free(req);
  }
  return absl::OkStatus();
}

// A flush request completes once every operation posted before it on the endpoint has
// completed at the target, which is what "the transfer is done" means.
void UcxAgent::StartFlushLocked(Transfer* t) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxAgent::OnRequestDone;
  param.user_data = t;
  t->phase = Phase::kFlushing;
  void* req = ucp_ep_flush_nbx(t->peer->ep, &param);
  if (req == nullptr) {
    AdvanceLocked(t, UCS_OK);
  } else if (UCS_PTR_IS_ERR(req)) {
    AdvanceLocked(t, UCS_PTR_STATUS(req));
  }
}

void UcxAgent::StartNotifyLocked(Transfer* t) {
  if (t->peer->failed) return FinishLocked(t, PeerFailedError(t->peer->name, t->peer->error));
  if (t->peer->ep == nullptr) {
    return FinishLocked(t, absl::UnavailableError(absl::StrCat(
                               "peer '", t->peer->name, "' was removed before the notification")));
  }
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &UcxAgent::OnRequestDone;
  param.user_data = t;
  param.flags = UCP_AM_SEND_FLAG_EAGER;  // receivers handle eager data only
  t->phase = Phase::kNotifying;
  void* req = ucp_am_send_nbx(t->peer->ep, kNotificationAmId, nullptr, 0, t->notification.data(),
                              t->notification.size(), &param);
  if (req == nullptr) {
    AdvanceLocked(t, UCS_OK);
  } else if (UCS_PTR_IS_ERR(req)) {
    AdvanceLocked(t, UCS_PTR_STATUS(req));
  }
}

// Moves a transfer past the request (flush or notification) that just completed.
void UcxAgent::AdvanceLocked(Transfer* t, ucs_status_t status) {
  if (status != UCS_OK) {
    const char* what = t->phase == Phase::kFlushing ? "flush" : "notification send";
    return FinishLocked(t, TransferErrorLocked(*t, status, what));
  }
  if (t->phase == Phase::kFlushing && !t->notification.empty()) return StartNotifyLocked(t);
  FinishLocked(t, absl::OkStatus());
}

void UcxAgent::FinishLocked(Transfer* t, absl::Status status) {
  if (status.ok()) {
    t->phase = Phase::kDone;
    stats_.transfers_done++;
    (t->is_write ? stats_.bytes_written : stats_.bytes_read) += t->bytes;
    if (!t->notification.empty()) stats_.notifications_sent++;
  } else {
    t->phase = Phase::kFailed;
    t->status = std::move(status);
    stats_.transfers_failed++;
  }
  if (t->released) transfers_.erase(t->id);
}

absl::Status UcxAgent::TransferErrorLocked(const Transfer& t, ucs_status_t status,
                                           absl::string_view what) {
  if (t.peer->failed) return PeerFailedError(t.peer->name, t.peer->error);
  return UcxError(status, absl::StrCat("transfer ", t.id, " ", what), t.peer->name);
}

void UcxAgent::OnRequestDone(void* request, ucs_status_t status, void* user_data) {
  auto* t = static_cast<Transfer*>(user_data);
  UcxAgent* self = t->peer->agent;
  self->mu_.AssertHeld();
  // Deferred: posting the next request from inside a UCX callback is avoided on purpose.
  self->completions_.push_back(Completion{t, status});
  ucp_request_free(request);
}

bool UcxAgent::ProgressLocked() {
  bool any = false;
  while (ucp_worker_progress(worker_) != 0) any = true;
  if (!completions_.empty()) {
    any = true;
    std::vector<Completion> done;
    done.swap(completions_);
    for (const Completion& c : done) AdvanceLocked(c.transfer, c.status);
  }
  if (!staged_sent_.empty() || !incoming_received_.empty()) any = true;
  if (any || !staged_writes_.empty() || !incoming_transfers_.empty()) ProgressStagedLocked();
  if (!closing_.empty()) ReapClosedLocked();
  released_mappings_.clear();  // outside UCX callbacks: closing a mapping may take a while
  return any;
}

absl::StatusOr<TransferState> UcxAgent::Check(uint64_t transfer) {
  absl::MutexLock lock(&mu_);
  ProgressLocked();
  auto it = transfers_.find(transfer);
  if (it == transfers_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown transfer ", transfer));
  }
  switch (it->second->phase) {
    case Phase::kDone:
      return TransferState::kDone;
    case Phase::kFailed:
      return it->second->status;
    default:
      return TransferState::kInProgress;
  }
}

// Two phases. Spin: progress the worker ourselves, yielding between rounds, for at most
// kWaitSpin (the common case on one host: the flush of a shared-memory put completes at once or
// within microseconds). Block: sleep on the transfer's state with the whole remaining timeout;
// the progress thread, asleep on the worker's event fd, finishes the transfer when UCX signals
// it, and releasing `mu_` wakes us. The progress thread is kicked first so that it re-arms the
// worker after our own progress calls (an arm is only valid until someone progresses again).
absl::Status UcxAgent::Wait(uint64_t transfer, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  const absl::Time spin_until = start + std::min(timeout, kWaitSpin);
  bool blocked = false;
  absl::MutexLock lock(&mu_);
  while (true) {
    if (!blocked) ProgressLocked();
    auto it = transfers_.find(transfer);
    if (it == transfers_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown transfer ", transfer));
    }
    Transfer* t = it->second.get();
    if (t->phase == Phase::kDone) return absl::OkStatus();
    if (t->phase == Phase::kFailed) return t->status;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("transfer ", transfer, " to peer '", t->peer->name, "' not done after ",
                       absl::FormatDuration(timeout)));
    }
    if (now < spin_until) {
      mu_.Unlock();
      std::this_thread::yield();
      mu_.Lock();
      continue;
    }
    if (!blocked) {
      blocked = true;
      stats_.waits_blocked++;
      KickProgressThread();
    }
    const absl::Condition finished(
        +[](Transfer* x) { return x->phase == Phase::kDone || x->phase == Phase::kFailed; }, t);
    mu_.AwaitWithTimeout(finished, deadline - now);
  }
}

void UcxAgent::Release(uint64_t transfer) {
  absl::MutexLock lock(&mu_);
  auto it = transfers_.find(transfer);
  if (it == transfers_.end()) return;
  Transfer* t = it->second.get();
  if (t->phase == Phase::kDone || t->phase == Phase::kFailed) {
    transfers_.erase(it);
  } else {
    t->released = true;
  }
}

}  // namespace strata::transport
