// POST /v1/messages and /v1/messages/count_tokens in process over the scripted engine: the
// message object (thinking, text and tool_use blocks, stop reasons, usage), the exact event stream
// (built here from the script's parser deltas and written by hand, not by the server's code), a
// tool call the model opens inside its reasoning, multi-turn tool use, and every kind of bad input
// answered in Anthropic's error shape.
#include <gtest/gtest.h>

#include <regex>

#include "test_server.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;
using test::json_string;
using test::TestServer;
using test::tokenizer;

const ojson kTools = ojson::parse(R"([{"name": "get_weather", "description": "Weather of a city",
  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}])");

// The same tools as the template sees them, for the expected parser deltas.
const ojson kFunctionTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");

const std::string kCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
    "</parameter>\n</function>\n</tool_call>";
const std::string kToolScript =
    "The user wants the weather. Größe 👍\n</think>\n\nChecking \"now\".\n\n" + kCall;
// Qwen3.6 sometimes opens the call before closing its reasoning.
const std::string kCallInReasoning = "I should look it up.\n" + kCall;

ojson messages_body(const std::string& script, bool stream) {
  return {{"model", "anything"},
          {"max_tokens", 1000},
          {"messages", ojson::array({{{"role", "user"}, {"content", "reply>" + script}}})},
          {"stream", stream}};
}

httplib::Result post(const TestServer& server, const ojson& body, const std::string& path = "/v1/messages") {
  return server.client().Post(path, body.dump(), "application/json");
}

std::string event(const std::string& type, const std::string& data) {
  return "event: " + type + "\ndata: " + data + "\n\n";
}

// What the server must stream for `script`: blocks of consecutive deltas of one kind, a block per
// tool call.
std::string expected_stream(const std::string& script, const ojson& tools, const std::string& stop_reason,
                            int64_t prompt_tokens) {
  const std::string usage0 = fmt::format(
      R"({{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}})",
      prompt_tokens);
  std::string out = event(
      "message_start", R"({"type":"message_start","message":{"id":"MSG","type":"message","role":"assistant",)"
                       R"("model":"scripted","content":[],"stop_reason":null,"stop_sequence":null,"usage":)" +
                           usage0 + "}}");
  out += event("ping", R"({"type":"ping"})");
  int index = -1;
  std::string open;  // the open block's kind
  auto start = [&](const std::string& kind, const std::string& block) {
    if (!open.empty())
      out += event("content_block_stop", fmt::format(R"({{"type":"content_block_stop","index":{}}})", index));
    open = kind;
    ++index;
    out +=
        event("content_block_start",
              fmt::format(R"({{"type":"content_block_start","index":{},"content_block":{}}})", index, block));
  };
  auto delta = [&](const std::string& d) {
    out += event("content_block_delta",
                 fmt::format(R"({{"type":"content_block_delta","index":{},"delta":{}}})", index, d));
  };
  for (const OutputDelta& d : test::script_deltas(script, tools)) {
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        if (open != "thinking") start("thinking", R"({"type":"thinking","thinking":"","signature":""})");
        delta(R"({"type":"thinking_delta","thinking":)" + json_string(d.text) + "}");
        break;
      case OutputDelta::Kind::kContent:
        if (open != "text") start("text", R"({"type":"text","text":""})");
        delta(R"({"type":"text_delta","text":)" + json_string(d.text) + "}");
        break;
      case OutputDelta::Kind::kToolCallStart:
        start("tool", R"({"type":"tool_use","id":"TOOLU","name":)" + json_string(d.text) + R"(,"input":{}})");
        break;
      case OutputDelta::Kind::kToolCallArguments:
        delta(R"({"type":"input_json_delta","partial_json":)" + json_string(d.text) + "}");
        break;
    }
  }
  if (!open.empty())
    out += event("content_block_stop", fmt::format(R"({{"type":"content_block_stop","index":{}}})", index));
  const auto n = static_cast<int64_t>(tokenizer().encode(script, true).size());
  out += event(
      "message_delta",
      R"({"type":"message_delta","delta":{"stop_reason":")" + stop_reason +
          R"(","stop_sequence":null},"usage":)" +
          fmt::format(
              R"({{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":{}}})",
              prompt_tokens, n) +
          "}");
  return out + event("message_stop", R"({"type":"message_stop"})");
}

std::string normalized(std::string s) {
  s = std::regex_replace(s, std::regex(R"("id":"msg_[A-Za-z0-9]{24}")"), "\"id\":\"MSG\"");
  return std::regex_replace(s, std::regex(R"("id":"toolu_[A-Za-z0-9]{24}")"), "\"id\":\"TOOLU\"");
}

