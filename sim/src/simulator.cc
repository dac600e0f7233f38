#include "strata/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <memory>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sim_worker.h"
#include "strata/common/logging.h"

namespace strata::sim {
namespace {

using replay::ErrorKind;
using replay::RequestResult;
using replay::TraceRequest;

enum class EventKind : uint8_t { kStepDone, kKvArrive, kHeartbeat, kAdmissionTimer };

struct Event {
  double time;
  uint64_t seq;  // insertion order breaks ties, so runs are deterministic
  EventKind kind;
  int32_t target;  // worker (step, heartbeat) or request (KV arrival)
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

absl::Status Validate(const std::vector<TraceRequest>& trace, const SimOptions& o) {
  const ClusterShape& s = o.shape;
  if (s.prefill < 0 || s.decode < 0 || s.mixed < 0) {
    return absl::InvalidArgumentError("worker counts must be >= 0");
  }
  if (s.aggregated() && (s.prefill > 0 || s.decode > 0)) {
    return absl::InvalidArgumentError("a cluster is either aggregated (mixed) or disaggregated");
  }
  if (!s.aggregated() && s.decode == 0) {
    return absl::InvalidArgumentError("the cluster needs at least one decode or mixed worker");
  }
  if (s.colocated && (s.aggregated() || s.prefill != s.decode)) {
    return absl::InvalidArgumentError(
        "colocated workers pair prefill and decode workers: give as many of each, no mixed");
  }
  const router::WorkerProfile& p = o.profile;
  if (p.block_size <= 0 || replay::kTraceBlockTokens % p.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile block_size ", p.block_size, " must divide 512"));
  }
  if (p.num_kv_blocks <= 0 || p.max_running <= 0 ||
      (o.max_batch_tokens > 0 ? o.max_batch_tokens : p.max_batch_tokens) <= 0) {
    return absl::InvalidArgumentError(
        "profile num_kv_blocks, max_running and max_batch_tokens must be > 0");
  }
  if (!(o.heartbeat_interval_s >= 0)) {
    return absl::InvalidArgumentError("heartbeat interval must be >= 0");
  }
  for (size_t i = 1; i < trace.size(); ++i) {
    if (trace[i].arrival_s < trace[i - 1].arrival_s) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, " arrives before the one before it"));
    }
  }
  return absl::OkStatus();
}

class Simulation final : public WorkerListener, public router::AdmissionObserver {
 public:
  Simulation(const std::vector<TraceRequest>& trace, const SimOptions& options,
             std::unique_ptr<router::Placer> placer, const SimProgress& progress, int64_t every)
      : trace_(trace),
        o_(options),
        placer_(std::move(placer)),
        progress_(progress),
        progress_every_(std::max<int64_t>(1, every)),
        seed_(BlockHashSeed("strata-sim", absl::StrCat(options.seed))),
        queue_(options.admission.capacity > 0
                   ? std::make_unique<router::AdmissionQueue>(options.admission, this)
                   : nullptr) {}

  absl::Status Init();
  SimResult Run();

  void OnPrefillDone(int request, double now) override;
  void OnFirstToken(int request, double now) override;
  void OnFinished(int request, double now, int worker) override;
  void OnUnservable(int request, int worker) override;
  void OnLeft(double waited_s) override {}
  void OnRejected(router::AdmissionReject reason) override;

 private:
  void AddWorker(router::WorkerRole role, const std::string& name, int64_t max_batch_tokens);
  void Push(double time, EventKind kind, int32_t target);
  void Arrive(int request);
  // Places the request now and starts it on its workers; the placement's error otherwise.
  absl::Status PlaceNow(int request);
  void Reject(int request, const absl::Status& status);
  void Enqueue(int request, const absl::Status& placement_error);
  // Runs a pending wake-up of the admission queue and keeps its expiry timer scheduled.
  void WakeQueue();
  void KvArrive(int request);
  void Kick(int worker);
  void Publish(int worker);
  void Heartbeat(int worker);
  void Fail(int request, ErrorKind kind, int http_status, std::string type, std::string message);
  void Done(int request);

  const std::vector<TraceRequest>& trace_;
  const SimOptions& o_;
  std::unique_ptr<router::Placer> placer_;
  SimProgress progress_;
  int64_t progress_every_;
  uint64_t seed_;

