// The CPU reference plugin's own unit test: every op of libstrata_cpu.so against plain
// double-precision loops on small random inputs (row-stride views, GQA, paged non-contiguous
// blocks, sliding windows, partial rotary, aliasing), plus the error paths: a bad argument
// returns the right status, a non-empty last_error, and leaves the outputs alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "strata/plugin/plugin.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kPluginPath[] = STRATA_BINARY_DIR "/bin/libstrata_cpu.so";

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
  }
}

strata_tensor F32(void* data, std::initializer_list<int64_t> shape, int64_t stride = 0) {
  return MakeTensor(data, STRATA_DTYPE_F32, shape, stride);
}
strata_tensor I32(void* data, std::initializer_list<int64_t> shape) {
  return MakeTensor(data, STRATA_DTYPE_I32, shape);
}

class CpuPluginTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(R"({"threads": 2})"); }

  void Open(const std::string& config) {
    auto plugin = Plugin::Load(kPluginPath);
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    buffers_.clear();
    auto backend = Backend::Create(*plugin, config);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }

  const strata_plugin_api_v1& api() const { return backend_->api(); }
  strata_backend b() const { return backend_->handle(); }
  strata_stream s() const { return backend_->stream(); }
  std::string Error() const { return api().last_error(b()); }

  // A device copy of `host`, freed with the fixture.
  template <typename T>
  T* Dev(const std::vector<T>& host) {
    auto buf = DeviceBuffer::Allocate(backend_.get(), host.size() * sizeof(T));
    EXPECT_TRUE(buf.ok()) << buf.status();
    auto owned = std::make_unique<DeviceBuffer>(std::move(*buf));
    EXPECT_TRUE(backend_->CopyToDevice(owned->data(), host.data(), host.size() * sizeof(T)).ok());
    buffers_.push_back(std::move(owned));
    return static_cast<T*>(buffers_.back()->data());
  }
  template <typename T>
  std::vector<T> Host(const T* dev, size_t n) {
    std::vector<T> host(n);
    EXPECT_TRUE(backend_->CopyToHost(host.data(), dev, n * sizeof(T)).ok());
    return host;
  }

  // Expects `status` == `code` and a last_error that contains `needle` (so is not empty).
  void ExpectError(strata_status status, strata_status code, const std::string& needle) {
    EXPECT_EQ(status, code);
    EXPECT_THAT(Error(), HasSubstr(needle));
  }

  // moe_experts on t tokens routed to k of e experts (hidden h, intermediate inter).
  void CheckMoeExperts(int64_t t, int64_t e, int64_t k, int64_t h, int64_t inter, uint32_t seed);

  std::unique_ptr<Backend> backend_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
};

// ---- lifecycle, memory, copies --------------------------------------------------------

TEST_F(CpuPluginTest, InfoReportsF32AndMemory) {
  const strata_backend_info& info = backend_->info();
  EXPECT_STREQ(info.name, "cpu");
  EXPECT_EQ(info.weight_dtype, STRATA_DTYPE_F32);
  EXPECT_EQ(info.act_dtype, STRATA_DTYPE_F32);
  EXPECT_EQ(info.kv_dtype, STRATA_DTYPE_F32);
  EXPECT_GT(info.total_memory, 0u);
  EXPECT_GT(info.free_memory, 0u);
  EXPECT_LE(info.free_memory, info.total_memory);
  EXPECT_THAT(std::string(info.device_name), HasSubstr("2 threads"));
}

TEST_F(CpuPluginTest, CreateParsesThreadsAndRejectsBadValues) {
  auto plugin = Plugin::Load(kPluginPath);
  ASSERT_TRUE(plugin.ok());
  const auto& a = (*plugin)->api();
  for (const char* ok : {"{}", R"({"device": 0, "threads" : 1})", R"({"x": "y"})"}) {
    strata_backend handle = nullptr;
    EXPECT_EQ(a.create(ok, &handle), STRATA_OK) << ok;
    a.destroy(handle);
  }
  for (const char* bad : {R"({"threads": 0})", R"({"threads": "two"})", R"({"threads": 3.5})"}) {
    strata_backend handle = nullptr;
    EXPECT_EQ(a.create(bad, &handle), STRATA_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_EQ(handle, nullptr);
    EXPECT_THAT(std::string(a.last_error(nullptr)), HasSubstr("threads"));
  }
}

TEST_F(CpuPluginTest, AllocIsAlignedAndCopiesRoundTrip) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{5} << 20}) {
    void* p = nullptr;
    ASSERT_EQ(api().alloc(b(), bytes, &p), STRATA_OK);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    api().free(b(), p);
  }
  void* huge = nullptr;
  ExpectError(api().alloc(b(), SIZE_MAX - 8, &huge), STRATA_ERR_OUT_OF_MEMORY, "alloc");
  const std::vector<float> src = Random(3 << 20, 1);  // 12 MiB: the parallel copy path
  float* a = Dev(src);
  float* c = Dev(std::vector<float>(src.size()));
  ASSERT_EQ(api().copy_d2d(b(), s(), c, a, src.size() * 4), STRATA_OK);
  ASSERT_EQ(api().stream_synchronize(b(), s()), STRATA_OK);
  EXPECT_EQ(Host(c, src.size()), src);
  ExpectError(api().copy_d2d(b(), s(), nullptr, a, 4), STRATA_ERR_INVALID_ARGUMENT, "copy_d2d");
}

