#pragma once
// UCX (ucp) implementation of strata::transport::Agent.
//
// Concurrency design: one ucp context + one ucp worker per agent, created with
// UCS_THREAD_MODE_SERIALIZED; `mu_` serializes every call into the worker (and therefore every
// UCX callback, which only runs inside ucp_worker_progress under `mu_`). A progress thread
// sleeps on the worker's event fd (UCP_FEATURE_WAKEUP) plus an eventfd used to wake it after a
// post, and drives everything in ProgressLocked(): so transfers finish and notifications arrive
// even if nobody calls Check/Wait. Check progresses the worker itself; Wait does for a short
// spin and then sleeps on the transfer's state until the progress thread finishes it.
//
// Transfer pipeline (ucx_agent_transfer.cc): post one put/get per run (requests freed at once,
// nothing tracked per run), then ucp_ep_flush_nbx; the flush completes only when every earlier
// operation on the endpoint is complete at the target. Then, if there is a notification, one
// eager active message carries it; the transfer is done when that send completes.
//
// Device regions (ucx_agent_device.cc): a write between a local device region and a peer's
// device region mapped here (the ipc path) is one DeviceMemory::Copy of all its runs, run by the
// agent's copy thread in post order; when it returns, the notification (if any) goes out as
// above and the transfer is done.
#include <ucp/api/ucp.h>

#include <atomic>
#include <deque>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "strata/transport/agent.h"
#include "wire_format.h"

namespace strata::transport {

// Converts a UCX status into an absl status naming what failed and the peer (if any).
// Connection-type failures map to kUnavailable, the rest to kInternal.
absl::Status UcxError(ucs_status_t status, absl::string_view what, absl::string_view peer = {});
// kUnavailable naming a peer whose endpoint failed.
absl::Status PeerFailedError(const std::string& peer, ucs_status_t status);

// Active-message id carrying notifications.
inline constexpr unsigned kNotificationAmId = 17;

class UcxAgent final : public Agent {
 public:
  static absl::StatusOr<std::unique_ptr<Agent>> Create(const AgentOptions& options);
  ~UcxAgent() override;
  UcxAgent(const UcxAgent&) = delete;
  UcxAgent& operator=(const UcxAgent&) = delete;

  const std::string& name() const override { return name_; }
  std::string Metadata() const override { return metadata_; }
  absl::StatusOr<uint64_t> RegisterMemory(void* addr, size_t length, MemoryKind kind) override;
  absl::StatusOr<uint64_t> MapLocked(ucp_mem_map_params_t& params, char** addr, size_t* length)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<AllocatedRegion> AllocateMemory(size_t length) override;
  absl::Status DeregisterMemory(uint64_t region) override;
  absl::StatusOr<std::string> ExportRegion(uint64_t region) const override;
  absl::Status AddPeer(const std::string& peer, const std::string& metadata) override;
  void RemovePeer(const std::string& peer) override;
  absl::StatusOr<uint64_t> ImportRegion(const std::string& peer,
                                        const std::string& blob) override;
  absl::StatusOr<std::string> RegionPath(uint64_t remote_region) const override;
  absl::StatusOr<uint64_t> PostWrite(const std::string& peer, uint64_t local_region,
                                     uint64_t remote_region, std::span<const Run> runs,
                                     std::string notification) override;
  absl::StatusOr<uint64_t> PostRead(const std::string& peer, uint64_t local_region,
                                    uint64_t remote_region, std::span<const Run> runs,
                                    std::string notification) override;
  absl::StatusOr<TransferState> Check(uint64_t transfer) override;
  absl::Status Wait(uint64_t transfer, absl::Duration timeout) override;
  void Release(uint64_t transfer) override;
  std::vector<std::pair<std::string, std::string>> TakeNotifications() override;
  AgentStats Stats() const override;

 private:
  struct Peer {
    std::string name;
    std::string metadata;
    UcxAgent* agent = nullptr;
    ucp_ep_h ep = nullptr;
    bool failed = false;  // set by the endpoint error handler
    ucs_status_t error = UCS_OK;
    std::vector<ucp_rkey_h> rkeys;  // every rkey unpacked on `ep`; destroyed after it closes
  };
  struct LocalRegion {
    char* addr = nullptr;
    size_t length = 0;
    ucp_mem_h memh = nullptr;  // host memory only
    MemoryKind kind = MemoryKind::kHost;
    std::string device_handle;  // device memory: its DeviceMemory::Export handle, made once
  };
  // A peer's device allocation opened here; closed when the last region or copy using it ends.
  struct Mapping {
    DeviceMemory* device = nullptr;
    std::string handle;
    void* base = nullptr;
    ~Mapping() { device->Close(base); }
  };
  struct RemoteRegion {
    std::shared_ptr<Peer> peer;
    uint64_t addr = 0;
    uint64_t length = 0;
    ucp_rkey_h rkey = nullptr;                // host memory
    std::shared_ptr<const Mapping> mapping;  // device memory (the ipc path)
  };
  enum class Phase { kCopying, kFlushing, kNotifying, kDone, kFailed };
  struct Transfer {
    uint64_t id = 0;
    std::shared_ptr<Peer> peer;
    bool is_write = true;
    uint64_t bytes = 0;
    std::string notification;  // encoded AM payload; empty when none
    Phase phase = Phase::kFlushing;
    absl::Status status;
    bool released = false;
  };
  // A UCX request completed inside progress: handled after ucp_worker_progress returns.
  struct Completion {
    Transfer* transfer;
    ucs_status_t status;
  };
  // A device write waiting for (or running on) the copy thread.
  struct CopyJob {
    Transfer* transfer;
    void* dst;
    const void* src;
    std::vector<CopyRun> runs;
    std::shared_ptr<const Mapping> mapping;  // keeps the destination mapped until the copy ends
  };
  // An endpoint being closed; its peer (and rkeys) live until the close request finishes.
  struct Closing {
    std::shared_ptr<Peer> peer;
    void* request;  // nullptr once closed
  };

