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
//
// The staged path (ucx_agent_staging.cc), for a peer's device region this process cannot map:
// the write is cut into pieces of at most staging_piece_bytes. For each piece the copy thread
// copies its runs from the device into a free slot of the send pool (page-locked host memory,
// registered with UCX), then one rendezvous active message carries the slot to the peer (UCX
// fetches it straight into a slot of the peer's receive pool), whose copy thread copies it into
// the device region and answers with an ack. Slots bound what is in flight; piece i+1 is copied
// out while piece i crosses UCX and piece i-1 is copied in. The peer delivers the notification
// after the transfer's last piece is in place; the writer's transfer is done when every piece
// has been acked.
#include <ucp/api/ucp.h>

#include <algorithm>
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
#include "absl/time/time.h"
#include "strata/transport/agent.h"
#include "wire_format.h"

namespace strata::transport {

// Converts a UCX status into an absl status naming what failed and the peer (if any).
// Connection-type failures map to kUnavailable, the rest to kInternal.
absl::Status UcxError(ucs_status_t status, absl::string_view what, absl::string_view peer = {});
// kUnavailable naming a peer whose endpoint failed.
absl::Status PeerFailedError(const std::string& peer, ucs_status_t status);

// Active-message ids: notifications, staged pieces and their acks.
inline constexpr unsigned kNotificationAmId = 17;
inline constexpr unsigned kStagedPieceAmId = 18;
inline constexpr unsigned kStagedAckAmId = 19;

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
  std::string DevicePaths() const override;

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
    bool staged = false;                      // device memory reached by the staged path
  };
  // Page-locked host memory registered with UCX, cut into equal slots (the staged path).
  struct StagingPool {
    char* base = nullptr;
    size_t bytes = 0;
    size_t slot_bytes = 0;
    ucp_mem_h memh = nullptr;
    bool host_registered = false;  // page-locked through DeviceMemory::RegisterHost
    std::vector<int> free_slots;
    char* slot(int i) const { return base + static_cast<size_t>(i) * slot_bytes; }
  };
  // One piece of a staged write, as the writer plans it.
  struct StagedPiece {
    std::string descriptor;  // encoded wire::StagedPiece, written at the front of the slot
    uint64_t payload_offset = 0;
    uint64_t payload_bytes = 0;
    std::vector<CopyRun> out;  // local device region -> slot (dst offsets past the descriptor)
  };
  struct StagedWrite {
    char* local_base = nullptr;
    std::vector<StagedPiece> pieces;
    std::vector<int> slots;  // the send slot each piece holds until its ack, else -1
    size_t next = 0;    // next piece to copy out
    size_t acked = 0;   // pieces the peer applied
    int in_flight = 0;  // copies out and sends not yet completed
    absl::Status error;
  };
  enum class Phase { kCopying, kStaging, kFlushing, kNotifying, kDone, kFailed };
  struct Transfer {
    uint64_t id = 0;
    std::shared_ptr<Peer> peer;
    bool is_write = true;
    uint64_t bytes = 0;
    std::string notification;  // encoded AM payload; empty when none
    Phase phase = Phase::kFlushing;
    absl::Status status;
    bool released = false;
    std::unique_ptr<StagedWrite> staged;  // the staged path only
  };
  // A staged piece being sent (the send request's user data).
  struct StagedSend {
    Transfer* transfer;
    size_t piece;
    std::string header;
  };
  // An ack being sent (the send request's user data); `agent` counts it in flight.
  struct AckPayload : std::string {
    AckPayload(UcxAgent* a, std::string bytes) : std::string(std::move(bytes)), agent(a) {}
    UcxAgent* agent;
  };
  // A staged piece arriving: received into a slot at once, then copied in.
  struct IncomingPiece {
    UcxAgent* agent = nullptr;
    std::string sender;
    uint64_t transfer = 0;
    uint32_t index = 0;
    size_t length = 0;
    int slot = -1;            // in recv_pools_: chunk * staging_slots + index
    char* at = nullptr;       // the slot's memory
    wire::StagedPiece piece;  // parsed once received
  };
  // A UCX request completed inside progress: handled after ucp_worker_progress returns.
  struct Completion {
    Transfer* transfer;
    ucs_status_t status;
  };
  // A device copy waiting for (or running on) the copy thread: an ipc write, a staged piece
  // copied out to the send pool, or a received piece copied into a local device region.
  enum class CopyKind { kIpc, kStageOut, kStageIn };
  struct CopyJob {
    CopyKind kind = CopyKind::kIpc;
    Transfer* transfer = nullptr;  // kIpc, kStageOut
    void* dst = nullptr;
    const void* src = nullptr;
    std::vector<CopyRun> runs;
    std::shared_ptr<const Mapping> mapping;  // keeps the destination mapped until the copy ends
    size_t piece = 0;                        // kStageOut: which piece of the transfer
    std::unique_ptr<IncomingPiece> incoming;  // kStageIn
  };
  // An endpoint being closed; its peer (and rkeys) live until the close request finishes.
  struct Closing {
    std::shared_ptr<Peer> peer;
    void* request;  // nullptr once closed
  };

  explicit UcxAgent(const AgentOptions& options)
      : name_(options.name),
        device_(options.device),
        stage_always_(options.device_path == AgentOptions::DevicePath::kStaged),
        piece_bytes_(options.staging_piece_bytes),
        staging_slots_(std::max(options.staging_slots, 1)) {}
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
  // Idempotent for the same metadata (decoded only when an endpoint is made).
  absl::Status AddPeerLocked(const std::string& peer, const std::string& metadata)
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
  // Queues a copy; false when the copy thread is stopping.
  bool EnqueueCopy(CopyJob job);

  // The staged path (ucx_agent_staging.cc).
  absl::Status EnsurePoolLocked(StagingPool& pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreePoolLocked(StagingPool& pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PostStagedLocked(Transfer* t, const LocalRegion& local, const RemoteRegion& remote,
                                std::span<const Run> runs, const std::string& notification)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts copying out pieces of the staged writes, oldest first, while send slots are free.
  void PumpStagedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StageOutDoneLocked(CopyJob& job, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StagedSentLocked(StagedSend* send, ucs_status_t status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailStagedLocked(Transfer* t, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishStagedLocked(Transfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free receive slot (the receive pools grow by a chunk of staging_slots when all are taken,
  // up to kMaxReceiveChunks): its id and memory.
  absl::StatusOr<std::pair<int, char*>> TakeReceiveSlotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeReceiveSlotLocked(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeSendSlotLocked(StagedWrite& w, size_t piece) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IncomingReceivedLocked(std::unique_ptr<IncomingPiece> in, ucs_status_t status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StageInDoneLocked(CopyJob& job, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Acks a piece to its writer over this agent's own endpoint to it (made from the metadata the
  // piece carries), never over the endpoint a message came in on, which UCX may destroy.
  void SendAckLocked(const std::string& writer, uint64_t transfer, uint32_t index,
                     const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendAckOnLocked(ucp_ep_h ep, uint64_t transfer, uint32_t index, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes of one staging slot: a piece's payload and the room for its descriptor.
  size_t SlotBytes() const;
  // Handles finished staged sends and receives, and staged writes whose peer failed.
  void ProgressStagedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ShutdownStagingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // UCX callbacks: run inside ucp_worker_progress, i.e. with `mu_` held by the progressor.
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnRequestDone(void* request, ucs_status_t status, void* user_data);
  static ucs_status_t OnNotification(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnStagedPiece(void* arg, const void* header, size_t header_length,
                                    void* data, size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnStagedAck(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  static void OnStagedSent(void* request, ucs_status_t status, void* user_data);
  static void OnStagedReceived(void* request, ucs_status_t status, size_t length,
                               void* user_data);
  static void OnAckSent(void* request, ucs_status_t status, void* user_data);

  const std::string name_;
  DeviceMemory* const device_;  // may be null: host memory only
  const bool stage_always_;     // never map peers' device memory
  const size_t piece_bytes_;
  const int staging_slots_;  // at least 1
  bool ucx_cuda_ = false;       // the UCX found at run time reports CUDA memory support
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
  // Mappings of failed peers' regions, dropped after ucp_worker_progress returns.
  std::vector<std::shared_ptr<const Mapping>> released_mappings_ ABSL_GUARDED_BY(mu_);

  // The staged path: pools (made on first use), writes in post order, pieces arriving.
  StagingPool send_pool_ ABSL_GUARDED_BY(mu_);
  std::vector<StagingPool> recv_pools_ ABSL_GUARDED_BY(mu_);
  std::deque<Transfer*> staged_writes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<StagedSend*, ucs_status_t>> staged_sent_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<IncomingPiece*, ucs_status_t>> incoming_received_ ABSL_GUARDED_BY(mu_);
  int incoming_receiving_ ABSL_GUARDED_BY(mu_) = 0;
  int acks_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Per (sender, transfer): pieces still to come in and the notification to deliver after them.
  struct IncomingTransfer {
    uint32_t remaining = 0;
    std::string notification;
    absl::Time last;
  };
  absl::flat_hash_map<std::string, IncomingTransfer> incoming_transfers_ ABSL_GUARDED_BY(mu_);
  absl::Time incoming_pruned_ ABSL_GUARDED_BY(mu_);

  // The copy thread and its queue (device writes, in post order).
  absl::Mutex copy_mu_;
  std::deque<CopyJob> copy_queue_ ABSL_GUARDED_BY(copy_mu_);
  bool copy_stopping_ ABSL_GUARDED_BY(copy_mu_) = false;
  std::thread copy_thread_;
};

}  // namespace strata::transport