// ---- dense ops ------------------------------------------------------------------------

TEST_F(CpuPluginTest, EmbeddingCopiesRowsAndRejectsBadIds) {
  const int64_t v = 11, h = 24;
  const auto table = Random(v * h, 2);
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7};
  float* dt = Dev(table);
  int32_t* di = Dev(ids);
  float* dout = Dev(std::vector<float>(ids.size() * h, 0.0f));
  strata_tensor tt = F32(dt, {v, h}), it = I32(di, {5}), ot = F32(dout, {5, h});
  ASSERT_EQ(api().embedding(b(), s(), &tt, &it, &ot), STRATA_OK) << Error();
  auto out = Host(dout, ids.size() * h);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t j = 0; j < h; ++j) ASSERT_EQ(out[t * h + j], table[ids[t] * h + j]);
  }
  for (int32_t bad : {-1, 11}) {
    int32_t* dbad = Dev(std::vector<int32_t>{1, bad});
    strata_tensor bt = I32(dbad, {2}), o2 = F32(dout, {2, h});
    ExpectError(api().embedding(b(), s(), &tt, &bt, &o2), STRATA_ERR_INVALID_ARGUMENT, "ids");
  }
  strata_tensor half = MakeTensor(dt, STRATA_DTYPE_BF16, {v, h});
  ExpectError(api().embedding(b(), s(), &half, &it, &ot), STRATA_ERR_UNSUPPORTED, "BF16");
  ExpectError(api().embedding(b(), s(), &tt, nullptr, &ot), STRATA_ERR_INVALID_ARGUMENT, "ids");
}

std::vector<double> RmsNormRef(const std::vector<float>& x, const std::vector<float>& w,
                               int64_t rows, int64_t d, int64_t stride, float eps) {
  std::vector<double> out(rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[r * stride + i]) * x[r * stride + i];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; ++i) out[r * d + i] = x[r * stride + i] * inv * w[i];
  }
  return out;
}

TEST_F(CpuPluginTest, RmsNormWithResidualInPlace) {
  const int64_t t = 7, h = 300;
  const auto x = Random(t * h, 3), res = Random(t * h, 4), w = Random(h, 5, 0.5f, 1.5f);
  std::vector<float> sum(t * h);
  for (int64_t i = 0; i < t * h; ++i) sum[i] = x[i] + res[i];
  float* dx = Dev(x);
  float* dres = Dev(res);
  float* dw = Dev(w);
  strata_tensor xt = F32(dx, {t, h}), rt = F32(dres, {t, h}), wt = F32(dw, {h});
  // out aliases x.
  ASSERT_EQ(api().rms_norm(b(), s(), &xt, &rt, &wt, 1e-5f, &xt), STRATA_OK) << Error();
  ExpectNear(Host(dres, t * h), std::vector<double>(sum.begin(), sum.end()), 1e-6, "residual");
  ExpectNear(Host(dx, t * h), RmsNormRef(sum, w, t, h, h, 1e-5f), 1e-5, "out");
}

TEST_F(CpuPluginTest, RmsNormPerHeadOnStridedView) {
  // q-norm on the q slice of a fused [T, (4 + 2 + 2) * 16] QKV row: [T, 4, 16], stride 128.
  const int64_t t = 5, heads = 4, d = 16, stride = 128;
  auto qkv = Random(t * stride, 6);
  const auto w = Random(d, 7);
  float* dqkv = Dev(qkv);
  float* dout = Dev(std::vector<float>(t * heads * d));
  float* dw = Dev(w);
  strata_tensor xt = F32(dqkv, {t, heads, d}, stride), ot = F32(dout, {t, heads, d}),
                wt = F32(dw, {d});
  ASSERT_EQ(api().rms_norm(b(), s(), &xt, nullptr, &wt, 1e-6f, &ot), STRATA_OK) << Error();
  std::vector<float> rows(t * heads * d);
  for (int64_t r = 0; r < t; ++r) {
    std::copy_n(&qkv[r * stride], heads * d, &rows[r * heads * d]);
  }
  ExpectNear(Host(dout, t * heads * d), RmsNormRef(rows, w, t * heads, d, d, 1e-6f), 1e-5,
             "strided");
  strata_tensor wrong = F32(dw, {d - 1});
  ExpectError(api().rms_norm(b(), s(), &xt, nullptr, &wrong, 1e-6f, &ot),
              STRATA_ERR_INVALID_ARGUMENT, "weight");
}

struct GemmCase {
  int64_t m, n, k;
  bool bias, accumulate, strided;
};

