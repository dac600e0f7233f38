// Goodput admission through the real router: its HTTP front end on 127.0.0.1, its Registry
// gRPC service, and a fake mixed worker (a real gRPC Worker service) that holds every stream
// until the test releases it, so the burst's placements all happen against the same state.
// With a profile of 1 ms per prompt token and a TTFT objective of 1.1 s, five 200-token
// prompts fit (predicted TTFT 0.2, 0.4, ..., 1.0 s through the router's pending-prefill
// ledger); the rest of a burst gets 429 with an OpenAI-style error, and the admitted requests
// complete. SLO classes come from X-SLO-Class.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "../http/test_client.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "strata/engine/presets.h"
#include "strata/proto/protocol.h"
#include "strata/router/router.h"

namespace strata::router {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// A mixed worker that answers Generate with 3 tokens once the test opens the gate.
class HeldWorker final : public v1::Worker::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* out) override {
    {
      absl::MutexLock lock(&mu_);
      ++received_;
      auto open = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return open_; };
      mu_.Await(absl::Condition(&open));
    }
    for (int i = 0; i < 3; ++i) {
      v1::GenerateResponse r;
      r.add_tokens(5 + i);
      r.set_prompt_tokens(req->prompt_size());
      r.set_completion_tokens(i + 1);
      if (i == 2) {
        r.set_finished(true);
        r.set_finish_reason("length");
      }
      if (!out->Write(r)) break;
    }
    return grpc::Status::OK;
  }
  int received() {
    absl::MutexLock lock(&mu_);
    return received_;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }

 private:
  absl::Mutex mu_;
  int received_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

std::string WriteProfile() {
  WorkerProfile p;
  p.name = "admission-test";
  p.max_batch_tokens = 100000;
  p.max_running = 64;
  p.prefill = {0, 0.001, 0};  // 1 ms per prompt token
  p.decode = {0.001, 0, 0};
  const std::string path = ::testing::TempDir() + "/admission_profile.json";
  std::ofstream(path) << p.ToJson();
  return path;
}

class RouterAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RouterOptions o;
    o.http_port = 0;
    o.grpc_port = 0;
    o.model_dir = *ResolveModelPath("preset:tiny-llama");
    o.model_name = "tiny-llama";
    o.dead_after = absl::Seconds(120);  // the fake worker never heartbeats
    o.slo_ttft_s = 1.1;
    o.slo_tpot_s = 0.5;
    o.placement.policy = "goodput";
    o.placement.profile_path = WriteProfile();
    o.placement.slo_class_specs = {"relaxed=ttft:100", "strict=ttft:0.1"};
    auto r = Router::Create(o);
    ASSERT_TRUE(r.ok()) << r.status();
    router_ = std::move(*r);
    ASSERT_TRUE(router_->Start().ok());

    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &worker_port_);
    b.RegisterService(&worker_);
    server_ = b.BuildAndStart();
    ASSERT_NE(worker_port_, 0);
    auto registry = v1::Registry::NewStub(
        proto::MakeChannel("127.0.0.1:" + std::to_string(router_->grpc_port())));
    v1::RegisterRequest req;
    req.set_protocol_version(proto::kProtocolVersion);
    v1::WorkerInfo* w = req.mutable_worker();
    w->set_id("m0");
    w->set_role(v1::ROLE_MIXED);
    w->set_grpc_address("127.0.0.1:" + std::to_string(worker_port_));
    w->set_model_identity("test-model");
    w->set_block_size(16);
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    ASSERT_TRUE(registry->Register(&ctx, req, &resp).ok());
    ASSERT_TRUE(router_->Ready());
  }
  void TearDown() override {
    worker_.Open();
    if (router_) router_->Shutdown(absl::Seconds(2));
    if (server_) server_->Shutdown();
  }

  // A non-streaming completion of a 200-token prompt (distinct per `seed`).
  http::testing::Response Complete(int seed, const std::string& slo_class = "") {
    Json prompt = Json::array();
    for (int i = 0; i < 200; ++i) prompt.push_back(100 + (seed * 7 + i) % 200);
    const Json body = {{"model", "tiny-llama"}, {"prompt", prompt}, {"max_tokens", 3}};
    const std::string headers = slo_class.empty() ? "" : "X-SLO-Class: " + slo_class + "\r\n";
    auto c = http::testing::TestClient::Connect(router_->http_port());
    EXPECT_NE(c, nullptr);
    if (c == nullptr) return {};
    c->Send(http::testing::Post("/v1/completions", body.dump(),
                                "Content-Type: application/json\r\n" + headers));
    auto r = c->ReadResponse();
    EXPECT_TRUE(r.has_value());
    return r.value_or(http::testing::Response{});
  }

  std::string Metrics() {
    auto c = http::testing::TestClient::Connect(router_->http_port());
    c->Send(http::testing::Get("/metrics"));
    return c->ReadResponse().value_or(http::testing::Response{}).body;
  }

  std::unique_ptr<Router> router_;
  HeldWorker worker_;
  int worker_port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(RouterAdmissionTest, FloodBeyondPredictedCapacityGets429AndAdmittedRequestsComplete) {
  constexpr int kRequests = 12, kCapacity = 5;
  std::vector<http::testing::Response> responses(kRequests);
  std::atomic<int> rejected{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      responses[i] = Complete(i);
      if (responses[i].status == 429) rejected.fetch_add(1);
    });
  }
  // Every request is either held at the worker or already answered 429.
  for (int spin = 0; spin < 2000 && worker_.received() + rejected.load() < kRequests; ++spin) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(worker_.received(), kCapacity);
  EXPECT_EQ(rejected.load(), kRequests - kCapacity);
  worker_.Open();
  for (auto& t : clients) t.join();

  int ok = 0;
  for (const auto& r : responses) {
    if (r.status == 200) {
      ++ok;
      EXPECT_EQ(Json::parse(r.body)["usage"]["completion_tokens"], 3);
      continue;
    }
    ASSERT_EQ(r.status, 429) << r.body;
    const Json e = Json::parse(r.body)["error"];
    EXPECT_EQ(e["type"], "rate_limit_error");
    EXPECT_EQ(e["code"], "rate_limit_exceeded");
    EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("SLO"));
    // The predicted wait: the best candidate's TTFT overshoot (1.2 - 1.1 s), at least 1 s.
    EXPECT_EQ(r.Header("retry-after"), "1") << "the OpenAI front end must send Retry-After";
  }
  EXPECT_EQ(ok, kCapacity);

  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("strata_router_rejections_total{reason=\"slo\"} 7"));
  EXPECT_THAT(metrics, HasSubstr("strata_router_ttft_correction{worker=\"m0\"}"));
}

TEST_F(RouterAdmissionTest, SloClassesComeFromTheHeader) {
  worker_.Open();
  // 0.2 s predicted on an idle worker: too slow for "strict" (0.1 s), fine by default (1.1 s).
  EXPECT_EQ(Complete(1, "strict").status, 429);
  EXPECT_EQ(Complete(2).status, 200);
  EXPECT_EQ(Complete(3, "relaxed").status, 200);
  EXPECT_EQ(Complete(4, "unknown-class").status, 200);  // unknown names get the default
}

}  // namespace
}  // namespace strata::router
