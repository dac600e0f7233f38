// The CUDA plugin (libstrata_cuda.so) on a real GPU: the whole conformance suite against the
// CPU reference plugin, what get_info reports, and the error paths (a bad argument returns
// INVALID_ARGUMENT with a message naming the op, and the backend stays usable). Every test
// skips when the machine has no CUDA device (CI), where the plugin's create reports
// UNSUPPORTED.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "strata/common/half.h"
#include "strata/plugin/conformance.h"
#include "strata/plugin/plugin.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

// The plugins sit next to the test binary (build/bin), also when the build tree was moved.
std::string PluginPath(const std::string& name) {
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string dir = n > 0 ? std::string(exe, n) : std::string(STRATA_BINARY_DIR "/bin/x");
  dir.resize(dir.rfind('/'));
  return dir + "/libstrata_" + name + ".so";
}

class CudaPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto plugin = Plugin::Load(PluginPath("cuda"));
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    // Probe through the C ABI: the host wrapper folds every create failure into Internal.
    const strata_plugin_api_v1& api = (*plugin)->api();
    strata_backend probe = nullptr;
    if (api.create(nullptr, &probe) == STRATA_ERR_UNSUPPORTED) {
      GTEST_SKIP() << api.last_error(nullptr);
    }
    if (probe != nullptr) api.destroy(probe);
    auto backend = Backend::Create(*plugin);
    ASSERT_TRUE(backend.ok()) << backend.status();
    cuda_ = std::move(*backend);
  }

  std::unique_ptr<Backend> cuda_;
};

TEST_F(CudaPluginTest, InfoReportsBf16AndDeviceMemory) {
  const strata_backend_info& info = cuda_->info();
  EXPECT_STREQ(info.name, "cuda");
  EXPECT_EQ(info.weight_dtype, STRATA_DTYPE_BF16);
  EXPECT_EQ(info.act_dtype, STRATA_DTYPE_BF16);
  EXPECT_EQ(info.kv_dtype, STRATA_DTYPE_BF16);
  EXPECT_GT(info.total_memory, 0u);
  EXPECT_GT(info.free_memory, 0u);
  EXPECT_LE(info.free_memory, info.total_memory);
  EXPECT_TRUE(cuda_->plugin().has_moe());
}

TEST_F(CudaPluginTest, PassesTheConformanceSuiteAgainstTheCpuPlugin) {
  auto cpu_plugin = Plugin::Load(PluginPath("cpu"));
  ASSERT_TRUE(cpu_plugin.ok()) << cpu_plugin.status();
  auto cpu = Backend::Create(*cpu_plugin);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto report = RunConformance(*cuda_, **cpu);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->cases.size(), 50u);
  for (const CaseResult& c : report->cases) {
    EXPECT_TRUE(c.passed) << c.op << " / " << c.name << ": error " << c.max_error << " (tolerance "
                          << c.tolerance << ") " << c.error;
  }
}

