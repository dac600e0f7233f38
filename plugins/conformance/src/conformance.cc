// The conformance runner: runs each case on both backends and compares the outputs.
#include "strata/plugin/conformance.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "harness.h"
#include "strata/common/half.h"

namespace strata {
namespace conformance {
namespace {

struct OpEntry {
  const char* name;
  void (*add_cases)(uint64_t seed, CaseList* out);
};

// The ABI's order.
constexpr OpEntry kOps[] = {
    {"embedding", AddEmbeddingCases},
    {"rms_norm", AddRmsNormCases},
    {"gemm", AddGemmCases},
    {"rope", AddRopeCases},
    {"silu_mul", AddSiluMulCases},
    {"gather_rows", AddGatherRowsCases},
    {"kv_append", AddKvAppendCases},
    {"attention_prefill", AddAttentionPrefillCases},
    {"attention_decode", AddAttentionDecodeCases},
    {"kv_copy_blocks", AddKvCopyBlocksCases},
    {"kv_gather", AddKvGatherCases},
    {"kv_scatter", AddKvScatterCases},
    {"moe_route", AddMoeRouteCases},
    {"moe_experts", AddMoeExpertsCases},
    {"sample", AddSampleCases},
    {"attention_prologue", AddAttentionPrologueCases},
    {"gemm_silu_mul", AddGemmSiluMulCases},
    {"moe_route_experts", AddMoeRouteExpertsCases},
    {"copy_runs", AddCopyRunsCases},
    {"mask_logits", AddMaskLogitsCases},
};

strata_dtype DtypeFor(const Backend& backend, Role role) {
  switch (role) {
    case Role::kWeight:
      return backend.info().weight_dtype;
    case Role::kAct:
      return backend.info().act_dtype;
    case Role::kKv:
      return backend.info().kv_dtype;
    case Role::kF32:
      return STRATA_DTYPE_F32;
    case Role::kI32:
      return STRATA_DTYPE_I32;
  }
  return STRATA_DTYPE_F32;
}

bool IsHalf(strata_dtype d) { return d == STRATA_DTYPE_BF16 || d == STRATA_DTYPE_F16; }

float RoundTo(strata_dtype dtype, float v) {
  switch (dtype) {
    case STRATA_DTYPE_BF16:
      return Bf16ToFloat(FloatToBf16(v));
    case STRATA_DTYPE_F16:
      return F16ToFloat(FloatToF16(v));
    default:
      return v;
  }
}

std::vector<uint8_t> Encode(const HostArray& a, const std::vector<float>& values,
                            strata_dtype dtype) {
  std::vector<uint8_t> bytes(a.size() * DtypeSize(dtype));
  if (dtype == STRATA_DTYPE_I32) {
    std::memcpy(bytes.data(), a.ints.data(), bytes.size());
  } else if (dtype == STRATA_DTYPE_F32) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else {
    auto* out = reinterpret_cast<uint16_t*>(bytes.data());
    for (size_t i = 0; i < values.size(); ++i) {
      out[i] = dtype == STRATA_DTYPE_BF16 ? FloatToBf16(values[i]) : FloatToF16(values[i]);
    }
  }
  return bytes;
}

std::vector<double> Decode(const std::vector<uint8_t>& bytes, strata_dtype dtype) {
  std::vector<double> out(bytes.size() / DtypeSize(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t word = 0;
    std::memcpy(&word, bytes.data() + i * DtypeSize(dtype), DtypeSize(dtype));
    switch (dtype) {
      case STRATA_DTYPE_F32:
        out[i] = std::bit_cast<float>(word);
        break;
      case STRATA_DTYPE_BF16:
        out[i] = Bf16ToFloat(static_cast<uint16_t>(word));
        break;
      case STRATA_DTYPE_F16:
        out[i] = F16ToFloat(static_cast<uint16_t>(word));
        break;
      case STRATA_DTYPE_I32:
        out[i] = static_cast<int32_t>(word);
        break;
    }
  }
  return out;
}

// Input values rounded to the coarser of the two backends' dtypes, so both see the same data.
std::vector<std::vector<float>> SharedValues(const TestCase& c, const Backend& a,
                                             const Backend& b) {
  std::vector<std::vector<float>> shared;
  for (const HostArray& array : c.arrays) {
    std::vector<float> v = array.values;
    const strata_dtype da = DtypeFor(a, array.role), db = DtypeFor(b, array.role);
    for (float& x : v) x = RoundTo(db, RoundTo(da, x));
    shared.push_back(std::move(v));
  }
  return shared;
}

// One backend's outcome of one case.
struct BackendRun {
  absl::Status status;                       // setup or op failure
  std::vector<std::vector<double>> outputs;  // per array; empty unless compared
  double seconds = 0;
  strata_status raw = STRATA_OK;  // the last op's return code
  std::string raw_message;        // last_error() when raw != STRATA_OK
};

absl::Status Upload(Backend& backend, const TestCase& c,
                    const std::vector<std::vector<float>>& values,
                    std::vector<DeviceBuffer>* buffers, std::vector<strata_dtype>* dtypes) {
  for (size_t i = 0; i < c.arrays.size(); ++i) {
    const strata_dtype dtype = DtypeFor(backend, c.arrays[i].role);
    const std::vector<uint8_t> bytes = Encode(c.arrays[i], values[i], dtype);
    auto buffer = DeviceBuffer::Allocate(&backend, bytes.size());
    if (!buffer.ok()) return buffer.status();
    if (!bytes.empty()) {
      absl::Status st = backend.CopyToDevice(buffer->data(), bytes.data(), bytes.size());
      if (!st.ok()) return st;
    }
    buffers->push_back(std::move(*buffer));
    dtypes->push_back(dtype);
  }
  return backend.Synchronize();
}

BackendRun RunCase(Backend& backend, const TestCase& c,
                   const std::vector<std::vector<float>>& values) {
  BackendRun run;
  std::vector<DeviceBuffer> buffers;
  std::vector<strata_dtype> dtypes;
  run.status = Upload(backend, c, values, &buffers, &dtypes);
  if (!run.status.ok()) return run;
  std::vector<void*> pointers;
  for (const DeviceBuffer& b : buffers) pointers.push_back(b.data());
  OpContext ctx(&backend, std::move(pointers), dtypes);
  const auto start = std::chrono::steady_clock::now();
  run.status = c.run(ctx);
  if (run.status.ok()) run.status = backend.Synchronize();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.raw = ctx.last_status();
  if (run.raw != STRATA_OK) {
    const char* msg = backend.api().last_error(backend.handle());
    run.raw_message = msg != nullptr ? msg : "";
  }
  // A negative case that failed as expected reads its outputs back too: they must be unchanged.
  const bool failed_as_expected = c.expect_error != STRATA_OK && run.raw == c.expect_error;
  if (!run.status.ok() && !failed_as_expected) return run;
  run.outputs.resize(c.arrays.size());
  for (size_t i = 0; i < c.arrays.size(); ++i) {
    if (!c.arrays[i].compared) continue;
    std::vector<uint8_t> bytes(buffers[i].size());
    absl::Status st = backend.CopyToHost(bytes.data(), buffers[i].data(), bytes.size());
    if (!st.ok()) {
      run.status = st;
      run.raw = STRATA_OK;  // a readback failure, not the op's
      return run;
    }
    run.outputs[i] = Decode(bytes, dtypes[i]);
  }
  return run;
}

// Folds one float output into the case's normalized max error.
void CompareFloats(const HostArray& a, const std::vector<double>& cand,
                   const std::vector<double>& ref, CaseResult* r) {
  double max_ref = 0, max_diff = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    // Equal infinities match (a masked logit is -inf on both sides); they take no part in
    // the scale.
    if (std::isinf(ref[i]) && cand[i] == ref[i]) continue;
    if (!std::isinf(ref[i])) max_ref = std::max(max_ref, std::fabs(ref[i]));
    double diff = std::fabs(cand[i] - ref[i]);
    if (std::isnan(diff)) diff = INFINITY;
    if (diff > max_diff) {
      max_diff = diff;
      worst = i;
    }
  }
  const double error = max_ref > 0 ? max_diff / max_ref : max_diff;
  if (error > r->max_error || (r->max_error == 0 && r->error.empty())) {
    r->max_error = error;
    r->error = absl::StrFormat("worst at %s[%d]: %.7g, reference %.7g (max |reference| %.4g)",
                               a.name, worst, cand[worst], ref[worst], max_ref);
  }
}

// Integer outputs must match exactly; returns a message for the first mismatch.
std::string CompareInts(const HostArray& a, const std::vector<double>& cand,
                        const std::vector<double>& ref) {
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (cand[i] != ref[i] && mismatches++ == 0) first = i;
  }
  if (mismatches == 0) return "";
  return absl::StrFormat("%s: %d of %d values differ, first at [%d]: %g, reference %g", a.name,
                         mismatches, ref.size(), first, cand[first], ref[first]);
}

void Judge(const TestCase& c, const BackendRun& cand, const BackendRun& ref, CaseResult* r) {
  std::string int_error;
  for (size_t i = 0; i < c.arrays.size(); ++i) {
    if (!c.arrays[i].compared) continue;
    if (c.arrays[i].role == Role::kI32) {
      if (int_error.empty()) int_error = CompareInts(c.arrays[i], cand.outputs[i], ref.outputs[i]);
    } else {
      CompareFloats(c.arrays[i], cand.outputs[i], ref.outputs[i], r);
    }
  }
  r->passed = int_error.empty() && r->max_error <= r->tolerance;
  if (!int_error.empty()) r->error = int_error;
  if (r->passed) r->error.clear();
}

// "" when every compared array of a failed negative case holds what was uploaded.
std::string UnchangedOutputs(const TestCase& c, const Backend& backend,
                             const std::vector<std::vector<float>>& values,
                             const BackendRun& run) {
  for (size_t i = 0; i < c.arrays.size(); ++i) {
    if (!c.arrays[i].compared) continue;
    const strata_dtype dtype = DtypeFor(backend, c.arrays[i].role);
    const std::vector<double> uploaded = Decode(Encode(c.arrays[i], values[i], dtype), dtype);
    const std::string diff = CompareInts(c.arrays[i], run.outputs[i], uploaded);
    if (!diff.empty()) return absl::StrCat("the failing call wrote its output: ", diff);
  }
  return "";
}

void JudgeNegative(const TestCase& c, const Backend& candidate,
                   const std::vector<std::vector<float>>& values, const BackendRun& cand,
                   CaseResult* r) {
  if (cand.raw == STRATA_OK && !cand.status.ok()) {  // setup failed before the op ran
    r->error = std::string(cand.status.message());
  } else if (cand.raw == c.expect_error && !cand.raw_message.empty()) {
    r->error = UnchangedOutputs(c, candidate, values, cand);
    r->passed = r->error.empty();
  } else if (cand.raw == c.expect_error) {
    r->error = "returned the expected error code but last_error() is empty";
  } else {
    r->error = absl::StrCat("expected error code ", c.expect_error, ", got ", cand.raw,
                            cand.raw_message.empty() ? "" : ": ", cand.raw_message);
  }
}

double ToleranceFor(const TestCase& c, const Backend& a, const Backend& b,
                    const ConformanceOptions& options) {
  for (const HostArray& array : c.arrays) {
    if (IsHalf(DtypeFor(a, array.role)) || IsHalf(DtypeFor(b, array.role))) {
      return options.half_tolerance;
    }
  }
  return options.f32_tolerance;
}

// Whether `plugin` has the optional entry `name` ("" names none: true).
bool HasEntry(const Plugin& plugin, const std::string& name) {
  const strata_plugin_api_v1& api = plugin.api();
  if (name == "attention_prologue") return api.attention_prologue != nullptr;
  if (name == "gemm_silu_mul") return api.gemm_silu_mul != nullptr;
  if (name == "moe_route_experts") return api.moe_route_experts != nullptr;
  if (name == "copy_runs") return plugin.has_copy_runs();
  if (name == "mask_logits") return plugin.has_mask_logits();
  if (name == "host_register") return plugin.has_host_register();
  return name.empty();
}

CaseResult RunOne(Backend& candidate, Backend& reference, const TestCase& c,
                  const ConformanceOptions& options) {
  CaseResult r;
  r.op = c.op;
  r.name = c.name;
  r.tolerance = ToleranceFor(c, candidate, reference, options);
  if (c.needs_moe && !(candidate.plugin().has_moe() && reference.plugin().has_moe())) {
    r.skipped = true;
    r.error = absl::StrCat(candidate.plugin().has_moe() ? "reference" : "candidate",
                           " has no MoE entries");
    return r;
  }
  if (c.needs_sample && !(candidate.plugin().has_sample() && reference.plugin().has_sample())) {
    r.skipped = true;
    r.error = absl::StrCat(candidate.plugin().has_sample() ? "reference" : "candidate",
                           " has no sample entry");
    return r;
  }
  auto has_entry = [&](const Backend& b) { return HasEntry(b.plugin(), c.needs_entry); };
  if (!(has_entry(candidate) && has_entry(reference))) {
    r.skipped = true;
    r.error = absl::StrCat(has_entry(candidate) ? "reference" : "candidate", " has no ",
                           c.needs_entry, " entry");
    return r;
  }
  if (!HasEntry(candidate.plugin(), c.candidate_entry)) {
    r.skipped = true;
    r.error = absl::StrCat("candidate has no ", c.candidate_entry, " entry");
    return r;
  }
  const auto values = SharedValues(c, candidate, reference);
  const BackendRun cand = RunCase(candidate, c, values);
  r.candidate_seconds = cand.seconds;
  if (c.expect_error != STRATA_OK) {
    JudgeNegative(c, candidate, values, cand, &r);
    return r;
  }
  if (!cand.status.ok()) {
    r.error = std::string(cand.status.message());
    return r;
  }
  const BackendRun ref = RunCase(reference, c, values);
  if (!ref.status.ok()) {
    r.error = absl::StrCat("reference failed: ", ref.status.message());
    return r;
  }
  Judge(c, cand, ref, &r);
  return r;
}

std::string BackendName(const Backend& b) {
  return b.info().name != nullptr ? b.info().name : b.plugin().origin();
}

}  // namespace
}  // namespace conformance

