#include "strata/common/cluster_config.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "strata/common/file_util.h"
#include "strata/common/rate_limit.h"
#include "yaml-cpp/yaml.h"

namespace strata {
namespace {

// One config key: its dotted path, how to read it from YAML (returns a type error or ""), and
// its range check (returns the reason or ""). The same table drives parsing and validation.
struct FieldSpec {
  std::string path;
  std::function<std::string(const YAML::Node&, ClusterConfig&)> parse;
  std::function<std::string(const ClusterConfig&)> check;
};

template <typename T>
using Ref = std::function<T&(ClusterConfig&)>;

template <typename T>
std::string Got(const T& v) {
  return absl::StrCat(", got ", v);
}

std::function<std::string(const ClusterConfig&)> NoCheck() {
  return [](const ClusterConfig&) { return std::string(); };
}

// Reads a scalar of type T; `what` names the expected type in the error.
template <typename T>
FieldSpec Scalar(std::string path, const char* what, Ref<T> ref,
                 std::function<std::string(const T&)> check) {
  FieldSpec f;
  f.path = std::move(path);
  f.parse = [ref, what](const YAML::Node& node, ClusterConfig& c) -> std::string {
    T value;
    if (!node.IsScalar() || !YAML::convert<T>::decode(node, value)) {
      return absl::StrCat("expected ", what);
    }
    ref(c) = value;
    return "";
  };
  f.check = [ref, check](const ClusterConfig& c) {
    return check ? check(ref(const_cast<ClusterConfig&>(c))) : std::string();
  };
  return f;
}

std::function<std::string(const int&)> IntRange(int lo, int hi) {
  return [lo, hi](const int& v) -> std::string {
    if (v >= lo && v <= hi) return "";
    return absl::StrCat("must be in ", lo, "..", hi, Got(v));
  };
}

std::string CheckPositiveSeconds(const double& v) {
  if (std::isfinite(v) && v > 0) return "";
  return absl::StrCat("must be a positive number of seconds", Got(v));
}

std::string CheckNonNegativeSeconds(const double& v) {
  if (std::isfinite(v) && v >= 0) return "";
  return absl::StrCat("must be a number of seconds >= 0", Got(v));
}

// Seconds in [0, max].
auto SecondsUpTo(double max) {
  return [max](const double& v) -> std::string {
    if (std::isfinite(v) && v >= 0 && v <= max) return "";
    return absl::StrCat("must be a number of seconds in [0, ", max, "]", Got(v));
  };
}

std::string CheckNonEmpty(const std::string& v) { return v.empty() ? "must not be empty" : ""; }

// Empty (the plugin's defaults) or a JSON object, as a plugin's create() expects.
std::string CheckJsonObject(const std::string& v) {
  if (v.empty()) return "";
  const nlohmann::json j = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? "" : "must be a JSON object, e.g. '{\"threads\": 1}'";
}

std::string CheckMegabytes(const int64_t& v) {
  if (v >= 0 && v <= (int64_t{1} << 30)) return "";
  return absl::StrCat("must be a size in MiB in 0..", int64_t{1} << 30, Got(v));
}

// max_memory_mb: MiB as CheckMegabytes, or -1 (from the cgroup's memory.max).
std::string CheckMemoryLimit(const int64_t& v) {
  if (v == -1) return "";
  const std::string megabytes = CheckMegabytes(v);
  return megabytes.empty() ? "" : absl::StrCat(megabytes, " (or -1: from the cgroup)");
}

// The eviction policies kvstore/ registers (kept in step with docs/kvstore.md).
std::string CheckPolicy(const std::string& v) {
  for (const char* known : {"lru", "s3-fifo", "arc", "w-tinylfu", "prefix-tinylfu",
                            "adaptive-tinylfu", "ghost-lru"}) {
    if (v == known) return "";
  }
  return absl::StrCat("must be lru, s3-fifo, arc, w-tinylfu, prefix-tinylfu, adaptive-tinylfu or "
                      "ghost-lru, got '", v, "'");
}

std::string CheckOffload(const std::string& v) {
  if (v == "write-back" || v == "write-through") return "";
  return absl::StrCat("must be write-back or write-through, got '", v, "'");
}

std::string CheckKvDevicePath(const std::string& v) {
  if (v == "auto" || v == "staged") return "";
  return absl::StrCat("must be auto or staged, got '", v, "'");
}

std::string CheckUnknownParams(const std::string& v) {
  if (v == "reject" || v == "warn" || v == "ignore") return "";
  return absl::StrCat("must be reject, warn or ignore, got '", v, "'");
}

std::string CheckGetLoadFormat(const std::string& v) {
  if (v == "sglang" || v == "vllm-router") return "";
  return absl::StrCat("must be sglang or vllm-router, got '", v, "'");
}

std::string CheckToolCallParser(const std::string& v) {
  for (const char* name : {"auto", "none", "llama3_json", "hermes", "mistral"}) {
    if (v == name) return "";
  }
  return absl::StrCat("must be auto, none, llama3_json, hermes or mistral, got '", v, "'");
}

std::string CheckRestartPolicy(const std::string& v) {
  if (v == "on-failure" || v == "always" || v == "never") return "";
  return absl::StrCat("must be on-failure, always or never, got '", v, "'");
}

std::string CheckBlockSize(const int& v) {
  if (v >= 1 && v <= 256 && (v & (v - 1)) == 0) return "";
  return absl::StrCat("must be a power of two in 1..256", Got(v));
}

// engine.plugin_config (empty or a JSON object) as an object.
nlohmann::json PluginConfigObject(const std::string& text) {
  if (text.empty()) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json::object();
}

std::string CheckShare(const double& v) {
  if (v == 0 || (v > 0 && v <= 1)) return "";
  return absl::StrCat("must be in (0, 1], or 0 for an automatic share", Got(v));
}

constexpr int kMaxGpuId = 1023;
constexpr size_t kMaxGpuList = 1024;

// A pool's `gpus`: a list of device ids.
FieldSpec GpuList(std::string path, Ref<std::vector<int>> ref) {
  FieldSpec f;
  f.path = std::move(path);
  f.parse = [ref](const YAML::Node& node, ClusterConfig& c) -> std::string {
    std::vector<int>& gpus = ref(c);
    gpus.clear();
    if (node.IsNull()) return "";
    const char* expected = "expected a list of GPU ids, e.g. [0, 1]";
    if (!node.IsSequence()) return expected;
    if (node.size() > kMaxGpuList) return absl::StrCat("at most ", kMaxGpuList, " GPU ids");
    for (const auto& item : node) {
      int id = 0;
      if (!item.IsScalar() || !YAML::convert<int>::decode(item, id)) return expected;
      gpus.push_back(id);
    }
    return "";
  };
  f.check = [ref](const ClusterConfig& c) -> std::string {
    for (int id : ref(const_cast<ClusterConfig&>(c))) {
      if (id < 0 || id > kMaxGpuId) return absl::StrCat("GPU ids must be in 0..", kMaxGpuId, Got(id));
    }
    return "";
  };
  return f;
}

// The keys of pool `name` (prefill, decode, mixed).
std::vector<FieldSpec> PoolFields(const std::string& name, ClusterConfig::Pool ClusterConfig::*pool,
                                  int max_workers) {
  return {
      Scalar<int>(
          name + ".count", "an integer", [pool](auto& c) -> auto& { return (c.*pool).count; },
          IntRange(0, max_workers)),
      GpuList(name + ".gpus", [pool](auto& c) -> auto& { return (c.*pool).gpus; }),
      Scalar<double>(
          name + ".gpu_memory_share", "a number",
          [pool](auto& c) -> auto& { return (c.*pool).gpu_memory_share; }, CheckShare),
      Scalar<int64_t>(
          name + ".kv_cache_mb", "an integer",
          [pool](auto& c) -> auto& { return (c.*pool).kv_cache_mb; }, CheckMegabytes),
  };
}

std::string CheckRateLimit(const std::string& v) {
  if (v.empty()) return "";
  absl::StatusOr<RateLimit> limit = ParseRateLimit(v);
  return limit.ok() ? "" : std::string(limit.status().message());
}

// One api_keys entry of the form {key: K, cache_salt: S, rate_limit: R} (all but key optional).
std::string ApiKeyEntry(const YAML::Node& item, std::vector<std::string>* keys, std::string* salt,
                        std::string* rate_limit) {
  std::string key;
  for (const auto& kv : item) {
    const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (name != "key" && name != "cache_salt" && name != "rate_limit") {
      return absl::StrCat("unknown key '", name,
                          "' in an entry (known keys: key, cache_salt, rate_limit)");
    }
    if (!kv.second.IsScalar() || kv.second.Scalar().empty()) {
      return absl::StrCat(name, " must be a non-empty string");
    }
    (name == "key" ? key : name == "cache_salt" ? *salt : *rate_limit) = kv.second.Scalar();
  }
  if (std::string e = CheckRateLimit(*rate_limit); !e.empty()) {
    return absl::StrCat("rate_limit: ", e);
  }
  if (key.empty()) return "an entry needs a key";
  if (salt->size() > 256) return "cache_salt must be at most 256 bytes";
  keys->push_back(std::move(key));
  return "";
}

FieldSpec ApiKeys() {
  FieldSpec f;
  f.path = "api_keys";
  f.parse = [](const YAML::Node& node, ClusterConfig& c) -> std::string {
    c.api_keys.clear();
    c.api_key_cache_salts.clear();
    c.api_key_rate_limits.clear();
    if (node.IsNull()) return "";
    if (!node.IsSequence()) return "expected a list of strings";
    for (const auto& item : node) {
      std::string salt, rate_limit;
      if (item.IsMap()) {
        if (std::string e = ApiKeyEntry(item, &c.api_keys, &salt, &rate_limit); !e.empty()) {
          return e;
        }
      } else if (!item.IsScalar() || item.Scalar().empty()) {
        return "expected a list of non-empty strings or {key, cache_salt, rate_limit} maps";
      } else {
        c.api_keys.push_back(item.Scalar());
      }
      c.api_key_cache_salts.push_back(std::move(salt));
      c.api_key_rate_limits.push_back(std::move(rate_limit));
    }
    // Keys without a salt need no entry: drop the trailing empty ones.
    while (!c.api_key_cache_salts.empty() && c.api_key_cache_salts.back().empty()) {
      c.api_key_cache_salts.pop_back();
    }
    while (!c.api_key_rate_limits.empty() && c.api_key_rate_limits.back().empty()) {
      c.api_key_rate_limits.pop_back();
    }
    return "";
  };
  f.check = NoCheck();
  return f;
}

// `tls`: off | auto, or a mapping {ca, cert, key} of PEM paths (all three).
FieldSpec Tls() {
  FieldSpec f;
  f.path = "tls";
  f.parse = [](const YAML::Node& node, ClusterConfig& c) -> std::string {
    c.tls = {};
    if (node.IsNull()) return "";
    if (node.IsScalar()) {
      const std::string& v = node.Scalar();
      if (v == "off" || v == "false") return "";
      if (v == "auto") {
        c.tls.mode = "auto";
        return "";
      }
      return absl::StrCat("must be off, auto or a mapping {ca, cert, key}, got '", v, "'");
    }
    if (!node.IsMap()) return "must be off, auto or a mapping {ca, cert, key}";
    for (const auto& kv : node) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      std::string* out = name == "ca"     ? &c.tls.ca
                         : name == "cert" ? &c.tls.cert
                         : name == "key"  ? &c.tls.key
                                          : nullptr;
      if (out == nullptr) {
        return absl::StrCat("unknown key '", name, "' (known keys: ca, cert, key)");
      }
      if (!kv.second.IsScalar() || kv.second.Scalar().empty()) {
        return absl::StrCat(name, " must be a file path");
      }
      *out = kv.second.Scalar();
    }
    c.tls.mode = "files";
    return "";
  };
  f.check = [](const ClusterConfig& c) -> std::string {
    const auto& t = c.tls;
    if (t.mode == "off" || t.mode == "auto") return "";
    if (t.mode != "files") {
      return absl::StrCat("mode must be off, auto or files, got '", t.mode, "'");
    }
    if (t.ca.empty() || t.cert.empty() || t.key.empty()) {
      return "needs all of ca, cert and key (PEM file paths)";
    }
    return "";
  };
  return f;
}

// `router.http_tls`: off | auto, or a mapping {cert, key[, client_ca]} of PEM paths.
FieldSpec HttpTls() {
  FieldSpec f;
  f.path = "router.http_tls";
  f.parse = [](const YAML::Node& node, ClusterConfig& c) -> std::string {
    auto& t = c.router.http_tls;
    t = {};
    if (node.IsNull()) return "";
    if (node.IsScalar()) {
      const std::string& v = node.Scalar();
      if (v == "off" || v == "false") return "";
      if (v == "auto") {
        t.mode = "auto";
        return "";
      }
      return absl::StrCat("must be off, auto or a mapping {cert, key, client_ca}, got '", v, "'");
    }
    if (!node.IsMap()) return "must be off, auto or a mapping {cert, key, client_ca}";
    for (const auto& kv : node) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      std::string* out = name == "cert"        ? &t.cert
                         : name == "key"       ? &t.key
                         : name == "client_ca" ? &t.client_ca
                                               : nullptr;
      if (out == nullptr) {
        return absl::StrCat("unknown key '", name, "' (known keys: cert, key, client_ca)");
      }
      if (!kv.second.IsScalar() || kv.second.Scalar().empty()) {
        return absl::StrCat(name, " must be a file path");
      }
      *out = kv.second.Scalar();
    }
    t.mode = "files";
    return "";
  };
  f.check = [](const ClusterConfig& c) -> std::string {
    const auto& t = c.router.http_tls;
    if (t.mode == "off" || t.mode == "auto") return "";
    if (t.mode != "files") {
      return absl::StrCat("mode must be off, auto or files, got '", t.mode, "'");
    }
    if (t.cert.empty() || t.key.empty()) return "needs cert and key (PEM file paths)";
    return "";
  };
  return f;
}