TEST_F(CudaPluginTest, BadArgumentsReturnInvalidArgumentAndLeaveTheBackendUsable) {
  const strata_plugin_api_v1& api = cuda_->api();
  auto x = cuda_->Alloc(4 * 48 * 2);
  auto w = cuda_->Alloc(8 * 40 * 2);
  auto y = cuda_->Alloc(4 * 8 * 2);
  ASSERT_TRUE(x.ok() && w.ok() && y.ok());
  strata_tensor xt{*x, STRATA_DTYPE_BF16, 2, {4, 48}, 0};
  strata_tensor wt{*w, STRATA_DTYPE_BF16, 2, {8, 40}, 0};  // K = 40, but x has K = 48
  strata_tensor yt{*y, STRATA_DTYPE_BF16, 2, {4, 8}, 0};
  EXPECT_EQ(api.gemm(cuda_->handle(), cuda_->stream(), &xt, &wt, nullptr, 0, &yt),
            STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(api.last_error(cuda_->handle()), HasSubstr("gemm"));

  strata_tensor i32 = xt;
  i32.dtype = STRATA_DTYPE_I32;
  EXPECT_EQ(api.silu_mul(cuda_->handle(), cuda_->stream(), &i32, &yt), STRATA_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(api.last_error(cuda_->handle()), HasSubstr("silu_mul"));

  // The same gemm with matching shapes still runs.
  wt.shape[1] = 48;
  auto w2 = cuda_->Alloc(8 * 48 * 2);
  ASSERT_TRUE(w2.ok());
  wt.data = *w2;
  EXPECT_EQ(api.gemm(cuda_->handle(), cuda_->stream(), &xt, &wt, nullptr, 0, &yt), STRATA_OK)
      << api.last_error(cuda_->handle());
  EXPECT_TRUE(cuda_->Synchronize().ok());
  for (void* p : {*x, *w, *w2, *y}) cuda_->Free(p);
}

// A gemm whose weights the op just before it computes reads them only once that op is done:
// the decode-sized GEMM kernels read their first weights before waiting for their predecessor
// (programmatic dependent launch) only where the plugin knows that the ops before did not write
// them. Here rms_norm writes w: one row of 2^20 values, a long kernel (one CTA, two passes over
// the row) that writes w's first values only in its second pass, while the one-warp gemm would
// read exactly those first (v is zero past them) if it read early. w holds zeros before, so a
// stale read gives 0. A build that reads early regardless fails this test (checked on the H200).
TEST_F(CudaPluginTest, AGemmReadsWeightsThatTheOpBeforeItWroteAfterThatOp) {
  const strata_plugin_api_v1& api = cuda_->api();
  constexpr int64_t kD = int64_t{1} << 20, kUsed = 2048;
  constexpr size_t kRow = kD * 2;
  auto x = DeviceBuffer::Allocate(cuda_.get(), kRow);
  auto norm_w = DeviceBuffer::Allocate(cuda_.get(), kRow);
  auto w = DeviceBuffer::Allocate(cuda_.get(), kRow);  // the gemm's weights: rms_norm's out
  auto v = DeviceBuffer::Allocate(cuda_.get(), kRow);
  auto y = DeviceBuffer::Allocate(cuda_.get(), 2);
  ASSERT_TRUE(x.ok() && norm_w.ok() && w.ok() && v.ok() && y.ok());
  std::vector<uint16_t> xs(kD), ones(kD, FloatToBf16(1.0f)), vs(kD, 0), zeros(kD, 0), ws(kD);
  for (int64_t i = 0; i < kD; ++i) {
    xs[i] = FloatToBf16(static_cast<float>((i * 37) % 101) / 50.0f - 1.0f);
    if (i < kUsed) vs[i] = xs[i];
  }
  ASSERT_TRUE(cuda_->CopyToDevice(x->data(), xs.data(), kRow).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(norm_w->data(), ones.data(), kRow).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(v->data(), vs.data(), kRow).ok());
  strata_tensor xt{x->data(), STRATA_DTYPE_BF16, 2, {1, kD}, 0};
  strata_tensor nt{norm_w->data(), STRATA_DTYPE_BF16, 1, {kD}, 0};
  strata_tensor wt{w->data(), STRATA_DTYPE_BF16, 2, {1, kD}, 0};
  strata_tensor vt{v->data(), STRATA_DTYPE_BF16, 2, {1, kD}, 0};
  strata_tensor yt{y->data(), STRATA_DTYPE_BF16, 2, {1, 1}, 0};
  for (int round = 0; round < 10; ++round) {
    ASSERT_TRUE(cuda_->CopyToDevice(w->data(), zeros.data(), kRow).ok());
    ASSERT_TRUE(cuda_->Synchronize().ok());
    ASSERT_EQ(api.rms_norm(cuda_->handle(), cuda_->stream(), &xt, nullptr, &nt, 1e-6f, &wt),
              STRATA_OK)
        << api.last_error(cuda_->handle());
    ASSERT_EQ(api.gemm(cuda_->handle(), cuda_->stream(), &vt, &wt, nullptr, 0, &yt), STRATA_OK)
        << api.last_error(cuda_->handle());
    uint16_t got = 0;
    ASSERT_TRUE(cuda_->CopyToHost(&got, y->data(), 2).ok());
    ASSERT_TRUE(cuda_->CopyToHost(ws.data(), w->data(), kUsed * 2).ok());
    double expected = 0;
    for (int64_t i = 0; i < kUsed; ++i) expected += Bf16ToFloat(ws[i]) * Bf16ToFloat(vs[i]);
    ASSERT_GT(expected, 100.0) << "w = x / rms(x) and v = x: a clearly positive dot product";
    EXPECT_NEAR(Bf16ToFloat(got), expected, 0.02 * expected) << "round " << round;
  }
}

// Decode attention reads kv_len only once the op before it, which wrote it, is done: the
// decode kernel reads its batch arrays before waiting for its predecessor only where the plugin
// knows that the ops before did not write them (a step's arrays come from copies made ops
// earlier). Here a greedy `sample` over one long row (hundreds of microseconds in one thread
// block) writes its token (5) where attention then finds its kv_len; a kernel that read it
// early would find the 0 left before each round and skip the sequence, leaving out at its NaN
// sentinel.
TEST_F(CudaPluginTest, DecodeAttentionReadsAKvLenThatTheOpBeforeItWroteAfterThatOp) {
  const strata_plugin_api_v1& api = cuda_->api();
  constexpr int64_t kVocab = int64_t{1} << 23, kD = 128, kBlock = 16;
  constexpr int32_t kChosen = 5;
  auto logits = DeviceBuffer::Allocate(cuda_.get(), kVocab * 4);
  auto token = DeviceBuffer::Allocate(cuda_.get(), 4);  // attention's kv_len
  auto params = DeviceBuffer::Allocate(cuda_.get(), sizeof(strata_sample_params));
  auto pool = DeviceBuffer::Allocate(cuda_.get(), 2 * kBlock * kD * 2);  // 1 block, K then V
  auto q = DeviceBuffer::Allocate(cuda_.get(), kD * 2);
  auto out = DeviceBuffer::Allocate(cuda_.get(), kD * 2);
  auto arrays = DeviceBuffer::Allocate(cuda_.get(), 3 * 4);  // q_start [0, 1], table [0]
  ASSERT_TRUE(logits.ok() && token.ok() && params.ok() && pool.ok() && q.ok() && out.ok() &&
              arrays.ok());
  std::vector<float> ls(kVocab, 0.0f);
  ls[kChosen] = 10.0f;
  const strata_sample_params greedy{0.0f, 0, 1.0f, 0.0f, 0.5, -1, 0};
  // K anything, every V row 1.0: the output is 1.0 in every dim over any positive kv_len.
  std::vector<uint16_t> kv(2 * kBlock * kD, FloatToBf16(0.5f)), qs(kD, FloatToBf16(0.25f));
  for (int64_t i = kBlock * kD; i < 2 * kBlock * kD; ++i) kv[i] = FloatToBf16(1.0f);
  const int32_t host_arrays[3] = {0, 1, 0};
  const int32_t zero = 0;
  const std::vector<uint16_t> nans(kD, 0x7fc0);
  ASSERT_TRUE(cuda_->CopyToDevice(logits->data(), ls.data(), kVocab * 4).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(params->data(), &greedy, sizeof(greedy)).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(pool->data(), kv.data(), kv.size() * 2).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(q->data(), qs.data(), kD * 2).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(arrays->data(), host_arrays, sizeof(host_arrays)).ok());
  strata_tensor lt{logits->data(), STRATA_DTYPE_F32, 2, {1, kVocab}, 0};
  strata_tensor tt{token->data(), STRATA_DTYPE_I32, 1, {1}, 0};
  strata_tensor qt{q->data(), STRATA_DTYPE_BF16, 3, {1, 1, kD}, 0};
  strata_tensor ot{out->data(), STRATA_DTYPE_BF16, 3, {1, 1, kD}, 0};
  const strata_kv_cache cache{pool->data(), STRATA_DTYPE_BF16, 1, 1, kBlock, 1, kD};
  const auto* a = static_cast<const int32_t*>(arrays->data());
  const strata_attention_batch batch{
      1, 1, 1, kBlock, a, static_cast<const int32_t*>(token->data()), a + 2};
  const strata_attention_params attention{0, 1.0f / std::sqrt(float{kD}), 0};
  const auto* sample_params = static_cast<const strata_sample_params*>(params->data());
  for (int round = 0; round < 10; ++round) {
    ASSERT_TRUE(cuda_->CopyToDevice(token->data(), &zero, 4).ok());
    ASSERT_TRUE(cuda_->CopyToDevice(out->data(), nans.data(), kD * 2).ok());
    ASSERT_TRUE(cuda_->Synchronize().ok());
    ASSERT_EQ(
        api.sample(cuda_->handle(), cuda_->stream(), &lt, sample_params, &tt, nullptr, nullptr),
        STRATA_OK)
        << api.last_error(cuda_->handle());
    ASSERT_EQ(api.attention_decode(cuda_->handle(), cuda_->stream(), &cache, &batch, &attention,
                                   &qt, &ot),
              STRATA_OK)
        << api.last_error(cuda_->handle());
    std::vector<uint16_t> got(kD);
    ASSERT_TRUE(cuda_->CopyToHost(got.data(), out->data(), kD * 2).ok());
    int32_t id = -1;
    ASSERT_TRUE(cuda_->CopyToHost(&id, token->data(), 4).ok());
    ASSERT_EQ(id, kChosen);
    EXPECT_FLOAT_EQ(Bf16ToFloat(got[0]), 1.0f) << "round " << round;
    EXPECT_FLOAT_EQ(Bf16ToFloat(got[kD - 1]), 1.0f) << "round " << round;
  }
}

// attention_prologue followed at once by attention_decode: the plugin runs the prologue inside
// the attention kernel (head_dim 128). The result must be that of the two ops run apart (a
// stream_synchronize between them makes the prologue run on its own first), bit for bit: q and
// k written back, the pool's new rows, and the attention output. Several sequences with
// contexts split over many CTAs (the new row in the last split), with and without q/k norms,
// and with a sequence whose slot is outside the pool (its row is not stored). The plugin holds
// the prologue back only for small batches by default: the test raises the limit to 3 rows.
TEST_F(CudaPluginTest, APrologueRunInsideDecodeAttentionMatchesItRunAlone) {
  const strata_plugin_api_v1& api = cuda_->api();
  ASSERT_EQ(setenv("STRATA_CUDA_PROLOGUE_IN_ATTENTION", "3", 1), 0);
  struct Unset {
    ~Unset() { unsetenv("STRATA_CUDA_PROLOGUE_IN_ATTENTION"); }
  } unset;
  constexpr int64_t kD = 128, kHq = 8, kHk = 2, kBlock = 16, kSeqs = 3, kTable = 160;
  constexpr int64_t kBlocks = kSeqs * kTable, kRotary = 64;
  const int32_t kv_lens[kSeqs] = {2500, 17, 1200};
  uint32_t seed = 12345;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  };
  auto bf16s = [&](int64_t n, float scale) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = FloatToBf16(scale * rnd());
    return v;
  };
  const int64_t pool_elems = kBlocks * 2 * kBlock * kHk * kD;
  const std::vector<uint16_t> pool0 = bf16s(pool_elems, 2.0f);
  const std::vector<uint16_t> qkv0 = bf16s(kSeqs * (kHq + 2 * kHk) * kD, 4.0f);
  const std::vector<uint16_t> norms = bf16s(2 * kD, 0.5f);
  std::vector<float> inv_freq(kRotary);
  for (int64_t i = 0; i < kRotary; ++i) inv_freq[i] = std::pow(1e6f, -float(i) / kRotary);
  // Sequence s owns table row s (blocks s * kTable ...); its new token is position kv_len - 1.
  std::vector<int32_t> arrays;  // q_start [kSeqs + 1], kv_len, tables, positions, slots
  for (int64_t s = 0; s <= kSeqs; ++s) arrays.push_back(int32_t(s));
  for (int32_t l : kv_lens) arrays.push_back(l);
  for (int64_t s = 0; s < kSeqs; ++s) {
    for (int64_t b = 0; b < kTable; ++b) arrays.push_back(int32_t(s * kTable + b));
  }
  for (int32_t l : kv_lens) arrays.push_back(l - 1);
  for (int64_t s = 0; s < kSeqs; ++s) {
    const int32_t p = kv_lens[s] - 1;
    arrays.push_back(s == 1 ? int32_t(kBlocks * kBlock)  // outside the pool: not stored
                            : int32_t((s * kTable + p / kBlock) * kBlock + p % kBlock));
  }
  auto pool = DeviceBuffer::Allocate(cuda_.get(), pool_elems * 2);
  auto qkv = DeviceBuffer::Allocate(cuda_.get(), qkv0.size() * 2);
  auto out = DeviceBuffer::Allocate(cuda_.get(), kSeqs * kHq * kD * 2);
  auto dev_norms = DeviceBuffer::Allocate(cuda_.get(), norms.size() * 2);
  auto dev_freq = DeviceBuffer::Allocate(cuda_.get(), kRotary * 4);
  auto dev_arrays = DeviceBuffer::Allocate(cuda_.get(), arrays.size() * 4);
  ASSERT_TRUE(pool.ok() && qkv.ok() && out.ok() && dev_norms.ok() && dev_freq.ok() &&
              dev_arrays.ok());
  ASSERT_TRUE(cuda_->CopyToDevice(dev_norms->data(), norms.data(), norms.size() * 2).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(dev_freq->data(), inv_freq.data(), kRotary * 4).ok());
  ASSERT_TRUE(cuda_->CopyToDevice(dev_arrays->data(), arrays.data(), arrays.size() * 4).ok());
  const auto* a = static_cast<const int32_t*>(dev_arrays->data());
  const int32_t* kv_len = a + kSeqs + 1;
  const int32_t* tables = kv_len + kSeqs;
  const int32_t* positions = tables + kSeqs * kTable;
  const int32_t* slots = positions + kSeqs;
  const int64_t row = (kHq + 2 * kHk) * kD;  // one fused QKV row per token
  auto* base = static_cast<uint16_t*>(qkv->data());
  strata_tensor qt{base, STRATA_DTYPE_BF16, 3, {kSeqs, kHq, kD}, row};
  strata_tensor kt{base + kHq * kD, STRATA_DTYPE_BF16, 3, {kSeqs, kHk, kD}, row};
  strata_tensor vt{base + (kHq + kHk) * kD, STRATA_DTYPE_BF16, 3, {kSeqs, kHk, kD}, row};
  strata_tensor qn{dev_norms->data(), STRATA_DTYPE_BF16, 1, {kD}, 0};
  strata_tensor kn{static_cast<uint16_t*>(dev_norms->data()) + kD, STRATA_DTYPE_BF16, 1, {kD}, 0};
  strata_tensor pt{const_cast<int32_t*>(positions), STRATA_DTYPE_I32, 1, {kSeqs}, 0};
  strata_tensor ft{dev_freq->data(), STRATA_DTYPE_F32, 1, {kRotary}, 0};
  strata_tensor st{const_cast<int32_t*>(slots), STRATA_DTYPE_I32, 1, {kSeqs}, 0};
  strata_tensor ot{out->data(), STRATA_DTYPE_BF16, 3, {kSeqs, kHq, kD}, 0};
  const strata_kv_cache cache{pool->data(),    STRATA_DTYPE_BF16, int32_t(kBlocks), 1,
                              int32_t(kBlock), int32_t(kHk),      int32_t(kD)};
  const strata_attention_batch batch{int32_t(kSeqs), int32_t(kTable), 1, 2500, a, kv_len, tables};
  const strata_attention_params attention{0, 1.0f / std::sqrt(float{kD}), 0};

  struct Result {
    std::vector<uint16_t> qkv, pool, out;
  };
  auto run = [&](bool norm, bool apart) {
    Result r;
    EXPECT_TRUE(cuda_->CopyToDevice(pool->data(), pool0.data(), pool0.size() * 2).ok());
    EXPECT_TRUE(cuda_->CopyToDevice(qkv->data(), qkv0.data(), qkv0.size() * 2).ok());
    EXPECT_TRUE(cuda_->Synchronize().ok());
    EXPECT_EQ(api.attention_prologue(cuda_->handle(), cuda_->stream(), &qt, &kt, &vt,
                                     norm ? &qn : nullptr, norm ? &kn : nullptr, 1e-6f, &pt, &ft,
                                     1.0f, &cache, 0, &st),
              STRATA_OK)
        << api.last_error(cuda_->handle());
    if (apart) {
      EXPECT_TRUE(cuda_->Synchronize().ok());
    }
    EXPECT_EQ(api.attention_decode(cuda_->handle(), cuda_->stream(), &cache, &batch, &attention,
                                   &qt, &ot),
              STRATA_OK)
        << api.last_error(cuda_->handle());
    r.qkv.resize(qkv0.size());
    r.pool.resize(pool0.size());
    r.out.resize(size_t(kSeqs * kHq * kD));
    EXPECT_TRUE(cuda_->CopyToHost(r.qkv.data(), qkv->data(), r.qkv.size() * 2).ok());
    EXPECT_TRUE(cuda_->CopyToHost(r.pool.data(), pool->data(), r.pool.size() * 2).ok());
    EXPECT_TRUE(cuda_->CopyToHost(r.out.data(), out->data(), r.out.size() * 2).ok());
    return r;
  };
  for (bool norm : {false, true}) {
    const Result apart = run(norm, /*apart=*/true);
    const Result fused = run(norm, /*apart=*/false);
    EXPECT_NE(apart.qkv, qkv0) << "the prologue wrote q and k";
    EXPECT_NE(apart.pool, pool0) << "the prologue stored the new rows";
    EXPECT_TRUE(apart.qkv == fused.qkv) << "q / k written back differ; norms " << norm;
    EXPECT_TRUE(apart.pool == fused.pool) << "pools differ; norms " << norm;
    EXPECT_TRUE(apart.out == fused.out) << "attention outputs differ; norms " << norm;
  }
}

