// Chunked/SSE streaming: writes from other threads, client disconnects, many concurrent
// streams, and Shutdown with streams in flight.
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "strata/http/server.h"
#include "test_client.h"

namespace strata::http {
namespace {

using ::strata::http::testing::Get;
using ::strata::http::testing::TestClient;

std::string Event(int i) { return absl::StrCat("data: {\"token\":", i, "}\n\n"); }

std::unique_ptr<Server> MakeServer(ServerOptions options = {}) {
  auto server = Server::Create(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// Hands each request's writer to the test thread.
class WriterInbox {
 public:
  void Put(std::shared_ptr<ResponseWriter> writer) {
    absl::MutexLock lock(&mu_);
    writers_.push_back(std::move(writer));
  }
  // Waits until `n` writers arrived; returns them.
  std::vector<std::shared_ptr<ResponseWriter>> Take(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return writers_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(60));
    return std::move(writers_);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::shared_ptr<ResponseWriter>> writers_ ABSL_GUARDED_BY(mu_);
};

TEST(HttpStreamingTest, SseWrittenFromAnotherThreadIsChunkedCorrectly) {
  auto server = MakeServer();
  std::vector<std::thread> producers;
  std::atomic<int> close_callbacks{0};
  server->Route("GET", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->OnClose([&] { ++close_callbacks; });
    producers.emplace_back([writer] {
      ASSERT_TRUE(writer->StartStream(200, "text/event-stream"));
      for (int i = 0; i < 50; ++i) ASSERT_TRUE(writer->Write(Event(i)));
      EXPECT_TRUE(writer->Write(""));  // empty data must not end the body
      writer->End();
      EXPECT_FALSE(writer->Write(Event(99)));  // after End
    });
  });
  server->Route("GET", "/ok", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->Respond(200, "text/plain", "after");
  });
  ASSERT_TRUE(server->Start().ok());

  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/stream")));
  auto response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_TRUE(response->chunked);
  EXPECT_EQ(response->Header("content-type"), "text/event-stream");
  EXPECT_EQ(response->Header("cache-control"), "no-cache");
  EXPECT_EQ(response->Header("connection"), "keep-alive");
  EXPECT_EQ(response->Header("content-length"), "");
  std::string expected;
  for (int i = 0; i < 50; ++i) expected += Event(i);
  EXPECT_EQ(response->body, expected);

  // The connection serves the next request after the stream.
  ASSERT_TRUE(client->Send(Get("/ok")));
  auto next = client->ReadResponse();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->body, "after");
  for (auto& producer : producers) producer.join();
  EXPECT_EQ(close_callbacks.load(), 0);  // completed responses never report a close
}

TEST(HttpStreamingTest, CurlParsesTheStream) {
  if (std::system("curl --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no curl";
  auto server = MakeServer();
  server->Route("GET", "/stream", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    std::thread([writer] {
      writer->StartStream(200, "text/event-stream");
      for (int i = 0; i < 50; ++i) writer->Write(Event(i));
      writer->End();
    }).detach();
  });
  ASSERT_TRUE(server->Start().ok());
  const std::string command =
      absl::StrCat("curl -sSN --max-time 20 http://127.0.0.1:", server->port(), "/stream");
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char data[4096];
  size_t n;
  while ((n = std::fread(data, 1, sizeof(data), pipe)) > 0) output.append(data, n);
  EXPECT_EQ(::pclose(pipe), 0);
  std::string expected;
  for (int i = 0; i < 50; ++i) expected += Event(i);
  EXPECT_EQ(output, expected);
}

TEST(HttpStreamingTest, ClientDisconnectMidStreamRunsOnCloseOnce) {
  auto server = MakeServer();
  WriterInbox inbox;
  absl::Notification closed;
  std::atomic<int> close_callbacks{0};
  server->Route("GET", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->OnClose([&] {
      ++close_callbacks;
      closed.Notify();
    });
    writer->StartStream(200, "text/event-stream");
    writer->Write(Event(0));
    inbox.Put(std::move(writer));  // no further writes: the close must be noticed by reading
  });
  ASSERT_TRUE(server->Start().ok());

  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/stream")));
  ASSERT_TRUE(client->ReadHead().has_value());
  EXPECT_EQ(client->ReadChunk(), Event(0));
  auto writers = inbox.Take(1);
  ASSERT_EQ(writers.size(), 1u);
  EXPECT_FALSE(writers[0]->IsClosed());
  client->Close();

  ASSERT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(1)));
  EXPECT_TRUE(writers[0]->IsClosed());
  EXPECT_FALSE(writers[0]->Write(Event(1)));
  writers[0]->End();  // harmless
  bool late_callback = false;
  writers[0]->OnClose([&] { late_callback = true; });  // already closed: runs at once
  EXPECT_TRUE(late_callback);
  EXPECT_EQ(close_callbacks.load(), 1);
}

