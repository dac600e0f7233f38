// `strata up` cluster configs: defaults, every key, the shipped example, and errors that name
// the key and line.
#include "strata/common/cluster_config.h"

#include <cstdlib>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ClusterConfigTest, EmptyTextGivesDefaults) {
  auto c = ParseClusterConfig("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model, "preset:tiny-llama");
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->router.http_port, 8000);
  EXPECT_EQ(c->router.grpc_port, 0);
  EXPECT_EQ(c->router.replicas, 1);
  EXPECT_EQ(c->prefill.count, 1);
  EXPECT_EQ(c->decode.count, 1);
  EXPECT_EQ(c->mixed.count, 0);
  EXPECT_EQ(c->engine.plugin, "cpu");
  EXPECT_EQ(c->engine.block_size, 16);
  EXPECT_EQ(c->engine.max_num_seqs, 64);
  EXPECT_EQ(c->engine.max_num_batched_tokens, 512);
  EXPECT_EQ(c->slo.ttft_s, 2.0);
  EXPECT_EQ(c->slo.tpot_s, 0.2);
  EXPECT_EQ(c->policy, "kv-aware");
  EXPECT_TRUE(c->api_keys.empty());
  EXPECT_EQ(c->unknown_params, "warn");
  EXPECT_EQ(c->get_load_format, "sglang");
  EXPECT_EQ(c->tool_call_parser, "auto");
  EXPECT_TRUE(c->log_dir.empty());
  for (const auto* pool : {&c->prefill, &c->decode, &c->mixed}) {
    EXPECT_TRUE(pool->gpus.empty());
    EXPECT_EQ(pool->gpu_memory_share, 0);
    EXPECT_EQ(pool->kv_cache_mb, 0);
  }
  EXPECT_TRUE(ValidateClusterConfig(*c).ok());
}

TEST(ClusterConfigTest, ParsesEveryKey) {
  auto c = ParseClusterConfig(R"(
model: /models/llama
host: 0.0.0.0
router: {http_port: 9000, grpc_port: 9001, replicas: 2}
prefill: {count: 2}
decode: {count: 3}
mixed: {count: 1}
engine:
  plugin: /opt/libstrata_cuda.so
  plugin_config: '{"threads": 3}'
  block_size: 32
  num_kv_blocks: 4096
  max_num_seqs: 128
  max_num_batched_tokens: 2048
  max_model_len: 8192
slo: {ttft_s: 0.5, tpot_s: 0.05}
log_dir: /var/log/strata
api_keys: [k1, "k2"]
unknown_params: reject
get_load_format: vllm-router
tool_call_parser: mistral
policy: goodput
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model, "/models/llama");
  EXPECT_EQ(c->host, "0.0.0.0");
  EXPECT_EQ(c->router.http_port, 9000);
  EXPECT_EQ(c->router.grpc_port, 9001);
  EXPECT_EQ(c->router.replicas, 2);
  EXPECT_EQ(c->prefill.count, 2);
  EXPECT_EQ(c->decode.count, 3);
  EXPECT_EQ(c->mixed.count, 1);
  EXPECT_EQ(c->engine.plugin, "/opt/libstrata_cuda.so");
  EXPECT_EQ(c->engine.plugin_config, R"({"threads": 3})");
  EXPECT_EQ(c->engine.block_size, 32);
  EXPECT_EQ(c->engine.num_kv_blocks, 4096);
  EXPECT_EQ(c->engine.max_num_seqs, 128);
  EXPECT_EQ(c->engine.max_num_batched_tokens, 2048);
  EXPECT_EQ(c->engine.max_model_len, 8192);
  EXPECT_EQ(c->slo.ttft_s, 0.5);
  EXPECT_EQ(c->slo.tpot_s, 0.05);
  EXPECT_EQ(c->log_dir, "/var/log/strata");
  EXPECT_THAT(c->api_keys, ElementsAre("k1", "k2"));
  EXPECT_EQ(c->unknown_params, "reject");
  EXPECT_EQ(c->get_load_format, "vllm-router");
  EXPECT_EQ(c->tool_call_parser, "mistral");
  EXPECT_EQ(c->policy, "goodput");
}

