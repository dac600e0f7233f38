#pragma once
// A worker's registry client: strata::proto::RegistryClient fed by the worker's engine loop
// (its load, and its device-tier KV cache events at tier 0).
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "engine_watchdog.h"
#include "strata/engine/engine_loop.h"
#include "strata/proto/registry_client.h"

namespace strata::worker {

using RegistryClient = proto::RegistryClient;

class KvTiering;

// `loop`, `watchdog` (whose stall the load reports) and `tiering` (the worker's lower KV tiers, or
// null) must outlive the client. The heartbeats carry the engine's events at tier 0 and the tiers'
// events at their tiers (1, 2).
std::unique_ptr<RegistryClient> MakeRegistryClient(proto::RouterTargets routers, v1::WorkerInfo info,
                                                   EngineLoop* loop, const EngineWatchdog* watchdog,
                                                   KvTiering* tiering, absl::Duration interval);

}  // namespace strata::worker
