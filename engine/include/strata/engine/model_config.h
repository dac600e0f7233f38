#pragma once
// A model's architecture, parsed from a Hugging Face `config.json`.
// Supported families: Llama 3.x (incl. rope_scaling "llama3" and "linear"), Mistral, Qwen2/2.5
// (attention bias), Qwen3 (QK-norm), Mixtral and Qwen3-MoE (top-k routing, norm_topk_prob).
//
// Both config.json dialects are read: transformers 4.x (`rope_theta` + `rope_scaling`,
// `torch_dtype`) and 5.x (`rope_parameters` holding rope_theta and rope_type, `dtype`). Keys that
// a config may omit take the default of the family's transformers 5.x config class, so a parsed
// config means what transformers would build from the same file.
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace strata {

enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3, kMixtral, kQwen3Moe };

// The transformers `model_type` spelling: "llama", "mistral", "qwen2", "qwen3", "mixtral",
// "qwen3_moe".
const char* ModelFamilyName(ModelFamily family);

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;                 // llama3
  double high_freq_factor = 4.0;                // llama3
  int original_max_position_embeddings = 8192;  // llama3 (defaults to max_position_embeddings)
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  ModelFamily family = ModelFamily::kLlama;
  std::string model_type;  // config.json "model_type"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;  // dense MLP width (Mixtral: the expert width)
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // explicit "head_dim" or hidden_size / num_heads (Qwen3 class default: 128)
  int max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;  // always 1.0: the supported families rotate whole heads
  RopeScaling rope_scaling;
  bool attention_bias = false;      // q/k/v projections carry a bias (Qwen2; attention_bias key)
  bool attention_out_bias = false;  // o_proj carries a bias (Llama/Qwen3 attention_bias: true)
  bool mlp_bias = false;            // gate/up/down projections carry a bias (Llama mlp_bias)
  bool qk_norm = false;             // per-head RMSNorm on q and k before RoPE (Qwen3)
  bool tie_word_embeddings = false;
  // Sliding-window attention: window in tokens (0 = none) and, per layer, whether the layer
  // uses it. Mistral/Mixtral/Qwen3-MoE slide on every layer; Qwen2/Qwen3 only on the layers
  // whose layer_types entry is "sliding_attention" (by default those >= max_window_layers), and
  // only when use_sliding_window is true. Use SlidingWindow(layer) rather than the raw fields.
  int sliding_window = 0;
  std::vector<bool> sliding_window_layers;  // num_layers entries when sliding_window > 0
  // Mixture of experts (num_experts == 0 for dense models).
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;     // expert width (Mixtral: equal to intermediate_size)
  bool norm_topk_prob = true;        // renormalize the top-k weights (always true for Mixtral)
  int decoder_sparse_step = 1;       // Qwen3-MoE: layer l is MoE if (l+1) % step == 0 ...
  std::vector<int> mlp_only_layers;  // ... and l is not listed here
  // Special token ids from config.json (generation_config.json may add more eos ids).
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  std::string torch_dtype = "float32";

  bool is_moe() const { return num_experts > 0; }
  bool IsMoeLayer(int layer) const;
  int rotary_dim() const;  // head_dim * partial_rotary_factor, even
  // The attention window of `layer` in tokens; 0 = full causal attention.
  int SlidingWindow(int layer) const;

  // Inverse frequencies [rotary_dim / 2] computed the way transformers does (float32 tensors:
  // exponent 2i/dim in float32, base**exponent, 1/x, then linear or llama3 scaling in float32).
  // Equal to transformers' inv_freq to within 1 ulp (torch's vectorized pow may differ by 1 ulp).
  std::vector<float> RopeInvFreq() const;

  // Parses and validates; errors are InvalidArgument naming `origin` and the offending key.
  static absl::StatusOr<ModelConfig> FromJson(const nlohmann::json& json, std::string_view origin);
  // Reads DIR/config.json, then DIR/generation_config.json (extra eos ids) when present.
  static absl::StatusOr<ModelConfig> FromDirectory(const std::string& dir);
  // A config.json (transformers 4.x-style keys, which 4.x and 5.x both read) that transformers
  // loads back to the same architecture; FromJson(ToJson()) reproduces this config.
  nlohmann::json ToJson() const;
};

}  // namespace strata
