// SamplingParams cross the control plane (router -> worker, prefill -> decode) as protobuf:
// every field survives the round trip.
#include <gtest/gtest.h>

#include "strata/proto/protocol.h"

namespace strata {
namespace {

TEST(SamplingProtoTest, EveryFieldSurvivesTheRoundTrip) {
  SamplingParams p;
  p.max_tokens = 7;
  p.temperature = 0.5f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.1f;
  p.seed = 12345;
  p.presence_penalty = -1.0f;
  p.frequency_penalty = 1.5f;
  p.repetition_penalty = 1.2f;
  p.stop = {"a", "bc"};
  p.stop_token_ids = {3, 5};
  p.ignore_eos = true;
  p.min_tokens = 4;
  p.include_stop_str_in_output = true;
  p.logprobs = 2;
  p.skip_special_tokens = false;
  p.logit_bias = {{9, -100.0f}, {2, 0.5f}};
  p.guided = {GuidedDecoding::Kind::kJsonSchema, R"({"type":"object"})"};
  v1::SamplingParams m;
  proto::ToProto(p, &m);
  const SamplingParams q = proto::FromProto(m);
  EXPECT_EQ(q.max_tokens, 7);
  EXPECT_EQ(q.temperature, 0.5f);
  EXPECT_EQ(q.top_k, 40);
  EXPECT_EQ(q.top_p, 0.9f);
  EXPECT_EQ(q.min_p, 0.1f);
  EXPECT_EQ(q.seed, std::optional<uint64_t>(12345));
  EXPECT_EQ(q.presence_penalty, -1.0f);
  EXPECT_EQ(q.frequency_penalty, 1.5f);
  EXPECT_EQ(q.repetition_penalty, 1.2f);
  EXPECT_EQ(q.stop, p.stop);
  EXPECT_EQ(q.stop_token_ids, p.stop_token_ids);
  EXPECT_TRUE(q.ignore_eos);
  EXPECT_EQ(q.min_tokens, 4);
  EXPECT_TRUE(q.include_stop_str_in_output);
  EXPECT_EQ(q.logprobs, 2);
  EXPECT_FALSE(q.skip_special_tokens);
  EXPECT_EQ(q.logit_bias, p.logit_bias);
  EXPECT_EQ(q.guided.kind, GuidedDecoding::Kind::kJsonSchema);
  EXPECT_EQ(q.guided.spec, p.guided.spec);
}

TEST(SamplingProtoTest, EveryConstraintKindSurvivesTheRoundTrip) {
  for (auto kind : {GuidedDecoding::Kind::kNone, GuidedDecoding::Kind::kJsonObject,
                    GuidedDecoding::Kind::kJsonSchema, GuidedDecoding::Kind::kRegex,
                    GuidedDecoding::Kind::kChoice, GuidedDecoding::Kind::kGrammar}) {
    SamplingParams p;
    p.guided.kind = kind;
    if (kind != GuidedDecoding::Kind::kNone) p.guided.spec = GuidedKindName(kind);
    v1::SamplingParams m;
    proto::ToProto(p, &m);
    const SamplingParams q = proto::FromProto(m);
    EXPECT_EQ(q.guided.kind, kind) << GuidedKindName(kind);
    EXPECT_EQ(q.guided.spec, p.guided.spec);
  }
}

}  // namespace
}  // namespace strata
