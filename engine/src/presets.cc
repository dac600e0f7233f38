#include "strata/engine/presets.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "strata/common/block_hash.h"
#include "strata/common/file_util.h"
#include "strata/common/half.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/engine/safetensors.h"
#include "strata/engine/sampling.h"
#include "strata/engine/weight_source.h"
#include "strata/text/tokenizer.h"

namespace strata {
namespace {

// Bump when a preset's bytes change, so cached copies are rewritten.
constexpr int kPresetVersion = 3;

const char* const kSpecialTokens[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>",
                                      "<|im_end|>"};

// Text the preset tokenizers are trained on: enough English, code and numbers for a few
// hundred merges. Generated text from random weights is noise whatever the tokenizer.
constexpr char kCorpus[] = R"(strata is a disaggregated serving system for large language models.
A router receives each request, tokenizes the prompt and computes the hashes of its blocks.
The prefill worker computes the key and value cache of the prompt, and the decode worker
generates the answer one token at a time, in a continuous batch with other requests.
The capital of France is Paris. The capital of Japan is Tokyo. The capital of Italy is Rome.
Once upon a time there was a small model that wanted to answer every question quickly.
It read the question, thought about the answer, and then wrote it down, word by word.
The quick brown fox jumps over the lazy dog. The five boxing wizards jump quickly.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 256 512 1024 2048 4096 8192 3.14159 2.71828.
def generate(prompt, max_tokens=16):
    tokens = tokenize(prompt)
    for step in range(max_tokens):
        logits = model.forward(tokens)
        tokens.append(sample(logits))
    return detokenize(tokens)
int main(int argc, char** argv) { return run(argc, argv); }
Time to first token and time per output token are the two latencies that users feel.
Goodput counts the requests per second that meet both of their service level objectives.
The key value cache is stored in blocks; each block holds the keys and values of all layers.
Blocks move from the GPU to host memory, then to a local disk, then to remote nodes.
Hello, world! How are you today? I am fine, thank you. What is your name? My name is strata.
)";

struct PresetSpec {
  const char* name;
  const char* description;
  const char* default_dtype;
  int tokenizer_vocab;  // tokens before the special tokens
  ModelConfig (*config)();
  // Real-shaped presets: weights generated where the model loads (kRandomWeightsFile), the
  // tokenizer filled to the real vocab size.
  bool real_shape = false;
};

ModelConfig BaseLlama(int vocab, int hidden, int layers, int heads, int kv_heads, int inter) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.family = ModelFamily::kLlama;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 1024;
  c.torch_dtype = "float32";
  return c;
}

ModelConfig TinyLlama() { return BaseLlama(1024, 256, 4, 8, 2, 640); }
ModelConfig TinyLlama32k() {
  ModelConfig c = TinyLlama();
  c.max_position_embeddings = 32768;
  return c;
}
ModelConfig Llama100m() { return BaseLlama(32768, 768, 12, 12, 4, 2048); }

ModelConfig TinyMoe() {
  ModelConfig c = BaseLlama(1024, 256, 4, 8, 2, 512);
  c.architecture = "Qwen3MoeForCausalLM";
  c.model_type = "qwen3_moe";
  c.family = ModelFamily::kQwen3Moe;
  c.qk_norm = true;
  c.rope_scaling = RopeScaling();
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 256;
  c.norm_topk_prob = true;
  c.decoder_sparse_step = 1;
  return c;
}

// A real model's config.json (the keys that shape the compute and the vocab).
ModelConfig RealShape(const char* config_json, const char* name) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(nlohmann::json::parse(config_json), name);
  STRATA_CHECK(c.ok()) << c.status();
  return *std::move(c);
}

ModelConfig Llama31_8bShape() {
  return RealShape(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": false, "torch_dtype": "bfloat16"})",
                   "llama-3.1-8b-shape");
}

ModelConfig Qwen3_30bA3bShape() {
  return RealShape(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
    "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
    "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "use_sliding_window": false, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16"})",
                   "qwen3-30b-a3b-shape");
}

ModelConfig Mixtral8x7bShape() {
  return RealShape(R"({
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32000,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16"})",
                   "mixtral-8x7b-shape");
}

constexpr int kSpecialCount = static_cast<int>(std::size(kSpecialTokens));

