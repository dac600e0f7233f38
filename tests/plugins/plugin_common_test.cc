// The plugin-side helper library (plugins/common) shared by the CPU and CUDA plugins:
// descriptor validation, the shared op argument checks (on host memory) and the entry glue.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "strata/plugin_common/copy_runs.h"
#include "strata/plugin_common/entry.h"
#include "strata/plugin_common/op_args.h"
#include "strata/plugin_common/status.h"
#include "strata/plugin_common/tensor.h"

namespace strata::plugin_common {
namespace {

strata_tensor Tensor(void* data, strata_dtype dtype, std::vector<int64_t> shape,
                     int64_t row_stride = 0) {
  strata_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) t.shape[d] = shape[d];
  t.row_stride = row_stride;
  return t;
}

TEST(ViewTensorTest, ComputesRowsColsAndStride) {
  std::vector<float> buf(64);
  strata_tensor t = Tensor(buf.data(), STRATA_DTYPE_F32, {3, 2, 4}, 10);
  TensorView v;
  ASSERT_TRUE(ViewTensor("op", "x", &t, STRATA_DTYPE_F32, 3, 3, &v).ok());
  EXPECT_EQ(v.rows, 3);
  EXPECT_EQ(v.cols, 8);
  EXPECT_EQ(v.stride, 10);
  EXPECT_EQ(v.span(), 28);
  EXPECT_EQ(v.span_bytes(), 112);
  EXPECT_EQ(v.Row<float>(2), buf.data() + 20);
}

TEST(ViewTensorTest, FloatMismatchIsUnsupportedOtherMismatchInvalid) {
  std::vector<float> buf(8);
  strata_tensor bf = Tensor(buf.data(), STRATA_DTYPE_BF16, {2, 2});
  strata_tensor i32 = Tensor(buf.data(), STRATA_DTYPE_I32, {2, 2});
  TensorView v;
  EXPECT_EQ(ViewTensor("op", "x", &bf, STRATA_DTYPE_F32, 2, 2, &v).code(), STRATA_ERR_UNSUPPORTED);
  EXPECT_EQ(ViewTensor("op", "x", &i32, STRATA_DTYPE_F32, 2, 2, &v).code(),
            STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ViewTensor("op", "x", nullptr, STRATA_DTYPE_F32, 2, 2, &v).code(),
            STRATA_ERR_INVALID_ARGUMENT);
}

TEST(ViewTensorTest, RejectsBadShapesAndStrides) {
  std::vector<float> buf(8);
  TensorView v;
  strata_tensor rank = Tensor(buf.data(), STRATA_DTYPE_F32, {8});
  const Status s = ViewTensor("gemm", "x", &rank, STRATA_DTYPE_F32, 2, 2, &v);
  EXPECT_EQ(s.code(), STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s.message(), "gemm: x: ndim 1, expected 2");
  strata_tensor neg = Tensor(buf.data(), STRATA_DTYPE_F32, {2, -1});
  EXPECT_FALSE(ViewTensor("op", "x", &neg, STRATA_DTYPE_F32, 2, 2, &v).ok());
  strata_tensor narrow = Tensor(buf.data(), STRATA_DTYPE_F32, {2, 4}, 3);
  EXPECT_FALSE(ViewTensor("op", "x", &narrow, STRATA_DTYPE_F32, 2, 2, &v).ok());
  strata_tensor huge = Tensor(buf.data(), STRATA_DTYPE_F32, {int64_t{1} << 40, int64_t{1} << 20});
  EXPECT_FALSE(ViewTensor("op", "x", &huge, STRATA_DTYPE_F32, 2, 2, &v).ok());
  strata_tensor null_data = Tensor(nullptr, STRATA_DTYPE_F32, {2, 2});
  EXPECT_FALSE(ViewTensor("op", "x", &null_data, STRATA_DTYPE_F32, 2, 2, &v).ok());
  strata_tensor empty = Tensor(nullptr, STRATA_DTYPE_F32, {0, 2});
  EXPECT_TRUE(ViewTensor("op", "x", &empty, STRATA_DTYPE_F32, 2, 2, &v).ok());
}

TEST(OverlapsTest, ComparesByteRanges) {
  std::vector<uint16_t> buf(64);
  strata_tensor a = Tensor(buf.data(), STRATA_DTYPE_BF16, {2, 8});
  strata_tensor b = Tensor(buf.data() + 16, STRATA_DTYPE_BF16, {2, 8});
  strata_tensor c = Tensor(buf.data() + 15, STRATA_DTYPE_BF16, {2, 8});
  TensorView va, vb, vc;
  ASSERT_TRUE(ViewTensor("op", "a", &a, STRATA_DTYPE_BF16, 2, 2, &va).ok());
  ASSERT_TRUE(ViewTensor("op", "b", &b, STRATA_DTYPE_BF16, 2, 2, &vb).ok());
  ASSERT_TRUE(ViewTensor("op", "c", &c, STRATA_DTYPE_BF16, 2, 2, &vc).ok());
  EXPECT_FALSE(Overlaps(va, vb));
  EXPECT_TRUE(Overlaps(va, vc));
}

TEST(CheckIndicesTest, ReportsTheFirstOutOfRangeEntry) {
  const int32_t ids[] = {0, 3, -1, 4};
  EXPECT_TRUE(CheckIndices("op", "ids", ids, 2, 1, 4).ok());
  EXPECT_EQ(CheckIndices("op", "ids", ids, 4, 1, 4).message(),
            "op: ids[2] = -1 is out of range [0, 4)");
  EXPECT_EQ(CheckIndices("op", "ids", ids, 4, 1, 4, true).message(),
            "op: ids[3] = 4 is out of range [0, 4)");
}

// moe_experts with T=3, H=8, I=4, E=2, k=2 in `dtype`, all tensors dense and disjoint.
struct MoeTensors {
  std::vector<float> x = std::vector<float>(24), w = std::vector<float>(6),
                     out = std::vector<float>(24), gu = std::vector<float>(2 * 8 * 8),
                     dn = std::vector<float>(2 * 8 * 4);
  std::vector<int32_t> ids = std::vector<int32_t>(6);
  strata_tensor tx, tw, ti, tgu, tdn, tout;
  explicit MoeTensors(strata_dtype dtype) {
    tx = Tensor(x.data(), dtype, {3, 8});
    tw = Tensor(w.data(), STRATA_DTYPE_F32, {3, 2});
    ti = Tensor(ids.data(), STRATA_DTYPE_I32, {3, 2});
    tgu = Tensor(gu.data(), dtype, {2, 8, 8});
    tdn = Tensor(dn.data(), dtype, {2, 8, 4});
    tout = Tensor(out.data(), dtype, {3, 8});
  }
  Status Check(strata_dtype dtype, MoeExpertsArgs* a) {
    return CheckMoeExperts(dtype, &tx, &tw, &ti, &tgu, &tdn, &tout, a);
  }
};

TEST(CheckMoeExpertsTest, AcceptsConsistentShapes) {
  MoeTensors m(STRATA_DTYPE_F32);
  MoeExpertsArgs a;
  ASSERT_TRUE(m.Check(STRATA_DTYPE_F32, &a).ok());
  EXPECT_EQ(a.experts, 2);
  EXPECT_EQ(a.hidden, 8);
  EXPECT_EQ(a.inter, 4);
  EXPECT_EQ(a.top_k, 2);
}

TEST(CheckMoeExpertsTest, RejectsMismatchesAndOverlap) {
  MoeExpertsArgs a;
  {
    MoeTensors m(STRATA_DTYPE_F32);
    m.tdn.shape[2] = 5;  // w_down's I differs from w_gate_up's
    EXPECT_EQ(m.Check(STRATA_DTYPE_F32, &a).code(), STRATA_ERR_INVALID_ARGUMENT);
  }
  {
    MoeTensors m(STRATA_DTYPE_F32);
    m.tgu.shape[1] = 7;  // not 2 * I
    EXPECT_EQ(m.Check(STRATA_DTYPE_F32, &a).code(), STRATA_ERR_INVALID_ARGUMENT);
  }
  {
    MoeTensors m(STRATA_DTYPE_F32);
    m.tout.data = m.x.data();
    EXPECT_EQ(m.Check(STRATA_DTYPE_F32, &a).message(), "moe_experts: out overlaps x");
  }
  {
    MoeTensors m(STRATA_DTYPE_BF16);  // a BF16 layer given to an F32 plugin
    EXPECT_EQ(m.Check(STRATA_DTYPE_F32, &a).code(), STRATA_ERR_UNSUPPORTED);
  }
}

TEST(CheckMoeRouteTest, ChecksTopKAndOutputShapes) {
  std::vector<float> logits(12), w(6);
  std::vector<int32_t> ids(6);
  strata_tensor tl = Tensor(logits.data(), STRATA_DTYPE_F32, {3, 4});
  strata_tensor tw = Tensor(w.data(), STRATA_DTYPE_F32, {3, 2});
  strata_tensor ti = Tensor(ids.data(), STRATA_DTYPE_I32, {3, 2});
  MoeRouteArgs a;
  ASSERT_TRUE(CheckMoeRoute(STRATA_DTYPE_F32, &tl, 2, &tw, &ti, &a).ok());
  EXPECT_EQ(a.experts, 4);
  EXPECT_FALSE(CheckMoeRoute(STRATA_DTYPE_F32, &tl, 5, &tw, &ti, &a).ok());
  EXPECT_FALSE(CheckMoeRoute(STRATA_DTYPE_F32, &tl, 3, &tw, &ti, &a).ok());
}

TEST(CheckMoeRouteExpertsTest, ChecksBothOpsUnderItsNameAndTheExpertCount) {
  std::vector<float> logits(3 * 2);
  MoeRouteArgs r;
  MoeExpertsArgs e;
  {
    MoeTensors m(STRATA_DTYPE_F32);
    strata_tensor tl = Tensor(logits.data(), STRATA_DTYPE_F32, {3, 2});
    ASSERT_TRUE(CheckMoeRouteExperts(STRATA_DTYPE_F32, &m.tx, &tl, 2, &m.tw, &m.ti, &m.tgu, &m.tdn,
                                     &m.tout, &r, &e)
                    .ok());
    EXPECT_EQ(r.experts, 2);
    EXPECT_EQ(e.inter, 4);
    // top_k past the experts: moe_route's rule, under the fused op's name.
    EXPECT_EQ(CheckMoeRouteExperts(STRATA_DTYPE_F32, &m.tx, &tl, 3, &m.tw, &m.ti, &m.tgu, &m.tdn,
                                   &m.tout, &r, &e)
                  .message(),
              "moe_route_experts: top_k 3 is out of range [1, 2]");
    m.tdn.shape[2] = 5;  // moe_experts' rule
    EXPECT_EQ(CheckMoeRouteExperts(STRATA_DTYPE_F32, &m.tx, &tl, 2, &m.tw, &m.ti, &m.tgu, &m.tdn,
                                   &m.tout, &r, &e)
                  .code(),
              STRATA_ERR_INVALID_ARGUMENT);
  }
  {
    MoeTensors m(STRATA_DTYPE_F32);
    std::vector<float> wide(3 * 4);
    strata_tensor tl = Tensor(wide.data(), STRATA_DTYPE_F32, {3, 4});
    EXPECT_EQ(CheckMoeRouteExperts(STRATA_DTYPE_F32, &m.tx, &tl, 2, &m.tw, &m.ti, &m.tgu, &m.tdn,
                                   &m.tout, &r, &e)
                  .message(),
              "moe_route_experts: router_logits has 4 columns for 2 experts");
  }
  {
    MoeTensors m(STRATA_DTYPE_F32);
    strata_tensor tl = Tensor(m.out.data(), STRATA_DTYPE_F32, {3, 2});  // inside out
    EXPECT_EQ(CheckMoeRouteExperts(STRATA_DTYPE_F32, &m.tx, &tl, 2, &m.tw, &m.ti, &m.tgu, &m.tdn,
                                   &m.tout, &r, &e)
                  .message(),
              "moe_route_experts: out overlaps router_logits, topk_weights or topk_ids");
  }
}

TEST(CheckKvAppendTest, ChecksLayerHeadsAndSlots) {
  std::vector<float> pool(2 * 2 * 2 * 4 * 2 * 8), k(3 * 2 * 8), v(3 * 2 * 8);
  std::vector<int32_t> slots(3);
  strata_kv_cache cache{pool.data(), STRATA_DTYPE_F32, 2, 2, 4, 2, 8};
  strata_tensor tk = Tensor(k.data(), STRATA_DTYPE_F32, {3, 2, 8});
  strata_tensor tv = Tensor(v.data(), STRATA_DTYPE_F32, {3, 2, 8});
  strata_tensor ts = Tensor(slots.data(), STRATA_DTYPE_I32, {3});
  KvAppendArgs a;
  ASSERT_TRUE(CheckKvAppend(STRATA_DTYPE_F32, &cache, 1, &tk, &tv, &ts, &a).ok());
  EXPECT_EQ(a.cache.block_elems(), 2 * 2 * 4 * 2 * 8);
  EXPECT_EQ(a.cache.Plane<float>(1, 1, 1), pool.data() + ((1 * 2 + 1) * 2 + 1) * 64);
  EXPECT_EQ(CheckKvAppend(STRATA_DTYPE_F32, &cache, 2, &tk, &tv, &ts, &a).message(),
            "kv_append: layer 2 is out of range [0, 2)");
  ts.shape[0] = 2;
  EXPECT_FALSE(CheckKvAppend(STRATA_DTYPE_F32, &cache, 0, &tk, &tv, &ts, &a).ok());
  cache.dtype = STRATA_DTYPE_BF16;
  ts.shape[0] = 3;
  EXPECT_EQ(CheckKvAppend(STRATA_DTYPE_F32, &cache, 0, &tk, &tv, &ts, &a).code(),
            STRATA_ERR_UNSUPPORTED);
}

// ---- dense ops and gemm ------------------------------------------------------------------

TEST(CheckEmbeddingTest, HostIdsAreCheckedDeviceIdsAreLeftToTheKernels) {
  std::vector<float> table(4 * 3), out(2 * 3);
  std::vector<int32_t> ids = {0, 5};
  strata_tensor tt = Tensor(table.data(), STRATA_DTYPE_F32, {4, 3});
  strata_tensor ti = Tensor(ids.data(), STRATA_DTYPE_I32, {2});
  strata_tensor to = Tensor(out.data(), STRATA_DTYPE_F32, {2, 3});
  EmbeddingArgs a;
  EXPECT_EQ(CheckEmbedding(STRATA_DTYPE_F32, IndexValues::kHost, &tt, &ti, &to, &a).message(),
            "embedding: ids[1] = 5 is out of range [0, 4)");
  ASSERT_TRUE(CheckEmbedding(STRATA_DTYPE_F32, IndexValues::kDevice, &tt, &ti, &to, &a).ok());
  EXPECT_EQ(a.table.rows, 4);
  EXPECT_EQ(a.out.cols, 3);
  to.shape[1] = 2;
  EXPECT_EQ(CheckEmbedding(STRATA_DTYPE_F32, IndexValues::kDevice, &tt, &ti, &to, &a).message(),
            "embedding: out.shape[1] is 2, expected 3");
}

TEST(CheckGatherRowsTest, ChecksRankTrailingDimsAndHostRows) {
  std::vector<float> x(4 * 2 * 3), out(2 * 2 * 3);
  std::vector<int32_t> rows = {3, 0};
  strata_tensor tx = Tensor(x.data(), STRATA_DTYPE_F32, {4, 2, 3});
  strata_tensor tr = Tensor(rows.data(), STRATA_DTYPE_I32, {2});
  strata_tensor to = Tensor(out.data(), STRATA_DTYPE_F32, {2, 2, 3});
  GatherRowsArgs a;
  ASSERT_TRUE(CheckGatherRows(STRATA_DTYPE_F32, IndexValues::kHost, &tx, &tr, &to, &a).ok());
  EXPECT_EQ(a.x.cols, 6);
  rows[1] = -1;
  EXPECT_EQ(CheckGatherRows(STRATA_DTYPE_F32, IndexValues::kHost, &tx, &tr, &to, &a).message(),
            "gather_rows: rows[1] = -1 is out of range [0, 4)");
  EXPECT_TRUE(CheckGatherRows(STRATA_DTYPE_F32, IndexValues::kDevice, &tx, &tr, &to, &a).ok());
  to = Tensor(out.data(), STRATA_DTYPE_F32, {2, 6});
  EXPECT_EQ(CheckGatherRows(STRATA_DTYPE_F32, IndexValues::kDevice, &tx, &tr, &to, &a).message(),
            "gather_rows: out and x differ in ndim");
}

TEST(CheckRmsNormTest, NormalizesTheLastDimAndChecksResidualAndEps) {
  std::vector<float> x(2 * 3 * 4), res(2 * 3 * 4), w(4), out(2 * 3 * 4);
  strata_tensor tx = Tensor(x.data(), STRATA_DTYPE_F32, {2, 3, 4});
  strata_tensor tr = Tensor(res.data(), STRATA_DTYPE_F32, {2, 3, 4});
  strata_tensor tw = Tensor(w.data(), STRATA_DTYPE_F32, {4});
  strata_tensor to = Tensor(out.data(), STRATA_DTYPE_F32, {2, 3, 4});
  RmsNormArgs a;
  ASSERT_TRUE(CheckRmsNorm(STRATA_DTYPE_F32, &tx, &tr, &tw, 1e-6f, &to, &a).ok());
  EXPECT_EQ(a.d, 4);
  EXPECT_TRUE(a.has_residual);
  ASSERT_TRUE(CheckRmsNorm(STRATA_DTYPE_F32, &tx, nullptr, &tw, 0.0f, &to, &a).ok());
  EXPECT_FALSE(a.has_residual);
  EXPECT_EQ(CheckRmsNorm(STRATA_DTYPE_F32, &tx, nullptr, &tw, -1.0f, &to, &a).message(),
            "rms_norm: eps must be >= 0, got -1");
  tr.shape[1] = 2;
  EXPECT_FALSE(CheckRmsNorm(STRATA_DTYPE_F32, &tx, &tr, &tw, 0.0f, &to, &a).ok());
  EXPECT_EQ(CheckRmsNorm(STRATA_DTYPE_BF16, &tx, nullptr, &tw, 0.0f, &to, &a).code(),
            STRATA_ERR_UNSUPPORTED);
}

TEST(CheckRopeTest, ChecksFrequenciesAndK) {
  std::vector<float> q(3 * 4 * 8), k(3 * 2 * 8), freq(4);
  std::vector<int32_t> pos(3);
  strata_tensor tq = Tensor(q.data(), STRATA_DTYPE_F32, {3, 4, 8});
  strata_tensor tk = Tensor(k.data(), STRATA_DTYPE_F32, {3, 2, 8});
  strata_tensor tp = Tensor(pos.data(), STRATA_DTYPE_I32, {3});
  strata_tensor tf = Tensor(freq.data(), STRATA_DTYPE_F32, {4});
  RopeArgs a;
  ASSERT_TRUE(CheckRope(STRATA_DTYPE_F32, &tq, &tk, &tp, &tf, &a).ok());
  EXPECT_TRUE(a.has_k);
  ASSERT_TRUE(CheckRope(STRATA_DTYPE_F32, &tq, nullptr, &tp, &tf, &a).ok());
  EXPECT_FALSE(a.has_k);
  EXPECT_EQ(CheckRope(STRATA_DTYPE_F32, &tq, &tq, &tp, &tf, &a).message(),
            "rope: q and k are the same tensor");
  tf.shape[0] = 5;
  EXPECT_EQ(CheckRope(STRATA_DTYPE_F32, &tq, &tk, &tp, &tf, &a).message(),
            "rope: inv_freq has 5 entries but head_dim 8 allows at most 4");
}

TEST(CheckSiluMulTest, OutIsHalfOfX) {
  std::vector<float> x(2 * 8), out(2 * 4);
  strata_tensor tx = Tensor(x.data(), STRATA_DTYPE_F32, {2, 8});
  strata_tensor to = Tensor(out.data(), STRATA_DTYPE_F32, {2, 4});
  SiluMulArgs a;
  ASSERT_TRUE(CheckSiluMul(STRATA_DTYPE_F32, &tx, &to, &a).ok());
  EXPECT_EQ(a.inter, 4);
  to.shape[1] = 3;
  EXPECT_EQ(CheckSiluMul(STRATA_DTYPE_F32, &tx, &to, &a).message(),
            "silu_mul: x.shape[1] is 8, expected 2 * out.shape[1] = 6");
}

TEST(CheckGemmTest, ChecksShapesBiasAndOverlap) {
  std::vector<float> x(3 * 4), w(5 * 4), bias(5), out(3 * 5);
  strata_tensor tx = Tensor(x.data(), STRATA_DTYPE_F32, {3, 4});
  strata_tensor tw = Tensor(w.data(), STRATA_DTYPE_F32, {5, 4});
  strata_tensor tb = Tensor(bias.data(), STRATA_DTYPE_F32, {5});
  strata_tensor to = Tensor(out.data(), STRATA_DTYPE_F32, {3, 5});
  GemmArgs a;
  ASSERT_TRUE(CheckGemm(STRATA_DTYPE_F32, &tx, &tw, &tb, &to, &a).ok());
  EXPECT_EQ(a.m, 3);
  EXPECT_EQ(a.n, 5);
  EXPECT_EQ(a.k, 4);
  EXPECT_TRUE(a.has_bias);
  strata_tensor over = Tensor(x.data(), STRATA_DTYPE_F32, {3, 5});
  EXPECT_EQ(CheckGemm(STRATA_DTYPE_F32, &tx, &tw, nullptr, &over, &a).message(),
            "gemm: out overlaps x");
  to.shape[1] = 4;
  EXPECT_EQ(CheckGemm(STRATA_DTYPE_F32, &tx, &tw, nullptr, &to, &a).message(),
            "gemm: out has 4 columns, expected N = 5");
  tb.shape[0] = 4;
  to.shape[1] = 5;
  EXPECT_FALSE(CheckGemm(STRATA_DTYPE_F32, &tx, &tw, &tb, &to, &a).ok());
}

// ---- attention and KV blocks --------------------------------------------------------------

TEST(CheckAttentionTest, ChecksParamsHeadsAndTheBatchDescriptor) {
  std::vector<float> pool(2 * 2 * 2 * 4 * 2 * 8), q(3 * 4 * 8), out(3 * 4 * 8);
  strata_kv_cache cache{pool.data(), STRATA_DTYPE_F32, 2, 2, 4, 2, 8};
  strata_tensor tq = Tensor(q.data(), STRATA_DTYPE_F32, {3, 4, 8});
  strata_tensor to = Tensor(out.data(), STRATA_DTYPE_F32, {3, 4, 8});
  strata_attention_params params{};
  params.layer = 1;
  params.scale = 1.0f;
  AttentionViews a;
  ASSERT_TRUE(
      CheckAttention("attention_prefill", STRATA_DTYPE_F32, &cache, &params, &tq, &to, &a).ok());
  EXPECT_EQ(a.q_heads, 4);
  EXPECT_EQ(a.cache.num_kv_heads, 2);
  params.layer = 2;
  EXPECT_EQ(
      CheckAttention("attention_decode", STRATA_DTYPE_F32, &cache, &params, &tq, &to, &a).message(),
      "attention_decode: params.layer 2 is out of range [0, 2)");
  params.layer = 0;
  tq.shape[1] = to.shape[1] = 3;
  EXPECT_EQ(CheckAttention("attention_prefill", STRATA_DTYPE_F32, &cache, &params, &tq, &to, &a)
                .message(),
            "attention_prefill: q has 3 heads, not a positive multiple of the cache's 2 kv heads");
  EXPECT_FALSE(
      CheckAttention("attention_prefill", STRATA_DTYPE_F32, &cache, nullptr, &tq, &to, &a).ok());

  EXPECT_EQ(CheckAttentionBatch("attention_prefill", nullptr).message(),
            "attention_prefill: batch is NULL");
  strata_attention_batch batch{};
  EXPECT_TRUE(CheckAttentionBatch("attention_prefill", &batch).ok());  // no sequences
  batch.num_seqs = 1;
  batch.max_blocks_per_seq = 1;
  EXPECT_EQ(CheckAttentionBatch("attention_prefill", &batch).message(),
            "attention_prefill: batch.q_start, batch.kv_len and batch.block_tables must not be "
            "NULL");
  batch.num_seqs = -1;
  EXPECT_FALSE(CheckAttentionBatch("attention_prefill", &batch).ok());
}

TEST(CheckKvBlocksTest, ChecksListsBuffersAndHostIds) {
  std::vector<float> pool(3 * 2 * 2 * 4 * 2 * 8), packed(2 * 2 * 2 * 4 * 2 * 8);
  strata_kv_cache cache{pool.data(), STRATA_DTYPE_F32, 3, 2, 4, 2, 8};
  std::vector<int32_t> src = {0, 2}, dst = {1, 3};
  strata_tensor ts = Tensor(src.data(), STRATA_DTYPE_I32, {2});
  strata_tensor td = Tensor(dst.data(), STRATA_DTYPE_I32, {2});
  KvBlocksArgs a;
  EXPECT_EQ(CheckKvCopyBlocks(STRATA_DTYPE_F32, IndexValues::kHost, &cache, &ts, &td, &a).message(),
            "kv_copy_blocks: dst_blocks[1] = 3 is out of range [0, 3)");
  ASSERT_TRUE(CheckKvCopyBlocks(STRATA_DTYPE_F32, IndexValues::kDevice, &cache, &ts, &td, &a).ok());
  EXPECT_EQ(a.src.rows, 2);
  td.shape[0] = 1;
  EXPECT_FALSE(
      CheckKvCopyBlocks(STRATA_DTYPE_F32, IndexValues::kDevice, &cache, &ts, &td, &a).ok());

  ASSERT_TRUE(
      CheckKvGather(STRATA_DTYPE_F32, IndexValues::kHost, &cache, &ts, packed.data(), &a).ok());
  EXPECT_EQ(a.src.Ints(), src.data());
  EXPECT_EQ(CheckKvGather(STRATA_DTYPE_F32, IndexValues::kHost, &cache, &ts, nullptr, &a).message(),
            "kv_gather: dst is NULL");
  EXPECT_EQ(
      CheckKvScatter(STRATA_DTYPE_F32, IndexValues::kHost, &cache, &ts, nullptr, &a).message(),
      "kv_scatter: src is NULL");
  ts.shape[0] = 0;  // an empty list needs no buffer
  EXPECT_TRUE(CheckKvScatter(STRATA_DTYPE_F32, IndexValues::kHost, &cache, &ts, nullptr, &a).ok());
}

// ---- entry glue ------------------------------------------------------------------------------

// A backend with the members entry.h asks for; ops record the entry names they ran.
class FakeBackend {
 public:
  static Status Create(const char* config_json, std::unique_ptr<FakeBackend>* out) {
    if (config_json != nullptr && std::string_view(config_json) == "bad") {
      return InvalidArgument("create", "bad config");
    }
    if (config_json != nullptr && std::string_view(config_json) == "throw") {
      throw std::runtime_error("boom");
    }
    out->reset(new FakeBackend());
    return Status();
  }
  static FakeBackend* FromHandle(strata_backend h) { return reinterpret_cast<FakeBackend*>(h); }
  strata_backend handle() { return reinterpret_cast<strata_backend>(this); }
  void RecordError(std::string_view prefix, std::string_view message = {}) noexcept {
    error_ = std::string(prefix) + std::string(message);
  }
  const char* LastError() { return error_.c_str(); }
  static void RecordDetachedError(std::string_view prefix, std::string_view message = {}) noexcept {
    detached() = std::string(prefix) + std::string(message);
  }
  static const char* DetachedLastError() { return detached().c_str(); }

