#include "strata/decode/decode_service.h"

#include <string>
#include <utility>
#include <vector>

#include "strata/common/status_macros.h"

namespace strata::decode {

absl::StatusOr<v1::KvDestination> DescribeKvDestination(transport::Agent& agent,
                                                        const std::string& agent_name,
                                                        uint64_t kv_region, size_t block_bytes,
                                                        const v1::KvLayout& layout) {
  v1::KvDestination self;
  self.set_agent_name(agent_name);
  self.set_agent_metadata(agent.Metadata());
  STRATA_ASSIGN_OR_RETURN(std::string region, agent.ExportRegion(kv_region));
  self.set_region(region);
  self.set_block_bytes(block_bytes);
  *self.mutable_layout() = layout;
  return self;
}

bool WantsRemotePrefill(const v1::GenerateRequest& request) {
  return !request.prefill_address().empty() && request.resumed_tokens() == 0;
}

grpc::Status CheckRemotePrefill(const v1::GenerateRequest& request, const DecodeDriver* driver) {
  if (WantsRemotePrefill(request) && driver == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this worker cannot take KV");
  }
  return grpc::Status::OK;
}

void StartRemotePrefill(DecodeDriver& driver, const v1::GenerateRequest& request,
                        OutputCallback on_output) {
  std::vector<int32_t> prompt(request.prompt().begin(), request.prompt().end());
  driver.Start(request.request_id(), std::move(prompt), proto::FromProto(request.params()),
               request.prefill_address(), std::move(on_output));
}

DecodeMetrics::DecodeMetrics(metrics::Registry& registry, const DecodeDriver* driver)
    : transfer_seconds_(registry
                            .HistogramOrDie("strata_worker_kv_transfer_seconds",
                                            "KV transfer time of a remote prefill into this "
                                            "worker (first write posted to last landed)",
                                            metrics::ExponentialBuckets(0.0001, 2, 18))
                            .Default()),
      transfer_bytes_(registry
                          .HistogramOrDie("strata_worker_kv_transfer_bytes",
                                          "KV bytes of one remote prefill into this worker",
                                          metrics::ExponentialBuckets(4096, 4, 12))
                          .Default()) {
  if (driver != nullptr) {
    received_ = registry
                    .CounterOrDie("strata_worker_kv_received_bytes_total",
                                  "KV bytes prefill workers wrote here")
                    .AddCallback({}, [driver] { return double(driver->stats().bytes_received); });
  }
}

void DecodeMetrics::ObserveTransfer(double seconds, uint64_t bytes) {
  transfer_seconds_->Observe(seconds);
  transfer_bytes_->Observe(double(bytes));
}

}  // namespace strata::decode