int64_t prompt_tokens_of(const TestServer& server, const ojson& body) {
  auto r = post(server, body, "/v1/messages/count_tokens");
  EXPECT_EQ(r->status, 200) << r->body;
  return ojson::parse(r->body)["input_tokens"].get<int64_t>();
}

TEST(AnthropicMessages, ThinkingTextAndToolUseBlocks) {
  TestServer server;
  ojson body = messages_body(kToolScript, false);
  body["tools"] = kTools;
  auto r = post(server, body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson m = ojson::parse(r->body);
  EXPECT_TRUE(std::regex_match(m["id"].get<std::string>(), std::regex("msg_[A-Za-z0-9]{24}")));
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "scripted");
  ASSERT_EQ(m["content"].size(), 3u) << r->body;
  EXPECT_EQ(
      m["content"][0],
      ojson::parse(R"({"type":"thinking","thinking":"The user wants the weather. Größe 👍","signature":""})"));
  EXPECT_EQ(m["content"][1], ojson::parse(R"({"type":"text","text":"Checking \"now\"."})"));
  EXPECT_EQ(m["content"][2]["type"], "tool_use");
  EXPECT_TRUE(
      std::regex_match(m["content"][2]["id"].get<std::string>(), std::regex("toolu_[A-Za-z0-9]{24}")));
  EXPECT_EQ(m["content"][2]["name"], "get_weather");
  EXPECT_EQ(m["content"][2]["input"], ojson::parse(R"({"city":"Paris","days":2})"));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["stop_sequence"], nullptr);
  EXPECT_EQ(m["usage"]["input_tokens"], prompt_tokens_of(server, body));
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 0);
  EXPECT_EQ(m["usage"]["output_tokens"], static_cast<int64_t>(tokenizer().encode(kToolScript, true).size()));
}

TEST(AnthropicMessages, StreamByteForByte) {
  TestServer server;
  ojson body = messages_body(kToolScript, true);
  body["tools"] = kTools;
  auto r = post(server, body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  body.erase("stream");
  EXPECT_EQ(normalized(r->body),
            expected_stream(kToolScript, kFunctionTools, "tool_use", prompt_tokens_of(server, body)));
  // Independently of the parser: the call's argument fragments, literally.
  EXPECT_NE(r->body.find(R"({"type":"input_json_delta","partial_json":"{\"city\":\"Paris\""})"),
            std::string::npos);
  EXPECT_NE(r->body.find(R"({"type":"input_json_delta","partial_json":",\"days\":2"})"), std::string::npos);

  // Plain text: one text block, end_turn.
  body = messages_body("hmm\n</think>\n\nHello there.", true);
  r = post(server, body);
  body.erase("stream");
  EXPECT_EQ(normalized(r->body), expected_stream("hmm\n</think>\n\nHello there.", ojson::array(), "end_turn",
                                                 prompt_tokens_of(server, body)));
}

TEST(AnthropicMessages, AToolCallOpenedInsideTheReasoningIsAToolUse) {
  TestServer server;
  ojson body = messages_body(kCallInReasoning, false);
  body["tools"] = kTools;
  auto r = post(server, body);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson m = ojson::parse(r->body);
  ASSERT_EQ(m["content"].size(), 2u) << r->body;
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["thinking"], "I should look it up.");
  EXPECT_EQ(m["content"][1]["type"], "tool_use");
  EXPECT_EQ(m["content"][1]["input"], ojson::parse(R"({"city":"Paris","days":2})"));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(r->body.find("tool_call>"), std::string::npos);

  body["stream"] = true;
  r = post(server, body);
  body.erase("stream");
  EXPECT_EQ(normalized(r->body),
            expected_stream(kCallInReasoning, kFunctionTools, "tool_use", prompt_tokens_of(server, body)));
  EXPECT_NE(r->body.find(R"("content_block":{"type":"tool_use")"), std::string::npos);
  EXPECT_EQ(r->body.find("tool_call>"), std::string::npos);
}

