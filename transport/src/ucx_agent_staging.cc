// UcxAgent: the staged path, for writes into a peer's device memory that this process cannot
// map (another host, a device without peer access, or staging chosen by configuration). See
// the overview in ucx_agent.h and docs/transport.md.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "strata/common/logging.h"
#include "strata/common/status_macros.h"
#include "ucx_agent.h"
#include "wire_format.h"

namespace strata::transport {
namespace {

// Runs one piece may carry (each is 24 bytes of descriptor) and the room a slot keeps for the
// descriptor in front of the payload: runs, sender name and notification.
constexpr size_t kMaxRunsPerPiece = 2048;
constexpr size_t kMaxNotificationBytes = 64 << 10;
constexpr size_t kDescriptorRoom = 128 << 10;
// The payload starts at this alignment in a slot (copy engines move aligned data fastest).
constexpr uint64_t kPayloadAlign = 256;
// A receiver forgets a transfer whose pieces stopped coming (its writer died) after this long.
constexpr absl::Duration kIncomingTransferTtl = absl::Minutes(10);
// Receive pools grow by one chunk of staging_slots slots when every slot is taken: a writer
// holds at most staging_slots unacked pieces, so a chunk per concurrent writer is enough.
constexpr size_t kMaxReceiveChunks = 32;

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

}  // namespace

size_t UcxAgent::SlotBytes() const {
  return RoundUp(std::max<size_t>(piece_bytes_, 4096) + kDescriptorRoom, 4096);
}

absl::Status UcxAgent::EnsurePoolLocked(StagingPool& pool) {
  if (pool.base != nullptr) return absl::OkStatus();
  if (device_ == nullptr) {
    return absl::FailedPreconditionError("the staged path needs device memory services");
  }
  const int slots = staging_slots_;
  const size_t slot_bytes = SlotBytes();
  const size_t bytes = slot_bytes * static_cast<size_t>(slots);
  char* base = static_cast<char*>(std::aligned_alloc(4096, bytes));
  if (base == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("staging pool of ", bytes, " bytes"));
  }
  std::memset(base, 0, bytes);  // touch every page before it is pinned
  absl::Status pinned = device_->RegisterHost(base, bytes);
  if (!pinned.ok() && !absl::IsUnimplemented(pinned)) {
    std::free(base);
    return absl::InternalError(absl::StrCat("page-locking the staging pool: ", pinned.message()));
  }
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = base;
  mp.length = bytes;
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(context_, &mp, &memh);
  if (s != UCS_OK) {
    if (pinned.ok()) device_->UnregisterHost(base);
    std::free(base);
    return UcxError(s, "ucp_mem_map(staging pool)");
  }
  pool.base = base;
  pool.bytes = bytes;
  pool.slot_bytes = slot_bytes;
  pool.memh = memh;
  pool.host_registered = pinned.ok();
  pool.free_slots.clear();
  for (int i = slots - 1; i >= 0; --i) pool.free_slots.push_back(i);
  return absl::OkStatus();
}

void UcxAgent::FreePoolLocked(StagingPool& pool) {
  if (pool.base == nullptr) return;
  ucp_mem_unmap(context_, pool.memh);
  if (pool.host_registered) device_->UnregisterHost(pool.base);
  std::free(pool.base);
  pool = StagingPool{};
}

// Writer side -----------------------------------------------------------------------------

