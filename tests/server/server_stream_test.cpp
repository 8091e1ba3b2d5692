// The server in process over a scripted engine (tests/server/scripted_engine.h), through real
// HTTP: the exact SSE bytes of a reply with reasoning, content and a tool call (the expected
// stream is built here from the script's tokens and written by hand, not by the server's code);
// the same reply whole; stop strings never leaking; the queue bound (503); a client that goes
// away during a long prefill or mid-stream being cancelled; shutdown ending open streams.
#include <gtest/gtest.h>
#include <httplib.h>

#include <regex>
#include <thread>

#include "server/api_server.h"
#include "test_server.h"
#include "text/output_parser.h"
#include "text/stream_decoder.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;
using test::json_string;
using test::TestServer;
using test::tokenizer;

std::string chunk(const std::string& delta, const std::string& finish_reason) {
  return "data: {\"choices\":[{\"finish_reason\":" + finish_reason + ",\"index\":0,\"delta\":" + delta +
         "}],\"created\":0,\"id\":\"ID\",\"model\":\"scripted\",\"system_fingerprint\":\"qwick-" QWICK_VERSION
         "\",\"object\":\"chat.completion.chunk\"}\n\n";
}

// What the server must send for `script`: one chunk per parser delta, token by token.
std::string expected_stream(const std::string& script, const ojson& tools, const std::string& finish_reason) {
  std::string out = chunk(R"({"role":"assistant","content":null})", "null");
  for (const OutputDelta& d : test::script_deltas(script, tools)) {
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        out += chunk("{\"reasoning_content\":" + json_string(d.text) + "}", "null");
        break;
      case OutputDelta::Kind::kContent:
        out += chunk("{\"content\":" + json_string(d.text) + "}", "null");
        break;
      case OutputDelta::Kind::kToolCallStart:
        out += chunk(
            fmt::format(
                R"({{"tool_calls":[{{"index":{},"id":"CALL","type":"function","function":{{"name":{},"arguments":""}}}}]}})",
                d.tool_index, json_string(d.text)),
            "null");
        break;
      case OutputDelta::Kind::kToolCallArguments:
        out += chunk(fmt::format(R"({{"tool_calls":[{{"index":{},"function":{{"arguments":{}}}}}]}})",
                                 d.tool_index, json_string(d.text)),
                     "null");
        break;
    }
  }
  return out + chunk("{}", "\"" + finish_reason + "\"") + "data: [DONE]\n\n";
}

// The received stream with what varies (ids, times) replaced.
std::string normalized(std::string s) {
  s = std::regex_replace(s, std::regex(R"("created":\d+)"), "\"created\":0");
  s = std::regex_replace(s, std::regex(R"("id":"chatcmpl-[A-Za-z0-9]{32}")"), "\"id\":\"ID\"");
  s = std::regex_replace(s, std::regex(R"("id":"call_[A-Za-z0-9]{24}")"), "\"id\":\"CALL\"");
  return std::regex_replace(s, std::regex(R"(,"timings":\{"cache_n":\d+,"prompt_n":\d+[^}]*\})"), "");
}

const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");

const std::string kToolScript =
    "The user wants the weather. Größe 👍\n</think>\n\nChecking "
    "\"now\".\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";

ojson chat_body(const std::string& script, bool stream) {
  ojson body = {{"model", "anything"},
                {"messages", ojson::array({{{"role", "user"}, {"content", "reply>" + script}}})},
                {"stream", stream}};
  return body;
}

