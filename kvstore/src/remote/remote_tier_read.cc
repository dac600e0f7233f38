// RemoteTier reads: Get/GetRun (Acquire, PostRead, owed release, verify), presence, erase, stats.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "strata/kvstore/kvstore_server.h"
#include "remote_tier_impl.h"

namespace strata::kvstore::remote {

absl::Status RemoteTierImpl::Get(BlockHash hash, std::span<std::byte> dst) {
  if (dst.size() != bb()) {
    return absl::InvalidArgumentError(absl::StrCat("Get needs ", bb(), " bytes, not ", dst.size()));
  }
  const ReadResult r = GetContiguous(std::span<const BlockHash>(&hash, 1), dst);
  return r.read == 1 ? absl::OkStatus() : r.why;
}

absl::StatusOr<int> RemoteTierImpl::GetRun(std::span<const BlockHash> hashes,
                                           std::span<std::byte> dst) {
  if (dst.size() != hashes.size() * bb()) {
    return absl::InvalidArgumentError(absl::StrCat("a run of ", hashes.size(), " blocks needs ",
                                                   hashes.size() * bb(), " bytes, not ",
                                                   dst.size()));
  }
  const ReadResult r = GetContiguous(hashes, dst);
  if (r.read == 0 && !r.why.ok() && !absl::IsNotFound(r.why) && !absl::IsDataLoss(r.why)) {
    return r.why;
  }
  return r.read;
}

absl::StatusOr<int> RemoteTierImpl::GetInto(std::span<const BlockHash> hashes,
                                            std::span<std::byte* const> dsts,
                                            std::span<uint64_t> checksums) {
  if (dsts.size() != hashes.size() || (!checksums.empty() && checksums.size() != hashes.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GetInto: ", hashes.size(), " hashes, ", dsts.size(), " destinations and ",
        checksums.size(), " checksum slots"));
  }
  const std::span<const std::byte* const> blocks(dsts.data(), dsts.size());
  const ReadResult r = GetRunImpl(hashes, dsts, FindRegisteredBlocks(blocks), checksums);
  if (r.read == 0 && !r.why.ok() && !absl::IsNotFound(r.why) && !absl::IsDataLoss(r.why)) {
    return r.why;
  }
  return r.read;
}

ReadResult RemoteTierImpl::GetContiguous(std::span<const BlockHash> hashes,
                                         std::span<std::byte> dst) {
  std::vector<std::byte*> dsts(hashes.size());
  for (size_t i = 0; i < dsts.size(); ++i) dsts[i] = dst.data() + i * bb();
  return GetRunImpl(hashes, dsts, FindRegistered(dst.data(), dst.size()), {});
}

// Each daemon's share of the run is read in lane-sized pieces; the result is the shortest
// verified prefix over all of them, so later daemons only read blocks before the first miss.
ReadResult RemoteTierImpl::GetRunImpl(std::span<const BlockHash> hashes,
                                      std::span<std::byte* const> dsts,
                                      const std::optional<RegisteredRegion>& direct,
                                      std::span<uint64_t> checksums) {
  const int n = static_cast<int>(hashes.size());
  const std::shared_ptr<const Membership> members = Members();
  if (members->daemons.empty()) {
    if (n > 0) ++counters_.misses;
    return {0, n > 0 ? NoDaemon() : absl::OkStatus()};
  }
  std::vector<std::vector<GetItem>> groups(members->daemons.size());
  for (int i = 0; i < n; ++i) groups[members->For(hashes[i])].push_back({hashes[i], dsts[i], i});
  const size_t blocks = PieceBlocks(direct.has_value());
  ReadResult out{.read = n};
  for (size_t d = 0; d < groups.size(); ++d) {
    std::span<const GetItem> items = groups[d];
    for (size_t at = 0; at < items.size() && items[at].index < out.read; at += blocks) {
      std::span<const GetItem> piece = items.subspan(at, std::min(blocks, items.size() - at));
      const ReadResult r = GetPiece(*members->daemons[d], piece, direct, checksums);
      if (r.read == static_cast<int>(piece.size())) continue;
      if (piece[r.read].index < out.read) out = {piece[r.read].index, r.why};
      break;
    }
  }
  counters_.hits += out.read;
  counters_.bytes_out += static_cast<int64_t>(out.read) * static_cast<int64_t>(bb());
  if (out.read < n) ++counters_.misses;
  return out;
}