  std::unique_ptr<router::AdmissionQueue> queue_;  // null: no queue
  bool wake_pending_ = false;                      // capacity changed since the last wake
  double timer_at_ = -1;                           // the pending kAdmissionTimer, if >= 0
  router::KvIndex index_;
  std::vector<std::unique_ptr<SimWorker>> workers_;
  std::vector<router::WorkerView> views_;  // what the router sees, by worker
  absl::flat_hash_map<std::string, int> worker_of_;
  std::vector<SimRequest> requests_;
  std::vector<router::Placement> placements_;  // by request, for Placer::OnFirstToken
  std::vector<RequestResult> results_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  int64_t pending_work_ = 0;  // queued events other than heartbeats
  size_t next_arrival_ = 0;
  int64_t finished_ = 0;
  double now_ = 0;
  SimStats stats_;
};

void Simulation::AddWorker(router::WorkerRole role, const std::string& name,
                           int64_t max_batch_tokens) {
  const int index = static_cast<int>(workers_.size());
  workers_.push_back(std::make_unique<SimWorker>(index, role, o_.profile, max_batch_tokens,
                                                 o_.record_gaps, &requests_, this));
  router::WorkerView v;
  v.index_id = static_cast<router::WorkerId>(index + 1);
  v.id = name;
  v.role = role;
  v.grpc_address = absl::StrCat("sim:", index);
  v.load = workers_.back()->Load();
  views_.push_back(std::move(v));
  worker_of_[name] = index;
}

absl::Status Simulation::Init() {
  const ClusterShape& s = o_.shape;
  const int64_t budget =
      o_.max_batch_tokens > 0 ? o_.max_batch_tokens : o_.profile.max_batch_tokens;
  for (int i = 0; i < s.prefill; ++i) {
    AddWorker(router::WorkerRole::kPrefill, absl::StrCat("prefill-", i), budget);
  }
  for (int i = 0; i < s.decode; ++i) {
    AddWorker(router::WorkerRole::kDecode, absl::StrCat("decode-", i), budget);
  }
  for (int i = 0; i < s.mixed; ++i) {
    AddWorker(router::WorkerRole::kMixed, absl::StrCat("mixed-", i), budget);
  }
  for (const router::WorkerView& v : views_) {
    if (absl::Status st = index_.RegisterWorker(v.index_id); !st.ok()) return st;
  }
  requests_.resize(trace_.size());
  placements_.resize(trace_.size());
  results_.resize(trace_.size());
  for (size_t i = 0; i < trace_.size(); ++i) {
    const TraceRequest& t = trace_[i];
    SimRequest& r = requests_[i];
    r.input = t.input_tokens;
    r.output = std::max(1, t.output_tokens);
    r.arrival = t.arrival_s;
    RequestResult& res = results_[i];
    res.index = static_cast<int64_t>(i);
    res.trace_line = t.line;
    res.input_tokens = t.input_tokens;
    res.max_tokens = r.output;
    res.scheduled_s = t.arrival_s;
    res.send_s = t.arrival_s;
  }
  if (o_.heartbeat_interval_s > 0) {
    // Staggered like independent workers' timers.
    const double step = o_.heartbeat_interval_s / static_cast<double>(workers_.size());
    for (size_t w = 0; w < workers_.size(); ++w) {
      Push(step * static_cast<double>(w), EventKind::kHeartbeat, static_cast<int32_t>(w));
    }
  }
  return absl::OkStatus();
}

void Simulation::Push(double time, EventKind kind, int32_t target) {
  if (kind != EventKind::kHeartbeat) ++pending_work_;
  events_.push(Event{time, seq_++, kind, target});
}

// A heartbeat: the worker's load and the KV events since the previous one reach the router.
void Simulation::Publish(int worker) {
  std::vector<router::KvEvent>& events = workers_[worker]->pending_events();
  if (!events.empty()) {
    const absl::Status st = index_.ApplyBatch(views_[worker].index_id, router::Tier::kGpu, events);
    STRATA_CHECK(st.ok());
    stats_.kv_events += static_cast<int64_t>(events.size());
    events.clear();
  }
  views_[worker].load = workers_[worker]->Load();
  views_[worker].last_heartbeat = absl::FromUnixSeconds(0) + absl::Seconds(now_);
}

