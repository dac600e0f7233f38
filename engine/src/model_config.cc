// config.json parsing and writing. Defaults for omitted keys follow the transformers 5.x config
// class of each family (checked against transformers 5.24), so a config means here what it means
// to the reference implementation.
#include "strata/engine/model_config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "strata/common/file_util.h"
#include "strata/common/status_macros.h"

namespace strata {
namespace {

using nlohmann::json;

// What differs between the families' transformers config classes.
struct FamilyInfo {
  ModelFamily family;
  int default_bos;  // -1: none
  int default_eos;  // -1: none
  int default_max_position_embeddings;
  int default_sliding_window;  // when the key is absent; 0: none
  const char* architecture;
  const char* model_type;
  double default_rms_norm_eps;
  double default_rope_theta;
};

constexpr FamilyInfo kFamilies[] = {
    {ModelFamily::kLlama, 1, 2, 2048, 0, "LlamaForCausalLM", "llama", 1e-6, 1e4},
    {ModelFamily::kMistral, 1, 2, 131072, 4096, "MistralForCausalLM", "mistral", 1e-6, 1e4},
    {ModelFamily::kQwen2, -1, -1, 32768, 4096, "Qwen2ForCausalLM", "qwen2", 1e-6, 1e4},
    {ModelFamily::kQwen3, -1, -1, 32768, 4096, "Qwen3ForCausalLM", "qwen3", 1e-6, 1e4},
    {ModelFamily::kMixtral, 1, 2, 131072, 0, "MixtralForCausalLM", "mixtral", 1e-5, 1e6},
    {ModelFamily::kQwen3Moe, -1, -1, 32768, 4096, "Qwen3MoeForCausalLM", "qwen3_moe", 1e-6, 1e4},
};

const FamilyInfo& InfoOf(ModelFamily family) {
  for (const FamilyInfo& info : kFamilies) {
    if (info.family == family) return info;
  }
  return kFamilies[0];
}

std::string Preview(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Typed access to one JSON object; every error names the origin and the key path.
class JsonReader {
 public:
  JsonReader(const json& object, std::string_view origin, std::string prefix = "")
      : object_(object), origin_(origin), prefix_(std::move(prefix)) {}

  const json& object() const { return object_; }

  // The value at `key`, or nullptr when absent or null.
  const json* Find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  bool Contains(const char* key) const { return object_.contains(key); }

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ": key \"", prefix_, key, "\" ", what));
  }

  absl::StatusOr<int> Int(const char* key, int fallback) const {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    return ToInt(key, *v);
  }
  absl::StatusOr<int> RequiredInt(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr) return Error(key, "is required");
    return ToInt(key, *v);
  }
  absl::StatusOr<int> PositiveInt(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(int value, RequiredInt(key));
    if (value <= 0) return Error(key, absl::StrCat("must be positive, got ", value));
    return value;
  }
  absl::StatusOr<double> Double(const char* key, double fallback) const {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return Error(key, "must be a number, got " + Preview(*v));
    return v->get<double>();
  }
  absl::StatusOr<double> RequiredDouble(const char* key) const {
    if (Find(key) == nullptr) return Error(key, "is required");
    return Double(key, 0.0);
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(key, "must be a boolean, got " + Preview(*v));
    return v->get<bool>();
  }
  absl::StatusOr<int> ToInt(absl::string_view key, const json& v) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(INT_MAX)) return Error(key, "is out of range");
      return static_cast<int>(v.get<uint64_t>());
    }
    if (!v.is_number_integer()) return Error(key, "must be an integer, got " + Preview(v));
    const int64_t value = v.get<int64_t>();
    if (value < INT_MIN || value > INT_MAX) return Error(key, "is out of range");
    return static_cast<int>(value);
  }

 private:
  const json& object_;
  std::string origin_;
  std::string prefix_;
};

