#pragma once
// Byte formats of the opaque strings the Agent hands to the control plane and of notification
// payloads. Little-endian fixed-width integers with a magic and version, so a blob from another
// build or a truncated one is rejected with kInvalidArgument instead of being misread.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::transport::wire {

// Agent::Metadata(): who the agent is and its UCX worker address.
struct AgentMetadata {
  std::string name;
  std::string worker_address;
};
std::string EncodeMetadata(const AgentMetadata& metadata);
absl::StatusOr<AgentMetadata> DecodeMetadata(std::string_view bytes);

// Agent::ExportRegion(): the exported buffer's address, length and memory kind; for host memory
// its packed remote key, for device memory the exporter's host identity and the DeviceMemory
// handle a process on that host opens.
struct RegionDescriptor {
  uint64_t address = 0;
  uint64_t length = 0;
  uint32_t kind = 0;  // MemoryKind
  std::string packed_rkey;
  std::string host_id;
  std::string device_handle;
};
std::string EncodeRegion(const RegionDescriptor& region);
absl::StatusOr<RegionDescriptor> DecodeRegion(std::string_view bytes);

// Active-message payload of a notification: the sender's name and the user's message.
struct Notification {
  std::string sender;
  std::string message;
};
std::string EncodeNotification(std::string_view sender, std::string_view message);
absl::StatusOr<Notification> DecodeNotification(std::string_view bytes);

// The staged path (a write into device memory the writer cannot map). Each piece is one active
// message: a fixed header naming the writer's transfer and the piece, and data that holds this
// descriptor first and the piece's bytes from payload_offset on.
struct StagedRun {
  uint64_t payload_offset = 0;  // in the message data
  uint64_t region_offset = 0;   // in the destination region
  uint64_t length = 0;
};
struct StagedPiece {
  std::string sender;
  std::string sender_metadata;  // the writer's Agent::Metadata(): where acks go
  uint64_t transfer = 0;  // the writer's transfer id
  uint32_t index = 0;     // this piece, < count
  uint32_t count = 0;     // pieces in the transfer
  uint64_t region = 0;    // the destination region's exported address
  uint64_t payload_offset = 0;
  uint64_t payload_bytes = 0;
  std::vector<StagedRun> runs;
  std::string notification;  // delivered once every piece of the transfer is in place
};
std::string EncodeStagedPiece(const StagedPiece& piece);
// Decodes the descriptor at the front of `data` (a whole message's data) and checks that the
// payload and every run lie inside it.
absl::StatusOr<StagedPiece> DecodeStagedPiece(std::string_view data);

// The active-message header of a piece: who sent it and which piece it is.
std::string EncodeStagedHeader(std::string_view sender, uint64_t transfer, uint32_t index);
bool DecodeStagedHeader(std::string_view bytes, std::string* sender, uint64_t* transfer,
                        uint32_t* index);

// The receiver's answer to each piece, sent once the piece is in its device memory (or could
// not be applied: ok false and why).
struct StagedAck {
  std::string receiver;
  uint64_t transfer = 0;
  uint32_t index = 0;
  bool ok = false;
  std::string error;
};
std::string EncodeStagedAck(const StagedAck& ack);
absl::StatusOr<StagedAck> DecodeStagedAck(std::string_view bytes);

}  // namespace strata::transport::wire
