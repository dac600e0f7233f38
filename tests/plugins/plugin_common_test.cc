// The plugin-side helper library (plugins/common) shared by the CPU and CUDA plugins:
// descriptor validation and the shared op argument checks, on host memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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

}  // namespace
}  // namespace strata::plugin_common