absl::StatusOr<const FamilyInfo*> ResolveFamily(const JsonReader& r, ModelConfig& c) {
  const json* model_type = r.Find("model_type");
  if (model_type != nullptr && !model_type->is_string()) {
    return r.Error("model_type", "must be a string");
  }
  const json* archs = r.Find("architectures");
  if (archs != nullptr && (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())) {
    return r.Error("architectures", "must be a non-empty list of strings");
  }
  if (archs == nullptr && model_type == nullptr) {
    return r.Error("architectures", "is required (or model_type)");
  }
  const FamilyInfo* found = nullptr;
  for (const FamilyInfo& info : kFamilies) {
    if (archs != nullptr ? (*archs)[0] == info.architecture : *model_type == info.model_type) {
      found = &info;
    }
  }
  if (found == nullptr) {
    std::vector<std::string> names;
    for (const FamilyInfo& info : kFamilies) names.push_back(info.architecture);
    const json& what = archs != nullptr ? (*archs)[0] : *model_type;
    return r.Error(archs != nullptr ? "architectures" : "model_type",
                   absl::StrCat("names unsupported architecture ", what.dump(),
                                " (supported: ", absl::StrJoin(names, ", "), ")"));
  }
  if (model_type != nullptr && *model_type != found->model_type) {
    return r.Error("model_type",
                   absl::StrCat("is ", model_type->dump(), " but architecture ",
                                found->architecture, " needs \"", found->model_type, "\""));
  }
  c.architecture = found->architecture;
  c.model_type = found->model_type;
  c.family = found->family;
  return found;
}

absl::Status ParseHeads(const JsonReader& r, ModelConfig& c) {
  STRATA_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("num_attention_heads"));
  if (!r.Contains("num_key_value_heads") && c.family != ModelFamily::kLlama) {
    return r.Error("num_key_value_heads", "is required");
  }
  STRATA_ASSIGN_OR_RETURN(c.num_kv_heads, r.Int("num_key_value_heads", c.num_heads));
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return r.Error("num_key_value_heads", absl::StrCat("(", c.num_kv_heads,
                                                       ") must be positive and divide "
                                                       "num_attention_heads (",
                                                       c.num_heads, ")"));
  }
  if (r.Find("head_dim") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(c.head_dim, r.PositiveInt("head_dim"));
  } else if (c.family == ModelFamily::kQwen3 && !r.Contains("head_dim")) {
    c.head_dim = 128;  // Qwen3Config's class default
  } else if (c.hidden_size % c.num_heads != 0) {
    return r.Error("num_attention_heads",
                   absl::StrCat("(", c.num_heads, ") must divide hidden_size (", c.hidden_size,
                                ") when head_dim is not given"));
  } else {
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) {
    return r.Error("head_dim", absl::StrCat("must be even for RoPE, got ", c.head_dim));
  }
  return absl::OkStatus();
}

absl::Status ParseSizes(const JsonReader& r, const FamilyInfo& info, ModelConfig& c) {
  STRATA_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  STRATA_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt("hidden_size"));
  STRATA_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveInt("intermediate_size"));
  STRATA_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("num_hidden_layers"));
  STRATA_RETURN_IF_ERROR(ParseHeads(r, c));
  STRATA_ASSIGN_OR_RETURN(c.max_position_embeddings,
                          r.Int("max_position_embeddings", info.default_max_position_embeddings));
  if (c.max_position_embeddings <= 0) return r.Error("max_position_embeddings", "must be positive");
  STRATA_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Double("rms_norm_eps", info.default_rms_norm_eps));
  if (!(c.rms_norm_eps > 0.0)) return r.Error("rms_norm_eps", "must be positive");
  if (const json* act = r.Find("hidden_act"); act != nullptr && *act != "silu") {
    return r.Error("hidden_act", "must be \"silu\" (SwiGLU), got " + Preview(*act));
  }
  STRATA_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  const json* dtype = r.Find("dtype") != nullptr ? r.Find("dtype") : r.Find("torch_dtype");
  if (dtype != nullptr) {
    if (*dtype != "float32" && *dtype != "bfloat16" && *dtype != "float16") {
      return r.Error(r.Find("dtype") != nullptr ? "dtype" : "torch_dtype",
                     "must be \"float32\", \"bfloat16\" or \"float16\", got " + Preview(*dtype));
    }
    c.torch_dtype = dtype->get<std::string>();
  }
  return absl::OkStatus();
}

