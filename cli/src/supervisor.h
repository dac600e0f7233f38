#pragma once
// Process supervision for `strata up`: spawn a set of child processes with their output in log
// files, wait until each answers 200 on its ready URL, notice ones that die, and stop them in
// order (SIGTERM, a grace period, then SIGKILL). The processes are given as plain argv lists so
// tests can supervise small fake servers; PlanCluster() turns a ClusterConfig into the real ones.
//
// Threading: a Supervisor is used from one thread, the one that must outlive its children (their
// PR_SET_PDEATHSIG fires when the spawning thread exits). Not copyable.
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/common/cluster_config.h"

namespace strata::cli {

struct ProcessSpec {
  std::string name;               // "router", "decode-0": used in messages
  std::vector<std::string> argv;  // argv[0] is the executable's path
  std::string ready_url;          // "http[s]://HOST:PORT/PATH"; "" = ready once spawned
  std::string log_path;           // stdout and stderr, truncated at start
};

struct SupervisorOptions {
  absl::Duration poll_interval = absl::Milliseconds(100);
  absl::Duration ready_timeout = absl::Seconds(120);
  absl::Duration grace = absl::Seconds(10);  // SIGTERM to SIGKILL, per stop group
  int log_tail_lines = 15;
  // Polled while waiting for readiness; returning true aborts WaitReady with kCancelled.
  std::function<bool()> interrupted;
};

struct ExitInfo {
  std::string name;
  pid_t pid = 0;
  int wait_status = 0;  // as from waitpid
  bool killed = false;  // Stop() had to SIGKILL it
  std::string log_path;
  absl::Duration ran;            // from its (last) spawn to its reaping
  std::string Describe() const;  // "exited with status 3", "killed by signal 9"
};

// When a supervised process that ended is started again (`strata up`'s restart.* config).
struct RestartRules {
  std::string policy = "on-failure";  // on-failure (signal or non-zero exit) | always | never
  int max_consecutive = 5;            // restarts in a row before giving up
  absl::Duration first_delay = absl::Seconds(1);    // doubled per restart in a row ...
  absl::Duration max_delay = absl::Seconds(30);     // ... up to this
  absl::Duration stable_after = absl::Seconds(60);  // a run this long ends a row of restarts
};

// One process's restarts: a row of quick failures backs off exponentially and gives up after
// max_consecutive; a run of stable_after or longer starts a new row.
class RestartTracker {
 public:
  explicit RestartTracker(RestartRules rules = {}) : rules_(std::move(rules)) {}
  // After `exit`: the delay before starting the process again, or nullopt to leave it stopped
  // (*why_not says why).
  std::optional<absl::Duration> OnExit(const ExitInfo& exit, std::string* why_not);
  int in_a_row() const { return in_a_row_; }  // restarts decided in the current row

