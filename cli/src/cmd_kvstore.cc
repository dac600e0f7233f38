// `strata kvstore`: a remote KV store daemon (tier G4) that holds KV blocks for other nodes.
// Runs until SIGINT or SIGTERM, then deregisters from the router and exits 0.
#include <csignal>
#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "args.h"
#include "commands.h"
#include "tls_flags.h"
#include "strata/kvstore/eviction_policy.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/proto/registry_client.h"

namespace strata::cli {
namespace {

// Flag values that parse but make no sense: a one-line reason, or "" when fine.
std::string CheckOptions(const kvstore::KvStoreServerOptions& o, long long lease_timeout_ms) {
  if (o.capacity_bytes <= 0) return "--capacity-bytes must be > 0";
  if (o.port < 0 || o.port > 65535) return "--port must be in 0..65535";
  if (o.http_port < -1 || o.http_port > 65535) return "--http-port must be in -1..65535";
  if (lease_timeout_ms <= 0) return "--lease-timeout-ms must be > 0";
  const auto names = kvstore::EvictionPolicyNames();
  if (std::find(names.begin(), names.end(), o.policy) == names.end()) {
    return absl::StrCat("--policy must be one of ", absl::StrJoin(names, ", "), ", not '",
                        o.policy, "'");
  }
  if (o.block_bytes != 0 && o.capacity_bytes < static_cast<int64_t>(o.block_bytes)) {
    return "--capacity-bytes is smaller than one block (--block-bytes)";
  }
  return "";
}

}  // namespace

int RunKvstore(const Args& args) {
  kvstore::KvStoreServerOptions o;
  long long capacity = 0, block_bytes = 0, lease_timeout_ms = 30000;
  double heartbeat_s = 1.0;
  ArgParser p("strata kvstore --capacity-bytes N [flags]",
              "A remote KV store daemon (tier G4): holds KV blocks for other nodes, reached over "
              "gRPC (metadata) and UCX (block bytes).");
  p.AddString("--id", &o.id, "name in the cluster (and of the transport agent)");
  p.AddString("--host", &o.host, "address to listen on");
  p.AddInt("--port", &o.port, "KvStore gRPC port (0: any free port)");
  p.AddInt("--http-port", &o.http_port, "/metrics and /health port (0: any free port, -1: none)");
  p.AddInt64("--capacity-bytes", &capacity, "bytes of block memory (rounded down to blocks)");
  p.AddInt64("--block-bytes", &block_bytes, "bytes per block (0: the first client's)");
  p.AddString("--policy", &o.policy,
              "eviction policy (kvstore registry: lru, s3-fifo, arc, ghost-lru, ...)");
  p.AddInt64("--lease-timeout-ms", &lease_timeout_ms,
             "how long an unreleased lease or reservation holds a block");
  AddRouterFlags(p, &o.router_address, &o.router_service);
  p.AddString("--model-identity", &o.model_identity, "model whose blocks it holds (empty: any)");
  p.AddDouble("--heartbeat-seconds", &heartbeat_s, "interval of heartbeats to the router");
  proto::TlsFiles tls;
  AddTlsFlags(p, &tls);
  if (auto s = p.Parse(args); !s.ok()) return Fail("kvstore", std::string(s.message()), 2);
  if (auto t = proto::RouterTargets::Parse(o.router_address, o.router_service); !t.ok()) {
    return Fail("kvstore", std::string(t.status().message()), 2);
  }
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  if (block_bytes < 0) return Fail("kvstore", "--block-bytes must be >= 0", 2);
  if (heartbeat_s <= 0) return Fail("kvstore", "--heartbeat-seconds must be > 0", 2);
  o.capacity_bytes = capacity;
  o.block_bytes = static_cast<size_t>(block_bytes);
  o.lease_timeout = absl::Milliseconds(lease_timeout_ms);
  o.heartbeat_interval = absl::Seconds(heartbeat_s);
  if (std::string why = CheckOptions(o, lease_timeout_ms); !why.empty()) {
    return Fail("kvstore", why, 2);
  }
  if (auto st = ApplyTlsFlags(tls); !st.ok()) return Fail("kvstore", std::string(st.message()), 2);
  // Block SIGINT/SIGTERM in every thread (before any starts) and wait for one below.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // Faulting in a pool of several GiB takes seconds: say what the wait is for.
  std::printf("kvstore %s: allocating a pool of %lld MiB\n", o.id.c_str(),
              static_cast<long long>(capacity >> 20));
  std::fflush(stdout);
  auto server = kvstore::KvStoreServer::Create(o);
  if (!server.ok()) return Fail("kvstore", std::string(server.status().message()), 1);
  if (auto s = (*server)->Start(); !s.ok()) return Fail("kvstore", std::string(s.message()), 1);
  // One line that scripts and tests parse: where the KvStore service and /metrics are.
  std::string line = absl::StrCat("kvstore ", o.id, ": grpc ", (*server)->address());
  if ((*server)->http_port() > 0) {
    const std::string http = absl::StrCat(o.host, ":", (*server)->http_port());
    absl::StrAppend(&line, ", http ", http, " (metrics at http://", http, "/metrics)");
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  std::printf("kvstore %s: %s, stopping\n", o.id.c_str(), sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  (*server)->Shutdown();
  std::printf("kvstore %s: stopped\n", o.id.c_str());
  return 0;
}

}  // namespace strata::cli