absl::Status UcxAgent::PostStagedLocked(Transfer* t, const LocalRegion& local,
                                        const RemoteRegion& remote, std::span<const Run> runs,
                                        const std::string& notification) {
  if (notification.size() > kMaxNotificationBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a staged write's notification is limited to ",
                                                   kMaxNotificationBytes, " bytes"));
  }
  STRATA_RETURN_IF_ERROR(EnsurePoolLocked(send_pool_));
  auto w = std::make_unique<StagedWrite>();
  w->local_base = local.addr;
  // Cut the runs into pieces of at most piece_bytes_ payload and kMaxRunsPerPiece runs; a run
  // longer than a piece spans several.
  std::vector<std::vector<CopyRun>> cuts;  // src = local offset, dst = region offset
  uint64_t filled = piece_bytes_;  // forces a first piece
  for (const Run& r : runs) {
    uint64_t done = 0;
    while (done < r.length) {
      if (filled == piece_bytes_ || cuts.back().size() == kMaxRunsPerPiece) {
        cuts.emplace_back();
        filled = 0;
      }
      const uint64_t n = std::min<uint64_t>(r.length - done, piece_bytes_ - filled);
      cuts.back().push_back({r.local_offset + done, r.remote_offset + done, n});
      filled += n;
      done += n;
    }
  }
  const uint32_t count = static_cast<uint32_t>(cuts.size());
  w->pieces.resize(count);
  w->slots.assign(count, -1);
  for (uint32_t i = 0; i < count; ++i) {
    wire::StagedPiece d;
    d.sender = name_;
    d.sender_metadata = metadata_;
    d.transfer = t->id;
    d.index = i;
    d.count = count;
    d.region = remote.addr;
    for (const CopyRun& c : cuts[i]) d.payload_bytes += c.length;
    if (i + 1 == count) d.notification = notification;
    // The descriptor's size does not depend on the offsets' values (fixed-width fields), so
    // encoding once with placeholders gives where the payload starts.
    d.runs.resize(cuts[i].size());
    const uint64_t payload_offset = RoundUp(wire::EncodeStagedPiece(d).size(), kPayloadAlign);
    d.payload_offset = payload_offset;
    StagedPiece& p = w->pieces[i];
    p.payload_offset = payload_offset;
    p.payload_bytes = d.payload_bytes;
    uint64_t at = payload_offset;
    for (size_t k = 0; k < cuts[i].size(); ++k) {
      const CopyRun& c = cuts[i][k];
      d.runs[k] = {at, c.dst_offset, c.length};
      p.out.push_back({c.src_offset, at, c.length});
      at += c.length;
    }
    p.descriptor = wire::EncodeStagedPiece(d);
  }
  t->phase = Phase::kStaging;
  t->staged = std::move(w);
  staged_writes_.push_back(t);
  PumpStagedLocked();
  return absl::OkStatus();
}

void UcxAgent::PumpStagedLocked() {
  for (Transfer* t : staged_writes_) {
    StagedWrite& w = *t->staged;
    while (w.error.ok() && w.next < w.pieces.size() && !send_pool_.free_slots.empty()) {
      const int slot = send_pool_.free_slots.back();
      send_pool_.free_slots.pop_back();
      const StagedPiece& p = w.pieces[w.next];
      char* dst = send_pool_.slot(slot);
      std::memcpy(dst, p.descriptor.data(), p.descriptor.size());
      CopyJob job;
      job.kind = CopyKind::kStageOut;
      job.transfer = t;
      job.dst = dst;
      job.src = w.local_base;
      job.runs = p.out;
      job.piece = w.next;
      w.slots[w.next] = slot;
      w.next++;
      w.in_flight++;
      if (!EnqueueCopy(std::move(job))) {
        w.in_flight--;
        FreeSendSlotLocked(w, w.next - 1);
        w.error = absl::UnavailableError("transport agent is shutting down");
      }
    }
    // Pieces go out in post order: a later write waits until this one's are all under way.
    if (send_pool_.free_slots.empty() || (w.error.ok() && w.next < w.pieces.size())) break;
  }
}