TEST(AnthropicMessages, StopReasons) {
  TestServer server;
  ojson body = messages_body("a\n</think>\n\nHello there, STOP here", false);
  body["stop_sequences"] = {"never", "STOP"};
  ojson m = ojson::parse(post(server, body)->body);
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "STOP");
  EXPECT_EQ(m["content"].back()["text"], "Hello there,");

  body = messages_body("a\n</think>\n\none two three four five six seven", false);
  body["max_tokens"] = 5;
  m = ojson::parse(post(server, body)->body);
  EXPECT_EQ(m["stop_reason"], "max_tokens");
  EXPECT_EQ(m["usage"]["output_tokens"], 5);

  // Tools offered but tool_choice none: the call stays text.
  body = messages_body("x\n</think>\n\n" + kCall, false);
  body["tools"] = kTools;
  body["tool_choice"] = {{"type", "none"}};
  m = ojson::parse(post(server, body)->body);
  EXPECT_EQ(m["stop_reason"], "end_turn");
  EXPECT_NE(m["content"].back()["text"].get<std::string>().find("<tool_call>"), std::string::npos);
}

TEST(AnthropicMessages, ToolResultsAndThinkingGoBackIntoThePrompt) {
  TestServer server;
  // The scripted engine answers with the text after the last "reply>": here the tool result.
  const ojson body = ojson::parse(
      R"({"max_tokens": 100, "system": [{"type": "text", "text": "Be brief."}],
    "thinking": {"type": "enabled", "budget_tokens": 1000}, "tools": )" +
      kTools.dump() + R"(,
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Look it up.", "signature": "abc"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "reply>done\n</think>\n\nIt is sunny."}]}]}]})");
  auto r = post(server, body);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson m = ojson::parse(r->body);
  EXPECT_EQ(m["content"].back()["text"], "It is sunny.");
  EXPECT_EQ(m["stop_reason"], "end_turn");

  // The prompt as the template renders the equivalent chat conversation.
  ojson chat = ojson::parse(
      R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
      {"role": "assistant", "content": "", "reasoning_content": "Look it up.", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "reply>done\n</think>\n\nIt is sunny."}],
      "tools": )" +
      ojson::parse(
          R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])")
          .dump() +
      R"(, "chat_template_kwargs": {"enable_thinking": true}})");
  const std::string prompt =
      ojson::parse(server.client().Post("/apply-template", chat.dump(), "application/json")->body)["prompt"];
  EXPECT_EQ(m["usage"]["input_tokens"], static_cast<int64_t>(tokenizer().encode(prompt, true).size()));
  EXPECT_EQ(prompt_tokens_of(server, body), m["usage"]["input_tokens"].get<int64_t>());

  // is_error marks the result.
  ojson failed = body;
  failed["messages"][2]["content"][0]["is_error"] = true;
  failed["messages"][2]["content"][0]["content"] = "reply>y\n</think>\n\nn";
  chat["messages"][3]["content"] = "Error: reply>y\n</think>\n\nn";
  EXPECT_EQ(prompt_tokens_of(server, failed),
            0 + static_cast<int64_t>(
                    tokenizer()
                        .encode(ojson::parse(server.client()
                                                 .Post("/apply-template", chat.dump(), "application/json")
                                                 ->body)["prompt"]
                                    .get<std::string>(),
                                true)
                        .size()));

  // thinking disabled: the template closes the reasoning in the prompt; the output is text only.
  ojson plain = messages_body("Just text.", false);
  plain["thinking"] = {{"type", "disabled"}};
  const ojson p = ojson::parse(post(server, plain)->body);
  ASSERT_EQ(p["content"].size(), 1u) << p.dump();
  EXPECT_EQ(p["content"][0]["text"], "Just text.");
}

TEST(AnthropicMessages, SystemMessagesAmongTheMessagesJoinTheSystemPrompt) {
  TestServer server;
  const ojson body = ojson::parse(R"({"max_tokens": 10, "system": "A.", "messages": [
    {"role": "user", "content": "reply>x"}, {"role": "system", "content": [{"type": "text", "text": "B."}]}]})");
  const ojson chat = ojson::parse(R"({"messages": [{"role": "system", "content": "A.\n\nB."},
    {"role": "user", "content": [{"type": "text", "text": "reply>x"}]}]})");
  const std::string prompt =
      ojson::parse(server.client().Post("/apply-template", chat.dump(), "application/json")->body)["prompt"];
  EXPECT_EQ(prompt_tokens_of(server, body), static_cast<int64_t>(tokenizer().encode(prompt, true).size()));
  EXPECT_EQ(ojson::parse(post(server, body)->body)["content"][0]["thinking"], "x");
}

// An Anthropic error with its status, type and a message containing `says`.
void expect_error(const httplib::Result& r, int status, const std::string& type, const std::string& says) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  const ojson e = ojson::parse(r->body);
  EXPECT_EQ(e["type"], "error") << r->body;
  EXPECT_EQ(e["error"]["type"], type) << r->body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find(says), std::string::npos) << r->body;
}

