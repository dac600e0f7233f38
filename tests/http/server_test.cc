// strata::http::Server over real sockets: requests, keep-alive, routing errors, limits.
#include "strata/http/server.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test_client.h"

namespace strata::http {
namespace {

using ::strata::http::testing::Get;
using ::strata::http::testing::Post;
using ::strata::http::testing::TestClient;

std::unique_ptr<Server> MakeServer(ServerOptions options = {}) {
  auto server = Server::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// Echoes what the handler saw as JSON.
void EchoHandler(const Request& request, std::shared_ptr<ResponseWriter> writer) {
  nlohmann::json echo = {
      {"method", request.method}, {"target", request.target},           {"path", request.path},
      {"body", request.body},     {"x_test", request.Header("x-test")}, {"remote", request.remote}};
  writer->Respond(200, "application/json", echo.dump(), {{"X-Echo", "yes"}});
}

void ExpectJsonError(const testing::Response& response, int status, const std::string& type) {
  EXPECT_EQ(response.status, status);
  EXPECT_EQ(response.Header("content-type"), "application/json");
  const auto json = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << response.body;
  ASSERT_TRUE(json.contains("error")) << response.body;
  const auto& error = json["error"];
  EXPECT_TRUE(error["message"].is_string());
  EXPECT_FALSE(error["message"].get<std::string>().empty());
  EXPECT_EQ(error["type"], type);
  EXPECT_TRUE(error["param"].is_null());
  EXPECT_TRUE(error["code"].is_null());
}

TEST(HttpServerTest, GetAndPostEcho) {
  auto server = MakeServer();
  server->Route("GET", "/hello", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->Respond(200, "text/plain", "hi");
  });
  server->Route("POST", "/echo", EchoHandler);
  ASSERT_TRUE(server->Start().ok());
  ASSERT_GT(server->port(), 0);

  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/hello")));
  auto hello = client->ReadResponse();
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->status, 200);
  EXPECT_EQ(hello->body, "hi");
  EXPECT_EQ(hello->Header("content-type"), "text/plain");
  EXPECT_EQ(hello->Header("content-length"), "2");

  ASSERT_TRUE(client->Send(Post("/echo?a=1&b=2", "payload", "X-Test: Value\r\n")));
  auto echo = client->ReadResponse();
  ASSERT_TRUE(echo.has_value());
  EXPECT_EQ(echo->status, 200);
  EXPECT_EQ(echo->Header("x-echo"), "yes");
  const auto json = nlohmann::json::parse(echo->body);
  EXPECT_EQ(json["method"], "POST");
  EXPECT_EQ(json["target"], "/echo?a=1&b=2");
  EXPECT_EQ(json["path"], "/echo");
  EXPECT_EQ(json["body"], "payload");
  EXPECT_EQ(json["x_test"], "Value");
  EXPECT_EQ(json["remote"].get<std::string>().rfind("127.0.0.1:", 0), 0u);
}

TEST(HttpServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  auto server = MakeServer();
  server->Route("POST", "/echo", EchoHandler);
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 3; ++i) {
    const std::string body = "request " + std::to_string(i);
    ASSERT_TRUE(client->Send(Post("/echo", body)));
    auto response = client->ReadResponse();
    ASSERT_TRUE(response.has_value()) << i;
    EXPECT_EQ(response->Header("connection"), "keep-alive");
    EXPECT_EQ(nlohmann::json::parse(response->body)["body"], body);
  }
  EXPECT_EQ(server->open_connections(), 1);
}

TEST(HttpServerTest, ConnectionCloseIsHonored) {
  auto server = MakeServer();
  server->Route("POST", "/echo", EchoHandler);
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Post("/echo", "x", "Connection: close\r\n")));
  auto response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_TRUE(client->ReadEof());
}

