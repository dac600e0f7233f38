// Decode-step replay (model_runner_graph.cc) on CI, where there is no GPU: a plugin table that
// forwards every entry to the CPU plugin and implements the graph_* entries by recording —
// between graph_capture_begin and _end each op is kept, with copies of its descriptors, and run
// at graph_launch. A runner with replay and one without, on the same random-weight models and
// the same KV layout, must sample the same ids step after step while batches and contexts move
// between buckets, and the replaying one must really record and launch graphs. Both with the
// plugin's optional fused entries (attention_prologue, gemm_silu_mul, moe_route_experts) and
// without them (the engine's separate-op paths).
#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "nlohmann/json.hpp"
#include "strata/engine/model_runner.h"
#include "strata/engine/weight_source.h"
#include "strata/plugin/plugin.h"

namespace strata {
namespace {

const strata_plugin_api_v1* g_cpu = nullptr;  // the CPU plugin's table
struct Recording {
  std::vector<std::function<strata_status()>> ops;
};
Recording* g_recording = nullptr;  // the graph being recorded (one engine thread)

// Runs the op now, or keeps it for graph_launch while recording.
strata_status Record(std::function<strata_status()> op) {
  if (g_recording == nullptr) return op();
  g_recording->ops.push_back(std::move(op));
  return STRATA_OK;
}

template <typename T>
std::optional<T> Own(const T* p) {
  return p != nullptr ? std::optional<T>(*p) : std::nullopt;
}
template <typename T>
T* Ptr(std::optional<T>& o) {
  return o.has_value() ? &*o : nullptr;
}

using Tensor = strata_tensor;
using OptT = std::optional<strata_tensor>;

strata_status Embedding(strata_backend b, strata_stream s, const Tensor* t, const Tensor* ids,
                        Tensor* out) {
  return Record(
      [=, t = *t, i = *ids, o = *out]() mutable { return g_cpu->embedding(b, s, &t, &i, &o); });
}
strata_status RmsNorm(strata_backend b, strata_stream s, const Tensor* x, Tensor* res,
                      const Tensor* w, float eps, Tensor* out) {
  return Record([=, x = *x, r = Own(res), w = *w, o = *out]() mutable {
    return g_cpu->rms_norm(b, s, &x, Ptr(r), &w, eps, &o);
  });
}
strata_status Gemm(strata_backend b, strata_stream s, const Tensor* x, const Tensor* w,
                   const Tensor* bias, int32_t acc, Tensor* out) {
  return Record([=, x = *x, w = *w, bi = Own(bias), o = *out]() mutable {
    return g_cpu->gemm(b, s, &x, &w, Ptr(bi), acc, &o);
  });
}
strata_status Rope(strata_backend b, strata_stream s, Tensor* q, Tensor* k, const Tensor* pos,
                   const Tensor* inv, float mscale) {
  return Record([=, q = *q, k = Own(k), p = *pos, i = *inv]() mutable {
    return g_cpu->rope(b, s, &q, Ptr(k), &p, &i, mscale);
  });
}
strata_status SiluMul(strata_backend b, strata_stream s, const Tensor* x, Tensor* out) {
  return Record([=, x = *x, o = *out]() mutable { return g_cpu->silu_mul(b, s, &x, &o); });
}
strata_status GatherRows(strata_backend b, strata_stream s, const Tensor* x, const Tensor* rows,
                         Tensor* out) {
  return Record(
      [=, x = *x, r = *rows, o = *out]() mutable { return g_cpu->gather_rows(b, s, &x, &r, &o); });
}
strata_status KvAppend(strata_backend b, strata_stream s, const strata_kv_cache* c, int32_t l,
                       const Tensor* k, const Tensor* v, const Tensor* slots) {
  return Record([=, c = *c, k = *k, v = *v, sl = *slots]() mutable {
    return g_cpu->kv_append(b, s, &c, l, &k, &v, &sl);
  });
}
strata_status AttentionPrologue(strata_backend b, strata_stream s, Tensor* q, Tensor* k,
                                const Tensor* v, const Tensor* qn, const Tensor* kn, float eps,
                                const Tensor* pos, const Tensor* inv, float mscale,
                                const strata_kv_cache* c, int32_t l, const Tensor* slots) {
  return Record([=, q = *q, k = *k, v = *v, qn = Own(qn), kn = Own(kn), p = *pos, i = *inv, c = *c,
                 sl = *slots]() mutable {
    return g_cpu->attention_prologue(b, s, &q, &k, &v, Ptr(qn), Ptr(kn), eps, &p, &i, mscale, &c, l,
                                     &sl);
  });
}
strata_status GemmSiluMul(strata_backend b, strata_stream s, const Tensor* x, const Tensor* w,
                          const Tensor* bias, Tensor* scratch, Tensor* out) {
  return Record([=, x = *x, w = *w, bi = Own(bias), sc = *scratch, o = *out]() mutable {
    return g_cpu->gemm_silu_mul(b, s, &x, &w, Ptr(bi), &sc, &o);
  });
}
strata_status AttentionDecode(strata_backend b, strata_stream s, const strata_kv_cache* c,
                              const strata_attention_batch* batch, const strata_attention_params* p,
                              const Tensor* q, Tensor* out) {
  return Record([=, c = *c, ba = *batch, p = *p, q = *q, o = *out]() mutable {
    return g_cpu->attention_decode(b, s, &c, &ba, &p, &q, &o);
  });
}
strata_status AttentionPrefill(strata_backend b, strata_stream s, const strata_kv_cache* c,
                               const strata_attention_batch* batch,
                               const strata_attention_params* p, const Tensor* q, Tensor* out) {
  return Record([=, c = *c, ba = *batch, p = *p, q = *q, o = *out]() mutable {
    return g_cpu->attention_prefill(b, s, &c, &ba, &p, &q, &o);
  });
}
strata_status MoeRoute(strata_backend b, strata_stream s, const Tensor* lg, int32_t k, int32_t rn,
                       Tensor* w, Tensor* ids) {
  return Record([=, lg = *lg, w = *w, i = *ids]() mutable {
    return g_cpu->moe_route(b, s, &lg, k, rn, &w, &i);
  });
}
strata_status MoeExperts(strata_backend b, strata_stream s, const Tensor* x, const Tensor* tw,
                         const Tensor* ti, const Tensor* gu, const Tensor* dn, Tensor* out) {
  return Record([=, x = *x, tw = *tw, ti = *ti, gu = *gu, dn = *dn, o = *out]() mutable {
    return g_cpu->moe_experts(b, s, &x, &tw, &ti, &gu, &dn, &o);
  });
}
strata_status MoeRouteExperts(strata_backend b, strata_stream s, const Tensor* x, const Tensor* lg,
                              int32_t k, int32_t rn, Tensor* tw, Tensor* ti, const Tensor* gu,
                              const Tensor* dn, Tensor* out) {
  return Record([=, x = *x, lg = *lg, tw = *tw, ti = *ti, gu = *gu, dn = *dn, o = *out]() mutable {
    return g_cpu->moe_route_experts(b, s, &x, &lg, k, rn, &tw, &ti, &gu, &dn, &o);
  });
}
strata_status Sample(strata_backend b, strata_stream s, const Tensor* lg,
                     const strata_sample_params* p, Tensor* tok, Tensor* lp, Tensor* top) {
  return Record([=, lg = *lg, t = *tok, l = Own(lp), tp = Own(top)]() mutable {
    return g_cpu->sample(b, s, &lg, p, &t, Ptr(l), Ptr(tp));
  });
}

int g_launches = 0;
strata_status Begin(strata_backend, strata_stream) {
  if (g_recording != nullptr) return STRATA_ERR_INVALID_ARGUMENT;
  g_recording = new Recording();
  return STRATA_OK;
}
strata_status End(strata_backend, strata_stream, strata_graph* out) {
  *out = reinterpret_cast<strata_graph>(g_recording);
  g_recording = nullptr;
  return STRATA_OK;
}
strata_status Launch(strata_backend, strata_stream, strata_graph g) {
  ++g_launches;
  for (auto& op : reinterpret_cast<Recording*>(g)->ops) {
    if (strata_status st = op(); st != STRATA_OK) return st;
  }
  return STRATA_OK;
}
void Destroy(strata_backend, strata_graph g) { delete reinterpret_cast<Recording*>(g); }

// The CPU plugin's table with recording ops and the graph entries; without `fused`, with no
// attention_prologue, gemm_silu_mul and moe_route_experts entries (the engine then runs the ops
// they stand for).
std::shared_ptr<Plugin> RecordingPlugin(const std::shared_ptr<Plugin>& cpu, bool fused) {
  static strata_plugin_api_v1 tables[2];
  strata_plugin_api_v1& table = tables[fused ? 1 : 0];
  g_cpu = &cpu->api();
  table = cpu->api();
  table.attention_prologue = fused ? AttentionPrologue : nullptr;
  table.gemm_silu_mul = fused ? GemmSiluMul : nullptr;
  table.moe_route_experts = fused ? MoeRouteExperts : nullptr;
  table.embedding = Embedding;
  table.rms_norm = RmsNorm;
  table.gemm = Gemm;
  table.rope = Rope;
  table.silu_mul = SiluMul;
  table.gather_rows = GatherRows;
  table.kv_append = KvAppend;
  table.attention_prefill = AttentionPrefill;
  table.attention_decode = AttentionDecode;
  table.moe_route = MoeRoute;
  table.moe_experts = MoeExperts;
  table.sample = Sample;
  table.graph_capture_begin = Begin;
  table.graph_capture_end = End;
  table.graph_launch = Launch;
  table.graph_destroy = Destroy;
  auto p = Plugin::FromTable(&table, "recording cpu");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

ModelConfig Config(const char* text) {
  auto c = ModelConfig::FromJson(nlohmann::json::parse(text), "test");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig();
}

constexpr const char* kLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 384, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": false})";
constexpr const char* kMoe = R"({"architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "norm_topk_prob": true, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": true})";

std::unique_ptr<ModelRunner> Runner(std::shared_ptr<Plugin> plugin, const ModelConfig& c,
                                    bool graphs) {
  RunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 256;
  o.graphs = graphs;
  auto r = ModelRunner::Create(std::move(plugin), c, RandomWeights(c, 3, 0.05f), o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

// Sequences of different prompt lengths decode side by side; sequence 2 stops after 5 steps
// (the batch drops from 3 to 2: another bucket), and sequence 0 crosses 512 tokens of context
// (another context bucket). Returns every step's ids and their log-probabilities. With
// `masked`, sequences 0 and 1 may only draw the ids t with (t + step + s) % 3 == 0 (token masks
// applied on the device; sequence 2 stays unmasked), which every drawn id must satisfy.
bool Allowed(int32_t t, int step, int s) { return (t + step + s) % 3 == 0; }

std::vector<std::vector<double>> Decode(ModelRunner& r, int vocab, bool masked = false) {
  const std::vector<int> prompt_len = {500, 40, 130};
  const int kSteps = 20;
  std::vector<std::vector<int32_t>> tokens(3);
  std::vector<std::vector<BlockId>> tables(3);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < prompt_len[s]; ++i) tokens[s].push_back((s * 31 + i * 7 + 5) % vocab);
    tables[s].resize((prompt_len[s] + kSteps) / 16 + 1);
    std::iota(tables[s].begin(), tables[s].end(), s * 80);
    ForwardSeq f{tokens[s], 0, tables[s], ForwardSeq::Logits::kNone};
    EXPECT_TRUE(r.Forward(std::span(&f, 1)).ok());
  }
  std::vector<std::vector<double>> out;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<ForwardSeq> seqs;
    std::vector<strata_sample_params> params;
    const int live = step < 5 ? 3 : 2;
    for (int s = 0; s < live; ++s) {
      const int32_t done = static_cast<int32_t>(tokens[s].size()) - 1;
      seqs.push_back({std::span(&tokens[s][done], 1), done, tables[s], ForwardSeq::Logits::kLast});
      strata_sample_params p{};
      p.temperature = s == 1 ? 0.9f : 0.0f;  // one seeded row, two greedy
      p.top_p = 1.0f;
      p.uniform = 0.1 + 0.04 * step;
      p.num_logprobs = s == 2 ? 2 : 0;
      params.push_back(p);
    }
    StepMasks masks;
    if (masked) {
      masks.rows = {0, 1};
      masks.fill = [&](uint32_t* words) {
        const int n = (vocab + 31) / 32;
        for (int s = 0; s < 2; ++s) {
          for (int32_t t = 0; t < vocab; ++t) {
            if (Allowed(t, step, s)) words[s * n + t / 32] |= 1u << (t % 32);
          }
        }
      };
    }
    auto ids = r.ForwardSampled(seqs, params, {}, nullptr, masked ? &masks : nullptr);
    EXPECT_TRUE(ids.ok()) << ids.status();
    if (!ids.ok()) break;
    out.emplace_back();
    for (int s = 0; masked && s < 2; ++s) {
      EXPECT_TRUE(Allowed((*ids)[s].token, step, s)) << "step " << step << " row " << s;
    }
    for (int s = 0; s < live; ++s) {
      out.back().push_back((*ids)[s].token);
      out.back().push_back((*ids)[s].logprob);
      for (const auto& top : (*ids)[s].top) out.back().push_back(top.logprob);
      tokens[s].push_back((*ids)[s].token);
    }
  }
  return out;
}

// The CPU plugin as loaded, or without its fused entries (attention_prologue, gemm_silu_mul,
// moe_route_experts).
std::shared_ptr<Plugin> PlainPlugin(const std::shared_ptr<Plugin>& cpu, bool fused) {
  if (fused) return cpu;
  static strata_plugin_api_v1 table;
  table = cpu->api();
  table.attention_prologue = nullptr;
  table.gemm_silu_mul = nullptr;
  table.moe_route_experts = nullptr;
  auto p = Plugin::FromTable(&table, "cpu without its fused entries");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

// (model config, whether the plugins have the fused entries)
class GraphReplayTest : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

TEST_P(GraphReplayTest, ReplayedDecodeStepsSampleWhatOpByOpStepsSample) {
  auto cpu = LoadPlugin("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const auto [config, fused] = GetParam();
  const ModelConfig c = Config(config);
  auto plain = Runner(PlainPlugin(*cpu, fused), c, /*graphs=*/false);
  auto replaying = Runner(RecordingPlugin(*cpu, fused), c, /*graphs=*/true);
  ASSERT_TRUE(plain && replaying);
  ASSERT_TRUE(replaying->backend().plugin().has_graphs());
  g_launches = 0;
  const auto expected = Decode(*plain, c.vocab_size);
  const auto got = Decode(*replaying, c.vocab_size);
  EXPECT_EQ(got, expected);
  // The engine's other path (separate ops instead of the fused entries, or the reverse) gives
  // the same ids and log-probabilities: the CPU plugin's fused entries are those ops.
  auto other = Runner(PlainPlugin(*cpu, !fused), c, /*graphs=*/false);
  ASSERT_TRUE(other);
  EXPECT_EQ(Decode(*other, c.vocab_size), expected);
  const auto stats = replaying->graph_stats();
  // Three buckets (batch 4 at context 512, batch 2 at 512, batch 2 at 1024), each run op by op
  // once, recorded once, then replayed.
  EXPECT_GE(stats.recordings, 3);
  EXPECT_GE(stats.launches, 10);
  EXPECT_EQ(stats.launches, g_launches);
  EXPECT_EQ(stats.fallbacks, 0);
}

// Steps with token masks: the replaying runner records graphs without the sampler and masks
// and samples after them; both runners draw the same ids, all inside the masks, and the masked
// rows' draws differ from the unmasked run's (the masks do something).
TEST_P(GraphReplayTest, MaskedStepsReplayAndDrawOnlyAllowedIds) {
  auto cpu = LoadPlugin("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const auto [config, fused] = GetParam();
  const ModelConfig c = Config(config);
  auto plain = Runner(PlainPlugin(*cpu, fused), c, /*graphs=*/false);
  auto replaying = Runner(RecordingPlugin(*cpu, fused), c, /*graphs=*/true);
  ASSERT_TRUE(plain && replaying);
  ASSERT_TRUE(plain->can_mask() && replaying->can_mask());
  g_launches = 0;
  const auto expected = Decode(*plain, c.vocab_size, /*masked=*/true);
  const auto got = Decode(*replaying, c.vocab_size, /*masked=*/true);
  EXPECT_EQ(got, expected);
  EXPECT_NE(Decode(*plain, c.vocab_size), expected);
  const auto stats = replaying->graph_stats();
  EXPECT_GE(stats.recordings, 3);
  EXPECT_GE(stats.launches, 10);
  EXPECT_EQ(stats.fallbacks, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, GraphReplayTest,
                         ::testing::Combine(::testing::Values(kLlama, kMoe), ::testing::Bool()));

}  // namespace
}  // namespace strata
