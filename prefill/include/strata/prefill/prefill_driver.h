#pragma once
// The prefill role: computes a prompt's KV on this worker's engine and writes it, block run by
// block run, straight into the blocks a decode worker reserved, while later chunks are still
// being computed (transfer overlaps compute).
//
// After every engine step, the blocks a job's prompt has completed since the last step are
// leased (an extra reference, so neither eviction nor preemption can recycle them while the
// NIC reads them) and posted as one transport write per contiguous run. When the prefill
// finishes, the remaining blocks (including a partial last block) follow. The job completes —
// its `done` callback runs — only when every write has landed in the decode worker's memory:
// that is the transfer-complete handshake. Leases are released then, or when a write fails.
//
// Thread-safety: Start/Abort from any thread; callbacks run on the engine thread or on the
// driver's completion thread.
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "strata/engine/engine_loop.h"
#include "strata/proto/protocol.h"
#include "strata/transport/agent.h"

namespace strata::prefill {

struct PrefillStats {
  uint64_t jobs = 0;
  uint64_t failed = 0;
  uint64_t bytes = 0;
  uint64_t runs = 0;
  uint64_t aborted_before_start = 0;  // Prefills refused: their abort had arrived first
};

class PrefillDriver {
 public:
  using Done = std::function<void(const absl::Status&, const v1::PrefillResponse&)>;

  // `kv_region` is the engine's whole KV pool registered with `agent`; `layout` describes it
  // (a destination with another layout is refused).
  static std::unique_ptr<PrefillDriver> Create(EngineLoop* loop, transport::Agent* agent,
                                               uint64_t kv_region, size_t block_bytes,
                                               int block_size, v1::KvLayout layout);
  virtual ~PrefillDriver() = default;

  // Starts a job; `done` runs exactly once: OK with the first token after the last block
  // landed, or the error (InvalidArgument for a bad destination, Unavailable if the decode
  // worker's memory cannot be reached, Cancelled after Abort).
  virtual void Start(const v1::PrefillRequest& request, Done done) = 0;
  // Stops the job's compute; its `done` gets Cancelled once no write is in flight.
  virtual void Abort(const std::string& request_id) = 0;
  virtual PrefillStats stats() const = 0;
};

}  // namespace strata::prefill
