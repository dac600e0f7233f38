#pragma once
// Internals of the conformance suite: how a case is described (host arrays with a role each,
// and a function that calls the op through the C ABI) and what that function sees.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "strata/plugin/abi.h"
#include "strata/plugin/plugin.h"

namespace strata::conformance {

// Which of a backend's dtypes an array is stored in.
enum class Role { kWeight, kAct, kKv, kF32, kI32 };

struct HostArray {
  std::string name;
  Role role = Role::kAct;
  std::vector<float> values;  // float roles
  std::vector<int32_t> ints;  // Role::kI32
  bool compared = false;      // read back after the run and compared with the reference
  size_t size() const { return role == Role::kI32 ? ints.size() : values.size(); }
};

struct KvShape {
  int32_t num_blocks = 0;
  int32_t num_layers = 0;
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  size_t BlockElems() const {
    return size_t{2} * num_layers * block_size * num_kv_heads * head_dim;
  }
  size_t Elems() const { return BlockElems() * num_blocks; }
};

// Deterministic generator (splitmix64), identical on every platform and standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  double Uniform(double lo, double hi);
  int32_t Int(int32_t lo, int32_t hi_inclusive);
  // A random permutation of 0..n-1.
  std::vector<int32_t> Permutation(int32_t n);

 private:
  uint64_t state_;
};

// What a case's run function sees: one backend and that backend's device copy of the arrays.
class OpContext {
 public:
  OpContext(Backend* backend, std::vector<void*> pointers, std::vector<strata_dtype> dtypes)
      : backend_(backend), pointers_(std::move(pointers)), dtypes_(std::move(dtypes)) {}

  const strata_plugin_api_v1& api() const { return backend_->api(); }
  strata_backend backend() const { return backend_->handle(); }
  strata_stream stream() const { return backend_->stream(); }

  // Device address of element `offset` of array `id`.
  void* Ptr(int id, int64_t offset = 0) const;
  const int32_t* Ints(int id) const { return static_cast<const int32_t*>(Ptr(id)); }
  strata_tensor Tensor(int id, std::initializer_list<int64_t> shape, int64_t row_stride = 0,
                       int64_t offset = 0) const;
  strata_kv_cache Cache(int id, const KvShape& shape) const;

  // Converts an op's return code; remembers the raw code for negative cases.
  absl::Status Check(strata_status status, const char* op);
  strata_status last_status() const { return last_status_; }

 private:
  Backend* backend_;
  std::vector<void*> pointers_;
  std::vector<strata_dtype> dtypes_;
  strata_status last_status_ = STRATA_OK;
};

using RunFn = std::function<absl::Status(OpContext&)>;

struct TestCase {
  std::string op;
  std::string name;
  std::vector<HostArray> arrays;
  RunFn run;
  bool needs_moe = false;
  bool needs_sample = false;    // the optional `sample` entry
  // An optional ABI entry the case calls ("attention_prologue", "gemm_silu_mul"; "" = none):
  // skipped unless both backends have it.
  std::string needs_entry;
  // An optional entry only the candidate needs ("host_register"; "" = none): skipped unless
  // the candidate has it; the case's run computes the same outputs without it on a reference
  // that lacks it.
  std::string candidate_entry;
  // Negative case: the candidate must return this code (with a message) and the reference is
  // not run. STRATA_OK for ordinary cases. Its compared arrays must come back unchanged (a
  // failing op writes nothing).
  strata_status expect_error = STRATA_OK;
};

// Builds one case's arrays from a generator seeded by (suite seed, op, name), so a case gets
// the same data whether it runs alone (--op) or in the full suite.
class CaseBuilder {
 public:
  CaseBuilder(uint64_t suite_seed, std::string op, std::string name);

  Rng& rng() { return rng_; }
  // Uniform random values in [lo, hi); returns the array id.
  int Uniform(const std::string& name, Role role, size_t n, double lo = -1, double hi = 1);
  int Values(const std::string& name, Role role, std::vector<float> values);
  int Ints(const std::string& name, std::vector<int32_t> values);
  // Marks an array as an output: compared after the run. Returns `id`.
  int Output(int id);
  TestCase Build(RunFn run, bool needs_moe = false);
  TestCase BuildNegative(RunFn run, strata_status expected);

 private:
  int Add(HostArray array);
  TestCase case_;
  Rng rng_;
};

using CaseList = std::vector<TestCase>;

// Case generators, one per op (cases_*.cc).
void AddEmbeddingCases(uint64_t seed, CaseList* out);
void AddRmsNormCases(uint64_t seed, CaseList* out);
void AddGemmCases(uint64_t seed, CaseList* out);
void AddRopeCases(uint64_t seed, CaseList* out);
void AddSiluMulCases(uint64_t seed, CaseList* out);
void AddGatherRowsCases(uint64_t seed, CaseList* out);
void AddKvAppendCases(uint64_t seed, CaseList* out);
void AddAttentionPrefillCases(uint64_t seed, CaseList* out);
void AddAttentionDecodeCases(uint64_t seed, CaseList* out);
void AddKvCopyBlocksCases(uint64_t seed, CaseList* out);
void AddKvGatherCases(uint64_t seed, CaseList* out);
void AddKvScatterCases(uint64_t seed, CaseList* out);
void AddMoeRouteCases(uint64_t seed, CaseList* out);
void AddMoeExpertsCases(uint64_t seed, CaseList* out);
void AddMoeRouteExpertsCases(uint64_t seed, CaseList* out);
void AddSampleCases(uint64_t seed, CaseList* out);
void AddAttentionPrologueCases(uint64_t seed, CaseList* out);
void AddGemmSiluMulCases(uint64_t seed, CaseList* out);
void AddCopyRunsCases(uint64_t seed, CaseList* out);
void AddMaskLogitsCases(uint64_t seed, CaseList* out);

}  // namespace strata::conformance