 private:
  RestartRules rules_;
  int in_a_row_ = 0;
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options = {});
  ~Supervisor();  // Stop()s whatever still runs
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Spawns `specs` in order as one stop group (Stop() ends groups in reverse order of Start()
  // calls). Each child: own process group (a terminal's Ctrl-C reaches only the supervisor),
  // stdin /dev/null, stdout+stderr to its log, SIGTERM when the supervisor dies, default signal
  // mask and dispositions. An unstartable child (bad path, unwritable log) is an error and the
  // rest of `specs` is not started.
  absl::Status Start(const std::vector<ProcessSpec>& specs);

  // Blocks until every process answers 200 on its ready URL. Errors: kFailedPrecondition if a
  // process exits first (naming it, its exit, and its log's last lines); kDeadlineExceeded
  // naming the ones not ready; kCancelled when options.interrupted() says so.
  absl::Status WaitReady();

  // Reaps processes that exited since the last call; never blocks.
  std::vector<ExitInfo> ReapExited();

  // Starts a reaped process again with the same spec, in the same stop group; its log is
  // appended to after a marker line. Not ready until PollReady() sees it answer.
  absl::Status Restart(const std::string& name);

  // One readiness check of each running process not yet ready (at most `timeout` each); returns
  // the names that answered 200 now.
  std::vector<std::string> PollReady(absl::Duration timeout = absl::Milliseconds(200));

  // Group by group in reverse start order: SIGTERM, wait up to the grace period for the group to
  // exit, SIGKILL (the process group of) each one left, reap. So workers drain before the router
  // goes, and Stop() takes at most (number of groups) x grace. Returns how each process still
  // running at the call ended.
  std::vector<ExitInfo> Stop();

  size_t running() const;
  pid_t pid(const std::string& name) const;  // 0 if unknown or reaped

 private:
  struct Child {
    ProcessSpec spec;
    pid_t pid = 0;
    int group = 0;
    bool running = false;
    bool ready = false;
    absl::Time started;
    int restarts = 0;
  };
  // One GET of the child's ready URL; sets child.ready. An error: the URL does not parse.
  absl::StatusOr<bool> CheckReady(Child& child, absl::Duration timeout);
  bool TryReap(Child& child, ExitInfo* info);
  absl::Status ExitedEarly(const ExitInfo& info) const;
  void TerminateGroup(int group, std::vector<ExitInfo>& out);

  SupervisorOptions options_;
  std::vector<Child> children_;
  int groups_ = 0;
};

// The status code of GET `path` on host:port (any status; the body is ignored), or kUnavailable
// if nothing answers within `timeout`. `tls`: over HTTPS, without checking the certificate (a
// probe of a child this supervisor started, like a Kubernetes HTTPS probe; the process must
// ignore SIGPIPE, as `strata up` does).
absl::StatusOr<int> HttpGetStatus(const std::string& host, int port, const std::string& path,
                                  absl::Duration timeout, bool tls = false);

// `n` distinct ports free on `host` a moment ago (each bound to port 0 and read back; all held
// until the last is picked, then closed).
absl::StatusOr<std::vector<int>> PickFreePorts(const std::string& host, int n);

// The last `lines` lines of a file ("" if unreadable).
std::string TailFile(const std::string& path, int lines);

// ---- the processes of `strata up` ----------------------------------------------------------

struct ClusterPlan {
  std::vector<ProcessSpec> router;   // started first, stopped last
  // With several routers: their HTTP host:ports, for the TCP front on router.http_port.
  std::vector<std::string> front_backends;
  std::vector<ProcessSpec> kvstores;  // remote KV store daemons (G4), started before workers
  std::vector<ProcessSpec> workers;  // prefill-0.., decode-0.., mixed-0..
  std::string url;                   // http[s]://HOST:PORT/v1
};

// `config` must have its router ports resolved (non-zero); with router.replicas above 1,
// `router_ports` holds each router's (http, grpc) pair (its HTTP port a private one: the front
// serves router.http_port). `worker_ports` holds an (http, grpc)
// pair per worker in the order prefill, decode, mixed (model by model with a `models` list),
// then one per kvstore daemon (kv_tiers.kvstore_count). `model_dir` is the resolved
// checkpoint; with a `models` list, each entry's `model` must be its resolved checkpoint
// already (and `model_dir` the first's), and worker ids are <name>-<role>-<i>. Each worker gets its
// PlaceWorkers() device (in --plugin-config) and KV pool size: engine.num_kv_blocks, else
// --kv-cache-mb, else --gpu-memory-share, else none (the worker's default). Errors: those of
// PlaceWorkers() for a config that did not pass ValidateClusterConfig().
absl::StatusOr<ClusterPlan> PlanCluster(const ClusterConfig& config, const std::string& exe,
                                        const std::string& model_dir, const std::string& log_dir,
                                        const std::vector<std::pair<int, int>>& worker_ports,
                                        const std::vector<std::pair<int, int>>& router_ports = {});

// The address to connect to for a bind address: wildcards (0.0.0.0, ::, "") mean 127.0.0.1.
std::string ConnectHost(const std::string& bind_host);

// "https" when the config's router.http_tls is on, else "http".
std::string RouterScheme(const ClusterConfig& config);

}  // namespace strata::cli
