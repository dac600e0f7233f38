// The CUDA plugin (libstrata_cuda.so) on a real GPU: the whole conformance suite against the
// CPU reference plugin, what get_info reports, and the error paths (a bad argument returns
// INVALID_ARGUMENT with a message naming the op, and the backend stays usable). Every test
// skips when the machine has no CUDA device (CI), where the plugin's create reports
// UNSUPPORTED.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <memory>
#include <string>

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

}  // namespace
}  // namespace strata
