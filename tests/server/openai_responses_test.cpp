// POST /v1/responses, GET and DELETE /v1/responses/{id} in process over the scripted engine: the
// response object (reasoning, message and function_call items, usage), the exact event stream
// (built here from the script's parser deltas and written by hand), a tool call the model opens
// inside its reasoning, multi-turn function calling by previous_response_id and by passing the
// items back, the store's bounds, and bad input answered with a 4xx in the OpenAI error shape.
#include <gtest/gtest.h>

#include <regex>

#include "test_server.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;
using test::json_string;
using test::TestServer;
using test::tokenizer;

const ojson kTools =
    ojson::parse(R"([{"type": "function", "name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}])");
const ojson kFunctionTools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");

const std::string kCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
    "</parameter>\n</function>\n</tool_call>";
const std::string kToolScript =
    "The user wants the weather. Größe 👍\n</think>\n\nChecking \"now\".\n\n" + kCall;
const std::string kCallInReasoning = "I should look it up.\n" + kCall;

ojson responses_body(const std::string& script, bool stream) {
  return {{"model", "anything"}, {"input", "reply>" + script}, {"stream", stream}};
}

httplib::Result post(const TestServer& server, const ojson& body) {
  return server.client().Post("/v1/responses", body.dump(), "application/json");
}

std::string normalized(std::string s) {
  for (const char* prefix : {"resp", "rs", "msg", "fc", "call"})
    s = std::regex_replace(s, std::regex(std::string("\"") + prefix + "_[A-Za-z0-9]{24,32}\""),
                           std::string("\"") + prefix + "_X\"");
  return std::regex_replace(s, std::regex(R"("created_at":\d+)"), "\"created_at\":0");
}

// The response object's settings for a request without any of them (kTools when `tools`).
std::string settings(bool tools) {
  return R"("instructions":null,"max_output_tokens":null,"metadata":{},"parallel_tool_calls":true,)"
         R"("previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":0.0,)"
         R"("text":{"format":{"type":"text"}},"tool_choice":"auto","tools":)" +
         (tools ? kTools.dump() : "[]") + R"(,"top_p":1.0,"truncation":"disabled")";
}

// What the server must stream for `script` (the items' texts are collected as they stream).
std::string expected_stream(const std::string& script, bool tools, int64_t prompt_tokens) {
  int seq = 0;
  std::string out;
  auto event = [&](const std::string& type, const std::string& rest) {
    out += "event: " + type + "\ndata: {\"type\":\"" + type +
           "\",\"sequence_number\":" + std::to_string(seq++) + "," + rest + "}\n\n";
  };
  const std::string head = R"("id":"resp_X","object":"response","created_at":0,"status":)";
  auto response = [&](const std::string& status, const std::string& output, const std::string& usage) {
    return "{" + head + "\"" + status +
           R"(","background":false,"error":null,"incomplete_details":null,"model":"scripted",)" +
           settings(tools) + ",\"output\":[" + output + "],\"usage\":" + usage + "}";
  };
  event("response.created", "\"response\":" + response("in_progress", "", "null"));
  event("response.in_progress", "\"response\":" + response("in_progress", "", "null"));
  std::vector<std::string> items;  // the done items
  std::string kind, text, name;    // the open item
  auto item = [&](bool done) {
    if (kind == "reasoning")
      return R"({"id":"rs_X","type":"reasoning","summary":[],"content":[)" +
             (done ? R"({"type":"reasoning_text","text":)" + json_string(text) + "}" : "") + "]}";
    if (kind == "message")
      return std::string(R"({"id":"msg_X","type":"message","status":")") +
             (done ? "completed" : "in_progress") + R"(","content":[)" +
             (done ? R"({"type":"output_text","annotations":[],"logprobs":[],"text":)" + json_string(text) +
                         "}"
                   : "") +
             R"(],"role":"assistant"})";
    return std::string(R"({"id":"fc_X","type":"function_call","status":")") +
           (done ? "completed" : "in_progress") + R"(","arguments":)" + json_string(done ? text : "") +
           R"(,"call_id":"call_X","name":)" + json_string(name) + "}";
  };
  auto index = [&] { return "\"output_index\":" + std::to_string(items.size()); };
  auto ids = [&] {
    return std::string("\"item_id\":\"") +
           (kind == "reasoning" ? "rs"
            : kind == "message" ? "msg"
                                : "fc") +
           "_X\"," + index();
  };
  auto close = [&] {
    if (kind.empty()) return;
    if (kind == "reasoning") {
      event("response.reasoning_text.done", ids() + ",\"content_index\":0,\"text\":" + json_string(text));
      event(
          "response.content_part.done",
          ids() + R"(,"content_index":0,"part":{"type":"reasoning_text","text":)" + json_string(text) + "}");
    } else if (kind == "message") {
      event("response.output_text.done",
            ids() + ",\"content_index\":0,\"text\":" + json_string(text) + ",\"logprobs\":[]");
      event("response.content_part.done",
            ids() +
                R"(,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":)" +
                json_string(text) + "}");
    } else {
      event("response.function_call_arguments.done",
            ids() + ",\"name\":" + json_string(name) + ",\"arguments\":" + json_string(text));
    }
    event("response.output_item.done", index() + ",\"item\":" + item(true));
    items.push_back(item(true));
    kind.clear();
  };
  auto open = [&](const std::string& k, const std::string& n) {
    close();
    kind = k;
    text.clear();
    name = n;
    event("response.output_item.added", index() + ",\"item\":" + item(false));
    if (k == "reasoning")
      event("response.content_part.added",
            ids() + R"(,"content_index":0,"part":{"type":"reasoning_text","text":""})");
    if (k == "message")
      event(
          "response.content_part.added",
          ids() +
              R"(,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""})");
  };
  for (const OutputDelta& d : test::script_deltas(script, tools ? kFunctionTools : ojson::array())) {
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        if (kind != "reasoning") open("reasoning", "");
        text += d.text;
        event("response.reasoning_text.delta",
              ids() + ",\"content_index\":0,\"delta\":" + json_string(d.text));
        break;
      case OutputDelta::Kind::kContent:
        if (kind != "message") open("message", "");
        text += d.text;
        event("response.output_text.delta",
              ids() + ",\"content_index\":0,\"delta\":" + json_string(d.text) + ",\"logprobs\":[]");
        break;
      case OutputDelta::Kind::kToolCallStart:
        open("call", d.text);
        break;
      case OutputDelta::Kind::kToolCallArguments:
        text += d.text;
        event("response.function_call_arguments.delta", ids() + ",\"delta\":" + json_string(d.text));
        break;
    }
  }
  close();
  std::string output;
  for (const std::string& i : items) output += (output.empty() ? "" : ",") + i;
  const auto n = static_cast<int64_t>(tokenizer().encode(script, true).size());
  event("response.completed",
        "\"response\":" +
            response(
                "completed", output,
                fmt::format(
                    R"({{"input_tokens":{},"input_tokens_details":{{"cached_tokens":0}},"output_tokens":{},)"
                    R"("output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}})",
                    prompt_tokens, n, prompt_tokens + n)));
  return out;
}