TEST(AnthropicMessages, BadInputGetsAnthropicErrors) {
  ServerOptions options;
  options.max_body_bytes = 4096;
  TestServer server(test::ScriptedEngine::Options{}, options);
  auto raw = [&](const std::string& body) {
    return server.client().Post("/v1/messages", body, "application/json");
  };
  expect_error(raw("{\"messages\": ["), 400, "invalid_request_error", "not valid JSON");
  expect_error(raw("[1]"), 400, "invalid_request_error", "must be a JSON object");
  expect_error(raw("{\"max_tokens\": 22222222222222222E22222222222222222}"), 400, "invalid_request_error",
               "number overflow");
  expect_error(raw(std::string(5000, ' ')), 413, "request_too_large", "larger than the limit");
  auto with = [&](const char* path, const ojson& value) {
    ojson body = messages_body("x", false);
    body[ojson::json_pointer(path)] = value;
    return post(server, body);
  };
  expect_error(with("/messages", "hi"), 400, "invalid_request_error", "messages must be an array");
  expect_error(with("/messages/0/role", "tool"), 400, "invalid_request_error",
               "must be \"user\", \"assistant\" or \"system\"");
  expect_error(with("/messages/0/content", ojson::array({{{"type", "image"}, {"source", {}}}})), 400,
               "invalid_request_error", "image blocks are not supported");
  expect_error(
      with("/messages/0/content", ojson::array({{{"type", "tool_use"}, {"id", "a"}, {"name", "f"}}})), 400,
      "invalid_request_error", "\"tool_use\" is not supported in user messages");
  expect_error(
      with("/messages/0/content", ojson::array({{{"type", "tool_result"}, {"tool_use_id", "toolu_x"}}})), 400,
      "invalid_request_error", "which no earlier assistant tool_use issued");
  expect_error(with("/max_tokens", "many"), 400, "invalid_request_error", "max_tokens must be an integer");
  expect_error(with("/max_tokens", 0), 400, "invalid_request_error", "max_tokens must be between 1");
  expect_error(with("/temperature", 7), 400, "invalid_request_error", "temperature must be between 0 and 2");
  expect_error(with("/stop_sequences", "x"), 400, "invalid_request_error", "stop_sequences must be an array");
  expect_error(with("/tools", ojson::array({{{"type", "web_search_20250305"}, {"name", "web_search"}}})), 400,
               "invalid_request_error", "only custom tools");
  expect_error(with("/tools", ojson::array({{{"name", "f"}}})), 400, "invalid_request_error",
               "input_schema must be");
  // A strict tool whose parameter may be a string or a number: its raw text could not be read back.
  ojson strict = kTools;
  strict[0]["strict"] = true;
  strict[0]["input_schema"]["properties"]["city"]["type"] = {"string", "integer"};
  expect_error(with("/tools", strict), 400, "invalid_request_error", "JSON Schema keyword 'type'");
  expect_error(with("/tool_choice", {{"type", "any"}}), 400, "invalid_request_error",
               "no tools are declared");
  expect_error(with("/tool_choice", {{"type", "tool"}}), 400, "invalid_request_error", "tool_choice.name");
  expect_error(with("/thinking", {{"type", "maybe"}}), 400, "invalid_request_error", "thinking.type");
  expect_error(with("/system", 5), 400, "invalid_request_error", "system must be a string or an array");
  ojson prefill = messages_body("x", false);
  prefill["messages"].push_back({{"role", "assistant"}, {"content", "Sure"}});
  expect_error(post(server, prefill), 400, "invalid_request_error", "prefill");
  ojson bad_input = messages_body("x", false);
  bad_input["messages"] = ojson::parse(R"([{"role": "user", "content": "q"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": "not an object"}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}]}])");
  expect_error(post(server, bad_input), 400, "invalid_request_error", "input must be an object");
  expect_error(server.client().Post("/v1/messages/count_tokens", "{", "application/json"), 400,
               "invalid_request_error", "not valid JSON");
  // Still serving.
  EXPECT_EQ(post(server, messages_body("fine", false))->status, 200);
}

TEST(AnthropicMessages, AnApiKeyErrorHasAnthropicsShape) {
  ServerOptions options;
  options.api_key = "secret";
  TestServer server(test::ScriptedEngine::Options{}, options);
  expect_error(post(server, messages_body("x", false)), 401, "authentication_error", "API key");
  httplib::Headers h = {{"Authorization", "Bearer secret"}};
  EXPECT_EQ(
      server.client().Post("/v1/messages", h, messages_body("x", false).dump(), "application/json")->status,
      200);
}

}  // namespace
}  // namespace qwick