ReadResult RemoteTierImpl::GetPiece(Daemon& d, std::span<const GetItem> items,
                                    const std::optional<RegisteredRegion>& direct,
                                    std::span<uint64_t> checksums) {
  auto session = d.Connect();
  if (!session.ok()) return {0, session.status()};
  v1::KvAcquireRequest req;
  for (const GetItem& it : items) req.add_hashes(it.hash);
  auto leases = d.Call(*session, &v1::KvStore::Stub::Acquire, std::move(req));
  if (leases.ok() && leases->leases_size() != static_cast<int>(items.size())) {
    leases = absl::InternalError("kvstore answered Acquire for the wrong number of blocks");
  }
  if (!leases.ok()) return {0, leases.status()};
  int found = 0;
  while (found < leases->leases_size() && leases->leases(found).found()) ++found;
  if (found == 0) {
    ReleaseLeases(d, *session, *leases);  // blocks after the first miss were still leased
    return {0, absl::NotFoundError("block not in the remote tier")};
  }
  std::optional<LaneGuard> lane;  // only staged pieces hold a lane
  const LocalSide local = Local(direct, &lane);
  std::vector<transport::Run> runs;
  for (int k = 0; k < found; ++k) {
    const uint64_t at =
        local.direct ? local.Offset(items[k].dst) : lane->offset() + size_t(k) * bb();
    runs.push_back(
        {.local_offset = at, .remote_offset = leases->leases(k).offset(), .length = bb()});
  }
  (local.direct ? counters_.direct_blocks : counters_.staged_blocks) += found;
  const absl::Status s = Transfer(false, d, *session, local.region, runs);
  // The bytes are in our memory now (or the transfer failed): the daemon may evict them once
  // the release, owed from here on, rides on our next request there (or the flusher sends it).
  ReleaseLeases(d, *session, *leases);
  if (!s.ok()) return {0, s};
  ReadResult r = VerifyPiece(d, *session, *leases, items, found,
                             local.direct ? nullptr : staging_ + lane->offset(), checksums);
  if (r.read == static_cast<int>(items.size())) r.why = absl::OkStatus();
  return r;
}

void RemoteTierImpl::ReleaseLeases(Daemon& d, const Session& session,
                                   const v1::KvAcquireResponse& leases) {
  Owed owed{.instance = session.instance};
  for (const v1::KvLease& l : leases.leases()) {
    if (l.found()) owed.releases.push_back(l.id());
  }
  Owe(d, session, std::move(owed));
}

// Copies the verified leading blocks out of the lane (or, when `lane` is null, verifies them
// where the transfer put them: in the caller's registered memory); a corrupt one is erased on
// the daemon and ends the piece (DataLoss), never counted as read.
ReadResult RemoteTierImpl::VerifyPiece(Daemon& d, const Session& session,
                                       const v1::KvAcquireResponse& leases,
                                       std::span<const GetItem> items, int count,
                                       const std::byte* lane, std::span<uint64_t> checksums) {
  for (int k = 0; k < count; ++k) {
    const std::byte* at = lane != nullptr ? lane + size_t(k) * bb() : items[k].dst;
    std::span<const std::byte> block(at, bb());
    if (BlockChecksum(block) != leases.leases(k).checksum()) {
      ++counters_.checksum_failures;
      v1::KvEraseRequest erase;
      erase.add_hashes(items[k].hash);
      (void)d.Call(session, &v1::KvStore::Stub::Erase, std::move(erase));
      Publish(TierEvent::Kind::kRemoved, items[k].hash, kRootBlockHash);
      return {k, absl::DataLossError(absl::StrCat("remote block ", items[k].hash,
                                                  " failed its checksum (dropped)"))};
    }
    if (lane != nullptr) std::memcpy(items[k].dst, block.data(), bb());
    if (!checksums.empty()) checksums[items[k].index] = leases.leases(k).checksum();
  }
  return {count, absl::NotFoundError("block not in the remote tier")};
}