TEST_F(CpuPluginTest, GemmMatchesReferenceOnAllPaths) {
  // Small m takes the streaming kernel (up to 16 or 64 rows, depending on OpenBLAS's kernels),
  // larger m OpenBLAS; odd k exercises vector tails.
  const GemmCase cases[] = {{1, 37, 70, false, false, false}, {1, 129, 256, true, true, true},
                            {3, 40, 33, true, false, true},   {8, 64, 128, false, true, false},
                            {9, 17, 5, true, true, true},     {64, 50, 100, false, false, true},
                            {100, 45, 70, true, true, true},  {130, 33, 0, true, false, false}};
  uint32_t seed = 10;
  for (const GemmCase& c : cases) {
    const int64_t ldx = c.strided ? c.k + 3 : c.k, ldw = c.strided ? c.k + 5 : c.k;
    const int64_t ldo = c.strided ? c.n + 2 : c.n;
    const auto x = Random(c.m * ldx, seed++), w = Random(c.n * ldw, seed++);
    const auto bias = Random(c.n, seed++), init = Random(c.m * ldo, seed++);
    float* dx = Dev(x);
    float* dw = Dev(w);
    float* db = Dev(bias);
    float* dout = Dev(init);
    strata_tensor xt = F32(dx, {c.m, c.k}, ldx), wt = F32(dw, {c.n, c.k}, ldw), bt = F32(db, {c.n}),
                  ot = F32(dout, {c.m, c.n}, ldo);
    ASSERT_EQ(api().gemm(b(), s(), &xt, &wt, c.bias ? &bt : nullptr, c.accumulate, &ot), STRATA_OK)
        << Error();
    std::vector<double> want(init.begin(), init.end());
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double acc = c.bias ? bias[j] : 0.0;
        for (int64_t p = 0; p < c.k; ++p) acc += double(x[i * ldx + p]) * w[j * ldw + p];
        want[i * ldo + j] = acc + (c.accumulate ? init[i * ldo + j] : 0.0);
      }
    }
    ExpectNear(Host(dout, c.m * ldo), want, 1e-5, "gemm m=" + std::to_string(c.m));
  }
}

TEST_F(CpuPluginTest, GemmRejectsBadArguments) {
  float* dx = Dev(Random(4 * 8, 1));
  float* dw = Dev(Random(6 * 8, 2));
  float* dout = Dev(std::vector<float>(4 * 6, 7.0f));
  strata_tensor xt = F32(dx, {4, 8}), wt = F32(dw, {6, 8}), ot = F32(dout, {4, 6});
  strata_tensor bad_k = F32(dw, {8, 6});
  ExpectError(api().gemm(b(), s(), &xt, &bad_k, nullptr, 0, &ot), STRATA_ERR_INVALID_ARGUMENT,
              "gemm: w");
  strata_tensor f16 = MakeTensor(dw, STRATA_DTYPE_F16, {6, 8});
  ExpectError(api().gemm(b(), s(), &xt, &f16, nullptr, 0, &ot), STRATA_ERR_UNSUPPORTED, "F16");
  strata_tensor ints = MakeTensor(dw, STRATA_DTYPE_I32, {6, 8});
  ExpectError(api().gemm(b(), s(), &xt, &ints, nullptr, 0, &ot), STRATA_ERR_INVALID_ARGUMENT,
              "I32");
  strata_tensor null_data = F32(nullptr, {4, 8});
  ExpectError(api().gemm(b(), s(), &null_data, &wt, nullptr, 0, &ot), STRATA_ERR_INVALID_ARGUMENT,
              "NULL");
  ExpectError(api().gemm(b(), s(), &xt, &wt, nullptr, 0, nullptr), STRATA_ERR_INVALID_ARGUMENT,
              "out");
  strata_tensor narrow = F32(dx, {4, 8}, 4);
  ExpectError(api().gemm(b(), s(), &narrow, &wt, nullptr, 0, &ot), STRATA_ERR_INVALID_ARGUMENT,
              "row_stride");
  strata_tensor alias = F32(dx, {4, 6});
  ExpectError(api().gemm(b(), s(), &xt, &wt, nullptr, 0, &alias), STRATA_ERR_INVALID_ARGUMENT,
              "overlaps");
  EXPECT_EQ(Host(dout, 24), std::vector<float>(24, 7.0f));  // untouched by failed calls
}

// Rotate-half reference with the plugin's fp32 angle (HF computes it the same way).
void RopeRef(std::vector<double>& x, int64_t t, int64_t heads, int64_t d, int64_t stride,
             const std::vector<int32_t>& pos, const std::vector<float>& inv_freq, double ms) {
  const int64_t r = static_cast<int64_t>(inv_freq.size());
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      double* v = &x[i * stride + h * d];
      for (int64_t j = 0; j < r; ++j) {
        const double angle = static_cast<float>(pos[i]) * inv_freq[j];
        const double x0 = v[j], x1 = v[j + r];
        v[j] = ms * (x0 * std::cos(angle) - x1 * std::sin(angle));
        v[j + r] = ms * (x1 * std::cos(angle) + x0 * std::sin(angle));
      }
    }
  }
}