const FieldSpec* FindField(const std::string& path);
std::vector<std::string> KeysUnder(const std::string& prefix);

// One worker pool (prefill, decode, mixed) of a `models` entry, read with the top-level pool's
// keys into `scratch`.
std::string ModelPoolSection(const std::string& pool, const YAML::Node& node,
                             ClusterConfig& scratch) {
  if (node.IsNull()) return "";
  if (!node.IsMap()) {
    return absl::StrCat(pool, ": expected a mapping with keys ",
                        absl::StrJoin(KeysUnder(pool), ", "));
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const FieldSpec* field = FindField(absl::StrCat(pool, ".", key));
    if (field == nullptr) {
      return absl::StrCat(pool, ".", key, ": unknown key (known keys in ", pool, ": ",
                          absl::StrJoin(KeysUnder(pool), ", "), ")");
    }
    std::string err = field->parse(kv.second, scratch);
    if (err.empty()) err = field->check(scratch);
    if (!err.empty()) return absl::StrCat(pool, ".", key, ": ", err);
  }
  return "";
}

// One `models` entry: {name, model, plugin, plugin_config, profile, prefill, decode, mixed}.
std::string ModelEntry(const YAML::Node& item, ClusterConfig::ModelPool* out) {
  if (!item.IsMap()) return "expected a mapping";
  ClusterConfig scratch;
  scratch.prefill = out->prefill;
  scratch.decode = out->decode;
  scratch.mixed = out->mixed;
  std::set<std::string> seen;
  for (const auto& kv : item) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (!seen.insert(key).second) return absl::StrCat(key, ": duplicate key");
    if (key == "prefill" || key == "decode" || key == "mixed") {
      if (std::string e = ModelPoolSection(key, kv.second, scratch); !e.empty()) return e;
      continue;
    }
    std::string* text = key == "name"            ? &out->name
                        : key == "model"         ? &out->model
                        : key == "plugin"        ? &out->plugin
                        : key == "plugin_config" ? &out->plugin_config
                        : key == "profile"       ? &out->profile
                                                 : nullptr;
    if (text == nullptr) {
      return absl::StrCat("unknown key '", key,
                          "' (known keys: name, model, plugin, plugin_config, profile, prefill, "
                          "decode, mixed)");
    }
    if (!kv.second.IsScalar() || kv.second.Scalar().empty()) {
      return absl::StrCat(key, ": expected a non-empty string");
    }
    *text = kv.second.Scalar();
  }
  if (out->name.empty()) return "name: every model needs the name clients send";
  if (std::string e = CheckJsonObject(out->plugin_config); !e.empty()) {
    return absl::StrCat("plugin_config: ", e);
  }
  out->prefill = scratch.prefill;
  out->decode = scratch.decode;
  out->mixed = scratch.mixed;
  return "";
}