const PresetSpec kPresets[] = {
    {"tiny-llama", "Llama-3-style dense model, 4 layers, hidden 256, GQA 8/2 (~4M params)",
     "float32", 1024, TinyLlama},
    {"tiny-llama-32k", "tiny-llama with a 32,768-token context (long-prompt benchmarks)",
     "float32", 1024, TinyLlama32k},
    {"tiny-moe", "Qwen3-MoE-style model, 4 layers, 8 experts top-2, QK-norm (~10M params)",
     "float32", 1024, TinyMoe},
    {"llama-100m", "Llama-3-style dense model, 12 layers, hidden 768 (~110M params)", "bfloat16",
     1024, Llama100m},
    {"llama-3.1-8b-shape",
     "Llama-3.1-8B's architecture and vocab (8.0B params, 16 GB in bf16), random weights made "
     "where it loads",
     "bfloat16", 128256 - kSpecialCount, Llama31_8bShape, true},
    {"qwen3-30b-a3b-shape",
     "Qwen3-30B-A3B's architecture and vocab (30.5B params, 128 experts top-8, 61 GB in bf16), "
     "random weights made where it loads",
     "bfloat16", 151936 - kSpecialCount, Qwen3_30bA3bShape, true},
    {"mixtral-8x7b-shape",
     "Mixtral-8x7B's architecture and vocab (46.7B params, 8 experts top-2, 93 GB in bf16), "
     "random weights made where it loads",
     "bfloat16", 32000 - kSpecialCount, Mixtral8x7bShape, true},
};

const PresetSpec* FindPreset(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  enum class Init { kNormal, kOnes } init;
  double std = 0.0;
};

std::vector<TensorSpec> PresetTensors(const ModelConfig& c) {
  using I = TensorSpec::Init;
  const int64_t h = c.hidden_size, d = c.head_dim, q = c.num_heads * d, kv = c.num_kv_heads * d;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(h));
  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, I::kNormal, 1.0});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t.push_back({p + "input_layernorm.weight", {h}, I::kOnes});
    t.push_back({p + "self_attn.q_proj.weight", {q, h}, I::kNormal, in_std});
    t.push_back({p + "self_attn.k_proj.weight", {kv, h}, I::kNormal, in_std});
    t.push_back({p + "self_attn.v_proj.weight", {kv, h}, I::kNormal, in_std});
    t.push_back({p + "self_attn.o_proj.weight", {h, q}, I::kNormal, 1.0 / std::sqrt(double(q))});
    if (c.qk_norm) {
      t.push_back({p + "self_attn.q_norm.weight", {d}, I::kOnes});
      t.push_back({p + "self_attn.k_norm.weight", {d}, I::kOnes});
    }
    t.push_back({p + "post_attention_layernorm.weight", {h}, I::kOnes});
    if (c.IsMoeLayer(l)) {
      const int64_t i = c.moe_intermediate_size;
      t.push_back({p + "mlp.gate.weight", {c.num_experts, h}, I::kNormal, in_std});
      for (int e = 0; e < c.num_experts; ++e) {
        const std::string x = absl::StrCat(p, "mlp.experts.", e, ".");
        t.push_back({x + "gate_proj.weight", {i, h}, I::kNormal, in_std});
        t.push_back({x + "up_proj.weight", {i, h}, I::kNormal, in_std});
        t.push_back({x + "down_proj.weight", {h, i}, I::kNormal, 1.0 / std::sqrt(double(i))});
      }
    } else {
      const int64_t i = c.intermediate_size;
      t.push_back({p + "mlp.gate_proj.weight", {i, h}, I::kNormal, in_std});
      t.push_back({p + "mlp.up_proj.weight", {i, h}, I::kNormal, in_std});
      t.push_back({p + "mlp.down_proj.weight", {h, i}, I::kNormal, 1.0 / std::sqrt(double(i))});
    }
  }
  t.push_back({"model.norm.weight", {h}, I::kOnes});
  if (!c.tie_word_embeddings)
    t.push_back({"lm_head.weight", {c.vocab_size, h}, I::kNormal, in_std});
  return t;
}

// Deterministic values for one tensor: the stream depends only on the preset and tensor name.
std::vector<float> InitValues(const std::string& preset, const TensorSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n), 1.0f);
  if (spec.init == TensorSpec::Init::kOnes) return v;
  Rng rng(BlockHashSeed(preset, spec.name));
  for (int64_t i = 0; i < n; i += 2) {  // Box-Muller, two normals per draw
    const double u1 = 1.0 - rng.Uniform(), u2 = rng.Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)) * spec.std;
    v[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) v[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
  }
  return v;
}

absl::Status WriteWeights(const std::string& preset, const ModelConfig& c, bool bf16,
                          const std::string& path) {
  SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");
  for (const TensorSpec& spec : PresetTensors(c)) {
    std::vector<float> v = InitValues(preset, spec);
    if (!bf16) {
      STRATA_RETURN_IF_ERROR(writer.AddF32(spec.name, spec.shape, v));
      continue;
    }
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = FloatToBf16(v[i]);
    STRATA_RETURN_IF_ERROR(
        writer.Add(spec.name, DType::kBF16, spec.shape,
                   std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(h.data()),
                                            h.size() * sizeof(uint16_t))));
  }
  return writer.WriteFile(path);
}

// A Llama-3-style chat template (Jinja, as Hugging Face stores it).
constexpr char kChatTemplate[] =
    "{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

