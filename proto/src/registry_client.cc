#include "strata/proto/registry_client.h"

#include <chrono>

#include "strata/common/logging.h"

namespace strata::proto {
namespace {
constexpr size_t kMaxUnsentEvents = 1 << 20;  // beyond this the router's view is rebuilt anyway
constexpr auto kRpcTimeout = std::chrono::seconds(2);
}  // namespace

RegistryClient::RegistryClient(std::string router_address, v1::WorkerInfo info,
                               RegistryHooks hooks, absl::Duration interval)
    : info_(std::move(info)),
      hooks_(std::move(hooks)),
      interval_(interval),
      stub_(v1::Registry::NewStub(MakeChannel(router_address))) {}

RegistryClient::~RegistryClient() { Stop(); }

void RegistryClient::Start() { thread_ = std::thread([this] { Run(); }); }

void RegistryClient::Stop() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
  if (!registered_.exchange(false)) return;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  v1::DeregisterRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_worker_id(info_.id());
  v1::DeregisterResponse resp;
  (void)stub_->Deregister(&ctx, req, &resp);
}

void RegistryClient::Run() {
  while (!stop_.HasBeenNotified()) {
    // A registration carries no load: a heartbeat follows at once, so the router never sees a
    // (re-)registered worker as idle for an interval it is not (e.g. with its engine stalled).
    const bool ok = registered_.load() ? Beat() : Register() && Beat();
    if (!ok) registered_ = false;
    stop_.WaitForNotificationWithTimeout(interval_);
  }
}

bool RegistryClient::Register() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  v1::RegisterRequest req;
  req.set_protocol_version(kProtocolVersion);
  *req.mutable_worker() = info_;
  v1::RegisterResponse resp;
  grpc::Status s = stub_->Register(&ctx, req, &resp);
  if (!s.ok()) {
    if (s.error_message() != last_register_error_) {
      last_register_error_ = s.error_message();
      STRATA_LOG(Warning) << "registering with the router failed: " << s.error_message();
    }
    return false;
  }
  last_register_error_.clear();
  epoch_ = resp.epoch();
  // The router's index of our blocks starts empty: resend everything held now.
  unsent_.clear();
  if (hooks_.resync) hooks_.resync();
  registered_ = true;
  STRATA_LOG(Info) << "registered with the router as " << info_.id();
  if (hooks_.kvstores) {
    hooks_.kvstores({resp.kvstore_addresses().begin(), resp.kvstore_addresses().end()});
  }
  return true;
}

bool RegistryClient::Beat() {
  if (hooks_.take_events) {
    for (v1::KvEvent& e : hooks_.take_events()) {
      if (unsent_.size() >= kMaxUnsentEvents) break;
      unsent_.push_back(std::move(e));
    }
  }
  v1::HeartbeatRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_worker_id(info_.id());
  req.set_epoch(epoch_);
  if (hooks_.load) *req.mutable_load() = hooks_.load();
  req.mutable_events()->Assign(unsent_.begin(), unsent_.end());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  v1::HeartbeatResponse resp;
  grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
  if (!s.ok()) return true;  // keep the events; the router may be briefly busy or restarting
  unsent_.clear();
  if (resp.reregister()) return false;
  if (hooks_.kvstores) {
    hooks_.kvstores({resp.kvstore_addresses().begin(), resp.kvstore_addresses().end()});
  }
  return true;
}

}  // namespace strata::proto