TEST(HttpServerTest, UnknownPathIs404AndWrongMethodIs405) {
  auto server = MakeServer();
  server->Route("POST", "/v1/completions", EchoHandler);
  server->Route("GET", "/v1/completions", EchoHandler);
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);

  ASSERT_TRUE(client->Send(Get("/nope?x=1")));
  auto not_found = client->ReadResponse();
  ASSERT_TRUE(not_found.has_value());
  ExpectJsonError(*not_found, 404, "invalid_request_error");

  ASSERT_TRUE(client->Send("DELETE /v1/completions HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto wrong_method = client->ReadResponse();
  ASSERT_TRUE(wrong_method.has_value());
  ExpectJsonError(*wrong_method, 405, "invalid_request_error");
  EXPECT_EQ(wrong_method->Header("allow"), "GET, POST");

  // Errors keep the connection usable.
  ASSERT_TRUE(client->Send(Post("/v1/completions", "ok")));
  auto ok = client->ReadResponse();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpServerTest, RespondErrorCarriesParamAndCode) {
  auto server = MakeServer();
  server->Route("GET", "/err", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    RespondError(*writer, 429, "slow down", "rate_limit_error", "model", "rate_limited");
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/err")));
  auto response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 429);
  const auto json = nlohmann::json::parse(response->body);
  EXPECT_EQ(json, nlohmann::json::parse(R"({"error":{"message":"slow down",
      "type":"rate_limit_error","param":"model","code":"rate_limited"}})"));
}

TEST(HttpServerTest, BodyOverLimitIs413ThenServerStillServes) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  auto server = MakeServer(options);
  server->Route("POST", "/echo", EchoHandler);
  ASSERT_TRUE(server->Start().ok());

  auto big = TestClient::Connect(server->port());
  ASSERT_NE(big, nullptr);
  ASSERT_TRUE(big->Send(Post("/echo", std::string(64 << 10, 'x'))));
  auto too_large = big->ReadResponse();
  ASSERT_TRUE(too_large.has_value());
  ExpectJsonError(*too_large, 413, "invalid_request_error");
  EXPECT_TRUE(big->ReadEof());

  // A chunked body is limited as it arrives.
  auto chunked = TestClient::Connect(server->port());
  ASSERT_NE(chunked, nullptr);
  ASSERT_TRUE(chunked->Send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" +
                            std::string("800\r\n") + std::string(0x800, 'y') + "\r\n0\r\n\r\n"));
  auto chunked_too_large = chunked->ReadResponse();
  ASSERT_TRUE(chunked_too_large.has_value());
  ExpectJsonError(*chunked_too_large, 413, "invalid_request_error");

  auto small = TestClient::Connect(server->port());
  ASSERT_NE(small, nullptr);
  ASSERT_TRUE(small->Send(Post("/echo", std::string(1024, 'y'))));
  auto ok = small->ReadResponse();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpServerTest, MalformedRequestIs400AndCloses) {
  auto server = MakeServer();
  server->Route("GET", "/hello", EchoHandler);
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("THIS IS NOT HTTP\r\n\r\n"));
  auto response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 400, "invalid_request_error");
  EXPECT_TRUE(client->ReadEof());
}

TEST(HttpServerTest, OversizedHeadersAre431) {
  auto server = MakeServer();
  server->Route("GET", "/hello", EchoHandler);
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/hello", "X-Big: " + std::string(100 << 10, 'h') + "\r\n")));
  auto response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  ExpectJsonError(*response, 431, "invalid_request_error");
}

TEST(HttpServerTest, ExpectContinueGetsInterimResponse) {
  auto server = MakeServer();
  server->Route("POST", "/echo", EchoHandler);
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(
      client->Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                   "Expect: 100-continue\r\n\r\n"));
  auto interim = client->ReadHead();
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(client->Send("hello"));
  auto response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(nlohmann::json::parse(response->body)["body"], "hello");
}

TEST(HttpServerTest, DroppedWriterGets500) {
  auto server = MakeServer();
  server->Route("GET", "/forgot", [](const Request&, std::shared_ptr<ResponseWriter>) {});
  server->Route("GET", "/later", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    // Dropped on another thread, after the handler returned.
    std::thread([writer = std::move(writer)]() mutable { writer.reset(); }).detach();
  });
  server->Route("GET", "/throws", [](const Request&, std::shared_ptr<ResponseWriter>) {
    throw std::runtime_error("handler bug");
  });
  server->Route("GET", "/ok", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->Respond(200, "text/plain", "fine");
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  for (const char* path : {"/forgot", "/later", "/throws"}) {
    ASSERT_TRUE(client->Send(Get(path)));
    auto response = client->ReadResponse();
    ASSERT_TRUE(response.has_value()) << path;
    ExpectJsonError(*response, 500, "server_error");
  }
  ASSERT_TRUE(client->Send(Get("/ok")));
  auto ok = client->ReadResponse();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->body, "fine");
}