TEST(ClusterConfigTest, TenantIsolationKeys) {
  auto c = ParseClusterConfig(R"(
api_keys:
  - k1
  - {key: k2, cache_salt: tenant-b}
  - {key: k3}
hide_cached_tokens: true
kv_hash_key_file: /etc/strata/kv-hash/key
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->api_keys, ElementsAre("k1", "k2", "k3"));
  EXPECT_THAT(c->api_key_cache_salts, ElementsAre("", "tenant-b"));
  EXPECT_TRUE(c->hide_cached_tokens);
  EXPECT_EQ(c->kv_hash_key_file, "/etc/strata/kv-hash/key");
  auto plain = ParseClusterConfig("api_keys: [k1]\n");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->api_key_cache_salts.empty());
  EXPECT_FALSE(plain->hide_cached_tokens);
  EXPECT_TRUE(plain->kv_hash_key_file.empty());
  for (const char* bad :
       {"api_keys: [{cache_salt: s}]\n", "api_keys: [{key: k, salt: s}]\n",
        "api_keys: [{key: k, cache_salt: \"\"}]\n", "hide_cached_tokens: maybe\n"}) {
    EXPECT_EQ(ParseClusterConfig(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto long_salt =
      ParseClusterConfig("api_keys: [{key: k, cache_salt: " + std::string(257, 's') + "}]\n");
  EXPECT_THAT(long_salt.status().message(), HasSubstr("at most 256 bytes"));
}

TEST(ClusterConfigTest, RateLimitsPerKeyAndByDefault) {
  auto c = ParseClusterConfig(R"(
rate_limit: "rpm:600,tpm:200000"
api_keys:
  - k1
  - {key: k2, rate_limit: "tpm:5000"}
  - {key: k3, cache_salt: s3}
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rate_limit, "rpm:600,tpm:200000");
  EXPECT_THAT(c->api_key_rate_limits, ElementsAre("", "tpm:5000"));
  EXPECT_THAT(c->api_key_cache_salts, ElementsAre("", "", "s3"));
  for (const char* bad : {"rate_limit: rpm\n", "rate_limit: \"rps:5\"\n",
                          "api_keys: [{key: k, rate_limit: \"tpm:0\"}]\n"}) {
    auto r = ParseClusterConfig(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("rate")) << bad;
  }
}

TEST(ClusterConfigTest, MemoryLimitAndRouterInflightLimit) {
  auto d = ParseClusterConfig("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->max_memory_mb, -1);
  EXPECT_EQ(d->router.max_inflight_per_worker, 256);
  auto c = ParseClusterConfig("max_memory_mb: 4096\nrouter: {max_inflight_per_worker: 8000}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_memory_mb, 4096);
  EXPECT_EQ(c->router.max_inflight_per_worker, 8000);
  EXPECT_EQ(ParseClusterConfig("max_memory_mb: 0\n")->max_memory_mb, 0);
  EXPECT_THAT(ParseClusterConfig("max_memory_mb: -2\n").status().message(),
              HasSubstr("max_memory_mb: must be a size in MiB"));
  EXPECT_THAT(ParseClusterConfig("router: {max_inflight_per_worker: 0}\n").status().message(),
              HasSubstr("router.max_inflight_per_worker: must be in 1.."));
}

TEST(ClusterConfigTest, JsonIsAccepted) {
  auto c = ParseClusterConfig(R"({"decode": {"count": 0}, "mixed": {"count": 2},
                                  "slo": {"ttft_s": 1}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decode.count, 0);
  EXPECT_EQ(c->mixed.count, 2);
  EXPECT_EQ(c->slo.ttft_s, 1.0);
}

TEST(ClusterConfigTest, ShippedExampleParsesToDefaults) {
  auto c = LoadClusterConfig(STRATA_SOURCE_DIR "/docs/examples/cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  auto d = ParseClusterConfig("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(c->model, d->model);
  EXPECT_EQ(c->router.http_port, d->router.http_port);
  EXPECT_EQ(c->router.worker_stream_idle_timeout_s, d->router.worker_stream_idle_timeout_s);
  EXPECT_EQ(c->engine.stall_timeout_s, d->engine.stall_timeout_s);
  EXPECT_EQ(c->prefill.count, d->prefill.count);
  EXPECT_EQ(c->decode.count, d->decode.count);
  EXPECT_EQ(c->engine.block_size, d->engine.block_size);
  EXPECT_EQ(c->slo.tpot_s, d->slo.tpot_s);
  EXPECT_EQ(c->policy, d->policy);
  EXPECT_EQ(c->kv_tiers.host_mb, d->kv_tiers.host_mb);
  EXPECT_EQ(c->kv_tiers.offload, d->kv_tiers.offload);
  EXPECT_EQ(c->kv_tiers.staging_mb, d->kv_tiers.staging_mb);
  EXPECT_EQ(c->kv_tiers.disk_admit_uses, d->kv_tiers.disk_admit_uses);
  EXPECT_EQ(c->kv_tiers.kvstore_mb, d->kv_tiers.kvstore_mb);
  EXPECT_EQ(c->restart.policy, d->restart.policy);
  EXPECT_EQ(c->restart.max_consecutive, d->restart.max_consecutive);
  EXPECT_EQ(c->tls.mode, d->tls.mode);
  EXPECT_EQ(c->router.http_tls.mode, d->router.http_tls.mode);
}

TEST(ClusterConfigTest, ModelsListGivesEachModelItsPoolsAndPlugin) {
  auto c = ParseClusterConfig(
      "engine: {plugin: cpu, block_size: 32}\n"
      "models:\n"
      "  - name: llama\n"
      "    model: preset:tiny-llama\n"
      "    prefill: {count: 1}\n"
      "    decode: {count: 2, kv_cache_mb: 64}\n"
      "  - name: moe\n"
      "    model: /models/moe\n"
      "    plugin: /opt/libother.so\n"
      "    plugin_config: '{\"threads\": 1}'\n"
      "    profile: /profiles/moe\n"
      "    mixed: {count: 1}\n"
      "    decode: {count: 0}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->models.size(), 2u);
  EXPECT_EQ(c->models[0].name, "llama");
  EXPECT_EQ(c->models[0].prefill.count, 1);
  EXPECT_EQ(c->models[0].decode.count, 2);
  EXPECT_EQ(c->models[0].decode.kv_cache_mb, 64);
  EXPECT_EQ(c->models[0].mixed.count, 0);
  EXPECT_EQ(c->models[1].profile, "/profiles/moe");
  const std::vector<ClusterConfig> each = ModelPoolConfigs(*c);
  ASSERT_EQ(each.size(), 2u);
  EXPECT_EQ(each[0].model, "preset:tiny-llama");
  EXPECT_EQ(each[0].engine.plugin, "cpu");
  EXPECT_EQ(each[0].decode.count, 2);
  EXPECT_EQ(each[1].model, "/models/moe");
  EXPECT_EQ(each[1].engine.plugin, "/opt/libother.so");
  EXPECT_EQ(each[1].engine.plugin_config, "{\"threads\": 1}");
  EXPECT_EQ(each[1].engine.block_size, 32);  // the shared engine keys stay
  EXPECT_EQ(each[1].prefill.count, 0);  // an entry's pools default to one decode worker
  EXPECT_EQ(each[1].decode.count, 0);
  EXPECT_EQ(each[1].mixed.count, 1);
  EXPECT_TRUE(each[1].models.empty());
  // The shipped example: two models on the CPU.
  auto shipped = LoadClusterConfig(STRATA_SOURCE_DIR "/docs/examples/cluster-models.yaml");
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  ASSERT_EQ(shipped->models.size(), 2u);
  EXPECT_EQ(shipped->models[1].name, "moe");
  EXPECT_EQ(shipped->models[1].mixed.count, 1);
  // Without a list, the config is its one model.
  auto one = ParseClusterConfig("decode: {count: 3}\n");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(ModelPoolConfigs(*one).size(), 1u);
  EXPECT_EQ(ModelPoolConfigs(*one)[0].decode.count, 3);
}

TEST(ClusterConfigTest, TlsParses) {
  auto d = ParseClusterConfig("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tls.mode, "off");
  auto a = ParseClusterConfig("tls: auto\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->tls.mode, "auto");
  auto f = ParseClusterConfig("tls:\n  ca: /s/ca.crt\n  cert: /s/tls.crt\n  key: /s/tls.key\n");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tls.mode, "files");
  EXPECT_EQ(f->tls.ca, "/s/ca.crt");
  EXPECT_EQ(f->tls.cert, "/s/tls.crt");
  EXPECT_EQ(f->tls.key, "/s/tls.key");
  auto o = ParseClusterConfig("tls: off\n");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->tls.mode, "off");
}

TEST(ClusterConfigTest, RouterHttpTlsParses) {
  auto d = ParseClusterConfig("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->router.http_tls.mode, "off");
  auto a = ParseClusterConfig("router:\n  http_tls: auto\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->router.http_tls.mode, "auto");
  auto f = ParseClusterConfig(
      "router:\n  http_tls: {cert: /s/api.crt, key: /s/api.key, client_ca: /s/clients.crt}\n");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->router.http_tls.mode, "files");
  EXPECT_EQ(f->router.http_tls.cert, "/s/api.crt");
  EXPECT_EQ(f->router.http_tls.key, "/s/api.key");
  EXPECT_EQ(f->router.http_tls.client_ca, "/s/clients.crt");
  auto o = ParseClusterConfig("router:\n  http_tls: off\n");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->router.http_tls.mode, "off");
}

TEST(ClusterConfigTest, RestartParses) {
  auto d = ParseClusterConfig("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->restart.policy, "on-failure");
  EXPECT_EQ(d->restart.max_consecutive, 5);
  auto c = ParseClusterConfig("restart:\n  policy: always\n  max_consecutive: 2\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->restart.policy, "always");
  EXPECT_EQ(c->restart.max_consecutive, 2);
}

TEST(ClusterConfigTest, KvTiersParse) {
  auto c = ParseClusterConfig(R"(kv_tiers:
  host_mb: 64
  host_policy: s3-fifo
  offload: write-through
  staging_mb: 16
  disk_path: /var/lib/strata/kv
  disk_mb: 4096
  disk_admit_uses: 1
  kvstore_count: 2
  kvstore_mb: 1024
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv_tiers.host_mb, 64);
  EXPECT_EQ(c->kv_tiers.host_policy, "s3-fifo");
  EXPECT_EQ(c->kv_tiers.offload, "write-through");
  EXPECT_EQ(c->kv_tiers.staging_mb, 16);
  EXPECT_EQ(c->kv_tiers.disk_path, "/var/lib/strata/kv");
  EXPECT_EQ(c->kv_tiers.disk_mb, 4096);
  EXPECT_EQ(c->kv_tiers.disk_admit_uses, 1);
  EXPECT_EQ(c->kv_tiers.kvstore_count, 2);
  EXPECT_EQ(c->kv_tiers.kvstore_mb, 1024);
}

TEST(ClusterConfigTest, PoolsTakeGpusShareAndKvCacheMb) {
  auto c = ParseClusterConfig(R"(
engine: {plugin: cuda}
prefill: {count: 1, gpus: [0], gpu_memory_share: 0.3}
decode:
  count: 3
  gpus: [0, 1]
  kv_cache_mb: 20000
mixed: {count: 0, gpus: []}
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefill.count, 1);
  EXPECT_THAT(c->prefill.gpus, ElementsAre(0));
  EXPECT_EQ(c->prefill.gpu_memory_share, 0.3);
  EXPECT_EQ(c->prefill.kv_cache_mb, 0);
  EXPECT_EQ(c->decode.count, 3);
  EXPECT_THAT(c->decode.gpus, ElementsAre(0, 1));
  EXPECT_EQ(c->decode.gpu_memory_share, 0);
  EXPECT_EQ(c->decode.kv_cache_mb, 20000);
  EXPECT_TRUE(c->mixed.gpus.empty());
}

TEST(ClusterConfigTest, ShippedGpuExampleIsOnePrefillAndOneDecodeOnGpuZero) {
  auto c = LoadClusterConfig(STRATA_SOURCE_DIR "/docs/examples/cluster-gpu.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.plugin, "cuda");
  EXPECT_EQ(c->prefill.count, 1);
  EXPECT_THAT(c->prefill.gpus, ElementsAre(0));
  EXPECT_EQ(c->decode.count, 1);
  EXPECT_THAT(c->decode.gpus, ElementsAre(0));
  auto placed = PlaceWorkers(*c);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 2u);
  for (const auto& w : *placed) {
    EXPECT_EQ(w.gpu, 0);
    EXPECT_EQ(w.memory_share, 0.45);
  }
}

TEST(PlaceWorkersTest, CpuPluginKeepsPluginConfigAndGetsNoShares) {
  ClusterConfig c;
  c.engine.plugin_config = R"({"threads": 2})";
  auto placed = PlaceWorkers(c);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 2u);
  EXPECT_EQ((*placed)[0].role, "prefill");
  EXPECT_EQ((*placed)[1].role, "decode");
  for (const auto& w : *placed) {
    EXPECT_EQ(w.gpu, -1);
    EXPECT_EQ(w.plugin_config, R"({"threads": 2})");
    EXPECT_EQ(w.memory_share, 0);
    EXPECT_EQ(w.kv_cache_mb, 0);
  }
}

TEST(PlaceWorkersTest, AutomaticSharesSplitWhatExplicitSharesLeaveOnEachGpu) {
  ClusterConfig c;
  c.engine.plugin = "/opt/strata/lib/strata/libstrata_cuda.so";
  c.engine.plugin_config = R"({"streams": 2})";
  c.prefill = {2, {0, 1}, 0.5, 0};  // prefill-0 on GPU 0, prefill-1 on GPU 1, 0.5 each
  c.decode = {2, {0, 1}, 0, 0};     // automatic: 0.4 each
  c.mixed = {1, {}, 0, 0};          // no GPU id: counts as GPU 0, so GPU 0's 0.4 is split
  auto placed = PlaceWorkers(c);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->size(), 5u);
  const std::vector<std::tuple<std::string, int, double>> expected = {
      {"prefill", 0, 0.5}, {"prefill", 1, 0.5}, {"decode", 0, 0.2}, {"decode", 1, 0.4},
      {"mixed", -1, 0.2}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& w = (*placed)[i];
    EXPECT_EQ(w.role, std::get<0>(expected[i])) << i;
    EXPECT_EQ(w.gpu, std::get<1>(expected[i])) << i;
    EXPECT_NEAR(w.memory_share, std::get<2>(expected[i]), 1e-12) << i;
  }
  EXPECT_EQ((*placed)[3].plugin_config, R"({"device":1,"streams":2})");
  EXPECT_EQ((*placed)[4].plugin_config, R"({"streams": 2})");
}

TEST(PlaceWorkersTest, IsCpuPluginByNameOrPath) {
  EXPECT_TRUE(IsCpuPlugin("cpu"));
  EXPECT_TRUE(IsCpuPlugin("/opt/strata/lib/strata/libstrata_cpu.so"));
  EXPECT_FALSE(IsCpuPlugin("cuda"));
  EXPECT_FALSE(IsCpuPlugin("/opt/strata/lib/strata/libstrata_cuda.so"));
}

struct BadCase {
  const char* text;
  const char* message;  // the whole one-line error
};

class ClusterConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ClusterConfigErrorTest, NamesKeyAndLine) {
  auto c = ParseClusterConfig(GetParam().text, "cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(c.status().message()), std::string(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ClusterConfigErrorTest,
    ::testing::Values(
        BadCase{
            "model: m\nmodle: x\n",
            "cluster.yaml:2: modle: unknown key (known keys: model, host, router, prefill, "
            "decode, mixed, engine, slo, kv_tiers, restart, log_dir, api_keys, rate_limit, "
            "max_memory_mb, hide_cached_tokens, kv_hash_key_file, unknown_params, get_load_format, "
            "tool_call_parser, policy, tls, models)"},
        BadCase{"decode: {count: 2}\nmodels:\n  - {name: a, model: preset:tiny-llama}\n",
                "cluster.yaml:1: decode: with a models list, each model and its workers are set "
                "in its entry"},
        BadCase{"models:\n  - {model: preset:tiny-llama}\n",
                "cluster.yaml:1: models: entry 0: name: every model needs the name clients send"},
        BadCase{"models:\n  - {name: a}\n  - {name: a}\n",
                "cluster.yaml:1: models: model a is named twice"},
        BadCase{"models:\n  - {name: a, modle: x}\n",
                "cluster.yaml:1: models: entry 0: unknown key 'modle' (known keys: name, model, "
                "plugin, plugin_config, profile, prefill, decode, mixed)"},
        BadCase{"models:\n  - {name: a, decode: {count: -1}}\n",
                "cluster.yaml:1: models: entry 0: decode.count: must be in 0..1024, got -1"},
        BadCase{"models:\n  - {name: a}\n  - {name: b, decode: {count: 0}}\n",
                "cluster.yaml:1: models: entry 1 (b): at least one decode or mixed worker is "
                "required (decode.count + mixed.count >= 1)"},
        BadCase{"models:\n  - {name: router-x}\n",
                "cluster.yaml:1: models: model router-x: a name may not start with 'router'"},
        BadCase{"models:\n  - {name: org/m}\n  - {name: org-m}\n",
                "cluster.yaml:1: models: model org-m gives the same worker ids (org-m-...) as "
                "another model: rename one"},
        BadCase{"models: {name: a}\n",
                "cluster.yaml:1: models: expected a list of models ({name, model, ...})"},
        BadCase{"tls: yes\n",
                "cluster.yaml:1: tls: must be off, auto or a mapping {ca, cert, key}, got 'yes'"},
        BadCase{"tls:\n  ca: /a\n  cert: /b\n",
                "cluster.yaml:1: tls: needs all of ca, cert and key (PEM file paths)"},
        BadCase{"tls:\n  ca: /a\n  crt: /b\n",
                "cluster.yaml:1: tls: unknown key 'crt' (known keys: ca, cert, key)"},
        BadCase{"restart:\n  policy: sometimes\n",
                "cluster.yaml:2: restart.policy: must be on-failure, always or never, got "
                "'sometimes'"},
        BadCase{"restart: {max_consecutive: 0}\n",
                "cluster.yaml:1: restart.max_consecutive: must be in 1..1000, got 0"},
        BadCase{"kv_tiers:\n  host_policy: mru\n",
                "cluster.yaml:2: kv_tiers.host_policy: must be lru, s3-fifo, arc, w-tinylfu, "
                "prefix-tinylfu, adaptive-tinylfu or ghost-lru, got 'mru'"},
        BadCase{"engine:\n  stall_timeout_s: -1\n",
                "cluster.yaml:2: engine.stall_timeout_s: must be a number of seconds >= 0, "
                "got -1"},
        BadCase{"router:\n  worker_stream_idle_timeout_s: -3\n",
                "cluster.yaml:2: router.worker_stream_idle_timeout_s: must be a number of "
                "seconds >= 0, got -3"},
        BadCase{"engine:\n  kv_device_path: rdma\n",
                "cluster.yaml:2: engine.kv_device_path: must be auto or staged, got 'rdma'"},
        BadCase{"kv_tiers:\n  offload: lazy\n",
                "cluster.yaml:2: kv_tiers.offload: must be write-back or write-through, got "
                "'lazy'"},
        BadCase{"kv_tiers:\n  host_mb: -1\n",
                "cluster.yaml:2: kv_tiers.host_mb: must be a size in MiB in 0..1073741824, got -1"},
        BadCase{"kv_tiers: {disk_mb: 64, disk_path: /tmp/x}\n",
                "cluster.yaml: kv_tiers.disk_mb and kv_tiers.kvstore_count need "
                "kv_tiers.host_mb > 0 (blocks reach the disk and remote tiers through the host "
                "tier)"},
        BadCase{"kv_tiers: {host_mb: 8, disk_mb: 64}\n",
                "cluster.yaml: kv_tiers.disk_mb needs kv_tiers.disk_path"},
        BadCase{"router:\n  http_port: 80\n  port: 1\n",
                "cluster.yaml:3: router.port: unknown key (known keys in router: http_port, "
                "grpc_port, replicas, worker_stream_idle_timeout_s, max_inflight_per_worker, "
                "resume_settle_s, http_tls)"},
        BadCase{"router:\n  http_tls: on\n",
                "cluster.yaml:2: router.http_tls: must be off, auto or a mapping {cert, key, "
                "client_ca}, got 'on'"},
        BadCase{"router:\n  http_tls: {cert: /a}\n",
                "cluster.yaml:2: router.http_tls: needs cert and key (PEM file paths)"},
        BadCase{"router:\n  http_tls: {cert: /a, key: /b, ca: /c}\n",
                "cluster.yaml:2: router.http_tls: unknown key 'ca' (known keys: cert, key, "
                "client_ca)"},
        BadCase{"router:\n  resume_settle_s: 601\n",
                "cluster.yaml:2: router.resume_settle_s: must be a number of seconds in [0, 600], "
                "got 601"},
        BadCase{"engine:\n  detached_request_grace_s: -1\n",
                "cluster.yaml:2: engine.detached_request_grace_s: must be a number of seconds in "
                "[0, 3600], got -1"},
        BadCase{"router:\n  replicas: 0\n",
                "cluster.yaml:2: router.replicas: must be in 1..16, got 0"},
        BadCase{"router:\n  http_port: 70000\n",
                "cluster.yaml:2: router.http_port: must be in 0..65535, got 70000"},
        BadCase{"router:\n  grpc_port: -1\n",
                "cluster.yaml:2: router.grpc_port: must be in 0..65535, got -1"},
        BadCase{"router:\n  http_port: eighty\n",
                "cluster.yaml:2: router.http_port: expected an integer"},
        BadCase{"engine:\n  plugin_config: threads=2\n",
                "cluster.yaml:2: engine.plugin_config: must be a JSON object, e.g. "
                "'{\"threads\": 1}'"},
        BadCase{"engine:\n  block_size: 1.5\n",
                "cluster.yaml:2: engine.block_size: expected an integer"},
        BadCase{"\nengine:\n  block_size: 48\n",
                "cluster.yaml:3: engine.block_size: must be a power of two in 1..256, got 48"},
        BadCase{"engine:\n  block_size: 512\n",
                "cluster.yaml:2: engine.block_size: must be a power of two in 1..256, got 512"},
        BadCase{"prefill:\n  count: -1\n",
                "cluster.yaml:2: prefill.count: must be in 0..1024, got -1"},
        BadCase{"decode: {count: 0}\n",
                "cluster.yaml:1: at least one decode or mixed worker is required "
                "(decode.count + mixed.count >= 1)"},
        BadCase{"slo:\n  ttft_s: 0\n",
                "cluster.yaml:2: slo.ttft_s: must be a positive number of seconds, got 0"},
        BadCase{"slo:\n  tpot_s: fast\n", "cluster.yaml:2: slo.tpot_s: expected a number"},
        BadCase{"model: [a, b]\n", "cluster.yaml:1: model: expected a string"},
        BadCase{"model:\n", "cluster.yaml:1: model: expected a string"},
        BadCase{"prefill: 2\n",
                "cluster.yaml:1: prefill: expected a mapping with keys count, gpus, "
                "gpu_memory_share, kv_cache_mb"},
        BadCase{"engine: {plugin: cuda}\nprefill:\n  gpus: 0\n",
                "cluster.yaml:3: prefill.gpus: expected a list of GPU ids, e.g. [0, 1]"},
        BadCase{"engine: {plugin: cuda}\ndecode: {gpus: [0, one]}\n",
                "cluster.yaml:2: decode.gpus: expected a list of GPU ids, e.g. [0, 1]"},
        BadCase{"engine: {plugin: cuda}\ndecode: {gpus: [-1]}\n",
                "cluster.yaml:2: decode.gpus: GPU ids must be in 0..1023, got -1"},
        BadCase{"decode:\n  gpu_memory_share: 1.5\n",
                "cluster.yaml:2: decode.gpu_memory_share: must be in (0, 1], or 0 for an "
                "automatic share, got 1.5"},
        BadCase{"decode:\n  gpu_memory_share: -0.1\n",
                "cluster.yaml:2: decode.gpu_memory_share: must be in (0, 1], or 0 for an "
                "automatic share, got -0.1"},
        BadCase{
            "mixed:\n  kv_cache_mb: -5\n",
            "cluster.yaml:2: mixed.kv_cache_mb: must be a size in MiB in 0..1073741824, got -5"},
        BadCase{"decode:\n  gpu_memory_share: 0.4\n  kv_cache_mb: 1024\n",
                "cluster.yaml:3: decode.kv_cache_mb: set one of decode.gpu_memory_share and "
                "decode.kv_cache_mb (each sizes the KV pool)"},
        BadCase{"engine: {num_kv_blocks: 64}\nprefill:\n  kv_cache_mb: 1024\n",
                "cluster.yaml:3: prefill.kv_cache_mb: engine.num_kv_blocks sizes every worker's "
                "KV pool already; set one of them"},
        BadCase{"prefill:\n  count: 1\n  gpus: [0]\n",
                "cluster.yaml:3: prefill.gpus: the cpu plugin runs on the host; GPU ids need a "
                "GPU plugin (engine.plugin: cuda)"},
        BadCase{"engine:\n  plugin: cuda\n  plugin_config: '{\"device\": 1}'\n"
                "decode:\n  gpus: [0]\n",
                "cluster.yaml:5: decode.gpus: engine.plugin_config sets \"device\" as well; "
                "remove it there (gpus gives each worker its device)"},
        BadCase{"engine: {plugin: cuda}\nprefill: {gpus: [0], gpu_memory_share: 0.7}\n"
                "decode: {gpus: [0], gpu_memory_share: 0.5}\n",
                "cluster.yaml:2: prefill.gpu_memory_share: the gpu_memory_share of the workers "
                "on GPU 0 adds up to 1.2, more than 1"},
        BadCase{"engine: {plugin: cuda}\nprefill: {gpus: [1], gpu_memory_share: 0.9}\n"
                "decode: {gpus: [1]}\n",
                "cluster.yaml:2: prefill.gpu_memory_share: the gpu_memory_share of the workers "
                "on GPU 1 adds up to 0.9, leaving nothing of 0.9 for the workers there "
                "without gpu_memory_share or kv_cache_mb"},
        BadCase{"router: 8000\n",
                "cluster.yaml:1: router: expected a mapping with keys http_port, grpc_port, "
                "replicas, worker_stream_idle_timeout_s, max_inflight_per_worker, resume_settle_s, "
                "http_tls"},
        BadCase{"api_keys: key\n", "cluster.yaml:1: api_keys: expected a list of strings"},
        BadCase{"unknown_params: loud\n",
                "cluster.yaml:1: unknown_params: must be reject, warn or ignore, got 'loud'"},
        BadCase{"get_load_format: vllm\n",
                "cluster.yaml:1: get_load_format: must be sglang or vllm-router, got 'vllm'"},
        BadCase{"tool_call_parser: qwen\n",
                "cluster.yaml:1: tool_call_parser: must be auto, none, llama3_json, hermes or "
                "mistral, got 'qwen'"},
        BadCase{"policy: a\npolicy: b\n", "cluster.yaml:2: policy: duplicate key"},
        BadCase{"- a\n- b\n", "cluster.yaml:1: expected a mapping at the top level"},
        BadCase{"model: [unclosed\n",
                "cluster.yaml:2: invalid YAML: end of sequence flow not found"}));

TEST(ClusterConfigTest, LoadMissingFileIsNotFound) {
  auto c = LoadClusterConfig("/nonexistent/cluster.yaml");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("/nonexistent/cluster.yaml"));
}

TEST(ClusterConfigTest, ValidateCatchesOverrides) {
  ClusterConfig c;
  c.decode.count = 0;
  EXPECT_THAT(ValidateClusterConfig(c).message(), HasSubstr("at least one decode or mixed"));
  c.mixed.count = 1;
  EXPECT_TRUE(ValidateClusterConfig(c).ok());
  c.router.http_port = 65536;
  EXPECT_EQ(ValidateClusterConfig(c).message(), "router.http_port: must be in 0..65535, got 65536");
  c.router.http_port = 8000;
  c.decode.gpus = {0};  // e.g. `strata up --gpus 0` with the default cpu plugin
  EXPECT_EQ(ValidateClusterConfig(c).message(),
            "decode.gpus: the cpu plugin runs on the host; GPU ids need a GPU plugin "
            "(engine.plugin: cuda)");
  c.engine.plugin = "cuda";
  EXPECT_TRUE(ValidateClusterConfig(c).ok());
  c.decode.gpus = {1024};
  EXPECT_EQ(ValidateClusterConfig(c).message(), "decode.gpus: GPU ids must be in 0..1023, got 1024");
}

TEST(ClusterConfigTest, DefaultLogDirUsesXdgRuntimeDir) {
  setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
  EXPECT_THAT(DefaultLogDir(), ::testing::StartsWith("/run/user/4242/strata/run-"));
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_THAT(DefaultLogDir(), ::testing::StartsWith("/tmp/strata-"));
}

}  // namespace
}  // namespace strata
