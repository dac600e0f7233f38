#pragma once
// The Worker gRPC service (strata.proto) of a worker process: Generate streams a request's
// tokens to the router (run on the local engine loop, or prefilled remotely through the decode
// role, decode/decode_service.h); Prefill / AbortPrefill go to the prefill role
// (prefill/prefill_service.h). A Generate with a resume key is held past its stream, and Attach
// takes such a request over (held_requests.h). Callback API: no thread is parked per stream.
#include <memory>

#include "held_requests.h"
#include "strata/decode/decode_driver.h"
#include "strata/engine/engine_loop.h"
#include "strata/prefill/prefill_driver.h"
#include "strata/proto/protocol.h"

namespace strata::worker {

class WorkerService final : public v1::Worker::CallbackService {
 public:
  // Longest resume key (and tenant) accepted, in bytes.
  static constexpr size_t kMaxResumeKeyBytes = 512;

  // `prefill` is null on decode-only workers, `decode` null on prefill-only workers. `held`
  // (not owned) keeps keyed requests past their stream; null: keys are ignored (every request
  // is cancelled when its stream ends) and Attach answers NOT_FOUND.
  WorkerService(v1::Role role, EngineLoop* loop, prefill::PrefillDriver* prefill,
                decode::DecodeDriver* decode, HeldRequests* held = nullptr)
      : role_(role), loop_(loop), prefill_(prefill), decode_(decode), held_(held) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerWriteReactor<v1::AttachResponse>* Attach(grpc::CallbackServerContext* context,
                                                       const v1::AttachRequest* request) override;
  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const v1::PrefillRequest* request,
                                    v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* AbortPrefill(grpc::CallbackServerContext* context,
                                         const v1::AbortPrefillRequest* request,
                                         v1::AbortPrefillResponse* response) override;

 private:
  grpc::Status CheckGenerate(const v1::GenerateRequest& request) const;

  v1::Role role_;
  EngineLoop* loop_;
  prefill::PrefillDriver* prefill_;
  decode::DecodeDriver* decode_;
  HeldRequests* held_;
};

// Converts an engine output to the wire message.
v1::GenerateResponse ToResponse(const RequestOutput& out);

}  // namespace strata::worker
