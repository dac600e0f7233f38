// moe_experts for decode-sized calls (few tokens, so few rows per expert): two kernels of warp
// dot products, no sort, no tensor cores.
//
// At 1-8 tokens an expert sees one or two rows, so the layer is a weight stream: Qwen3-30B-A3B
// at one token reads 8 experts x 9.4 MB and does 2 FLOPs per weight. The tiled path spends a
// sort kernel, 16-row mma tiles that are 1/16 used, a combine kernel and an uneven split of
// 256 KB tiles over the SMs on it. Here every warp owns units of one weight row (or a gate/up
// row pair) and streams them with 16-byte loads that skip L1, the activations it multiplies
// them by staying in L1:
//
//   1. MoeVectorGateUpKernel: unit (c, a) for column c < I and assignment a = t * k + j:
//      act[a, c] = silu(x[t] . Wg[e][c]) * (x[t] . Wu[e][c]), e = ids[t, j], in bf16.
//   2. MoeVectorDownKernel: unit (n, t) for column n < H and token t:
//      out[t, n] = sum_j w[t, j] * (act[t * k + j] . Wd[e_j][n]), fp32, j in order, bf16 out
//      (the combine is fused: a unit holds all k experts of its token).
//
// Units are numbered so that neighbouring warps take the same column of different tokens (and,
// for gate_up, of the token's other experts), so a weight row two tokens share is read from the
// L2 the second time; the plan sends only calls with no more assignments than experts here.
// Grids are persistent (2 CTAs of 8 warps per SM, each warp striding over the units), which
// spreads the bytes evenly over the SMs; 16 loads of 16 bytes per lane are issued before any is
// used (8 KiB per warp, 128 KiB per SM), and the arithmetic is branch-free. The routing (<= 64
// assignments) is staged in shared memory. An id outside [0, E) contributes nothing. Both
// kernels use programmatic dependent launch; the down kernel reads the routing and prefetches
// its first unit's weight rows into the L2 before waiting for the gate_up kernel.
//
// moe_route_experts (single-token calls, cuda_kernels.h) runs the same two kernels with the
// router logits instead of a routing: each gate_up CTA routes the call's tokens itself (a warp
// per token, moe_route.cuh), so the layer has no route kernel of its own on its critical path;
// the first CTA writes the routing out, and the down kernel reads it once the gate_up kernel
// is done.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "strata/kernels/cuda_kernels.h"
#include "moe_gemm_common.cuh"
#include "moe_route.cuh"
#include "warp_dot.cuh"

