// Goodput admission through the real router: its HTTP front end on 127.0.0.1, its Registry
// gRPC service, and a fake mixed worker (a real gRPC Worker service) that holds every stream
// until the test releases it, so the burst's placements all happen against the same state.
// With a profile of 1 ms per prompt token and a TTFT objective of 1.1 s, five 200-token
// prompts fit (predicted TTFT 0.2, 0.4, ..., 1.0 s through the router's pending-prefill
// ledger); the rest of a burst gets 429 with an OpenAI-style error, and the admitted requests
// complete. SLO classes come from X-SLO-Class.
//
// Queue by slack (RouterQueueTest): a profile whose decode batch holds 2 sequences; with both
// slots taken a third request is infeasible only on TPOT, so it waits in the admission queue
// (capacity 2) and is placed when a stream ends; a fifth gets 429 queue_full, a waiting one
// whose slack runs out gets 429 slack_expired, and a client that leaves is taken out.
//
// Worker grace at the start (RouterStartupGraceTest and the two after it): a router with no
// worker yet holds a request until the first decode worker registers, answers 503 when none
// registers within the grace (and at once after it, or with no grace), and drops a waiting
// request whose client left.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
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

std::string WriteProfile(int max_running = 64) {
  WorkerProfile p;
  p.name = "admission-test";
  p.max_batch_tokens = 100000;
  p.max_running = max_running;
  p.prefill = {0, 0.001, 0};  // 1 ms per prompt token
  p.decode = {0.001, 0, 0};
  // One file per process: ctest runs this binary's test cases as parallel processes.
  const std::string path = ::testing::TempDir() + "/admission_profile_" +
                           std::to_string(::getpid()) + "_" + std::to_string(max_running) +
                           ".json";
  std::ofstream(path) << p.ToJson();
  return path;
}

class RouterAdmissionTest : public ::testing::Test {
 protected:
  virtual void Configure(RouterOptions& o) {}

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
    o.placement.slo_class_specs = {"relaxed=ttft:100", "strict=ttft:0.1"};
    Configure(o);
    if (o.placement.profile_path.empty()) o.placement.profile_path = WriteProfile();
    auto r = Router::Create(o);
    std::remove(o.placement.profile_path.c_str());  // read once, at Create
    ASSERT_TRUE(r.ok()) << r.status();
    router_ = std::move(*r);
    ASSERT_TRUE(router_->Start().ok());

    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &worker_port_);
    b.RegisterService(&worker_);
    server_ = b.BuildAndStart();
    ASSERT_NE(worker_port_, 0);
    if (!register_at_start_) return;
    RegisterWorker();
    ASSERT_TRUE(router_->Ready());
  }

  // Registers the fake worker with the router, as a worker's first heartbeat does.
  void RegisterWorker() {
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
  }
  void TearDown() override {
    worker_.Open();
    if (router_) router_->Shutdown(absl::Seconds(2));
    if (server_) server_->Shutdown();
  }

  // Connects and sends a non-streaming completion of a 200-token prompt (distinct per `seed`).
  std::unique_ptr<http::testing::TestClient> Send(int seed, const std::string& slo_class = "") {
    Json prompt = Json::array();
    for (int i = 0; i < 200; ++i) prompt.push_back(100 + (seed * 7 + i) % 200);
    const Json body = {{"model", "tiny-llama"}, {"prompt", prompt}, {"max_tokens", 3}};
    const std::string headers = slo_class.empty() ? "" : "X-SLO-Class: " + slo_class + "\r\n";
    auto c = http::testing::TestClient::Connect(router_->http_port());
    EXPECT_NE(c, nullptr);
    if (c == nullptr) return nullptr;
    c->Send(http::testing::Post("/v1/completions", body.dump(),
                                "Content-Type: application/json\r\n" + headers));
    return c;
  }

  http::testing::Response Complete(int seed, const std::string& slo_class = "") {
    auto c = Send(seed, slo_class);
    if (c == nullptr) return {};
    auto r = c->ReadResponse();
    EXPECT_TRUE(r.has_value());
    return r.value_or(http::testing::Response{});
  }

  std::string Metrics() {
    auto c = http::testing::TestClient::Connect(router_->http_port());
    c->Send(http::testing::Get("/metrics"));
    return c->ReadResponse().value_or(http::testing::Response{}).body;
  }

  bool register_at_start_ = true;
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