// `models`: a list of model pools, each named once.
FieldSpec Models() {
  constexpr size_t kMaxModels = 64;
  FieldSpec f;
  f.path = "models";
  f.parse = [](const YAML::Node& node, ClusterConfig& c) -> std::string {
    c.models.clear();
    if (node.IsNull()) return "";
    if (!node.IsSequence()) return "expected a list of models ({name, model, ...})";
    if (node.size() > kMaxModels) return absl::StrCat("at most ", kMaxModels, " models");
    for (size_t i = 0; i < node.size(); ++i) {
      ClusterConfig::ModelPool entry;
      if (std::string e = ModelEntry(node[i], &entry); !e.empty()) {
        return absl::StrCat("entry ", i, ": ", e);
      }
      c.models.push_back(std::move(entry));
    }
    return "";
  };
  f.check = [](const ClusterConfig& c) -> std::string {
    std::set<std::string> names, prefixes;
    for (const auto& m : c.models) {
      if (m.name.empty() || m.model.empty()) return "every model needs a name and a model";
      if (!names.insert(m.name).second) return absl::StrCat("model ", m.name, " is named twice");
      // Process names: `up` tells routers from workers by the "router" prefix.
      const std::string prefix = ModelProcessPrefix(m.name);
      if (prefix.starts_with("router")) {
        return absl::StrCat("model ", m.name, ": a name may not start with 'router'");
      }
      if (!prefixes.insert(prefix).second) {
        return absl::StrCat("model ", m.name, " gives the same worker ids (", prefix,
                            "-...) as another model: rename one");
      }
    }
    return "";
  };
  return f;
}

