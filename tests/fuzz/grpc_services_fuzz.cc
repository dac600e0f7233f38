// Fuzzes the message handling of the cluster's gRPC services: the router's Registry
// (router/src/registry_service.cc over a real WorkerPool) and a worker's Worker service
// (worker/src/worker_service.cc over a real EngineLoop on the tiny-llama preset, with held
// requests on). Both run in one in-process gRPC server configured like the real ones
// (proto::ConfigureServer: the 16 MiB message bound), reached through its in-process channel:
// no sockets, but the real server path of deserialization, handler, reactor and stream.
//
// Input: the first byte picks the method (Register, Heartbeat, Deregister, Generate, Attach,
// Prefill, AbortPrefill); the rest is that method's request, serialized protobuf (bounded by
// proto::kMaxMessageBytes; bytes that are not a message of that type are skipped, as the
// server's own deserialization would refuse them). So that each input runs in milliseconds, a
// Generate's max_tokens and min_tokens are capped at 8 (the engine's own bounds are exercised
// by the prompt, the KV pool of 64 blocks and max_model_len 512).
//
// The worker has no KV handoff (a mixed worker that could not register its pool with the
// transport): remote prefills and Prefill calls end at their validation, so no input reaches
// the network. A call that does not end within 8 s aborts with the engine's load (a hang, like
// a crash).
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "grpcpp/grpcpp.h"
#include "held_requests.h"
#include "strata/common/logging.h"
#include "strata/engine/engine.h"
#include "strata/engine/engine_loop.h"
#include "strata/engine/presets.h"
#include "strata/proto/protocol.h"
#include "strata/router/registry_service.h"
#include "strata/router/worker_pool.h"
#include "worker_service.h"

namespace {

namespace v1 = strata::v1;

constexpr int kMaxGenerateTokens = 8;

// The services, their server and stubs; built once per process and never destroyed (the
// engine thread and gRPC's threads run until exit).
struct Services {
  std::unique_ptr<strata::EngineLoop> loop;
  std::unique_ptr<strata::worker::HeldRequests> held;
  std::unique_ptr<strata::worker::WorkerService> worker;
  std::unique_ptr<strata::router::WorkerPool> pool;
  std::unique_ptr<strata::router::RegistryService> registry;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Worker::Stub> worker_stub;
  std::unique_ptr<v1::Registry::Stub> registry_stub;
};

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "grpc_services_fuzz: %s\n", why.c_str());
  std::abort();
}

Services* Start() {
  // Refused input is the normal case here: the services' and protobuf's logs of it would flood
  // the fuzzer's output.
  strata::SetMinLogLevel(strata::LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);
  auto* s = new Services();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("strata_grpc_services_fuzz_" + std::to_string(::getpid())))
                              .string();
  if (auto st = strata::WritePreset("tiny-llama", dir); !st.ok()) Die(st.ToString());
  strata::EngineOptions eo;
  eo.runner.block_size = 8;
  eo.runner.num_kv_blocks = 64;
  eo.max_model_len = 512;
  auto engine = strata::Engine::Create(dir, eo);
  if (!engine.ok()) Die(engine.status().ToString());
  std::filesystem::remove_all(dir);  // the engine has read it
  s->loop = std::make_unique<strata::EngineLoop>(std::move(*engine));
  s->held = std::make_unique<strata::worker::HeldRequests>(absl::Milliseconds(50));
  s->worker = std::make_unique<strata::worker::WorkerService>(
      v1::ROLE_MIXED, s->loop.get(), /*prefill=*/nullptr, /*decode=*/nullptr, s->held.get());
  s->pool = std::make_unique<strata::router::WorkerPool>();
  s->registry = std::make_unique<strata::router::RegistryService>(s->pool.get(), [] {});

  grpc::ServerBuilder builder;
  strata::proto::ConfigureServer(builder);
  builder.RegisterService(s->worker.get());
  builder.RegisterService(s->registry.get());
  s->server = builder.BuildAndStart();
  if (s->server == nullptr) Die("the in-process gRPC server did not start");
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(strata::proto::kMaxMessageBytes);
  args.SetMaxSendMessageSize(strata::proto::kMaxMessageBytes);
  auto channel = s->server->InProcessChannel(args);
  s->worker_stub = v1::Worker::NewStub(channel);
  s->registry_stub = v1::Registry::NewStub(channel);
  return s;
}