namespace strata::cuda {
namespace {

// Bench variants only (built by hand, like STRATA_MOE_PDL): the grid's CTAs per SM of each
// kernel and the 16-byte weight loads in flight per lane. The plugin uses the defaults.
#ifndef STRATA_MOE_VECTOR_CTAS
#define STRATA_MOE_VECTOR_CTAS 2
#endif
#ifndef STRATA_MOE_VECTOR_LOADS
#define STRATA_MOE_VECTOR_LOADS 16
#endif
#ifndef STRATA_MOE_VECTOR_DOWN_CTAS
#define STRATA_MOE_VECTOR_DOWN_CTAS STRATA_MOE_VECTOR_CTAS
#endif

constexpr int kThreads = 256;
constexpr int kWarpsPerCta = kThreads / 32;
constexpr int kGateUpCtasPerSm = STRATA_MOE_VECTOR_CTAS;
constexpr int kDownCtasPerSm = STRATA_MOE_VECTOR_DOWN_CTAS;
constexpr int kLoads = STRATA_MOE_VECTOR_LOADS;

struct VectorArgs {
  const bf16* x;
  int64_t x_stride;
  int32_t rows, top_k, experts, hidden, inter;
  const int32_t* ids;
  int64_t ids_stride;
  const float* weights;
  int64_t weights_stride;
  const bf16* w_gate_up;
  int64_t gate_up_expert_stride;
  const bf16* w_down;
  int64_t down_expert_stride;
  bf16* act;  // [rows * top_k, inter]
  bf16* out;
  int64_t out_stride;
};

// The call's routing in shared memory (the vector path serves <= 64 assignments): ids outside
// [0, E) become -1.
struct Routing {
  int32_t id[kMoeVectorMaxAssignments];
  float weight[kMoeVectorMaxAssignments];
};

// Computes the routing from r.logits: one warp per token, V experts per lane. (The routing's
// arguments are a kernel parameter of their own: in VectorArgs they made the down kernel
// spill.)
template <int V>
__device__ __forceinline__ void RouteTokens(const VectorArgs& a, const MoeVectorRouting& r,
                                            Routing* s) {
  for (int t = threadIdx.x / 32; t < a.rows; t += kWarpsPerCta) {
    RouteRowWarp<V>(r.logits + t * r.logits_stride, a.experts, a.top_k, r.renormalize,
                    s->id + t * a.top_k, s->weight + t * a.top_k);
  }
  __syncthreads();
}

// Reads the routing from a.ids / a.weights.
__device__ __forceinline__ void LoadRouting(const VectorArgs& a, Routing* s) {
  const int n = a.rows * a.top_k;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int t = i / a.top_k, j = i - t * a.top_k;
    const int32_t e = a.ids[t * a.ids_stride + j];
    s->id[i] = e >= 0 && e < a.experts ? e : -1;
    s->weight[i] = a.weights[t * a.weights_stride + j];
  }
  __syncthreads();
}

// The routing computed in the kernels goes out to topk_ids / topk_weights (one CTA writes it).
__device__ __forceinline__ void StoreRouting(const VectorArgs& a, const Routing& s) {
  if (blockIdx.x != 0) return;
  int32_t* ids = const_cast<int32_t*>(a.ids);
  float* weights = const_cast<float*>(a.weights);
  for (int i = threadIdx.x; i < a.rows * a.top_k; i += kThreads) {
    const int t = i / a.top_k, j = i - t * a.top_k;
    ids[t * a.ids_stride + j] = s.id[i];
    weights[t * a.weights_stride + j] = s.weight[i];
  }
}

// V: experts per lane when routing (32 V >= experts).
template <int V>
__global__ void __launch_bounds__(kThreads, 2)
    MoeVectorGateUpKernel(VectorArgs a, MoeVectorRouting r) {
  __shared__ Routing routing;
  WaitForPrerequisites();  // x, the routing (or logits), and the previous call's readers of act
  AllowDependents();
  if (r.logits != nullptr) {
    RouteTokens<V>(a, r, &routing);
    StoreRouting(a, routing);
  } else {
    LoadRouting(a, &routing);
  }
  const int lane = threadIdx.x & 31;
  const int n = a.rows * a.top_k, units = n * a.inter;
  const int warps = gridDim.x * kWarpsPerCta;
  for (int u = blockIdx.x * kWarpsPerCta + threadIdx.x / 32; u < units; u += warps) {
    const int c = u / n, assignment = u - c * n;
    const int32_t e = routing.id[assignment];
    const bf16* gate =
        e >= 0 ? a.w_gate_up + e * a.gate_up_expert_stride + int64_t{c} * a.hidden : nullptr;
    const bf16* const w[2] = {gate, e >= 0 ? gate + int64_t{a.inter} * a.hidden : nullptr};
    float acc[2][1];
    DotRows<2, 1, kLoads / 2>(w, a.x + (assignment / a.top_k) * a.x_stride, 0, 1, 0, a.hidden / 8,
                              acc);
    if (lane == 0) {
      a.act[int64_t{assignment} * a.inter + c] =
          __float2bfloat16(e >= 0 ? moe::Silu(acc[0][0]) * acc[1][0] : 0.0f);
    }
  }
}

// R experts per pass (R >= top_k where it can), KP chunks of each. kRoutedByGateUp: the gate_up
// kernel computed the routing (moe_route_experts) and wrote it to ids / weights.
template <int R, bool kRoutedByGateUp>
__global__ void __launch_bounds__(kThreads, 2) MoeVectorDownKernel(VectorArgs a) {
  constexpr int KP = kLoads / R > 0 ? kLoads / R : 1;
  __shared__ Routing routing;
  const int lane = threadIdx.x & 31;
  const int units = a.rows * a.hidden;
  const int warps = gridDim.x * kWarpsPerCta;
  const int first = blockIdx.x * kWarpsPerCta + threadIdx.x / 32;
  // A given routing was final before the gate_up kernel started: read it, and fetch this
  // warp's first weight rows into the L2 while that kernel finishes. One the gate_up kernel
  // computed is read once that kernel is done (computing it here again, before the wait, gains
  // nothing: this grid's CTAs become resident only as the gate_up grid's leave).
  if (!kRoutedByGateUp) {
    LoadRouting(a, &routing);
    if (first < units) {
      const int nc = first / a.rows, t = first - nc * a.rows;
      const int row_bytes = a.inter * 2;
      for (int j = 0; j < a.top_k; ++j) {
        const int32_t e = routing.id[t * a.top_k + j];
        if (e < 0) continue;
        const char* row = reinterpret_cast<const char*>(a.w_down + e * a.down_expert_stride +
                                                        int64_t{nc} * a.inter);
        for (int off = lane * 128; off < row_bytes; off += 32 * 128) {
          asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row + off));
        }
      }
    }
  }
  WaitForPrerequisites();  // act (and the routing the gate_up kernel wrote)
  AllowDependents();
  if (kRoutedByGateUp) LoadRouting(a, &routing);
  for (int u = first; u < units; u += warps) {
    const int nc = u / a.rows, t = u - nc * a.rows;
    float total = 0.0f;
    for (int j0 = 0; j0 < a.top_k; j0 += R) {
      const bf16* w[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int j = j0 + r;
        const int32_t e = j < a.top_k ? routing.id[t * a.top_k + j] : -1;
        w[r] = e >= 0 ? a.w_down + e * a.down_expert_stride + int64_t{nc} * a.inter : nullptr;
      }
      // Rows past top_k read token t's last act row (against zero weights).
      float acc[R][1];
      DotRows<R, 1, KP>(w, a.act + int64_t{t * a.top_k + j0} * a.inter, a.inter, a.top_k - j0, 0,
                        a.inter / 8, acc);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (w[r] != nullptr) total += routing.weight[t * a.top_k + j0 + r] * acc[r][0];
      }
    }
    if (lane == 0) a.out[int64_t{t} * a.out_stride + nc] = __float2bfloat16(total);
  }
}