// The keys before the worker pools.
std::vector<FieldSpec> HeadFields() {
  return {
      Scalar<std::string>(
          "model", "a string", [](auto& c) -> auto& { return c.model; }, CheckNonEmpty),
      Scalar<std::string>(
          "host", "a string", [](auto& c) -> auto& { return c.host; }, CheckNonEmpty),
      Scalar<int>(
          "router.http_port", "an integer", [](auto& c) -> auto& { return c.router.http_port; },
          IntRange(0, 65535)),
      Scalar<int>(
          "router.grpc_port", "an integer", [](auto& c) -> auto& { return c.router.grpc_port; },
          IntRange(0, 65535)),
      Scalar<int>(
          "router.replicas", "an integer", [](auto& c) -> auto& { return c.router.replicas; },
          IntRange(1, 16)),
      Scalar<double>(
          "router.worker_stream_idle_timeout_s", "a number",
          [](auto& c) -> auto& { return c.router.worker_stream_idle_timeout_s; },
          CheckNonNegativeSeconds),
      Scalar<int>(
          "router.max_inflight_per_worker", "an integer",
          [](auto& c) -> auto& { return c.router.max_inflight_per_worker; },
          IntRange(1, 1 << 20)),
      Scalar<double>(
          "router.resume_settle_s", "a number",
          [](auto& c) -> auto& { return c.router.resume_settle_s; }, SecondsUpTo(600)),
      HttpTls(),
  };
}

