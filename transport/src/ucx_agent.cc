// UcxAgent: lifecycle, memory regions, peers and the progress thread.
// Transfers and progress live in ucx_agent_transfer.cc.
#include "ucx_agent.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "wire_format.h"

namespace strata::transport {
namespace {

// The progress thread re-polls at least this often even without events (a backstop: UCX
// transports that cannot signal the event fd still make progress).
constexpr int kIdlePollMs = 20;
// How long the destructor waits for endpoints to flush and close, and for receives of staged
// pieces to end (a dead writer's fail when keepalive, every second, notices it).
constexpr absl::Duration kCloseTimeout = absl::Seconds(2);
constexpr absl::Duration kReceiveDrainTimeout = absl::Seconds(5);

bool IsPeerFailure(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CANCELED:
      return true;
    default:
      return false;
  }
}

// UCX settings this agent needs; the user's own UCX_* variables always win.
// - Shared memory (posix, sysv) is only eligible for endpoints in UCP_ERR_HANDLING_MODE_PEER
//   when its error handling is on; without it, agents on one host fall back to TCP. UCX 1.13
//   reads these per-transport switches only from the environment (ucp_config_modify rejects
//   them), so they are set process-wide, once, if unset.
// - Shared memory reports a dead peer only through keepalive: check every second rather than
//   UCX's default 20 s (one small message per endpoint per interval).
void SetEnvironmentDefaults() {
  static std::once_flag env_once;
  std::call_once(env_once, [] {
    setenv("UCX_POSIX_ERROR_HANDLING", "y", /*overwrite=*/0);
    setenv("UCX_SYSV_ERROR_HANDLING", "y", /*overwrite=*/0);
  });
}

void ApplyConfigDefaults(ucp_config_t* config) {
  if (getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    ucs_status_t s = ucp_config_modify(config, "KEEPALIVE_INTERVAL", "1s");
    if (s != UCS_OK) {
      STRATA_LOG(Warning) << "transport: cannot set UCX KEEPALIVE_INTERVAL: "
                          << ucs_status_string(s);
    }
  }
}

// Who can open this process's device memory: processes under the same kernel (boot id) on the
// same host name.
std::string HostIdentity() {
  std::string boot_id;
  if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (fgets(buf, sizeof(buf), f) != nullptr) boot_id = buf;
    fclose(f);
    while (!boot_id.empty() && (boot_id.back() == '\n' || boot_id.back() == ' ')) {
      boot_id.pop_back();
    }
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(boot_id, "/", host);
}

}  // namespace

absl::Status PeerFailedError(const std::string& peer, ucs_status_t status) {
  return absl::UnavailableError(
      absl::StrCat("peer '", peer, "' failed: UCX ", ucs_status_string(status)));
}

absl::Status UcxError(ucs_status_t status, absl::string_view what, absl::string_view peer) {
  std::string msg = absl::StrCat(what, ": UCX ", ucs_status_string(status));
  if (!peer.empty()) absl::StrAppend(&msg, " (peer '", peer, "')");
  if (IsPeerFailure(status)) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

absl::StatusOr<std::unique_ptr<Agent>> UcxAgent::Create(const AgentOptions& options) {
  if (options.name.empty()) return absl::InvalidArgumentError("agent name must not be empty");
  std::unique_ptr<UcxAgent> agent(new UcxAgent(options));
  STRATA_RETURN_IF_ERROR(agent->Init());
  agent->StartProgressThread();
  return std::unique_ptr<Agent>(std::move(agent));
}

absl::Status UcxAgent::Init() {
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = name_.c_str();
  ucp_config_t* config = nullptr;
  SetEnvironmentDefaults();
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxError(s, "ucp_config_read");
  ApplyConfigDefaults(config);
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxError(s, "ucp_init");
  // Whether this UCX can move CUDA memory itself (Debian's cannot): reported in DevicePaths.
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) == UCS_OK) {
    ucx_cuda_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  }
  STRATA_RETURN_IF_ERROR(InitWorker());
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  host_id_ = HostIdentity();
  return absl::OkStatus();
}

