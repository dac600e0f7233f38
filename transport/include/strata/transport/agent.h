#pragma once
// The KV data plane: one-sided RMA between processes (NIXL-style), UCX underneath.
//
// A prefill worker writes KV-cache blocks straight into the blocks a decode worker reserved.
// Each side creates one Agent, registers its KV pool once, and hands two opaque byte strings to
// its peers over the control plane (gRPC): Metadata() (how to reach this agent) and
// ExportRegion() (where a registered buffer lives and the key to access it remotely). A peer
// imports both, then posts asynchronous transfers of contiguous byte runs:
//
//   initiator                                  target
//   ---------                                  ------
//   a = Agent::Create({"prefill-0"})           b = Agent::Create({"decode-3"})
//   r = a->RegisterMemory(pool, bytes)         s = b->RegisterMemory(pool, bytes)
//                  <------ b->Metadata(), b->ExportRegion(s) (control plane) ------
//   a->AddPeer("decode-3", meta)
//   rr = a->ImportRegion("decode-3", blob)
//   t = a->PostWrite("decode-3", r, rr, runs, "req-42 done")
//   a->Wait(t, 5s); a->Release(t)             b->TakeNotifications() -> {"prefill-0", "req-42 done"}
//
// KV layout: a pool is one buffer; block i (all layers) lives at base + i * block_bytes, so a
// request's blocks map to one Run per contiguous range of block ids (see docs/transport.md).
//
// Completion contract: a transfer is kDone only when all of its bytes are visible in the target
// memory (remote completion, not just "the local buffer may be reused"). The optional
// notification is delivered to the target only after that, so a receiver that sees the
// notification may read the data.
//
// Threading: every method is safe to call from any thread. See the implementation notes in
// docs/transport.md: one mutex serializes access to the UCX worker, and a background progress
// thread drives transfers and receives notifications, so a caller never has to poll for
// progress; Check() progresses the worker itself, Wait() does for a short spin and then sleeps
// until the progress thread finishes the transfer (no polling while idle).
//
// Failures (all absl::Status, never exceptions, never hangs):
//   kInvalidArgument  - bad region id / offsets out of bounds / malformed metadata or blob
//   kNotFound         - unknown peer, region or transfer id
//   kUnavailable      - the peer failed (process died, connection reset): names the peer and
//                       carries the UCX status string; retry after the peer is re-added
//   kDeadlineExceeded - Wait() timed out (the transfer is still in flight)
//   kInternal         - UCX failed in a way that is not the peer's fault
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/transport/device_memory.h"

namespace strata::transport {

struct AgentOptions {
  // This agent's name as peers see it: carried in Metadata() and in every notification sent.
  std::string name;
  // Registered backends: "ucx".
  std::string backend = "ucx";
  // Device memory services (not owned; must outlive the agent). Without it only host memory
  // can be registered. See device_memory.h.
  DeviceMemory* device = nullptr;
  // How writes between device regions travel. kAuto maps a peer's device memory when this
  // process can (the ipc path) and stages the writes otherwise; kStaged always stages them
  // (page-locked host buffers and UCX: the path between hosts, here by choice).
  enum class DevicePath { kAuto, kStaged };
  DevicePath device_path = DevicePath::kAuto;
  // The staged path: bytes of one piece (the unit copied to host memory, sent, and copied to
  // the peer's device, each step overlapping the others' next and previous pieces) and how
  // many pieces this agent holds in flight, sending and receiving each.
  size_t staging_piece_bytes = size_t{4} << 20;
  int staging_slots = 4;
};

// One contiguous byte range to move: [local_offset, +length) of the local region to/from
// [remote_offset, +length) of the remote region. length must be > 0.
struct Run {
  uint64_t local_offset = 0;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

// A region AllocateMemory created: its id and where the memory is.
struct AllocatedRegion {
  uint64_t region = 0;
  void* addr = nullptr;
  size_t length = 0;
};

enum class TransferState { kInProgress, kDone };

struct AgentStats {
  uint64_t bytes_written = 0;        // bytes of completed writes
  uint64_t bytes_read = 0;           // bytes of completed reads
  uint64_t transfers_posted = 0;
  uint64_t transfers_done = 0;
  uint64_t transfers_failed = 0;
  uint64_t notifications_sent = 0;
  uint64_t notifications_received = 0;
  uint64_t peer_failures = 0;        // endpoints the error handler marked failed
  uint64_t waits_blocked = 0;        // Waits that outlasted their spin and slept (no CPU)
  uint64_t device_regions_mapped = 0;  // peer device regions imported on the ipc path
  uint64_t device_copies = 0;          // batched device copies completed (one per ipc write)
  uint64_t device_bytes = 0;           // bytes those copies moved
  uint64_t staged_pieces_sent = 0;     // staged-path pieces this agent sent (and were applied)
  uint64_t staged_bytes_sent = 0;
  uint64_t staged_pieces_received = 0;  // staged-path pieces copied into this agent's device
  uint64_t staged_bytes_received = 0;
  uint64_t staged_receive_slots = 0;       // page-locked receive slots made so far
  uint64_t staged_receive_slots_busy = 0;  // of those, holding a piece now
};

class Agent {
 public:
  static absl::StatusOr<std::unique_ptr<Agent>> Create(const AgentOptions& options);
  // Closes every endpoint (waits briefly for in-flight transfers to flush), unmaps every
  // region and stops the progress thread. Outstanding transfer ids become invalid.
  virtual ~Agent() = default;