// The keys after the worker pools.
std::vector<FieldSpec> TailFields() {
  return {
      Scalar<std::string>(
          "engine.plugin", "a string", [](auto& c) -> auto& { return c.engine.plugin; },
          CheckNonEmpty),
      Scalar<std::string>(
          "engine.plugin_config", "a string",
          [](auto& c) -> auto& { return c.engine.plugin_config; }, CheckJsonObject),
      Scalar<int>(
          "engine.block_size", "an integer", [](auto& c) -> auto& { return c.engine.block_size; },
          CheckBlockSize),
      Scalar<int>(
          "engine.num_kv_blocks", "an integer",
          [](auto& c) -> auto& { return c.engine.num_kv_blocks; }, IntRange(0, 1 << 30)),
      Scalar<int>(
          "engine.max_num_seqs", "an integer",
          [](auto& c) -> auto& { return c.engine.max_num_seqs; }, IntRange(1, 1 << 20)),
      Scalar<int>(
          "engine.max_num_batched_tokens", "an integer",
          [](auto& c) -> auto& { return c.engine.max_num_batched_tokens; }, IntRange(1, 1 << 30)),
      Scalar<std::string>(
          "engine.kv_device_path", "a string",
          [](auto& c) -> auto& { return c.engine.kv_device_path; }, CheckKvDevicePath),
      Scalar<double>(
          "engine.stall_timeout_s", "a number",
          [](auto& c) -> auto& { return c.engine.stall_timeout_s; }, CheckNonNegativeSeconds),
      Scalar<double>(
          "engine.detached_request_grace_s", "a number",
          [](auto& c) -> auto& { return c.engine.detached_request_grace_s; }, SecondsUpTo(3600)),
      Scalar<int64_t>(
          "engine.max_model_len", "an integer",
          [](auto& c) -> auto& { return c.engine.max_model_len; },
          [](const int64_t& v) -> std::string {
            return v >= 0 ? "" : absl::StrCat("must be >= 0", Got(v));
          }),
      Scalar<double>(
          "slo.ttft_s", "a number", [](auto& c) -> auto& { return c.slo.ttft_s; },
          CheckPositiveSeconds),
      Scalar<double>(
          "slo.tpot_s", "a number", [](auto& c) -> auto& { return c.slo.tpot_s; },
          CheckPositiveSeconds),
      Scalar<int64_t>(
          "kv_tiers.host_mb", "an integer", [](auto& c) -> auto& { return c.kv_tiers.host_mb; },
          CheckMegabytes),
      Scalar<std::string>(
          "kv_tiers.host_policy", "a string",
          [](auto& c) -> auto& { return c.kv_tiers.host_policy; }, CheckPolicy),
      Scalar<std::string>(
          "kv_tiers.offload", "a string", [](auto& c) -> auto& { return c.kv_tiers.offload; },
          CheckOffload),
      Scalar<int64_t>(
          "kv_tiers.staging_mb", "an integer",
          [](auto& c) -> auto& { return c.kv_tiers.staging_mb; }, CheckMegabytes),
      Scalar<std::string>(
          "kv_tiers.disk_path", "a string", [](auto& c) -> auto& { return c.kv_tiers.disk_path; },
          nullptr),
      Scalar<int64_t>(
          "kv_tiers.disk_mb", "an integer", [](auto& c) -> auto& { return c.kv_tiers.disk_mb; },
          CheckMegabytes),
      Scalar<std::string>(
          "kv_tiers.disk_policy", "a string",
          [](auto& c) -> auto& { return c.kv_tiers.disk_policy; }, CheckPolicy),
      Scalar<int>(
          "kv_tiers.disk_admit_uses", "an integer",
          [](auto& c) -> auto& { return c.kv_tiers.disk_admit_uses; }, IntRange(1, 1000)),
      Scalar<int>(
          "kv_tiers.kvstore_count", "an integer",
          [](auto& c) -> auto& { return c.kv_tiers.kvstore_count; }, IntRange(0, 64)),
      Scalar<int64_t>(
          "kv_tiers.kvstore_mb", "an integer",
          [](auto& c) -> auto& { return c.kv_tiers.kvstore_mb; }, CheckMegabytes),
      Scalar<std::string>(
          "kv_tiers.kvstore_policy", "a string",
          [](auto& c) -> auto& { return c.kv_tiers.kvstore_policy; }, CheckPolicy),
      Scalar<std::string>(
          "restart.policy", "a string", [](auto& c) -> auto& { return c.restart.policy; },
          CheckRestartPolicy),
      Scalar<int>(
          "restart.max_consecutive", "an integer",
          [](auto& c) -> auto& { return c.restart.max_consecutive; }, IntRange(1, 1000)),
      Scalar<std::string>(
          "log_dir", "a string", [](auto& c) -> auto& { return c.log_dir; }, nullptr),
      ApiKeys(),
      Scalar<std::string>(
          "rate_limit", "a string", [](auto& c) -> auto& { return c.rate_limit; },
          CheckRateLimit),
      Scalar<int64_t>(
          "max_memory_mb", "an integer", [](auto& c) -> auto& { return c.max_memory_mb; },
          CheckMemoryLimit),
      Scalar<bool>(
          "hide_cached_tokens", "a boolean", [](auto& c) -> auto& { return c.hide_cached_tokens; },
          nullptr),
      Scalar<std::string>(
          "kv_hash_key_file", "a string", [](auto& c) -> auto& { return c.kv_hash_key_file; },
          nullptr),
      Scalar<std::string>(
          "unknown_params", "a string", [](auto& c) -> auto& { return c.unknown_params; },
          CheckUnknownParams),
      Scalar<std::string>(
          "get_load_format", "a string", [](auto& c) -> auto& { return c.get_load_format; },
          CheckGetLoadFormat),
      Scalar<std::string>(
          "tool_call_parser", "a string", [](auto& c) -> auto& { return c.tool_call_parser; },
          CheckToolCallParser),
      Scalar<std::string>(
          "policy", "a string", [](auto& c) -> auto& { return c.policy; }, CheckNonEmpty),
      Tls(),
      Models(),
  };
}

