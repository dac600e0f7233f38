#pragma once
// The cluster config of `strata up`: which model, how many prefill/decode/mixed workers, their
// engine settings, the router's ports, SLOs and API keys. Written in YAML (so JSON works too);
// every key is optional and defaults to the values below. See docs/configuration.md and
// docs/examples/cluster.yaml.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

struct ClusterConfig {
  std::string model = "preset:tiny-llama";  // checkpoint directory or preset:NAME
  std::string host = "127.0.0.1";           // every process binds here

  struct Router {
    int http_port = 8000;  // the OpenAI endpoint; 0 = pick a free port
    int grpc_port = 0;     // where workers register; 0 = pick a free port
    // Routers serving the one endpoint. Above 1, `strata up` runs them on ports of their own
    // behind a TCP front on http_port, router i's registry on grpc_port + i (or free ports when
    // grpc_port is 0), and every worker and kvstore daemon registers with each of them.
    int replicas = 1;
    // A worker stream silent this long is cancelled and its request moves to another worker
    // (the router's --worker-stream-idle-timeout-s); 0 = no limit.
    double worker_stream_idle_timeout_s = 60;
    // Requests outstanding on one worker before the router answers 429 (when every candidate
    // has this many): the router's --max-inflight-per-worker.
    int max_inflight_per_worker = 256;
    // A request with an Idempotency-Key arriving this soon after the router's start asks the
    // workers for its held generation only then (the router's --resume-settle-s).
    double resume_settle_s = 2.5;
    // HTTPS on the OpenAI endpoint (the router's --http-tls-cert/--http-tls-key/
    // --http-tls-client-ca). In YAML `http_tls: off`, `http_tls: auto` (`strata up` reuses the
    // certificate of `tls: auto`, or makes a throwaway CA and certificate in the log dir; clients
    // trust `ca`) or `http_tls: {cert: FILE, key: FILE, client_ca: FILE}` (client_ca optional:
    // clients must then present a certificate it signed).
    struct HttpTls {
      std::string mode = "off";  // off | auto | files
      std::string cert, key, client_ca;
      std::string ca;  // mode auto: the CA that signed `cert`, filled in by `strata up`
    } http_tls;
  } router;

  // A pool of workers of one role. Worker i runs on device gpus[i % gpus.size()] (the plugin's
  // "device" config key); empty = the plugin's default device. Its KV pool is sized by
  // engine.num_kv_blocks, else kv_cache_mb, else gpu_memory_share, else as PlaceWorkers() says.
  struct Pool {
    int count = 0;
    std::vector<int> gpus;
    double gpu_memory_share = 0;  // part of the device's total memory, in (0, 1]; 0 = automatic
    int64_t kv_cache_mb = 0;      // KV pool per worker in MiB; 0 = unset
  };
  Pool prefill{1};
  Pool decode{1};
  Pool mixed{0};  // workers that both prefill and decode

  // Several models behind the one router (`models:`, a list). Empty: the cluster serves `model`
  // with the pools above. Otherwise each entry is a model with workers of its own, and the
  // top-level model, prefill, decode and mixed keys must not be written: a request is placed
  // only on the workers of the model it names, each model with its own KV index and profiles.
  struct ModelPool {
    std::string name;   // the `model` clients send; required, unique
    std::string model = "preset:tiny-llama";  // checkpoint directory or preset:NAME
    std::string plugin;         // "" = engine.plugin
    std::string plugin_config;  // "" = engine.plugin_config
    std::string profile;        // goodput profiles of its workers; "" = the router's
    Pool prefill{0};
    Pool decode{1};
    Pool mixed{0};
  };
  std::vector<ModelPool> models;

