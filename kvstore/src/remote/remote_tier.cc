// RemoteTier (remote_tier.h): G4 over kvstore daemons.
#include "strata/kvstore/remote_tier.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "remote_tier_impl.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "strata/kvstore/kvstore_server.h"

namespace strata::kvstore {
namespace remote {
namespace {

// The rendezvous weight of `hash` on the daemon seeded `seed` (little-endian bytes of the hash,
// so every host computes the same weight).
uint64_t Weight(BlockHash hash, uint64_t seed) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(hash >> (8 * i));
  return XXH3_64bits_withSeed(le, sizeof(le), seed);
}

}  // namespace

uint64_t DaemonSeed(const std::string& address) {
  return XXH3_64bits(address.data(), address.size());
}

int PickBySeeds(BlockHash hash, std::span<const uint64_t> seeds) {
  int best = -1;
  uint64_t best_weight = 0;
  for (size_t i = 0; i < seeds.size(); ++i) {
    const uint64_t w = Weight(hash, seeds[i]);
    if (best < 0 || w > best_weight) {
      best = static_cast<int>(i);
      best_weight = w;
    }
  }
  return best;
}

absl::Status RemoteTierImpl::Init() {
  STRATA_ASSIGN_OR_RETURN(agent_, transport::Agent::Create({.name = options_.agent_name}));
  const size_t lanes = static_cast<size_t>(options_.lanes);
  lane_blocks_ = std::max<size_t>(1, options_.staging_bytes / lanes / bb());
  lane_blocks_ = std::min<size_t>(lane_blocks_, kMaxKvBlocksPerRequest);
  STRATA_ASSIGN_OR_RETURN(transport::AllocatedRegion r,
                          agent_->AllocateMemory(lanes * lane_blocks_ * bb()));
  staging_region_ = r.region;
  staging_ = static_cast<std::byte*>(r.addr);
  lanes_ = std::make_unique<remote::Lanes>(options_.lanes, lane_blocks_ * bb());
  {
    absl::MutexLock lock(&members_mu_);
    members_ = std::make_shared<const Membership>();
  }
  SetDaemons(options_.daemons);
  flusher_ = std::thread([this] { FlushLoop(); });
  return absl::OkStatus();
}

std::shared_ptr<Daemon> RemoteTierImpl::NewDaemon(const std::string& address) {
  return std::make_shared<Daemon>(
      address, agent_.get(), options_,
      [this, address](std::span<const OwedCommit> commits, std::span<const uint32_t> codes,
                      const absl::Status& error) {
        OnCommitsSettled(address, commits, codes, error);
      });
}

std::shared_ptr<const Membership> RemoteTierImpl::Members() const {
  absl::MutexLock lock(&members_mu_);
  return members_;
}

std::vector<std::string> RemoteTierImpl::daemons() const {
  std::vector<std::string> out;
  for (const auto& d : Members()->daemons) out.push_back(d->address());
  return out;
}

void RemoteTierImpl::SetDaemons(std::vector<std::string> addresses) {
  absl::MutexLock set_lock(&set_mu_);
  const std::shared_ptr<const Membership> old = Members();
  auto next = std::make_shared<Membership>();
  std::vector<std::shared_ptr<Daemon>> joined;
  absl::flat_hash_set<std::string> listed;
  for (const std::string& address : addresses) {
    if (!listed.insert(address).second) continue;  // listed twice
    std::shared_ptr<Daemon> d;
    for (const auto& kept : old->daemons) {
      if (kept->address() == address) d = kept;
    }
    if (d == nullptr) {
      d = NewDaemon(address);
      joined.push_back(d);
    }
    next->seeds.push_back(DaemonSeed(address));
    next->daemons.push_back(std::move(d));
  }
  {
    absl::MutexLock lock(&members_mu_);
    members_ = next;
  }
  for (const auto& d : joined) {
    STRATA_LOG(Info) << "kvstore " << d->address() << " joined the remote tier";
    (void)d->Connect();  // one that is down now is retried later
  }
  for (const auto& d : old->daemons) {
    if (std::find(next->daemons.begin(), next->daemons.end(), d) != next->daemons.end()) continue;
    STRATA_LOG(Info) << "kvstore " << d->address() << " left the remote tier";
    d->Flush();
    agent_->RemovePeer(d->peer());
  }
}

RemoteTierImpl::~RemoteTierImpl() {
  if (flusher_.joinable()) {
    {
      absl::MutexLock lock(&flush_mu_);
      stopping_ = true;
    }
    flusher_.join();
  }
  Flush();
}

// --- settling ----------------------------------------------------------------------------------

void RemoteTierImpl::Owe(Daemon& d, const Session& session, Owed owed) {
  if (owed.empty()) return;
  d.Owe(session, std::move(owed));
  absl::MutexLock lock(&flush_mu_);
  if (flusher_idle_) kicked_ = true;
}

void RemoteTierImpl::Flush() {
  for (const auto& d : Members()->daemons) d->Flush();
}

// Sleeps while nothing is owed; else until the oldest owed entry is settle_delay old, then
// flushes every daemon whose entries are that old (a request usually carried them first).
void RemoteTierImpl::FlushLoop() {
  absl::MutexLock lock(&flush_mu_);
  while (!stopping_) {
    const std::shared_ptr<const Membership> members = Members();
    absl::Time due = absl::InfiniteFuture();
    for (const auto& d : members->daemons) {
      due = std::min(due, d->OwedSince() + options_.settle_delay);
    }
    if (due == absl::InfiniteFuture()) {
      flusher_idle_ = true;
      flush_mu_.Await(absl::Condition(this, &RemoteTierImpl::FlusherWanted));
      flusher_idle_ = false;
      kicked_ = false;
      continue;
    }
    if (absl::Now() < due) {
      flush_mu_.AwaitWithDeadline(absl::Condition(&stopping_), due);
      continue;
    }
    flush_mu_.Unlock();
    const absl::Time now = absl::Now();
    for (const auto& d : members->daemons) {
      if (d->OwedSince() + options_.settle_delay <= now) d->Flush();
    }
    flush_mu_.Lock();
  }
}

void RemoteTierImpl::OnCommitsSettled(const std::string& address,
                                      std::span<const OwedCommit> commits,
                                      std::span<const uint32_t> codes,
                                      const absl::Status& error) const {
  if (codes.empty()) {
    counters_.rejected += static_cast<int64_t>(commits.size());
    STRATA_LOG(Warning) << "kvstore " << address << ": " << commits.size()
                        << " written block(s) not committed: " << error.message();
    return;
  }
  for (size_t i = 0; i < commits.size(); ++i) {
    if (static_cast<absl::StatusCode>(codes[i]) != absl::StatusCode::kOk) {
      ++counters_.rejected;  // the reservation expired before the commit arrived
      continue;
    }
    ++counters_.puts;
    counters_.bytes_in += static_cast<int64_t>(bb());
    Publish(TierEvent::Kind::kStored, commits[i].meta.hash, commits[i].meta.parent);
  }
}

// --- put ---------------------------------------------------------------------------------------

absl::Status RemoteTierImpl::PutRun(std::span<const BlockMeta> metas,
                                    std::span<const std::byte> data) {
  if (data.size() != metas.size() * bb()) {
    return absl::InvalidArgumentError(absl::StrCat("a run of ", metas.size(), " blocks needs ",
                                                   metas.size() * bb(), " bytes, not ",
                                                   data.size()));
  }
  std::vector<PutItem> items;
  for (size_t i = 0; i < metas.size(); ++i) {
    items.push_back({metas[i], data.data() + i * bb(), static_cast<int>(i)});
  }
  std::vector<absl::Status> results(metas.size());
  return PutItems(items, FindRegistered(data.data(), data.size()), results);
}

std::vector<absl::Status> RemoteTierImpl::PutBlocks(std::span<const BlockMeta> metas,
                                                    std::span<const std::byte* const> srcs) {
  if (srcs.size() != metas.size()) {
    return std::vector<absl::Status>(
        metas.size(), absl::InvalidArgumentError(absl::StrCat("PutBlocks: ", metas.size(),
                                                              " metas and ", srcs.size(),
                                                              " sources")));
  }
  std::vector<PutItem> items;
  for (size_t i = 0; i < metas.size(); ++i) {
    items.push_back({metas[i], srcs[i], static_cast<int>(i)});
  }
  std::vector<absl::Status> results(metas.size());
  (void)PutItems(items, FindRegisteredBlocks(srcs), results);
  return results;
}

// At most two pieces of a call are started at once: one transfer on the wire while the calling
// thread reserves and stages the next piece. More would not overlap more (one thread does that
// work) and would only hold more lanes and more of the daemon's slots reserved.
absl::Status RemoteTierImpl::PutItems(std::span<const PutItem> all,
                                      const std::optional<RegisteredRegion>& direct,
                                      std::span<absl::Status> results) {
  constexpr size_t kPiecesInFlight = 2;
  const std::shared_ptr<const Membership> members = Members();
  if (members->daemons.empty()) {
    const absl::Status none = NoDaemon();
    counters_.rejected += static_cast<int64_t>(all.size());
    for (const PutItem& it : all) results[it.index] = none;
    return all.empty() ? absl::OkStatus() : none;
  }
  std::vector<std::vector<PutItem>> groups(members->daemons.size());
  for (const PutItem& it : all) groups[members->For(it.meta.hash)].push_back(it);
  const size_t piece = PieceBlocks(direct.has_value());
  PutPipeline pipe{.results = results};
  for (size_t d = 0; d < groups.size(); ++d) {
    std::span<const PutItem> items = groups[d];
    for (size_t at = 0; at < items.size(); at += piece) {
      if (pipe.started.size() == kPiecesInFlight) FinishOldest(pipe);
      StartPiece(pipe, *members->daemons[d], items.subspan(at, std::min(piece, items.size() - at)),
                 direct);
    }
  }
  while (!pipe.started.empty()) FinishOldest(pipe);
  return pipe.first;
}

void RemoteTierImpl::StartPiece(PutPipeline& pipe, Daemon& d, std::span<const PutItem> items,
                                const std::optional<RegisteredRegion>& direct) {
  PutInFlight p{.daemon = &d};
  if (!direct) p.lane.emplace(TakePutLane(pipe));  // only staged pieces hold a lane
  auto session = d.Connect();
  auto reserved = session.ok() ? ReservePiece(pipe, d, *session, items) : session.status();
  if (!reserved.ok()) {
    counters_.rejected += static_cast<int64_t>(items.size());
    for (const PutItem& it : items) pipe.results[it.index] = reserved.status();
    p.error = reserved.status();
    p.lane.reset();
    pipe.started.push_back(std::move(p));
    return;
  }
  p.reserved = true;
  p.session = *session;
  const LocalSide local = Local(direct, &p.lane);
  p.staged = Stage(items, *reserved, local, p.lane ? p.lane->offset() : 0, pipe.results);
  counters_.rejected += p.staged.full;
  (local.direct ? counters_.direct_blocks : counters_.staged_blocks) +=
      static_cast<int64_t>(p.staged.written.size());
  if (!p.staged.runs.empty()) {
    auto t = PostTransfer(true, d, *session, local.region, p.staged.runs);
    if (t.ok()) p.transfer = *t;
    p.error = t.status();
  }
  if (!p.transfer) p.lane.reset();  // nothing in flight reads it
  pipe.started.push_back(std::move(p));
}

void RemoteTierImpl::FinishOldest(PutPipeline& pipe) {
  absl::Status s = FinishPiece(pipe.started.front(), pipe.results);
  pipe.started.pop_front();
  if (pipe.first.ok()) pipe.first = std::move(s);
}

absl::Status RemoteTierImpl::FinishPiece(PutInFlight& p, std::span<absl::Status> results) {
  if (!p.reserved) return p.error;
  Daemon& d = *p.daemon;
  const absl::Status s = p.transfer ? AwaitTransfer(d, p.session, *p.transfer) : p.error;
  p.lane.reset();
  StagedPut& st = p.staged;
  Owed owed{.instance = p.session.instance};
  if (!s.ok()) {
    // Nothing (or not everything) landed: give the slots back rather than commit garbage.
    for (const OwedCommit& c : st.commits) owed.aborts.push_back(c.reservation_id);
    Owe(d, p.session, std::move(owed));
    counters_.rejected += static_cast<int64_t>(st.written.size());
    for (const PutItem& it : st.written) results[it.index] = s;
    return s;
  }
  // The bytes are in the slots: the commit rides on the next request to the daemon.
  owed.commits = std::move(st.commits);
  Owe(d, p.session, std::move(owed));
  if (st.full > 0) {
    return absl::ResourceExhaustedError(absl::StrCat("kvstore ", d.address(), " has no room for ",
                                                     st.full, " block(s): every block is leased"));
  }
  return absl::OkStatus();
}

LaneGuard RemoteTierImpl::TakePutLane(PutPipeline& pipe) {
  for (;;) {
    if (std::optional<LaneGuard> lane = LaneGuard::TryTake(*lanes_)) return std::move(*lane);
    if (pipe.started.empty()) return LaneGuard(*lanes_);  // holding none: waiting is safe
    FinishOldest(pipe);
  }
}

absl::StatusOr<v1::KvReserveWriteResponse> RemoteTierImpl::ReservePiece(
    PutPipeline& pipe, Daemon& d, const Session& session, std::span<const PutItem> items) {
  auto reserved = Reserve(d, session, items);
  if (!reserved.ok()) return reserved;
  std::vector<PutItem> refused;
  std::vector<int> refused_at;
  for (int i = 0; i < reserved->reservations_size(); ++i) {
    const auto code = static_cast<absl::StatusCode>(reserved->reservations(i).code());
    if (code == absl::StatusCode::kOk || code == absl::StatusCode::kAlreadyExists) continue;
    refused.push_back(items[i]);
    refused_at.push_back(i);
  }
  bool frees = false;  // a started piece to `d` wrote blocks: its commits or aborts make room
  for (const PutInFlight& p : pipe.started) frees |= p.daemon == &d && !p.staged.commits.empty();
  if (refused.empty() || !frees) return reserved;
  while (!pipe.started.empty()) FinishOldest(pipe);
  auto again = Reserve(d, session, refused);
  if (!again.ok()) return reserved;  // they stay refused; the others keep their slots
  for (size_t k = 0; k < refused_at.size(); ++k) {
    *reserved->mutable_reservations(refused_at[k]) = again->reservations(static_cast<int>(k));
  }
  return reserved;
}

absl::StatusOr<v1::KvReserveWriteResponse> RemoteTierImpl::Reserve(
    Daemon& d, const Session& session, std::span<const PutItem> items) {
  v1::KvReserveWriteRequest req;
  for (const PutItem& it : items) {
    v1::KvBlockMeta* b = req.add_blocks();
    b->set_hash(it.meta.hash);
    b->set_parent_hash(it.meta.parent);
  }
  auto resp = d.Call(session, &v1::KvStore::Stub::ReserveWrite, std::move(req));
  if (resp.ok() && resp->reservations_size() != static_cast<int>(items.size())) {
    return absl::InternalError("kvstore answered ReserveWrite for the wrong number of blocks");
  }
  return resp;
}

// Present blocks are skipped (OK), refused ones counted in `full` (ResourceExhausted).
StagedPut RemoteTierImpl::Stage(std::span<const PutItem> items,
                                const v1::KvReserveWriteResponse& reserved, const LocalSide& local,
                                size_t lane_offset, std::span<absl::Status> results) {
  StagedPut st;
  for (size_t i = 0; i < items.size(); ++i) {
    const v1::KvReservation& r = reserved.reservations(static_cast<int>(i));
    const auto code = static_cast<absl::StatusCode>(r.code());
    if (code == absl::StatusCode::kAlreadyExists) continue;
    if (code != absl::StatusCode::kOk) {
      ++st.full;
      results[items[i].index] = absl::ResourceExhaustedError(
          absl::StrCat("kvstore has no room for block ", items[i].meta.hash,
                       ": every block is leased"));
      continue;
    }
    uint64_t at;
    uint64_t checksum;
    if (local.direct) {
      at = local.Offset(items[i].src);
      checksum = BlockChecksum({items[i].src, bb()});
    } else {
      at = lane_offset + st.runs.size() * bb();
      // One pass: the checksum is computed from the registers the block is copied through.
      checksum = CopyWithBlockChecksum({staging_ + at, bb()}, {items[i].src, bb()});
    }
    st.runs.push_back({.local_offset = at, .remote_offset = r.offset(), .length = bb()});
    st.commits.push_back({.reservation_id = r.id(), .checksum = checksum, .meta = items[i].meta});
    st.written.push_back(items[i]);
  }
  return st;
}

absl::Status RemoteTierImpl::Transfer(bool write, Daemon& d, const Session& session,
                                      uint64_t local_region,
                                      const std::vector<transport::Run>& runs) {
  absl::StatusOr<uint64_t> t = PostTransfer(write, d, session, local_region, runs);
  return t.ok() ? AwaitTransfer(d, session, *t) : t.status();
}

// A failed or stuck transfer means the daemon (or our endpoint to it) is gone: reconnect.
absl::StatusOr<uint64_t> RemoteTierImpl::PostTransfer(bool write, Daemon& d, const Session& session,
                                                      uint64_t local_region,
                                                      const std::vector<transport::Run>& runs) {
  auto t = write ? agent_->PostWrite(d.peer(), local_region, session.remote_region, runs)
                 : agent_->PostRead(d.peer(), local_region, session.remote_region, runs);
  if (!t.ok()) d.Drop(session, t.status());
  return t;
}

absl::Status RemoteTierImpl::AwaitTransfer(Daemon& d, const Session& session, uint64_t transfer) {
  absl::Status s = agent_->Wait(transfer, options_.transfer_timeout);
  agent_->Release(transfer);
  if (!s.ok()) d.Drop(session, s);
  return s;
}

// --- registered regions ------------------------------------------------------------------------

LocalSide RemoteTierImpl::Local(const std::optional<RegisteredRegion>& direct,
                                std::optional<LaneGuard>* lane) {
  if (direct) return {.region = direct->region, .base = direct->base, .direct = true};
  if (!lane->has_value()) lane->emplace(*lanes_);
  return {.region = staging_region_, .base = staging_};
}

size_t RemoteTierImpl::PieceBlocks(bool direct) const {
  return direct ? static_cast<size_t>(kMaxKvBlocksPerRequest) : lane_blocks_;
}

absl::StatusOr<uint64_t> RemoteTierImpl::RegisterRegion(void* addr, size_t bytes) {
  if (addr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterRegion: null address or zero length");
  }
  auto* base = static_cast<std::byte*>(addr);
  absl::MutexLock lock(&regions_mu_);
  for (const RegisteredRegion& r : registered_) {
    if (base < r.base + r.bytes && r.base < base + bytes) {
      return absl::InvalidArgumentError("RegisterRegion: overlaps a registered region");
    }
  }
  STRATA_ASSIGN_OR_RETURN(uint64_t region, agent_->RegisterMemory(addr, bytes));
  registered_.push_back({.region = region, .base = base, .bytes = bytes});
  return region;
}

absl::Status RemoteTierImpl::UnregisterRegion(uint64_t handle) {
  absl::MutexLock lock(&regions_mu_);
  auto it = std::find_if(registered_.begin(), registered_.end(),
                         [&](const RegisteredRegion& r) { return r.region == handle; });
  if (it == registered_.end()) {
    return absl::NotFoundError(absl::StrCat("no registered region ", handle));
  }
  registered_.erase(it);
  return agent_->DeregisterMemory(handle);
}

std::optional<RegisteredRegion> RemoteTierImpl::FindRegisteredBlocks(
    std::span<const std::byte* const> blocks) const {
  std::optional<RegisteredRegion> region;
  for (const std::byte* b : blocks) {
    std::optional<RegisteredRegion> r = FindRegistered(b, bb());
    if (!r || (region && region->region != r->region)) return std::nullopt;
    region = r;
  }
  return region;
}

std::optional<RegisteredRegion> RemoteTierImpl::FindRegistered(const std::byte* p, size_t n) const {
  absl::ReaderMutexLock lock(&regions_mu_);
  for (const RegisteredRegion& r : registered_) {
    if (p >= r.base && n <= r.bytes && static_cast<size_t>(p - r.base) <= r.bytes - n) return r;
  }
  return std::nullopt;
}

}  // namespace remote

int RendezvousPick(BlockHash hash, std::span<const std::string> daemons) {
  std::vector<uint64_t> seeds;
  seeds.reserve(daemons.size());
  for (const std::string& d : daemons) seeds.push_back(remote::DaemonSeed(d));
  return remote::PickBySeeds(hash, seeds);
}

absl::StatusOr<std::unique_ptr<RemoteTier>> RemoteTier::Create(const RemoteTierOptions& options) {
  if (options.block_bytes == 0) return absl::InvalidArgumentError("block_bytes must be > 0");
  if (options.lanes < 1) return absl::InvalidArgumentError("lanes must be >= 1");
  if (options.agent_name.empty()) return absl::InvalidArgumentError("agent_name is empty");
  if (options.settle_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("settle_delay must not be negative");
  }
  for (size_t i = 0; i < options.daemons.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (options.daemons[i] == options.daemons[j]) {
        return absl::InvalidArgumentError(
            absl::StrCat("kvstore daemon ", options.daemons[i], " is listed twice"));
      }
    }
  }
  auto tier = std::make_unique<remote::RemoteTierImpl>(options);
  STRATA_RETURN_IF_ERROR(tier->Init());
  return tier;
}

}  // namespace strata::kvstore