void UcxAgent::StageOutDoneLocked(CopyJob& job, absl::Status status) {
  Transfer* t = job.transfer;
  StagedWrite& w = *t->staged;
  w.in_flight--;
  if (!status.ok()) {
    status = absl::InternalError(absl::StrCat("transfer ", t->id, " staging a piece for peer '",
                                              t->peer->name, "': ", status.message()));
  } else if (w.error.ok() && (t->peer->failed || t->peer->ep == nullptr)) {
    status = t->peer->failed ? PeerFailedError(t->peer->name, t->peer->error)
                             : absl::UnavailableError(absl::StrCat(
                                   "peer '", t->peer->name, "' was removed during the transfer"));
  }
  if (!status.ok() || !w.error.ok()) {
    FreeSendSlotLocked(w, job.piece);
    if (!status.ok()) FailStagedLocked(t, std::move(status));
    MaybeFinishStagedLocked(t);
    PumpStagedLocked();
    return;
  }
  const uint32_t piece_index = static_cast<uint32_t>(job.piece);
  const StagedPiece& p = w.pieces[piece_index];
  auto* send = new StagedSend{t, piece_index, wire::EncodeStagedHeader(name_, t->id, piece_index)};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMH;
  param.cb.send = &UcxAgent::OnStagedSent;
  param.user_data = send;
  param.flags = UCP_AM_SEND_FLAG_RNDV | UCP_AM_SEND_FLAG_REPLY;
  param.memh = send_pool_.memh;
  w.in_flight++;
  void* req = ucp_am_send_nbx(t->peer->ep, kStagedPieceAmId, send->header.data(),
                              send->header.size(), job.dst, p.payload_offset + p.payload_bytes,
                              &param);
  if (req == nullptr) {
    StagedSentLocked(send, UCS_OK);
  } else if (UCS_PTR_IS_ERR(req)) {
    StagedSentLocked(send, UCS_PTR_STATUS(req));
  }
  WakeProgressThread();
}

void UcxAgent::OnStagedSent(void* request, ucs_status_t status, void* user_data) {
  auto* send = static_cast<StagedSend*>(user_data);
  UcxAgent* self = send->transfer->peer->agent;
  self->mu_.AssertHeld();
  self->staged_sent_.emplace_back(send, status);
  ucp_request_free(request);
}

// The peer has fetched the piece (or the send failed). Its slot stays taken until the ack:
// a writer has at most staging_slots pieces the peer has not yet applied.
void UcxAgent::StagedSentLocked(StagedSend* send, ucs_status_t status) {
  std::unique_ptr<StagedSend> owned(send);
  Transfer* t = send->transfer;
  StagedWrite& w = *t->staged;
  w.in_flight--;
  if (status != UCS_OK) {
    FreeSendSlotLocked(w, send->piece);
    FailStagedLocked(t, TransferErrorLocked(*t, status, "staged piece send"));
  } else {
    stats_.staged_pieces_sent++;
  }
  MaybeFinishStagedLocked(t);
  PumpStagedLocked();
}

void UcxAgent::FreeSendSlotLocked(StagedWrite& w, size_t piece) {
  if (piece < w.slots.size() && w.slots[piece] >= 0) {
    send_pool_.free_slots.push_back(w.slots[piece]);
    w.slots[piece] = -1;
  }
}

void UcxAgent::FailStagedLocked(Transfer* t, absl::Status status) {
  if (t->staged->error.ok()) t->staged->error = std::move(status);
}

// Callers pump the queue afterwards: a finished write may have given slots back.
void UcxAgent::MaybeFinishStagedLocked(Transfer* t) {
  StagedWrite& w = *t->staged;
  if (w.in_flight > 0) return;
  const bool all_acked = w.acked == w.pieces.size();
  if (w.error.ok() && !all_acked) return;
  auto it = std::find(staged_writes_.begin(), staged_writes_.end(), t);
  if (it == staged_writes_.end()) return;  // already finished
  staged_writes_.erase(it);
  // Nothing is in flight: pieces sent but never acked (the write failed) give their slots back.
  for (size_t i = 0; i < w.slots.size(); ++i) FreeSendSlotLocked(w, i);
  if (w.error.ok()) {
    stats_.staged_bytes_sent += t->bytes;
    FinishLocked(t, absl::OkStatus());
  } else {
    FinishLocked(t, w.error);
  }
}