absl::Status ParseBiases(const JsonReader& r, ModelConfig& c) {
  const ModelFamily f = c.family;
  if (f == ModelFamily::kQwen2) {  // q/k/v always biased, o_proj never
    c.attention_bias = true;
  } else if (f == ModelFamily::kLlama || f == ModelFamily::kQwen3 || f == ModelFamily::kQwen3Moe) {
    STRATA_ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
    c.attention_out_bias = c.attention_bias;  // transformers biases o_proj too
  }
  if (f == ModelFamily::kLlama) {
    STRATA_ASSIGN_OR_RETURN(c.mlp_bias, r.Bool("mlp_bias", false));
  }
  c.qk_norm = f == ModelFamily::kQwen3 || f == ModelFamily::kQwen3Moe;
  return absl::OkStatus();
}

// Qwen2/Qwen3: which layers slide, from layer_types or max_window_layers.
absl::Status ParseSlidingLayers(const JsonReader& r, ModelConfig& c) {
  c.sliding_window_layers.assign(c.num_layers, true);
  if (const json* types = r.Find("layer_types"); types != nullptr) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c.num_layers)) {
      return r.Error("layer_types", "must be a list with one entry per layer");
    }
    for (int l = 0; l < c.num_layers; ++l) {
      const json& t = (*types)[l];
      if (t != "full_attention" && t != "sliding_attention") {
        return r.Error("layer_types",
                       "entries must be \"full_attention\" or "
                       "\"sliding_attention\", got " +
                           Preview(t));
      }
      c.sliding_window_layers[l] = t == "sliding_attention";
    }
    return absl::OkStatus();
  }
  STRATA_ASSIGN_OR_RETURN(int max_window_layers, r.Int("max_window_layers", 28));
  for (int l = 0; l < c.num_layers; ++l) c.sliding_window_layers[l] = l >= max_window_layers;
  return absl::OkStatus();
}

absl::Status ParseSlidingWindow(const JsonReader& r, const FamilyInfo& info, ModelConfig& c) {
  if (c.family == ModelFamily::kLlama) return absl::OkStatus();
  const bool qwen = c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kQwen3 ||
                    c.family == ModelFamily::kQwen3Moe;
  bool use = true;  // Mistral/Mixtral ignore use_sliding_window
  if (qwen) {
    STRATA_ASSIGN_OR_RETURN(use, r.Bool("use_sliding_window", false));
  }
  const int fallback = r.Contains("sliding_window") ? 0 : info.default_sliding_window;
  STRATA_ASSIGN_OR_RETURN(int window, r.Int("sliding_window", fallback));
  if (window < 0 || (window == 0 && r.Find("sliding_window") != nullptr)) {
    return r.Error("sliding_window", "must be a positive integer or null");
  }
  if (c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kQwen3) {
    STRATA_RETURN_IF_ERROR(ParseSlidingLayers(r, c));
  } else {
    c.sliding_window_layers.assign(c.num_layers, true);
  }
  const bool any = std::find(c.sliding_window_layers.begin(), c.sliding_window_layers.end(),
                             true) != c.sliding_window_layers.end();
  c.sliding_window = use && any ? window : 0;
  if (c.sliding_window == 0) c.sliding_window_layers.clear();
  return absl::OkStatus();
}

absl::Status ParseMoe(const JsonReader& r, ModelConfig& c) {
  if (c.family == ModelFamily::kMixtral) {
    STRATA_ASSIGN_OR_RETURN(c.num_experts, r.PositiveInt("num_local_experts"));
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;
  } else if (c.family == ModelFamily::kQwen3Moe) {
    const char* key = r.Find("num_experts") != nullptr ? "num_experts" : "num_local_experts";
    STRATA_ASSIGN_OR_RETURN(c.num_experts, r.PositiveInt(key));
    STRATA_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.PositiveInt("moe_intermediate_size"));
    STRATA_ASSIGN_OR_RETURN(c.norm_topk_prob, r.Bool("norm_topk_prob", false));
    STRATA_ASSIGN_OR_RETURN(c.decoder_sparse_step, r.Int("decoder_sparse_step", 1));
    if (c.decoder_sparse_step <= 0) return r.Error("decoder_sparse_step", "must be positive");
    if (const json* only = r.Find("mlp_only_layers"); only != nullptr) {
      if (!only->is_array()) return r.Error("mlp_only_layers", "must be a list of layer indices");
      for (const json& entry : *only) {
        STRATA_ASSIGN_OR_RETURN(int layer, r.ToInt("mlp_only_layers", entry));
        if (layer < 0 || layer >= c.num_layers) {
          return r.Error("mlp_only_layers",
                         absl::StrCat("has layer ", layer, " outside [0, ", c.num_layers, ")"));
        }
        c.mlp_only_layers.push_back(layer);
      }
    }
  } else {
    return absl::OkStatus();
  }
  STRATA_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.PositiveInt("num_experts_per_tok"));
  if (c.num_experts_per_tok > c.num_experts) {
    return r.Error("num_experts_per_tok",
                   absl::StrCat("(", c.num_experts_per_tok, ") exceeds the number of experts (",
                                c.num_experts, ")"));
  }
  return absl::OkStatus();
}

