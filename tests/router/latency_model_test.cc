// Latency models: evaluation, least-squares recovery of known coefficients, degenerate inputs,
// and the profile JSON round trip with errors that name the bad field.
#include "strata/router/latency_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "strata/common/file_util.h"

namespace strata::router {
namespace {

using ::testing::HasSubstr;

TEST(LatencyModelTest, EvaluatesTheDistServeForms) {
  PrefillModel p{0.01, 1e-4, 1e-8};
  const std::vector<int64_t> batch = {100, 300};
  EXPECT_DOUBLE_EQ(p.Seconds(batch), 0.01 + 1e-4 * 400 + 1e-8 * (100 * 100 + 300 * 300));
  EXPECT_DOUBLE_EQ(p.Seconds(int64_t{200}), 0.01 + 1e-4 * 200 + 1e-8 * 200 * 200);
  DecodeModel d{0.005, 2e-7, 1e-4};
  EXPECT_DOUBLE_EQ(d.Seconds(8, 4096), 0.005 + 2e-7 * 4096 + 1e-4 * 8);
  WorkerProfile w;
  w.kv_block_bytes = 1000;
  w.kv_transfer = {1e6, 0.001};
  w.tier_fetch[2] = {1e5, 0.002};
  EXPECT_DOUBLE_EQ(w.TransferSeconds(10), 0.001 + 10000 / 1e6);
  EXPECT_DOUBLE_EQ(w.FetchSeconds(2, 10), 0.002 + 10000 / 1e5);
  EXPECT_EQ(w.FetchSeconds(0, 10), 0);  // G1 is free
  EXPECT_EQ(w.TransferSeconds(0), 0);
}

TEST(LatencyModelTest, FitPrefillRecoversKnownCoefficients) {
  const PrefillModel truth{0.02, 3e-4, 5e-8};
  std::vector<PrefillSample> samples;
  for (int64_t n : {16, 64, 128, 512, 1024, 2048}) {
    for (int batch : {1, 2, 4}) {
      PrefillSample s;
      s.tokens.assign(batch, n);
      s.seconds = truth.Seconds(s.tokens);
      samples.push_back(s);
    }
  }
  double r2 = 0;
  auto fit = FitPrefill(samples, &r2);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->a, truth.a, 1e-9);
  EXPECT_NEAR(fit->b, truth.b, 1e-12);
  EXPECT_NEAR(fit->c, truth.c, 1e-15);
  EXPECT_NEAR(r2, 1.0, 1e-9);
}

// The context term: steps after a cached prefix (or later chunks of a chunked prefill) cost
// d per new token per context token; samples without context leave d at 0.
TEST(LatencyModelTest, PrefillContextTermIsEvaluatedFittedAndChunked) {
  const PrefillModel truth{0.02, 3e-4, 5e-8, 1e-7};
  EXPECT_DOUBLE_EQ(truth.Seconds(int64_t{512}, int64_t{1536}),
                   truth.Seconds(int64_t{512}) + 1e-7 * 512 * 1536);
  const std::vector<int64_t> tokens = {100, 200}, context = {0, 1000};
  EXPECT_DOUBLE_EQ(truth.Seconds(tokens, context), truth.Seconds(tokens) + 1e-7 * 200 * 1000);
  // 1,300 new tokens after 200 cached, in chunks of 512: 512 @200, 512 @712, 276 @1224.
  EXPECT_DOUBLE_EQ(truth.ChunkedSeconds(1300, 200, 512),
                   truth.Seconds(int64_t{512}, int64_t{200}) +
                       truth.Seconds(int64_t{512}, int64_t{712}) +
                       truth.Seconds(int64_t{276}, int64_t{1224}));
  EXPECT_EQ(truth.ChunkedSeconds(0, 100, 512), 0);

  std::vector<PrefillSample> samples;
  for (int64_t n : {16, 64, 128, 512}) {
    for (int batch : {1, 2, 4}) {
      PrefillSample s;
      s.tokens.assign(batch, n);
      s.seconds = truth.Seconds(s.tokens);
      samples.push_back(s);
    }
  }
  double r2 = 0;
  auto without = FitPrefill(samples, &r2);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->d, 0);
  for (int64_t ctx : {512, 1024, 2048}) {
    for (int64_t n : {128, 512}) {
      samples.push_back({{n}, truth.Seconds(n, ctx), {ctx}});
    }
  }
  auto fit = FitPrefill(samples, &r2);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->a, truth.a, 1e-9);
  EXPECT_NEAR(fit->b, truth.b, 1e-12);
  EXPECT_NEAR(fit->c, truth.c, 1e-15);
  EXPECT_NEAR(fit->d, truth.d, 1e-14);
  EXPECT_NEAR(r2, 1.0, 1e-9);
  const std::vector<PrefillSample> mismatched = {{{1, 2}, 0.1, {3}}, {{2}, 0.2}, {{3}, 0.3}};
  EXPECT_EQ(FitPrefill(mismatched, &r2).status().code(),
            absl::StatusCode::kInvalidArgument);  // context length != tokens length
}