TEST(OpenAIResponses, ReasoningMessageAndFunctionCallItems) {
  TestServer server;
  ojson body = responses_body(kToolScript, false);
  body["tools"] = kTools;
  auto r = post(server, body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson j = ojson::parse(r->body);
  EXPECT_TRUE(std::regex_match(j["id"].get<std::string>(), std::regex("resp_[A-Za-z0-9]{32}")));
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["model"], "scripted");
  const ojson& out = j["output"];
  ASSERT_EQ(out.size(), 3u) << r->body;
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["content"][0]["text"], "The user wants the weather. Größe 👍");
  EXPECT_EQ(out[1]["type"], "message");
  EXPECT_EQ(out[1]["role"], "assistant");
  EXPECT_EQ(out[1]["content"][0]["type"], "output_text");
  EXPECT_EQ(out[1]["content"][0]["text"], "Checking \"now\".");
  EXPECT_EQ(out[2]["type"], "function_call");
  EXPECT_EQ(out[2]["name"], "get_weather");
  EXPECT_EQ(out[2]["arguments"], R"({"city":"Paris","days":2})");
  EXPECT_TRUE(std::regex_match(out[2]["call_id"].get<std::string>(), std::regex("call_[A-Za-z0-9]{24}")));
  EXPECT_EQ(j["usage"]["output_tokens"], static_cast<int64_t>(tokenizer().encode(kToolScript, true).size()));
  EXPECT_EQ(j["usage"]["input_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(j["tools"], kTools);

  // max_output_tokens: incomplete.
  body = responses_body("a\n</think>\n\none two three four five six", false);
  body["max_output_tokens"] = 4;
  body["temperature"] = 0.7;
  const ojson cut = ojson::parse(post(server, body)->body);
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut["max_output_tokens"], 4);
  EXPECT_EQ(cut["temperature"], 0.7);  // as sent, not as a float
}

int64_t prompt_tokens(TestServer& server) {
  return server.engine().finished().back().prompt_tokens;
}