TEST_F(CpuPluginTest, RopePartialRotaryOnFusedQkvSlices) {
  const int64_t t = 6, hq = 4, hk = 2, d = 16, stride = (hq + 2 * hk) * d;
  const std::vector<int32_t> pos = {0, 1, 2, 7, 100, 4095};
  std::vector<float> inv_freq(d / 4);  // partial rotary: 8 of 16 dims rotate
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / 8);
  for (bool with_k : {true, false}) {
    const auto qkv = Random(t * stride, with_k ? 20 : 21);
    float* dqkv = Dev(qkv);
    int32_t* dpos = Dev(pos);
    float* dfreq = Dev(inv_freq);
    strata_tensor qt = F32(dqkv, {t, hq, d}, stride), kt = F32(dqkv + hq * d, {t, hk, d}, stride),
                  pt = I32(dpos, {t}), ft = F32(dfreq, {d / 4});
    ASSERT_EQ(api().rope(b(), s(), &qt, with_k ? &kt : nullptr, &pt, &ft, 1.25f), STRATA_OK)
        << Error();
    std::vector<double> want(qkv.begin(), qkv.end());
    RopeRef(want, t, hq, d, stride, pos, inv_freq, 1.25);
    if (with_k) {
      std::vector<double> k_part(want.begin() + hq * d, want.end());
      RopeRef(k_part, t, hk, d, stride, pos, inv_freq, 1.25);
      std::copy(k_part.begin(), k_part.end(), want.begin() + hq * d);
    }
    ExpectNear(Host(dqkv, t * stride), want, 2e-5, with_k ? "q and k" : "q only");
  }
  float* dq = Dev(Random(t * hq * d, 22));
  float* dfreq = Dev(std::vector<float>(d / 2 + 1, 1.0f));
  int32_t* dpos = Dev(pos);
  strata_tensor qt = F32(dq, {t, hq, d}), ft = F32(dfreq, {d / 2 + 1}), pt = I32(dpos, {t});
  ExpectError(api().rope(b(), s(), &qt, nullptr, &pt, &ft, 1.0f), STRATA_ERR_INVALID_ARGUMENT,
              "inv_freq");
}

TEST_F(CpuPluginTest, SiluMulAndGatherRows) {
  const int64_t t = 9, inter = 21, stride = 2 * inter + 3;
  const auto x = Random(t * stride, 30, -4.0f, 4.0f);
  float* dx = Dev(x);
  float* dout = Dev(std::vector<float>(t * inter));
  strata_tensor xt = F32(dx, {t, 2 * inter}, stride), ot = F32(dout, {t, inter});
  ASSERT_EQ(api().silu_mul(b(), s(), &xt, &ot), STRATA_OK) << Error();
  std::vector<double> want(t * inter);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < inter; ++j) {
      const double g = x[i * stride + j];
      want[i * inter + j] = g / (1.0 + std::exp(-g)) * x[i * stride + inter + j];
    }
  }
  ExpectNear(Host(dout, t * inter), want, 1e-5, "silu_mul");

  const std::vector<int32_t> rows = {8, 0, 8, 3};
  int32_t* drows = Dev(rows);
  float* dg = Dev(std::vector<float>(rows.size() * inter));
  strata_tensor src = F32(dout, {t, inter}), rt = I32(drows, {4}), gt = F32(dg, {4, inter});
  ASSERT_EQ(api().gather_rows(b(), s(), &src, &rt, &gt), STRATA_OK) << Error();
  auto got = Host(dg, rows.size() * inter);
  auto silu = Host(dout, t * inter);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t j = 0; j < inter; ++j) ASSERT_EQ(got[i * inter + j], silu[rows[i] * inter + j]);
  }
  int32_t* dbad = Dev(std::vector<int32_t>{9});
  strata_tensor bad = I32(dbad, {1}), g1 = F32(dg, {1, inter});
  ExpectError(api().gather_rows(b(), s(), &src, &bad, &g1), STRATA_ERR_INVALID_ARGUMENT, "rows");
  strata_tensor wrong_out = F32(dout, {t, inter + 1});
  ExpectError(api().silu_mul(b(), s(), &xt, &wrong_out), STRATA_ERR_INVALID_ARGUMENT, "silu_mul");
}

// ---- KV cache and attention -------------------------------------------------------------

struct CacheGeom {
  int32_t blocks, layers, block_size, kv_heads, head_dim;
  int64_t block_elems() const { return int64_t{layers} * 2 * block_size * kv_heads * head_dim; }
  int64_t Index(int64_t block, int64_t layer, int kv, int64_t off, int64_t h, int64_t i) const {
    return ((((block * layers + layer) * 2 + kv) * block_size + off) * kv_heads + h) * head_dim + i;
  }
};

strata_kv_cache MakeCache(void* data, const CacheGeom& g) {
  return strata_kv_cache{data,         STRATA_DTYPE_F32, g.blocks,  g.layers,
                         g.block_size, g.kv_heads,       g.head_dim};
}

