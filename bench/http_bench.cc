// strata::http::Server over loopback: small keep-alive requests per second, and SSE events per
// second through one stream written from another thread (decode-like streaming).
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "strata/http/server.h"
#include "test_client.h"

namespace strata::http {
namespace {

using ::strata::http::testing::Get;
using ::strata::http::testing::TestClient;

std::unique_ptr<Server> StartServer() {
  auto server = Server::Create(ServerOptions{});
  if (!server.ok()) return nullptr;
  (*server)->Route("GET", "/ok", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->Respond(200, "text/plain", "ok");
  });
  (*server)->Route("GET", "/stream",
                   [](const Request& request, std::shared_ptr<ResponseWriter> writer) {
                     const int events = std::stoi(request.Header("x-events"));
                     std::thread([writer, events] {
                       writer->StartStream(200, "text/event-stream");
                       const std::string event = "data: {\"choices\":[{\"text\":\" token\"}]}\n\n";
                       for (int i = 0; i < events; ++i) writer->Write(event);
                       writer->End();
                     }).detach();
                   });
  if (!(*server)->Start().ok()) return nullptr;
  return std::move(*server);
}

void BM_KeepAliveRequests(benchmark::State& state) {
  auto server = StartServer();
  auto client = TestClient::Connect(server->port());
  const std::string request = Get("/ok");
  for (auto _ : state) {
    client->Send(request);
    auto response = client->ReadResponse();
    if (!response || response->status != 200) state.SkipWithError("bad response");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KeepAliveRequests)->UseRealTime();

void BM_StreamEvents(benchmark::State& state) {
  auto server = StartServer();
  auto client = TestClient::Connect(server->port());
  const int events = static_cast<int>(state.range(0));
  const std::string request = Get("/stream", "X-Events: " + std::to_string(events) + "\r\n");
  for (auto _ : state) {
    client->Send(request);
    auto response = client->ReadResponse();
    if (!response || response->chunks.size() != static_cast<size_t>(events)) {
      state.SkipWithError("bad stream");
    }
  }
  state.SetItemsProcessed(state.iterations() * events);
}
BENCHMARK(BM_StreamEvents)->Arg(1000)->UseRealTime();

}  // namespace
}  // namespace strata::http

BENCHMARK_MAIN();