TEST(LatencyModelTest, FitDecodeRecoversKnownCoefficientsUnderNoise) {
  const DecodeModel truth{0.004, 1.5e-7, 2e-4};
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 1e-5);
  std::vector<DecodeSample> exact, noisy;
  for (int64_t batch : {1, 4, 16, 64}) {
    for (int64_t ctx : {128, 1024, 4096}) {
      const int64_t total = batch * ctx + batch * 7;  // not collinear with batch
      exact.push_back({batch, total, truth.Seconds(batch, total)});
      noisy.push_back({batch, total, truth.Seconds(batch, total) + noise(rng)});
    }
  }
  double r2 = 0;
  auto fit = FitDecode(exact, &r2);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->a, truth.a, 1e-10);
  EXPECT_NEAR(fit->b, truth.b, 1e-14);
  EXPECT_NEAR(fit->c, truth.c, 1e-11);
  EXPECT_NEAR(r2, 1.0, 1e-9);
  auto rough = FitDecode(noisy, &r2);
  ASSERT_TRUE(rough.ok());
  EXPECT_NEAR(rough->b, truth.b, 0.05 * truth.b);
  EXPECT_GT(r2, 0.99);
  EXPECT_LT(r2, 1.0);
}

TEST(LatencyModelTest, DegenerateSamplesAreInvalidArgument) {
  double r2;
  // Too few.
  std::vector<DecodeSample> two = {{1, 100, 0.01}, {2, 300, 0.02}};
  EXPECT_EQ(FitDecode(two, &r2).status().code(), absl::StatusCode::kInvalidArgument);
  // Batch always 1: the constant and the batch term cannot be told apart.
  std::vector<DecodeSample> flat = {{1, 100, 0.01}, {1, 200, 0.02}, {1, 400, 0.03}};
  auto s = FitDecode(flat, &r2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("degenerate"));
  // One prompt length only.
  std::vector<PrefillSample> same(5, PrefillSample{{128}, 0.1});
  EXPECT_EQ(FitPrefill(same, &r2).status().code(), absl::StatusCode::kInvalidArgument);
  // Bad times.
  std::vector<PrefillSample> nan = {{{1}, 0.1}, {{2}, -1}, {{3}, 0.3}, {{4}, 0.4}};
  EXPECT_EQ(FitPrefill(nan, &r2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FitPrefill({}, &r2).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LatencyModelTest, FitsAreNonNegative) {
  // Times that fall below a line through the origin for small batches: the unconstrained fit
  // has a negative intercept; the constrained one keeps every coefficient >= 0.
  std::vector<DecodeSample> samples = {
      {1, 50, 0.0004}, {2, 100, 0.0006}, {4, 200, 0.0012}, {8, 400, 0.0013},
      {16, 900, 0.0023}, {32, 4000, 0.0099}, {64, 9000, 0.0570}};
  double r2 = 0;
  auto fit = FitDecode(samples, &r2);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_GE(fit->a, 0);
  EXPECT_GE(fit->b, 0);
  EXPECT_GE(fit->c, 0);
  EXPECT_GT(fit->Seconds(1, 50), 0);
  EXPECT_GT(r2, 0.5);
}

WorkerProfile SampleProfile() {
  WorkerProfile p;
  p.name = "test";
  p.hardware = "cpu";
  p.measured_at = "2026-11-30";
  p.block_size = 16;
  p.kv_block_bytes = 4096;
  p.num_kv_blocks = 1000;
  p.max_batch_tokens = 512;
  p.max_running = 32;
  p.prefill = {0.01, 2e-4, 1e-8, 3e-8};
  p.decode = {0.003, 1e-7, 5e-4};
  p.kv_transfer = {2e9, 1e-5};
  p.tier_fetch[1] = {1e10, 1e-6};
  p.tier_fetch[2] = {1e9, 1e-4};
  p.tier_fetch[3] = {5e8, 1e-3};
  p.fit_r2_prefill = 0.99;
  p.fit_r2_decode = 0.98;
  return p;
}

TEST(WorkerProfileTest, JsonRoundTripAndFile) {
  const WorkerProfile p = SampleProfile();
  auto q = WorkerProfile::FromJson(p.ToJson());
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->name, "test");
  EXPECT_EQ(q->max_running, 32);
  EXPECT_EQ(q->prefill.c, 1e-8);
  EXPECT_EQ(q->prefill.d, 3e-8);
  EXPECT_EQ(q->decode.c, 5e-4);
  EXPECT_EQ(q->tier_fetch[3].bytes_per_second, 5e8);
  EXPECT_EQ(q->fit_r2_decode, 0.98);
  EXPECT_EQ(q->ToJson(), p.ToJson());

  const std::string path = ::testing::TempDir() + "/profile.json";
  std::ofstream(path) << p.ToJson();
  auto loaded = WorkerProfile::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->kv_block_bytes, 4096);
  auto missing = WorkerProfile::Load(path + ".nope");
  EXPECT_FALSE(missing.ok());
}