TEST_F(CpuPluginTest, KvAppendWritesSlotsAndSkipsNegative) {
  const CacheGeom g{6, 2, 4, 2, 8};
  const int64_t t = 5, row = g.kv_heads * g.head_dim, stride = 3 * row;
  const auto kv_in = Random(t * stride, 40);  // k and v are slices of a fused row
  const std::vector<int32_t> slots = {13, -1, 0, 23, 6};
  float* dcache = Dev(std::vector<float>(g.blocks * g.block_elems(), 0.0f));
  float* dkv = Dev(kv_in);
  int32_t* dslots = Dev(slots);
  strata_kv_cache cache = MakeCache(dcache, g);
  strata_tensor kt = F32(dkv + row, {t, g.kv_heads, g.head_dim}, stride),
                vt = F32(dkv + 2 * row, {t, g.kv_heads, g.head_dim}, stride), st = I32(dslots, {t});
  ASSERT_EQ(api().kv_append(b(), s(), &cache, 1, &kt, &vt, &st), STRATA_OK) << Error();
  std::vector<float> want(g.blocks * g.block_elems(), 0.0f);
  for (int64_t i = 0; i < t; ++i) {
    if (slots[i] < 0) continue;
    for (int kv = 0; kv < 2; ++kv) {
      for (int64_t e = 0; e < row; ++e) {
        want[g.Index(slots[i] / g.block_size, 1, kv, slots[i] % g.block_size, 0, e)] =
            kv_in[i * stride + (kv + 1) * row + e];
      }
    }
  }
  EXPECT_EQ(Host(dcache, want.size()), want);
  int32_t* dbad = Dev(std::vector<int32_t>{0, 24, 1, 2, 3});  // 24 = 6 blocks * 4: one past
  strata_tensor bad = I32(dbad, {t});
  ExpectError(api().kv_append(b(), s(), &cache, 1, &kt, &vt, &bad), STRATA_ERR_INVALID_ARGUMENT,
              "slots");
  ExpectError(api().kv_append(b(), s(), &cache, 2, &kt, &vt, &st), STRATA_ERR_INVALID_ARGUMENT,
              "layer");
  EXPECT_EQ(Host(dcache, want.size()), want);
}

TEST_F(CpuPluginTest, KvCopyGatherScatterMoveWholeBlocks) {
  const CacheGeom g{5, 3, 2, 2, 4};
  const auto init = Random(g.blocks * g.block_elems(), 41);
  float* dcache = Dev(init);
  strata_kv_cache cache = MakeCache(dcache, g);
  int32_t* dsrc = Dev(std::vector<int32_t>{4, 0});
  int32_t* ddst = Dev(std::vector<int32_t>{1, 4});  // block 4 is read before it is overwritten
  strata_tensor src = I32(dsrc, {2}), dst = I32(ddst, {2});
  ASSERT_EQ(api().kv_copy_blocks(b(), s(), &cache, &src, &dst), STRATA_OK) << Error();
  std::vector<float> want = init;
  const int64_t be = g.block_elems();
  std::copy_n(&init[4 * be], be, &want[1 * be]);
  std::copy_n(&init[0 * be], be, &want[4 * be]);
  EXPECT_EQ(Host(dcache, want.size()), want);

  int32_t* dlist = Dev(std::vector<int32_t>{3, 1});
  strata_tensor list = I32(dlist, {2});
  float* packed = Dev(std::vector<float>(2 * be));
  ASSERT_EQ(api().kv_gather(b(), s(), &cache, &list, packed), STRATA_OK) << Error();
  auto got = Host(packed, 2 * be);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + be, want.begin() + 3 * be));
  EXPECT_TRUE(std::equal(got.begin() + be, got.end(), want.begin() + 1 * be));
  int32_t* dto = Dev(std::vector<int32_t>{0, 2});
  strata_tensor to = I32(dto, {2});
  ASSERT_EQ(api().kv_scatter(b(), s(), &cache, &to, packed), STRATA_OK) << Error();
  std::copy_n(&got[0], be, &want[0]);
  std::copy_n(&got[be], be, &want[2 * be]);
  EXPECT_EQ(Host(dcache, want.size()), want);

  int32_t* dbad = Dev(std::vector<int32_t>{5});
  strata_tensor bad = I32(dbad, {1});
  ExpectError(api().kv_gather(b(), s(), &cache, &bad, packed), STRATA_ERR_INVALID_ARGUMENT,
              "blocks");
  ExpectError(api().kv_copy_blocks(b(), s(), &cache, &src, &bad), STRATA_ERR_INVALID_ARGUMENT,
              "dst_blocks");
  ExpectError(api().kv_scatter(b(), s(), &cache, &to, nullptr), STRATA_ERR_INVALID_ARGUMENT, "src");
}

// A batch of sequences over a randomly filled pool whose block tables are shuffled.
struct AttentionSetup {
  CacheGeom g;
  int64_t q_heads;
  std::vector<int32_t> q_len, kv_len;
  int32_t max_blocks;
  std::vector<int32_t> q_start, tables;
  std::vector<float> cache;
};