absl::Status ParseLlama3Rope(const JsonReader& top, const JsonReader& p, ModelConfig& c) {
  RopeScaling& s = c.rope_scaling;
  STRATA_ASSIGN_OR_RETURN(s.low_freq_factor, p.RequiredDouble("low_freq_factor"));
  STRATA_ASSIGN_OR_RETURN(s.high_freq_factor, p.RequiredDouble("high_freq_factor"));
  if (!(s.low_freq_factor > 0.0) || !(s.high_freq_factor > s.low_freq_factor)) {
    return p.Error("high_freq_factor", "must exceed low_freq_factor, and both be positive");
  }
  // transformers prefers a top-level original_max_position_embeddings (Phi-3 style).
  const JsonReader& where = top.Find("original_max_position_embeddings") != nullptr ? top : p;
  STRATA_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                          where.Int("original_max_position_embeddings", c.max_position_embeddings));
  if (s.original_max_position_embeddings <= 0) {
    return where.Error("original_max_position_embeddings", "must be positive");
  }
  return absl::OkStatus();
}

absl::Status ParseRopeParams(const JsonReader& top, const JsonReader& p, ModelConfig& c) {
  STRATA_ASSIGN_OR_RETURN(c.rope_theta, p.Double("rope_theta", c.rope_theta));
  const json* type = p.Find("rope_type") != nullptr ? p.Find("rope_type") : p.Find("type");
  const std::string name = type != nullptr && type->is_string() ? type->get<std::string>() : "";
  if (type != nullptr && name.empty()) return p.Error("rope_type", "must be a non-empty string");
  if (type == nullptr || name == "default") return absl::OkStatus();
  if (name != "linear" && name != "llama3") {
    return p.Error("rope_type", absl::StrCat("\"", name,
                                             "\" is not supported (default, linear, "
                                             "llama3)"));
  }
  c.rope_scaling.type = name == "linear" ? RopeScaling::Type::kLinear : RopeScaling::Type::kLlama3;
  STRATA_ASSIGN_OR_RETURN(c.rope_scaling.factor, p.RequiredDouble("factor"));
  if (!(c.rope_scaling.factor > 0.0)) return p.Error("factor", "must be positive");
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3) return ParseLlama3Rope(top, p, c);
  return absl::OkStatus();
}

// transformers 5.x: rope_scaling (if a non-empty dict) wins over rope_parameters; a rope_theta
// inside the dict wins over the top-level one; without any, the class default applies.
absl::Status ParseRope(const JsonReader& r, const FamilyInfo& info, std::string_view origin,
                       ModelConfig& c) {
  STRATA_ASSIGN_OR_RETURN(c.rope_theta, r.Double("rope_theta", info.default_rope_theta));
  const json* scaling = r.Find("rope_scaling");
  const bool use_scaling = scaling != nullptr && !(scaling->is_object() && scaling->empty());
  const char* key = use_scaling ? "rope_scaling" : "rope_parameters";
  if (const json* params = r.Find(key); params != nullptr) {
    if (!params->is_object()) return r.Error(key, "must be an object or null");
    if (params->contains("full_attention") || params->contains("sliding_attention")) {
      return r.Error(key, "holds per-layer-type RoPE parameters, which these families never use");
    }
    JsonReader p(*params, origin, absl::StrCat(key, "."));
    STRATA_RETURN_IF_ERROR(ParseRopeParams(r, p, c));
    if (p.Find("partial_rotary_factor") != nullptr) {
      STRATA_ASSIGN_OR_RETURN(c.partial_rotary_factor, p.Double("partial_rotary_factor", 1.0));
      if (c.partial_rotary_factor != 1.0) {
        return p.Error("partial_rotary_factor", "must be 1.0 for these architectures");
      }
    }
  }
  STRATA_ASSIGN_OR_RETURN(double partial, r.Double("partial_rotary_factor", 1.0));
  if (partial != 1.0)
    return r.Error("partial_rotary_factor", "must be 1.0 for these architectures");
  if (!(c.rope_theta > 0.0)) return r.Error("rope_theta", "must be positive");
  return absl::OkStatus();
}