void Simulation::Heartbeat(int worker) {
  Publish(worker);
  wake_pending_ = true;
  if (pending_work_ > 0 || next_arrival_ < trace_.size()) {
    Push(now_ + o_.heartbeat_interval_s, EventKind::kHeartbeat, worker);
  }
}

void Simulation::Kick(int worker) {
  double seconds = workers_[worker]->MaybeStartStep();
  // A colocated pair time-slices its device (ClusterShape::colocated).
  if (seconds > 0 && o_.shape.colocated) {
    const int n = o_.shape.prefill;
    const int partner = worker < n ? worker + n : worker - n;
    if (workers_[partner]->busy()) seconds *= 2;
  }
  if (seconds >= 0) Push(now_ + seconds, EventKind::kStepDone, worker);
}

void Simulation::Arrive(int request) {
  SimRequest& r = requests_[request];
  r.chain = TraceBlockChain(trace_[request], static_cast<uint64_t>(request), o_.profile.block_size,
                            o_.seed);
  const absl::Status placed = PlaceNow(request);
  if (placed.ok()) return;
  if (queue_ != nullptr && router::MinTtftIfWaited(placed).has_value()) {
    Enqueue(request, placed);
  } else {
    Reject(request, placed);
  }
}

absl::Status Simulation::PlaceNow(int request) {
  SimRequest& r = requests_[request];
  if (o_.heartbeat_interval_s == 0) {
    for (size_t w = 0; w < workers_.size(); ++w) Publish(static_cast<int>(w));
  }
  const std::vector<router::WorkerMatch> matches = index_.MatchPrefix(r.chain);
  router::PlacementRequest pr;
  pr.prompt_tokens = r.input;
  pr.block_size = o_.profile.block_size;
  pr.max_tokens = r.output;  // what `strata replay` sends as max_tokens
  pr.waited_s = now_ - r.arrival;  // > 0 when placed from the admission queue
  absl::StatusOr<router::Placement> placed = placer_->Place(views_, matches, pr);
  if (!placed.ok()) return placed.status();
  placements_[request] = *placed;
  r.decode_worker = worker_of_.at(placed->decode_id);
  r.decode_cached_blocks = placed->cached_blocks;
  ++views_[r.decode_worker].inflight;
  if (!placed->prefill_id.empty()) {
    r.prefill_worker = worker_of_.at(placed->prefill_id);
    ++views_[r.prefill_worker].inflight;
    ++stats_.remote_prefills;
    workers_[r.prefill_worker]->Enqueue(request, Phase::kPrefillOnly);
    Kick(r.prefill_worker);
  } else {
    workers_[r.decode_worker]->Enqueue(request, Phase::kLocal);
    Kick(r.decode_worker);
  }
  return absl::OkStatus();
}

void Simulation::Reject(int request, const absl::Status& status) {
  ++stats_.rejected;
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    Fail(request, ErrorKind::kHttp4xx, 429, "rate_limit_error", std::string(status.message()));
  } else {
    Fail(request, ErrorKind::kHttp5xx, 503, "service_unavailable", std::string(status.message()));
  }
}

// As ClusterBackend does: the request waits, deadline = arrival + its TTFT target.
void Simulation::Enqueue(int request, const absl::Status& placement_error) {
  router::AdmissionWaiter w;
  w.deadline_s = requests_[request].arrival + placer_->TargetsFor("").ttft_s;
  w.try_place = [this, request] {
    absl::Status placed = PlaceNow(request);
    if (placed.ok()) ++stats_.queue_placed;
    return placed;
  };
  w.reject = [this, request](router::AdmissionReject, const absl::Status& status) {
    Reject(request, status);
  };
  if (queue_->Offer(now_, placement_error, std::move(w)) != router::AdmissionQueue::kNoTicket) {
    ++stats_.queued;
    WakeQueue();  // schedules its expiry
  }
}

void Simulation::OnRejected(router::AdmissionReject reason) {
  if (reason == router::AdmissionReject::kSlackExpired) ++stats_.slack_expired;
  if (reason == router::AdmissionReject::kQueueFull) ++stats_.queue_full;
}