TEST(ServerStream, ReasoningContentAndToolCallDeltasByteForByte) {
  TestServer server;
  ojson body = chat_body(kToolScript, true);
  body["tools"] = kTools;
  auto r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  // timings ride on the last chunk before [DONE].
  EXPECT_NE(r->body.find(R"("timings":{"cache_n":0,"prompt_n":)"), std::string::npos);
  const std::string got = normalized(r->body);
  EXPECT_EQ(got, expected_stream(kToolScript, kTools, "tool_calls"));
  // Independently of the parser: the call's start and argument fragments, literally.
  EXPECT_NE(
      got.find(
          R"({"tool_calls":[{"index":0,"id":"CALL","type":"function","function":{"name":"get_weather","arguments":""}}]})"),
      std::string::npos);
  EXPECT_NE(got.find(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Paris\""}}]})"),
            std::string::npos);
  EXPECT_NE(got.find(R"({"tool_calls":[{"index":0,"function":{"arguments":",\"days\":2"}}]})"),
            std::string::npos);
  EXPECT_NE(got.find(R"({"tool_calls":[{"index":0,"function":{"arguments":"}"}}]})"), std::string::npos);

  // With include_usage: the finish chunk, then a usage chunk carrying the timings.
  body["stream_options"] = {{"include_usage", true}};
  r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  const std::string tail = r->body.substr(r->body.rfind("\"finish_reason\":\"tool_calls\""));
  const size_t usage = tail.find(R"(data: {"choices":[],"created":)");
  ASSERT_NE(usage, std::string::npos) << tail;
  const ojson u = ojson::parse(tail.substr(usage + 6, tail.find("\n\n", usage) - usage - 6));
  EXPECT_EQ(u["usage"]["completion_tokens"],
            static_cast<int64_t>(tokenizer().encode(kToolScript, true).size()));
  EXPECT_EQ(u["usage"]["total_tokens"],
            u["usage"]["prompt_tokens"].get<int64_t>() + u["usage"]["completion_tokens"].get<int64_t>());
  EXPECT_TRUE(u["timings"].contains("predicted_per_second"));
  EXPECT_TRUE(u["timings"].contains("draft_n"));
  EXPECT_TRUE(u["timings"].contains("draft_n_accepted"));
  EXPECT_TRUE(r->body.ends_with("data: [DONE]\n\n"));
}

TEST(ServerStream, TheWholeResponseHoldsTheSameMessage) {
  TestServer server;
  ojson body = chat_body(kToolScript, false);
  body["tools"] = kTools;
  auto r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson j = ojson::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  const ojson& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_EQ(choice["message"]["reasoning_content"], "The user wants the weather. Größe 👍");
  EXPECT_EQ(choice["message"]["content"], "Checking \"now\".");
  const ojson& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"Paris","days":2})");
  EXPECT_TRUE(std::regex_match(call["id"].get<std::string>(), std::regex("call_[A-Za-z0-9]{24}")));
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  // tool_choice "none": the same output is plain content, no call.
  body["tool_choice"] = "none";
  r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  const ojson none = ojson::parse(r->body);
  EXPECT_EQ(none["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(none["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"),
            std::string::npos);

  // reasoning_format "none": the think tag stays in the content.
  body.erase("tool_choice");
  body["reasoning_format"] = "none";
  r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  const ojson raw = ojson::parse(r->body);
  EXPECT_FALSE(raw["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_TRUE(
      raw["choices"][0]["message"]["content"].get<std::string>().starts_with("The user wants the weather."));
  EXPECT_NE(raw["choices"][0]["message"]["content"].get<std::string>().find("</think>"), std::string::npos);
}

TEST(ServerStream, AToolCallOpenedInsideTheReasoningIsAToolCall) {
  TestServer server;
  // Qwen3.6 sometimes opens the call before closing its reasoning.
  const std::string script =
      "I should look it up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
      "</function>\n</tool_call>";
  ojson body = chat_body(script, true);
  body["tools"] = kTools;
  auto r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(normalized(r->body), expected_stream(script, kTools, "tool_calls"));
  EXPECT_EQ(r->body.find("tool_call>"), std::string::npos);
  body["stream"] = false;
  r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  const ojson m = ojson::parse(r->body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "I should look it up.");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r->body;
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Oslo"})");
}

