// Clients that send their request slowly, over raw sockets, against a server whose
// --receive-timeout is 2 s: a head or a body trickled a byte at a time is cut off at the bound
// (not at the per-read timeout), also after "100 Continue", the server answers others meanwhile,
// and what is not slow sending
// is left alone: a request sent in pieces within the bound, the next request of a keep-alive
// connection after an idle pause, and an answer that takes longer than the bound to compute.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "raw_connection.h"
#include "test_server.h"

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;
using test::RawConnection;
using test::TestServer;

constexpr double kBound = 2.0;  // seconds

ServerOptions bounded() {
  ServerOptions o;
  o.receive_timeout_s = kBound;
  return o;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

const std::string kBody = R"({"messages": [{"role": "user", "content": "hi"}]})";
const std::string kHead =
    "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";

// Sends `data` a byte every 50 ms until the server answers or closes; the seconds that took, or
// nothing when all of it went out unanswered.
std::optional<double> trickle(RawConnection& c, const std::string& data) {
  const auto start = Clock::now();
  for (char byte : data) {
    if (!c.send_all(std::string(1, byte))) return seconds_since(start);
    pollfd p{c.fd(), POLLIN, 0};
    if (poll(&p, 1, 50) > 0) return seconds_since(start);
  }
  return std::nullopt;
}

TEST(ServerSlowClients, TrickledHeadsAreCutOffWhileOthersAreServed) {
  TestServer server(test::ScriptedEngine::Options{}, bounded());
  // At 20 bytes a second this head would take a minute.
  const std::string head = kHead + "X-Padding: " + std::string(1200, 'a') + "\r\n\r\n";
  constexpr int kSlow = 8;
  std::vector<std::optional<double>> cut(kSlow);
  std::vector<std::thread> slow;
  for (int i = 0; i < kSlow; ++i)
    slow.emplace_back([&, i] {
      RawConnection c(server.port());
      if (c.connected()) cut[i] = trickle(c, head);
    });
  // Meanwhile /health and a completion answer promptly.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    auto health = server.client().Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto r = server.client().Post("/v1/chat/completions", kBody, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_LT(seconds_since(start), kBound / 2);  // not held up until the slow ones are cut
  }
  for (std::thread& t : slow) t.join();
  for (const auto& s : cut) {
    ASSERT_TRUE(s) << "a trickled head was read for as long as it kept coming";
    EXPECT_GT(*s, kBound - 0.1);
    EXPECT_LT(*s, kBound + 1.5);
  }
}

TEST(ServerSlowClients, ATrickledBodyIsRefusedAtTheBound) {
  TestServer server(test::ScriptedEngine::Options{}, bounded());
  RawConnection c(server.port());
  ASSERT_TRUE(c.connected());
  const std::string body =
      R"({"messages": [{"role": "user", "content": ")" + std::string(1000, 'a') + "\"}]}";
  ASSERT_TRUE(c.send_all(kHead + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
  const auto cut = trickle(c, body);
  ASSERT_TRUE(cut) << "a trickled body was read for as long as it kept coming";
  EXPECT_LT(*cut, kBound + 1.5);
  const std::string answer = c.receive();
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer.substr(0, 200);
  EXPECT_NE(answer.find("could not be read in full"), std::string::npos) << answer;
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(server.client().Get("/health")->status, 200);
}

// "100 Continue" is not the answer: the body that follows is still bounded.
TEST(ServerSlowClients, ABodyAfter100ContinueIsBoundedToo) {
  TestServer server(test::ScriptedEngine::Options{}, bounded());
  for (const bool slow : {false, true}) {
    SCOPED_TRACE(slow);
    RawConnection c(server.port(), 5);
    ASSERT_TRUE(c.connected());
    const std::string body = slow ? std::string(2000, ' ') + kBody : kBody;
    ASSERT_TRUE(c.send_all(kHead + "Connection: close\r\nExpect: 100-continue\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n"));
    char buf[256];
    const ssize_t n = ::recv(c.fd(), buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    EXPECT_TRUE(std::string(buf, static_cast<size_t>(n)).starts_with("HTTP/1.1 100 Continue"));
    if (slow) {
      const auto cut = trickle(c, body);
      ASSERT_TRUE(cut) << "a trickled body was read for as long as it kept coming";
      EXPECT_LT(*cut, kBound + 1.5);
    } else {
      ASSERT_TRUE(c.send_all(body));
    }
    const std::string answer = c.receive();
    EXPECT_TRUE(answer.starts_with(slow ? "HTTP/1.1 400" : "HTTP/1.1 200")) << answer.substr(0, 200);
  }
}

TEST(ServerSlowClients, RequestsWithinTheBoundAndIdleKeepAliveAreServed) {
  TestServer server(test::ScriptedEngine::Options{}, bounded());
  RawConnection c(server.port());
  ASSERT_TRUE(c.connected());
  const std::string request = kHead + "Content-Length: " + std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
  // Twice on one connection, each in three pieces 0.3 s apart (0.6 s, within the bound), with a
  // 0.6 s pause between them: 1.8 s in all.
  for (int round = 0; round < 2; ++round) {
    const size_t third = (request.size() + 2) / 3;
    for (size_t at = 0; at < request.size(); at += third) {
      ASSERT_TRUE(c.send_all(request.substr(at, third)));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    char buf[4096];
    const ssize_t n = ::recv(c.fd(), buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << "round " << round;
    EXPECT_TRUE(std::string(buf, static_cast<size_t>(n)).starts_with("HTTP/1.1 200")) << round;
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  }
}

TEST(ServerSlowClients, AnAnswerSlowerThanTheBoundIsNotCut) {
  test::ScriptedEngine::Options engine;
  engine.chunk_delay = std::chrono::milliseconds(static_cast<int>(kBound * 1500));
  TestServer server(engine, bounded());
  for (const bool stream : {false, true}) {
    nlohmann::ordered_json body = nlohmann::ordered_json::parse(kBody);
    body["stream"] = stream;
    const auto start = Clock::now();
    auto r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r) << "stream " << stream;
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("ok"), std::string::npos) << r->body;
    EXPECT_GT(seconds_since(start), kBound * 1.5 - 0.1);
  }
}

}  // namespace
}  // namespace qwick
