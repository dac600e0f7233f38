#include "registry_client.h"

#include <vector>

#include "kv_tiering.h"

namespace strata::worker {
namespace {

v1::WorkerLoad ToProto(const EngineLoad& load) {
  v1::WorkerLoad l;
  l.set_queued_prefill_tokens(load.queued_prefill_tokens);
  l.set_running(load.running);
  l.set_waiting(load.waiting);
  l.set_free_kv_blocks(load.free_kv_blocks);
  l.set_total_kv_blocks(load.total_kv_blocks);
  l.set_step_seconds_ema(load.step_seconds_ema);
  l.set_decode_context_tokens(load.decode_context_tokens);
  l.set_prefill_tokens_per_second(load.prefill_tokens_per_second);
  return l;
}

std::vector<v1::KvEvent> TakeEvents(EngineLoop* loop) {
  std::vector<v1::KvEvent> out;
  for (const KvCacheEvent& e : loop->TakeKvEvents()) {
    v1::KvEvent m;
    switch (e.kind) {
      case KvCacheEvent::Kind::kStored:
        m.set_kind(v1::KvEvent::STORED);
        break;
      case KvCacheEvent::Kind::kRemoved:
        m.set_kind(v1::KvEvent::REMOVED);
        break;
      case KvCacheEvent::Kind::kCleared:
        m.set_kind(v1::KvEvent::CLEARED);
        break;
    }
    m.set_hash(e.hash);
    m.set_parent_hash(e.parent);
    m.set_tier(0);  // the engine's block pool is the device tier
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

std::unique_ptr<RegistryClient> MakeRegistryClient(proto::RouterTargets routers, v1::WorkerInfo info,
                                                   EngineLoop* loop, const EngineWatchdog* watchdog,
                                                   KvTiering* tiering, absl::Duration interval) {
  proto::RegistryHooks hooks;
  // A stalled engine keeps heartbeating (so the router keeps its KV index and places here again
  // the moment a step completes) but says so: the router places nothing on it meanwhile.
  hooks.load = [loop, watchdog] {
    v1::WorkerLoad l = ToProto(loop->load());
    if (watchdog->Stalled()) {
      l.set_stalled(true);
      l.set_stalled_seconds(absl::ToDoubleSeconds(watchdog->Age()));
    }
    return l;
  };
  hooks.take_events = [loop, tiering] {
    std::vector<v1::KvEvent> events = TakeEvents(loop);
    if (tiering != nullptr) {
      for (v1::KvEvent& e : tiering->TakeEvents()) events.push_back(std::move(e));
    }
    return events;
  };
  hooks.resync = [loop, tiering] {
    loop->ResyncKvEvents();
    if (tiering != nullptr) tiering->Resync();
  };
  if (tiering != nullptr && tiering->discovers_kvstores()) {
    hooks.kvstores = [tiering](std::vector<std::string> listed) {
      tiering->OnKvstoresListed(listed);
    };
  }
  return std::make_unique<RegistryClient>(std::move(routers), std::move(info),
                                          std::move(hooks), interval);
}

}  // namespace strata::worker