absl::Status AppendTokenIds(const JsonReader& r, const char* key, int vocab_size,
                            std::vector<int>& ids) {
  const json* v = r.Find(key);
  if (v == nullptr) return absl::OkStatus();
  const json list = v->is_array() ? *v : json::array({*v});
  for (const json& entry : list) {
    STRATA_ASSIGN_OR_RETURN(int id, r.ToInt(key, entry));
    if (id < 0 || id >= vocab_size) {
      return r.Error(key,
                     absl::StrCat("has id ", id, " outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return absl::OkStatus();
}

absl::Status ParseTokens(const JsonReader& r, const FamilyInfo& info, ModelConfig& c) {
  if (!r.Contains("bos_token_id")) {
    c.bos_token_id = info.default_bos;
  } else {
    STRATA_ASSIGN_OR_RETURN(c.bos_token_id, r.Int("bos_token_id", -1));
    if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size) {
      return r.Error("bos_token_id", "is outside the vocabulary");
    }
  }
  if (!r.Contains("eos_token_id")) {
    if (info.default_eos >= 0) c.eos_token_ids = {info.default_eos};
    return absl::OkStatus();
  }
  return AppendTokenIds(r, "eos_token_id", c.vocab_size, c.eos_token_ids);
}

absl::StatusOr<ModelConfig> ParseConfig(const json& j, std::string_view origin) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(origin), ": config must be a JSON object"));
  }
  JsonReader r(j, origin);
  ModelConfig c;
  STRATA_ASSIGN_OR_RETURN(const FamilyInfo* info, ResolveFamily(r, c));
  STRATA_RETURN_IF_ERROR(ParseSizes(r, *info, c));
  STRATA_RETURN_IF_ERROR(ParseBiases(r, c));
  STRATA_RETURN_IF_ERROR(ParseSlidingWindow(r, *info, c));
  STRATA_RETURN_IF_ERROR(ParseMoe(r, c));
  STRATA_RETURN_IF_ERROR(ParseRope(r, *info, origin, c));
  STRATA_RETURN_IF_ERROR(ParseTokens(r, *info, c));
  if (c.rope_scaling.type == RopeScaling::Type::kNone) c.rope_scaling = RopeScaling();
  return c;
}

absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON"));
  return j;
}

float Llama3Scale(float inv, const RopeScaling& s) {
  // Mirrors transformers' _compute_llama3_parameters in float32 tensor arithmetic.
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float old_len = static_cast<float>(s.original_max_position_embeddings);
  const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  const float wavelen = static_cast<float>(2.0 * std::numbers::pi) / inv;
  const float scaled = wavelen > static_cast<float>(low_freq_wavelen) ? inv / factor : inv;
  const bool medium = !(wavelen < static_cast<float>(high_freq_wavelen)) &&
                      !(wavelen > static_cast<float>(low_freq_wavelen));
  if (!medium) return scaled;
  const float smooth =
      (old_len / wavelen - low) / static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  return (1.0f - smooth) * scaled / factor + smooth * scaled;
}

void WriteRope(const ModelConfig& c, json& j) {
  j["rope_theta"] = c.rope_theta;
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScaling::Type::kNone) {
    j["rope_scaling"] = nullptr;
  } else if (s.type == RopeScaling::Type::kLinear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.factor}};
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", s.factor},
                         {"low_freq_factor", s.low_freq_factor},
                         {"high_freq_factor", s.high_freq_factor},
                         {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
}