TEST(ServerStream, ParallelToolCallsOffKeepsOnlyTheFirstCall) {
  TestServer server;
  const std::string call =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n</function>\n</tool_call>";
  ojson body = chat_body("ok\n</think>\n\n" + call + "\n" + call, false);
  body["tools"] = kTools;
  auto r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_EQ(ojson::parse(r->body)["choices"][0]["message"]["tool_calls"].size(), 2u);
  body["parallel_tool_calls"] = false;
  r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  const ojson j = ojson::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  // Generation stopped there.
  EXPECT_LT(j["usage"]["completion_tokens"].get<int64_t>(),
            static_cast<int64_t>(tokenizer().encode("ok\n</think>\n\n" + call + "\n" + call, true).size()));
}

TEST(ServerStream, StopStringsNeverLeak) {
  TestServer server;
  ojson body = chat_body("think\n</think>\n\nHello there, STOP here and more", true);
  body["stop"] = ojson::array({"STOP", "never"});
  auto r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  std::string content;
  for (size_t at = 0; (at = r->body.find("data: {", at)) != std::string::npos; ++at) {
    const ojson c = ojson::parse(r->body.substr(at + 6, r->body.find("\n\n", at) - at - 6));
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content") &&
        c["choices"][0]["delta"]["content"].is_string())
      content += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(content, "Hello there,");
  EXPECT_EQ(r->body.find("ST\""), std::string::npos);
  EXPECT_NE(r->body.find(R"("finish_reason":"stop")"), std::string::npos);
  // The engine was told to stop: fewer tokens than the script.
  EXPECT_EQ(server.engine().finished().back().finish_reason, "stop");
  EXPECT_LT(server.engine().finished().back().generated_tokens,
            static_cast<int64_t>(
                tokenizer().encode("think\n</think>\n\nHello there, STOP here and more", true).size()));
}

