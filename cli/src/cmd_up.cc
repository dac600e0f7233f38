// `strata up`: config -> resolved model and ports -> router and workers as child processes ->
// wait for /ready -> serve until a signal -> stop workers, then the router.
//
// A process that ends while serving is reported on stderr and started again by the restart.*
// rules (a failure by default, with backoff): a worker or kvstore daemon while the rest keeps
// serving (the router routes around it), the router on its same ports, where the workers and
// daemons register again with their next heartbeat and resend their KV events. A router that
// is left stopped stops the whole cluster with exit status 1: nothing can be served without it.
//
// With router.replicas (--routers) above 1, the routers run on private ports behind a TCP front
// on the cluster's HTTP port (tcp_front.h), and every worker and daemon registers with each
// router: a router's death cuts only the connections it held, new ones go to the others, and it
// is started again as above. The cluster stops only when every router is left stopped.
#include "cmd_up.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "args.h"
#include "tcp_front.h"
#include "up_tls.h"
#include "strata/common/cluster_config.h"
#include "strata/engine/presets.h"
#include "supervisor.h"

namespace strata::cli {
namespace {

// A fresh cluster key for block hashes: 32 random bytes as 64 hex digits, readable by this user
// only. Every process of the run gets the same file.
absl::Status WriteRandomKeyFile(const std::string& path) {
  unsigned char bytes[32];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return absl::InternalError(
        absl::StrCat("cannot draw a random KV hash key: ", std::strerror(errno)));
  }
  const std::string hex = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  const std::string text = hex + "\n";
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

struct UpFlags {
  std::string config_path;
  std::string model, host, log_dir, restart, gpus, tls;
  int port = -1, prefill = -1, decode = -1, mixed = -1, routers = -1;  // -1 = the config's
  double grace_seconds = 10;
  double ready_timeout_seconds = 120;
};

void AddFlags(ArgParser& p, UpFlags& f) {
  p.AddString("--config", &f.config_path, "cluster config (YAML or JSON); default: built-in");
  p.AddString("--model", &f.model, "override: checkpoint directory or preset:NAME");
  p.AddString("--host", &f.host, "override: address every process binds");
  p.AddInt("--port", &f.port, "override: the router's HTTP port (0 = any free port)");
  p.AddInt("--routers", &f.routers,
           "override: router.replicas, routers behind the one HTTP port (a TCP front spreads "
           "connections; each worker registers with every router)");
  p.AddInt("--prefill", &f.prefill, "override: number of prefill workers");
  p.AddInt("--decode", &f.decode, "override: number of decode workers");
  p.AddInt("--mixed", &f.mixed, "override: number of mixed (prefill+decode) workers");
  p.AddString("--gpus", &f.gpus,
              "override: GPU ids for every pool, comma-separated (worker i of a pool on the i-th, "
              "round robin), e.g. 0 or 0,1");
  p.AddString("--log-dir", &f.log_dir, "override: directory for <process>.log files");
  p.AddString("--restart", &f.restart, "override: restart.policy, on-failure | always | never");
  p.AddString("--tls", &f.tls,
              "override: tls, off | auto (mTLS on cluster gRPC with a throwaway CA for this run)");
  p.AddDouble("--grace-seconds", &f.grace_seconds,
              "on shutdown, seconds to wait after SIGTERM before SIGKILL");
  p.AddDouble("--ready-timeout-seconds", &f.ready_timeout_seconds,
              "seconds to wait for every process to be ready");
}

absl::StatusOr<ClusterConfig> BuildConfig(const UpFlags& f) {
  ClusterConfig c;
  if (!f.config_path.empty()) {
    auto loaded = LoadClusterConfig(f.config_path);
    if (!loaded.ok()) return loaded.status();
    c = *std::move(loaded);
  }
  if (!c.models.empty() &&
      (!f.model.empty() || f.prefill != -1 || f.decode != -1 || f.mixed != -1)) {
    return absl::InvalidArgumentError(
        "--model, --prefill, --decode and --mixed do not apply to a config with a models list: "
        "set each model's workers in its entry");
  }
  if (!f.model.empty()) c.model = f.model;
  if (!f.host.empty()) c.host = f.host;
  if (!f.log_dir.empty()) c.log_dir = f.log_dir;
  if (!f.restart.empty()) c.restart.policy = f.restart;
  if (f.tls == "off" || f.tls == "auto") {
    c.tls = {};
    c.tls.mode = f.tls;
  } else if (!f.tls.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls must be off or auto, got '", f.tls, "'"));
  }
  if (f.port != -1) c.router.http_port = f.port;
  if (f.routers != -1) c.router.replicas = f.routers;
  if (f.prefill != -1) c.prefill.count = f.prefill;
  if (f.decode != -1) c.decode.count = f.decode;
  if (f.mixed != -1) c.mixed.count = f.mixed;
  if (!f.gpus.empty()) {
    std::vector<int> ids;
    for (absl::string_view part : absl::StrSplit(f.gpus, ',')) {
      int id = 0;
      if (!absl::SimpleAtoi(part, &id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--gpus expects comma-separated GPU ids, got '", f.gpus, "'"));
      }
      ids.push_back(id);
    }
    for (ClusterConfig::Pool* pool : {&c.prefill, &c.decode, &c.mixed}) pool->gpus = ids;
    for (ClusterConfig::ModelPool& m : c.models) {
      for (ClusterConfig::Pool* pool : {&m.prefill, &m.decode, &m.mixed}) pool->gpus = ids;
    }
  }
  if (auto st = ValidateClusterConfig(c); !st.ok()) return st;
  if (!(f.grace_seconds >= 0) || !(f.ready_timeout_seconds > 0)) {
    return absl::InvalidArgumentError(
        "--grace-seconds must be >= 0 and --ready-timeout-seconds > 0");
  }
  return c;
}

struct Ports {
  std::vector<std::pair<int, int>> workers;  // (http, grpc) per worker, then per kvstore daemon
  std::vector<std::pair<int, int>> routers;  // (http, grpc) per router when there are several
};

// Fills every 0 port: the router's in place (with several routers, the front's HTTP port), the
// routers' and workers' as (http, grpc) pairs.
absl::StatusOr<Ports> ResolvePorts(ClusterConfig& c) {
  int workers = c.kv_tiers.kvstore_count;
  for (const ClusterConfig& m : ModelPoolConfigs(c)) {
    workers += m.prefill.count + m.decode.count + m.mixed.count;
  }
  const int replicas = c.router.replicas > 1 ? c.router.replicas : 0;
  const int router_free =
      (c.router.http_port == 0) + (replicas == 0 && c.router.grpc_port == 0) +
      (replicas > 0 ? replicas * (c.router.grpc_port == 0 ? 2 : 1) : 0);
  auto ports = PickFreePorts(c.host, router_free + 2 * workers);
  if (!ports.ok()) return ports.status();
  size_t next = 0;
  Ports out;
  if (c.router.http_port == 0) c.router.http_port = (*ports)[next++];
  if (replicas == 0) {
    if (c.router.grpc_port == 0) c.router.grpc_port = (*ports)[next++];
  } else {
    for (int i = 0; i < replicas; ++i) {
      const int http = (*ports)[next++];
      const int grpc = c.router.grpc_port == 0 ? (*ports)[next++] : c.router.grpc_port + i;
      out.routers.emplace_back(http, grpc);
    }
  }
  for (int i = 0; i < workers; ++i, next += 2) {
    out.workers.emplace_back((*ports)[next], (*ports)[next + 1]);
  }
  return out;
}

// SIGINT/SIGTERM set a flag and wake poll() through a pipe. A handler rather than a blocked
// mask, so a signal delivered to any thread of this process is seen the same way.
volatile sig_atomic_t g_signal = 0;
int g_wake_fd = -1;   // written by the handler
int g_wake_read = -1;  // polled by Serve()

void OnSignal(int sig) {
  g_signal = sig;
  const char c = 1;
  [[maybe_unused]] ssize_t n = write(g_wake_fd, &c, 1);
}

absl::Status InstallSignalHandlers() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return absl::InternalError("pipe2 failed");
  g_wake_read = fds[0];
  g_wake_fd = fds[1];
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return absl::OkStatus();
}

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

bool IsRouter(const std::string& name) { return absl::StartsWith(name, "router"); }

// Serves until a signal (returns 0) or every one of the `routers` router processes ends for good
// (returns 1). Processes that end are started again as `rules` say, each after its backoff delay.
int Serve(Supervisor& sup, const RestartRules& rules, size_t routers) {
  std::map<std::string, RestartTracker> trackers;
  std::map<std::string, absl::Time> due;  // restarts waiting for their delay
  std::set<std::string> routers_gone;     // routers left stopped
  // A router left stopped: the cluster goes on while another router serves.
  auto router_gone = [&](const std::string& name, const std::string& why) {
    routers_gone.insert(name);
    if (routers_gone.size() < routers) {
      std::fprintf(stderr, "strata up: leaving %s stopped (%s); %zu routers still serve\n",
                   name.c_str(), why.c_str(), routers - routers_gone.size());
      return false;
    }
    std::fprintf(stderr, "strata up: the %s gone (%s), stopping the cluster\n",
                 routers == 1 ? "router is" : "routers are", why.c_str());
    sup.Stop();
    return true;
  };
  while (g_signal == 0) {
    pollfd p{g_wake_read, POLLIN, 0};
    poll(&p, 1, 200);
    for (const ExitInfo& e : sup.ReapExited()) {
      std::fprintf(stderr, "strata up: %s %s unexpectedly; see %s\n", e.name.c_str(),
                   e.Describe().c_str(), e.log_path.c_str());
      RestartTracker& tracker = trackers.try_emplace(e.name, rules).first->second;
      std::string why_not;
      if (const auto delay = tracker.OnExit(e, &why_not)) {
        std::fprintf(stderr, "strata up: starting %s again in %s (restart %d in a row)\n",
                     e.name.c_str(), absl::FormatDuration(*delay).c_str(), tracker.in_a_row());
        due[e.name] = absl::Now() + *delay;
      } else if (IsRouter(e.name)) {
        if (router_gone(e.name, why_not)) return 1;
      } else {
        std::fprintf(stderr, "strata up: leaving %s stopped: %s\n", e.name.c_str(),
                     why_not.c_str());
      }
    }
    for (auto it = due.begin(); it != due.end();) {
      if (absl::Now() < it->second) {
        ++it;
        continue;
      }
      if (auto st = sup.Restart(it->first); st.ok()) {
        std::fprintf(stderr, "strata up: %s started again (pid %d)\n", it->first.c_str(),
                     static_cast<int>(sup.pid(it->first)));
      } else if (IsRouter(it->first)) {
        if (router_gone(it->first, absl::StrCat("cannot start it again: ", st.message()))) {
          return 1;
        }
      } else {
        std::fprintf(stderr, "strata up: cannot start %s again, leaving it stopped: %s\n",
                     it->first.c_str(), std::string(st.message()).c_str());
      }
      it = due.erase(it);
    }
    // (only processes started again and not ready yet are asked)
    for (const std::string& name : sup.PollReady()) {
      std::fprintf(stderr, "strata up: %s is ready again\n", name.c_str());
    }
  }
  return 0;
}

int Shutdown(Supervisor& sup) {
  Say(absl::StrCat("stopping (", strsignal(g_signal == 0 ? SIGTERM : g_signal), ") ..."));
  for (const ExitInfo& e : sup.Stop()) {
    if (e.killed) Say(absl::StrCat(e.name, " did not stop in time: killed"));
  }
  Say("stopped");
  return 0;
}

std::vector<std::string> Names(const std::vector<ProcessSpec>& specs) {
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  return names;
}

void SayModelPlacement(const ClusterConfig& c, const std::string& id_prefix);

// One line per worker that has a device or a KV pool size of its own, e.g.
// "  decode-0: GPU 0, gpu_memory_share 0.45".
void SayPlacement(const ClusterConfig& config) {
  const std::vector<ClusterConfig> models = ModelPoolConfigs(config);
  for (size_t m = 0; m < models.size(); ++m) {
    SayModelPlacement(models[m],
                      config.models.empty() ? "" : ModelProcessPrefix(config.models[m].name) + "-");
  }
}

void SayModelPlacement(const ClusterConfig& c, const std::string& id_prefix) {
  auto placed = PlaceWorkers(c);
  if (!placed.ok()) return;
  for (const WorkerPlacement& w : *placed) {
    std::vector<std::string> parts;
    if (w.gpu >= 0) parts.push_back(absl::StrCat("GPU ", w.gpu));
    if (c.engine.num_kv_blocks == 0 && w.kv_cache_mb > 0) {
      parts.push_back(absl::StrCat("kv_cache_mb ", w.kv_cache_mb));
    } else if (c.engine.num_kv_blocks == 0 && w.memory_share > 0) {
      parts.push_back(absl::StrCat("gpu_memory_share ", w.memory_share));
    }
    if (!parts.empty()) {
      Say(absl::StrCat("  ", id_prefix, w.role, "-", w.index, ": ", absl::StrJoin(parts, ", ")));
    }
  }
}

int StartAndServe(const ClusterConfig& c, const ClusterPlan& plan, double grace, double timeout) {
  RestartRules rules;
  rules.policy = c.restart.policy;
  rules.max_consecutive = c.restart.max_consecutive;
  SupervisorOptions options;
  options.grace = absl::Seconds(grace);
  options.ready_timeout = absl::Seconds(timeout);
  options.interrupted = [] { return g_signal != 0; };
  Supervisor sup(options);
  std::unique_ptr<TcpFront> front;
  if (plan.front_backends.empty()) {
    Say(absl::StrCat("starting router on ", RouterScheme(c), "://", ConnectHost(c.host), ":",
                     c.router.http_port, " (grpc ", c.router.grpc_port, ") ..."));
  } else {
    // Bound before the routers start, so a taken port fails at once.
    TcpFrontOptions fo;
    fo.host = c.host;
    fo.port = c.router.http_port;
    fo.backends = plan.front_backends;
    front = std::make_unique<TcpFront>(fo);
    if (auto st = front->Start(); !st.ok()) return Fail("up", std::string(st.message()), 1);
    Say(absl::StrCat("starting ", plan.router.size(), " routers (",
                     absl::StrJoin(plan.front_backends, ", "), ") behind ", RouterScheme(c), "://",
                     ConnectHost(c.host), ":", c.router.http_port, " ..."));
  }
  if (auto st = sup.Start(plan.router); !st.ok()) return Fail("up", std::string(st.message()), 1);
  if (!plan.kvstores.empty()) {
    Say(absl::StrCat("starting ", plan.kvstores.size(), " KV store daemons (",
                     absl::StrJoin(Names(plan.kvstores), ", "), ") ..."));
    if (auto st = sup.Start(plan.kvstores); !st.ok()) {
      sup.Stop();
      return Fail("up", std::string(st.message()), 1);
    }
  }
  Say(absl::StrCat("starting ", plan.workers.size(), " workers (",
                   absl::StrJoin(Names(plan.workers), ", "), ") ..."));
  if (auto st = sup.Start(plan.workers); !st.ok()) {
    sup.Stop();
    return Fail("up", std::string(st.message()), 1);
  }
  Say(absl::StrCat("waiting for ", sup.running(), " processes to be ready ..."));
  if (auto st = sup.WaitReady(); !st.ok()) {
    if (st.code() == absl::StatusCode::kCancelled) return Shutdown(sup);
    sup.Stop();
    return Fail("up", std::string(st.message()), 1);
  }
  // Each process's HTTP address (health, readiness, /metrics), e.g. for Prometheus targets.
  for (const auto* group : {&plan.router, &plan.kvstores, &plan.workers}) {
    for (const ProcessSpec& p : *group) {
      std::string base = p.ready_url;
      if (absl::EndsWith(base, "/ready")) base.resize(base.size() - 6);
      Say(absl::StrCat("  ", p.name, ": ", base, "/metrics"));
    }
  }
  Say(absl::StrCat("strata is serving at ", plan.url));
  if (Serve(sup, rules, plan.router.size()) != 0) return 1;
  const int rc = Shutdown(sup);
  if (front) front->Stop();
  return rc;
}

}  // namespace

int RunUp(const Args& args) {
  UpFlags f;
  ArgParser p("strata up [--config FILE] [--model M] [--prefill N] [--decode N] [--mixed N] "
              "[--gpus IDS] [--port P] [--host H]",
              "Run a whole strata cluster on this machine: a router and prefill/decode/mixed\n"
              "workers as separate processes, until Ctrl-C (see docs/configuration.md).");
  AddFlags(p, f);
  if (auto st = p.Parse(args); !st.ok()) return Fail("up", std::string(st.message()), 2);
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  auto config = BuildConfig(f);
  if (!config.ok()) return Fail("up", std::string(config.status().message()), 2);
  ClusterConfig& c = *config;
  // Resolve (and maybe write) the models once here, so the children don't race on the cache.
  for (ClusterConfig::ModelPool& m : c.models) {
    auto dir = ResolveModelPath(m.model);
    if (!dir.ok()) return Fail("up", std::string(dir.status().message()), 1);
    m.model = *dir;
  }
  auto model_dir = c.models.empty() ? ResolveModelPath(c.model)
                                    : absl::StatusOr<std::string>(c.models.front().model);
  if (!model_dir.ok()) return Fail("up", std::string(model_dir.status().message()), 1);
  auto ports = ResolvePorts(c);
  if (!ports.ok()) return Fail("up", std::string(ports.status().message()), 1);
  if (c.log_dir.empty()) c.log_dir = DefaultLogDir();
  std::error_code ec;
  std::filesystem::create_directories(c.log_dir, ec);
  if (ec) return Fail("up", absl::StrCat("cannot create log dir ", c.log_dir, ": ", ec.message()), 1);
  std::error_code exe_ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", exe_ec).string();
  if (exe_ec) return Fail("up", "cannot find this executable: " + exe_ec.message(), 1);
  if (auto st = InstallSignalHandlers(); !st.ok()) return Fail("up", std::string(st.message()), 1);
  if (c.kv_hash_key_file.empty()) {
    auto key_file = WriteRandomKeyFile(c.log_dir + "/kv_hash.key");
    if (!key_file.ok()) return Fail("up", std::string(key_file.message()), 1);
    c.kv_hash_key_file = c.log_dir + "/kv_hash.key";
  }
  if (auto st = PrepareClusterTls(c); !st.ok()) return Fail("up", std::string(st.message()), 1);
  if (auto st = PrepareRouterHttpTls(c); !st.ok()) {
    return Fail("up", std::string(st.message()), 1);
  }
  if (c.models.empty()) {
    Say(absl::StrCat("model: ", *model_dir));
  } else {
    for (const ClusterConfig::ModelPool& m : c.models) {
      Say(absl::StrCat("model ", m.name, ": ", m.model));
    }
  }
  if (c.tls.mode != "off") Say(absl::StrCat("cluster gRPC: mTLS, CA ", c.tls.ca));
  if (c.router.http_tls.mode == "auto") {
    Say(absl::StrCat("OpenAI API: HTTPS, clients trust the CA ", c.router.http_tls.ca));
  } else if (c.router.http_tls.mode == "files") {
    Say(absl::StrCat("OpenAI API: HTTPS, certificate ", c.router.http_tls.cert));
  }
  Say(absl::StrCat("logs: ", c.log_dir));
  auto plan = PlanCluster(c, exe, *model_dir, c.log_dir, ports->workers, ports->routers);
  if (!plan.ok()) return Fail("up", std::string(plan.status().message()), 2);
  SayPlacement(c);
  return StartAndServe(c, *plan, f.grace_seconds, f.ready_timeout_seconds);
}

}  // namespace strata::cli
