// The replay client over https against strata's own HTTP server with TLS (a test CA from the
// cluster's certificate helpers): a streamed completion is measured as over http; a client given
// another CA, or none, fails to connect and says the certificate is why.
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/http/server.h"
#include "strata/proto/certificates.h"
#include "strata/replay/prompt_synthesizer.h"
#include "strata/replay/replayer.h"

namespace strata::replay {
namespace {

using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

class ReplayerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) / absl::StrCat("replayer_tls_test_", getpid());
    std::filesystem::create_directories(dir_);
    auto ca = proto::MakeCertificateAuthority("replay test CA", absl::Hours(1));
    ASSERT_TRUE(ca.ok());
    auto leaf = proto::IssueLeafCertificate(*ca, proto::LeafSpec{});
    ASSERT_TRUE(leaf.ok());
    auto other = proto::MakeCertificateAuthority("another CA", absl::Hours(1));
    ASSERT_TRUE(other.ok());
    WriteFile(path("ca.crt"), ca->cert_pem);
    WriteFile(path("other.crt"), other->cert_pem);
    WriteFile(path("tls.crt"), leaf->cert_pem);
    WriteFile(path("tls.key"), leaf->key_pem);
    http::ServerOptions options;
    options.tls.cert_file = path("tls.crt");
    options.tls.key_file = path("tls.key");
    auto server = http::Server::Create(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    server_->Route("GET", "/v1/models", [](const http::Request&, auto w) {
      w->Respond(200, "application/json",
                 R"({"object":"list","data":[{"id":"tiny","max_model_len":512}]})");
    });
    server_->Route("POST", "/v1/completions", [](const http::Request&, auto w) {
      w->StartStream(200, "text/event-stream");
      for (const char* text : {"a", "b"}) {
        w->Write(absl::StrCat(R"(data: {"choices":[{"index":0,"text":")", text,
                              R"("}],"usage":null})", "\n\n"));
      }
      w->Write(R"(data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":2,)"
               R"("total_tokens":22}})"
               "\n\n");
      w->Write("data: [DONE]\n\n");
      w->End();
    });
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(1));
    std::filesystem::remove_all(dir_);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  ServerUrl Url(const std::string& host, const std::string& ca) const {
    ServerUrl url = *ParseServerUrl(absl::StrCat("https://", host, ":", server_->port(), "/v1"));
    url.ca_file = ca;
    return url;
  }

  std::filesystem::path dir_;
  std::unique_ptr<http::Server> server_;
};

TEST_F(ReplayerTlsTest, StreamsOverHttpsVerifiedByTheCa) {
  // The certificate names localhost and 127.0.0.1: both verify.
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    auto info = FetchModelInfo(Url(host, path("ca.crt")), "");
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->id, "tiny");
  }
  ReplayOptions o;
  o.url = Url("127.0.0.1", path("ca.crt"));
  o.model = "tiny";
  o.timeout_s = 10;
  o.attempts = 1;
  auto replayer = Replayer::Create(o);
  ASSERT_TRUE(replayer.ok()) << replayer.status();
  PromptSynthesizer prompts = *PromptSynthesizer::Create(1024, {}, 7);
  TraceRequest r;
  r.input_tokens = 20;
  r.output_tokens = 2;
  auto results = (*replayer)->Run({r, r}, prompts);
  ASSERT_TRUE(results.ok()) << results.status();
  for (const RequestResult& result : *results) {
    ASSERT_TRUE(result.ok()) << result.error_type << " " << result.error_message;
    EXPECT_EQ(result.token_chunks, 2);
    EXPECT_EQ(result.completion_tokens, 2);
    EXPECT_GE(result.ttft_s, 0);
  }
}

TEST_F(ReplayerTlsTest, AnUntrustedServerIsRefusedWithTheReason) {
  auto info = FetchModelInfo(Url("127.0.0.1", path("other.crt")), "", 5);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("certificate"));

  ReplayOptions o;
  o.url = Url("127.0.0.1", path("other.crt"));
  o.model = "tiny";
  o.timeout_s = 5;
  o.attempts = 1;
  auto replayer = Replayer::Create(o);
  ASSERT_TRUE(replayer.ok());
  PromptSynthesizer prompts = *PromptSynthesizer::Create(1024, {}, 7);
  TraceRequest r;
  r.input_tokens = 20;
  r.output_tokens = 2;
  auto results = (*replayer)->Run({r}, prompts);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].error, ErrorKind::kConnect);
  EXPECT_THAT((*results)[0].error_message, HasSubstr("certificate"));

  // A CA file that does not exist is the caller's error.
  o.url.ca_file = path("missing.crt");
  auto bad = Replayer::Create(o);
  if (bad.ok()) {
    auto run = (*bad)->Run({r}, prompts);
    ASSERT_FALSE(run.ok());
    EXPECT_THAT(std::string(run.status().message()), HasSubstr("missing.crt"));
  }
}

}  // namespace
}  // namespace strata::replay