int ConformanceReport::num_passed() const {
  int n = 0;
  for (const auto& c : cases) n += c.passed ? 1 : 0;
  return n;
}

int ConformanceReport::num_skipped() const {
  int n = 0;
  for (const auto& c : cases) n += c.skipped ? 1 : 0;
  return n;
}

int ConformanceReport::num_failed() const {
  return static_cast<int>(cases.size()) - num_passed() - num_skipped();
}

const std::vector<std::string>& ConformanceOps() {
  static const auto* ops = [] {
    auto* v = new std::vector<std::string>();
    for (const auto& entry : conformance::kOps) v->push_back(entry.name);
    return v;
  }();
  return *ops;
}

absl::StatusOr<ConformanceReport> RunConformance(Backend& candidate, Backend& reference,
                                                 const ConformanceOptions& options) {
  for (const std::string& op : options.ops) {
    if (std::find(ConformanceOps().begin(), ConformanceOps().end(), op) == ConformanceOps().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown op '", op, "'; ops: ", absl::StrJoin(ConformanceOps(), ", ")));
    }
  }
  ConformanceReport report;
  report.candidate = conformance::BackendName(candidate);
  report.reference = conformance::BackendName(reference);
  for (const auto& entry : conformance::kOps) {
    if (!options.ops.empty() &&
        std::find(options.ops.begin(), options.ops.end(), entry.name) == options.ops.end()) {
      continue;
    }
    conformance::CaseList cases;
    entry.add_cases(options.seed, &cases);
    for (const auto& c : cases) {
      if (!options.case_filter.empty() && !absl::StrContains(c.name, options.case_filter)) {
        continue;
      }
      report.cases.push_back(conformance::RunOne(candidate, reference, c, options));
    }
  }
  if (report.cases.empty() && !options.case_filter.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no case of ", options.ops.empty() ? "any op" : absl::StrJoin(options.ops, ", "), " has '",
        options.case_filter, "' in its name"));
  }
  return report;
}

}  // namespace strata