ucs_status_t UcxAgent::OnStagedAck(void* arg, const void* header, size_t header_length,
                                   void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxAgent*>(arg);
  self->mu_.AssertHeld();
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) return UCS_OK;  // acks are eager
  auto ack = wire::DecodeStagedAck(std::string_view(static_cast<const char*>(data), length));
  if (!ack.ok()) {
    STRATA_LOG(Warning) << "transport: dropping staged ack: " << ack.status();
    return UCS_OK;
  }
  auto it = self->transfers_.find(ack->transfer);
  if (it == self->transfers_.end()) return UCS_OK;  // failed and released meanwhile
  Transfer* t = it->second.get();
  if (t->staged == nullptr || t->peer->name != ack->receiver ||
      ack->index >= t->staged->pieces.size()) {
    STRATA_LOG(Warning) << "transport: dropping a staged ack from '" << ack->receiver
                        << "' that matches no staged write";
    return UCS_OK;
  }
  self->FreeSendSlotLocked(*t->staged, ack->index);
  if (ack->ok) {
    t->staged->acked++;
  } else {
    self->FailStagedLocked(
        t, absl::InternalError(absl::StrCat("peer '", ack->receiver, "' could not apply piece ",
                                            ack->index, " of transfer ", t->id, ": ",
                                            ack->error)));
  }
  self->MaybeFinishStagedLocked(t);
  self->PumpStagedLocked();
  return UCS_OK;
}

// Receiver side ---------------------------------------------------------------------------

absl::StatusOr<std::pair<int, char*>> UcxAgent::TakeReceiveSlotLocked() {
  for (size_t c = 0; c < recv_pools_.size(); ++c) {
    StagingPool& pool = recv_pools_[c];
    if (pool.free_slots.empty()) continue;
    const int i = pool.free_slots.back();
    pool.free_slots.pop_back();
    return std::make_pair(static_cast<int>(c) * staging_slots_ + i, pool.slot(i));
  }
  if (recv_pools_.size() >= kMaxReceiveChunks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "all ", recv_pools_.size() * staging_slots_, " staging receive slots are taken"));
  }
  recv_pools_.emplace_back();
  if (absl::Status s = EnsurePoolLocked(recv_pools_.back()); !s.ok()) {
    recv_pools_.pop_back();
    return s;
  }
  return TakeReceiveSlotLocked();
}

void UcxAgent::FreeReceiveSlotLocked(int slot) {
  const int per = staging_slots_;
  recv_pools_[static_cast<size_t>(slot / per)].free_slots.push_back(slot % per);
}

// Every piece is received into a slot at once (never held for later: UCX ties a held message to
// the endpoint it came in on, which goes away with a writer that dies).
ucs_status_t UcxAgent::OnStagedPiece(void* arg, const void* header, size_t header_length,
                                     void* data, size_t length,
                                     const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxAgent*>(arg);
  self->mu_.AssertHeld();
  auto in = std::make_unique<IncomingPiece>();
  in->agent = self;
  if (!wire::DecodeStagedHeader(
          std::string_view(static_cast<const char*>(header), header_length), &in->sender,
          &in->transfer, &in->index)) {
    STRATA_LOG(Warning) << "transport: dropping a malformed staged piece";
    return UCS_OK;
  }
  in->length = length;
  absl::StatusOr<std::pair<int, char*>> slot = absl::FailedPreconditionError(
      "this agent has no device memory services for staged pieces");
  if (length > self->SlotBytes()) {
    slot = absl::InvalidArgumentError(absl::StrCat("a piece of ", length,
                                                   " bytes exceeds the staging slot of ",
                                                   self->SlotBytes()));
  } else if (self->device_ != nullptr) {
    slot = self->TakeReceiveSlotLocked();
  }
  if (!slot.ok()) {
    // Answered while the message's endpoint is valid: the writer fails the write with this.
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
      self->SendAckOnLocked(param->reply_ep, in->transfer, in->index, slot.status());
    }
    STRATA_LOG(Warning) << "transport: refusing a staged piece from '" << in->sender
                        << "': " << slot.status().message();
    return UCS_OK;
  }
  in->slot = slot->first;
  in->at = slot->second;
  if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    std::memcpy(in->at, data, length);  // eager data: copied now, UCX keeps nothing
    self->incoming_received_.emplace_back(in.release(), UCS_OK);
    return UCS_OK;
  }
  IncomingPiece* raw = in.release();
  ucp_request_param_t p{};
  p.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
  p.cb.recv_am = &UcxAgent::OnStagedReceived;
  p.user_data = raw;
  const int per = self->staging_slots_;
  p.memh = self->recv_pools_[static_cast<size_t>(raw->slot / per)].memh;
  void* req = ucp_am_recv_data_nbx(self->worker_, data, raw->at, raw->length, &p);
  if (req == nullptr) {
    self->incoming_received_.emplace_back(raw, UCS_OK);
  } else if (UCS_PTR_IS_ERR(req)) {
    self->incoming_received_.emplace_back(raw, UCS_PTR_STATUS(req));
  } else {
    self->incoming_receiving_++;
  }
  return UCS_OK;
}