// Capacity changes (first tokens, finished requests, heartbeats) only mark a wake-up; it runs
// after the event that caused it, never inside a worker's step bookkeeping.
void Simulation::WakeQueue() {
  if (queue_ == nullptr) return;
  if (queue_->size() == 0) {
    wake_pending_ = false;  // nothing waits: the state a new request sees is current
    return;
  }
  if (wake_pending_) {
    wake_pending_ = false;
    queue_->Wake(now_);
  }
  const std::optional<double> expiry = queue_->NextExpiry();
  // Expiry rejects once the latest start has passed: the first representable time after it.
  const double at =
      expiry ? std::max(now_, std::nextafter(*expiry, std::numeric_limits<double>::infinity()))
             : -1;
  if (at >= 0 && (timer_at_ < 0 || at < timer_at_)) {
    timer_at_ = at;
    Push(at, EventKind::kAdmissionTimer, -1);
  }
}

void Simulation::OnPrefillDone(int request, double now) {
  const SimRequest& r = requests_[request];
  const int block_size = o_.profile.block_size;
  const int64_t blocks = std::max<int64_t>(
      0, (int64_t{r.input} + block_size - 1) / block_size - r.decode_cached_blocks);
  const double bytes = static_cast<double>(blocks) * static_cast<double>(o_.profile.kv_block_bytes);
  Push(now + o_.profile.kv_transfer.Seconds(bytes), EventKind::kKvArrive, request);
}

// The KV is in the decode worker's blocks: the prefill worker's first token reaches the client.
void Simulation::KvArrive(int request) {
  SimRequest& r = requests_[request];
  r.first_token = now_;
  OnFirstToken(request, now_);
  if (r.output <= 1) {
    OnFinished(request, now_, r.decode_worker);
    return;
  }
  workers_[r.decode_worker]->Enqueue(request, Phase::kDecodeOnly);
  Kick(r.decode_worker);
}

// As ClusterBackend does when the first token streams: feeds the goodput policy's TTFT
// correction and releases its pending-prefill ledger.
void Simulation::OnFirstToken(int request, double now) {
  placer_->OnFirstToken(placements_[request], now - requests_[request].arrival);
  wake_pending_ = true;
}

void Simulation::OnFinished(int request, double now, int worker) {
  SimRequest& r = requests_[request];
  RequestResult& res = results_[request];
  res.ttft_s = r.first_token - r.arrival;
  res.e2e_s = now - r.arrival;
  res.http_status = 200;
  res.token_chunks = r.output;
  res.prompt_tokens = r.input;
  res.cached_tokens = r.cached_tokens;
  res.completion_tokens = r.output;
  workers_[worker]->AppendGaps(r, &res.gaps_s);
  Done(request);
}

void Simulation::OnUnservable(int request, int worker) {
  placer_->OnFirstToken(placements_[request], -1);
  Fail(request, ErrorKind::kHttp4xx, 400, "invalid_request_error",
       absl::StrCat("the request needs more KV blocks than ", views_[worker].id, " has"));
}

void Simulation::Fail(int request, ErrorKind kind, int http_status, std::string type,
                      std::string message) {
  RequestResult& res = results_[request];
  res.error = kind;
  res.http_status = http_status;
  res.error_type = std::move(type);
  res.error_message = std::move(message);
  res.ttft_s = -1;
  res.e2e_s = now_ - requests_[request].arrival;
  Done(request);
}

// The router sees the stream end: both workers' inflight counts drop (as ClusterBackend does).
void Simulation::Done(int request) {
  SimRequest& r = requests_[request];
  if (r.decode_worker >= 0) --views_[r.decode_worker].inflight;
  if (r.prefill_worker >= 0) --views_[r.prefill_worker].inflight;
  if (r.decode_worker >= 0) wake_pending_ = true;
  r.chain = {};
  ++finished_;
  if (progress_ && finished_ % progress_every_ == 0) {
    progress_(finished_, static_cast<int64_t>(trace_.size()), now_);
  }
}

