#include "strata/prefill/prefill_service.h"

#include <utility>

namespace strata::prefill {
namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, grpc::Status status) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* ServePrefill(PrefillDriver* driver, const std::string& model_identity,
                                       grpc::CallbackServerContext* context,
                                       const v1::PrefillRequest* request,
                                       v1::PrefillResponse* response) {
  grpc::Status bad = proto::CheckVersion(request->protocol_version());
  if (!bad.ok()) return FinishNow(context, bad);
  if (driver == nullptr) {
    return FinishNow(context, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                           "this worker does not prefill for others"));
  }
  if (request->model_identity() != model_identity) {
    return FinishNow(context, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                           "decode and prefill workers serve different models"));
  }
  auto* reactor = context->DefaultReactor();
  driver->Start(*request,
                [reactor, response](const absl::Status& st, const v1::PrefillResponse& resp) {
                  *response = resp;
                  reactor->Finish(proto::ToGrpc(st));
                });
  return reactor;
}

grpc::ServerUnaryReactor* ServeAbortPrefill(PrefillDriver* driver,
                                            grpc::CallbackServerContext* context,
                                            const v1::AbortPrefillRequest* request) {
  grpc::Status bad = proto::CheckVersion(request->protocol_version());
  if (bad.ok() && driver != nullptr) driver->Abort(request->request_id());
  return FinishNow(context, bad);
}

std::vector<metrics::CallbackHandle> RegisterPrefillMetrics(metrics::Registry& registry,
                                                            const PrefillDriver* driver) {
  std::vector<metrics::CallbackHandle> handles;
  if (driver == nullptr) return handles;
  auto counter = [&](const std::string& name, const std::string& help, auto field) {
    handles.push_back(registry.CounterOrDie(name, help).AddCallback({}, [driver, field] {
      return double(driver->stats().*field);
    }));
  };
  counter("strata_worker_prefill_jobs_total", "Prefills computed for decode workers",
          &PrefillStats::jobs);
  counter("strata_worker_prefill_failed_total", "Prefills for decode workers that failed",
          &PrefillStats::failed);
  counter("strata_worker_prefill_aborted_before_start_total",
          "Prefills refused because the decode worker's abort arrived before them",
          &PrefillStats::aborted_before_start);
  return handles;
}

}  // namespace strata::prefill