  struct Engine {
    std::string plugin = "cpu";
    std::string plugin_config;         // JSON object for the plugin's create() (CPU: {"threads": N})
    int block_size = 16;               // tokens per KV block: a power of two in 1..256
    int num_kv_blocks = 0;             // 0 = the engine's default pool size
    int max_num_seqs = 64;
    int max_num_batched_tokens = 512;
    int64_t max_model_len = 0;         // 0 = the model's max_position_embeddings
    // How device KV pools move between prefill and decode workers: auto (mapped between
    // processes of one host, staged through pinned host memory otherwise) | staged (always).
    std::string kv_device_path = "auto";
    // A worker whose engine has work and completes no step for this long reports itself stalled
    // (the workers' --engine-stall-timeout-s); 0 = never.
    double stall_timeout_s = 30;
    // How long a request with an Idempotency-Key keeps running after its router's stream broke,
    // for a retry through another router to attach to (the workers'
    // --detached-request-grace-s); 0 = off.
    double detached_request_grace_s = 30;
  } engine;

  struct Slo {
    double ttft_s = 2.0;  // time to first token
    double tpot_s = 0.2;  // time per output token
  } slo;

  // Lower KV tiers below each worker's engine pool (kvstore/, docs/kvstore.md). All off while
  // host_mb is 0 (G3 and G4 spill from G2, so they need it).
  struct KvTiers {
    int64_t host_mb = 0;                  // G2: pinned host memory per worker
    std::string host_policy = "lru";      // lru | s3-fifo | arc | ... (kvstore's registry)
    std::string offload = "write-back";   // G1 -> G2: write-back (on eviction) | write-through
    int64_t staging_mb = 64;              // engine's host staging ring for G1 <-> G2 copies
    std::string disk_path;                // G3: slot file + RocksDB index; worker uses <path>/<id>
    int64_t disk_mb = 0;                  // G3 bound per worker; 0 = no disk tier
    std::string disk_policy = "lru";
    int disk_admit_uses = 2;              // G2 -> G3 only for blocks used at least this often
    int kvstore_count = 0;                // G4: `strata kvstore` daemons started with the cluster
    int64_t kvstore_mb = 256;             // capacity of each daemon
    std::string kvstore_policy = "lru";
  } kv_tiers;

  // What `strata up` does when a process (worker, kvstore daemon, router) ends while the
  // cluster serves; a router left stopped stops the cluster.
  struct Restart {
    std::string policy = "on-failure";  // on-failure (a signal or non-zero exit) | always | never
    int max_consecutive = 5;            // restarts in a row (runs < 60 s) before giving up
  } restart;

  std::string log_dir;                // "" = DefaultLogDir()
  std::vector<std::string> api_keys;  // empty = no authentication
  // The OpenAI API of the router and the mixed workers (their --unknown-params and
  // --get-load-format): request fields it does not know (reject | warn | ignore) and the body
  // of GET /get_load for a peer router in front of the workers (sglang | vllm-router).
  std::string unknown_params = "warn";
  std::string get_load_format = "sglang";
  // Their --tool-call-parser: auto | none | llama3_json | hermes | mistral.
  std::string tool_call_parser = "auto";
  // Default cache salt of each API key's requests, parallel to api_keys ("" = none); from
  // entries of the form {key: K, cache_salt: S}.
  std::vector<std::string> api_key_cache_salts;
  bool hide_cached_tokens = false;  // usage reports 0 cached tokens to clients
  // The router's and each mixed worker's --max-memory-mb: resident MiB above which new API
  // requests get 503 (0 = no limit, -1 = the cgroup's memory.max less headroom).
  int64_t max_memory_mb = -1;
  // Requests and tokens per minute ("rpm:N,tpm:M", rate_limit.h) of each API key (of all
  // requests together without keys), enforced by each router and mixed worker on its own; ""
  // = none. A key's own limit comes from its entry {key: K, rate_limit: "..."} (parallel to
  // api_keys; "" = the default).
  std::string rate_limit;
  std::vector<std::string> api_key_rate_limits;
  // The cluster's secret block hash key, given to the router and every worker; "" = `strata up`
  // writes a random one into the log dir for each run.
  std::string kv_hash_key_file;
  std::string policy = "kv-aware";

