#include "wire_format.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strata::transport::wire {
namespace {

constexpr uint32_t kMetadataMagic = 0x4d525453;  // "STRM"
constexpr uint32_t kRegionMagic = 0x52525453;    // "STRR"
constexpr uint32_t kNotificationMagic = 0x4e525453;  // "STRN"
constexpr uint32_t kStagedPieceMagic = 0x50525453;    // "STRP"
constexpr uint32_t kStagedAckMagic = 0x41525453;      // "STRA"
constexpr uint32_t kVersion = 1;
// Region blobs carry a memory kind since version 2.
constexpr uint32_t kRegionVersion = 2;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutBytes(std::string& out, std::string_view bytes) {
  PutU32(out, static_cast<uint32_t>(bytes.size()));
  out.append(bytes);
}

// Sequential reader over untrusted bytes; every read is bounds-checked.
class Reader {
 public:
  Reader(std::string_view bytes, const char* what) : bytes_(bytes), what_(what) {}

  bool U32(uint32_t* v) { return Fixed(v, 4); }
  bool U64(uint64_t* v) { return Fixed(v, 8); }
  bool Bytes(std::string* out) {
    uint32_t n = 0;
    if (!U32(&n) || n > bytes_.size() - pos_) return false;
    out->assign(bytes_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  bool AtEnd() const { return pos_ == bytes_.size(); }
  size_t pos() const { return pos_; }
  absl::Status Malformed() const {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed transport ", what_, " (", bytes_.size(), " bytes)"));
  }
  // Checks magic and version at the front.
  absl::Status Header(uint32_t magic, uint32_t version = kVersion) {
    uint32_t m = 0, v = 0;
    if (!U32(&m) || m != magic) return Malformed();
    if (!U32(&v) || v != version) {
      return absl::InvalidArgumentError(
          absl::StrCat("transport ", what_, " version ", v, ", expected ", version));
    }
    return absl::OkStatus();
  }

 private:
  template <typename T>
  bool Fixed(T* v, size_t n) {
    if (bytes_.size() - pos_ < n) return false;
    T out = 0;
    for (size_t i = 0; i < n; ++i) {
      out |= static_cast<T>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
    }
    pos_ += n;
    *v = out;
    return true;
  }

  std::string_view bytes_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace

std::string EncodeMetadata(const AgentMetadata& metadata) {
  std::string out;
  PutU32(out, kMetadataMagic);
  PutU32(out, kVersion);
  PutBytes(out, metadata.name);
  PutBytes(out, metadata.worker_address);
  return out;
}

absl::StatusOr<AgentMetadata> DecodeMetadata(std::string_view bytes) {
  Reader r(bytes, "metadata");
  if (absl::Status s = r.Header(kMetadataMagic); !s.ok()) return s;
  AgentMetadata m;
  if (!r.Bytes(&m.name) || !r.Bytes(&m.worker_address) || !r.AtEnd() ||
      m.worker_address.empty()) {
    return r.Malformed();
  }
  return m;
}

std::string EncodeRegion(const RegionDescriptor& region) {
  std::string out;
  PutU32(out, kRegionMagic);
  PutU32(out, kRegionVersion);
  PutU64(out, region.address);
  PutU64(out, region.length);
  PutU32(out, region.kind);
  PutBytes(out, region.packed_rkey);
  PutBytes(out, region.host_id);
  PutBytes(out, region.device_handle);
  return out;
}

absl::StatusOr<RegionDescriptor> DecodeRegion(std::string_view bytes) {
  Reader r(bytes, "region blob");
  if (absl::Status s = r.Header(kRegionMagic, kRegionVersion); !s.ok()) return s;
  RegionDescriptor d;
  if (!r.U64(&d.address) || !r.U64(&d.length) || !r.U32(&d.kind) || !r.Bytes(&d.packed_rkey) ||
      !r.Bytes(&d.host_id) || !r.Bytes(&d.device_handle) || !r.AtEnd() || d.kind > 1) {
    return r.Malformed();
  }
  // Host memory is reached through its remote key, device memory through its handle.
  if (d.kind == 0 ? d.packed_rkey.empty() : d.device_handle.empty() || d.host_id.empty()) {
    return r.Malformed();
  }
  return d;
}

std::string EncodeNotification(std::string_view sender, std::string_view message) {
  std::string out;
  out.reserve(16 + sender.size() + message.size());
  PutU32(out, kNotificationMagic);
  PutU32(out, kVersion);
  PutBytes(out, sender);
  PutBytes(out, message);
  return out;
}

absl::StatusOr<Notification> DecodeNotification(std::string_view bytes) {
  Reader r(bytes, "notification");
  if (absl::Status s = r.Header(kNotificationMagic); !s.ok()) return s;
  Notification n;
  if (!r.Bytes(&n.sender) || !r.Bytes(&n.message) || !r.AtEnd()) return r.Malformed();
  return n;
}

std::string EncodeStagedPiece(const StagedPiece& piece) {
  std::string out;
  out.reserve(64 + piece.sender.size() + piece.notification.size() + 24 * piece.runs.size());
  PutU32(out, kStagedPieceMagic);
  PutU32(out, kVersion);
  PutBytes(out, piece.sender);
  PutBytes(out, piece.sender_metadata);
  PutU64(out, piece.transfer);
  PutU32(out, piece.index);
  PutU32(out, piece.count);
  PutU64(out, piece.region);
  PutU64(out, piece.payload_offset);
  PutU64(out, piece.payload_bytes);
  PutU32(out, static_cast<uint32_t>(piece.runs.size()));
  for (const StagedRun& r : piece.runs) {
    PutU64(out, r.payload_offset);
    PutU64(out, r.region_offset);
    PutU64(out, r.length);
  }
  PutBytes(out, piece.notification);
  return out;
}

absl::StatusOr<StagedPiece> DecodeStagedPiece(std::string_view data) {
  Reader r(data, "staged piece");
  if (absl::Status s = r.Header(kStagedPieceMagic); !s.ok()) return s;
  StagedPiece p;
  uint32_t runs = 0;
  if (!r.Bytes(&p.sender) || !r.Bytes(&p.sender_metadata) || !r.U64(&p.transfer) || !r.U32(&p.index) || !r.U32(&p.count) ||
      !r.U64(&p.region) || !r.U64(&p.payload_offset) || !r.U64(&p.payload_bytes) ||
      !r.U32(&runs) || runs > (data.size() - r.pos()) / 24) {
    return r.Malformed();
  }
  p.runs.resize(runs);
  for (StagedRun& run : p.runs) {
    if (!r.U64(&run.payload_offset) || !r.U64(&run.region_offset) || !r.U64(&run.length)) {
      return r.Malformed();
    }
  }
  if (!r.Bytes(&p.notification)) return r.Malformed();
  const size_t end = r.pos();
  if (p.count == 0 || p.index >= p.count || p.payload_offset < end ||
      p.payload_offset > data.size() || p.payload_bytes > data.size() - p.payload_offset) {
    return r.Malformed();
  }
  for (const StagedRun& run : p.runs) {
    if (run.length == 0 || run.payload_offset < p.payload_offset ||
        run.payload_offset - p.payload_offset > p.payload_bytes ||
        run.length > p.payload_bytes - (run.payload_offset - p.payload_offset)) {
      return r.Malformed();
    }
  }
  return p;
}

std::string EncodeStagedHeader(std::string_view sender, uint64_t transfer, uint32_t index) {
  std::string out;
  PutBytes(out, sender);
  PutU64(out, transfer);
  PutU32(out, index);
  return out;
}

bool DecodeStagedHeader(std::string_view bytes, std::string* sender, uint64_t* transfer,
                        uint32_t* index) {
  Reader r(bytes, "staged header");
  return r.Bytes(sender) && r.U64(transfer) && r.U32(index) && r.AtEnd();
}

std::string EncodeStagedAck(const StagedAck& ack) {
  std::string out;
  PutU32(out, kStagedAckMagic);
  PutU32(out, kVersion);
  PutBytes(out, ack.receiver);
  PutU64(out, ack.transfer);
  PutU32(out, ack.index);
  PutU32(out, ack.ok ? 1 : 0);
  PutBytes(out, ack.error);
  return out;
}

absl::StatusOr<StagedAck> DecodeStagedAck(std::string_view bytes) {
  Reader r(bytes, "staged ack");
  if (absl::Status s = r.Header(kStagedAckMagic); !s.ok()) return s;
  StagedAck a;
  uint32_t ok = 0;
  if (!r.Bytes(&a.receiver) || !r.U64(&a.transfer) || !r.U32(&a.index) || !r.U32(&ok) ||
      ok > 1 || !r.Bytes(&a.error) || !r.AtEnd()) {
    return r.Malformed();
  }
  a.ok = ok == 1;
  return a;
}

}  // namespace strata::transport::wire
