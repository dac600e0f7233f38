#pragma once
// The C entry points every in-tree plugin exports the same way: the lifecycle entries, the
// guard that turns a Status or an exception into a status code plus last_error, and the op
// trampolines from the ABI's signatures to the plugin's own op functions. No C++ exception
// crosses the C ABI: every entry here is noexcept and catches everything.
//
// `Backend` is the plugin's object behind strata_backend, with
//   static Status Create(const char* config_json, std::unique_ptr<Backend>* out);
//   static Backend* FromHandle(strata_backend);  strata_backend handle();
//   void RecordError(std::string_view prefix, std::string_view message) noexcept;
//   const char* LastError();
//   static void RecordDetachedError(std::string_view prefix, std::string_view message) noexcept;
//   static const char* DetachedLastError();  // errors of calls without a backend
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <string_view>

#include "strata/plugin/abi.h"
#include "strata/plugin_common/status.h"

namespace strata::plugin_common {

// Records `prefix` + `message` as the last error of `be` (or, without one, of the calling
// thread's backend-less calls) and returns `code`. Never throws, so it is safe in handlers.
template <typename Backend>
strata_status Fail(Backend* be, strata_status code, std::string_view prefix,
                   std::string_view message = {}) noexcept {
  if (be != nullptr) {
    be->RecordError(prefix, message);
  } else {
    Backend::RecordDetachedError(prefix, message);
  }
  return code;
}

// Runs `body` (returning Status) for entry `op` on the backend behind `handle`: a failed
// Status becomes its code and message; std::bad_alloc OUT_OF_MEMORY; any other exception
// INTERNAL; a NULL handle INVALID_ARGUMENT.
template <typename Backend, typename Body>
strata_status Guard(strata_backend handle, const char* op, Body&& body) noexcept {
  Backend* be = Backend::FromHandle(handle);
  if (be == nullptr) return Fail(be, STRATA_ERR_INVALID_ARGUMENT, op, ": backend is NULL");
  try {
    Status status = body(*be);
    if (!status.ok()) return Fail(be, status.code(), status.message());
    return STRATA_OK;
  } catch (const std::bad_alloc&) {
    return Fail(be, STRATA_ERR_OUT_OF_MEMORY, op, ": out of host memory");
  } catch (const std::exception& e) {
    char prefix[128];
    std::snprintf(prefix, sizeof(prefix), "%s: internal error: ", op);
    return Fail(be, STRATA_ERR_INTERNAL, prefix, e.what());
  } catch (...) {
    return Fail(be, STRATA_ERR_INTERNAL, op, ": internal error");
  }
}

// abi.h create / destroy / last_error over Backend.
template <typename Backend>
strata_status CreateEntry(const char* config_json, strata_backend* out) noexcept {
  Backend* none = nullptr;
  if (out == nullptr) return Fail(none, STRATA_ERR_INVALID_ARGUMENT, "create: out is NULL");
  *out = nullptr;
  try {
    std::unique_ptr<Backend> be;
    Status status = Backend::Create(config_json, &be);
    if (!status.ok()) return Fail(none, status.code(), status.message());
    *out = be.release()->handle();
    return STRATA_OK;
  } catch (const std::bad_alloc&) {
    return Fail(none, STRATA_ERR_OUT_OF_MEMORY, "create: out of host memory");
  } catch (const std::exception& e) {
    return Fail(none, STRATA_ERR_INTERNAL, "create: ", e.what());
  } catch (...) {
    return Fail(none, STRATA_ERR_INTERNAL, "create: internal error");
  }
}

template <typename Backend>
void DestroyEntry(strata_backend backend) noexcept {
  delete Backend::FromHandle(backend);
}

template <typename Backend>
const char* LastErrorEntry(strata_backend backend) noexcept {
  Backend* be = Backend::FromHandle(backend);
  return be != nullptr ? be->LastError() : Backend::DetachedLastError();
}

// The op entries of strata_plugin_api_v1. `Plugin` supplies
//   using Backend = ...;  // as above
//   using Context = ...;  // what the plugin's ops run on (its backend, or its stream)
//   template <typename Body>  // Body: Status(Context&)
//   static strata_status RunOp(strata_backend, strata_stream, const char* op, Body&&) noexcept;
// and declares, in Context's namespace, one function per op taking Context& first (Embedding,
// RmsNorm, Gemm, Rope, SiluMul, GatherRows, KvAppend, AttentionPrologue, GemmSiluMul,
// Attention(ctx, decode, ...), KvCopyBlocks, KvGather, KvScatter, MoeRoute, MoeExperts,
// MoeRouteExperts, Sample, MaskLogits): the entries find them by argument-dependent lookup.
template <typename Plugin>
struct OpEntries {
  using Ctx = typename Plugin::Context;