AttentionSetup MakeAttention(const CacheGeom& g, int64_t group, std::vector<int32_t> q_len,
                             std::vector<int32_t> kv_len, uint32_t seed) {
  AttentionSetup a{g, g.kv_heads * group, std::move(q_len), std::move(kv_len), 0, {0}, {}, {}};
  for (size_t i = 0; i < a.kv_len.size(); ++i) {
    a.max_blocks = std::max(a.max_blocks, (a.kv_len[i] + g.block_size - 1) / g.block_size + 1);
    a.q_start.push_back(a.q_start.back() + a.q_len[i]);
  }
  std::vector<int32_t> ids(g.blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  a.tables.assign(a.kv_len.size() * a.max_blocks, -1);  // unused entries stay invalid
  size_t next = 0;
  for (size_t s = 0; s < a.kv_len.size(); ++s) {
    for (int32_t i = 0; i * g.block_size < a.kv_len[s]; ++i) {
      a.tables[s * a.max_blocks + i] = ids.at(next++);
    }
  }
  a.cache = Random(g.blocks * g.block_elems(), seed + 1);
  return a;
}

std::vector<double> AttentionRef(const AttentionSetup& a, const std::vector<float>& q,
                                 int64_t q_stride, int32_t layer, float scale, int32_t window) {
  const CacheGeom& g = a.g;
  const int64_t d = g.head_dim, group = a.q_heads / g.kv_heads;
  std::vector<double> out(a.q_start.back() * a.q_heads * d, 0.0);
  for (size_t s = 0; s < a.kv_len.size(); ++s) {
    for (int32_t j = 0; j < a.q_len[s]; ++j) {
      const int64_t row = a.q_start[s] + j, pos = a.kv_len[s] - a.q_len[s] + j;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      for (int64_t h = 0; h < a.q_heads; ++h) {
        auto key = [&](int64_t p, int kv, int64_t i) {
          const int64_t block = a.tables[s * a.max_blocks + p / g.block_size];
          return double(a.cache[g.Index(block, layer, kv, p % g.block_size, h / group, i)]);
        };
        std::vector<double> w;
        for (int64_t p = lo; p <= pos; ++p) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += q[row * q_stride + h * d + i] * key(p, 0, i);
          w.push_back(dot * scale);
        }
        const double mx = *std::max_element(w.begin(), w.end());
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t p = lo; p <= pos; ++p) {
          for (int64_t i = 0; i < d; ++i) {
            out[(row * a.q_heads + h) * d + i] += w[p - lo] / sum * key(p, 1, i);
          }
        }
      }
    }
  }
  return out;
}

struct AttentionCase {
  int group;
  int32_t window;
  int32_t block_size;
  bool decode;
  int32_t head_dim = 32;  // 40 and 72 exercise the kernels' vector tails
};

class CpuAttentionTest : public CpuPluginTest,
                         public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(CpuAttentionTest, MatchesReference) {
  const AttentionCase c = GetParam();
  const CacheGeom g{64, 2, c.block_size, 2, c.head_dim};
  // Prefill: fresh prompts (13 and 100 rows: several row tiles), a 30-row chunk after a cached
  // prefix, a single row. Decode: one row each.
  const auto q_len =
      c.decode ? std::vector<int32_t>{1, 1, 1, 1} : std::vector<int32_t>{13, 30, 1, 100};
  const std::vector<int32_t> kv_len = {13, 40, 27, 100};
  AttentionSetup a = MakeAttention(g, c.group, q_len, kv_len, 50 + c.group);
  const int64_t rows = a.q_start.back(), width = a.q_heads * g.head_dim;
  const int64_t q_stride = width + 2 * g.kv_heads * g.head_dim;  // q slice of a fused QKV row
  const auto q = Random(rows * q_stride, 60);
  float* dcache = Dev(a.cache);
  float* dq = Dev(q);
  float* dout = Dev(std::vector<float>(rows * width));
  int32_t* dqs = Dev(a.q_start);
  int32_t* dkv = Dev(a.kv_len);
  int32_t* dtab = Dev(a.tables);
  strata_kv_cache cache = MakeCache(dcache, g);
  strata_attention_batch batch{4, a.max_blocks, 100, 100, dqs, dkv, dtab};
  const float scale = 1.0f / std::sqrt(float(g.head_dim));
  strata_attention_params params{1, scale, c.window};
  strata_tensor qt = F32(dq, {rows, a.q_heads, g.head_dim}, q_stride),
                ot = F32(dout, {rows, a.q_heads, g.head_dim});
  auto fn = c.decode ? api().attention_decode : api().attention_prefill;
  ASSERT_EQ(fn(b(), s(), &cache, &batch, &params, &qt, &ot), STRATA_OK) << Error();
  ExpectNear(Host(dout, rows * width), AttentionRef(a, q, q_stride, 1, scale, c.window), 1e-5,
             "attention");
}

INSTANTIATE_TEST_SUITE_P(
    GqaWindowBlock, CpuAttentionTest,
    ::testing::Values(AttentionCase{1, 0, 4, false}, AttentionCase{2, 0, 16, false, 40},
                      AttentionCase{4, 0, 4, false}, AttentionCase{4, 5, 4, false, 72},
                      AttentionCase{2, 11, 16, false}, AttentionCase{1, 0, 4, true, 72},
                      AttentionCase{2, 0, 16, true}, AttentionCase{4, 7, 4, true, 40}),
    [](const auto& info) {
      const AttentionCase& c = info.param;
      return std::string(c.decode ? "Decode" : "Prefill") + "_Gqa" + std::to_string(c.group) +
             "_Window" + std::to_string(c.window) + "_Block" + std::to_string(c.block_size) +
             "_Dim" + std::to_string(c.head_dim);
    });

