// ModelRunner's forward pass: one engine step through the plugin's ops.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model_runner_internal.h"
#include "strata/common/half.h"
#include "strata/common/status_macros.h"

namespace strata {

absl::StatusOr<std::vector<float>> ModelRunner::Forward(std::span<const ForwardSeq> seqs) {
  StepInputs in;
  STRATA_RETURN_IF_ERROR(RunBody(seqs, in));
  if (in.num_tokens == 0) return std::vector<float>();
  return RunHead(in);
}

absl::StatusOr<std::vector<SampleResult>> ModelRunner::ForwardSampled(
    std::span<const ForwardSeq> seqs, std::span<const strata_sample_params> params,
    std::span<const int32_t> host_rows, std::vector<float>* host_logits, const StepMasks* masks) {
  if (!can_sample()) {
    return absl::FailedPreconditionError(
        absl::StrCat(backend_->plugin().origin(), ": plugin has no sample entry"));
  }
  StepInputs in;
  STRATA_RETURN_IF_ERROR(
      BuildStepInputs(seqs, cache_.block_size, config().vocab_size, cache_.num_blocks, in));
  if (params.size() != in.logit_rows.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(params.size(), " sampling params for ", in.logit_rows.size(), " logits rows"));
  }
  for (size_t i = 0; i < host_rows.size(); ++i) {
    if (host_rows[i] < 0 || static_cast<size_t>(host_rows[i]) >= params.size() ||
        (i > 0 && host_rows[i] <= host_rows[i - 1])) {
      return absl::InvalidArgumentError("host_rows must be ascending logits-row indices");
    }
  }
  if (!host_rows.empty() && host_logits == nullptr) {
    return absl::InvalidArgumentError("host_rows given without host_logits");
  }
  if (masks != nullptr && !masks->rows.empty()) {
    if (!can_mask()) {
      return absl::InvalidArgumentError(
          absl::StrCat(backend_->plugin().origin(), ": plugin has no mask_logits entry"));
    }
    for (size_t i = 0; i < masks->rows.size(); ++i) {
      const int32_t r = masks->rows[i];
      if (r < 0 || static_cast<size_t>(r) >= params.size() ||
          (i > 0 && r <= masks->rows[i - 1]) ||
          std::binary_search(host_rows.begin(), host_rows.end(), r)) {
        return absl::InvalidArgumentError(
            "masked rows must be ascending logits-row indices, none of them a host row");
      }
    }
  } else {
    masks = nullptr;
  }
  if (in.num_tokens == 0) return std::vector<SampleResult>();
  if (GraphEligible(in)) return ForwardSampledGraph(in, params, host_rows, host_logits, masks);
  STRATA_RETURN_IF_ERROR(PrepareStep(in));
  STRATA_RETURN_IF_ERROR(EnqueueBody(in));
  STRATA_RETURN_IF_ERROR(ComputeLogits(in));
  if (params.empty()) {  // a step of prompt chunks only: nothing to sample
    STRATA_RETURN_IF_ERROR(backend_->Synchronize());
    return std::vector<SampleResult>();
  }
  return SampleLogits(in, params, host_rows, host_logits, masks);
}

// Everything up to the final norm's input: inputs uploaded, embedding, every layer.
absl::Status ModelRunner::RunBody(std::span<const ForwardSeq> seqs, StepInputs& in) {
  STRATA_RETURN_IF_ERROR(
      BuildStepInputs(seqs, cache_.block_size, config().vocab_size, cache_.num_blocks, in));
  if (in.num_tokens == 0) return absl::OkStatus();
  STRATA_RETURN_IF_ERROR(PrepareStep(in));
  return EnqueueBody(in);
}

// Scratch sized for `in`, and its inputs uploaded.
absl::Status ModelRunner::PrepareStep(const StepInputs& in) {
  STRATA_RETURN_IF_ERROR(EnsureScratch(in.num_tokens, static_cast<int64_t>(in.logit_rows.size())));
  return Upload(in);
}