// Every key, in the order of docs/examples/cluster.yaml.
const std::vector<FieldSpec>& Fields() {
  constexpr int kMaxWorkers = 1024;
  static const auto* fields = [] {
    auto* all = new std::vector<FieldSpec>(HeadFields());
    for (auto [name, pool] : {std::pair{"prefill", &ClusterConfig::prefill},
                              {"decode", &ClusterConfig::decode},
                              {"mixed", &ClusterConfig::mixed}}) {
      for (auto& f : PoolFields(name, pool, kMaxWorkers)) all->push_back(std::move(f));
    }
    for (auto& f : TailFields()) all->push_back(std::move(f));
    return all;
  }();
  return *fields;
}

const FieldSpec* FindField(const std::string& path) {
  for (const auto& f : Fields()) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

// The keys allowed directly under `prefix` ("" = top level), in table order.
std::vector<std::string> KeysUnder(const std::string& prefix) {
  std::vector<std::string> keys;
  for (const auto& f : Fields()) {
    if (!prefix.empty() && !f.path.starts_with(prefix + ".")) continue;
    std::string rest = prefix.empty() ? f.path : f.path.substr(prefix.size() + 1);
    rest = rest.substr(0, rest.find('.'));
    if (std::find(keys.begin(), keys.end(), rest) == keys.end()) keys.push_back(rest);
  }
  return keys;
}

// A config error found across keys: the key it is reported at ("" = the last worker pool's
// section) and the reason. Empty reason = none.
struct Problem {
  std::string key;
  std::string reason;
};

using PoolRef = std::pair<const char*, const ClusterConfig::Pool*>;

std::vector<PoolRef> Pools(const ClusterConfig& c) {
  return {{"prefill", &c.prefill}, {"decode", &c.decode}, {"mixed", &c.mixed}};
}

// One pool's sizing and GPU keys against each other and the engine section.
Problem CheckPool(const ClusterConfig& c, const std::string& name, const ClusterConfig::Pool& p) {
  const std::string share = name + ".gpu_memory_share", mb = name + ".kv_cache_mb";
  if (p.gpu_memory_share > 0 && p.kv_cache_mb > 0) {
    return {mb, absl::StrCat("set one of ", share, " and ", mb, " (each sizes the KV pool)")};
  }
  if (c.engine.num_kv_blocks > 0 && (p.gpu_memory_share > 0 || p.kv_cache_mb > 0)) {
    return {p.kv_cache_mb > 0 ? mb : share,
            "engine.num_kv_blocks sizes every worker's KV pool already; set one of them"};
  }
  if (p.gpus.empty()) return {};
  if (IsCpuPlugin(c.engine.plugin)) {
    return {name + ".gpus",
            "the cpu plugin runs on the host; GPU ids need a GPU plugin (engine.plugin: cuda)"};
  }
  if (PluginConfigObject(c.engine.plugin_config).contains("device")) {
    return {name + ".gpus",
            "engine.plugin_config sets \"device\" as well; remove it there (gpus gives each "
            "worker its device)"};
  }
  return {};
}

// The workers of one device, for the automatic shares.
struct DeviceLoad {
  double explicit_share = 0;  // sum of explicit gpu_memory_share values
  std::string explicit_key;   // the first pool with one
  int unshared = 0;           // workers without an explicit share (automatic or kv_cache_mb)
  int automatic = 0;          // workers with neither
};

// Fills in automatic shares (see PlaceWorkers in the header).
Problem ShareDevices(std::vector<WorkerPlacement>& workers) {
  std::map<int, DeviceLoad> devices;
  for (const auto& w : workers) {
    DeviceLoad& d = devices[std::max(w.gpu, 0)];
    if (w.memory_share > 0) {
      d.explicit_share += w.memory_share;
      if (d.explicit_key.empty()) d.explicit_key = w.role + ".gpu_memory_share";
    } else {
      ++d.unshared;
      d.automatic += w.kv_cache_mb == 0 ? 1 : 0;
    }
  }
  for (const auto& [gpu, d] : devices) {
    const std::string sum =
        absl::StrCat("the gpu_memory_share of the workers on GPU ", gpu, " adds up to ",
                     d.explicit_share);
    if (d.explicit_share > 1 + 1e-9) return {d.explicit_key, sum + ", more than 1"};
    if (d.automatic > 0 && d.explicit_share >= kAutoGpuShare - 1e-9) {
      return {d.explicit_key,
              absl::StrCat(sum, ", leaving nothing of ", kAutoGpuShare,
                           " for the workers there without gpu_memory_share or kv_cache_mb")};
    }
  }
  for (auto& w : workers) {
    if (w.memory_share > 0 || w.kv_cache_mb > 0) continue;
    const DeviceLoad& d = devices[std::max(w.gpu, 0)];
    w.memory_share = (kAutoGpuShare - d.explicit_share) / d.unshared;
  }
  return {};
}

Problem Place(const ClusterConfig& c, std::vector<WorkerPlacement>& out) {
  out.clear();
  for (const auto& [name, pool] : Pools(c)) {
    for (int i = 0; i < pool->count; ++i) {
      WorkerPlacement w;
      w.role = name;
      w.index = i;
      w.gpu = pool->gpus.empty() ? -1 : pool->gpus[size_t(i) % pool->gpus.size()];
      w.plugin_config = c.engine.plugin_config;
      if (w.gpu >= 0) {
        nlohmann::json config = PluginConfigObject(c.engine.plugin_config);
        config["device"] = w.gpu;
        w.plugin_config = config.dump();
      }
      w.memory_share = pool->gpu_memory_share;
      w.kv_cache_mb = pool->kv_cache_mb;
      out.push_back(std::move(w));
    }
  }
  if (IsCpuPlugin(c.engine.plugin) || c.engine.num_kv_blocks > 0) return {};
  return ShareDevices(out);
}

Problem CrossCheckModel(const ClusterConfig& c);

// Each model pool on its own (`models` entries reported as "models[i].key").
Problem CrossCheck(const ClusterConfig& c) {
  if (c.models.empty()) return CrossCheckModel(c);
  const std::vector<ClusterConfig> each = ModelPoolConfigs(c);
  for (size_t i = 0; i < each.size(); ++i) {
    if (Problem p = CrossCheckModel(each[i]); !p.reason.empty()) {
      return {"models", absl::StrCat("entry ", i, " (", c.models[i].name, "): ",
                                     p.key.empty() ? "" : p.key + ": ", p.reason)};
    }
  }
  return {};
}

Problem CrossCheckModel(const ClusterConfig& c) {
  if (c.decode.count + c.mixed.count < 1) {
    return {"", "at least one decode or mixed worker is required (decode.count + mixed.count >= 1)"};
  }
  const auto& t = c.kv_tiers;
  if (t.host_mb == 0 && (t.disk_mb > 0 || t.kvstore_count > 0)) {
    return {"", "kv_tiers.disk_mb and kv_tiers.kvstore_count need kv_tiers.host_mb > 0 (blocks "
                "reach the disk and remote tiers through the host tier)"};
  }
  if (t.disk_mb > 0 && t.disk_path.empty()) return {"", "kv_tiers.disk_mb needs kv_tiers.disk_path"};
  for (const auto& [name, pool] : Pools(c)) {
    if (Problem p = CheckPool(c, name, *pool); !p.reason.empty()) return p;
  }
  std::vector<WorkerPlacement> workers;
  return Place(c, workers);
}

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  absl::Status Error(const YAML::Mark& mark, const std::string& path, const std::string& msg) {
    std::string where = source_;
    if (!mark.is_null()) absl::StrAppend(&where, ":", mark.line + 1);
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", path.empty() ? "" : path + ": ", msg));
  }

  // Walks a mapping at `prefix`, setting fields and recursing into sections.
  absl::Status Walk(const YAML::Node& map, const std::string& prefix, ClusterConfig& c) {
    std::set<std::string> seen;
    for (const auto& kv : map) {
      const YAML::Mark mark = kv.first.Mark();
      if (!kv.first.IsScalar()) return Error(mark, prefix, "keys must be strings");
      const std::string key = kv.first.Scalar();
      const std::string path = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      if (!seen.insert(key).second) return Error(mark, path, "duplicate key");
      marks_[path] = mark;
      if (const FieldSpec* field = FindField(path)) {
        if (auto err = field->parse(kv.second, c); !err.empty()) return Error(mark, path, err);
        if (auto err = field->check(c); !err.empty()) return Error(mark, path, err);
        continue;
      }
      const std::vector<std::string> sub = KeysUnder(path);
      if (sub.empty()) {
        return Error(mark, path,
                     absl::StrCat("unknown key (known keys",
                                  prefix.empty() ? "" : absl::StrCat(" in ", prefix), ": ",
                                  absl::StrJoin(KeysUnder(prefix), ", "), ")"));
      }
      if (kv.second.IsNull()) continue;  // an empty section keeps its defaults
      if (!kv.second.IsMap()) {
        return Error(mark, path,
                     absl::StrCat("expected a mapping with keys ", absl::StrJoin(sub, ", ")));
      }
      if (auto st = Walk(kv.second, path, c); !st.ok()) return st;
      if (path == "decode" || path == "mixed") last_pool_mark_ = mark;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<ClusterConfig> Parse(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      return Error(e.mark, "", absl::StrCat("invalid YAML: ", e.msg));
    }
    ClusterConfig config;
    if (root.IsNull()) return config;  // an empty file: all defaults
    if (!root.IsMap()) return Error(root.Mark(), "", "expected a mapping at the top level");
    try {
      if (auto st = Walk(root, "", config); !st.ok()) return st;
    } catch (const YAML::Exception& e) {
      return Error(e.mark, "", e.msg);
    }
    if (!config.models.empty()) {
      for (const char* key : {"model", "prefill", "decode", "mixed"}) {
        if (marks_.contains(key)) {
          return Error(marks_.at(key), key,
                       "with a models list, each model and its workers are set in its entry");
        }
      }
    }
    if (Problem p = CrossCheck(config); !p.reason.empty()) {
      return Error(MarkOf(p.key), p.key, p.reason);
    }
    return config;
  }

 private:
  // Where `key` was written: its own line, else its section's, else the last worker pool's.
  YAML::Mark MarkOf(const std::string& key) const {
    if (auto it = marks_.find(key); it != marks_.end()) return it->second;
    if (auto it = marks_.find(key.substr(0, key.find('.'))); it != marks_.end()) return it->second;
    return last_pool_mark_;
  }

  std::string source_;
  YAML::Mark last_pool_mark_ = YAML::Mark::null_mark();
  std::map<std::string, YAML::Mark> marks_;  // every key read, by path
};

}  // namespace