void WriteSlidingWindow(const ModelConfig& c, json& j) {
  const json window = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  j["sliding_window"] = window;
  if (c.family == ModelFamily::kMistral || c.family == ModelFamily::kMixtral) return;
  j["use_sliding_window"] = c.sliding_window > 0;
  if (c.family == ModelFamily::kQwen3Moe) return;
  j["max_window_layers"] = c.num_layers;
  if (c.sliding_window > 0) {
    json types = json::array();
    for (int l = 0; l < c.num_layers; ++l) {
      types.push_back(c.SlidingWindow(l) > 0 ? "sliding_attention" : "full_attention");
    }
    j["layer_types"] = std::move(types);
  }
}

void WriteFamilyKeys(const ModelConfig& c, json& j) {
  if (c.family == ModelFamily::kLlama) {
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = c.mlp_bias;
    return;  // Llama has no sliding window
  }
  if (c.family == ModelFamily::kQwen3 || c.family == ModelFamily::kQwen3Moe) {
    j["attention_bias"] = c.attention_bias;
  }
  WriteSlidingWindow(c, j);
  if (c.family == ModelFamily::kMixtral) {
    j["num_local_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
  } else if (c.family == ModelFamily::kQwen3Moe) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
  }
}

}  // namespace

const char* ModelFamilyName(ModelFamily family) { return InfoOf(family).model_type; }

bool ModelConfig::IsMoeLayer(int layer) const {
  if (!is_moe() || layer < 0 || layer >= num_layers) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) {
    return false;
  }
  return (layer + 1) % decoder_sparse_step == 0;
}

int ModelConfig::rotary_dim() const {
  const int dim = static_cast<int>(head_dim * partial_rotary_factor);
  return dim - dim % 2;
}

int ModelConfig::SlidingWindow(int layer) const {
  if (sliding_window <= 0 || layer < 0 ||
      static_cast<size_t>(layer) >= sliding_window_layers.size()) {
    return 0;
  }
  return sliding_window_layers[layer] ? sliding_window : 0;
}

std::vector<float> ModelConfig::RopeInvFreq() const {
  const int dim = rotary_dim();
  const double base = static_cast<float>(rope_theta);  // torch casts the scalar to float32
  std::vector<float> inv(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float power = static_cast<float>(std::pow(base, static_cast<double>(exponent)));
    float f = 1.0f / power;
    if (rope_scaling.type == RopeScaling::Type::kLinear) {
      f /= static_cast<float>(rope_scaling.factor);
    } else if (rope_scaling.type == RopeScaling::Type::kLlama3) {
      f = Llama3Scale(f, rope_scaling);
    }
    inv[i] = f;
  }
  return inv;
}

absl::StatusOr<ModelConfig> ModelConfig::FromJson(const nlohmann::json& json,
                                                  std::string_view origin) {
  try {
    return ParseConfig(json, origin);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(origin), ": malformed config: ", e.what()));
  }
}

nlohmann::json ModelConfig::ToJson() const {
  json j = json::object();
  j["architectures"] = json::array({architecture});
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["torch_dtype"] = torch_dtype;
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_ids.empty()       ? json(nullptr)
                      : eos_token_ids.size() == 1 ? json(eos_token_ids[0])
                                                  : json(eos_token_ids);
  WriteRope(*this, j);
  WriteFamilyKeys(*this, j);
  return j;
}

absl::StatusOr<ModelConfig> ModelConfig::FromDirectory(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  STRATA_ASSIGN_OR_RETURN(json config_json, ReadJsonFile(config_path));
  STRATA_ASSIGN_OR_RETURN(ModelConfig config, FromJson(config_json, config_path));
  const std::string gen_path = dir + "/generation_config.json";
  absl::StatusOr<json> gen = ReadJsonFile(gen_path);
  if (absl::IsNotFound(gen.status())) return config;
  if (!gen.ok()) return gen.status();
  if (!gen->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(gen_path, ": must be a JSON object"));
  }
  JsonReader r(*gen, gen_path);
  STRATA_RETURN_IF_ERROR(
      AppendTokenIds(r, "eos_token_id", config.vocab_size, config.eos_token_ids));
  return config;
}

}  // namespace strata