// Embedding and every layer over inputs already uploaded: device ops only (a graph records
// exactly this, plus the head and the sampler).
absl::Status ModelRunner::EnqueueBody(const StepInputs& in) {
  const auto& api = backend_->api();
  const strata_dtype act = backend_->info().act_dtype;
  const int64_t t = in.num_tokens, h = config().hidden_size;
  const strata_dtype wdt = backend_->info().weight_dtype;
  strata_tensor table = MakeTensor(model_->embed().data(), wdt, {config().vocab_size, h});
  strata_tensor ids = MakeTensor(scratch_->ids, STRATA_DTYPE_I32, {t});
  strata_tensor residual = MakeTensor(scratch_->residual.data(), act, {t, h});
  STRATA_RETURN_IF_ERROR(backend_->Check(
      api.embedding(backend_->handle(), backend_->stream(), &table, &ids, &residual), "embedding"));
  for (int l = 0; l < config().num_layers; ++l) STRATA_RETURN_IF_ERROR(RunLayer(l, in));
  return absl::OkStatus();
}

absl::Status BuildStepInputs(std::span<const ForwardSeq> seqs, int block_size, int vocab,
                             int num_blocks, ModelRunner::StepInputs& in) {
  in.num_seqs = static_cast<int32_t>(seqs.size());
  for (const auto& s : seqs) {
    in.max_blocks = std::max<int32_t>(in.max_blocks, static_cast<int32_t>(s.blocks.size()));
  }
  in.block_tables.assign(static_cast<size_t>(in.num_seqs) * std::max(in.max_blocks, 1), 0);
  in.q_start.push_back(0);
  for (int32_t i = 0; i < in.num_seqs; ++i) {
    const ForwardSeq& s = seqs[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const int64_t total = s.num_computed + n;
    if (n == 0) return absl::InvalidArgumentError(absl::StrCat("sequence ", i, " has no tokens"));
    if (total > static_cast<int64_t>(s.blocks.size()) * block_size) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, ": ", s.blocks.size(),
                                                     " blocks cannot hold ", total, " tokens"));
    }
    for (int32_t j = 0; j < n; ++j) {
      const int32_t tok = s.tokens[j];
      if (tok < 0 || tok >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", tok, " out of range [0, ", vocab, ")"));
      }
      const int32_t pos = s.num_computed + j;
      const BlockId block = s.blocks[pos / block_size];
      if (block < 0 || block >= num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("bad block id ", block));
      }
      in.ids.push_back(tok);
      in.positions.push_back(pos);
      in.slots.push_back(block * block_size + pos % block_size);
    }
    std::copy(s.blocks.begin(), s.blocks.end(),
              in.block_tables.begin() + static_cast<size_t>(i) * in.max_blocks);
    const int32_t first_row = static_cast<int32_t>(in.num_tokens);
    in.num_tokens += n;
    in.q_start.push_back(static_cast<int32_t>(in.num_tokens));
    in.kv_len.push_back(static_cast<int32_t>(total));
    in.max_q = std::max<int32_t>(in.max_q, static_cast<int32_t>(n));
    in.max_kv = std::max<int32_t>(in.max_kv, static_cast<int32_t>(total));
    in.all_decode = in.all_decode && n == 1;
    if (s.logits == ForwardSeq::Logits::kLast) {
      in.logit_rows.push_back(static_cast<int32_t>(in.num_tokens - 1));
    } else if (s.logits == ForwardSeq::Logits::kAll) {
      for (int32_t r = first_row; r < in.num_tokens; ++r) in.logit_rows.push_back(r);
    }
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::RunLayer(int layer, const StepInputs& in) {
  const auto& api = backend_->api();
  const LayerWeights& w = model_->layers()[layer];
  const strata_dtype act = backend_->info().act_dtype;
  const strata_dtype wdt = backend_->info().weight_dtype;
  const int64_t t = in.num_tokens, h = config().hidden_size;
  const float eps = static_cast<float>(config().rms_norm_eps);
  strata_tensor hidden = MakeTensor(scratch_->hidden.data(), act, {t, h});
  strata_tensor residual = MakeTensor(scratch_->residual.data(), act, {t, h});
  strata_tensor normed = MakeTensor(scratch_->normed.data(), act, {t, h});
  strata_tensor in_norm = MakeTensor(w.input_norm.data(), wdt, {h});
  // Layer 0 normalizes the embeddings already in `residual`; later layers first add the
  // previous MLP output (in `hidden`) into the residual stream.
  const strata_status st = layer == 0 ? api.rms_norm(backend_->handle(), backend_->stream(),
                                                     &residual, nullptr, &in_norm, eps, &normed)
                                      : api.rms_norm(backend_->handle(), backend_->stream(),
                                                     &hidden, &residual, &in_norm, eps, &normed);
  STRATA_RETURN_IF_ERROR(backend_->Check(st, "rms_norm(input)"));
  STRATA_RETURN_IF_ERROR(RunAttention(layer, in));
  strata_tensor post_norm = MakeTensor(w.post_norm.data(), wdt, {h});
  STRATA_RETURN_IF_ERROR(backend_->Check(api.rms_norm(backend_->handle(), backend_->stream(),
                                                      &hidden, &residual, &post_norm, eps, &normed),
                                         "rms_norm(post_attention)"));
  return RunMlp(layer, in);
}

