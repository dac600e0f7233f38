// A stub shared with ShareCallbackStub may lose its last reference inside a reactor's OnDone,
// on one of gRPC's callback threads, as the router's worker streams do when their worker has
// been removed: the process must go on. With a plain shared_ptr the channel is destroyed on
// that thread and gRPC frees the callback completion queue under it (the process aborts).
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "strata/proto/protocol.h"

namespace strata::proto {
namespace {

// A Generate stream to a port nobody listens on: it ends at once with UNAVAILABLE, and OnDone
// deletes the reactor, whose stub (and call) hold the only references to the channel, as the
// router's worker streams do.
class LastReferenceInOnDone final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  static void Start(std::shared_ptr<v1::Worker::Stub> stub, absl::Notification* done,
                    grpc::StatusCode* code) {
    auto* call = new LastReferenceInOnDone(std::move(stub), done, code);
    call->stub_->async()->Generate(&call->context_, &call->request_, call);
    call->StartRead(&call->response_);
    call->StartCall();
  }
  void OnReadDone(bool) override {}
  void OnDone(const grpc::Status& status) override {
    *code_ = status.error_code();
    absl::Notification* done = done_;
    delete this;  // the last references to the channel go here, on gRPC's thread
    done->Notify();
  }

 private:
  LastReferenceInOnDone(std::shared_ptr<v1::Worker::Stub> stub, absl::Notification* done,
                        grpc::StatusCode* code)
      : stub_(std::move(stub)), done_(done), code_(code) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    request_.set_protocol_version(kProtocolVersion);
  }
  std::shared_ptr<v1::Worker::Stub> stub_;  // outlives the call (destroyed after context_)
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  absl::Notification* done_;
  grpc::StatusCode* code_;
};

TEST(CallbackStubTest, TheLastReferenceMayGoInsideOnDone) {
  // Every round's channel is the only one with callback calls: each round ends the process-wide
  // callback queue's last user.
  for (int round = 0; round < 20; ++round) {
    auto stub = ShareCallbackStub(v1::Worker::NewStub(
        grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials())));
    absl::Notification done;
    grpc::StatusCode code = grpc::StatusCode::OK;
    LastReferenceInOnDone::Start(std::move(stub), &done, &code);
    done.WaitForNotification();
    EXPECT_EQ(code, grpc::StatusCode::UNAVAILABLE) << "round " << round;
  }
}

TEST(CallbackStubTest, DestroyOffCallbackThreadsRunsElsewhereAndInOrder) {
  std::atomic<int> order{0};
  std::thread::id ran_on;
  absl::Notification done;
  DestroyOffCallbackThreads([&] { EXPECT_EQ(order.fetch_add(1), 0); });
  DestroyOffCallbackThreads([&] {
    EXPECT_EQ(order.fetch_add(1), 1);
    ran_on = std::this_thread::get_id();
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(order.load(), 2);
}

}  // namespace
}  // namespace strata::proto
