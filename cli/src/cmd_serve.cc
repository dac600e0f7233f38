// `strata router` and `strata worker`: the long-running roles of a cluster. Each runs until
// SIGINT or SIGTERM, then drains (stops taking requests, lets running ones finish) and exits 0.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "args.h"
#include "commands.h"
#include "strata/common/memory_limit.h"
#include "strata/common/status_macros.h"
#include "strata/engine/presets.h"
#include "strata/proto/registry_client.h"
#include "strata/router/router.h"
#include "strata/worker/worker.h"
#include "tenant_flags.h"
#include "tls_flags.h"

namespace strata::cli {
namespace {

// Blocks SIGINT/SIGTERM in every thread (call before any thread starts) and waits for one.
void BlockStopSignals(sigset_t* set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, set, nullptr);
}

int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

bool ParseRole(const std::string& s, v1::Role* role) {
  if (s == "prefill") *role = v1::ROLE_PREFILL;
  else if (s == "decode") *role = v1::ROLE_DECODE;
  else if (s == "mixed") *role = v1::ROLE_MIXED;
  else return false;
  return true;
}

// The OpenAI API flags the router and a mixed worker share: how unrecognized request fields
// are handled, the shape of GET /get_load and the tool-call format of chat output
// (openai/frontend.h).
struct ApiCompatFlags {
  std::string unknown_params = "warn";
  std::string get_load_format = "sglang";
  std::string tool_call_parser = "auto";
  long long max_memory_mb = -1;  // MiB; 0: no limit; -1: from the cgroup

  void Add(ArgParser& p) {
    p.AddInt64("--max-memory-mb", &max_memory_mb,
               "resident memory (MiB) above which new completion requests get 503 with "
               "Retry-After while accepted ones run on; 0: no limit; -1: the cgroup's "
               "memory.max less a tenth (at least 64 MiB), none without a cgroup limit");
    p.AddString("--unknown-params", &unknown_params,
                "request fields the OpenAI API does not know: reject (400, as OpenAI), warn "
                "(served without them, counted, each name logged once) or ignore (served, "
                "counted)");
    p.AddString("--get-load-format", &get_load_format,
                "GET /get_load body for a peer router in front: sglang (per-rank array) or "
                "vllm-router ({\"load\": N})");
    p.AddString("--tool-call-parser", &tool_call_parser,
                "how chat output is searched for tool calls when a request sends tools: auto "
                "(from the chat template), llama3_json, hermes, mistral or none (requests using "
                "tools get 400)");
  }

  absl::Status Apply(openai::UnknownParams* unknown,
                     openai::FrontendOptions::LoadFormat* load_format,
                     openai::ToolCallParser* tool_parser) const {
    if (auto s = openai::ParseUnknownParams(unknown_params, unknown); !s.ok()) return s;
    if (auto s = openai::ParseToolCallParser(tool_call_parser, tool_parser); !s.ok()) return s;
    return openai::ParseLoadFormat(get_load_format, load_format);
  }

  // --max-memory-mb in bytes (0: none), said on stderr when it is on and `serves_api`.
  absl::StatusOr<int64_t> MemoryLimitBytes(bool serves_api) const {
    const std::optional<int64_t> cgroup =
        max_memory_mb == -1 ? ThisCgroupMemoryMax() : std::nullopt;
    auto bytes = ResolveMemoryLimit(max_memory_mb, cgroup);
    if (bytes.ok() && *bytes > 0 && serves_api) {
      std::fprintf(stderr, "new requests are refused above %lld MiB resident%s\n",
                   static_cast<long long>(*bytes >> 20),
                   max_memory_mb == -1 ? " (the cgroup's memory.max less headroom)" : "");
    }
    return bytes;
  }
};

// Test-only fault injection from STRATA_TEST_ENGINE_STALL="TOKEN:AFTER:SECONDS": the engine
// sleeps SECONDS inside the step in which a request whose prompt holds token id TOKEN reaches
// AFTER generated tokens (EngineLoop::StallForTesting). Unset or empty: off.
absl::Status ParseStallForTesting(const char* env, EngineLoop::StallForTesting* out) {
  if (env == nullptr || *env == '\0') return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(env, ':');
  int token = -1, after = 0;
  double seconds = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &token) ||
      !absl::SimpleAtoi(parts[1], &after) || !absl::SimpleAtod(parts[2], &seconds) || token < 0 ||
      after < 1 || !(seconds > 0 && seconds <= 3600)) {
    return absl::InvalidArgumentError(
        "STRATA_TEST_ENGINE_STALL (test fault injection) must be TOKEN:AFTER:SECONDS with "
        "TOKEN >= 0, AFTER >= 1 and 0 < SECONDS <= 3600");
  }
  out->marker_token = token;
  out->after_tokens = after;
  out->sleep = absl::Seconds(seconds);
  return absl::OkStatus();
}