  virtual const std::string& name() const = 0;

  // Opaque connection metadata (agent name + UCX worker address) to hand to peers.
  virtual std::string Metadata() const = 0;

  // Registers [addr, addr + length) for RMA (once; pin/map cost is paid here, not per
  // transfer). The memory must stay valid until DeregisterMemory or the Agent's destruction.
  // Returns a local region id. Device memory (kDevice) needs AgentOptions::device and must be
  // a whole allocation (it is exported as one); it is written only by peers that map it (the
  // ipc path: RegionPath) and writes from it go only to such peers.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> RegisterMemory(
      void* addr, size_t length, MemoryKind kind = MemoryKind::kHost) = 0;
  // Allocates `length` bytes through UCX and registers them. Prefer this for memory that peers
  // write into or read from (a decode worker's KV pool): on one host UCX backs it with shared
  // memory that the peer maps, so a put is a plain memcpy by the initiator with no work on this
  // side, whereas RegisterMemory'd memory on this side is reached through UCX's software RMA
  // emulation (active messages this agent's progress thread must serve). The contents are
  // unspecified. Freed by DeregisterMemory (or the Agent's destruction).
  [[nodiscard]] virtual absl::StatusOr<AllocatedRegion> AllocateMemory(size_t length) = 0;
  // Transfers still in flight on the region must have completed (or failed) first.
  virtual absl::Status DeregisterMemory(uint64_t region) = 0;
  // Opaque blob (address, length, packed remote key) a peer passes to ImportRegion.
  [[nodiscard]] virtual absl::StatusOr<std::string> ExportRegion(uint64_t region) const = 0;

  // Connects to a peer by name (endpoint created now from the metadata). Idempotent for the same
  // name and metadata; a different metadata (peer restarted) or a failed endpoint replaces the
  // endpoint and invalidates the regions imported from the old one.
  virtual absl::Status AddPeer(const std::string& peer, const std::string& metadata) = 0;
  // Closes the endpoint and forgets the peer's imported regions. Unknown names are ignored.
  virtual void RemovePeer(const std::string& peer) = 0;
  // Imports a region another agent exported; valid for `peer` until it is removed or replaced.
  // A device region is mapped here (the ipc path) when it can be; otherwise (another host, a
  // device without peer access, AgentOptions::device_path kStaged) writes to it are staged.
  // kFailedPrecondition when this agent has no device memory services.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> ImportRegion(const std::string& peer,
                                                              const std::string& blob) = 0;
  // How writes to an imported region travel: "ucx" (host memory), "ipc" (device memory
  // mapped into this process) or "staged" (device memory this process cannot map: through
  // page-locked host buffers over UCX). kNotFound for an unknown region.
  [[nodiscard]] virtual absl::StatusOr<std::string> RegionPath(uint64_t remote_region) const = 0;

  // Posts one put (get) per Run, then completes remotely (between device regions on the ipc
  // path: one batched device copy of all runs on the agent's copy thread; on the staged path:
  // pieces of at most staging_piece_bytes, each one batched copy out, one UCX send and one
  // batched copy in by the peer; a device read is kUnimplemented, as is mixing host and device
  // regions). `notification`, when non-empty, is
  // delivered to the peer after all the data is visible there. Every run is bounds-checked
  // against both regions before anything is posted. An empty `runs` with a notification is a
  // pure notification. Returns a transfer id to Check/Wait and finally Release.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> PostWrite(const std::string& peer,
                                                           uint64_t local_region,
                                                           uint64_t remote_region,
                                                           std::span<const Run> runs,
                                                           std::string notification = {}) = 0;
  [[nodiscard]] virtual absl::StatusOr<uint64_t> PostRead(const std::string& peer,
                                                          uint64_t local_region,
                                                          uint64_t remote_region,
                                                          std::span<const Run> runs,
                                                          std::string notification = {}) = 0;

  // kDone / kInProgress, or the transfer's error (kUnavailable when the peer failed).
  [[nodiscard]] virtual absl::StatusOr<TransferState> Check(uint64_t transfer) = 0;
  // OK when done, the transfer's error if it failed, kDeadlineExceeded after `timeout`.
  // Progresses the worker itself for a short bounded spin (a transfer that completes within
  // tens of microseconds is seen at once), then sleeps without using CPU until the progress
  // thread, woken by the UCX worker's event fd, finishes the transfer or the timeout passes.
  virtual absl::Status Wait(uint64_t transfer, absl::Duration timeout) = 0;
  // Forgets a transfer id. Releasing one still in flight is allowed: it completes unobserved.
  virtual void Release(uint64_t transfer) = 0;

  // Notifications received since the last call, in arrival order: (sender's name, message).
  virtual std::vector<std::pair<std::string, std::string>> TakeNotifications() = 0;

  virtual AgentStats Stats() const = 0;

  // The paths this agent can use for device memory and why, for logs: e.g. "ipc or staged
  // (UCX has no CUDA memory support)". Empty without device memory services.
  virtual std::string DevicePaths() const = 0;
};

}  // namespace strata::transport