  static strata_status EmbeddingEntry(strata_backend b, strata_stream st,
                                      const strata_tensor* table, const strata_tensor* ids,
                                      strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "embedding", [&](Ctx& c) { return Embedding(c, table, ids, out); });
  }

  static strata_status RmsNormEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                                    strata_tensor* residual, const strata_tensor* weight, float eps,
                                    strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "rms_norm",
                         [&](Ctx& c) { return RmsNorm(c, x, residual, weight, eps, out); });
  }

  static strata_status GemmEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                                 const strata_tensor* w, const strata_tensor* bias,
                                 int32_t accumulate, strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "gemm",
                         [&](Ctx& c) { return Gemm(c, x, w, bias, accumulate, out); });
  }

  static strata_status RopeEntry(strata_backend b, strata_stream st, strata_tensor* q,
                                 strata_tensor* k, const strata_tensor* positions,
                                 const strata_tensor* inv_freq, float mscale) noexcept {
    return Plugin::RunOp(b, st, "rope",
                         [&](Ctx& c) { return Rope(c, q, k, positions, inv_freq, mscale); });
  }

  static strata_status SiluMulEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                                    strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "silu_mul", [&](Ctx& c) { return SiluMul(c, x, out); });
  }

  static strata_status GatherRowsEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                                       const strata_tensor* rows, strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "gather_rows", [&](Ctx& c) { return GatherRows(c, x, rows, out); });
  }

  static strata_status KvAppendEntry(strata_backend b, strata_stream st,
                                     const strata_kv_cache* cache, int32_t layer,
                                     const strata_tensor* k, const strata_tensor* v,
                                     const strata_tensor* slots) noexcept {
    return Plugin::RunOp(b, st, "kv_append",
                         [&](Ctx& c) { return KvAppend(c, cache, layer, k, v, slots); });
  }

  static strata_status AttentionPrologueEntry(
      strata_backend b, strata_stream st, strata_tensor* q, strata_tensor* k,
      const strata_tensor* v, const strata_tensor* q_norm, const strata_tensor* k_norm, float eps,
      const strata_tensor* positions, const strata_tensor* inv_freq, float mscale,
      const strata_kv_cache* cache, int32_t layer, const strata_tensor* slots) noexcept {
    return Plugin::RunOp(b, st, "attention_prologue", [&](Ctx& c) {
      return AttentionPrologue(c, q, k, v, q_norm, k_norm, eps, positions, inv_freq, mscale, cache,
                               layer, slots);
    });
  }

  static strata_status GemmSiluMulEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                                        const strata_tensor* w_gate_up, const strata_tensor* bias,
                                        strata_tensor* scratch, strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "gemm_silu_mul",
                         [&](Ctx& c) { return GemmSiluMul(c, x, w_gate_up, bias, scratch, out); });
  }

  static strata_status AttentionPrefillEntry(strata_backend b, strata_stream st,
                                             const strata_kv_cache* cache,
                                             const strata_attention_batch* batch,
                                             const strata_attention_params* params,
                                             const strata_tensor* q, strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "attention_prefill", [&](Ctx& c) {
      return Attention(c, /*decode=*/false, cache, batch, params, q, out);
    });
  }

  static strata_status AttentionDecodeEntry(strata_backend b, strata_stream st,
                                            const strata_kv_cache* cache,
                                            const strata_attention_batch* batch,
                                            const strata_attention_params* params,
                                            const strata_tensor* q, strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "attention_decode", [&](Ctx& c) {
      return Attention(c, /*decode=*/true, cache, batch, params, q, out);
    });
  }

  static strata_status KvCopyBlocksEntry(strata_backend b, strata_stream st,
                                         const strata_kv_cache* cache, const strata_tensor* src,
                                         const strata_tensor* dst) noexcept {
    return Plugin::RunOp(b, st, "kv_copy_blocks",
                         [&](Ctx& c) { return KvCopyBlocks(c, cache, src, dst); });
  }

  static strata_status KvGatherEntry(strata_backend b, strata_stream st,
                                     const strata_kv_cache* cache, const strata_tensor* blocks,
                                     void* dst) noexcept {
    return Plugin::RunOp(b, st, "kv_gather",
                         [&](Ctx& c) { return KvGather(c, cache, blocks, dst); });
  }

  static strata_status KvScatterEntry(strata_backend b, strata_stream st,
                                      const strata_kv_cache* cache, const strata_tensor* blocks,
                                      const void* src) noexcept {
    return Plugin::RunOp(b, st, "kv_scatter",
                         [&](Ctx& c) { return KvScatter(c, cache, blocks, src); });
  }

  static strata_status MoeRouteEntry(strata_backend b, strata_stream st,
                                     const strata_tensor* router_logits, int32_t top_k,
                                     int32_t renormalize, strata_tensor* topk_weights,
                                     strata_tensor* topk_ids) noexcept {
    return Plugin::RunOp(b, st, "moe_route", [&](Ctx& c) {
      return MoeRoute(c, router_logits, top_k, renormalize, topk_weights, topk_ids);
    });
  }

  static strata_status MoeExpertsEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                                       const strata_tensor* topk_weights,
                                       const strata_tensor* topk_ids,
                                       const strata_tensor* w_gate_up, const strata_tensor* w_down,
                                       strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "moe_experts", [&](Ctx& c) {
      return MoeExperts(c, x, topk_weights, topk_ids, w_gate_up, w_down, out);
    });
  }

  static strata_status MoeRouteExpertsEntry(strata_backend b, strata_stream st,
                                            const strata_tensor* x,
                                            const strata_tensor* router_logits, int32_t top_k,
                                            int32_t renormalize, strata_tensor* topk_weights,
                                            strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                                            const strata_tensor* w_down,
                                            strata_tensor* out) noexcept {
    return Plugin::RunOp(b, st, "moe_route_experts", [&](Ctx& c) {
      return MoeRouteExperts(c, x, router_logits, top_k, renormalize, topk_weights, topk_ids,
                             w_gate_up, w_down, out);
    });
  }

  static strata_status SampleEntry(strata_backend b, strata_stream st, const strata_tensor* logits,
                                   const strata_sample_params* params, strata_tensor* tokens,
                                   strata_tensor* logprobs, strata_tensor* top_ids) noexcept {
    return Plugin::RunOp(b, st, "sample", [&](Ctx& c) {
      return Sample(c, logits, params, tokens, logprobs, top_ids);
    });
  }

  static strata_status MaskLogitsEntry(strata_backend b, strata_stream st, strata_tensor* logits,
                                       const strata_tensor* rows,
                                       const strata_tensor* masks) noexcept {
    return Plugin::RunOp(b, st, "mask_logits",
                         [&](Ctx& c) { return MaskLogits(c, logits, rows, masks); });
  }
};