TEST(OpenAIResponses, StreamByteForByte) {
  TestServer server;
  ojson body = responses_body(kToolScript, true);
  body["tools"] = kTools;
  auto r = post(server, body);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(normalized(r->body), expected_stream(kToolScript, true, prompt_tokens(server)));
  EXPECT_NE(r->body.find(R"("delta":"{\"city\":\"Paris\"")"), std::string::npos);

  r = post(server, responses_body("hmm\n</think>\n\nHello there.", true));
  EXPECT_EQ(normalized(r->body),
            expected_stream("hmm\n</think>\n\nHello there.", false, prompt_tokens(server)));
}

TEST(OpenAIResponses, AToolCallOpenedInsideTheReasoningIsAFunctionCall) {
  TestServer server;
  ojson body = responses_body(kCallInReasoning, false);
  body["tools"] = kTools;
  const ojson j = ojson::parse(post(server, body)->body);
  ASSERT_EQ(j["output"].size(), 2u) << j.dump();
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "I should look it up.");
  EXPECT_EQ(j["output"][1]["type"], "function_call");
  EXPECT_EQ(j["output"][1]["arguments"], R"({"city":"Paris","days":2})");
  body["stream"] = true;
  auto r = post(server, body);
  EXPECT_EQ(normalized(r->body), expected_stream(kCallInReasoning, true, prompt_tokens(server)));
  EXPECT_EQ(r->body.find("tool_call>"), std::string::npos);
}

TEST(OpenAIResponses, FunctionCallLoopByPreviousResponseIdAndByItems) {
  TestServer server;
  ojson body = responses_body(kToolScript, false);
  body["tools"] = kTools;
  body["instructions"] = "Be brief.";
  const ojson first = ojson::parse(post(server, body)->body);
  const std::string call_id = first["output"][2]["call_id"];

  // The function's output continues the stored conversation; the script is in the output.
  ojson next = {{"previous_response_id", first["id"]},
                {"tools", kTools},
                {"instructions", "Be brief."},
                {"input", ojson::array({{{"type", "function_call_output"},
                                         {"call_id", call_id},
                                         {"output", "reply>ok\n</think>\n\nSunny, 20 C."}}})}};
  auto r = post(server, next);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson second = ojson::parse(r->body);
  EXPECT_EQ(second["output"].back()["content"][0]["text"], "Sunny, 20 C.");
  EXPECT_EQ(second["previous_response_id"], first["id"]);
  const int64_t by_id = prompt_tokens(server);

  // The same conversation sent back as items: the same prompt.
  ojson items = ojson::array({{{"role", "user"}, {"content", "reply>" + kToolScript}}});
  for (const ojson& item : first["output"]) items.push_back(item);
  items.push_back(next["input"][0]);
  ojson again = {{"tools", kTools}, {"instructions", "Be brief."}, {"input", items}, {"store", false}};
  r = post(server, again);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(prompt_tokens(server), by_id);
  EXPECT_EQ(ojson::parse(r->body)["output"].back()["content"][0]["text"],
            second["output"].back()["content"][0]["text"]);

  // store false: not retrievable.
  const std::string unstored = ojson::parse(r->body)["id"];
  EXPECT_EQ(server.client().Get("/v1/responses/" + unstored)->status, 404);
}

TEST(OpenAIResponses, GetDeleteAndTheStoresBounds) {
  ServerOptions options;
  options.responses_store_size = 2;
  TestServer server(test::ScriptedEngine::Options{}, options);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(ojson::parse(post(server, responses_body("x" + std::to_string(i), false))->body)["id"]);
  // The oldest went first.
  auto r = server.client().Get("/v1/responses/" + ids[0]);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ojson::parse(r->body)["error"]["type"], "not_found_error");
  r = server.client().Get("/v1/responses/" + ids[2]);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(ojson::parse(r->body)["id"], ids[2]);
  EXPECT_EQ(ojson::parse(r->body)["status"], "completed");
  r = server.client().Delete("/v1/responses/" + ids[2]);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(ojson::parse(r->body),
            ojson::parse(R"({"id":")" + ids[2] + R"(","object":"response","deleted":true})"));
  EXPECT_EQ(server.client().Get("/v1/responses/" + ids[2])->status, 404);
  EXPECT_EQ(server.client().Delete("/v1/responses/" + ids[2])->status, 404);
  // A deleted response cannot be continued.
  ojson next = responses_body("y", false);
  next["previous_response_id"] = ids[2];
  r = post(server, next);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(ojson::parse(r->body)["error"]["param"], "previous_response_id");

  // Past the age limit a response is gone.
  options.responses_store_age_s = 0;
  TestServer ageless(test::ScriptedEngine::Options{}, options);
  const std::string id = ojson::parse(post(ageless, responses_body("z", false))->body)["id"];
  EXPECT_EQ(ageless.client().Get("/v1/responses/" + id)->status, 404);
}

void expect_error(const httplib::Result& r, int status, const std::string& param, const std::string& says) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  const ojson e = ojson::parse(r->body)["error"];
  EXPECT_EQ(e["code"], status) << r->body;
  EXPECT_EQ(e["param"], param.empty() ? ojson() : ojson(param)) << r->body;
  EXPECT_NE(e["message"].get<std::string>().find(says), std::string::npos) << r->body;
}