// QKV projection, QK-norm, RoPE, and the append of the new K/V to the paged cache. Leaves q
// (a strided view of the QKV buffer) for the attention that follows.
absl::Status ModelRunner::RunQkv(int layer, const StepInputs& in, strata_tensor* q_out) {
  const auto& api = backend_->api();
  auto* b = backend_->handle();
  auto* s = backend_->stream();
  const LayerWeights& w = model_->layers()[layer];
  const ModelConfig& c = config();
  const strata_dtype act = backend_->info().act_dtype, wdt = backend_->info().weight_dtype;
  const int64_t t = in.num_tokens, h = c.hidden_size, d = c.head_dim;
  const int64_t hq = c.num_heads, hk = c.num_kv_heads, width = (hq + 2 * hk) * d;
  strata_tensor normed = MakeTensor(scratch_->normed.data(), act, {t, h});
  strata_tensor qkv = MakeTensor(scratch_->qkv.data(), act, {t, width});
  strata_tensor wqkv = MakeTensor(w.qkv.data(), wdt, {width, h});
  strata_tensor bias = MakeTensor(w.qkv_bias.data(), wdt, {width});
  STRATA_RETURN_IF_ERROR(backend_->Check(
      api.gemm(b, s, &normed, &wqkv, w.qkv_bias.data() ? &bias : nullptr, 0, &qkv), "gemm(qkv)"));
  char* base = static_cast<char*>(scratch_->qkv.data());
  const size_t a = DtypeSize(act);
  strata_tensor q = MakeTensor(base, act, {t, hq, d}, width);
  strata_tensor k = MakeTensor(base + hq * d * a, act, {t, hk, d}, width);
  strata_tensor v = MakeTensor(base + (hq + hk) * d * a, act, {t, hk, d}, width);
  strata_tensor qn = MakeTensor(w.q_norm.data(), wdt, {d});
  strata_tensor kn = MakeTensor(w.k_norm.data(), wdt, {d});
  const float eps = static_cast<float>(c.rms_norm_eps);
  strata_tensor pos = MakeTensor(scratch_->positions, STRATA_DTYPE_I32, {t});
  strata_tensor inv_freq =
      MakeTensor(model_->inv_freq().data(), STRATA_DTYPE_F32, {c.rotary_dim() / 2});
  strata_tensor slots = MakeTensor(scratch_->slots, STRATA_DTYPE_I32, {t});
  *q_out = q;
  // The plugin's fused prologue when it has one: the same ops, one call (one kernel on a GPU).
  if (api.attention_prologue != nullptr) {
    return backend_->Check(api.attention_prologue(b, s, &q, &k, &v, c.qk_norm ? &qn : nullptr,
                                                  c.qk_norm ? &kn : nullptr, eps, &pos, &inv_freq,
                                                  1.0f, &cache_, layer, &slots),
                           "attention_prologue");
  }
  if (c.qk_norm) {
    STRATA_RETURN_IF_ERROR(
        backend_->Check(api.rms_norm(b, s, &q, nullptr, &qn, eps, &q), "rms_norm(q_norm)"));
    STRATA_RETURN_IF_ERROR(
        backend_->Check(api.rms_norm(b, s, &k, nullptr, &kn, eps, &k), "rms_norm(k_norm)"));
  }
  STRATA_RETURN_IF_ERROR(backend_->Check(api.rope(b, s, &q, &k, &pos, &inv_freq, 1.0f), "rope"));
  return backend_->Check(api.kv_append(b, s, &cache_, layer, &k, &v, &slots), "kv_append");
}