TEST(WorkerProfileTest, ErrorsNameTheBadField) {
  auto err = [](const std::string& text) {
    auto p = WorkerProfile::FromJson(text);
    EXPECT_FALSE(p.ok()) << text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(p.status().message());
  };
  const std::string models = R"("prefill":{"a":0,"b":1,"c":0},"decode":{"a":0,"b":1,"c":0})";
  EXPECT_THAT(err("{"), HasSubstr("not valid JSON"));
  EXPECT_THAT(err("[]"), HasSubstr("object"));
  EXPECT_THAT(err(R"({"decode":{"a":0,"b":1,"c":0}})"), HasSubstr("'prefill'"));
  EXPECT_THAT(err(R"({"prefill":{"a":0,"b":1},"decode":{"a":0,"b":1,"c":0}})"),
              HasSubstr("'prefill.c'"));
  EXPECT_THAT(err(R"({"prefill":{"a":0,"b":1,"c":0},"decode":{"a":0,"b":"x","c":0}})"),
              HasSubstr("'decode.b'"));
  EXPECT_THAT(err("{" + models + R"(,"block_size":0})"), HasSubstr("'block_size'"));
  EXPECT_THAT(err("{" + models + R"(,"max_running":1.5})"), HasSubstr("'max_running'"));
  EXPECT_THAT(err("{" + models + R"(,"kv_transfer":{"bytes_per_second":0}})"),
              HasSubstr("'kv_transfer.bytes_per_second'"));
  EXPECT_THAT(err("{" + models + R"(,"tier_fetch":{"tape":{}}})"), HasSubstr("'tier_fetch.tape'"));
  EXPECT_THAT(err("{" + models + R"(,"name":3})"), HasSubstr("'name'"));
  // Only the models are required.
  auto minimal = WorkerProfile::FromJson("{" + models + "}");
  ASSERT_TRUE(minimal.ok()) << minimal.status();
  EXPECT_EQ(minimal->block_size, 16);
}