// ---- queue by slack ----------------------------------------------------------------------

// The value of an unlabelled metric sample line ("name value") in `text`, or -1.
double MetricIn(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

// Waits (bounded) until `done` holds.
template <typename F>
bool WaitFor(F done) {
  for (int spin = 0; spin < 2000; ++spin) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

class RouterQueueTest : public RouterAdmissionTest {
 protected:
  void Configure(RouterOptions& o) override {
    o.slo_ttft_s = 5;
    o.placement.profile_path = WriteProfile(/*max_running=*/2);
    o.placement.slo_class_specs = {"tight=ttft:0.8"};
    o.admission.capacity = 2;
    o.admission_tick = absl::Milliseconds(20);
  }

  double MetricValue(const std::string& name) { return MetricIn(Metrics(), name); }
};

TEST_F(RouterQueueTest, ExcessWaitsForADecodeSlotAndIsServedWhenOneFrees) {
  // One at a time, so each placement sees the previous one's effect.
  std::vector<std::unique_ptr<http::testing::TestClient>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(Send(i));
    ASSERT_TRUE(WaitFor([&] { return worker_.received() == i + 1; }));
  }
  for (int i = 2; i < 4; ++i) {  // the batch is full: these two wait
    clients.push_back(Send(i));
    ASSERT_TRUE(
        WaitFor([&] { return MetricValue("strata_router_admission_queue_depth") == i - 1; }));
  }
  const http::testing::Response full = Complete(4);  // the queue is full: 429 at once
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_EQ(Json::parse(full.body)["error"]["type"], "rate_limit_error");
  EXPECT_THAT(Json::parse(full.body)["error"]["message"].get<std::string>(),
              HasSubstr("queue is full"));
  EXPECT_FALSE(full.Header("retry-after").empty());
  EXPECT_EQ(worker_.received(), 2);  // nothing waiting was sent to the worker

  worker_.Open();  // the held streams finish; each frees a slot for a waiting request
  for (auto& c : clients) {
    auto r = c->ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], 3);
  }
  EXPECT_EQ(worker_.received(), 4);
  // A placed request's wait is recorded once its placement returns, which can be just after
  // the worker has answered the client.
  EXPECT_TRUE(WaitFor([&] {
    return MetricValue("strata_router_admission_queue_seconds_count") == 2;
  }));
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("strata_router_rejections_total{reason=\"queue_full\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("strata_router_admission_queue_seconds_count 2"));
  EXPECT_EQ(MetricValue("strata_router_admission_queue_depth"), 0);
}

TEST_F(RouterQueueTest, AWaitingRequestWhoseSlackRunsOutGets429) {
  std::vector<std::unique_ptr<http::testing::TestClient>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(Send(i));
    ASSERT_TRUE(WaitFor([&] { return worker_.received() == i + 1; }));
  }
  // Predicted TTFT 0.6 s (two prompts pending ahead of it, then its own 0.2 s) against the
  // class's 0.8 s: it may wait 0.2 s for a decode slot; none frees, so its slack runs out.
  const http::testing::Response r = Complete(7, "tight");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_THAT(Json::parse(r.body)["error"]["message"].get<std::string>(), HasSubstr("slack"));
  EXPECT_FALSE(r.Header("retry-after").empty());
  EXPECT_EQ(worker_.received(), 2);
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("strata_router_rejections_total{reason=\"slack_expired\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("strata_router_admission_queue_seconds_count 1"));
}

TEST_F(RouterQueueTest, AClientThatLeavesWhileWaitingIsTakenOutOfTheQueue) {
  std::vector<std::unique_ptr<http::testing::TestClient>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(Send(i));
    ASSERT_TRUE(WaitFor([&] { return worker_.received() == i + 1; }));
  }
  {
    auto leaving = Send(9);
    ASSERT_TRUE(WaitFor([&] { return MetricValue("strata_router_admission_queue_depth") == 1; }));
  }  // the client disconnects
  EXPECT_TRUE(WaitFor([&] { return MetricValue("strata_router_admission_queue_depth") == 0; }));
  worker_.Open();
  for (auto& c : held) EXPECT_EQ(c->ReadResponse().value_or(http::testing::Response{}).status, 200);
  absl::SleepFor(absl::Milliseconds(100));  // a wrongly kept request would be placed by now
  EXPECT_EQ(worker_.received(), 2);
  EXPECT_THAT(Metrics(), HasSubstr("strata_router_admission_queue_seconds_count 1"));
}

