#pragma once
// Where a request runs: a decode (or mixed) worker, and optionally a prefill worker that
// computes the prompt and writes its KV into the decode worker's blocks.
//
// Policies (one flag, `--policy`): "round-robin" and "least-loaded" ignore the KV caches;
// "kv-aware" (the default) picks the decode worker with the fewest outstanding requests,
// breaking near-ties by the longest cached prefix, and disaggregates only when the uncached
// part of the prompt is long enough to be worth a transfer (conditional disaggregation); short
// or well-cached prompts prefill on the decode worker itself.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/router/worker_pool.h"

namespace strata::router {

struct PlacementOptions {
  std::string policy = "kv-aware";
  // Remote prefill only when at least this many prompt tokens are not cached on the decode
  // worker (kv-aware; the other policies always disaggregate when prefill workers exist).
  int min_remote_prefill_tokens = 16;
  // Requests outstanding on one worker beyond which the router sheds load (429).
  int max_inflight_per_worker = 256;
};

struct Placement {
  std::string decode_id;
  std::shared_ptr<v1::Worker::Stub> decode_stub;
  std::string prefill_id;       // empty: prefill on the decode worker
  std::string prefill_address;  // its Worker service address
  int32_t cached_blocks = 0;    // prefix blocks the decode worker holds (index view)
};

class Placer {
 public:
  // InvalidArgument for an unknown policy name.
  static absl::StatusOr<std::unique_ptr<Placer>> Create(const PlacementOptions& options);

  // Unavailable when no decode-capable worker is registered; ResourceExhausted when every
  // candidate is at max_inflight_per_worker. `exclude` lists workers that just failed.
  absl::StatusOr<Placement> Place(const std::vector<WorkerView>& workers,
                                  const std::vector<WorkerMatch>& matches, int32_t prompt_tokens,
                                  int block_size, const std::vector<std::string>& exclude);

 private:
  explicit Placer(PlacementOptions options) : options_(std::move(options)) {}
  // `rr` is the round-robin counter of this pool (decode and prefill rotate independently).
  const WorkerView* Pick(const std::vector<const WorkerView*>& candidates,
                         const std::vector<WorkerMatch>& matches, std::atomic<uint64_t>& rr);
  PlacementOptions options_;
  std::atomic<uint64_t> decode_rr_{0}, prefill_rr_{0};
};

}  // namespace strata::router