absl::Status ModelRunner::RunAttention(int layer, const StepInputs& in) {
  strata_tensor q;
  STRATA_RETURN_IF_ERROR(RunQkv(layer, in, &q));
  const auto& api = backend_->api();
  auto* b = backend_->handle();
  auto* s = backend_->stream();
  const LayerWeights& w = model_->layers()[layer];
  const ModelConfig& c = config();
  const strata_dtype act = backend_->info().act_dtype, wdt = backend_->info().weight_dtype;
  const int64_t t = in.num_tokens, h = c.hidden_size, d = c.head_dim, hq = c.num_heads;
  strata_attention_batch batch{};
  batch.num_seqs = in.num_seqs;
  batch.max_blocks_per_seq = in.max_blocks;
  batch.max_q_len = in.max_q;
  batch.max_kv_len = in.max_kv;
  batch.q_start = scratch_->q_start;
  batch.kv_len = scratch_->kv_len;
  batch.block_tables = scratch_->block_tables;
  strata_attention_params params{layer, 1.0f / std::sqrt(static_cast<float>(d)),
                                 c.SlidingWindow(layer)};
  strata_tensor out = MakeTensor(scratch_->attn.data(), act, {t, hq, d});
  const strata_status st = in.all_decode
                               ? api.attention_decode(b, s, &cache_, &batch, &params, &q, &out)
                               : api.attention_prefill(b, s, &cache_, &batch, &params, &q, &out);
  STRATA_RETURN_IF_ERROR(
      backend_->Check(st, in.all_decode ? "attention_decode" : "attention_prefill"));
  strata_tensor attn2d = MakeTensor(scratch_->attn.data(), act, {t, hq * d});
  strata_tensor wo = MakeTensor(w.o.data(), wdt, {h, hq * d});
  strata_tensor hidden = MakeTensor(scratch_->hidden.data(), act, {t, h});
  strata_tensor ob = MakeTensor(w.o_bias.data(), wdt, {h});
  return backend_->Check(api.gemm(b, s, &attn2d, &wo, w.o_bias.data() ? &ob : nullptr, 0, &hidden),
                         "gemm(o_proj)");
}