// One long sequence on one kv head: the key range is split over the threads and merged.
TEST_F(CpuPluginTest, DecodeSplitsLongContextAcrossThreads) {
  for (int32_t window : {0, 1500}) {
    const CacheGeom g{200, 1, 16, 1, 64};
    AttentionSetup a = MakeAttention(g, 4, {1}, {3001}, 70);
    const int64_t width = a.q_heads * g.head_dim;
    const auto q = Random(width, 71, -3.0f, 3.0f);
    float* dcache = Dev(a.cache);
    float* dq = Dev(q);
    float* dout = Dev(std::vector<float>(width));
    int32_t* dqs = Dev(a.q_start);
    int32_t* dkv = Dev(a.kv_len);
    int32_t* dtab = Dev(a.tables);
    strata_kv_cache cache = MakeCache(dcache, g);
    strata_attention_batch batch{1, a.max_blocks, 1, 3001, dqs, dkv, dtab};
    strata_attention_params params{0, 0.125f, window};
    strata_tensor qt = F32(dq, {1, a.q_heads, g.head_dim}), ot = F32(dout, {1, a.q_heads, 64});
    ASSERT_EQ(api().attention_decode(b(), s(), &cache, &batch, &params, &qt, &ot), STRATA_OK)
        << Error();
    ExpectNear(Host(dout, width), AttentionRef(a, q, width, 0, 0.125f, window), 1e-5, "split");
  }
}

TEST_F(CpuPluginTest, AttentionRejectsBadBatches) {
  const CacheGeom g{8, 1, 4, 2, 16};
  AttentionSetup a = MakeAttention(g, 2, {2, 3}, {6, 3}, 80);
  float* dcache = Dev(a.cache);
  float* dq = Dev(Random(5 * 4 * 16, 81));
  float* dout = Dev(std::vector<float>(5 * 4 * 16, 9.0f));
  strata_kv_cache cache = MakeCache(dcache, g);
  strata_attention_params params{0, 0.25f, 0};
  strata_tensor qt = F32(dq, {5, 4, 16}), ot = F32(dout, {5, 4, 16});
  auto run = [&](std::vector<int32_t> q_start, std::vector<int32_t> kv_len,
                 std::vector<int32_t> tables, strata_tensor* q, bool decode = false) {
    strata_attention_batch batch{
        2, static_cast<int32_t>(tables.size() / 2), 3, 6, Dev(q_start), Dev(kv_len), Dev(tables)};
    strata_tensor o = ot;
    o.shape[1] = q->shape[1];
    auto fn = decode ? api().attention_decode : api().attention_prefill;
    return fn(b(), s(), &cache, &batch, &params, q, &o);
  };
  const std::vector<int32_t> tables = {5, 2, 7, -1};
  ASSERT_EQ(run({0, 2, 5}, {6, 3}, tables, &qt), STRATA_OK) << Error();
  const auto good = Host(dout, 5 * 4 * 16);
  ExpectError(run({0, 2, 5}, {6, 3}, {5, 8, 7, -1}, &qt), STRATA_ERR_INVALID_ARGUMENT,
              "block_tables[0][1]");
  ExpectError(run({0, 2, 5}, {9, 3}, tables, &qt), STRATA_ERR_INVALID_ARGUMENT, "kv_len[0]");
  ExpectError(run({0, 2, 5}, {6, 2}, tables, &qt), STRATA_ERR_INVALID_ARGUMENT, "kv_len[1]");
  ExpectError(run({0, 4, 2}, {6, 3}, tables, &qt), STRATA_ERR_INVALID_ARGUMENT, "q_start");
  ExpectError(run({0, 2, 6}, {6, 3}, tables, &qt), STRATA_ERR_INVALID_ARGUMENT, "q_start");
  ExpectError(run({0, 2, 5}, {6, 3}, tables, &qt, /*decode=*/true), STRATA_ERR_INVALID_ARGUMENT,
              "attention_decode");
  strata_tensor three_heads = F32(dq, {5, 3, 16});
  ExpectError(run({0, 2, 5}, {6, 3}, tables, &three_heads), STRATA_ERR_INVALID_ARGUMENT, "heads");
  strata_tensor bf16 = MakeTensor(dq, STRATA_DTYPE_BF16, {5, 4, 16});
  ExpectError(run({0, 2, 5}, {6, 3}, tables, &bf16), STRATA_ERR_UNSUPPORTED, "BF16");
  params.layer = 1;
  ExpectError(run({0, 2, 5}, {6, 3}, tables, &qt), STRATA_ERR_INVALID_ARGUMENT, "layer");
  params.layer = 0;
  EXPECT_EQ(api().attention_prefill(b(), s(), &cache, nullptr, &params, &qt, &ot),
            STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(Error(), Not(IsEmpty()));
  EXPECT_EQ(Host(dout, 5 * 4 * 16), good);
}

// ---- mixture of experts ---------------------------------------------------------------

TEST_F(CpuPluginTest, MoeRouteSoftmaxTopKWithTies) {
  const int64_t t = 3, e = 6;
  std::vector<float> logits = Random(t * e, 90, -2.0f, 2.0f);
  std::fill_n(&logits[2 * e], e, 0.5f);  // row 2: all tied, ids must come out ascending
  float* dl = Dev(logits);
  for (int32_t renorm : {0, 1}) {
    float* dw = Dev(std::vector<float>(t * 3));
    int32_t* di = Dev(std::vector<int32_t>(t * 3));
    strata_tensor lt = F32(dl, {t, e}), wt = F32(dw, {t, 3}), it = I32(di, {t, 3});
    ASSERT_EQ(api().moe_route(b(), s(), &lt, 3, renorm, &wt, &it), STRATA_OK) << Error();
    const auto w = Host(dw, t * 3);
    const auto ids = Host(di, t * 3);
    for (int64_t r = 0; r < t; ++r) {
      std::vector<double> p(e);
      double mx = *std::max_element(&logits[r * e], &logits[r * e] + e), sum = 0;
      for (int64_t j = 0; j < e; ++j) sum += (p[j] = std::exp(logits[r * e + j] - mx));
      std::vector<int> order(e);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return p[x] > p[y]; });
      const double kept = (p[order[0]] + p[order[1]] + p[order[2]]) / sum;
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(ids[r * 3 + j], order[j]) << "row " << r;
        EXPECT_NEAR(w[r * 3 + j], p[order[j]] / sum / (renorm ? kept : 1.0), 1e-6);
      }
    }
  }
  float* dw = Dev(std::vector<float>(t * 7));
  int32_t* di = Dev(std::vector<int32_t>(t * 7));
  strata_tensor lt = F32(dl, {t, e}), wt = F32(dw, {t, 7}), it = I32(di, {t, 7});
  ExpectError(api().moe_route(b(), s(), &lt, 7, 1, &wt, &it), STRATA_ERR_INVALID_ARGUMENT, "top_k");
}

