// KV cache maintenance: kv_append, kv_copy_blocks, kv_gather, kv_scatter, and the parallel
// memcpy the plugin's copy entries share. Every block id and slot is checked against the pool
// before anything is written.
#include <algorithm>
#include <cstring>

#include "cpu_common.h"
#include "cpu_ops.h"

namespace strata::cpu {
namespace {

// Block ids are host memory here: the checks read them.
constexpr plugin_common::IndexValues kHostIds = plugin_common::IndexValues::kHost;

// Copies below this size stay on the calling thread; above, 1 MiB pieces go to the pool.
constexpr size_t kParallelCopyBytes = size_t{1} << 20;

// Moves whole blocks between the pool and a packed buffer, in `ids` order.
void CopyBlocks(CpuBackend& be, const CacheView& cache, const int32_t* ids, int64_t n, char* packed,
                bool to_packed) {
  const size_t block_bytes = static_cast<size_t>(cache.block_elems()) * sizeof(float);
  auto copy_one = [&](int64_t i, bool parallel) {
    char* block = reinterpret_cast<char*>(cache.Plane<float>(ids[i], 0, 0));
    char* buf = packed + i * block_bytes;
    void* dst = to_packed ? buf : block;
    const void* src = to_packed ? block : buf;
    if (parallel) {
      ParallelCopy(be, dst, src, block_bytes);
    } else {
      std::memcpy(dst, src, block_bytes);
    }
  };
  if (n >= 2 * be.threads()) {
    be.pool().ParallelFor(n, be.pool().GrainFor(n, 1), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) copy_one(i, false);
    });
  } else {
    for (int64_t i = 0; i < n; ++i) copy_one(i, true);
  }
}

}  // namespace

void ParallelCopy(CpuBackend& be, void* dst, const void* src, size_t bytes) {
  if (bytes < 2 * kParallelCopyBytes || be.threads() == 1) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  const int64_t pieces =
      static_cast<int64_t>((bytes + kParallelCopyBytes - 1) / kParallelCopyBytes);
  be.pool().ParallelFor(pieces, be.pool().GrainFor(pieces, 1), [&](int64_t b, int64_t e) {
    const size_t begin = static_cast<size_t>(b) * kParallelCopyBytes;
    const size_t end = std::min(bytes, static_cast<size_t>(e) * kParallelCopyBytes);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                end - begin);
  });
}

Status KvAppend(CpuBackend& be, const strata_kv_cache* cache, int32_t layer, const strata_tensor* k,
                const strata_tensor* v, const strata_tensor* slots) {
  constexpr const char* kOp = "kv_append";
  plugin_common::KvAppendArgs args;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckKvAppend(kFloatDtype, cache, layer, k, v, slots, &args));
  const CacheView& cv = args.cache;
  const TensorView &kv = args.k, &vv = args.v, &sv = args.slots;
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckIndices(kOp, "slots", sv.Ints(), sv.rows, 1,
                                             cv.num_blocks * cv.block_size,
                                             /*allow_negative=*/true));
  const int32_t* slot = sv.Ints();
  const size_t row_bytes = static_cast<size_t>(cv.token_elems()) * sizeof(float);
  const int64_t grain = be.pool().GrainFor(kv.rows, std::max<int64_t>(1, 8192 / kv.cols));
  be.pool().ParallelFor(kv.rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (slot[t] < 0) continue;
      const int64_t block = slot[t] / cv.block_size;
      const int64_t offset = (slot[t] % cv.block_size) * cv.token_elems();
      std::memcpy(cv.Plane<float>(block, layer, 0) + offset, kv.Row<float>(t), row_bytes);
      std::memcpy(cv.Plane<float>(block, layer, 1) + offset, vv.Row<float>(t), row_bytes);
    }
  });
  return Status();
}

Status AttentionPrologue(CpuBackend& be, strata_tensor* q, strata_tensor* k, const strata_tensor* v,
                         const strata_tensor* q_norm, const strata_tensor* k_norm, float eps,
                         const strata_tensor* positions, const strata_tensor* inv_freq,
                         float mscale, const strata_kv_cache* cache, int32_t layer,
                         const strata_tensor* slots) {
  constexpr const char* kOp = "attention_prologue";
  plugin_common::AttentionPrologueArgs args;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckAttentionPrologue(
      kFloatDtype, q, k, v, q_norm, k_norm, positions, inv_freq, cache, layer, slots, &args));
  // Everything the composed ops would refuse is refused before any of them writes.
  const TensorView& sv = args.kv.slots;
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckIndices(kOp, "slots", sv.Ints(), sv.rows, 1,
                                             args.kv.cache.num_blocks * args.kv.cache.block_size,
                                             /*allow_negative=*/true));
  if (args.norms) {
    STRATA_PLUGIN_RETURN_IF_ERROR(RmsNorm(be, q, nullptr, q_norm, eps, q));
    STRATA_PLUGIN_RETURN_IF_ERROR(RmsNorm(be, k, nullptr, k_norm, eps, k));
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(Rope(be, q, k, positions, inv_freq, mscale));
  return KvAppend(be, cache, layer, k, v, slots);
}

Status KvCopyBlocks(CpuBackend& be, const strata_kv_cache* cache, const strata_tensor* src,
                    const strata_tensor* dst) {
  plugin_common::KvBlocksArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckKvCopyBlocks(kFloatDtype, kHostIds, cache, src, dst, &a));
  const CacheView& cv = a.cache;
  const TensorView &sv = a.src, &dv = a.dst;
  const size_t block_bytes = static_cast<size_t>(cv.block_elems()) * sizeof(float);
  // In order, one block at a time: a later pair may read a block an earlier pair wrote.
  for (int64_t i = 0; i < sv.rows; ++i) {
    const int32_t from = sv.Ints()[i], to = dv.Ints()[i];
    if (from != to)
      ParallelCopy(be, cv.Plane<float>(to, 0, 0), cv.Plane<float>(from, 0, 0), block_bytes);
  }
  return Status();
}

Status KvGather(CpuBackend& be, const strata_kv_cache* cache, const strata_tensor* blocks,
                void* dst) {
  plugin_common::KvBlocksArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckKvGather(kFloatDtype, kHostIds, cache, blocks, dst, &a));
  const TensorView& bv = a.src;
  CopyBlocks(be, a.cache, bv.Ints(), bv.rows, static_cast<char*>(dst), /*to_packed=*/true);
  return Status();
}

Status KvScatter(CpuBackend& be, const strata_kv_cache* cache, const strata_tensor* blocks,
                 const void* src) {
  plugin_common::KvBlocksArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckKvScatter(kFloatDtype, kHostIds, cache, blocks, src, &a));
  const TensorView& bv = a.src;
  CopyBlocks(be, a.cache, bv.Ints(), bv.rows, static_cast<char*>(const_cast<void*>(src)),
             /*to_packed=*/false);
  return Status();
}

}  // namespace strata::cpu