absl::Status ModelRunner::RunMlp(int layer, const StepInputs& in) {
  const LayerWeights& w = model_->layers()[layer];
  if (w.moe) return RunMoe(layer, in);
  const auto& api = backend_->api();
  auto* b = backend_->handle();
  auto* s = backend_->stream();
  const ModelConfig& c = config();
  const strata_dtype act = backend_->info().act_dtype, wdt = backend_->info().weight_dtype;
  const int64_t t = in.num_tokens, h = c.hidden_size, i = w.mlp_width;
  strata_tensor normed = MakeTensor(scratch_->normed.data(), act, {t, h});
  strata_tensor hidden = MakeTensor(scratch_->hidden.data(), act, {t, h});
  strata_tensor gu = MakeTensor(scratch_->mlp_in.data(), act, {t, 2 * i});
  strata_tensor wgu = MakeTensor(w.gate_up.data(), wdt, {2 * i, h});
  strata_tensor mid = MakeTensor(scratch_->mlp_act.data(), act, {t, i});
  strata_tensor wd = MakeTensor(w.down.data(), wdt, {h, i});
  strata_tensor gub = MakeTensor(w.gate_up_bias.data(), wdt, {2 * i});
  strata_tensor db = MakeTensor(w.down_bias.data(), wdt, {h});
  const bool bias = w.gate_up_bias.data() != nullptr;
  if (api.gemm_silu_mul != nullptr) {  // one op (one kernel on a GPU at decode sizes)
    STRATA_RETURN_IF_ERROR(backend_->Check(
        api.gemm_silu_mul(b, s, &normed, &wgu, bias ? &gub : nullptr, &gu, &mid),
        "gemm_silu_mul"));
  } else {
    STRATA_RETURN_IF_ERROR(backend_->Check(
        api.gemm(b, s, &normed, &wgu, bias ? &gub : nullptr, 0, &gu), "gemm(gate_up)"));
    STRATA_RETURN_IF_ERROR(backend_->Check(api.silu_mul(b, s, &gu, &mid), "silu_mul"));
  }
  return backend_->Check(api.gemm(b, s, &mid, &wd, bias ? &db : nullptr, 0, &hidden), "gemm(down)");
}

absl::Status ModelRunner::RunMoe(int layer, const StepInputs& in) {
  const auto& api = backend_->api();
  auto* b = backend_->handle();
  auto* s = backend_->stream();
  const LayerWeights& w = model_->layers()[layer];
  const ModelConfig& c = config();
  const strata_dtype act = backend_->info().act_dtype, wdt = backend_->info().weight_dtype;
  const int64_t t = in.num_tokens, h = c.hidden_size, i = w.mlp_width;
  strata_tensor normed = MakeTensor(scratch_->normed.data(), act, {t, h});
  strata_tensor hidden = MakeTensor(scratch_->hidden.data(), act, {t, h});
  const int64_t e = c.num_experts, k = c.num_experts_per_tok;
  const bool renorm = c.family == ModelFamily::kMixtral || c.norm_topk_prob;
  strata_tensor logits = MakeTensor(scratch_->router.data(), act, {t, e});
  strata_tensor wr = MakeTensor(w.router.data(), wdt, {e, h});
  strata_tensor tw = MakeTensor(scratch_->topk_w.data(), STRATA_DTYPE_F32, {t, k});
  strata_tensor ti = MakeTensor(scratch_->topk_ids.data(), STRATA_DTYPE_I32, {t, k});
  strata_tensor wgu = MakeTensor(w.gate_up.data(), wdt, {e, 2 * i, h});
  strata_tensor wd = MakeTensor(w.down.data(), wdt, {e, h, i});
  STRATA_RETURN_IF_ERROR(
      backend_->Check(api.gemm(b, s, &normed, &wr, nullptr, 0, &logits), "gemm(router)"));
  if (api.moe_route_experts != nullptr) {  // the same, in one call (the backend may fuse)
    return backend_->Check(api.moe_route_experts(b, s, &normed, &logits, static_cast<int32_t>(k),
                                                 renorm ? 1 : 0, &tw, &ti, &wgu, &wd, &hidden),
                           "moe_route_experts");
  }
  STRATA_RETURN_IF_ERROR(backend_->Check(
      api.moe_route(b, s, &logits, static_cast<int32_t>(k), renorm ? 1 : 0, &tw, &ti),
      "moe_route"));
  return backend_->Check(api.moe_experts(b, s, &normed, &tw, &ti, &wgu, &wd, &hidden),
                         "moe_experts");
}

