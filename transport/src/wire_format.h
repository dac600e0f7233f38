#pragma once
// Byte formats of the opaque strings the Agent hands to the control plane and of notification
// payloads. Little-endian fixed-width integers with a magic and version, so a blob from another
// build or a truncated one is rejected with kInvalidArgument instead of being misread.
#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace strata::transport::wire