TEST(HttpServerTest, IdleKeepAliveConnectionIsClosed) {
  ServerOptions options;
  options.idle_timeout = absl::Milliseconds(100);
  auto server = MakeServer(options);
  server->Route("GET", "/ok", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->Respond(200, "text/plain", "fine");
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/ok")));
  ASSERT_TRUE(client->ReadResponse().has_value());
  EXPECT_TRUE(client->ReadEof());  // the server closes; the client's own timeout is 20 s

  // A connection that never sends a request is closed too.
  auto silent = TestClient::Connect(server->port());
  ASSERT_NE(silent, nullptr);
  EXPECT_TRUE(silent->ReadEof());
}

TEST(HttpServerTest, ConnectionsBeyondTheLimitAreClosed) {
  ServerOptions options;
  options.max_connections = 2;
  auto server = MakeServer(options);
  server->Route("GET", "/ok", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->Respond(200, "text/plain", "fine");
  });
  ASSERT_TRUE(server->Start().ok());
  std::vector<std::unique_ptr<TestClient>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(TestClient::Connect(server->port()));
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(clients.back()->Send(Get("/ok")));
    ASSERT_TRUE(clients.back()->ReadResponse().has_value());  // now surely registered
  }
  EXPECT_EQ(server->open_connections(), 2);
  auto rejected = TestClient::Connect(server->port());
  ASSERT_NE(rejected, nullptr);
  EXPECT_TRUE(rejected->ReadEof());

  clients[0]->Close();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (server->open_connections() > 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto admitted = TestClient::Connect(server->port());
  ASSERT_NE(admitted, nullptr);
  ASSERT_TRUE(admitted->Send(Get("/ok")));
  auto response = admitted->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST(HttpServerTest, OneClientCannotTakeMoreThanItsConnections) {
  ServerOptions options;
  options.max_connections_per_client = 3;
  auto server = MakeServer(options);
  server->Route("GET", "/ping", [](const Request&, std::shared_ptr<ResponseWriter> w) {
    w->Respond(200, "text/plain", "pong");
  });
  ASSERT_TRUE(server->Start().ok());
  std::vector<std::unique_ptr<TestClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(TestClient::Connect(server->port(), 5));
    ASSERT_NE(held.back(), nullptr);
    ASSERT_TRUE(held.back()->Send(Get("/ping")));  // served: the connection is open
    auto response = held.back()->ReadResponse();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
  }
  // The fourth from the same address is closed without a response.
  auto extra = TestClient::Connect(server->port(), 5);
  ASSERT_NE(extra, nullptr);
  EXPECT_TRUE(extra->ReadEof());
  EXPECT_EQ(server->open_connections(), 3);
  // One of the three leaves: a new connection is served again.
  held.pop_back();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (server->open_connections() > 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto next = TestClient::Connect(server->port(), 5);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->Send(Get("/ping")));
  auto response = next->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
}

TEST(HttpServerTest, StartFailsWhenThePortIsTaken) {
  auto first = MakeServer();
  ASSERT_TRUE(first->Start().ok());
  ServerOptions options;
  options.port = first->port();
  auto second = MakeServer(options);
  EXPECT_FALSE(second->Start().ok());
}

TEST(HttpServerTest, ShutdownIsIdempotentAndStopsListening) {
  auto server = MakeServer();
  server->Route("GET", "/ok", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->Respond(200, "text/plain", "fine");
  });
  ASSERT_TRUE(server->Start().ok());
  const int port = server->port();
  auto idle = TestClient::Connect(port);
  ASSERT_NE(idle, nullptr);
  server->Shutdown(absl::Seconds(5));
  server->Shutdown(absl::Seconds(5));
  EXPECT_TRUE(idle->ReadEof());
  EXPECT_EQ(server->open_connections(), 0);
  EXPECT_EQ(TestClient::Connect(port), nullptr);
}

TEST(HttpServerTest, CreateRejectsBadOptions) {
  ServerOptions options;
  options.threads = 0;
  EXPECT_FALSE(Server::Create(options).ok());
}

}  // namespace
}  // namespace strata::http