template <auto kKernel, typename... Args>
cudaError_t Launch(int64_t units, int ctas_per_sm, cudaStream_t stream, const Args&... args) {
  return LaunchPdl(kKernel, PersistentGrid(units, kWarpsPerCta, ctas_per_sm), dim3(kThreads), 0,
                   stream, args...);
}

}  // namespace

cudaError_t LaunchMoeVector(const MoeExpertsArgs& m, void* act, cudaStream_t stream,
                            const MoeVectorRouting* routing) {
  if (routing != nullptr && m.experts > kMoeVectorRouteMaxExperts) return cudaErrorInvalidValue;
  VectorArgs a{};
  a.x = m.x;
  a.x_stride = m.x_stride;
  a.rows = static_cast<int32_t>(m.rows);
  a.top_k = static_cast<int32_t>(m.top_k);
  a.experts = static_cast<int32_t>(m.experts);
  a.hidden = static_cast<int32_t>(m.hidden);
  a.inter = static_cast<int32_t>(m.inter);
  a.ids = m.topk_ids;
  a.ids_stride = m.ids_stride;
  a.weights = m.weights;
  a.weights_stride = m.weights_stride;
  a.w_gate_up = m.w_gate_up;
  a.gate_up_expert_stride = m.gate_up_expert_stride;
  a.w_down = m.w_down;
  a.down_expert_stride = m.down_expert_stride;
  a.act = static_cast<bf16*>(act);
  a.out = m.out;
  a.out_stride = m.out_stride;
  static_assert(kMoeVectorRouteMaxExperts <= 32 * 8);
  const MoeVectorRouting r = routing != nullptr ? *routing : MoeVectorRouting{};
  const int64_t gate_up_units = m.rows * m.top_k * m.inter;
  cudaError_t err =
      m.experts <= 128
          ? Launch<MoeVectorGateUpKernel<4>>(gate_up_units, kGateUpCtasPerSm, stream, a, r)
          : Launch<MoeVectorGateUpKernel<8>>(gate_up_units, kGateUpCtasPerSm, stream, a, r);
  if (err != cudaSuccess) return err;
  const int64_t units = m.rows * m.hidden;
  auto down = [&](auto routed) {
    constexpr bool kRouted = decltype(routed)::value;
    if (m.top_k <= 2) {
      return Launch<MoeVectorDownKernel<2, kRouted>>(units, kDownCtasPerSm, stream, a);
    }
    if (m.top_k <= 4) {
      return Launch<MoeVectorDownKernel<4, kRouted>>(units, kDownCtasPerSm, stream, a);
    }
    return Launch<MoeVectorDownKernel<8, kRouted>>(units, kDownCtasPerSm, stream, a);
  };
  return routing != nullptr ? down(std::true_type{}) : down(std::false_type{});
}

}  // namespace strata::cuda
