// Request heads that lie about their body's length, over raw sockets: a Content-Length longer
// than the body sent, shorter, not a number, negative, given twice, or beside Transfer-Encoding.
// Each gets a 400 (or, for a longer one, a 400 once --receive-timeout passes) and a closed
// connection within a bound, never a hang, and the server goes on serving. A body left unread by
// a refusal is not read as the next request.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "raw_connection.h"
#include "test_server.h"

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;
using test::RawConnection;
using test::TestServer;

const std::string kHead =
    "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
const std::string kBody = R"({"messages": [{"role": "user", "content": "hi"}]})";

class ServerFraming : public ::testing::Test {
 protected:
  static ServerOptions options() {
    ServerOptions o;
    o.receive_timeout_s = 1;
    return o;
  }
  // Sends `request` and reads the answer until the server closes (at most 5 s); the answer must
  // come, the connection must close, and the server must serve the next client.
  std::string exchange(const std::string& request) {
    RawConnection c(server_.port(), 5);
    EXPECT_TRUE(c.connected());
    const auto start = Clock::now();
    EXPECT_TRUE(c.send_all(request));
    std::string answer = c.receive();
    EXPECT_TRUE(c.closed()) << "the connection stayed open: " << answer.substr(0, 200);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
    auto health = server_.client().Get("/health");
    EXPECT_TRUE(health && health->status == 200);
    return answer;
  }
  static std::string head_with(const std::string& headers) { return kHead + headers + "\r\n"; }
  static void expect_refused(const std::string& answer, const std::string& message) {
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer.substr(0, 300);
    EXPECT_NE(answer.find(message), std::string::npos) << answer;
  }

  TestServer server_{test::ScriptedEngine::Options{}, options()};
};

TEST_F(ServerFraming, ALengthLongerThanTheBodyEndsAtTheReceiveTimeout) {
  expect_refused(exchange(head_with("Content-Length: 1000\r\n") + kBody), "could not be read in full");
}

TEST_F(ServerFraming, ALengthShorterThanTheBodyReadsOnlyThatMuch) {
  // The first 10 bytes are not JSON; the rest is not a request.
  const std::string answer = exchange(head_with("Content-Length: 10\r\n") + kBody);
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer.substr(0, 300);
  EXPECT_NE(answer.find("invalid_request_error"), std::string::npos) << answer;
}

TEST_F(ServerFraming, ALengthThatIsNotAByteCountIsRefused) {
  for (const char* value : {"abc", "-5", "+50", "1e3", "0x40", "50 50", "99999999999999999999999"}) {
    SCOPED_TRACE(value);
    expect_refused(exchange(head_with(std::string("Content-Length: ") + value + "\r\n") + kBody),
                   "Content-Length is not a byte count");
  }
}

TEST_F(ServerFraming, TwoLengthsAreRefused) {
  const std::string n = std::to_string(kBody.size());
  for (const std::string& second : {n, std::string("10")}) {
    SCOPED_TRACE(second);
    expect_refused(
        exchange(head_with("Content-Length: " + n + "\r\nContent-Length: " + second + "\r\n") + kBody),
        "more than one Content-Length");
  }
}

TEST_F(ServerFraming, ALengthBesideChunkedIsRefused) {
  expect_refused(
      exchange(head_with("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\n\r\n"),
      "both Content-Length and Transfer-Encoding");
}

// A request refused before its body is read (no API key) closes its connection: the body is not
// taken for the next request.
TEST(ServerFramingUnread, ARefusedRequestsBodyIsNotReadAsARequest) {
  ServerOptions o;
  o.api_key = "k";
  TestServer server(test::ScriptedEngine::Options{}, o);
  RawConnection c(server.port(), 5);
  const std::string body = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_TRUE(c.send_all(kHead + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  const std::string answer = c.receive();
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 401")) << answer.substr(0, 300);
  EXPECT_EQ(answer.find("HTTP/1.1", 1), std::string::npos)
      << "the body was answered as a request: " << answer;
  EXPECT_TRUE(c.closed());
}

TEST_F(ServerFraming, AnHonestLengthIsServed) {
  RawConnection c(server_.port(), 5);
  ASSERT_TRUE(c.send_all(
      head_with("Connection: close\r\nContent-Length: " + std::to_string(kBody.size()) + "\r\n") + kBody));
  const std::string answer = c.receive();
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer.substr(0, 300);
}

}  // namespace
}  // namespace qwick