void UcxAgent::OnStagedReceived(void* request, ucs_status_t status, size_t length,
                                void* user_data) {
  (void)length;
  auto* in = static_cast<IncomingPiece*>(user_data);
  ucp_request_free(request);
  UcxAgent* self = in->agent;
  self->mu_.AssertHeld();
  self->incoming_receiving_--;
  self->incoming_received_.emplace_back(in, status);
}

void UcxAgent::IncomingReceivedLocked(std::unique_ptr<IncomingPiece> in, ucs_status_t status) {
  auto fail = [&](absl::Status why) {
    FreeReceiveSlotLocked(in->slot);
    SendAckLocked(in->sender, in->transfer, in->index, why);
  };
  // A writer that died mid-send: nothing to apply and no one to answer.
  if (status != UCS_OK) return fail(UcxError(status, "receiving a staged piece"));
  const char* slot = in->at;
  auto piece = wire::DecodeStagedPiece(std::string_view(slot, in->length));
  if (!piece.ok()) return fail(piece.status());
  if (piece->transfer != in->transfer || piece->index != in->index ||
      piece->sender != in->sender) {
    return fail(absl::InvalidArgumentError("staged piece header and descriptor disagree"));
  }
  // Acks go over this agent's own endpoint to the writer, made from its metadata once.
  if (absl::Status s = AddPeerLocked(piece->sender, piece->sender_metadata); !s.ok()) {
    return fail(s);
  }
  const LocalRegion* region = nullptr;
  for (const auto& [id, r] : local_regions_) {
    if (r.kind == MemoryKind::kDevice && reinterpret_cast<uint64_t>(r.addr) == piece->region) {
      region = &r;
      break;
    }
  }
  if (region == nullptr) {
    return fail(absl::NotFoundError(absl::StrCat(
        "no device region at 0x", absl::Hex(piece->region), " is registered here")));
  }
  CopyJob job;
  job.kind = CopyKind::kStageIn;
  job.dst = region->addr;
  job.src = slot;
  job.runs.reserve(piece->runs.size());
  for (const wire::StagedRun& r : piece->runs) {
    if (r.region_offset > region->length || r.length > region->length - r.region_offset) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "a staged run {offset ", r.region_offset, ", ", r.length,
          " bytes} lies outside the device region (", region->length, " bytes)")));
    }
    job.runs.push_back({r.payload_offset, r.region_offset, r.length});
  }
  in->piece = std::move(*piece);
  job.incoming = std::move(in);
  // Refused only while shutting down: the slot and the piece go with the agent, and the writer
  // sees this agent fail.
  (void)EnqueueCopy(std::move(job));
}