SimResult Simulation::Run() {
  while (next_arrival_ < trace_.size() || !events_.empty()) {
    ++stats_.events;
    if (next_arrival_ < trace_.size() &&
        (events_.empty() || trace_[next_arrival_].arrival_s < events_.top().time)) {
      now_ = std::max(now_, trace_[next_arrival_].arrival_s);
      Arrive(static_cast<int>(next_arrival_++));
      WakeQueue();
      continue;
    }
    const Event e = events_.top();
    events_.pop();
    now_ = e.time;
    if (e.kind != EventKind::kHeartbeat) --pending_work_;
    switch (e.kind) {
      case EventKind::kStepDone:
        workers_[e.target]->FinishStep(now_);
        Kick(e.target);
        break;
      case EventKind::kKvArrive:
        KvArrive(e.target);
        break;
      case EventKind::kHeartbeat:
        Heartbeat(e.target);
        break;
      case EventKind::kAdmissionTimer:
        if (e.time == timer_at_) timer_at_ = -1;
        wake_pending_ = true;
        break;
    }
    WakeQueue();
  }
  for (size_t i = 0; i < results_.size(); ++i) {  // a request no event will ever finish
    if (results_[i].http_status == 0) {
      Fail(static_cast<int>(i), ErrorKind::kTimeout, 0, "stalled",
           "the simulation ran out of events");
    }
  }
  SimResult out;
  stats_.simulated_s = now_;
  for (const auto& w : workers_) {
    stats_.steps += w->steps();
    stats_.evictions += w->cache().evictions();
  }
  if (progress_) progress_(finished_, static_cast<int64_t>(trace_.size()), now_);
  out.stats = stats_;
  out.results = std::move(results_);
  return out;
}

}  // namespace

std::string ClusterShape::ToString() const {
  if (aggregated()) return absl::StrCat(mixed, " mixed");
  return absl::StrCat(prefill, "P:", decode, "D", colocated ? " colocated" : "");
}

std::vector<BlockHash> TraceBlockChain(const TraceRequest& request, uint64_t request_index,
                                       int block_size, uint64_t seed) {
  const uint64_t hash_seed = BlockHashSeed("strata-sim", absl::StrCat(seed));
  const int32_t full = request.input_tokens / block_size;
  const int32_t per = replay::kTraceBlockTokens / block_size;
  std::vector<BlockHash> chain(static_cast<size_t>(std::max(0, full)));
  BlockHash parent = kRootBlockHash;
  for (int32_t j = 0; j < full; ++j) {
    const bool has_ids = !request.block_ids.empty();
    const uint64_t id = has_ids ? request.block_ids[static_cast<size_t>(j / per)] : request_index;
    // Unique prompts carry a fourth word so they never collide with a trace block.
    const int32_t words[4] = {static_cast<int32_t>(id & 0xffffffffu),
                              static_cast<int32_t>(id >> 32), has_ids ? j % per : j, -1};
    parent = HashBlock(hash_seed, parent, std::span<const int32_t>(words, has_ids ? 3 : 4));
    chain[static_cast<size_t>(j)] = parent;
  }
  return chain;
}

router::WorkerProfile EffectiveProfile(const router::WorkerProfile& profile) {
  router::WorkerProfile p = profile;
  if (p.num_kv_blocks == 0 && p.kv_block_bytes > 0) {
    p.num_kv_blocks = kDefaultKvCacheBytes / p.kv_block_bytes;
  }
  return p;
}

absl::StatusOr<SimResult> Simulate(const std::vector<TraceRequest>& requests,
                                   const SimOptions& given, const SimProgress& progress,
                                   int64_t progress_every) {
  SimOptions options = given;
  options.profile = EffectiveProfile(given.profile);
  if (absl::Status st = Validate(requests, options); !st.ok()) return st;
  router::PlacementOptions placement = options.placement;
  placement.profile = options.profile;  // goodput predicts with the simulated workers' models
  // The router keeps a ledger of placed-but-unstarted prefill tokens because heartbeats lag;
  // with instant reports (interval 0) the simulated load is exact and the ledger is off.
  placement.track_pending_prefill = options.heartbeat_interval_s > 0;
  absl::StatusOr<std::unique_ptr<router::Placer>> placer = router::Placer::Create(placement);
  if (!placer.ok()) return placer.status();
  Simulation sim(requests, options, *std::move(placer), progress, progress_every);
  if (absl::Status st = sim.Init(); !st.ok()) return st;
  return sim.Run();
}

}  // namespace strata::sim