absl::Status WriteTokenizerConfig(const std::string& dir, int max_length) {
  nlohmann::json cfg = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"bos_token", "<|begin_of_text|>"},
      {"eos_token", "<|end_of_text|>"},
      {"pad_token", "<|end_of_text|>"},
      {"model_max_length", max_length},
      {"clean_up_tokenization_spaces", false},
      {"chat_template", kChatTemplate},
  };
  return WriteStringToFile(dir + "/tokenizer_config.json", cfg.dump(2) + "\n");
}

}  // namespace

std::vector<PresetInfo> ListPresets() {
  std::vector<PresetInfo> out;
  for (const auto& p : kPresets) out.push_back({p.name, p.description});
  return out;
}

absl::StatusOr<ModelConfig> PresetConfig(const std::string& name) {
  const PresetSpec* p = FindPreset(name);
  if (p == nullptr) {
    std::vector<std::string> names;
    for (const auto& q : kPresets) names.push_back(q.name);
    return absl::NotFoundError(
        absl::StrCat("unknown preset '", name, "'; known presets: ", absl::StrJoin(names, ", ")));
  }
  return p->config();
}

absl::Status WritePreset(const std::string& name, const std::string& out_dir,
                         const std::string& dtype) {
  STRATA_ASSIGN_OR_RETURN(ModelConfig c, PresetConfig(name));
  const PresetSpec* p = FindPreset(name);
  const std::string dt = dtype.empty() ? p->default_dtype : dtype;
  if (dt != "float32" && dt != "bfloat16") {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype must be float32 or bfloat16, got '", dt, "'"));
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(out_dir, ": ", ec.message()));
  std::vector<std::string> specials(std::begin(kSpecialTokens), std::end(kSpecialTokens));
  STRATA_ASSIGN_OR_RETURN(std::string tok_json,
                          TrainByteLevelBpe(kCorpus, p->tokenizer_vocab, specials,
                                            kSpecialTokens[0], /*fill_to_vocab_size=*/p->real_shape));
  STRATA_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromJson(tok_json, "preset tokenizer"));
  // The embedding covers every tokenizer id, rounded up to a multiple of 64 like real models.
  c.vocab_size = std::max(c.vocab_size, (tok->vocab_size() + 63) / 64 * 64);
  c.bos_token_id = *tok->TokenToId("<|begin_of_text|>");
  c.eos_token_ids = {*tok->TokenToId("<|end_of_text|>"), *tok->TokenToId("<|im_end|>")};
  c.torch_dtype = dt;
  STRATA_RETURN_IF_ERROR(WriteStringToFile(out_dir + "/tokenizer.json", tok_json));
  STRATA_RETURN_IF_ERROR(WriteTokenizerConfig(out_dir, c.max_position_embeddings));
  STRATA_RETURN_IF_ERROR(WriteStringToFile(out_dir + "/config.json", c.ToJson().dump(2) + "\n"));
  nlohmann::json gen = {{"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_ids}};
  STRATA_RETURN_IF_ERROR(
      WriteStringToFile(out_dir + "/generation_config.json", gen.dump(2) + "\n"));
  if (p->real_shape) {
    return WriteRandomWeightsSpec(out_dir, {.seed = BlockHashSeed(name), .stddev = 0.02f});
  }
  return WriteWeights(name, c, dt == "bfloat16", out_dir + "/model.safetensors");
}

absl::StatusOr<std::string> ResolveModelPath(const std::string& spec) {
  constexpr std::string_view kPrefix = "preset:";
  if (!spec.starts_with(kPrefix)) return spec;
  const std::string name = spec.substr(kPrefix.size());
  STRATA_RETURN_IF_ERROR(PresetConfig(name).status());
  std::string root;
  if (const char* env = std::getenv("STRATA_CACHE_DIR")) {
    root = env;
  } else if (const char* home = std::getenv("HOME")) {
    root = absl::StrCat(home, "/.cache/strata");
  } else {
    root = "/tmp/strata-cache";
  }
  const std::string dir = absl::StrCat(root, "/presets/", name, "-v", kPresetVersion);
  // A preset is complete when its weights (or their spec, written last) are there.
  const auto complete = [](const std::string& d) {
    std::error_code ec;
    return std::filesystem::exists(d + "/model.safetensors", ec) ||
           std::filesystem::exists(absl::StrCat(d, "/", kRandomWeightsFile), ec);
  };
  std::error_code ec;
  if (complete(dir)) return dir;
  // Write into a private temp dir, then rename: concurrent first uses never see half a preset.
  const std::string tmp = absl::StrCat(dir, ".tmp-", ::getpid());
  STRATA_RETURN_IF_ERROR(WritePreset(name, tmp));
  std::filesystem::rename(tmp, dir, ec);
  if (ec) {
    std::filesystem::remove_all(tmp, ec);
    if (!complete(dir)) {
      return absl::InternalError(absl::StrCat("cannot create ", dir));
    }
  }
  return dir;
}

std::string ServedModelName(const std::string& spec) {
  constexpr std::string_view kPrefix = "preset:";
  if (spec.starts_with(kPrefix)) return spec.substr(kPrefix.size());
  std::string s = spec;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  const size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

}  // namespace strata
