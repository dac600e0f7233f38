#include "strata/proto/protocol.h"

#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "strata/proto/cluster_tls.h"

namespace strata::proto {

std::string DescribeKvLayout(const v1::KvLayout& l) {
  return absl::StrCat(l.dtype().empty() ? "?" : l.dtype(), " KV, ", l.block_size(),
                      " tokens/block, ", l.num_layers(), " layers x ", l.num_kv_heads(),
                      " KV heads x ", l.head_dim(), ", ",
                      l.memory().empty() ? "host" : l.memory(), " memory");
}

absl::Status CheckSameKvLayout(const v1::KvLayout& ours, const v1::KvLayout& theirs,
                               const std::string& who) {
  const bool same = ours.dtype() == theirs.dtype() && ours.block_size() == theirs.block_size() &&
                    ours.num_layers() == theirs.num_layers() &&
                    ours.num_kv_heads() == theirs.num_kv_heads() &&
                    ours.head_dim() == theirs.head_dim() && ours.memory() == theirs.memory();
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(who, "'s KV pool (", DescribeKvLayout(theirs), ") does not match this one (",
                   DescribeKvLayout(ours), "): blocks cannot move between them"));
}

grpc::Status CheckVersion(uint32_t version) {
  if (version == kProtocolVersion) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      absl::StrCat("protocol version ", version, " is not supported (this build "
                                   "speaks version ", kProtocolVersion, ")"));
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void ToProto(const SamplingParams& p, v1::SamplingParams* out) {
  out->set_max_tokens(p.max_tokens);
  out->set_temperature(p.temperature);
  out->set_top_k(p.top_k);
  out->set_top_p(p.top_p);
  out->set_min_p(p.min_p);
  out->set_has_seed(p.seed.has_value());
  out->set_seed(p.seed.value_or(0));
  out->set_presence_penalty(p.presence_penalty);
  out->set_frequency_penalty(p.frequency_penalty);
  out->set_repetition_penalty(p.repetition_penalty);
  for (const auto& s : p.stop) out->add_stop(s);
  for (int32_t t : p.stop_token_ids) out->add_stop_token_ids(t);
  out->set_ignore_eos(p.ignore_eos);
  out->set_logprobs(p.logprobs);
  out->set_skip_special_tokens(p.skip_special_tokens);
  out->set_min_tokens(p.min_tokens);
  out->set_include_stop_str_in_output(p.include_stop_str_in_output);
  for (const auto& [token, bias] : p.logit_bias) {
    v1::LogitBias* b = out->add_logit_bias();
    b->set_token(token);
    b->set_bias(bias);
  }
  out->set_cache_salt(p.cache_salt);
  if (p.guided.active()) {
    out->mutable_guided()->set_kind(static_cast<v1::Guided::Kind>(p.guided.kind));
    out->mutable_guided()->set_spec(p.guided.spec);
  }
}

SamplingParams FromProto(const v1::SamplingParams& m) {
  SamplingParams p;
  p.max_tokens = m.max_tokens();
  p.temperature = m.temperature();
  p.top_k = m.top_k();
  p.top_p = m.top_p();
  p.min_p = m.min_p();
  if (m.has_seed()) p.seed = m.seed();
  p.presence_penalty = m.presence_penalty();
  p.frequency_penalty = m.frequency_penalty();
  p.repetition_penalty = m.repetition_penalty();
  p.stop.assign(m.stop().begin(), m.stop().end());
  p.stop_token_ids.assign(m.stop_token_ids().begin(), m.stop_token_ids().end());
  p.ignore_eos = m.ignore_eos();
  p.logprobs = m.logprobs();
  p.skip_special_tokens = m.skip_special_tokens();
  p.min_tokens = m.min_tokens();
  p.include_stop_str_in_output = m.include_stop_str_in_output();
  for (const v1::LogitBias& b : m.logit_bias()) p.logit_bias.emplace_back(b.token(), b.bias());
  p.cache_salt = m.cache_salt();
  // An unknown kind (a newer peer's) is dropped to none here and refused nowhere: the
  // protocol version check keeps mismatched peers apart.
  if (m.has_guided() && m.guided().kind() > v1::Guided::NONE &&
      m.guided().kind() <= v1::Guided::TOOL_CALLS) {
    p.guided.kind = static_cast<GuidedDecoding::Kind>(m.guided().kind());
    p.guided.spec = m.guided().spec();
  }
  return p;
}

void ToProto(const SampleResult& s, v1::Sample* out) {
  out->set_token(s.token);
  out->set_logprob(s.logprob);
  for (const auto& t : s.top) {
    auto* e = out->add_top();
    e->set_token(t.token);
    e->set_logprob(t.logprob);
  }
}

SampleResult FromProto(const v1::Sample& m) {
  SampleResult s;
  s.token = m.token();
  s.logprob = m.logprob();
  for (const auto& t : m.top()) s.top.push_back({t.token(), t.logprob()});
  return s;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  return MakeChannel(address, GetClusterCredentials()->channel());
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  // Reconnect quickly after a worker restarts (the default backoff grows to minutes).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

namespace {

// The thread DestroyOffCallbackThreads hands its work to. Never destroyed: it may still be
// needed while static objects are destroyed at exit.
class Destroyer {
 public:
  Destroyer() { std::thread([this] { Run(); }).detach(); }
  void Add(std::function<void()> destroy) {
    absl::MutexLock lock(&mu_);
    pending_.push_back(std::move(destroy));
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> next;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::deque<std::function<void()>>* q) { return !q->empty(); }, &pending_));
        next = std::move(pending_.front());
        pending_.pop_front();
      }
      next();
    }
  }
  absl::Mutex mu_;
  std::deque<std::function<void()>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void DestroyOffCallbackThreads(std::function<void()> destroy) {
  static Destroyer* const destroyer = new Destroyer();
  destroyer->Add(std::move(destroy));
}

void ConfigureServer(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
}

std::shared_ptr<grpc::ServerCredentials> ClusterServerCredentials() {
  return GetClusterCredentials()->server();
}

}  // namespace strata::proto
