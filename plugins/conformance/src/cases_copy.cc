// Conformance cases for the optional batched copy, copy_runs: device to device with aligned and
// unaligned runs, a run over 1 MiB, 10,000 small runs and a KV-style block gather; device to
// registered host memory and back (when the candidate has host_register); n == 0; and argument
// errors, after which the destination must be unchanged. The arrays are raw bytes (I32 role,
// compared exactly), so every byte of the destination, gaps between runs included, is checked.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "harness.h"
#include "strata/common/status_macros.h"

namespace strata::conformance {
namespace {

constexpr const char* kOp = "copy_runs";

struct RunSet {
  std::vector<strata_copy_run> runs;
  uint64_t src_bytes = 0;
  uint64_t dst_bytes = 0;
};

uint64_t RoundDown(uint64_t v, uint64_t align) { return v / align * align; }

// Runs of the given lengths: each source anywhere in [0, src_bytes), the destinations laid out
// in a random order with random gaps, so that no two overlap. Offsets are multiples of `align`.
RunSet MakeRuns(Rng& rng, const std::vector<uint64_t>& lengths, uint64_t src_bytes, uint64_t align,
                int32_t max_gap) {
  RunSet set;
  set.src_bytes = src_bytes;
  set.runs.resize(lengths.size());
  const std::vector<int32_t> order = rng.Permutation(static_cast<int32_t>(lengths.size()));
  uint64_t cursor = RoundDown(static_cast<uint64_t>(rng.Int(0, max_gap)), align);
  for (int32_t i : order) {
    strata_copy_run& r = set.runs[i];
    r.bytes = lengths[i];
    r.dst_offset = cursor;
    cursor += r.bytes + static_cast<uint64_t>(rng.Int(0, max_gap));
    cursor = (cursor + align - 1) / align * align;
    const uint64_t room = src_bytes - r.bytes;
    r.src_offset = RoundDown(rng.Next() % (room + 1), align);
  }
  set.dst_bytes = cursor + 64;
  return set;
}

// Random bytes as an I32 array covering at least `bytes`.
int RandomBytes(CaseBuilder& cb, const std::string& name, uint64_t bytes) {
  std::vector<int32_t> words((bytes + 3) / 4);
  for (int32_t& w : words) w = static_cast<int32_t>(cb.rng().Next());
  return cb.Ints(name, std::move(words));
}

absl::Status CallCopyRuns(OpContext& ctx, void* dst, const void* src,
                          const std::vector<strata_copy_run>& runs) {
  return ctx.Check(ctx.api().copy_runs(ctx.backend(), ctx.stream(), dst, src, runs.data(),
                                       static_cast<int64_t>(runs.size())),
                   kOp);
}

enum class Path { kDevice, kToHost, kFromHost };

// The copy with one side in registered host memory: a host copy of that array is registered,
// the runs copied to or from it, and (to host) the result copied back into the array. A
// backend without host_register (only ever the reference: the candidate's case is skipped)
// copies device to device instead, which leaves the same bytes.
absl::Status CopyViaHost(OpContext& ctx, Path path, int dst, int src, const RunSet& set) {
  const strata_plugin_api_v1& api = ctx.api();
  if (api.host_register == nullptr) return CallCopyRuns(ctx, ctx.Ptr(dst), ctx.Ptr(src), set.runs);
  const bool to_host = path == Path::kToHost;
  const int host_id = to_host ? dst : src;
  const size_t bytes = ((to_host ? set.dst_bytes : set.src_bytes) + 3) / 4 * 4;  // the array
  std::vector<uint8_t> host(bytes);
  STRATA_RETURN_IF_ERROR(ctx.Check(
      api.copy_d2h(ctx.backend(), ctx.stream(), host.data(), ctx.Ptr(host_id), bytes), "copy_d2h"));
  STRATA_RETURN_IF_ERROR(ctx.Check(api.stream_synchronize(ctx.backend(), ctx.stream()), "sync"));
  STRATA_RETURN_IF_ERROR(
      ctx.Check(api.host_register(ctx.backend(), host.data(), bytes), "host_register"));
  absl::Status st = to_host ? CallCopyRuns(ctx, host.data(), ctx.Ptr(src), set.runs)
                            : CallCopyRuns(ctx, ctx.Ptr(dst), host.data(), set.runs);
  if (st.ok()) st = ctx.Check(api.stream_synchronize(ctx.backend(), ctx.stream()), "sync");
  api.host_unregister(ctx.backend(), host.data());
  if (!st.ok() || !to_host) return st;
  STRATA_RETURN_IF_ERROR(ctx.Check(
      api.copy_h2d(ctx.backend(), ctx.stream(), ctx.Ptr(dst), host.data(), bytes), "copy_h2d"));
  return ctx.Check(api.stream_synchronize(ctx.backend(), ctx.stream()), "sync");
}

void AddCopy(uint64_t seed, const std::string& name, Path path,
             const std::function<RunSet(Rng&)>& make, CaseList* out) {
  CaseBuilder cb(seed, kOp, name);
  const RunSet set = make(cb.rng());
  const int src = RandomBytes(cb, "src", set.src_bytes);
  const int dst = cb.Output(RandomBytes(cb, "dst", set.dst_bytes));
  TestCase c = cb.Build([=](OpContext& ctx) {
    if (path == Path::kDevice) return CallCopyRuns(ctx, ctx.Ptr(dst), ctx.Ptr(src), set.runs);
    return CopyViaHost(ctx, path, dst, src, set);
  });
  c.needs_entry = kOp;
  if (path != Path::kDevice) c.candidate_entry = "host_register";
  out->push_back(std::move(c));
}

std::vector<uint64_t> Lengths(Rng& rng, int n, int32_t lo, int32_t hi, uint64_t unit = 1) {
  std::vector<uint64_t> lengths(n);
  for (uint64_t& l : lengths) l = static_cast<uint64_t>(rng.Int(lo, hi)) * unit;
  return lengths;
}

// A run over 1 MiB among small ones, every offset unaligned.
RunSet LargeAmongSmall(Rng& rng) {
  std::vector<uint64_t> lengths = Lengths(rng, 50, 1, 500);
  lengths.insert(lengths.begin() + 17, (uint64_t{3} << 19) + 3);
  return MakeRuns(rng, lengths, uint64_t{2} << 20, 1, 40);
}

// The KV transfer's shape: whole blocks of a pool, picked by a random permutation of block ids,
// packed in order into the destination.
RunSet PackedBlocks(Rng& rng, int32_t pool_blocks, int32_t n, uint64_t block_bytes) {
  RunSet set;
  set.src_bytes = pool_blocks * block_bytes;
  set.dst_bytes = n * block_bytes;
  const std::vector<int32_t> ids = rng.Permutation(pool_blocks);
  for (int32_t i = 0; i < n; ++i) {
    set.runs.push_back({ids[i] * block_bytes, i * block_bytes, block_bytes});
  }
  return set;
}

void AddDeviceCases(uint64_t seed, CaseList* out) {
  AddCopy(
      seed, "one byte", Path::kDevice, [](Rng& rng) { return MakeRuns(rng, {1}, 64, 1, 8); }, out);
  AddCopy(
      seed, "200 aligned runs of 16 B - 4 KiB", Path::kDevice,
      [](Rng& rng) { return MakeRuns(rng, Lengths(rng, 200, 1, 256, 16), 1 << 20, 16, 256); }, out);
  AddCopy(
      seed, "300 unaligned runs of 1 B - 3000 B", Path::kDevice,
      [](Rng& rng) { return MakeRuns(rng, Lengths(rng, 300, 1, 3000), 1 << 20, 1, 50); }, out);
  AddCopy(seed, "a run of 1.5 MiB + 3 B among 50 unaligned ones", Path::kDevice, LargeAmongSmall,
          out);
  AddCopy(
      seed, "a 3 MiB run, source and destination out of 16-byte phase", Path::kDevice,
      [](Rng&) {
        return RunSet{
            {{5, 11, (uint64_t{3} << 20) - 7}}, uint64_t{3} << 20, (uint64_t{3} << 20) + 64};
      },
      out);
  AddCopy(
      seed, "10000 runs of 1 B - 64 B", Path::kDevice,
      [](Rng& rng) { return MakeRuns(rng, Lengths(rng, 10000, 1, 64), 1 << 20, 1, 8); }, out);
  AddCopy(
      seed, "10000 aligned runs of 16 B - 128 B", Path::kDevice,
      [](Rng& rng) { return MakeRuns(rng, Lengths(rng, 10000, 1, 8, 16), 1 << 20, 16, 32); }, out);
  AddCopy(
      seed, "48 of 256 blocks of 32 KiB packed", Path::kDevice,
      [](Rng& rng) { return PackedBlocks(rng, 256, 48, 32 << 10); }, out);
}

void AddHostCases(uint64_t seed, CaseList* out) {
  AddCopy(
      seed, "to registered host memory: 48 of 256 blocks of 32 KiB", Path::kToHost,
      [](Rng& rng) { return PackedBlocks(rng, 256, 48, 32 << 10); }, out);
  AddCopy(seed, "to registered host memory: a run of 1.5 MiB + 3 B among 50 unaligned ones",
          Path::kToHost, LargeAmongSmall, out);
  AddCopy(
      seed, "from registered host memory: 48 of 256 blocks of 32 KiB", Path::kFromHost,
      [](Rng& rng) { return PackedBlocks(rng, 256, 48, 32 << 10); }, out);
  AddCopy(
      seed, "from registered host memory: 2000 unaligned runs of 1 B - 700 B", Path::kFromHost,
      [](Rng& rng) { return MakeRuns(rng, Lengths(rng, 2000, 1, 700), 1 << 20, 1, 20); }, out);
}

// n == 0 with NULL pointers does nothing (the destination is compared whole).
void AddEmpty(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, kOp, "n = 0 does nothing");
  const int dst = cb.Output(RandomBytes(cb, "dst", 256));
  TestCase c = cb.Build([=](OpContext& ctx) {
    STRATA_RETURN_IF_ERROR(ctx.Check(
        ctx.api().copy_runs(ctx.backend(), ctx.stream(), nullptr, nullptr, nullptr, 0), kOp));
    return ctx.Check(
        ctx.api().copy_runs(ctx.backend(), ctx.stream(), ctx.Ptr(dst), ctx.Ptr(dst), nullptr, 0),
        kOp);
  });
  c.needs_entry = kOp;
  out->push_back(std::move(c));
}

// Bad arguments: INVALID_ARGUMENT, and the destination unchanged although valid runs come first.
enum class Bad { kZeroBytes, kNegativeN, kNullSrc, kNullRuns };

void AddNegative(uint64_t seed, const std::string& name, Bad bad, CaseList* out) {
  CaseBuilder cb(seed, kOp, name);
  RunSet set = MakeRuns(cb.rng(), Lengths(cb.rng(), 40, 1, 2000), 1 << 16, 1, 16);
  if (bad == Bad::kZeroBytes) set.runs[31].bytes = 0;
  const int src = RandomBytes(cb, "src", set.src_bytes);
  const int dst = cb.Output(RandomBytes(cb, "dst", set.dst_bytes));
  TestCase c = cb.BuildNegative(
      [=](OpContext& ctx) {
        const void* s = bad == Bad::kNullSrc ? nullptr : ctx.Ptr(src);
        const strata_copy_run* runs = bad == Bad::kNullRuns ? nullptr : set.runs.data();
        const int64_t n = bad == Bad::kNegativeN ? -1 : static_cast<int64_t>(set.runs.size());
        return ctx.Check(ctx.api().copy_runs(ctx.backend(), ctx.stream(), ctx.Ptr(dst), s, runs, n),
                         kOp);
      },
      STRATA_ERR_INVALID_ARGUMENT);
  c.needs_entry = kOp;
  out->push_back(std::move(c));
}

}  // namespace

void AddCopyRunsCases(uint64_t seed, CaseList* out) {
  AddDeviceCases(seed, out);
  AddHostCases(seed, out);
  AddEmpty(seed, out);
  AddNegative(seed, "rejects a run of 0 bytes after valid runs", Bad::kZeroBytes, out);
  AddNegative(seed, "rejects n < 0", Bad::kNegativeN, out);
  AddNegative(seed, "rejects a NULL src with n > 0", Bad::kNullSrc, out);
  AddNegative(seed, "rejects NULL runs with n > 0", Bad::kNullRuns, out);
}

}  // namespace strata::conformance