void UcxAgent::StageInDoneLocked(CopyJob& job, absl::Status status) {
  IncomingPiece& in = *job.incoming;
  FreeReceiveSlotLocked(in.slot);
  if (status.ok()) {
    stats_.staged_pieces_received++;
    stats_.staged_bytes_received += in.piece.payload_bytes;
    const std::string key = absl::StrCat(in.piece.sender, "\x1f", in.piece.transfer);
    auto [it, fresh] = incoming_transfers_.try_emplace(key);
    IncomingTransfer& x = it->second;
    if (fresh) x.remaining = in.piece.count;
    if (!in.piece.notification.empty()) x.notification = std::move(in.piece.notification);
    x.last = absl::Now();
    if (--x.remaining == 0) {
      if (!x.notification.empty()) {
        notifications_.emplace_back(in.piece.sender, std::move(x.notification));
        stats_.notifications_received++;
      }
      incoming_transfers_.erase(it);
    }
  }
  SendAckLocked(in.sender, in.transfer, in.index, status);
  WakeProgressThread();
}

void UcxAgent::SendAckLocked(const std::string& writer, uint64_t transfer, uint32_t index,
                             const absl::Status& status) {
  auto peer = peers_.find(writer);
  if (peer == peers_.end() || peer->second->failed || peer->second->ep == nullptr) return;
  SendAckOnLocked(peer->second->ep, transfer, index, status);
}

void UcxAgent::SendAckOnLocked(ucp_ep_h ep, uint64_t transfer, uint32_t index,
                               const absl::Status& status) {
  auto* payload = new AckPayload{this, wire::EncodeStagedAck(
      {name_, transfer, index, status.ok(), std::string(status.message())})};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &UcxAgent::OnAckSent;
  param.user_data = payload;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  void* req = ucp_am_send_nbx(ep, kStagedAckAmId, nullptr, 0, payload->data(), payload->size(),
                              &param);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) {
    delete payload;  // sent, or the writer is gone
  } else {
    acks_in_flight_++;
  }
}

void UcxAgent::OnAckSent(void* request, ucs_status_t status, void* user_data) {
  (void)status;  // a writer that is gone no longer waits for the ack
  auto* payload = static_cast<AckPayload*>(user_data);
  payload->agent->acks_in_flight_--;
  delete payload;
  ucp_request_free(request);
}

// Both sides ------------------------------------------------------------------------------

void UcxAgent::ProgressStagedLocked() {
  while (!staged_sent_.empty() || !incoming_received_.empty()) {
    std::vector<std::pair<StagedSend*, ucs_status_t>> sent;
    sent.swap(staged_sent_);
    for (auto& [send, status] : sent) StagedSentLocked(send, status);
    std::vector<std::pair<IncomingPiece*, ucs_status_t>> received;
    received.swap(incoming_received_);
    for (auto& [in, status] : received) {
      IncomingReceivedLocked(std::unique_ptr<IncomingPiece>(in), status);
    }
  }
  // Writes waiting only for acks from a peer that failed.
  for (size_t i = 0; i < staged_writes_.size();) {
    Transfer* t = staged_writes_[i];
    if (t->peer->failed) {
      FailStagedLocked(t, PeerFailedError(t->peer->name, t->peer->error));
      const size_t before = staged_writes_.size();
      MaybeFinishStagedLocked(t);
      if (staged_writes_.size() < before) continue;
    }
    ++i;
  }
  PumpStagedLocked();  // slots the failed writes gave back
  if (!incoming_transfers_.empty()) {
    const absl::Time now = absl::Now();
    if (now - incoming_pruned_ > absl::Seconds(10)) {
      incoming_pruned_ = now;
      absl::erase_if(incoming_transfers_,
                     [&](const auto& kv) { return now - kv.second.last > kIncomingTransferTtl; });
    }
  }
}

void UcxAgent::ShutdownStagingLocked() {
  for (auto& [send, status] : staged_sent_) delete send;
  staged_sent_.clear();
  for (auto& [in, status] : incoming_received_) delete in;
  incoming_received_.clear();
  staged_writes_.clear();
}

std::string UcxAgent::DevicePaths() const {
  if (device_ == nullptr) return "";
  return absl::StrCat(stage_always_ ? "staged (by configuration)" : "ipc on this host, else staged",
                      "; UCX ", ucx_cuda_ ? "reports" : "has no", " CUDA memory support");
}

}  // namespace strata::transport