absl::Status UcxAgent::InitWorker() {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call is under mu_
  ucs_status_t s = ucp_worker_create(context_, &wp, &worker_);
  if (s != UCS_OK) return UcxError(s, "ucp_worker_create");
  s = ucp_worker_get_efd(worker_, &worker_efd_);
  if (s != UCS_OK) return UcxError(s, "ucp_worker_get_efd");

  ucp_am_handler_param_t am{};
  am.field_mask =
      UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  am.arg = this;
  for (auto [id, cb] : {std::pair<unsigned, ucp_am_recv_callback_t>{kNotificationAmId,
                                                                    &UcxAgent::OnNotification},
                        {kStagedPieceAmId, &UcxAgent::OnStagedPiece},
                        {kStagedAckAmId, &UcxAgent::OnStagedAck}}) {
    am.id = id;
    am.cb = cb;
    s = ucp_worker_set_am_recv_handler(worker_, &am);
    if (s != UCS_OK) return UcxError(s, "ucp_worker_set_am_recv_handler");
  }

  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  s = ucp_worker_get_address(worker_, &address, &address_length);
  if (s != UCS_OK) return UcxError(s, "ucp_worker_get_address");
  metadata_ = wire::EncodeMetadata(
      {name_, std::string(reinterpret_cast<const char*>(address), address_length)});
  ucp_worker_release_address(worker_, address);
  return absl::OkStatus();
}

void UcxAgent::StartProgressThread() {
  progress_thread_ = std::thread([this] { ProgressLoop(); });
  if (device_ != nullptr) copy_thread_ = std::thread([this] { CopyLoop(); });
}