// The final norm and, for the logits rows, the LM head into scratch_->logits [rows, vocab].
absl::Status ModelRunner::ComputeLogits(const StepInputs& in) {
  const auto& api = backend_->api();
  auto* b = backend_->handle();
  auto* s = backend_->stream();
  const ModelConfig& c = config();
  const strata_dtype act = backend_->info().act_dtype, wdt = backend_->info().weight_dtype;
  const int64_t t = in.num_tokens, h = c.hidden_size, v = c.vocab_size;
  const int64_t rows = static_cast<int64_t>(in.logit_rows.size());
  strata_tensor hidden = MakeTensor(scratch_->hidden.data(), act, {t, h});
  strata_tensor residual = MakeTensor(scratch_->residual.data(), act, {t, h});
  strata_tensor normed = MakeTensor(scratch_->normed.data(), act, {t, h});
  strata_tensor norm_w = MakeTensor(model_->final_norm().data(), wdt, {h});
  const float eps = static_cast<float>(c.rms_norm_eps);
  STRATA_RETURN_IF_ERROR(backend_->Check(
      api.rms_norm(b, s, &hidden, &residual, &norm_w, eps, &normed), "rms_norm(final)"));
  if (rows == 0) return absl::OkStatus();
  strata_tensor head_w = MakeTensor(model_->lm_head().data(), wdt, {v, h});
  strata_tensor logits = MakeTensor(scratch_->logits.data(), act, {rows, v});
  // Every token's logits in token order (a decode step): the head reads the normed rows as they
  // are, without a gather.
  bool in_order = rows == t;
  for (int64_t r = 0; in_order && r < rows; ++r) in_order = in.logit_rows[r] == r;
  if (in_order) {
    return backend_->Check(api.gemm(b, s, &normed, &head_w, nullptr, 0, &logits), "gemm(lm_head)");
  }
  strata_tensor row_ids = MakeTensor(scratch_->logit_rows, STRATA_DTYPE_I32, {rows});
  strata_tensor head_in = MakeTensor(scratch_->head_in.data(), act, {rows, h});
  STRATA_RETURN_IF_ERROR(
      backend_->Check(api.gather_rows(b, s, &normed, &row_ids, &head_in), "gather_rows"));
  return backend_->Check(api.gemm(b, s, &head_in, &head_w, nullptr, 0, &logits), "gemm(lm_head)");
}

absl::StatusOr<std::vector<float>> ModelRunner::RunHead(const StepInputs& in) {
  STRATA_RETURN_IF_ERROR(ComputeLogits(in));
  const int64_t rows = static_cast<int64_t>(in.logit_rows.size());
  if (rows == 0) {
    STRATA_RETURN_IF_ERROR(backend_->Synchronize());
    return std::vector<float>();
  }
  std::vector<float> out;
  STRATA_RETURN_IF_ERROR(CopyLogitsRows(0, rows, &out));
  return out;
}

// The plugin's `sample` over scratch_->logits: uploads the params, copies back the ids (and
// the logprobs only when a row asks for them).
absl::StatusOr<std::vector<SampleResult>> ModelRunner::SampleLogits(
    const StepInputs& in, std::span<const strata_sample_params> requested,
    std::span<const int32_t> host_rows, std::vector<float>* host_logits, const StepMasks* masks) {
  const int64_t rows = static_cast<int64_t>(in.logit_rows.size());
  std::vector<strata_sample_params> params = DeviceParams(requested, host_rows, rows);
  const bool logprobs = AnyLogprobs(params);
  // The masks first: their host work overlaps the forward pass enqueued before.
  if (masks != nullptr) STRATA_RETURN_IF_ERROR(EnqueueMasks(*masks));
  STRATA_RETURN_IF_ERROR(PrepareSample(params, logprobs));
  STRATA_RETURN_IF_ERROR(EnqueueSample(rows, logprobs));
  return FinishSample(params, rows, logprobs, host_rows, host_logits);
}