TEST(WorkerProfileTest, TheShippedDefaultProfileLoads) {
  const std::string path = DefaultProfilePath();
  ASSERT_FALSE(path.empty()) << "deploy/profiles/tiny-llama-cpu.json is missing";
  auto p = WorkerProfile::Load(path);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "tiny-llama-cpu");
  EXPECT_GT(p->prefill.Seconds(int64_t{512}), p->prefill.Seconds(int64_t{16}));
  EXPECT_GT(p->decode.Seconds(32, 4096), p->decode.Seconds(1, 64));
  EXPECT_GT(p->decode.Seconds(1, 1), 0);
  EXPECT_GT(p->fit_r2_prefill, 0.8);
  EXPECT_GT(p->fit_r2_decode, 0.8);
  EXPECT_GT(p->kv_block_bytes, 0);
}

// The profile the sim-to-real check was met with (docs/BENCHMARKS.md) ships beside the default:
// it has the context term, which chunked long prompts need.
TEST(WorkerProfileTest, TheShippedOneCoreProfileHasAContextTerm) {
  const std::string dir = std::filesystem::path(DefaultProfilePath()).parent_path().string();
  auto p = WorkerProfile::Load(dir + "/pinned/tiny-llama-cpu-1core.json");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->name, "tiny-llama-cpu-1core");
  EXPECT_GT(p->prefill.d, 0);
  // A 512-token chunk after 2,048 cached tokens costs more than the first 512.
  EXPECT_GT(p->prefill.Seconds(int64_t{512}, int64_t{2048}), p->prefill.Seconds(int64_t{512}));
  EXPECT_GT(p->fit_r2_prefill, 0.9);
}

WorkerProfile Named(std::string name, std::string model, std::string device) {
  WorkerProfile p;
  p.name = std::move(name);
  p.model = std::move(model);
  p.device = std::move(device);
  return p;
}