// Splits "NAME=VALUE"; InvalidArgument naming `flag` when either side is empty.
absl::StatusOr<std::pair<std::string, std::string>> SplitNamed(const std::string& flag,
                                                               const std::string& entry) {
  const size_t eq = entry.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " expects NAME=VALUE, got '", entry, "'"));
  }
  return std::make_pair(entry.substr(0, eq), entry.substr(eq + 1));
}

// --serve-model NAME=MODEL (resolved like --model) and --model-profile NAME=PATH into the
// router's options; a profile must name a served model.
absl::Status ApplyModelFlags(const std::vector<std::string>& serve_models,
                             const std::vector<std::string>& model_profiles,
                             router::RouterOptions* o) {
  for (const std::string& entry : serve_models) {
    STRATA_ASSIGN_OR_RETURN(auto named, SplitNamed("--serve-model", entry));
    STRATA_ASSIGN_OR_RETURN(std::string dir, ResolveModelPath(named.second));
    o->more_models.push_back({named.first, dir, ""});
  }
  for (const std::string& entry : model_profiles) {
    STRATA_ASSIGN_OR_RETURN(auto named, SplitNamed("--model-profile", entry));
    if (named.first == o->model_name) {
      o->model_profile_path = named.second;
      continue;
    }
    auto it = std::find_if(o->more_models.begin(), o->more_models.end(),
                           [&](const router::RouterModel& m) { return m.name == named.first; });
    if (it == o->more_models.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model-profile names model '", named.first, "', which this router does not serve"));
    }
    it->profile_path = named.second;
  }
  return absl::OkStatus();
}

}  // namespace

