#pragma once
// The prefill role's half of the Worker gRPC service (strata.proto): Prefill and AbortPrefill,
// which decode workers call, and the role's metrics. The worker's service (worker/) hands these
// calls here; a worker without a prefill driver (decode-only) passes null.
#include <string>
#include <vector>

#include "strata/common/metrics.h"
#include "strata/prefill/prefill_driver.h"
#include "strata/proto/protocol.h"

namespace strata::prefill {

// Worker.Prefill: starts `request` on `driver` and finishes the call when the job is done.
// FAILED_PRECONDITION when `driver` is null (this worker does not prefill for others) or the
// decode worker serves another model than `model_identity`.
grpc::ServerUnaryReactor* ServePrefill(PrefillDriver* driver, const std::string& model_identity,
                                       grpc::CallbackServerContext* context,
                                       const v1::PrefillRequest* request,
                                       v1::PrefillResponse* response);
// Worker.AbortPrefill: stops the job (a no-op for unknown ids or a null `driver`).
grpc::ServerUnaryReactor* ServeAbortPrefill(PrefillDriver* driver,
                                            grpc::CallbackServerContext* context,
                                            const v1::AbortPrefillRequest* request);

// Adds the role's counters (strata_worker_prefill_*) to `registry`, read from `driver` at
// scrape time. The handles keep them registered; `driver` must outlive them.
std::vector<metrics::CallbackHandle> RegisterPrefillMetrics(metrics::Registry& registry,
                                                            const PrefillDriver* driver);

}  // namespace strata::prefill