TEST(ChooseProfileTest, ModelAndDeviceMatchOrAClearRefusal) {
  const std::vector<WorkerProfile> profiles = {
      Named("cpu-any", "", ""), Named("8b-h100", "llama-3.1-8b-shape", "cuda:NVIDIA H100"),
      Named("8b-h200", "llama-3.1-8b-shape", "cuda:NVIDIA H200")};
  auto pick = [&](const std::string& model, const std::string& device) -> std::string {
    auto p = ChooseProfile(profiles, model, device);
    return p.ok() ? (*p)->name : std::string(p.status().message());
  };
  EXPECT_EQ(pick("llama-3.1-8b-shape", "cuda:NVIDIA H100 80GB HBM3"), "8b-h100");
  EXPECT_EQ(pick("llama-3.1-8b-shape", "CUDA:nvidia h200"), "8b-h200");
  // CPU workers of any model fall back to the any-model CPU profile ...
  EXPECT_EQ(pick("tiny-moe", "cpu:Intel Xeon (2 threads)"), "cpu-any");
  EXPECT_EQ(pick("llama-3.1-8b-shape", "cpu:Intel Xeon"), "cpu-any");
  // ... but a GPU worker never gets a CPU profile, nor another model's or device's.
  const std::string refused = pick("llama-3.1-8b-shape", "cuda:NVIDIA A100-SXM4-80GB");
  EXPECT_THAT(refused, ::testing::HasSubstr("no goodput profile for model 'llama-3.1-8b-shape' "
                                            "on device 'cuda:NVIDIA A100-SXM4-80GB'"));
  EXPECT_THAT(refused, ::testing::HasSubstr("8b-h100 (model llama-3.1-8b-shape, device "
                                            "cuda:NVIDIA H100)"));
  EXPECT_THAT(refused, ::testing::HasSubstr("strata profile"));
  EXPECT_THAT(pick("qwen3-30b-a3b-shape", "cuda:NVIDIA H100 80GB HBM3"),
              ::testing::HasSubstr("no goodput profile"));
  EXPECT_EQ(profiles[1].Matches("llama-3.1-8b-shape", "").code(), absl::StatusCode::kOk);
  EXPECT_EQ(profiles[1].Matches("other", "cuda:NVIDIA H100").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ChooseProfileTest, ProfilesLoadFromAFileOrADirectoryAndRoundTripModelAndDevice) {
  const std::string dir = ::testing::TempDir() + "/strata_profiles_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  EXPECT_EQ(LoadProfiles(dir).status().code(), absl::StatusCode::kNotFound);
  auto base = WorkerProfile::Load(DefaultProfilePath());
  ASSERT_TRUE(base.ok()) << base.status();
  WorkerProfile gpu = *base;
  gpu.name = "b-gpu";
  gpu.model = "llama-3.1-8b-shape";
  gpu.device = "cuda:NVIDIA H100";
  ASSERT_TRUE(WriteStringToFile(dir + "/b.json", gpu.ToJson()).ok());
  WorkerProfile cpu = *base;
  cpu.name = "a-cpu";
  ASSERT_TRUE(WriteStringToFile(dir + "/a.json", cpu.ToJson()).ok());
  ASSERT_TRUE(WriteStringToFile(dir + "/notes.txt", "not a profile").ok());
  auto all = LoadProfiles(dir);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "a-cpu");
  EXPECT_EQ((*all)[0].device, "cpu");
  EXPECT_EQ((*all)[1].model, "llama-3.1-8b-shape");
  EXPECT_EQ((*all)[1].device, "cuda:NVIDIA H100");
  auto one = LoadProfiles(dir + "/b.json");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->size(), 1u);
  ASSERT_TRUE(WriteStringToFile(dir + "/c.json", "{").ok());
  auto bad = LoadProfiles(dir);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("c.json"));
  std::filesystem::remove_all(dir);
}

// A link the profile JSON omits is unmeasured: named by UnmeasuredLinks, left out on the way
// back to JSON; the shipped GPU profile has measured all but the remote tier.
TEST(ChooseProfileTest, UnmeasuredLinksAreNamedAndStayOmitted) {
  auto p = WorkerProfile::FromJson(
      R"({"prefill": {"a": 0.01, "b": 1e-4, "c": 0}, "decode": {"a": 0.005, "b": 1e-7, "c": 1e-4},
          "tier_fetch": {"host": {"bytes_per_second": 5e10, "latency_seconds": 1e-5}}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->UnmeasuredLinks(), (std::vector<std::string>{"kv_transfer", "disk", "remote"}));
  auto back = WorkerProfile::FromJson(p->ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->UnmeasuredLinks(), p->UnmeasuredLinks());
  EXPECT_EQ(back->tier_fetch[1].bytes_per_second, 5e10);
  auto gpu = WorkerProfile::Load(DefaultProfileDir() + "/llama-3.1-8b-shape-h100.json");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->UnmeasuredLinks(), std::vector<std::string>{"remote"});
  EXPECT_TRUE(gpu->Matches("llama-3.1-8b-shape", "cuda:NVIDIA H100 80GB HBM3 (device 1, sm_90)")
                  .ok());
}

// The shipped directory: every profile loads, and CPU workers of any model get the default.
TEST(ChooseProfileTest, TheShippedProfilesGiveCpuWorkersTheDefault) {
  auto all = LoadProfiles(DefaultProfileDir());
  ASSERT_TRUE(all.ok()) << all.status();
  auto p = ChooseProfile(*all, "tiny-llama", "cpu:Intel Xeon (2 threads, OpenBLAS Haswell)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->name, "tiny-llama-cpu");
}

}  // namespace
}  // namespace strata::router