TEST(OpenAIResponses, BadInputGets4xx) {
  ServerOptions options;
  options.max_body_bytes = 4096;
  TestServer server(test::ScriptedEngine::Options{}, options);
  auto raw = [&](const std::string& body) {
    return server.client().Post("/v1/responses", body, "application/json");
  };
  expect_error(raw("{\"input\": "), 400, "", "not valid JSON");
  expect_error(raw("{\"input\": \"x\", \"temperature\": 1e999}"), 400, "", "number overflow");
  expect_error(raw(std::string(5000, ' ')), 413, "", "larger than the limit");
  auto with = [&](const char* path, const ojson& value) {
    ojson body = responses_body("x", false);
    body[ojson::json_pointer(path)] = value;
    return post(server, body);
  };
  expect_error(with("/input", 5), 400, "input", "input must be a string or an array");
  expect_error(with("/input", ojson::array()), 400, "input", "must not be empty");
  expect_error(with("/input", ojson::array({{{"type", "input_image"}}})), 400, "input[0].type",
               "not supported");
  expect_error(
      with("/input",
           ojson::array({{{"role", "user"}, {"content", ojson::array({{{"type", "input_image"}}})}}})),
      400, "input[0].content[0].type", "input_image is not supported");
  expect_error(with("/input", ojson::array({{{"role", "tool"}, {"content", "x"}}})), 400, "input[0].role",
               "must be");
  expect_error(
      with("/input",
           ojson::array({{{"type", "function_call_output"}, {"call_id", "call_9"}, {"output", "r"}}})),
      400, "input[0].call_id", "no earlier function_call issued");
  expect_error(
      with(
          "/input",
          ojson::array({{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "[1]"}}})),
      400, "input[0].arguments", "must be a JSON object");
  expect_error(with("/previous_response_id", "resp_nope"), 400, "previous_response_id",
               "not a stored response");
  expect_error(with("/tools", ojson::array({{{"type", "web_search"}}})), 400, "tools[0].type",
               "only function tools");
  // A strict tool whose parameter may be a string or a number: its raw text could not be read back.
  ojson strict = kTools;
  strict[0]["strict"] = true;
  strict[0]["parameters"]["properties"]["city"]["type"] = {"string", "integer"};
  expect_error(with("/tools", strict), 400, "tools", "JSON Schema keyword 'type'");
  expect_error(with("/tool_choice", "required"), 400, "tool_choice", "no tools are declared");
  expect_error(with("/tool_choice", {{"type", "allowed_tools"}}), 400, "tool_choice", "allowed_tools");
  expect_error(with("/text", {{"format", {{"type", "json_schema"}, {"name", "x"}}}}), 400,
               "text.format.schema", "must be a JSON Schema");
  expect_error(with("/text", {{"format", {{"type", "xml"}}}}), 400, "text.format.type", "json_schema");
  expect_error(with("/reasoning", {{"effort", "huge"}}), 400, "reasoning.effort", "reasoning.effort must be");
  expect_error(with("/max_output_tokens", 0), 400, "max_output_tokens", "between 1");
  expect_error(with("/background", true), 400, "background", "not supported");
  expect_error(server.client().Get("/v1/responses/resp_unknown"), 404, "", "no stored response");
  // Still serving.
  EXPECT_EQ(post(server, responses_body("fine", false))->status, 200);
}

TEST(OpenAIResponses, InstructionsAndDeveloperMessagesMakeOneSystemMessage) {
  TestServer server;
  ojson body = {
      {"instructions", "A."},
      {"input", ojson::array({{{"role", "developer"}, {"content", "B."}},
                              {{"role", "user"},
                               {"content", ojson::array({{{"type", "input_text"}, {"text", "reply>x"}}})}}})},
      {"reasoning", {{"effort", "none"}}}};
  auto r = post(server, body);
  ASSERT_EQ(r->status, 200) << r->body;
  const ojson chat = {{"messages", ojson::array({{{"role", "system"}, {"content", "A.\n\nB."}},
                                                 {{"role", "user"}, {"content", "reply>x"}}})},
                      {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const std::string prompt =
      ojson::parse(server.client().Post("/apply-template", chat.dump(), "application/json")->body)["prompt"];
  EXPECT_EQ(prompt_tokens(server), static_cast<int64_t>(tokenizer().encode(prompt, true).size()));
  // Thinking off: the output is a message only.
  const ojson j = ojson::parse(r->body);
  ASSERT_EQ(j["output"].size(), 1u) << r->body;
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "x");
  EXPECT_EQ(j["reasoning"]["effort"], "none");
}

}  // namespace
}  // namespace qwick