TEST_F(CpuPluginTest, MoeExpertsMatchesReference) {
  // Decode-shaped (the streaming kernel) and a large group per expert (OpenBLAS sgemm).
  CheckMoeExperts(5, 4, 2, 24, 20, 100);
  CheckMoeExperts(150, 2, 2, 16, 12, 101);
}

void CpuPluginTest::CheckMoeExperts(int64_t t, int64_t e, int64_t k, int64_t h, int64_t inter,
                                    uint32_t seed) {
  const auto x = Random(t * h, seed), wgu = Random(e * 2 * inter * h, seed + 1, -0.3f, 0.3f);
  const auto wd = Random(e * h * inter, seed + 2, -0.3f, 0.3f), tw = Random(t * k, seed + 3, 0, 1);
  std::vector<int32_t> ids(t * k);
  for (int64_t i = 0; i < t * k; ++i) ids[i] = static_cast<int32_t>((i * 7 + i / k) % e);
  float* dx = Dev(x);
  float* dgu = Dev(wgu);
  float* dd = Dev(wd);
  float* dtw = Dev(tw);
  int32_t* dids = Dev(ids);
  float* dout = Dev(std::vector<float>(t * h, 5.0f));
  strata_tensor xt = F32(dx, {t, h}), gt = F32(dgu, {e, 2 * inter, h}), dt = F32(dd, {e, h, inter}),
                wt = F32(dtw, {t, k}), it = I32(dids, {t, k}), ot = F32(dout, {t, h});
  ASSERT_EQ(api().moe_experts(b(), s(), &xt, &wt, &it, &gt, &dt, &ot), STRATA_OK) << Error();
  std::vector<double> want(t * h, 0.0);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t ex = ids[r * k + j];
      std::vector<double> act(inter);
      for (int64_t c = 0; c < inter; ++c) {
        double g = 0, u = 0;
        for (int64_t i = 0; i < h; ++i) {
          g += double(wgu[(ex * 2 * inter + c) * h + i]) * x[r * h + i];
          u += double(wgu[(ex * 2 * inter + inter + c) * h + i]) * x[r * h + i];
        }
        act[c] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int64_t o = 0; o < h; ++o) {
        double y = 0;
        for (int64_t c = 0; c < inter; ++c) y += double(wd[(ex * h + o) * inter + c]) * act[c];
        want[r * h + o] += tw[r * k + j] * y;
      }
    }
  }
  ExpectNear(Host(dout, t * h), want, 1e-5, "moe_experts");
  int32_t* dbad = Dev(std::vector<int32_t>(t * k, static_cast<int32_t>(e)));
  strata_tensor bad = I32(dbad, {t, k});
  ExpectError(api().moe_experts(b(), s(), &xt, &wt, &bad, &gt, &dt, &ot),
              STRATA_ERR_INVALID_ARGUMENT, "topk_ids");
}

// One thread and two threads give the same attention and GEMM results.
TEST_F(CpuPluginTest, SingleThreadBackendAgrees) {
  ASSERT_NO_FATAL_FAILURE(Open(R"({"threads": 1})"));
  const int64_t m = 2, n = 300, k = 64;
  const auto x = Random(m * k, 110), w = Random(n * k, 111);
  float* dx = Dev(x);
  float* dw = Dev(w);
  float* dout = Dev(std::vector<float>(m * n));
  strata_tensor xt = F32(dx, {m, k}), wt = F32(dw, {n, k}), ot = F32(dout, {m, n});
  ASSERT_EQ(api().gemm(b(), s(), &xt, &wt, nullptr, 0, &ot), STRATA_OK) << Error();
  const auto one = Host(dout, m * n);
  ASSERT_NO_FATAL_FAILURE(Open(R"({"threads": 2})"));
  dx = Dev(x);
  dw = Dev(w);
  dout = Dev(std::vector<float>(m * n));
  xt = F32(dx, {m, k}), wt = F32(dw, {n, k}), ot = F32(dout, {m, n});
  ASSERT_EQ(api().gemm(b(), s(), &xt, &wt, nullptr, 0, &ot), STRATA_OK) << Error();
  EXPECT_EQ(Host(dout, m * n), one);
}

}  // namespace
}  // namespace strata
