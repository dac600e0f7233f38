// RemoteTier (remote_tier.h): G4 over kvstore daemons.
#include "strata/kvstore/remote_tier.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"
#include "strata/kvstore/kvstore_server.h"
#include "remote_tier_impl.h"

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
  for (const std::string& address : options_.daemons) {
    seeds_.push_back(DaemonSeed(address));
    daemons_.push_back(std::make_unique<Daemon>(address, agent_.get(), options_));
  }
  for (auto& d : daemons_) (void)d->Connect();  // one that is down now is retried later
  return absl::OkStatus();
}

// --- put ---------------------------------------------------------------------------------------

absl::Status RemoteTierImpl::PutRun(std::span<const BlockMeta> metas,
                                    std::span<const std::byte> data) {
  if (data.size() != metas.size() * bb()) {
    return absl::InvalidArgumentError(absl::StrCat("a run of ", metas.size(), " blocks needs ",
                                                   metas.size() * bb(), " bytes, not ",
                                                   data.size()));
  }
  std::vector<std::vector<PutItem>> groups(daemons_.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    groups[DaemonFor(metas[i].hash)].push_back({metas[i], data.data() + i * bb()});
  }
  absl::Status first;
  for (size_t d = 0; d < groups.size(); ++d) {
    std::span<const PutItem> items = groups[d];
    for (size_t at = 0; at < items.size(); at += lane_blocks_) {
      absl::Status s = PutPiece(*daemons_[d], items.subspan(at, std::min(lane_blocks_,
                                                                         items.size() - at)));
      if (first.ok()) first = s;
    }
  }
  return first;
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

// Copies the blocks that got a slot into the lane (at `lane_offset`) and lists their transfer
// runs and commits; present blocks are skipped, refused ones counted in `full`.
StagedPut RemoteTierImpl::Stage(std::span<const PutItem> items,
                                const v1::KvReserveWriteResponse& reserved, size_t lane_offset) {
  StagedPut st;
  for (size_t i = 0; i < items.size(); ++i) {
    const v1::KvReservation& r = reserved.reservations(static_cast<int>(i));
    const auto code = static_cast<absl::StatusCode>(r.code());
    if (code == absl::StatusCode::kAlreadyExists) continue;
    if (code != absl::StatusCode::kOk) {
      ++st.full;
      continue;
    }
    const size_t at = lane_offset + st.runs.size() * bb();
    // One pass: the checksum is computed from the registers the block is copied through.
    const uint64_t checksum = CopyWithBlockChecksum({staging_ + at, bb()}, {items[i].src, bb()});
    st.runs.push_back({.local_offset = at, .remote_offset = r.offset(), .length = bb()});
    v1::KvCommit* c = st.commit.add_commits();
    c->set_reservation_id(r.id());
    c->set_checksum(checksum);
    st.written.push_back(items[i]);
  }
  return st;
}

absl::Status RemoteTierImpl::PutPiece(Daemon& d, std::span<const PutItem> items) {
  const int64_t n = static_cast<int64_t>(items.size());
  auto session = d.Connect();
  auto reserved = session.ok() ? Reserve(d, *session, items) : session.status();
  if (!reserved.ok()) {
    counters_.rejected += n;
    return reserved.status();
  }
  LaneGuard lane(*lanes_);
  StagedPut st = Stage(items, *reserved, lane.offset());
  counters_.rejected += st.full;
  const int64_t staged = static_cast<int64_t>(st.written.size());
  absl::Status s = st.runs.empty() ? absl::OkStatus() : Transfer(true, d, *session, st.runs);
  if (!s.ok()) {
    // Nothing (or not everything) landed: give the slots back rather than commit garbage.
    for (const v1::KvCommit& c : st.commit.commits()) st.commit.add_abort_ids(c.reservation_id());
    st.commit.clear_commits();
    (void)d.Call(*session, &v1::KvStore::Stub::CommitWrite, std::move(st.commit));
    counters_.rejected += staged;
    return s;
  }
  if (staged > 0) {
    STRATA_RETURN_IF_ERROR(CommitPiece(d, *session, std::move(st.commit), st.written));
  }
  if (st.full > 0) {
    return absl::ResourceExhaustedError(absl::StrCat("kvstore ", d.address(), " has no room for ",
                                                     st.full, " block(s): every block is leased"));
  }
  return absl::OkStatus();
}

absl::Status RemoteTierImpl::CommitPiece(Daemon& d, const Session& session,
                                         v1::KvCommitWriteRequest commit,
                                         std::span<const PutItem> written) {
  auto resp = d.Call(session, &v1::KvStore::Stub::CommitWrite, std::move(commit));
  if (resp.ok() && resp->codes_size() != static_cast<int>(written.size())) {
    resp = absl::InternalError("kvstore answered CommitWrite for the wrong number of blocks");
  }
  if (!resp.ok()) {
    counters_.rejected += static_cast<int64_t>(written.size());
    return resp.status();
  }
  absl::Status first;
  for (size_t i = 0; i < written.size(); ++i) {
    const auto code = static_cast<absl::StatusCode>(resp->codes(static_cast<int>(i)));
    if (code != absl::StatusCode::kOk) {
      ++counters_.rejected;
      if (first.ok()) {
        first = absl::Status(code, absl::StrCat("kvstore ", d.address(), " refused block ",
                                                written[i].meta.hash, " at commit"));
      }
      continue;
    }
    ++counters_.puts;
    counters_.bytes_in += static_cast<int64_t>(bb());
    Publish(TierEvent::Kind::kStored, written[i].meta.hash, written[i].meta.parent);
  }
  return first;
}

absl::Status RemoteTierImpl::Transfer(bool write, Daemon& d, const Session& session,
                                      const std::vector<transport::Run>& runs) {
  auto t = write ? agent_->PostWrite(d.peer(), staging_region_, session.remote_region, runs)
                 : agent_->PostRead(d.peer(), staging_region_, session.remote_region, runs);
  absl::Status s = t.status();
  if (t.ok()) {
    s = agent_->Wait(*t, options_.transfer_timeout);
    agent_->Release(*t);
  }
  // A failed or stuck transfer means the daemon (or our endpoint to it) is gone: reconnect.
  if (!s.ok()) d.Drop(session, s);
  return s;
}

}  // namespace remote

int RendezvousPick(BlockHash hash, std::span<const std::string> daemons) {
  std::vector<uint64_t> seeds;
  seeds.reserve(daemons.size());
  for (const std::string& d : daemons) seeds.push_back(remote::DaemonSeed(d));
  return remote::PickBySeeds(hash, seeds);
}

absl::StatusOr<std::unique_ptr<RemoteTier>> RemoteTier::Create(const RemoteTierOptions& options) {
  if (options.daemons.empty()) return absl::InvalidArgumentError("no kvstore daemon given");
  if (options.block_bytes == 0) return absl::InvalidArgumentError("block_bytes must be > 0");
  if (options.lanes < 1) return absl::InvalidArgumentError("lanes must be >= 1");
  if (options.agent_name.empty()) return absl::InvalidArgumentError("agent_name is empty");
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