  explicit UcxAgent(const AgentOptions& options) : name_(options.name), device_(options.device) {}
  absl::Status Init();
  absl::Status InitWorker();
  void StartProgressThread();
  void ProgressLoop();
  // Wakes the progress thread if it sleeps (after a post).
  void WakeProgressThread();
  // Makes its next (or current) poll return at once, so it progresses and re-arms the worker.
  void KickProgressThread();

  absl::StatusOr<uint64_t> Post(bool is_write, const std::string& peer, uint64_t local_region,
                                uint64_t remote_region, std::span<const Run> runs,
                                std::string notification);
  Transfer* AddTransferLocked(std::shared_ptr<Peer> peer, bool is_write, std::span<const Run> runs,
                              const std::string& notification) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateRuns(const LocalRegion& local, const RemoteRegion& remote,
                            std::span<const Run> runs) const;
  absl::Status PostRunsLocked(bool is_write, const Peer& peer, const LocalRegion& local,
                              const RemoteRegion& remote, std::span<const Run> runs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartFlushLocked(Transfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartNotifyLocked(Transfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(Transfer* t, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status TransferErrorLocked(const Transfer& t, ucs_status_t status, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ucp_worker_progress until idle, then handle completions and finished closes.
  // Returns true if anything happened.
  bool ProgressLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdvanceLocked(Transfer* t, ucs_status_t status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapClosedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetirePeerLocked(std::shared_ptr<Peer> peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DestroyPeerResourcesLocked(Peer& peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<Peer>> UsablePeerLocked(const std::string& peer) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Shutdown();

  // Device regions (ucx_agent_device.cc).
  absl::StatusOr<uint64_t> RegisterDeviceMemory(void* addr, size_t length);
  absl::StatusOr<std::string> ExportDeviceRegion(uint64_t region) const;
  absl::StatusOr<uint64_t> ImportDeviceRegion(const std::string& peer,
                                              const wire::RegionDescriptor& d);
  absl::StatusOr<std::shared_ptr<const Mapping>> OpenMapping(const std::string& handle);
  // Queues the copy of a validated device write; the transfer is kCopying until it ends.
  absl::Status PostDeviceLocked(Transfer* t, const LocalRegion& local, const RemoteRegion& remote,
                                std::span<const Run> runs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CopyLoop();
  void StopCopyThread();

  // UCX callbacks: run inside ucp_worker_progress, i.e. with `mu_` held by the progressor.
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnRequestDone(void* request, ucs_status_t status, void* user_data);
  static ucs_status_t OnNotification(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param);

  const std::string name_;
  DeviceMemory* const device_;  // may be null: host memory only
  std::string host_id_;         // this host's identity (boot id + hostname), set by Init
  std::string metadata_;  // immutable after Init
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_efd_ = -1;
  int wake_fd_ = -1;
  std::thread progress_thread_;
  std::atomic<bool> progress_sleeping_{false};

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, LocalRegion> local_regions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, RemoteRegion> remote_regions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);
  std::vector<Closing> closing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::unique_ptr<Transfer>> transfers_ ABSL_GUARDED_BY(mu_);
  std::vector<Completion> completions_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> notifications_ ABSL_GUARDED_BY(mu_);
  AgentStats stats_ ABSL_GUARDED_BY(mu_);
  // Device handle -> its mapping here, while any region or copy holds it (a handle is opened
  // once per process).
  absl::flat_hash_map<std::string, std::weak_ptr<const Mapping>> mappings_ ABSL_GUARDED_BY(mu_);

  // The copy thread and its queue (device writes, in post order).
  absl::Mutex copy_mu_;
  std::deque<CopyJob> copy_queue_ ABSL_GUARDED_BY(copy_mu_);
  bool copy_stopping_ ABSL_GUARDED_BY(copy_mu_) = false;
  std::thread copy_thread_;
};

}  // namespace strata::transport