  // Mutual TLS on the cluster's gRPC (router registry, workers, kvstore daemons), given to every
  // process as --tls-ca/--tls-cert/--tls-key. In YAML `tls: off` (plaintext), `tls: auto`
  // (`strata up` makes a throwaway CA and one certificate for every process in the log dir) or
  // `tls: {ca: FILE, cert: FILE, key: FILE}` (given PEM files, shared by every process).
  struct Tls {
    std::string mode = "off";  // off | auto | files
    std::string ca, cert, key;  // mode files: the paths; mode auto: filled in by `strata up`
  } tls;
};

// The config of each served model, in order: `config` itself when it has no `models` list,
// else one per entry, with the entry's model, pools and engine plugin in the top-level keys and
// `models` empty (what PlaceWorkers and the worker flags read).
std::vector<ClusterConfig> ModelPoolConfigs(const ClusterConfig& config);

// How a `models` entry's name starts its workers' ids and log files: the name with every
// character outside [A-Za-z0-9._-] replaced by '-' (a served name may hold '/', e.g.
// "meta-llama/Llama-3.1-8B").
std::string ModelProcessPrefix(const std::string& name);

// Parses YAML/JSON text. Errors are InvalidArgument, one line, naming the source, line and key:
//   "cluster.yaml:7: engine.block_size: must be a power of two in 1..256, got 48".
// Unknown keys, duplicate keys, wrong types and out-of-range values are all errors.
absl::StatusOr<ClusterConfig> ParseClusterConfig(const std::string& text,
                                                 const std::string& source = "config");

// Reads and parses a file; a missing file is NotFound naming the path.
absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path);

// The range checks ParseClusterConfig applies, for a config changed after parsing (command-line
// overrides). InvalidArgument naming the key.
absl::Status ValidateClusterConfig(const ClusterConfig& config);

// One worker of the cluster, where it runs and how its KV pool is sized.
struct WorkerPlacement {
  std::string role;           // prefill | decode | mixed
  int index = 0;              // within its pool: the worker's id is <role>-<index>
  int gpu = -1;               // device id from the pool's gpus; -1 = the plugin's default
  std::string plugin_config;  // engine.plugin_config, with "device": gpu when gpu >= 0
  double memory_share = 0;    // worker flag --gpu-memory-share; 0 = not passed
  int64_t kv_cache_mb = 0;    // worker flag --kv-cache-mb; 0 = not passed
};

// The share of a device that workers with an automatic share split between them.
inline constexpr double kAutoGpuShare = 0.9;

// Every worker in the order prefill, decode, mixed. Each keeps its pool's kv_cache_mb or
// gpu_memory_share. Automatic shares apply when the plugin is not the CPU plugin (whose "device"
// is host memory) and engine.num_kv_blocks is 0: on each device (a worker without a GPU id counts
// as on device 0, the CUDA plugin's default), the k workers without an explicit share split
// what kAutoGpuShare leaves after the explicit shares there, each (0.9 - explicit) / k; those
// with kv_cache_mb count among the k but keep their size. The 10% left is for the device
// contexts of the processes. InvalidArgument ("key: reason") when explicit shares on one device
// add up past 1, or leave nothing for the automatic ones.
absl::StatusOr<std::vector<WorkerPlacement>> PlaceWorkers(const ClusterConfig& config);

// Whether `plugin` (engine.plugin: a name or a path) is the CPU reference plugin.
bool IsCpuPlugin(const std::string& plugin);

// A fresh per-run directory for process logs: $XDG_RUNTIME_DIR/strata/run-<time>-<pid> if
// XDG_RUNTIME_DIR is set, else /tmp/strata-<uid>/run-<time>-<pid>. Not created.
std::string DefaultLogDir();

}  // namespace strata