int RunRouter(const Args& args) {
  router::RouterOptions o;
  std::string model = "preset:tiny-llama";
  double drain_s = 10, worker_grace_s = 5, stream_idle_s = 60, resume_settle_s = 2.5;
  ArgParser p("strata router [flags]",
              "The cluster's front door: OpenAI API over HTTP, worker registry over gRPC.");
  p.AddString("--host", &o.host, "address to listen on");
  p.AddInt("--http-port", &o.http_port, "OpenAI API / metrics port (0: any free port)");
  p.AddInt("--grpc-port", &o.grpc_port, "worker registry port (0: any free port)");
  p.AddString("--model", &model, "model directory or preset:NAME (tokenizer and chat template)");
  p.AddString("--served-model-name", &o.model_name, "model name clients send (default: dir name)");
  std::vector<std::string> serve_models, model_profiles;
  p.AddRepeated("--serve-model", &serve_models,
                "NAME=MODEL (repeatable): another model behind this router, MODEL a directory or "
                "preset:NAME; each worker then serves the model it registers with");
  p.AddRepeated("--model-profile", &model_profiles,
                "NAME=PATH (repeatable), goodput: the profiles of model NAME's workers (default: "
                "--profile's)");
  long long max_model_len = 0;
  p.AddInt64("--max-model-len", &max_model_len,
             "context window the API enforces (0: the model's); set it to the workers' value");
  p.AddString("--record-trace", &o.record_trace,
              "append every request to this strata-format trace (for strata replay)");
  p.AddBool("--record-prompts", &o.record_prompts,
            "with --record-trace: also record prompt text (off: lengths and block hashes only)");
  p.AddString("--policy", &o.placement.policy,
              "routing policy: kv-aware, least-loaded, round-robin, kv-cost, goodput");
  p.AddString("--profile", &o.placement.profile_path,
              "goodput: latency profile JSON, or a directory of them matched to each worker's model "
              "and device (default: the shipped deploy/profiles/)");
  p.AddRepeated("--slo-class", &o.placement.slo_class_specs,
                "NAME=ttft:S,tpot:S (repeatable); requests choose one with X-SLO-Class");
  p.AddDouble("--overlap-weight", &o.placement.overlap_weight,
              "kv-cost: weight of blocks to prefill against active blocks");
  p.AddInt("--min-remote-prefill-tokens", &o.placement.min_remote_prefill_tokens,
           "kv-aware: prefill remotely only when this many prompt tokens are uncached");
  p.AddInt("--max-inflight-per-worker", &o.placement.max_inflight_per_worker,
           "outstanding requests per worker before answering 429");
  p.AddInt("--admission-queue", &o.admission.capacity,
           "goodput: requests that may wait, least slack first, for a placement meeting their "
           "SLO (0: 429 at once)");
  p.AddRepeated("--api-key", &o.api_keys, "accepted API key (repeatable; none: no auth)");
  ApiCompatFlags compat;
  compat.Add(p);
  TenantFlags tenant;
  AddTenantFlags(p, &tenant);
  proto::TlsFiles tls;
  AddTlsFlags(p, &tls);
  AddHttpTlsFlags(p, &o.http_tls);
  p.AddDouble("--slo-ttft", &o.slo_ttft_s, "time-to-first-token objective, seconds");
  p.AddDouble("--slo-tpot", &o.slo_tpot_s, "time-per-output-token objective, seconds");
  p.AddDouble("--drain-seconds", &drain_s, "on SIGTERM, how long running streams may finish");
  p.AddDouble("--worker-grace", &worker_grace_s,
              "within this many seconds of the start, or of its worker's failure, a request that "
              "finds no decode worker waits for one to register instead of getting 503 (0: none)");
  p.AddDouble("--worker-stream-idle-timeout-s", &stream_idle_s,
              "a worker stream on which nothing arrives for this many seconds is cancelled, the "
              "worker dropped and the request moved to another worker (0: no limit)");
  p.AddDouble("--resume-settle-s", &resume_settle_s,
              "requests with an Idempotency-Key that arrive within this many seconds of the "
              "start look for their held generation on the workers only then, once the workers "
              "have registered again (more than the workers' heartbeat interval)");
  if (auto s = p.Parse(args); !s.ok()) return Fail("router", std::string(s.message()), 2);
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  if (!(worker_grace_s >= 0) || !std::isfinite(worker_grace_s)) {
    return Fail("router", "--worker-grace must be a number of seconds >= 0", 2);
  }
  if (auto s = compat.Apply(&o.unknown_params, &o.get_load_format, &o.tool_call_parser); !s.ok()) {
    return Fail("router", absl::StrCat("--", s.message()), 2);
  }
  if (auto bytes = compat.MemoryLimitBytes(/*serves_api=*/true); bytes.ok()) {
    o.max_memory_bytes = *bytes;
  } else {
    return Fail("router", std::string(bytes.status().message()), 2);
  }
  o.worker_grace = absl::Seconds(worker_grace_s);
  if (!(stream_idle_s >= 0) || !std::isfinite(stream_idle_s)) {
    return Fail("router", "--worker-stream-idle-timeout-s must be a number of seconds >= 0", 2);
  }
  o.worker_stream_idle_timeout = absl::Seconds(stream_idle_s);
  if (!(resume_settle_s >= 0) || !std::isfinite(resume_settle_s) || resume_settle_s > 600) {
    return Fail("router", "--resume-settle-s must be a number of seconds in [0, 600]", 2);
  }
  o.resume_settle = absl::Seconds(resume_settle_s);
  auto tenant_settings = ResolveTenantFlags(tenant, o.api_keys.size());
  if (!tenant_settings.ok()) {
    return Fail("router", std::string(tenant_settings.status().message()), 2);
  }
  o.kv_hash_key = tenant_settings->kv_hash_key;
  o.api_key_cache_salts = tenant_settings->api_key_cache_salts;
  o.hide_cached_tokens = tenant_settings->hide_cached_tokens;
  o.rate_limit = tenant_settings->rate_limit;
  o.api_key_rate_limits = tenant_settings->api_key_rate_limits;
  if (auto st = ApplyTlsFlags(tls); !st.ok()) return Fail("router", std::string(st.message()), 2);
  if (auto st = CheckHttpTlsFlags(o.http_tls); !st.ok()) {
    return Fail("router", std::string(st.message()), 2);
  }
  auto dir = ResolveModelPath(model);
  if (!dir.ok()) return Fail("router", std::string(dir.status().message()), 1);
  o.model_dir = *dir;
  o.max_model_len = max_model_len;
  if (o.model_name.empty()) o.model_name = ServedModelName(model);
  if (auto st = ApplyModelFlags(serve_models, model_profiles, &o); !st.ok()) {
    return Fail("router", std::string(st.message()), 2);
  }
  sigset_t set;
  BlockStopSignals(&set);
  auto r = router::Router::Create(o);
  if (!r.ok()) return Fail("router", std::string(r.status().message()), 1);
  if (auto s = (*r)->Start(); !s.ok()) return Fail("router", std::string(s.message()), 1);
  std::printf("router: serving the OpenAI API at %s://%s:%d/v1, registry at %s:%d\n",
              o.http_tls.enabled() ? "https" : "http", o.host.c_str(), (*r)->http_port(),
              o.host.c_str(), (*r)->grpc_port());
  std::fflush(stdout);
  const int sig = WaitForStopSignal(set);
  std::printf("router: %s, draining\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  (*r)->Shutdown(absl::Seconds(drain_s));
  std::printf("router: stopped\n");
  return 0;
}

int RunWorker(const Args& args) {
  worker::WorkerOptions o;
  std::string model = "preset:tiny-llama", role = "mixed";
  int num_kv_blocks = 0, kv_cache_mb = 256, max_model_len = 0;
  double drain_s = 10;
  ArgParser p("strata worker --role prefill|decode|mixed [flags]",
              "A worker: prefill, decode, or both (mixed, which also serves the OpenAI API).");
  p.AddString("--role", &role, "prefill, decode or mixed");
  p.AddString("--id", &o.id, "unique worker name in the cluster");
  p.AddString("--host", &o.host, "address to listen on");
  p.AddInt("--http-port", &o.http_port, "health/metrics (and API if mixed) port (0: any)");
  p.AddInt("--grpc-port", &o.grpc_port, "Worker service port (0: any)");
  AddRouterFlags(p, &o.router_address, &o.router_service);
  p.AddString("--model", &model, "model directory or preset:NAME");
  p.AddString("--served-model-name", &o.model_name, "model name clients send (mixed)");
  p.AddString("--plugin", &o.engine.plugin, "engine plugin name or path");
  p.AddString("--plugin-config", &o.engine.runner.backend_config,
              "JSON object for the plugin's create(), e.g. '{\"threads\": 1}' (CPU)");
  p.AddInt("--block-size", &o.engine.runner.block_size, "tokens per KV block");
  p.AddInt("--num-kv-blocks", &num_kv_blocks, "KV blocks (0: from --kv-cache-mb)");
  p.AddInt("--kv-cache-mb", &kv_cache_mb, "KV cache size when --num-kv-blocks is 0");
  double gpu_memory_share = 0;
  p.AddDouble("--gpu-memory-share", &gpu_memory_share,
              "this worker's part of its device's total memory, in (0, 1]: weights, a reserve "
              "for activations, and a KV pool of the rest; instead of --kv-cache-mb (0: off)");
  p.AddInt("--max-num-seqs", &o.engine.scheduler.max_num_seqs, "running batch limit");
  p.AddInt("--max-num-batched-tokens", &o.engine.scheduler.max_num_batched_tokens,
           "token budget of one engine step");
  p.AddInt("--max-model-len", &max_model_len, "context limit (0: the model's)");
  bool host_sampling = false, no_graphs = false;
  p.AddBool("--host-sampling", &host_sampling,
            "sample on the host even when the plugin can sample on the device");
  p.AddBool("--no-graphs", &no_graphs,
            "run decode steps op by op even when the plugin can replay them as graphs");
  p.AddRepeated("--api-key", &o.api_keys, "accepted API key for the mixed role's API");
  ApiCompatFlags compat;
  compat.Add(p);
  TenantFlags tenant;
  AddTenantFlags(p, &tenant);
  proto::TlsFiles tls;
  AddTlsFlags(p, &tls);
  AddHttpTlsFlags(p, &o.http_tls);
  p.AddDouble("--drain-seconds", &drain_s, "on SIGTERM, how long running requests may finish");
  long long kv_host_mb = 0, kv_disk_mb = 0, kv_staging_mb = 64;
  bool no_demote_remote = false;
  worker::KvTierOptions& t = o.kv_tiers;
  p.AddInt("--max-waiting-requests", &o.max_waiting_requests,
           "mixed role: requests waiting in the engine beyond which new ones get 429 (0: none)");
  double stall_timeout_s = 30;
  p.AddDouble("--engine-stall-timeout-s", &stall_timeout_s,
              "seconds the engine may have work without completing a step before the worker "
              "reports itself stalled: /health 503, `stalled` to the router (0: never)");
  double detached_grace_s = 30;
  p.AddDouble("--detached-request-grace-s", &detached_grace_s,
              "seconds a request whose client sent an Idempotency-Key keeps running (and its "
              "output is kept) after its router's stream breaks or ends, for a retry through "
              "another router to attach to (0: off, such requests are cancelled)");
  std::string kv_device_path = "auto";
  p.AddString("--kv-device-path", &kv_device_path,
              "device KV handoffs: auto (ipc on this host, else staged) or staged (always "
              "through pinned host memory and UCX)");
  p.AddInt64("--kv-host-mb", &kv_host_mb, "G2 pinned host KV tier size (0: no lower tiers)");
  p.AddString("--kv-host-policy", &t.host_policy, "G2 eviction: lru, s3-fifo, arc, w-tinylfu, prefix-tinylfu, ghost-lru, ...");
  p.AddString("--kv-offload", &t.offload, "G1 -> G2: write-back (on eviction) or write-through");
  p.AddInt64("--kv-staging-mb", &kv_staging_mb,
             "host staging ring for G1 <-> G2 block copies (page-locked when the plugin can)");
  p.AddString("--kv-disk-path", &t.disk_path, "G3 directory: slot file + RocksDB index (empty: no disk tier)");
  p.AddInt64("--kv-disk-mb", &kv_disk_mb, "G3 size bound");
  p.AddString("--kv-disk-policy", &t.disk_policy, "G3 eviction (G2's names)");
  p.AddInt("--kv-disk-admit-uses", &t.disk_admit_uses,
           "G2 -> G3 only for blocks used at least this many times");
  p.AddRepeated("--kv-remote", &t.remote, "G4 `strata kvstore` daemon host:port (repeatable)");
  p.AddBool("--kv-remote-from-router", &t.remote_from_router,
            "G4 on the `strata kvstore` daemons registered with the router (followed as they "
            "come and go) instead of a --kv-remote list");
  p.AddBool("--kv-no-demote-remote", &no_demote_remote,
            "do not write blocks evicted from G2/G3 to the remote tier (read it only)");
  if (auto s = p.Parse(args); !s.ok()) return Fail("worker", std::string(s.message()), 2);
  t.host_bytes = kv_host_mb << 20;
  t.disk_bytes = kv_disk_mb << 20;
  t.demote_to_remote = !no_demote_remote;
  if (kv_host_mb < 0 || kv_disk_mb < 0 || kv_staging_mb < 0 || t.disk_admit_uses < 1) {
    return Fail("worker",
                "--kv-host-mb, --kv-disk-mb and --kv-staging-mb must be >= 0, "
                "--kv-disk-admit-uses >= 1",
                2);
  }
  if (t.host_bytes == 0 && (t.disk_bytes > 0 || !t.remote.empty() || t.remote_from_router)) {
    return Fail("worker",
                "--kv-disk-mb, --kv-remote and --kv-remote-from-router need --kv-host-mb > 0", 2);
  }
  if (t.remote_from_router && !t.remote.empty()) {
    return Fail("worker", "--kv-remote-from-router and --kv-remote exclude each other", 2);
  }
  if (t.disk_bytes > 0 && t.disk_path.empty()) {
    return Fail("worker", "--kv-disk-mb needs --kv-disk-path", 2);
  }
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  if (!ParseRole(role, &o.role)) {
    return Fail("worker", "--role must be prefill, decode or mixed, not '" + role + "'", 2);
  }
  if (auto s = compat.Apply(&o.unknown_params, &o.get_load_format, &o.tool_call_parser); !s.ok()) {
    return Fail("worker", absl::StrCat("--", s.message()), 2);
  }
  // Only the mixed role serves the API whose requests are shed.
  if (auto bytes = compat.MemoryLimitBytes(o.role == v1::ROLE_MIXED); bytes.ok()) {
    o.max_memory_bytes = *bytes;
  } else {
    return Fail("worker", std::string(bytes.status().message()), 2);
  }
  if (o.max_waiting_requests < 0) {
    return Fail("worker", "--max-waiting-requests must be >= 0", 2);
  }
  if (!(stall_timeout_s >= 0) || !std::isfinite(stall_timeout_s)) {
    return Fail("worker", "--engine-stall-timeout-s must be a number of seconds >= 0", 2);
  }
  o.engine_stall_timeout = absl::Seconds(stall_timeout_s);
  if (!(detached_grace_s >= 0) || !std::isfinite(detached_grace_s) || detached_grace_s > 3600) {
    return Fail("worker", "--detached-request-grace-s must be a number of seconds in [0, 3600]",
                2);
  }
  o.detached_request_grace = absl::Seconds(detached_grace_s);
  if (auto s = ParseStallForTesting(std::getenv("STRATA_TEST_ENGINE_STALL"),
                                    &o.engine_stall_for_testing);
      !s.ok()) {
    return Fail("worker", std::string(s.message()), 2);
  }
  if (kv_device_path != "auto" && kv_device_path != "staged") {
    return Fail("worker", "--kv-device-path must be auto or staged, not '" + kv_device_path + "'",
                2);
  }
  o.kv_device_staged = kv_device_path == "staged";
  auto tenant_settings = ResolveTenantFlags(tenant, o.api_keys.size());
  if (!tenant_settings.ok()) {
    return Fail("worker", std::string(tenant_settings.status().message()), 2);
  }
  o.engine.kv_hash_key = tenant_settings->kv_hash_key;
  o.api_key_cache_salts = tenant_settings->api_key_cache_salts;
  o.hide_cached_tokens = tenant_settings->hide_cached_tokens;
  o.rate_limit = tenant_settings->rate_limit;
  o.api_key_rate_limits = tenant_settings->api_key_rate_limits;
  if (!(gpu_memory_share >= 0 && gpu_memory_share <= 1)) {
    return Fail("worker",
                absl::StrCat("--gpu-memory-share must be in (0, 1] (0: off), got ",
                             gpu_memory_share),
                2);
  }
  const bool kv_cache_mb_given = p.given("--kv-cache-mb") && kv_cache_mb != 0;
  if (gpu_memory_share > 0 && (kv_cache_mb_given || num_kv_blocks > 0)) {
    return Fail("worker",
                "--gpu-memory-share excludes --kv-cache-mb and --num-kv-blocks other than 0 (each "
                "sizes the KV pool)",
                2);
  }
  auto routers = proto::RouterTargets::Parse(o.router_address, o.router_service);
  if (!routers.ok()) return Fail("worker", std::string(routers.status().message()), 2);
  if (o.role != v1::ROLE_MIXED && routers->empty()) {
    return Fail("worker", "a " + role + " worker needs --router or --router-service", 2);
  }
  if (t.remote_from_router && routers->empty()) {
    return Fail("worker", "--kv-remote-from-router needs --router or --router-service", 2);
  }
  if (auto st = ApplyTlsFlags(tls); !st.ok()) return Fail("worker", std::string(st.message()), 2);
  if (auto st = CheckHttpTlsFlags(o.http_tls); !st.ok()) {
    return Fail("worker", std::string(st.message()), 2);
  }
  auto dir = ResolveModelPath(model);
  if (!dir.ok()) return Fail("worker", std::string(dir.status().message()), 1);
  o.model_dir = *dir;
  if (o.model_name.empty()) o.model_name = ServedModelName(model);
  o.engine.runner.num_kv_blocks = num_kv_blocks;
  o.engine.device_sampling = !host_sampling;
  o.engine.kv_staging_bytes = static_cast<size_t>(kv_staging_mb) << 20;
  o.engine.runner.graphs = !no_graphs;
  o.engine.runner.kv_cache_bytes = gpu_memory_share > 0 ? 0 : int64_t{kv_cache_mb} << 20;
  o.engine.runner.memory_share = gpu_memory_share;
  o.engine.max_model_len = max_model_len;
  sigset_t set;
  BlockStopSignals(&set);
  auto w = worker::Worker::Create(o);
  if (!w.ok()) return Fail("worker", std::string(w.status().message()), 1);
  if (auto s = (*w)->Start(); !s.ok()) return Fail("worker", std::string(s.message()), 1);
  std::printf("worker %s (%s): %s %s:%d, grpc %s:%d\n", o.id.c_str(), role.c_str(),
              o.http_tls.enabled() ? "https" : "http", o.host.c_str(), (*w)->http_port(),
              o.host.c_str(), (*w)->grpc_port());
  std::fflush(stdout);
  WaitForStopSignal(set);
  std::printf("worker %s: draining\n", o.id.c_str());
  std::fflush(stdout);
  (*w)->Shutdown(absl::Seconds(drain_s));
  std::printf("worker %s: stopped\n", o.id.c_str());
  return 0;
}

}  // namespace strata::cli