std::string ModelProcessPrefix(const std::string& name) {
  std::string out = name;
  for (char& ch : out) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) ch = '-';
  }
  return out;
}

std::vector<ClusterConfig> ModelPoolConfigs(const ClusterConfig& config) {
  if (config.models.empty()) return {config};
  std::vector<ClusterConfig> out;
  for (const ClusterConfig::ModelPool& m : config.models) {
    ClusterConfig c = config;
    c.models.clear();
    c.model = m.model;
    c.prefill = m.prefill;
    c.decode = m.decode;
    c.mixed = m.mixed;
    if (!m.plugin.empty()) c.engine.plugin = m.plugin;
    if (!m.plugin_config.empty()) c.engine.plugin_config = m.plugin_config;
    out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<ClusterConfig> ParseClusterConfig(const std::string& text,
                                                 const std::string& source) {
  return Parser(source).Parse(text);
}

absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return ParseClusterConfig(*text, path);
}

absl::Status ValidateClusterConfig(const ClusterConfig& config) {
  for (const auto& f : Fields()) {
    if (auto err = f.check(config); !err.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(f.path, ": ", err));
    }
  }
  if (Problem p = CrossCheck(config); !p.reason.empty()) {
    return absl::InvalidArgumentError(p.key.empty() ? p.reason : p.key + ": " + p.reason);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WorkerPlacement>> PlaceWorkers(const ClusterConfig& config) {
  std::vector<WorkerPlacement> workers;
  if (Problem p = Place(config, workers); !p.reason.empty()) {
    return absl::InvalidArgumentError(p.key + ": " + p.reason);
  }
  return workers;
}

bool IsCpuPlugin(const std::string& plugin) {
  return plugin == "cpu" || plugin == "libstrata_cpu.so" || plugin.ends_with("/libstrata_cpu.so");
}

std::string DefaultLogDir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string base = (xdg != nullptr && xdg[0] != '\0')
                               ? absl::StrCat(xdg, "/strata")
                               : absl::StrCat("/tmp/strata-", getuid());
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm;
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  return absl::StrCat(base, "/run-", stamp, "-", getpid());
}

}  // namespace strata