// Sleeps on the worker's event fd; ucp_worker_arm() says whether it is safe to sleep.
void UcxAgent::ProgressLoop() {
  while (true) {
    ucs_status_t armed;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      ProgressLocked();
      armed = ucp_worker_arm(worker_);
      if (armed == UCS_OK) progress_sleeping_.store(true, std::memory_order_release);
    }
    if (armed == UCS_ERR_BUSY) continue;  // events are pending: progress again
    pollfd fds[2] = {{worker_efd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    poll(fds, 2, kIdlePollMs);
    progress_sleeping_.store(false, std::memory_order_release);
    if (fds[1].revents & POLLIN) {
      uint64_t drained;
      (void)!read(wake_fd_, &drained, sizeof(drained));
    }
  }
}

void UcxAgent::WakeProgressThread() {
  if (!progress_sleeping_.load(std::memory_order_acquire)) return;
  KickProgressThread();
}

void UcxAgent::KickProgressThread() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

UcxAgent::~UcxAgent() { Shutdown(); }

void UcxAgent::Shutdown() {
  StopCopyThread();  // the copy in progress finishes; queued ones fail with their transfers
  if (progress_thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    progress_sleeping_.store(true);
    WakeProgressThread();
    progress_thread_.join();
  }
  absl::MutexLock lock(&mu_);
  if (worker_ != nullptr) {
    // Acks of staged pieces already applied reach their writers before the endpoints close.
    const absl::Time acks_deadline = absl::Now() + kCloseTimeout;
    while (acks_in_flight_ > 0 && absl::Now() < acks_deadline) ProgressLocked();
    remote_regions_.clear();
    std::vector<std::shared_ptr<Peer>> peers;
    for (auto& [name, peer] : peers_) peers.push_back(peer);
    peers_.clear();
    // Forced close: nothing waits on a peer that may itself be gone; requests still in flight
    // complete as canceled (their transfers fail) before the worker goes away.
    for (auto& peer : peers) {
      peer->failed = true;
      RetirePeerLocked(std::move(peer));
    }
    const absl::Time deadline = absl::Now() + kCloseTimeout;
    // Receives of staged pieces from a writer that died complete (failed) once UCX notices.
    const absl::Time receive_deadline = absl::Now() + kReceiveDrainTimeout;
    while ((!closing_.empty() && absl::Now() < deadline) ||
           (incoming_receiving_ > 0 && absl::Now() < receive_deadline)) {
      ProgressLocked();
    }
    if (!closing_.empty()) {
      STRATA_LOG(Warning) << "transport agent '" << name_ << "': " << closing_.size()
                          << " endpoint(s) did not close within the timeout";
    }
    for (Closing& c : closing_) {
      if (c.request != nullptr) ucp_request_free(c.request);  // UCX requires it released
      DestroyPeerResourcesLocked(*c.peer);
    }
    closing_.clear();
    ShutdownStagingLocked();
    transfers_.clear();
    completions_.clear();
    for (auto& [id, region] : local_regions_) {
      if (region.memh != nullptr) ucp_mem_unmap(context_, region.memh);
    }
    local_regions_.clear();
    mappings_.clear();
    released_mappings_.clear();
    FreePoolLocked(send_pool_);
    for (StagingPool& chunk : recv_pools_) FreePoolLocked(chunk);
    recv_pools_.clear();
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

absl::StatusOr<uint64_t> UcxAgent::RegisterMemory(void* addr, size_t length, MemoryKind kind) {
  if (addr == nullptr || length == 0) {
    return absl::InvalidArgumentError("RegisterMemory: null address or zero length");
  }
  if (kind == MemoryKind::kDevice) return RegisterDeviceMemory(addr, length);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = addr;
  mp.length = length;
  absl::MutexLock lock(&mu_);
  char* mapped = nullptr;
  size_t mapped_length = 0;
  return MapLocked(mp, &mapped, &mapped_length);
}

absl::StatusOr<AllocatedRegion> UcxAgent::AllocateMemory(size_t length) {
  if (length == 0) return absl::InvalidArgumentError("AllocateMemory: zero length");
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.address = nullptr;
  mp.length = length;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  absl::MutexLock lock(&mu_);
  AllocatedRegion out;
  char* addr = nullptr;
  STRATA_ASSIGN_OR_RETURN(out.region, MapLocked(mp, &addr, &out.length));
  out.addr = addr;
  return out;
}

// ucp_mem_map, then records the region: the caller's range for registered memory (never more,
// whatever pages UCX pinned around it), the address and length UCX reports for an allocation.
absl::StatusOr<uint64_t> UcxAgent::MapLocked(ucp_mem_map_params_t& params, char** addr,
                                             size_t* length) {
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(context_, &params, &memh);
  if (s != UCS_OK) return UcxError(s, absl::StrCat("ucp_mem_map(", params.length, " bytes)"));
  *addr = static_cast<char*>(params.address);
  *length = params.length;
  if (params.flags & UCP_MEM_MAP_ALLOCATE) {
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    s = ucp_mem_query(memh, &attr);
    if (s != UCS_OK) {
      ucp_mem_unmap(context_, memh);
      return UcxError(s, "ucp_mem_query");
    }
    *addr = static_cast<char*>(attr.address);
    *length = attr.length;
  }
  const uint64_t id = next_id_++;
  local_regions_[id] = LocalRegion{*addr, *length, memh};
  return id;
}

absl::Status UcxAgent::DeregisterMemory(uint64_t region) {
  absl::MutexLock lock(&mu_);
  auto it = local_regions_.find(region);
  if (it == local_regions_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown local region ", region));
  }
  ucs_status_t s = it->second.memh == nullptr ? UCS_OK : ucp_mem_unmap(context_, it->second.memh);
  local_regions_.erase(it);
  if (s != UCS_OK) return UcxError(s, "ucp_mem_unmap");
  return absl::OkStatus();
}

absl::StatusOr<std::string> UcxAgent::ExportRegion(uint64_t region) const {
  absl::MutexLock lock(&mu_);
  auto it = local_regions_.find(region);
  if (it == local_regions_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown local region ", region));
  }
  if (it->second.kind == MemoryKind::kDevice) {
    wire::RegionDescriptor d;
    d.address = reinterpret_cast<uint64_t>(it->second.addr);
    d.length = it->second.length;
    d.kind = static_cast<uint32_t>(MemoryKind::kDevice);
    d.host_id = host_id_;
    d.device_handle = it->second.device_handle;
    return wire::EncodeRegion(d);
  }
  void* packed = nullptr;
  size_t packed_size = 0;
  ucs_status_t s = ucp_rkey_pack(context_, it->second.memh, &packed, &packed_size);
  if (s != UCS_OK) return UcxError(s, "ucp_rkey_pack");
  wire::RegionDescriptor d;
  d.address = reinterpret_cast<uint64_t>(it->second.addr);
  d.length = it->second.length;
  d.packed_rkey.assign(static_cast<const char*>(packed), packed_size);
  ucp_rkey_buffer_release(packed);
  return wire::EncodeRegion(d);
}

absl::Status UcxAgent::AddPeer(const std::string& peer, const std::string& metadata) {
  absl::MutexLock lock(&mu_);
  return AddPeerLocked(peer, metadata);
}

absl::Status UcxAgent::AddPeerLocked(const std::string& peer, const std::string& metadata) {
  auto it = peers_.find(peer);
  if (it != peers_.end() && it->second->metadata == metadata && !it->second->failed) {
    return absl::OkStatus();
  }
  STRATA_ASSIGN_OR_RETURN(wire::AgentMetadata decoded, wire::DecodeMetadata(metadata));
  if (it != peers_.end()) {
    std::shared_ptr<Peer> old = std::move(it->second);
    peers_.erase(it);
    RetirePeerLocked(std::move(old));
  }
  auto p = std::make_shared<Peer>();
  p->name = peer;
  p->metadata = metadata;
  p->agent = this;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(decoded.worker_address.data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxAgent::OnEndpointError;
  ep.err_handler.arg = p.get();
  ucs_status_t s = ucp_ep_create(worker_, &ep, &p->ep);
  if (s != UCS_OK) return UcxError(s, "ucp_ep_create", peer);
  peers_[peer] = std::move(p);
  return absl::OkStatus();
}

void UcxAgent::RemovePeer(const std::string& peer) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  std::shared_ptr<Peer> old = std::move(it->second);
  peers_.erase(it);
  RetirePeerLocked(std::move(old));
}

// Forgets the peer's imported regions and starts closing its endpoint: a graceful (flushing)
// close for a healthy peer, a forced one after a failure. The Peer, its rkeys and transfers
// still referring to it stay valid until ReapClosedLocked sees the close finish.
void UcxAgent::RetirePeerLocked(std::shared_ptr<Peer> peer) {
  for (auto it = remote_regions_.begin(); it != remote_regions_.end();) {
    if (it->second.peer == peer) {
      remote_regions_.erase(it++);
    } else {
      ++it;
    }
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = peer->failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* request = ucp_ep_close_nbx(peer->ep, &param);
  peer->ep = nullptr;
  if (UCS_PTR_IS_ERR(request)) request = nullptr;  // closed (with an error): nothing to wait for
  closing_.push_back(Closing{std::move(peer), request});
}

void UcxAgent::ReapClosedLocked() {
  for (size_t i = 0; i < closing_.size();) {
    Closing& c = closing_[i];
    if (c.request != nullptr && ucp_request_check_status(c.request) == UCS_INPROGRESS) {
      ++i;
      continue;
    }
    if (c.request != nullptr) ucp_request_free(c.request);
    DestroyPeerResourcesLocked(*c.peer);
    closing_[i] = std::move(closing_.back());
    closing_.pop_back();
  }
}

void UcxAgent::DestroyPeerResourcesLocked(Peer& peer) {
  for (ucp_rkey_h rkey : peer.rkeys) ucp_rkey_destroy(rkey);
  peer.rkeys.clear();
}

absl::StatusOr<uint64_t> UcxAgent::ImportRegion(const std::string& peer,
                                                const std::string& blob) {
  STRATA_ASSIGN_OR_RETURN(wire::RegionDescriptor d, wire::DecodeRegion(blob));
  if (d.address + d.length < d.address) {
    return absl::InvalidArgumentError("ImportRegion: region wraps the address space");
  }
  if (d.kind == static_cast<uint32_t>(MemoryKind::kDevice)) return ImportDeviceRegion(peer, d);
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Peer> p, UsablePeerLocked(peer));
  ucp_rkey_h rkey = nullptr;
  ucs_status_t s = ucp_ep_rkey_unpack(p->ep, d.packed_rkey.data(), &rkey);
  if (s != UCS_OK) return UcxError(s, "ucp_ep_rkey_unpack", peer);
  p->rkeys.push_back(rkey);
  const uint64_t id = next_id_++;
  remote_regions_[id] = RemoteRegion{std::move(p), d.address, d.length, rkey, nullptr};
  return id;
}

absl::StatusOr<std::string> UcxAgent::RegionPath(uint64_t remote_region) const {
  absl::MutexLock lock(&mu_);
  auto it = remote_regions_.find(remote_region);
  if (it == remote_regions_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown remote region ", remote_region));
  }
  if (it->second.staged) return std::string("staged");
  return std::string(it->second.mapping != nullptr ? "ipc" : "ucx");
}

absl::StatusOr<std::shared_ptr<UcxAgent::Peer>> UcxAgent::UsablePeerLocked(
    const std::string& peer) const {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return absl::NotFoundError(absl::StrCat("unknown peer '", peer, "'"));
  if (it->second->failed) return PeerFailedError(peer, it->second->error);
  return it->second;
}

void UcxAgent::OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  // Runs inside ucp_worker_progress, so the progressing thread holds mu_.
  peer->agent->mu_.AssertHeld();
  UcxAgent* self = peer->agent;
  if (!peer->failed) self->stats_.peer_failures++;
  peer->failed = true;
  peer->error = status;
  // A dead peer's device memory stays mapped here only while a copy into it is in flight: its
  // regions are forgotten now (posting to the peer fails as unavailable anyway), and the
  // mappings are closed after progress returns, once no copy holds them.
  for (auto it = self->remote_regions_.begin(); it != self->remote_regions_.end();) {
    if (it->second.peer.get() == peer && it->second.mapping != nullptr) {
      self->released_mappings_.push_back(std::move(it->second.mapping));
      self->remote_regions_.erase(it++);
    } else {
      ++it;
    }
  }
  if (!self->stopping_) {  // at shutdown, peers going away first is expected
    STRATA_LOG(Warning) << "transport agent '" << self->name_ << "': peer '"
                        << peer->name << "' failed: " << ucs_status_string(status);
  }
}

ucs_status_t UcxAgent::OnNotification(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length,
                                      const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxAgent*>(arg);
  self->mu_.AssertHeld();
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    // Senders force the eager protocol; a rendezvous message is not ours.
    STRATA_LOG(Warning) << "transport: dropping a rendezvous active message";
    return UCS_OK;
  }
  auto n = wire::DecodeNotification(std::string_view(static_cast<const char*>(data), length));
  if (!n.ok()) {
    STRATA_LOG(Warning) << "transport: dropping notification: " << n.status();
    return UCS_OK;
  }
  self->notifications_.emplace_back(std::move(n->sender), std::move(n->message));
  self->stats_.notifications_received++;
  return UCS_OK;
}

std::vector<std::pair<std::string, std::string>> UcxAgent::TakeNotifications() {
  absl::MutexLock lock(&mu_);
  ProgressLocked();
  std::vector<std::pair<std::string, std::string>> out;
  out.swap(notifications_);
  return out;
}

AgentStats UcxAgent::Stats() const {
  absl::MutexLock lock(&mu_);
  AgentStats out = stats_;
  for (const StagingPool& chunk : recv_pools_) {
    const size_t slots = chunk.slot_bytes == 0 ? 0 : chunk.bytes / chunk.slot_bytes;
    out.staged_receive_slots += slots;
    out.staged_receive_slots_busy += slots - chunk.free_slots.size();
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(const AgentOptions& options) {
  if (options.backend == "ucx") return UcxAgent::Create(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport backend '", options.backend, "' (known: ucx)"));
}

}  // namespace strata::transport