// An entry table with the version fields, the lifecycle entries of Plugin::Backend and every
// op entry of OpEntries<Plugin> filled in; the plugin adds get_info, memory, streams, copies
// and its optional entries.
template <typename Plugin>
constexpr strata_plugin_api_v1 CommonApi(const char* plugin_name) {
  using Backend = typename Plugin::Backend;
  using Ops = OpEntries<Plugin>;
  strata_plugin_api_v1 api{};
  api.api_version = STRATA_PLUGIN_API_VERSION;
  api.struct_size = sizeof(strata_plugin_api_v1);
  api.plugin_name = plugin_name;
  api.create = CreateEntry<Backend>;
  api.destroy = DestroyEntry<Backend>;
  api.last_error = LastErrorEntry<Backend>;
  api.embedding = Ops::EmbeddingEntry;
  api.rms_norm = Ops::RmsNormEntry;
  api.gemm = Ops::GemmEntry;
  api.rope = Ops::RopeEntry;
  api.silu_mul = Ops::SiluMulEntry;
  api.gather_rows = Ops::GatherRowsEntry;
  api.kv_append = Ops::KvAppendEntry;
  api.attention_prefill = Ops::AttentionPrefillEntry;
  api.attention_decode = Ops::AttentionDecodeEntry;
  api.kv_copy_blocks = Ops::KvCopyBlocksEntry;
  api.kv_gather = Ops::KvGatherEntry;
  api.kv_scatter = Ops::KvScatterEntry;
  api.moe_route = Ops::MoeRouteEntry;
  api.moe_experts = Ops::MoeExpertsEntry;
  api.sample = Ops::SampleEntry;
  api.attention_prologue = Ops::AttentionPrologueEntry;
  api.gemm_silu_mul = Ops::GemmSiluMulEntry;
  api.moe_route_experts = Ops::MoeRouteExpertsEntry;
  api.mask_logits = Ops::MaskLogitsEntry;
  return api;
}

}  // namespace strata::plugin_common
