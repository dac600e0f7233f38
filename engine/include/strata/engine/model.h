#pragma once
// Model weights resident on a backend, loaded from a WeightSource (a Hugging Face checkpoint, or
// random weights at a real model's shapes for benchmarks).
//
// Projections that run back to back are fused at load time so each is one GEMM: q/k/v into
// one [(Hq + 2 Hk) * D, H] matrix, gate/up into [2 I, H], and each MoE layer's experts into
// [E, 2 I, H] / [E, H, I]. Weights are converted to the backend's weight dtype on upload.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/engine/model_config.h"
#include "strata/engine/weight_source.h"
#include "strata/plugin/plugin.h"

namespace strata {

struct LayerWeights {
  DeviceBuffer input_norm;  // [H]
  DeviceBuffer post_norm;   // [H]
  DeviceBuffer qkv;         // [(Hq + 2 Hk) * D, H]
  DeviceBuffer qkv_bias;    // [(Hq + 2 Hk) * D] or empty
  DeviceBuffer o;           // [H, Hq * D]
  DeviceBuffer o_bias;      // [H] or empty
  DeviceBuffer q_norm;      // [D] (QK-norm) or empty
  DeviceBuffer k_norm;      // [D] or empty
  bool moe = false;
  int mlp_width = 0;                     // I of this layer (dense or expert)
  DeviceBuffer gate_up;                  // dense [2 I, H] | experts [E, 2 I, H]
  DeviceBuffer down;                     // dense [H, I]   | experts [E, H, I]
  DeviceBuffer gate_up_bias, down_bias;  // dense MLP biases (mlp_bias) or empty
  DeviceBuffer router;                   // [E, H] (MoE only)
};

class Model {
 public:
  // Reads and uploads every weight, one source tensor at a time (host memory peaks at about
  // the largest tensor); errors name the source (checkpoint file) and the tensor.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const ModelConfig& config,
                                                     const WeightSource& weights, Backend* backend);

  const ModelConfig& config() const { return config_; }
  const DeviceBuffer& embed() const { return embed_; }
  const DeviceBuffer& final_norm() const { return final_norm_; }
  // The LM head: lm_head.weight, or the embedding when tied.
  const DeviceBuffer& lm_head() const { return tied_ ? embed_ : lm_head_; }
  const DeviceBuffer& inv_freq() const { return inv_freq_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  size_t weight_bytes() const { return weight_bytes_; }

  class Loader;  // reads, converts and uploads tensors (model.cc)

 private:
  explicit Model(const ModelConfig& config) : config_(config) {}
  ModelConfig config_;
  DeviceBuffer embed_, final_norm_, lm_head_, inv_freq_;
  bool tied_ = false;
  std::vector<LayerWeights> layers_;
  size_t weight_bytes_ = 0;
};

}  // namespace strata
