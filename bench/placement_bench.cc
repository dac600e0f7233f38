// The router's whole routing decision at cluster scale: KvIndex::MatchPrefix of a
// request's 64-block chain over an index of ~1M blocks held by 100 workers (30 prefill, 70
// decode; a shared 8-block system prompt, ~17.9k documents each held by 1-8 workers in GPU or
// host tiers), then Placer::Place with live-looking WorkerViews, for each policy. One thread;
// per-decision latency from steady_clock. Goal: p99 < 50 us.
//
// usage: placement_bench [decisions per policy (default 20000)] [policy,policy,... (default all)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "strata/router/kv_index.h"
#include "strata/router/latency_model.h"
#include "strata/router/placement.h"
#include "strata/router/worker_view.h"

namespace strata::router {
namespace {

constexpr int kWorkers = 100, kPrefill = 30;
constexpr int kSystemBlocks = 8, kDocBlocks = 56;
constexpr int kDocs = 1'000'000 / kDocBlocks + 1;

void StoreChain(KvIndex& index, WorkerId w, Tier tier, const std::vector<BlockHash>& chain,
                int n) {
  for (int b = 0; b < n; ++b) {
    const BlockHash parent = b == 0 ? kRootBlockHash : chain[b - 1];
    (void)index.Apply(w, tier, {KvEvent::Kind::kStored, chain[b], parent});
  }
}

std::vector<std::vector<BlockHash>> BuildIndex(KvIndex& index, std::mt19937_64& rng) {
  for (WorkerId w = 0; w < kWorkers; ++w) (void)index.RegisterWorker(w);
  std::vector<BlockHash> system(kSystemBlocks);
  for (BlockHash& h : system) h = rng() | 1;
  for (WorkerId w = 0; w < kWorkers; ++w) StoreChain(index, w, Tier::kGpu, system, kSystemBlocks);
  std::vector<std::vector<BlockHash>> docs;
  docs.reserve(kDocs);
  for (int d = 0; d < kDocs; ++d) {
    std::vector<BlockHash> chain = system;
    for (int b = 0; b < kDocBlocks; ++b) chain.push_back(rng() | 1);
    StoreChain(index, rng() % kWorkers, Tier::kGpu, chain, int(chain.size()));
    for (int k = rng() % 8; k > 0; --k) {
      const Tier tier = rng() % 4 == 0 ? Tier::kHostPinned : Tier::kGpu;
      StoreChain(index, rng() % kWorkers, tier, chain, 1 + int(rng() % chain.size()));
    }
    docs.push_back(std::move(chain));
  }
  return docs;
}

std::vector<WorkerView> Views(std::mt19937_64& rng) {
  std::vector<WorkerView> views(kWorkers);
  for (int w = 0; w < kWorkers; ++w) {
    WorkerView& v = views[w];
    v.index_id = WorkerId(w);
    const bool prefill = w < kPrefill;
    v.id = (prefill ? "prefill-" : "decode-") + std::to_string(w);
    v.role = prefill ? WorkerRole::kPrefill : WorkerRole::kDecode;
    v.load.queued_prefill_tokens = int64_t(rng() % 4096);
    v.load.running = int32_t(rng() % 48);
    v.load.total_kv_blocks = 8192;
    v.load.free_kv_blocks = int32_t(2048 + rng() % 6000);
    v.load.decode_context_tokens = int64_t(rng() % 200000);
    v.load.step_seconds_ema = 0.02;
    v.inflight = int64_t(rng() % 32);
  }
  return views;
}

struct Result {
  double p50 = 0, p99 = 0, max = 0, per_second = 0;
  int errors = 0;
};

Result Run(const std::string& policy, const KvIndex& index,
           const std::vector<std::vector<BlockHash>>& docs, const std::vector<WorkerView>& views,
           int decisions) {
  PlacementOptions o;
  o.policy = policy;
  o.slo = {1000.0, 1000.0};  // admit everything: the cost of deciding, not of rejecting
  auto profile = WorkerProfile::Load(DefaultProfilePath());
  if (!profile.ok()) {
    std::fprintf(stderr, "placement_bench: %s\n", std::string(profile.status().message()).c_str());
    std::exit(1);
  }
  o.profile = *profile;
  auto placer = Placer::Create(o);
  if (!placer.ok()) std::exit(1);
  std::mt19937_64 rng(7);
  std::vector<double> us;
  us.reserve(decisions);
  Result r;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < decisions; ++i) {
    const auto& chain = docs[rng() % docs.size()];
    PlacementRequest req;
    req.prompt_tokens = int32_t(chain.size() * 16);
    req.max_tokens = 256;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<WorkerMatch> matches = index.MatchPrefix(chain);
    auto placement = (*placer)->Place(views, matches, req);
    const auto t1 = std::chrono::steady_clock::now();
    if (!placement.ok()) ++r.errors;
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::sort(us.begin(), us.end());
  r.p50 = us[us.size() / 2];
  r.p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  r.max = us.back();
  r.per_second = decisions / total;
  return r;
}

}  // namespace
}  // namespace strata::router

int main(int argc, char** argv) {
  using namespace strata::router;
  const int decisions = argc > 1 ? std::atoi(argv[1]) : 20000;
  std::mt19937_64 rng(3);
  KvIndex index;
  std::fprintf(stderr, "building the index (100 workers, ~1M blocks) ...\n");
  const auto docs = BuildIndex(index, rng);
  const auto views = Views(rng);
  std::printf("index: %lld blocks, 100 workers (30 prefill, 70 decode), 64-block queries, "
              "%d decisions per policy\n\n",
              static_cast<long long>(index.num_blocks()), decisions);
  std::printf("| policy | p50 us | p99 us | max us | decisions/s | errors |\n|---|---:|---:|---:|---:|---:|\n");
  const std::string only = argc > 2 ? std::string(",") + argv[2] + "," : "";
  for (const char* policy : {"round-robin", "least-loaded", "kv-aware", "kv-cost", "goodput"}) {
    if (!only.empty() && only.find(std::string(",") + policy + ",") == std::string::npos) continue;
    const Result r = Run(policy, index, docs, views, decisions);
    std::printf("| %s | %.1f | %.1f | %.1f | %.0f | %d |\n", policy, r.p50, r.p99, r.max,
                r.per_second, r.errors);
  }
  return 0;
}
