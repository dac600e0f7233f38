#include "harness.h"

#include <numeric>

namespace strata::conformance {

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::Uniform(double lo, double hi) {
  const double unit = static_cast<double>(Next() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * unit;
}

int32_t Rng::Int(int32_t lo, int32_t hi_inclusive) {
  const uint64_t span = static_cast<uint64_t>(int64_t{hi_inclusive} - lo + 1);
  return static_cast<int32_t>(lo + static_cast<int64_t>(Next() % span));
}

std::vector<int32_t> Rng::Permutation(int32_t n) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  for (int32_t i = n - 1; i > 0; --i) std::swap(p[i], p[Int(0, i)]);
  return p;
}

void* OpContext::Ptr(int id, int64_t offset) const {
  return static_cast<char*>(pointers_[id]) + offset * DtypeSize(dtypes_[id]);
}

strata_tensor OpContext::Tensor(int id, std::initializer_list<int64_t> shape, int64_t row_stride,
                                int64_t offset) const {
  return MakeTensor(Ptr(id, offset), dtypes_[id], shape, row_stride);
}

strata_kv_cache OpContext::Cache(int id, const KvShape& shape) const {
  strata_kv_cache cache{};
  cache.data = Ptr(id);
  cache.dtype = dtypes_[id];
  cache.num_blocks = shape.num_blocks;
  cache.num_layers = shape.num_layers;
  cache.block_size = shape.block_size;
  cache.num_kv_heads = shape.num_kv_heads;
  cache.head_dim = shape.head_dim;
  return cache;
}

absl::Status OpContext::Check(strata_status status, const char* op) {
  last_status_ = status;
  return backend_->Check(status, op);
}

namespace {

// FNV-1a, to derive a case's seed from its names.
uint64_t HashName(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

CaseBuilder::CaseBuilder(uint64_t suite_seed, std::string op, std::string name)
    : rng_(suite_seed ^ HashName(op + "/" + name)) {
  case_.op = std::move(op);
  case_.name = std::move(name);
}

int CaseBuilder::Add(HostArray array) {
  case_.arrays.push_back(std::move(array));
  return static_cast<int>(case_.arrays.size()) - 1;
}

int CaseBuilder::Uniform(const std::string& name, Role role, size_t n, double lo, double hi) {
  std::vector<float> values(n);
  for (float& v : values) v = static_cast<float>(rng_.Uniform(lo, hi));
  return Values(name, role, std::move(values));
}

int CaseBuilder::Values(const std::string& name, Role role, std::vector<float> values) {
  HostArray a;
  a.name = name;
  a.role = role;
  a.values = std::move(values);
  return Add(std::move(a));
}

int CaseBuilder::Ints(const std::string& name, std::vector<int32_t> values) {
  HostArray a;
  a.name = name;
  a.role = Role::kI32;
  a.ints = std::move(values);
  return Add(std::move(a));
}

int CaseBuilder::Output(int id) {
  case_.arrays[id].compared = true;
  return id;
}

TestCase CaseBuilder::Build(RunFn run, bool needs_moe) {
  case_.run = std::move(run);
  case_.needs_moe = needs_moe;
  return std::move(case_);
}

TestCase CaseBuilder::BuildNegative(RunFn run, strata_status expected) {
  case_.run = std::move(run);
  case_.expect_error = expected;
  return std::move(case_);
}

}  // namespace strata::conformance
