#include "strata/engine/model.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "strata/common/half.h"
#include "strata/common/status_macros.h"

namespace strata {
namespace {

struct Part {
  std::string name;
  std::vector<int64_t> shape;
};

}  // namespace

// Reads tensors, converts them to the backend's weight dtype and uploads them.
class Model::Loader {
 public:
  Loader(const WeightSource& source, Backend* backend)
      : source_(source), backend_(backend), dtype_(backend->info().weight_dtype) {}

  // Concatenates `parts` into one device buffer, reading and copying one part at a time
  // through a staging buffer the size of the largest part.
  absl::StatusOr<DeviceBuffer> Upload(const std::vector<Part>& parts) {
    STRATA_ASSIGN_OR_RETURN(const DType read_dtype, ReadDtype());
    const size_t elem = DtypeSize(dtype_);
    size_t total = 0;
    for (const Part& p : parts) total += Numel(p.shape) * elem;
    STRATA_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Allocate(backend_, total));
    std::vector<uint8_t> staging;
    size_t offset = 0;
    for (const Part& p : parts) {
      const size_t bytes = Numel(p.shape) * elem;
      staging.resize(bytes);
      STRATA_RETURN_IF_ERROR(source_.Read(p.name, p.shape, read_dtype, staging.data()));
      STRATA_RETURN_IF_ERROR(backend_->CopyToDevice(static_cast<uint8_t*>(buf.data()) + offset,
                                                    staging.data(), bytes));
      // The next part reuses the staging buffer (and it dies with this scope): wait for the copy.
      STRATA_RETURN_IF_ERROR(backend_->Synchronize());
      offset += bytes;
    }
    bytes_ += total;
    return buf;
  }

  absl::StatusOr<DeviceBuffer> UploadOne(const std::string& name, std::vector<int64_t> shape) {
    return Upload({{name, std::move(shape)}});
  }

  absl::StatusOr<DeviceBuffer> UploadF32(const std::vector<float>& values) {
    const size_t bytes = values.size() * sizeof(float);
    STRATA_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Allocate(backend_, bytes));
    STRATA_RETURN_IF_ERROR(backend_->CopyToDevice(buf.data(), values.data(), bytes));
    STRATA_RETURN_IF_ERROR(backend_->Synchronize());
    return buf;
  }

  size_t bytes() const { return bytes_; }

 private:
  static size_t Numel(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }

  absl::StatusOr<DType> ReadDtype() const {
    switch (dtype_) {
      case STRATA_DTYPE_F32:
        return DType::kF32;
      case STRATA_DTYPE_BF16:
        return DType::kBF16;
      case STRATA_DTYPE_F16:
        return DType::kF16;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("backend weight dtype ", DtypeName(dtype_), " is not a float type"));
    }
  }

  const WeightSource& source_;
  Backend* backend_;
  strata_dtype dtype_;
  size_t bytes_ = 0;
};