// Below libFuzzer's -timeout (10 s in scripts/fuzz.sh), so that a hung call reports the
// engine's state.
constexpr int kDeadlineSeconds = 8;

Services* services = nullptr;

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(kDeadlineSeconds));
}

void CheckEnded(const grpc::Status& status, const char* method) {
  if (status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) return;
  const strata::EngineLoad load = services->loop->load();
  Die(std::string(method) + " did not end within " + std::to_string(kDeadlineSeconds) +
      " s; the engine: " + std::to_string(load.running) + " running, " +
      std::to_string(load.waiting) + " waiting, " + std::to_string(load.free_kv_blocks) + " of " +
      std::to_string(load.total_kv_blocks) + " KV blocks free, " + std::to_string(load.steps) +
      " steps; held requests: " + std::to_string(services->held->size()));
}

template <typename Request, typename Response, typename Call>
void Unary(const uint8_t* data, size_t size, Call call, const char* method) {
  Request request;
  if (!request.ParseFromArray(data, int(size))) return;
  Response response;
  grpc::ClientContext context;
  SetDeadline(context);
  CheckEnded(call(&context, request, &response), method);
}

template <typename Request, typename Response, typename Call>
void Stream(const Request& request, Call call, const char* method) {
  grpc::ClientContext context;
  SetDeadline(context);
  auto reader = call(&context, request);
  Response response;
  while (reader->Read(&response)) {
  }
  CheckEnded(reader->Finish(), method);
}

void Generate(Services& s, const uint8_t* data, size_t size) {
  v1::GenerateRequest request;
  if (!request.ParseFromArray(data, int(size))) return;
  v1::SamplingParams* params = request.mutable_params();
  if (params->max_tokens() <= 0 || params->max_tokens() > kMaxGenerateTokens) {
    params->set_max_tokens(kMaxGenerateTokens);
  }
  if (params->min_tokens() > kMaxGenerateTokens) params->set_min_tokens(kMaxGenerateTokens);
  Stream<v1::GenerateRequest, v1::GenerateResponse>(
      request,
      [&](grpc::ClientContext* c, const v1::GenerateRequest& r) {
        return s.worker_stub->Generate(c, r);
      },
      "Generate");
}

void Attach(Services& s, const uint8_t* data, size_t size) {
  v1::AttachRequest request;
  if (!request.ParseFromArray(data, int(size))) return;
  Stream<v1::AttachRequest, v1::AttachResponse>(
      request,
      [&](grpc::ClientContext* c, const v1::AttachRequest& r) {
        return s.worker_stub->Attach(c, r);
      },
      "Attach");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (services == nullptr) services = Start();
  Services& s = *services;
  if (size < 1 || size - 1 > size_t(strata::proto::kMaxMessageBytes)) return 0;
  const uint8_t method = data[0] % 7;
  const uint8_t* msg = data + 1;
  const size_t len = size - 1;
  switch (method) {
    case 0:
      Unary<v1::RegisterRequest, v1::RegisterResponse>(
          msg, len,
          [&](auto* c, const auto& r, auto* out) { return s.registry_stub->Register(c, r, out); },
          "Register");
      break;
    case 1:
      Unary<v1::HeartbeatRequest, v1::HeartbeatResponse>(
          msg, len,
          [&](auto* c, const auto& r, auto* out) { return s.registry_stub->Heartbeat(c, r, out); },
          "Heartbeat");
      break;
    case 2:
      Unary<v1::DeregisterRequest, v1::DeregisterResponse>(
          msg, len,
          [&](auto* c, const auto& r, auto* out) {
            return s.registry_stub->Deregister(c, r, out);
          },
          "Deregister");
      break;
    case 3:
      Generate(s, msg, len);
      break;
    case 4:
      Attach(s, msg, len);
      break;
    case 5:
      Unary<v1::PrefillRequest, v1::PrefillResponse>(
          msg, len,
          [&](auto* c, const auto& r, auto* out) { return s.worker_stub->Prefill(c, r, out); },
          "Prefill");
      break;
    default:
      Unary<v1::AbortPrefillRequest, v1::AbortPrefillResponse>(
          msg, len,
          [&](auto* c, const auto& r, auto* out) {
            return s.worker_stub->AbortPrefill(c, r, out);
          },
          "AbortPrefill");
      break;
  }
  return 0;
}