// Prefill attention reads K/V only at positions below kv_len: positions past it in the last
// block (loaded with the block by a copy engine) and table entries past the sequence's blocks
// may hold NaN without reaching the output. For every block size's load path (8 and 16: several
// blocks per 64-key tile; 64: one; 128: a tile starting inside a block; 4: per-row copies), the
// output with NaN there equals, bit for bit, the output with finite values there.
TEST_F(CudaPluginTest, PrefillAttentionIgnoresWhatThePoolHoldsPastKvLen) {
  const strata_plugin_api_v1& api = cuda_->api();
  constexpr int64_t kD = 128, kHq = 8, kHk = 2, kQ = 100, kKv = 300;
  uint32_t seed = 777;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
  };
  std::vector<uint16_t> q0(size_t(kQ * kHq * kD));
  for (auto& x : q0) x = FloatToBf16(4.0f * rnd());
  auto q = DeviceBuffer::Allocate(cuda_.get(), q0.size() * 2);
  auto out = DeviceBuffer::Allocate(cuda_.get(), q0.size() * 2);
  ASSERT_TRUE(q.ok() && out.ok());
  ASSERT_TRUE(cuda_->CopyToDevice(q->data(), q0.data(), q0.size() * 2).ok());
  for (const int64_t bs : {8, 16, 64, 128, 4}) {
    SCOPED_TRACE(::testing::Message() << "block_size " << bs);
    const int64_t used = (kKv + bs - 1) / bs, table = used + 1, blocks = table + 2;
    const int64_t token = kHk * kD, plane = bs * token;  // one layer: [block][K, V][bs][Hk][D]
    std::vector<uint16_t> pool0(size_t(blocks * 2 * plane));
    for (auto& x : pool0) x = FloatToBf16(2.0f * rnd());
    // The sequence's blocks in reverse pool order, then one more entry: the last pool block.
    std::vector<int32_t> arrays = {0, int32_t(kQ), int32_t(kKv)};  // q_start [2], kv_len
    for (int64_t b = 0; b < used; ++b) arrays.push_back(int32_t(used - 1 - b));
    arrays.push_back(int32_t(blocks - 1));
    std::vector<uint16_t> poisoned = pool0;
    for (int64_t p = kKv; p < used * bs; ++p) {  // the last used block (id 0) past kv_len
      for (int kv = 0; kv < 2; ++kv) {
        std::fill_n(poisoned.begin() + kv * plane + (p % bs) * token, token, uint16_t{0x7fc0});
      }
    }
    std::fill(poisoned.begin() + (blocks - 1) * 2 * plane, poisoned.end(), uint16_t{0x7fc0});
    auto pool = DeviceBuffer::Allocate(cuda_.get(), pool0.size() * 2);
    auto dev_arrays = DeviceBuffer::Allocate(cuda_.get(), arrays.size() * 4);
    ASSERT_TRUE(pool.ok() && dev_arrays.ok());
    ASSERT_TRUE(cuda_->CopyToDevice(dev_arrays->data(), arrays.data(), arrays.size() * 4).ok());
    const auto* a = static_cast<const int32_t*>(dev_arrays->data());
    const strata_kv_cache cache{pool->data(), STRATA_DTYPE_BF16, int32_t(blocks), 1,
                                int32_t(bs),  int32_t(kHk),      int32_t(kD)};
    const strata_attention_batch batch{1, int32_t(table), int32_t(kQ), int32_t(kKv),
                                       a, a + 2,          a + 3};
    const strata_attention_params params{0, 1.0f / std::sqrt(float{kD}), 0};
    strata_tensor qt{q->data(), STRATA_DTYPE_BF16, 3, {kQ, kHq, kD}, 0};
    strata_tensor ot{out->data(), STRATA_DTYPE_BF16, 3, {kQ, kHq, kD}, 0};
    auto run = [&](const std::vector<uint16_t>& contents) {
      std::vector<uint16_t> o(q0.size());
      EXPECT_TRUE(cuda_->CopyToDevice(pool->data(), contents.data(), contents.size() * 2).ok());
      EXPECT_TRUE(cuda_->Synchronize().ok());
      EXPECT_EQ(api.attention_prefill(cuda_->handle(), cuda_->stream(), &cache, &batch, &params,
                                      &qt, &ot),
                STRATA_OK)
          << api.last_error(cuda_->handle());
      EXPECT_TRUE(cuda_->CopyToHost(o.data(), out->data(), o.size() * 2).ok());
      return o;
    };
    const std::vector<uint16_t> clean = run(pool0), dirty = run(poisoned);
    int64_t finite = 0;
    for (uint16_t x : clean) finite += std::isfinite(Bf16ToFloat(x)) ? 1 : 0;
    EXPECT_EQ(finite, int64_t(clean.size()));
    EXPECT_TRUE(clean == dirty) << "NaN past kv_len reached the output";
  }
}

