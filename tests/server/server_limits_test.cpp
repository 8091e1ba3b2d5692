// Request bodies against --max-body-size through raw sockets: a chunked body is cut off once it
// passes the limit (the server stops reading it), a Content-Length over the limit is refused
// before any of the body is read, bodies within the limit work in both encodings, and a prompt
// past the context is refused without being tokenized in full.
#include <gtest/gtest.h>

#include <string>

#include "raw_connection.h"
#include "test_server.h"

namespace qwick {
namespace {

using test::RawConnection;
using test::TestServer;

const std::string kHead =
    "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
const std::string kBody = R"({"messages": [{"role": "user", "content": "hi"}]})";

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

ServerOptions small_limit() {
  ServerOptions o;
  o.max_body_bytes = 64 << 10;
  return o;
}

TEST(ServerLimits, AChunkedBodyPastTheLimitIsCutOff) {
  TestServer server(test::ScriptedEngine::Options{}, small_limit());
  RawConnection c(server.port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send_all(kHead + "Transfer-Encoding: chunked\r\n\r\n"));
  // Up to 256 MiB of JSON whitespace, 64 KiB a chunk, until the server answers (or takes no
  // more): it must answer long before.
  const std::string piece = chunk(std::string(64 << 10, ' '));
  size_t sent = 0;
  while (sent < (size_t{256} << 20) && !c.readable() && c.send_all(piece)) sent += piece.size();
  EXPECT_LT(sent, size_t{64} << 20) << "the server kept reading an oversized chunked body";
  const std::string answer = c.receive();
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 413")) << answer.substr(0, 200);
  EXPECT_NE(answer.find("larger than the limit of 65536 bytes"), std::string::npos);
  EXPECT_EQ(server.client().Get("/health")->status, 200);
}

TEST(ServerLimits, AContentLengthPastTheLimitIsRefusedUnread) {
  TestServer server(test::ScriptedEngine::Options{}, small_limit());
  RawConnection c(server.port());
  ASSERT_TRUE(c.connected());
  // The head alone: the answer comes without a byte of the claimed body.
  ASSERT_TRUE(c.send_all(kHead + "Content-Length: 1000000000\r\n\r\n"));
  const std::string answer = c.receive();
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 413")) << answer.substr(0, 200);
  EXPECT_EQ(server.client().Get("/health")->status, 200);
}

TEST(ServerLimits, BodiesWithinTheLimitWorkInBothEncodings) {
  TestServer server(test::ScriptedEngine::Options{}, small_limit());
  {
    RawConnection c(server.port());
    ASSERT_TRUE(c.send_all(kHead + "Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n" +
                           chunk(kBody.substr(0, 10)) + chunk(kBody.substr(10)) + "0\r\n\r\n"));
    const std::string answer = c.receive();
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer.substr(0, 300);
  }
  auto r = server.client().Post("/v1/chat/completions", kBody, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A prompt far past the context is refused without tokenizing all of it.
TEST(ServerLimits, TokenizingStopsOncePastTheContext) {
  test::ScriptedEngine::Options engine;
  engine.context = 256;
  TestServer server(engine, ServerOptions{});
  std::string text;
  for (int i = 0; i < 200000; ++i) text += "memory compute ";
  for (const bool chat : {true, false}) {
    const nlohmann::ordered_json body =
        chat ? nlohmann::ordered_json{{"messages", {{{"role", "user"}, {"content", text}}}}}
             : nlohmann::ordered_json{{"prompt", text}};
    auto r = server.client().Post(chat ? "/v1/chat/completions" : "/v1/completions", body.dump(),
                                  "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    const auto e = nlohmann::ordered_json::parse(r->body)["error"];
    EXPECT_EQ(e["type"], "exceed_context_size_error");
    EXPECT_NE(e["message"].get<std::string>().find("more than 256 prompt tokens"), std::string::npos) << e;
    // Counted only a little past the context (one pre-tokenizer piece at most), not the 400,000.
    EXPECT_LT(e["n_prompt_tokens"].get<int64_t>(), 300) << e;
  }
}

}  // namespace
}  // namespace qwick
