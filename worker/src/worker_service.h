#pragma once
// The Worker gRPC service (strata.proto) of a worker process: Generate streams a request's
// tokens to the router (run on the local engine loop, or prefilled remotely through the decode
// role, decode/decode_service.h); Prefill / AbortPrefill go to the prefill role
// (prefill/prefill_service.h). Callback API: no thread is parked per stream.
#include <memory>

#include "strata/decode/decode_driver.h"
#include "strata/engine/engine_loop.h"
#include "strata/prefill/prefill_driver.h"
#include "strata/proto/protocol.h"

namespace strata::worker {

class WorkerService final : public v1::Worker::CallbackService {
 public:
  // `prefill` is null on decode-only workers, `decode` null on prefill-only workers.
  WorkerService(v1::Role role, EngineLoop* loop, prefill::PrefillDriver* prefill,
                decode::DecodeDriver* decode)
      : role_(role), loop_(loop), prefill_(prefill), decode_(decode) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const v1::PrefillRequest* request,
                                    v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* AbortPrefill(grpc::CallbackServerContext* context,
                                         const v1::AbortPrefillRequest* request,
                                         v1::AbortPrefillResponse* response) override;

 private:
  v1::Role role_;
  EngineLoop* loop_;
  prefill::PrefillDriver* prefill_;
  decode::DecodeDriver* decode_;
};

// Converts an engine output to the wire message.
v1::GenerateResponse ToResponse(const RequestOutput& out);

}  // namespace strata::worker