// host_register page-locks a host buffer: copies to and from it are enqueued without waiting
// (CopyToHostAsync returns before the bytes land; Synchronize makes them visible) and round
// trip exactly; bad arguments are refused with the op's name.
TEST_F(CudaPluginTest, PageLockedHostMemoryRoundTripsAsynchronousCopies) {
  ASSERT_TRUE(cuda_->plugin().has_host_register());
  constexpr size_t kBytes = size_t{8} << 20;
  auto* host = static_cast<uint8_t*>(std::aligned_alloc(4096, kBytes));
  ASSERT_NE(host, nullptr);
  ASSERT_TRUE(cuda_->RegisterHost(host, kBytes).ok());
  for (size_t i = 0; i < kBytes; ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  auto dev = DeviceBuffer::Allocate(cuda_.get(), kBytes);
  ASSERT_TRUE(dev.ok()) << dev.status();
  ASSERT_TRUE(cuda_->CopyToDevice(dev->data(), host, kBytes).ok());
  ASSERT_TRUE(cuda_->Synchronize().ok());
  std::vector<uint8_t> expected(host, host + kBytes);
  std::memset(host, 0, kBytes);
  ASSERT_TRUE(cuda_->CopyToHostAsync(host, dev->data(), kBytes).ok());
  ASSERT_TRUE(cuda_->Synchronize().ok());
  EXPECT_EQ(std::memcmp(host, expected.data(), kBytes), 0);
  cuda_->UnregisterHost(host);
  std::free(host);
  const absl::Status bad = cuda_->RegisterHost(nullptr, 16);
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_THAT(std::string(bad.message()), HasSubstr("host_register"));
}

// copy_runs with offsets and a concatenation past 4 GiB (64-bit offsets, tiles and starts): a
// 1.5 GiB run in 16-byte words that ends past 4 GiB, an unaligned one starting past it, and a
// small one; the bytes around the destinations stay as they were. Skips without 10 GiB free.
uint8_t SourceByte(uint64_t offset) { return static_cast<uint8_t>((offset * 2654435761u) >> 13); }

TEST_F(CudaPluginTest, CopyRunsPastFourGibibytes) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  auto src = DeviceBuffer::Allocate(cuda_.get(), 5 * kGiB);
  auto dst = DeviceBuffer::Allocate(cuda_.get(), 5 * kGiB);
  if (!src.ok() || !dst.ok()) GTEST_SKIP() << "needs 10 GiB of device memory";
  const std::vector<strata_copy_run> runs = {{3 * kGiB, 5 * kGiB / 2 + 64, 3 * kGiB / 2},
                                             {4 * kGiB + 5, 1, (1 << 20) + 3},
                                             {17, 9 * kGiB / 2, 64 << 10}};
  // Source bytes for [0, 1 MiB) and [3 GiB, 5 GiB); the destination zeroed around the runs.
  auto upload = [&](char* base, uint64_t at, uint64_t bytes, bool pattern) {
    std::vector<uint8_t> host(bytes);
    for (uint64_t j = 0; j < bytes; ++j) host[j] = pattern ? SourceByte(at + j) : 0;
    return cuda_->CopyToDevice(base + at, host.data(), bytes).ok() && cuda_->Synchronize().ok();
  };
  char* s = static_cast<char*>(src->data());
  char* d = static_cast<char*>(dst->data());
  ASSERT_TRUE(upload(s, 0, 1 << 20, true) && upload(s, 3 * kGiB, 2 * kGiB, true));
  ASSERT_TRUE(upload(d, 0, 2 << 20, false));
  ASSERT_TRUE(upload(d, 5 * kGiB / 2, 2 * kGiB + (128 << 10), false));
  ASSERT_TRUE(cuda_->CopyRuns(nullptr, d, s, runs).ok());
  for (const strata_copy_run& r : runs) {
    const uint64_t margin = 64;
    std::vector<uint8_t> host(r.bytes + 2 * margin);
    const uint64_t from = r.dst_offset >= margin ? r.dst_offset - margin : 0;
    ASSERT_TRUE(cuda_->CopyToHost(host.data(), d + from, host.size()).ok());
    for (uint64_t j = 0; j < host.size(); ++j) {
      const uint64_t at = from + j;
      const bool inside = at >= r.dst_offset && at < r.dst_offset + r.bytes;
      const uint8_t expect = inside ? SourceByte(r.src_offset + (at - r.dst_offset)) : 0;
      ASSERT_EQ(host[j], expect) << "destination byte " << at;
    }
  }
}

}  // namespace
}  // namespace strata