// A router that has just started (or been restarted) and has no decode worker yet: within its
// worker grace a request waits for one to register instead of getting 503 at once.
class RouterStartupGraceTest : public RouterAdmissionTest {
 protected:
  void Configure(RouterOptions& o) override {
    o.placement.policy = "round-robin";
    o.worker_grace = grace_;
    o.admission_tick = absl::Milliseconds(20);
    register_at_start_ = false;
  }
  double Awaiting() { return MetricIn(Metrics(), "strata_router_awaiting_worker_requests"); }

  absl::Duration grace_ = absl::Seconds(30);
};

TEST_F(RouterStartupGraceTest, ARequestBeforeTheFirstWorkerWaitsForItAndIsServed) {
  ASSERT_FALSE(router_->Ready());
  auto early = Send(1);
  ASSERT_TRUE(WaitFor([&] { return Awaiting() == 1; }));
  absl::SleepFor(absl::Milliseconds(100));  // still waiting, not answered
  EXPECT_EQ(Awaiting(), 1);
  RegisterWorker();
  ASSERT_TRUE(WaitFor([&] { return worker_.received() == 1; }));
  worker_.Open();
  auto r = early->ReadResponse();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], 3);
  EXPECT_EQ(Awaiting(), 0);
}

TEST_F(RouterStartupGraceTest, AClientThatLeavesWhileWaitingIsNotPlaced) {
  {
    auto leaving = Send(2);
    ASSERT_TRUE(WaitFor([&] { return Awaiting() == 1; }));
  }  // the client disconnects
  absl::SleepFor(absl::Milliseconds(100));
  RegisterWorker();
  auto stays = Send(3);
  ASSERT_TRUE(WaitFor([&] { return worker_.received() == 1; }));
  worker_.Open();
  EXPECT_EQ(stays->ReadResponse().value_or(http::testing::Response{}).status, 200);
  absl::SleepFor(absl::Milliseconds(100));  // a wrongly kept request would be placed by now
  EXPECT_EQ(worker_.received(), 1);
}

class RouterShortGraceTest : public RouterStartupGraceTest {
 protected:
  void Configure(RouterOptions& o) override {
    grace_ = absl::Milliseconds(400);
    RouterStartupGraceTest::Configure(o);
  }
};

TEST_F(RouterShortGraceTest, WhenNoWorkerRegistersWithinTheGraceTheRequestGets503) {
  const absl::Time sent = absl::Now();
  const http::testing::Response r = Complete(4);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_THAT(Json::parse(r.body)["error"]["message"].get<std::string>(),
              HasSubstr("none registered within the router's worker grace of 0.4s"));
  EXPECT_LT(absl::Now() - sent, absl::Seconds(10));
  EXPECT_EQ(Awaiting(), 0);
  // After the grace a request is answered at once.
  const absl::Time later = absl::Now();
  const http::testing::Response again = Complete(5);
  EXPECT_EQ(again.status, 503) << again.body;
  EXPECT_THAT(Json::parse(again.body)["error"]["message"].get<std::string>(),
              HasSubstr("no decode worker is available"));
  EXPECT_LT(absl::Now() - later, absl::Milliseconds(300));
  EXPECT_THAT(Metrics(), HasSubstr("strata_router_rejections_total{reason=\"UNAVAILABLE\"} 2"));
  EXPECT_EQ(worker_.received(), 0);
}

class RouterNoGraceTest : public RouterStartupGraceTest {
 protected:
  void Configure(RouterOptions& o) override {
    grace_ = absl::ZeroDuration();
    RouterStartupGraceTest::Configure(o);
  }
};

TEST_F(RouterNoGraceTest, WithoutAGraceARequestBeforeTheFirstWorkerGets503AtOnce) {
  const absl::Time sent = absl::Now();
  const http::testing::Response r = Complete(6);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(Json::parse(r.body)["error"]["message"], "no decode worker is available");
  EXPECT_LT(absl::Now() - sent, absl::Milliseconds(300));
}

}  // namespace
}  // namespace strata::router