// The rows' params as the device samples them: rows the host samples get the cheapest work
// (greedy, no logprobs; their result is not used); rows past the request's (graph padding)
// likewise.
std::vector<strata_sample_params> ModelRunner::DeviceParams(
    std::span<const strata_sample_params> requested, std::span<const int32_t> host_rows,
    int64_t rows) {
  strata_sample_params cheap{};
  cheap.top_p = 1.0f;
  cheap.num_logprobs = -1;
  std::vector<strata_sample_params> params(static_cast<size_t>(rows), cheap);
  std::copy(requested.begin(), requested.end(), params.begin());
  for (int32_t r : host_rows) params[r] = cheap;
  return params;
}

bool ModelRunner::AnyLogprobs(std::span<const strata_sample_params> params) {
  bool any = false;
  for (const auto& p : params) any |= p.num_logprobs >= 0;
  return any;
}

// Sizes the sampler's buffers for params.size() rows and uploads the params.
absl::Status ModelRunner::PrepareSample(std::span<const strata_sample_params> params,
                                        bool logprobs) {
  const int64_t rows = static_cast<int64_t>(params.size());
  Scratch& sc = *scratch_;
  constexpr int64_t kLp = 1 + STRATA_MAX_LOGPROBS, kTop = STRATA_MAX_LOGPROBS;
  STRATA_RETURN_IF_ERROR(GrowScratch(sc.sample_params, rows * sizeof(strata_sample_params)));
  STRATA_RETURN_IF_ERROR(GrowScratch(sc.sample_tokens, rows * sizeof(int32_t)));
  if (logprobs) {
    STRATA_RETURN_IF_ERROR(GrowScratch(sc.sample_logprobs, rows * kLp * sizeof(float)));
    STRATA_RETURN_IF_ERROR(GrowScratch(sc.sample_top, rows * kTop * sizeof(int32_t)));
  }
  return backend_->CopyToDevice(sc.sample_params.data(), params.data(),
                                rows * sizeof(strata_sample_params));
}

absl::Status ModelRunner::EnqueueMasks(const StepMasks& masks) {
  Scratch& sc = *scratch_;
  const int64_t n = static_cast<int64_t>(masks.rows.size());
  const int64_t vocab = config().vocab_size, words = (vocab + 31) / 32;
  sc.mask_staging.assign(static_cast<size_t>(n * words), 0u);
  masks.fill(sc.mask_staging.data());
  // Not in any recorded graph: growing these leaves the graphs valid.
  auto grow = [&](DeviceBuffer& buf, size_t bytes) -> absl::Status {
    if (buf.size() >= bytes && buf.data() != nullptr) return absl::OkStatus();
    buf.Reset();
    STRATA_ASSIGN_OR_RETURN(buf, DeviceBuffer::Allocate(backend_.get(), std::max(bytes, 2 * buf.size())));
    return absl::OkStatus();
  };
  STRATA_RETURN_IF_ERROR(grow(sc.mask_rows, n * sizeof(int32_t)));
  STRATA_RETURN_IF_ERROR(grow(sc.mask_words, n * words * sizeof(uint32_t)));
  STRATA_RETURN_IF_ERROR(
      backend_->CopyToDevice(sc.mask_rows.data(), masks.rows.data(), n * sizeof(int32_t)));
  STRATA_RETURN_IF_ERROR(backend_->CopyToDevice(sc.mask_words.data(), sc.mask_staging.data(),
                                                n * words * sizeof(uint32_t)));
  const strata_dtype act = backend_->info().act_dtype;
  const int64_t rows = static_cast<int64_t>(sc.rows);
  strata_tensor logits = MakeTensor(sc.logits.data(), act, {rows, vocab});
  strata_tensor row_ids = MakeTensor(sc.mask_rows.data(), STRATA_DTYPE_I32, {n});
  strata_tensor mask_words = MakeTensor(sc.mask_words.data(), STRATA_DTYPE_I32, {n, words});
  return backend_->Check(backend_->api().mask_logits(backend_->handle(), backend_->stream(),
                                                     &logits, &row_ids, &mask_words),
                         "mask_logits");
}