  std::vector<std::string> calls;

 private:
  static std::string& detached() {
    static std::string s;
    return s;
  }
  std::string error_;
};

struct FakePlugin {
  using Backend = FakeBackend;
  using Context = FakeBackend;
  template <typename Body>
  static strata_status RunOp(strata_backend b, strata_stream, const char* op,
                             Body&& body) noexcept {
    return Guard<FakeBackend>(b, op, [&](FakeBackend& be) {
      be.calls.push_back(op);
      return body(be);
    });
  }
};

// One op function per ABI op, found by OpEntries through argument-dependent lookup.
#define STRATA_FAKE_OP(Name)              \
  template <typename... Args>             \
  Status Name(FakeBackend& be, Args...) { \
    be.calls.push_back(#Name);            \
    return Status();                      \
  }
STRATA_FAKE_OP(Embedding)
STRATA_FAKE_OP(RmsNorm)
STRATA_FAKE_OP(Gemm)
STRATA_FAKE_OP(Rope)
STRATA_FAKE_OP(SiluMul)
STRATA_FAKE_OP(GatherRows)
STRATA_FAKE_OP(KvAppend)
STRATA_FAKE_OP(AttentionPrologue)
STRATA_FAKE_OP(GemmSiluMul)
STRATA_FAKE_OP(KvCopyBlocks)
STRATA_FAKE_OP(KvGather)
STRATA_FAKE_OP(KvScatter)
STRATA_FAKE_OP(MoeRoute)
STRATA_FAKE_OP(MoeExperts)
STRATA_FAKE_OP(MoeRouteExperts)
STRATA_FAKE_OP(Sample)
STRATA_FAKE_OP(MaskLogits)
#undef STRATA_FAKE_OP

template <typename... Args>
Status Attention(FakeBackend& be, bool decode, Args...) {
  be.calls.push_back(decode ? "Attention(decode)" : "Attention(prefill)");
  return Status();
}

TEST(EntryGuardTest, TurnsStatusesAndExceptionsIntoCodesAndLastError) {
  FakeBackend be;
  const strata_backend h = be.handle();
  EXPECT_EQ(Guard<FakeBackend>(h, "op", [](FakeBackend&) { return Status(); }), STRATA_OK);
  EXPECT_EQ(Guard<FakeBackend>(h, "op", [](FakeBackend&) { return Unsupported("op", "not here"); }),
            STRATA_ERR_UNSUPPORTED);
  EXPECT_STREQ(be.LastError(), "op: not here");
  EXPECT_EQ(Guard<FakeBackend>(h, "op", [](FakeBackend&) -> Status { throw std::bad_alloc(); }),
            STRATA_ERR_OUT_OF_MEMORY);
  EXPECT_STREQ(be.LastError(), "op: out of host memory");
  EXPECT_EQ(
      Guard<FakeBackend>(h, "op", [](FakeBackend&) -> Status { throw std::runtime_error("boom"); }),
      STRATA_ERR_INTERNAL);
  EXPECT_STREQ(be.LastError(), "op: internal error: boom");
  EXPECT_EQ(Guard<FakeBackend>(nullptr, "op", [](FakeBackend&) { return Status(); }),
            STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(LastErrorEntry<FakeBackend>(nullptr), "op: backend is NULL");
}

TEST(EntryLifecycleTest, CreateReportsFailuresWithoutABackend) {
  EXPECT_EQ(CreateEntry<FakeBackend>(nullptr, nullptr), STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(LastErrorEntry<FakeBackend>(nullptr), "create: out is NULL");
  strata_backend b = nullptr;
  EXPECT_EQ(CreateEntry<FakeBackend>("bad", &b), STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(b, nullptr);
  EXPECT_STREQ(LastErrorEntry<FakeBackend>(nullptr), "create: bad config");
  EXPECT_EQ(CreateEntry<FakeBackend>("throw", &b), STRATA_ERR_INTERNAL);
  EXPECT_STREQ(LastErrorEntry<FakeBackend>(nullptr), "create: boom");
  ASSERT_EQ(CreateEntry<FakeBackend>(nullptr, &b), STRATA_OK);
  ASSERT_NE(b, nullptr);
  EXPECT_STREQ(LastErrorEntry<FakeBackend>(b), "");
  DestroyEntry<FakeBackend>(b);
}

TEST(CommonApiTest, FillsVersionLifecycleAndEveryOpEntry) {
  constexpr strata_plugin_api_v1 api = CommonApi<FakePlugin>("fake");
  EXPECT_EQ(api.api_version, STRATA_PLUGIN_API_VERSION);
  EXPECT_EQ(api.struct_size, sizeof(strata_plugin_api_v1));
  EXPECT_STREQ(api.plugin_name, "fake");
  EXPECT_EQ(api.get_info, nullptr);  // the plugin's own
  EXPECT_EQ(api.graph_capture_begin, nullptr);
  for (const void* entry :
       {reinterpret_cast<const void*>(api.create), reinterpret_cast<const void*>(api.embedding),
        reinterpret_cast<const void*>(api.sample),
        reinterpret_cast<const void*>(api.mask_logits),
        reinterpret_cast<const void*>(api.moe_route_experts)}) {
    EXPECT_NE(entry, nullptr);
  }
  FakeBackend be;
  const strata_backend h = be.handle();
  EXPECT_EQ(api.rms_norm(h, nullptr, nullptr, nullptr, nullptr, 1e-6f, nullptr), STRATA_OK);
  EXPECT_EQ(api.attention_decode(h, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            STRATA_OK);
  EXPECT_EQ(api.attention_prefill(h, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            STRATA_OK);
  EXPECT_EQ(api.kv_scatter(h, nullptr, nullptr, nullptr, nullptr), STRATA_OK);
  EXPECT_EQ(be.calls, (std::vector<std::string>{"rms_norm", "RmsNorm", "attention_decode",
                                                "Attention(decode)", "attention_prefill",
                                                "Attention(prefill)", "kv_scatter", "KvScatter"}));
  EXPECT_EQ(api.gemm(nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr),
            STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(api.last_error(nullptr), "gemm: backend is NULL");
}

TEST(CheckCopyRunsTest, SummarizesValidRuns) {
  char dst[64] = {}, src[64] = {};
  const strata_copy_run runs[] = {{0, 40, 8}, {10, 4, 20}};
  CopyRunsSummary s;
  ASSERT_TRUE(CheckCopyRuns("copy_runs", dst, src, runs, 2, &s).ok());
  EXPECT_EQ(s.total_bytes, 28u);
  EXPECT_EQ(s.dst_begin, 4u);
  EXPECT_EQ(s.dst_end, 48u);
  // n == 0 is valid whatever the pointers.
  ASSERT_TRUE(CheckCopyRuns("copy_runs", nullptr, nullptr, nullptr, 0, &s).ok());
  EXPECT_EQ(s.total_bytes, 0u);
}

TEST(CheckCopyRunsTest, RejectsBadArgumentsNamingTheRun) {
  char dst[64] = {}, src[64] = {};
  CopyRunsSummary s;
  auto check = [&](const void* d, const void* sp, const strata_copy_run* runs, int64_t n) {
    const Status st = CheckCopyRuns("copy_runs", d, sp, runs, n, &s);
    EXPECT_EQ(st.code(), STRATA_ERR_INVALID_ARGUMENT);
    return st.message();
  };
  const strata_copy_run ok{0, 0, 4};
  EXPECT_EQ(check(dst, src, &ok, -1), "copy_runs: n is negative (-1)");
  EXPECT_EQ(check(nullptr, src, &ok, 1), "copy_runs: dst is NULL with n = 1");
  EXPECT_EQ(check(dst, nullptr, &ok, 1), "copy_runs: src is NULL with n = 1");
  EXPECT_EQ(check(dst, src, nullptr, 1), "copy_runs: runs is NULL with n = 1");
  const strata_copy_run zero[] = {ok, {8, 8, 0}};
  EXPECT_EQ(check(dst, src, zero, 2), "copy_runs: runs[1] has 0 bytes");
  const strata_copy_run wraps[] = {ok, {~uint64_t{0} - 2, 0, 4}};
  EXPECT_NE(check(dst, src, wraps, 2).find("runs[1]"), std::string::npos);
}

}  // namespace
}  // namespace strata::plugin_common
