#pragma once
// Shared helpers of the control-plane protocol (strata.proto): the version every request
// carries, message-size limits, and conversions between messages and request/absl types.
#include <cstdint>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "strata/proto/strata.grpc.pb.h"
#include "strata/proto/strata.pb.h"
#include "strata/types/sampling.h"

namespace strata::proto {

inline constexpr uint32_t kProtocolVersion = 1;
// Upper bound for any control-plane message, both directions, on every server and channel.
inline constexpr int kMaxMessageBytes = 16 << 20;

// How a decode worker reports that the *prefill* worker it was sent to could not be reached
// (UNAVAILABLE with this message prefix), so the router drops that worker, not the decode one.
inline constexpr char kPrefillUnavailablePrefix[] = "prefill worker unavailable: ";

// FAILED_PRECONDITION naming both versions when `version` is not kProtocolVersion.
grpc::Status CheckVersion(uint32_t version);

grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

// "bf16 KV, 16 tokens/block, 32 layers x 8 KV heads x 128, device memory".
std::string DescribeKvLayout(const v1::KvLayout& layout);
// OK when a prefill worker with pool `ours` may write into a decode worker's pool `theirs`;
// else FailedPrecondition naming both layouts (`who` names the other worker).
absl::Status CheckSameKvLayout(const v1::KvLayout& ours, const v1::KvLayout& theirs,
                               const std::string& who);

void ToProto(const SamplingParams& params, v1::SamplingParams* out);
SamplingParams FromProto(const v1::SamplingParams& params);
void ToProto(const SampleResult& sample, v1::Sample* out);
SampleResult FromProto(const v1::Sample& sample);

// A channel to `address` with strata's message-size limits and keepalive settings, secured with
// the process's cluster credentials (cluster_tls.h), or with `credentials`.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials);
// Applies strata's limits to a server under construction.
void ConfigureServer(grpc::ServerBuilder& builder);
// What a cluster gRPC server listens with: the process's cluster credentials (cluster_tls.h).
std::shared_ptr<grpc::ServerCredentials> ClusterServerCredentials();

}  // namespace strata::proto
