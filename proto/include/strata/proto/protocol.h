#pragma once
// Shared helpers of the control-plane protocol (strata.proto): the version every request
// carries, message-size limits, and conversions between messages and request/absl types.
#include <cstdint>
#include <functional>
#include <memory>

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
// Runs `destroy` on a thread of strata's own (one per process, started on first use), not on
// the calling thread.
void DestroyOffCallbackThreads(std::function<void()> destroy);

// Shares a stub whose calls use gRPC's callback API (reactors), so that the stub and its
// channel are destroyed off gRPC's callback threads, whichever thread drops the last reference.
// A channel that has made callback calls holds the process-wide callback completion queue; when
// the last such channel is destroyed on one of the threads polling that queue (a reactor's
// OnDone that lets go of its stub), gRPC shuts the queue down, joins its polling threads (that
// one included, which cannot be joined) and frees it, and the thread then polls the freed queue:
// a double free or a refcount assertion that aborts the process.
template <typename Stub>
std::shared_ptr<Stub> ShareCallbackStub(std::unique_ptr<Stub> stub) {
  return std::shared_ptr<Stub>(stub.release(), [](Stub* s) {
    if (s != nullptr) DestroyOffCallbackThreads([s] { delete s; });
  });
}

// Applies strata's limits to a server under construction.
void ConfigureServer(grpc::ServerBuilder& builder);
// What a cluster gRPC server listens with: the process's cluster credentials (cluster_tls.h).
std::shared_ptr<grpc::ServerCredentials> ClusterServerCredentials();

}  // namespace strata::proto