// A client that stops reading: the server stops at its queue bound and cuts the connection,
// running the request's OnClose (which is what cancels generation), instead of buffering the
// whole response.
TEST(HttpStreamingTest, AClientThatStopsReadingIsCutOffAtTheQueueBound) {
  ServerOptions options;
  options.max_queued_write_bytes = 1 << 20;
  options.write_timeout = absl::Seconds(60);  // only the bound acts here
  auto server = MakeServer(options);
  absl::Notification closed;
  std::atomic<int64_t> accepted_bytes{0};
  std::thread producer;
  server->Route("GET", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->OnClose([&] { closed.Notify(); });
    ASSERT_TRUE(writer->StartStream(200, "text/event-stream"));
    producer = std::thread([writer, &accepted_bytes] {
      const std::string chunk(64 << 10, 'x');
      // 256 MiB if nothing stopped it; the client reads none of it.
      for (int i = 0; i < 4096 && writer->Write(chunk); ++i) accepted_bytes += chunk.size();
    });
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/stream")));  // and never reads
  ASSERT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(20)));
  producer.join();
  // What the writer accepted: the socket buffers plus about one queue bound, not the stream.
  EXPECT_LT(accepted_bytes.load(), int64_t{64} << 20);
  EXPECT_EQ(server->open_connections(), 0);
}

// A write that makes no progress (the client's window stays full) ends the connection after
// the write timeout even when the response produces nothing more.
TEST(HttpStreamingTest, AStalledWriteIsCutOffAfterTheWriteTimeout) {
  ServerOptions options;
  options.write_timeout = absl::Milliseconds(300);
  options.max_queued_write_bytes = size_t{256} << 20;  // only the timeout acts here
  auto server = MakeServer(options);
  absl::Notification closed;
  absl::Mutex mu;
  absl::Time started, closed_at;
  std::thread producer;
  server->Route("GET", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    {
      absl::MutexLock lock(&mu);
      started = absl::Now();
    }
    writer->OnClose([&] {
      {
        absl::MutexLock lock(&mu);
        closed_at = absl::Now();
      }
      closed.Notify();
    });
    ASSERT_TRUE(writer->StartStream(200, "text/event-stream"));
    producer = std::thread([writer] {
      // Far more than loopback socket buffers hold (a few MiB), well under the queue bound; then
      // nothing more.
      const std::string chunk(256 << 10, 'y');
      for (int i = 0; i < 256; ++i) writer->Write(chunk);
    });
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/stream")));  // and never reads: the socket stalls
  ASSERT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(20)));
  producer.join();
  // The stream is cut for the stall, not before the timeout: the socket cannot have stalled
  // before the stream started.
  absl::MutexLock lock(&mu);
  EXPECT_GE(closed_at - started, absl::Milliseconds(300));
}

TEST(HttpStreamingTest, AbandonedStreamClosesTheConnection) {
  auto server = MakeServer();
  server->Route("GET", "/stream", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->StartStream(200, "text/event-stream");
    writer->Write(Event(0));
  });  // writer dropped without End
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/stream")));
  ASSERT_TRUE(client->ReadHead().has_value());
  EXPECT_EQ(client->ReadChunk(), Event(0));
  EXPECT_EQ(client->ReadChunk(), std::nullopt);  // truncated: no last chunk
}

