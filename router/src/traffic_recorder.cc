#include "traffic_recorder.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "strata/common/block_hash.h"
#include "strata/replay/trace.h"

namespace strata::router {
namespace {

constexpr int kRecordBlockTokens = 512;  // the trace format's block (Mooncake hash_ids)

// One id per 512-token block, the last one possibly partial; chained like KV block hashes, and
// salted like them, so that a replay shares prefixes exactly where the cluster could.
std::vector<uint64_t> BlockIds(const std::vector<int32_t>& prompt, std::string_view cache_salt) {
  std::vector<uint64_t> ids;
  BlockHash parent = kRootBlockHash;
  const uint64_t seed = SaltedBlockHashSeed(BlockHashSeed("strata-trace-recording"), cache_salt);
  for (size_t at = 0; at < prompt.size(); at += kRecordBlockTokens) {
    const size_t n = std::min<size_t>(kRecordBlockTokens, prompt.size() - at);
    parent = HashBlock(seed, parent, std::span<const int32_t>(prompt.data() + at, n));
    ids.push_back(parent);
  }
  return ids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrafficRecorder>> TrafficRecorder::Open(
    const std::string& path, bool include_prompts, const Tokenizer* tokenizer) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot open trace recording ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<TrafficRecorder>(new TrafficRecorder(f, include_prompts, tokenizer));
}

TrafficRecorder::~TrafficRecorder() { std::fclose(file_); }

void TrafficRecorder::Record(const std::vector<int32_t>& prompt, int max_tokens,
                             std::string_view cache_salt) {
  replay::TraceRequest r;
  r.input_tokens = static_cast<int32_t>(prompt.size());
  r.output_tokens = max_tokens;
  r.block_ids = BlockIds(prompt, cache_salt);
  if (include_prompts_ && tokenizer_ != nullptr) {
    r.prompt = tokenizer_->Decode(prompt, /*skip_special_tokens=*/false);
  }
  absl::MutexLock lock(&mu_);
  // The time is taken under the lock, so lines are in non-decreasing arrival order.
  r.arrival_s = absl::ToDoubleSeconds(absl::Now() - start_);
  const std::string line = replay::FormatStrataRecord(r) + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
  ++records_;
}

int64_t TrafficRecorder::records() const {
  absl::MutexLock lock(&mu_);
  return records_;
}

}  // namespace strata::router