namespace {

// Tensor names of one MoE layer's experts in the Hugging Face Hub layout.
struct ExpertNames {
  std::string router;
  std::string gate, up, down;  // with "{e}" replaced by the expert index
};

ExpertNames MoeNames(const ModelConfig& c, const std::string& prefix, int e) {
  const std::string idx = std::to_string(e);
  if (c.family == ModelFamily::kMixtral) {
    const std::string base = prefix + "block_sparse_moe.";
    return {base + "gate.weight", base + "experts." + idx + ".w1.weight",
            base + "experts." + idx + ".w3.weight", base + "experts." + idx + ".w2.weight"};
  }
  const std::string base = prefix + "mlp.";
  return {base + "gate.weight", base + "experts." + idx + ".gate_proj.weight",
          base + "experts." + idx + ".up_proj.weight",
          base + "experts." + idx + ".down_proj.weight"};
}

absl::Status LoadMlp(Model::Loader& ld, const ModelConfig& c, const std::string& prefix, int l,
                     LayerWeights& w) {
  const int64_t h = c.hidden_size;
  w.moe = c.IsMoeLayer(l);
  if (!w.moe) {
    const int64_t i = c.intermediate_size;
    w.mlp_width = static_cast<int>(i);
    STRATA_ASSIGN_OR_RETURN(w.gate_up, ld.Upload({{prefix + "mlp.gate_proj.weight", {i, h}},
                                                  {prefix + "mlp.up_proj.weight", {i, h}}}));
    STRATA_ASSIGN_OR_RETURN(w.down, ld.UploadOne(prefix + "mlp.down_proj.weight", {h, i}));
    if (c.mlp_bias) {
      STRATA_ASSIGN_OR_RETURN(w.gate_up_bias, ld.Upload({{prefix + "mlp.gate_proj.bias", {i}},
                                                         {prefix + "mlp.up_proj.bias", {i}}}));
      STRATA_ASSIGN_OR_RETURN(w.down_bias, ld.UploadOne(prefix + "mlp.down_proj.bias", {h}));
    }
    return absl::OkStatus();
  }
  const int64_t i =
      c.family == ModelFamily::kMixtral ? c.intermediate_size : c.moe_intermediate_size;
  const int64_t e_count = c.num_experts;
  w.mlp_width = static_cast<int>(i);
  std::vector<Part> gate_up, down;
  for (int e = 0; e < e_count; ++e) {
    ExpertNames n = MoeNames(c, prefix, e);
    gate_up.push_back({n.gate, {i, h}});
    gate_up.push_back({n.up, {i, h}});
    down.push_back({n.down, {h, i}});
  }
  STRATA_ASSIGN_OR_RETURN(w.router, ld.UploadOne(MoeNames(c, prefix, 0).router, {e_count, h}));
  STRATA_ASSIGN_OR_RETURN(w.gate_up, ld.Upload(gate_up));
  STRATA_ASSIGN_OR_RETURN(w.down, ld.Upload(down));
  return absl::OkStatus();
}

absl::Status LoadLayer(Model::Loader& ld, const ModelConfig& c, int l, LayerWeights& w) {
  const std::string prefix = absl::StrCat("model.layers.", l, ".");
  const int64_t h = c.hidden_size, d = c.head_dim;
  const int64_t q = c.num_heads * d, kv = c.num_kv_heads * d;
  const std::string attn = prefix + "self_attn.";
  STRATA_ASSIGN_OR_RETURN(w.input_norm, ld.UploadOne(prefix + "input_layernorm.weight", {h}));
  STRATA_ASSIGN_OR_RETURN(w.post_norm,
                          ld.UploadOne(prefix + "post_attention_layernorm.weight", {h}));
  STRATA_ASSIGN_OR_RETURN(w.qkv, ld.Upload({{attn + "q_proj.weight", {q, h}},
                                            {attn + "k_proj.weight", {kv, h}},
                                            {attn + "v_proj.weight", {kv, h}}}));
  if (c.attention_bias) {
    STRATA_ASSIGN_OR_RETURN(w.qkv_bias, ld.Upload({{attn + "q_proj.bias", {q}},
                                                   {attn + "k_proj.bias", {kv}},
                                                   {attn + "v_proj.bias", {kv}}}));
  }
  STRATA_ASSIGN_OR_RETURN(w.o, ld.UploadOne(attn + "o_proj.weight", {h, q}));
  if (c.attention_out_bias) {
    STRATA_ASSIGN_OR_RETURN(w.o_bias, ld.UploadOne(attn + "o_proj.bias", {h}));
  }
  if (c.qk_norm) {
    STRATA_ASSIGN_OR_RETURN(w.q_norm, ld.UploadOne(attn + "q_norm.weight", {d}));
    STRATA_ASSIGN_OR_RETURN(w.k_norm, ld.UploadOne(attn + "k_norm.weight", {d}));
  }
  return LoadMlp(ld, c, prefix, l, w);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const ModelConfig& config,
                                                   const WeightSource& weights, Backend* backend) {
  std::unique_ptr<Model> model(new Model(config));
  Loader ld(weights, backend);
  const int64_t v = config.vocab_size, h = config.hidden_size;
  STRATA_ASSIGN_OR_RETURN(model->embed_, ld.UploadOne("model.embed_tokens.weight", {v, h}));
  STRATA_ASSIGN_OR_RETURN(model->final_norm_, ld.UploadOne("model.norm.weight", {h}));
  // Tied checkpoints usually omit lm_head.weight; when present it wins.
  model->tied_ = config.tie_word_embeddings && !weights.Has("lm_head.weight");
  if (!model->tied_) {
    STRATA_ASSIGN_OR_RETURN(model->lm_head_, ld.UploadOne("lm_head.weight", {v, h}));
  }
  model->layers_.resize(config.num_layers);
  for (int l = 0; l < config.num_layers; ++l) {
    STRATA_RETURN_IF_ERROR(LoadLayer(ld, config, l, model->layers_[l]));
  }
  STRATA_ASSIGN_OR_RETURN(model->inv_freq_, ld.UploadF32(config.RopeInvFreq()));
  model->weight_bytes_ = ld.bytes();
  return model;
}

}  // namespace strata
