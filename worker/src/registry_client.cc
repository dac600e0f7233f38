#include "registry_client.h"

#include "strata/common/logging.h"

namespace strata::worker {
namespace {
constexpr size_t kMaxUnsentEvents = 1 << 20;  // beyond this the router's view is rebuilt anyway
}

RegistryClient::RegistryClient(std::string router_address, v1::WorkerInfo info, EngineLoop* loop,
                               absl::Duration interval)
    : info_(std::move(info)),
      loop_(loop),
      interval_(interval),
      stub_(v1::Registry::NewStub(proto::MakeChannel(router_address))) {}

RegistryClient::~RegistryClient() { Stop(); }

void RegistryClient::Start() { thread_ = std::thread([this] { Run(); }); }

void RegistryClient::Stop() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
  if (!registered_.exchange(false)) return;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::DeregisterRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  req.set_worker_id(info_.id());
  v1::DeregisterResponse resp;
  (void)stub_->Deregister(&ctx, req, &resp);
}

void RegistryClient::Run() {
  while (!stop_.HasBeenNotified()) {
    const bool ok = registered_.load() ? Beat() : Register();
    if (!ok) registered_ = false;
    stop_.WaitForNotificationWithTimeout(interval_);
  }
}

bool RegistryClient::Register() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::RegisterRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  *req.mutable_worker() = info_;
  v1::RegisterResponse resp;
  grpc::Status s = stub_->Register(&ctx, req, &resp);
  if (!s.ok()) {
    STRATA_LOG(Warning) << "registering with the router failed: " << s.error_message();
    return false;
  }
  epoch_ = resp.epoch();
  // The router's index of our blocks starts empty: resend everything the cache holds now.
  unsent_.clear();
  loop_->ResyncKvEvents();
  registered_ = true;
  STRATA_LOG(Info) << "registered with the router as " << info_.id();
  return true;
}

bool RegistryClient::Beat() {
  for (const KvCacheEvent& e : loop_->TakeKvEvents()) {
    if (unsent_.size() >= kMaxUnsentEvents) break;
    v1::KvEvent m;
    m.set_kind(e.kind == KvCacheEvent::Kind::kStored ? v1::KvEvent::STORED : v1::KvEvent::REMOVED);
    m.set_hash(e.hash);
    m.set_parent_hash(e.parent);
    m.set_tier(0);
    unsent_.push_back(std::move(m));
  }
  const EngineLoad load = loop_->load();
  v1::HeartbeatRequest req;
  req.set_protocol_version(proto::kProtocolVersion);
  req.set_worker_id(info_.id());
  req.set_epoch(epoch_);
  auto* l = req.mutable_load();
  l->set_queued_prefill_tokens(load.queued_prefill_tokens);
  l->set_running(load.running);
  l->set_waiting(load.waiting);
  l->set_free_kv_blocks(load.free_kv_blocks);
  l->set_total_kv_blocks(load.total_kv_blocks);
  l->set_step_seconds_ema(load.step_seconds_ema);
  req.mutable_events()->Assign(unsent_.begin(), unsent_.end());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::HeartbeatResponse resp;
  grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
  if (!s.ok()) return true;  // keep the events; the router may be briefly busy or restarting
  unsent_.clear();
  return !resp.reregister();
}

}  // namespace strata::worker