bool RemoteTierImpl::Contains(BlockHash hash) const {
  return CountPrefix(std::span<const BlockHash>(&hash, 1)) == 1;
}

int RemoteTierImpl::CountPrefix(std::span<const BlockHash> hashes) const {
  const std::shared_ptr<const Membership> members = Members();
  if (members->daemons.empty()) return 0;
  std::vector<bool> present(hashes.size(), false);
  std::vector<std::vector<int>> groups(members->daemons.size());
  for (size_t i = 0; i < hashes.size(); ++i) groups[members->For(hashes[i])].push_back(int(i));
  for (size_t d = 0; d < groups.size(); ++d) {
    if (groups[d].empty()) continue;
    Daemon& daemon = *members->daemons[d];
    auto session = daemon.Connect();
    if (!session.ok()) continue;  // an unreachable daemon holds nothing we can read
    for (size_t at = 0; at < groups[d].size(); at += kMaxKvBlocksPerRequest) {
      const size_t end = std::min(groups[d].size(), at + kMaxKvBlocksPerRequest);
      v1::KvLookupRequest req;
      for (size_t j = at; j < end; ++j) req.add_hashes(hashes[groups[d][j]]);
      auto resp = daemon.Call(*session, &v1::KvStore::Stub::Lookup, std::move(req));
      if (!resp.ok() || resp->present_size() != static_cast<int>(end - at)) break;
      for (size_t j = at; j < end; ++j) present[groups[d][j]] = resp->present(int(j - at));
    }
  }
  int n = 0;
  while (n < static_cast<int>(present.size()) && present[n]) ++n;
  return n;
}

absl::Status RemoteTierImpl::Erase(BlockHash hash) {
  const std::shared_ptr<const Membership> members = Members();
  if (members->daemons.empty()) return NoDaemon();
  Daemon& d = *members->daemons[members->For(hash)];
  auto session = d.Connect();
  if (!session.ok()) return session.status();
  v1::KvEraseRequest req;
  req.add_hashes(hash);
  auto resp = d.Call(*session, &v1::KvStore::Stub::Erase, std::move(req));
  if (!resp.ok()) return resp.status();
  Publish(TierEvent::Kind::kRemoved, hash, kRootBlockHash);
  return absl::OkStatus();
}

// Usage and evictions live on the daemons. Scrapes read them often and several metrics at a
// time, so one snapshot serves for kStatsRefresh, and only connected daemons are asked (a
// scrape never waits for a reconnect).
DaemonTotals RemoteTierImpl::Totals() const {
  constexpr absl::Duration kStatsRefresh = absl::Milliseconds(500);
  absl::MutexLock lock(&totals_mu_);
  const absl::Time now = absl::Now();
  if (now - totals_at_ < kStatsRefresh) return totals_;
  DaemonTotals t;
  for (const auto& d : Members()->daemons) {
    if (!d->connected()) continue;
    auto s = d->Stats();
    if (!s.ok()) continue;
    t.usage.blocks += s->blocks();
    t.usage.bytes += s->bytes();
    t.usage.capacity_bytes += s->capacity_bytes();
    t.evictions += s->evictions();
  }
  totals_ = t;
  totals_at_ = now;
  return t;
}

TierUsage RemoteTierImpl::usage() const { return Totals().usage; }

TierStats RemoteTierImpl::stats() const {
  TierStats s;
  s.hits = counters_.hits.load();
  s.misses = counters_.misses.load();
  s.puts = counters_.puts.load();
  s.bytes_in = counters_.bytes_in.load();
  s.bytes_out = counters_.bytes_out.load();
  s.checksum_failures = counters_.checksum_failures.load();
  s.rejected = counters_.rejected.load();
  s.evictions = Totals().evictions;
  return s;
}

int RemoteTierImpl::connected_daemons() const {
  int n = 0;
  for (const auto& d : Members()->daemons) n += d->connected() ? 1 : 0;
  return n;
}

}  // namespace strata::kvstore::remote
