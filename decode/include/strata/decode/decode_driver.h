#pragma once
// The decode role: reserves KV blocks for a prompt, has a prefill worker fill them, then joins
// the request to this worker's continuous batch.
//
//   Start ──> reserve blocks (engine thread; this worker's cached prefix is reused, so only
//             the uncached blocks are requested)
//         ──> Prefill RPC to the prefill worker with the destination blocks and this worker's
//             transport descriptors; it writes the KV while it computes
//         ──> on its reply (every write landed) AddPrefilledRequest: the first token streams
//             out and decoding continues here.
// Cancel while the prefill runs sends AbortPrefill; the reservation is freed only when the
// Prefill call has completed, i.e. when no write into those blocks can still arrive.
//
// Thread-safety: every method is thread-safe; output callbacks run on the engine thread.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

#include "strata/engine/engine_loop.h"
#include "strata/proto/protocol.h"

namespace strata::decode {

struct DecodeDriverOptions {
  std::string model_identity;
  v1::KvDestination self;  // agent name, metadata, region blob and block bytes of this worker
  int block_size = 16;
  // Called once per remote prefill that completed: its KV transfer time (first write posted to
  // last landed, as the prefill worker measured it) and bytes. Any thread; must be cheap.
  std::function<void(double seconds, uint64_t bytes)> on_transfer;
  // How long a request waits for free KV blocks when the pool cannot take its prompt now
  // (reservations wait in arrival order and are retried after every engine step, as running
  // sequences finish); past it, or for a prompt the whole pool cannot hold, the request fails
  // with ResourceExhausted. Zero: fail at once.
  absl::Duration reserve_wait = absl::Seconds(30);
};

struct DecodeStats {
  uint64_t prefills = 0;
  uint64_t prefill_failures = 0;
  uint64_t reserve_failures = 0;
  uint64_t reserve_waits = 0;  // reservations that had to wait for free blocks
  uint64_t bytes_received = 0;
  double transfer_seconds_sum = 0;
};

class DecodeDriver {
 public:
  static std::unique_ptr<DecodeDriver> Create(EngineLoop* loop, DecodeDriverOptions options);
  virtual ~DecodeDriver() = default;

  // Prefills on the worker at `prefill_address` and decodes here. `callback` gets the outputs
  // like EngineLoop::Submit's (an error if the reservation or the prefill failed).
  virtual void Start(std::string id, std::vector<int32_t> prompt, SamplingParams params,
                     std::string prefill_address, OutputCallback callback) = 0;
  // Cancels wherever the request is; its callback gets an abort output. Unknown ids: no-op.
  virtual void Cancel(const std::string& id) = 0;
  virtual DecodeStats stats() const = 0;
};

}  // namespace strata::decode
