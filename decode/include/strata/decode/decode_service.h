#pragma once
// The decode role's half of the Worker gRPC service (strata.proto): a Generate request that
// names a prefill worker (and resumes nothing) is prefilled there and decoded here through the
// DecodeDriver; and the role's metrics (KV transfers into this worker). The worker's service
// (worker/) streams the outputs either way.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "strata/common/metrics.h"
#include "strata/decode/decode_driver.h"
#include "strata/proto/protocol.h"
#include "strata/transport/agent.h"

namespace strata::decode {

// Where prefill workers write this worker's KV: `agent_name`'s transport descriptors and the
// exported `kv_region` (the engine's whole KV pool, registered with `agent`, laid out as
// `layout`).
absl::StatusOr<v1::KvDestination> DescribeKvDestination(transport::Agent& agent,
                                                        const std::string& agent_name,
                                                        uint64_t kv_region, size_t block_bytes,
                                                        const v1::KvLayout& layout);

// Whether `request` asks to be prefilled on another worker.
bool WantsRemotePrefill(const v1::GenerateRequest& request);
// OK, or FAILED_PRECONDITION when `request` wants a remote prefill and `driver` is null (this
// worker cannot take KV).
grpc::Status CheckRemotePrefill(const v1::GenerateRequest& request, const DecodeDriver* driver);
// Starts a request that WantsRemotePrefill on `driver`; `on_output` as DecodeDriver::Start.
void StartRemotePrefill(DecodeDriver& driver, const v1::GenerateRequest& request,
                        OutputCallback on_output);

// The role's families in a worker's registry: the transfer histograms of remote prefills into
// this worker (strata_worker_kv_transfer_{seconds,bytes}) and, with a driver, the KV bytes
// received. `driver` may be null and must outlive this object.
class DecodeMetrics {
 public:
  DecodeMetrics(metrics::Registry& registry, const DecodeDriver* driver);
  // Records one KV transfer into this worker (a remote prefill's blocks landing here).
  void ObserveTransfer(double seconds, uint64_t bytes);

 private:
  metrics::Histogram* transfer_seconds_;
  metrics::Histogram* transfer_bytes_;
  metrics::CallbackHandle received_;
};

}  // namespace strata::decode
