// Keyed requests a worker holds past their stream (worker/src/held_requests.h): the registry on
// its own with recording sinks, then a real worker over gRPC, whose keyed Generate survives its
// stream being cancelled and is taken over by Attach.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "held_requests.h"
#include "strata/engine/presets.h"
#include "strata/proto/protocol.h"
#include "strata/worker/worker.h"

namespace strata::worker {
namespace {

// Records what a stream would send.
class RecordingSink final : public ResponseSink {
 public:
  void Begin() override { ++begun; }
  void Send(const v1::GenerateResponse& response, bool last) override {
    texts.push_back(response.text());
    if (last) ended_ok = true;
  }
  void End(const grpc::Status& status) override { end_status = status; }
  int begun = 0;
  std::vector<std::string> texts;
  bool ended_ok = false;
  std::optional<grpc::Status> end_status;
};

v1::ResumeKey Key(const std::string& tenant, const std::string& key, uint64_t fingerprint = 7) {
  v1::ResumeKey k;
  k.set_tenant(tenant);
  k.set_key(key);
  k.set_fingerprint(fingerprint);
  return k;
}

v1::GenerateResponse Text(const std::string& text) {
  v1::GenerateResponse r;
  r.set_text(text);
  return r;
}

TEST(HeldRequestsTest, AttachReplaysFromTheFirstResponseThenForwardsTheLiveOnes) {
  HeldRequests held(absl::Seconds(30));
  RecordingSink first, second;
  int cancels = 0;
  auto h = held.Add(
      Key("key-0", "k#0"), [&] { ++cancels; }, &first);
  ASSERT_TRUE(h.ok()) << h.status();
  (*h)->Output(Text("a"), false);
  (*h)->Output(Text("b"), false);
  held.Detach(*h, &first);  // the router went away
  (*h)->Output(Text("c"), false);
  EXPECT_EQ(first.texts, (std::vector<std::string>{"a", "b"}));
  auto again = held.Attach(Key("key-0", "k#0"), &second);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(second.begun, 1);
  EXPECT_EQ(second.texts, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(second.ended_ok);
  (*h)->Output(Text("d"), true);
  EXPECT_EQ(second.texts, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(second.ended_ok);
  EXPECT_EQ(cancels, 0);
  // The key stays taken while held; another tenant's same key is another request.
  EXPECT_EQ(held.Add(
                    Key("key-0", "k#0"), [] {}, &first)
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(held.Add(
                      Key("key-1", "k#0"), [] {}, &first)
                  .ok());
}

TEST(HeldRequestsTest, AnotherTenantOrAnotherRequestCannotAttach) {
  HeldRequests held(absl::Seconds(30));
  RecordingSink origin, thief;
  auto h = held.Add(
      Key("key-0", "k#0", 7), [] {}, &origin);
  ASSERT_TRUE(h.ok());
  (*h)->Output(Text("secret"), false);
  EXPECT_EQ(held.Attach(Key("key-1", "k#0", 7), &thief).status().code(),
            absl::StatusCode::kNotFound);
  // A tenant whose name ends where the key begins is still another tenant.
  EXPECT_EQ(held.Attach(Key("key-0k", "#0", 7), &thief).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(held.Attach(Key("key-0", "k#0", 8), &thief).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(held.Attach(Key("key-0", "k#1", 7), &thief).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(thief.texts.empty());
  EXPECT_EQ(thief.begun, 0);
  EXPECT_FALSE(origin.end_status.has_value());
}

TEST(HeldRequestsTest, ANewAttachTakesTheRequestFromTheStreamThatHadIt) {
  HeldRequests held(absl::Seconds(30));
  RecordingSink origin, retry;
  auto h = held.Add(
      Key("", "k"), [] {}, &origin);
  ASSERT_TRUE(h.ok());
  (*h)->Output(Text("a"), false);
  ASSERT_TRUE(held.Attach(Key("", "k"), &retry).ok());
  ASSERT_TRUE(origin.end_status.has_value());
  EXPECT_EQ(origin.end_status->error_code(), grpc::StatusCode::ABORTED);
  held.Detach(*h, &origin);  // the old stream's end no longer detaches the request
  (*h)->Output(Text("b"), true);
  EXPECT_EQ(origin.texts, (std::vector<std::string>{"a"}));
  EXPECT_EQ(retry.texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(retry.ended_ok);
}

TEST(HeldRequestsTest, GraceExpiryCancelsAnUnfinishedRequestAndDropsAFinishedOne) {
  HeldRequests held(absl::Milliseconds(100));
  RecordingSink s1, s2, late;
  int cancels_running = 0, cancels_done = 0;
  auto running = held.Add(
      Key("", "running"), [&] { ++cancels_running; }, &s1);
  auto done = held.Add(
      Key("", "done"), [&] { ++cancels_done; }, &s2);
  ASSERT_TRUE(running.ok() && done.ok());
  (*done)->Output(Text("all"), true);
  held.Detach(*running, &s1);
  held.Detach(*done, &s2);
  // Within the grace both can be collected (and attaching renews it).
  ASSERT_TRUE(held.Attach(Key("", "done"), &late).ok());
  EXPECT_EQ(late.texts, (std::vector<std::string>{"all"}));
  EXPECT_TRUE(late.ended_ok);
  held.Detach(*done, &late);
  EXPECT_EQ(held.size(), 2u);
  absl::SleepFor(absl::Milliseconds(150));
  held.ExpireForTest();
  EXPECT_EQ(held.size(), 0u);
  EXPECT_EQ(cancels_running, 1);
  EXPECT_EQ(cancels_done, 0);
  RecordingSink after;
  EXPECT_EQ(held.Attach(Key("", "running"), &after).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(held.Attach(Key("", "done"), &after).status().code(), absl::StatusCode::kNotFound);
}

TEST(HeldRequestsTest, AFailedRequestReplaysItsFailure) {
  HeldRequests held(absl::Seconds(30));
  RecordingSink origin, retry;
  auto h = held.Add(
      Key("", "k"), [] {}, &origin);
  ASSERT_TRUE(h.ok());
  held.Detach(*h, &origin);
  (*h)->Output(Text("a"), false);
  (*h)->Fail(grpc::Status(grpc::StatusCode::INTERNAL, "engine error"));
  ASSERT_TRUE(held.Attach(Key("", "k"), &retry).ok());
  EXPECT_EQ(retry.texts, (std::vector<std::string>{"a"}));
  EXPECT_FALSE(retry.ended_ok);
  ASSERT_TRUE(retry.end_status.has_value());
  EXPECT_EQ(retry.end_status->error_code(), grpc::StatusCode::INTERNAL);
}

// A real mixed worker, its detached-request grace short so that expiry is quick to see.
class HeldWorkerTest : public ::testing::Test {
 public:
  static constexpr absl::Duration kGrace = absl::Milliseconds(400);
  static constexpr int32_t kMarker = 5;  // no other test's prompt has it
  // Far more tokens than the grace lets a request make on a fast idle machine (thousands of
  // tokens a second at short contexts): an orphan is cancelled before it can stall.
  static constexpr int kStallAfter = 12000;
  static constexpr absl::Duration kStall = absl::Seconds(6);

 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/strata_held_request_test_" +
                           std::to_string(::getpid()));
    ASSERT_TRUE(WritePreset("tiny-llama-32k", *dir_).ok());
    WorkerOptions o;
    o.id = "held-t";
    o.role = v1::ROLE_MIXED;
    o.model_dir = *dir_;
    o.engine.runner.num_kv_blocks = 2048;
    o.engine.runner.block_size = 16;
    o.detached_request_grace = kGrace;
    o.engine_stall_for_testing = {kMarker, kStallAfter, kStall};
    auto w = Worker::Create(o);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Start().ok());
    worker_ = w->release();
  }
  static void TearDownTestSuite() {
    delete worker_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::unique_ptr<v1::Worker::Stub> Stub() {
    return v1::Worker::NewStub(
        proto::MakeChannel("127.0.0.1:" + std::to_string(worker_->grpc_port())));
  }
  static bool Idle() {
    const EngineLoad l = worker_->load();
    return l.running == 0 && l.waiting == 0 && l.free_kv_blocks == l.total_kv_blocks;
  }
  static std::string* dir_;
  static Worker* worker_;
};
std::string* HeldWorkerTest::dir_ = nullptr;
Worker* HeldWorkerTest::worker_ = nullptr;

v1::GenerateRequest Request(const std::string& id, int max_tokens, const std::string& key = "") {
  v1::GenerateRequest r;
  r.set_protocol_version(proto::kProtocolVersion);
  r.set_request_id(id);
  for (int i = 0; i < 40; ++i) r.add_prompt(11 + (i * 17) % 800);
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.temperature = 0;
  p.ignore_eos = true;
  proto::ToProto(p, r.mutable_params());
  if (!key.empty()) *r.mutable_resume() = Key("key-0", key, 42);
  return r;
}

struct Collected {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  int responses = 0;
  bool finished = false;
  bool attached = false;  // an Attach stream's first message said so
};

void Collect(const v1::GenerateResponse& m, Collected* out) {
  out->tokens.insert(out->tokens.end(), m.tokens().begin(), m.tokens().end());
  out->text += m.text();
  ++out->responses;
  out->finished = out->finished || m.finished();
}

Collected GenerateAll(v1::Worker::Stub& stub, const v1::GenerateRequest& req) {
  grpc::ClientContext ctx;
  Collected out;
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse m;
  while (reader->Read(&m)) Collect(m, &out);
  out.status = reader->Finish();
  return out;
}

// Reads `n` responses of a Generate stream, then cancels it (as a router that died).
Collected GenerateThenCancel(v1::Worker::Stub& stub, const v1::GenerateRequest& req, int n) {
  grpc::ClientContext ctx;
  Collected out;
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse m;
  while (out.responses < n && reader->Read(&m)) Collect(m, &out);
  ctx.TryCancel();
  while (reader->Read(&m)) {
  }
  out.status = reader->Finish();
  return out;
}

Collected AttachAll(v1::Worker::Stub& stub, const std::string& key, uint64_t fingerprint = 42,
                    const std::string& tenant = "key-0") {
  grpc::ClientContext ctx;
  v1::AttachRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  *req.mutable_resume() = Key(tenant, key, fingerprint);
  Collected out;
  auto reader = stub.Attach(&ctx, req);
  v1::AttachResponse m;
  while (reader->Read(&m)) {
    if (m.attached()) {
      out.attached = true;
      continue;
    }
    Collect(m.response(), &out);
  }
  out.status = reader->Finish();
  return out;
}

TEST_F(HeldWorkerTest, AKeyedRequestOutlivesItsStreamAndAttachGivesItAllFromTheStart) {
  auto stub = Stub();
  const Collected uncut = GenerateAll(*stub, Request("uncut", 200));
  ASSERT_TRUE(uncut.status.ok()) << uncut.status.error_message();
  ASSERT_EQ(uncut.tokens.size(), 200u);
  const Collected cut = GenerateThenCancel(*stub, Request("cut", 200, "a#0"), 3);
  EXPECT_EQ(cut.status.error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_GE(cut.responses, 1);
  const Collected attached = AttachAll(*stub, "a#0");
  ASSERT_TRUE(attached.status.ok()) << attached.status.error_message();
  EXPECT_TRUE(attached.attached);
  EXPECT_TRUE(attached.finished);
  EXPECT_EQ(attached.tokens, uncut.tokens);
  EXPECT_EQ(attached.text, uncut.text);
  // What the cut stream had is the replay's beginning.
  EXPECT_EQ(
      std::vector<int32_t>(attached.tokens.begin(), attached.tokens.begin() + cut.tokens.size()),
      cut.tokens);
  // Finished and delivered, it can be collected again within the grace (an idempotent retry).
  const Collected again = AttachAll(*stub, "a#0");
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.text, uncut.text);
  // Another tenant's key, or another request's fingerprint, is not this request.
  EXPECT_EQ(AttachAll(*stub, "a#0", 42, "key-1").status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(AttachAll(*stub, "a#0", 43).status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // A second Generate with a held key is refused rather than run twice.
  EXPECT_EQ(GenerateAll(*stub, Request("dup", 4, "a#0")).status.error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
}

// A request that reaches kStallAfter tokens sleeps kStall in the engine (the marker in its
// prompt): one that is not cancelled in time cannot finish, or free its blocks, quickly.
v1::GenerateRequest Marked(const std::string& id, const std::string& key = "") {
  v1::GenerateRequest r = Request(id, 2 * HeldWorkerTest::kStallAfter, key);
  r.set_prompt(0, HeldWorkerTest::kMarker);
  return r;
}

// Waits up to `limit` for the engine to be idle with every block free; how long it took.
absl::Duration WaitIdle(absl::Duration limit, bool (*idle)()) {
  const absl::Time start = absl::Now();
  while (!idle() && absl::Now() - start < limit) absl::SleepFor(absl::Milliseconds(5));
  return absl::Now() - start;
}

TEST_F(HeldWorkerTest, AnUnkeyedRequestIsCancelledWithItsStream) {
  auto stub = Stub();
  const Collected cut = GenerateThenCancel(*stub, Marked("plain"), 2);
  EXPECT_EQ(cut.status.error_code(), grpc::StatusCode::CANCELLED);
  // Stopped at once, long before its stall would have ended.
  WaitIdle(kStall / 2, &Idle);
  EXPECT_TRUE(Idle());
  EXPECT_EQ(AttachAll(*stub, "plain").status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(HeldWorkerTest, AfterTheGraceNobodyAttachedToIsCancelledAndFreed) {
  auto stub = Stub();
  const absl::Time start = absl::Now();
  const Collected cut = GenerateThenCancel(*stub, Marked("orphan", "orphan#0"), 2);
  EXPECT_EQ(cut.status.error_code(), grpc::StatusCode::CANCELLED);
  // Still running within the grace (a retry would attach to it).
  EXPECT_FALSE(Idle());
  WaitIdle(kGrace + kStall / 2, &Idle);
  // Cancelled at the end of the grace and freed, long before its stall would have ended.
  ASSERT_TRUE(Idle()) << "the orphaned request still holds the engine";
  EXPECT_GE(absl::Now() - start, kGrace);
  EXPECT_EQ(AttachAll(*stub, "orphan#0").status.error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace strata::worker