TEST(HttpStreamingTest, Http10StreamEndsByClosing) {
  auto server = MakeServer();
  server->Route("GET", "/stream", [](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->StartStream(200, "text/event-stream");
    for (int i = 0; i < 3; ++i) writer->Write(Event(i));
    writer->End();
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send("GET /stream HTTP/1.0\r\n\r\n"));
  auto response = client->ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_FALSE(response->chunked);
  EXPECT_EQ(response->Header("connection"), "close");
  EXPECT_EQ(response->body, Event(0) + Event(1) + Event(2));
}

TEST(HttpStreamingTest, FiveHundredConcurrentStreamsOnTwoThreads) {
  constexpr int kStreams = 500;
  constexpr int kEvents = 10;
  ServerOptions options;
  options.threads = 2;
  auto server = MakeServer(options);
  absl::Mutex mu;
  std::vector<std::shared_ptr<ResponseWriter>> writers(kStreams);  // by client id
  int arrived = 0;
  server->Route("GET", "/stream", [&](const Request& request, std::shared_ptr<ResponseWriter> w) {
    const int id = std::stoi(request.Header("x-id"));
    w->StartStream(200, "text/event-stream");
    absl::MutexLock lock(&mu);
    writers[id] = std::move(w);
    ++arrived;
  });
  ASSERT_TRUE(server->Start().ok());

  std::vector<std::unique_ptr<TestClient>> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.push_back(TestClient::Connect(server->port()));
    ASSERT_NE(clients.back(), nullptr) << i;
    ASSERT_TRUE(clients.back()->Send(Get("/stream", absl::StrCat("X-Id: ", i, "\r\n"))));
  }
  {
    absl::MutexLock lock(&mu);
    auto all_arrived = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return arrived == kStreams; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all_arrived), absl::Seconds(60)));
  }
  EXPECT_EQ(server->open_connections(), kStreams);

  // Two producers interleave events over all streams, as a decode batch would; each event
  // names its stream so a mix-up between connections shows.
  auto event = [](int id, int i) { return absl::StrCat("data: ", id, "/", i, "\n\n"); };
  auto produce = [&](int first) {
    for (int i = 0; i < kEvents; ++i) {
      for (int id = first; id < kStreams; id += 2) EXPECT_TRUE(writers[id]->Write(event(id, i)));
    }
    for (int id = first; id < kStreams; id += 2) writers[id]->End();
  };
  std::thread even(produce, 0), odd(produce, 1);
  int complete = 0;
  for (int id = 0; id < kStreams; ++id) {
    std::string expected;
    for (int i = 0; i < kEvents; ++i) expected += event(id, i);
    auto response = clients[id]->ReadResponse();
    EXPECT_TRUE(response.has_value()) << id;
    if (response.has_value() && response->body == expected) ++complete;
  }
  even.join();
  odd.join();
  EXPECT_EQ(complete, kStreams);
}

TEST(HttpStreamingTest, ShutdownDrainLetsAStreamFinish) {
  auto server = MakeServer();
  std::thread producer;
  std::atomic<int> close_callbacks{0};
  server->Route("GET", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->OnClose([&] { ++close_callbacks; });
    writer->StartStream(200, "text/event-stream");
    producer = std::thread([writer] {
      for (int i = 0; i < 5; ++i) {
        absl::SleepFor(absl::Milliseconds(20));
        writer->Write(Event(i));
      }
      writer->End();
    });
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/stream")));
  auto head = client->ReadHead();
  ASSERT_TRUE(head.has_value());

  server->Shutdown(absl::Seconds(20));  // returns once the stream has finished
  producer.join();
  std::string body;
  while (true) {
    auto chunk = client->ReadChunk();
    ASSERT_TRUE(chunk.has_value());
    if (chunk->empty()) break;
    body += *chunk;
  }
  EXPECT_EQ(body, Event(0) + Event(1) + Event(2) + Event(3) + Event(4));
  EXPECT_EQ(close_callbacks.load(), 0);
  EXPECT_TRUE(client->ReadEof());
}

TEST(HttpStreamingTest, ShutdownAfterDrainClosesUnfinishedStreams) {
  auto server = MakeServer();
  WriterInbox inbox;
  std::atomic<int> close_callbacks{0};
  server->Route("GET", "/stream", [&](const Request&, std::shared_ptr<ResponseWriter> writer) {
    writer->OnClose([&] { ++close_callbacks; });
    writer->StartStream(200, "text/event-stream");
    writer->Write(Event(0));
    inbox.Put(std::move(writer));  // never ends
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = TestClient::Connect(server->port());
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Send(Get("/stream")));
  ASSERT_TRUE(client->ReadHead().has_value());
  auto writers = inbox.Take(1);
  ASSERT_EQ(writers.size(), 1u);

  server->Shutdown(absl::Milliseconds(50));
  EXPECT_EQ(close_callbacks.load(), 1);  // ran before Shutdown returned
  EXPECT_TRUE(writers[0]->IsClosed());
  EXPECT_FALSE(writers[0]->Write(Event(1)));
  EXPECT_EQ(client->ReadChunk(), Event(0));
  EXPECT_EQ(client->ReadChunk(), std::nullopt);  // closed without the last chunk
  EXPECT_EQ(server->open_connections(), 0);
  server.reset();
  EXPECT_FALSE(writers[0]->Write(Event(2)));  // the writer outlives the server safely
}

}  // namespace
}  // namespace strata::http