TEST(ServerStream, AFullQueueAnswers503) {
  test::ScriptedEngine::Options slow;
  slow.token_delay = std::chrono::milliseconds(20);
  ServerOptions options;
  options.queue_size = 1;
  TestServer server(slow, options);
  std::string long_script;  // about 40 tokens: 0.8 s
  for (int i = 0; i < 40; ++i) long_script += " a";
  auto running = std::thread([&] {
    server.client().Post("/v1/chat/completions", chat_body(long_script, false).dump(), "application/json");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // running now
  auto waiting = std::thread([&] {
    server.client().Post("/v1/chat/completions", chat_body("b", false).dump(), "application/json");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // queued now
  auto r = server.client().Post("/v1/chat/completions", chat_body("c", false).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  const ojson e = ojson::parse(r->body)["error"];
  EXPECT_EQ(e["type"], "unavailable_error");
  EXPECT_EQ(e["code"], 503);
  EXPECT_NE(e["message"].get<std::string>().find("busy"), std::string::npos);
  running.join();
  waiting.join();
  const auto m = server.client().Get("/metrics");
  EXPECT_NE(m->body.find("qwick:requests_rejected_total 1\n"), std::string::npos);
}

// A streaming client that reads `chunks` pieces of the body, then hangs up.
void read_then_disconnect(httplib::Client cli, const std::string& body, int chunks) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  int seen = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++seen < chunks; };
  cli.send(req);
}

TEST(ServerStream, AClientGoneDuringAPrefillOrMidStreamIsCancelled) {
  test::ScriptedEngine::Options slow;
  slow.prefill_chunks = 50;
  slow.chunk_delay = std::chrono::milliseconds(20);  // a one-second prefill
  slow.token_delay = std::chrono::milliseconds(10);
  ServerOptions options;
  options.ping_interval_s = 0.05;
  TestServer server(slow, options);
  // Gone after the role chunk: noticed at the next comment, long before the prefill ends.
  const auto t0 = std::chrono::steady_clock::now();
  read_then_disconnect(server.client(), chat_body("never sent", true).dump(), 1);
  while (server.engine().finished().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(500));  // not after the whole prefill
  // The next request runs.
  auto r = server.client().Post("/v1/chat/completions", chat_body("next", false).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(ojson::parse(r->body)["choices"][0]["message"]["reasoning_content"], "next");
  auto finished = server.engine().finished();
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished[0].finish_reason, "cancelled");
  EXPECT_EQ(finished[0].generated_tokens, 0);

  // Mid-stream: a few tokens, then gone.
  read_then_disconnect(server.client(), chat_body(std::string(300, 'x'), true).dump(), 3);
  r = server.client().Post("/v1/chat/completions", chat_body("after", false).dump(), "application/json");
  ASSERT_TRUE(r);
  finished = server.engine().finished();
  ASSERT_EQ(finished.size(), 4u);
  EXPECT_EQ(finished[2].finish_reason, "cancelled");
  EXPECT_LT(finished[2].generated_tokens,
            static_cast<int64_t>(tokenizer().encode(std::string(300, 'x'), true).size()));
  const auto m = server.client().Get("/metrics");
  EXPECT_NE(m->body.find("qwick:requests_cancelled_total 2\n"), std::string::npos) << m->body;
}

TEST(ServerStream, AWholeResponseClientGoneIsCancelledToo) {
  test::ScriptedEngine::Options slow;
  slow.prefill_chunks = 50;
  slow.chunk_delay = std::chrono::milliseconds(20);
  ServerOptions options;
  options.ping_interval_s = 0.05;
  TestServer server(slow, options);
  // Past the first interval the answer is sent chunked, a space per interval; a client that hangs
  // up after the first space is noticed at the next one and its request cancelled.
  const auto t0 = std::chrono::steady_clock::now();
  read_then_disconnect(server.client(), chat_body("never", false).dump(), 1);
  while (server.engine().finished().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(600));
  EXPECT_EQ(server.engine().finished()[0].finish_reason, "cancelled");
  // A patient client gets 200 and the JSON, after leading spaces.
  auto r = server.client().Post("/v1/chat/completions", chat_body("late\n</think>\n\nanswer", false).dump(),
                                "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.front(), ' ');
  EXPECT_EQ(ojson::parse(r->body)["choices"][0]["message"]["content"], "answer");
}

TEST(ServerStream, LongPrefillSendsCommentsOnly) {
  test::ScriptedEngine::Options slow;
  slow.prefill_chunks = 4;
  slow.chunk_delay = std::chrono::milliseconds(30);
  TestServer server(slow);
  auto r = server.client().Post("/v1/chat/completions", chat_body("hi\n</think>\n\nyes", true).dump(),
                                "application/json");
  ASSERT_TRUE(r);
  // Progress between chunks as SSE comments, before any data but the role chunk.
  const size_t comment = r->body.find(": prefill ");
  ASSERT_NE(comment, std::string::npos) << r->body;
  EXPECT_LT(comment, r->body.find("\"content\":\"yes\""));
  EXPECT_EQ(r->body.find(": prefill ", r->body.find("\"content\":\"yes\"")), std::string::npos);
}

TEST(ServerStream, ShutdownEndsOpenStreamsWithAnError) {
  test::ScriptedEngine::Options slow;
  slow.token_delay = std::chrono::milliseconds(20);
  TestServer server(slow);
  std::string body;
  std::thread client([&] {
    auto r = server.client().Post("/v1/chat/completions", chat_body(std::string(500, 'z'), true).dump(),
                                  "application/json");
    if (r) body = r->body;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server.server().shutdown();
  client.join();
  EXPECT_NE(
      body.find(
          R"(data: {"error":{"message":"the server is shutting down","type":"unavailable_error","param":null,"code":503}})"),
      std::string::npos)
      << body.substr(body.size() > 300 ? body.size() - 300 : 0);
}

}  // namespace
}  // namespace qwick