// The `sample` op over the first `rows` logits rows (device work only).
absl::Status ModelRunner::EnqueueSample(int64_t rows, bool logprobs) {
  Scratch& sc = *scratch_;
  constexpr int64_t kLp = 1 + STRATA_MAX_LOGPROBS, kTop = STRATA_MAX_LOGPROBS;
  const strata_dtype act = backend_->info().act_dtype;
  strata_tensor logits = MakeTensor(sc.logits.data(), act, {rows, config().vocab_size});
  strata_tensor tokens = MakeTensor(sc.sample_tokens.data(), STRATA_DTYPE_I32, {rows});
  strata_tensor lp = MakeTensor(sc.sample_logprobs.data(), STRATA_DTYPE_F32, {rows, kLp});
  strata_tensor top = MakeTensor(sc.sample_top.data(), STRATA_DTYPE_I32, {rows, kTop});
  return backend_->Check(
      backend_->api().sample(backend_->handle(), backend_->stream(), &logits,
                             static_cast<const strata_sample_params*>(sc.sample_params.data()),
                             &tokens, logprobs ? &lp : nullptr, logprobs ? &top : nullptr),
      "sample");
}

// Copies back the ids of the first `rows` rows (and their logprobs when asked), and the logits
// of the host rows.
absl::StatusOr<std::vector<SampleResult>> ModelRunner::FinishSample(
    std::span<const strata_sample_params> params, int64_t rows, bool logprobs,
    std::span<const int32_t> host_rows, std::vector<float>* host_logits) {
  Scratch& sc = *scratch_;
  const int64_t v = config().vocab_size;
  constexpr int64_t kLp = 1 + STRATA_MAX_LOGPROBS, kTop = STRATA_MAX_LOGPROBS;
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  STRATA_RETURN_IF_ERROR(
      backend_->CopyToHost(ids.data(), sc.sample_tokens.data(), ids.size() * sizeof(int32_t)));
  std::vector<float> lps;
  std::vector<int32_t> tops;
  if (logprobs) {
    lps.resize(static_cast<size_t>(rows * kLp));
    tops.resize(static_cast<size_t>(rows * kTop));
    STRATA_RETURN_IF_ERROR(
        backend_->CopyToHost(lps.data(), sc.sample_logprobs.data(), lps.size() * sizeof(float)));
    STRATA_RETURN_IF_ERROR(
        backend_->CopyToHost(tops.data(), sc.sample_top.data(), tops.size() * sizeof(int32_t)));
  }
  if (!host_rows.empty()) host_logits->clear();
  for (int32_t r : host_rows) STRATA_RETURN_IF_ERROR(CopyLogitsRows(r, 1, host_logits));
  std::vector<SampleResult> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    out[r].token = ids[r];
    const int n = params[r].num_logprobs;
    if (n < 0) continue;
    out[r].logprob = lps[r * kLp];
    for (int j = 0; j < n && j < v; ++j) {
      out[r].top.push_back({tops[r * kTop + j], lps[r * kLp + 1 + j]});
    }
  }
  return out;
}

absl::Status ModelRunner::CopyLogitsRows(int64_t first, int64_t count, std::vector<float>* out) {
  const strata_dtype act = backend_->info().act_dtype;
  const size_t n = static_cast<size_t>(count * config().vocab_size), elem = DtypeSize(act);
  const auto* src = static_cast<const char*>(scratch_->logits.data()) +
                    static_cast<size_t>(first * config().vocab_size) * elem;
  const size_t at = out->size();
  out->resize(at + n);
  if (act == STRATA_DTYPE_F32) return backend_->CopyToHost(out->data() + at, src, n * elem);
  std::vector<uint16_t> half(n);
  STRATA_RETURN_IF_ERROR(backend_->CopyToHost(half.data(), src, n * elem));
  for (size_t j = 0; j < n; ++j) {
    (*out)[at + j] = act == STRATA_DTYPE_BF16 ? Bf16ToFloat(half[j]) : F16ToFloat(half[j]);
  }
  return absl::OkStatus();
}

}  // namespace strata
