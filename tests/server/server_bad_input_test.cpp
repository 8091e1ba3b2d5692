// Random and malformed requests against the server in process, over the real engine on the tiny
// reference model: every answer is a JSON object (a completion, or an error in the OpenAI shape
// with its 4xx status), nothing crashes, and the server keeps answering. Bodies are a valid
// request with a few fields replaced by random JSON of any type (huge and tiny numbers included),
// truncated bodies, and deep nesting; every endpoint that reads a body.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "model/model.h"
#include "runtime/backend_engine.h"
#include "test_server.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

class RandomJson {
 public:
  explicit RandomJson(uint32_t seed) : rng_(seed) {}
  size_t below(size_t n) { return rng_() % n; }
  ojson value(int depth = 0) {
    switch (below(depth > 2 ? 6 : 8)) {
      case 0:
        return nullptr;
      case 1:
        return below(2) == 1;
      case 2: {
        static const int64_t ints[] = {0,   1,   -1,   2,         5,         20,       21,
                                       511, 512, 4096, INT32_MAX, INT64_MIN, INT64_MAX};
        return ints[below(std::size(ints))];
      }
      case 3: {
        static const double reals[] = {0.0, -0.0,  0.5,   1.0,    1e-30,   -1e-30,
                                       2.0, 100.0, 1e308, -1e308, 0.999999};
        return reals[below(std::size(reals))];
      }
      case 4:
        return static_cast<uint64_t>(UINT64_MAX - below(3));
      case 5: {
        static const char* strings[] = {"",
                                        "auto",
                                        "none",
                                        "required",
                                        "user",
                                        "assistant",
                                        "tool",
                                        "text",
                                        "json_schema",
                                        "\xc3\xa9",
                                        "<think>",
                                        "</tool_call>",
                                        "<|im_end|>",
                                        "512",
                                        "-3",
                                        "1e3",
                                        "reply>x\n</think>\n\ny"};
        return strings[below(std::size(strings))];
      }
      case 6: {
        ojson a = ojson::array();
        for (size_t i = below(4); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        static const char* keys[] = {"type",     "text",      "role", "content", "name",
                                     "function", "arguments", "0",    "65"};
        ojson o = ojson::object();
        for (size_t i = below(4); i > 0; --i) o[keys[below(std::size(keys))]] = value(depth + 1);
        return o;
      }
    }
  }

 private:
  std::mt19937 rng_;
};

std::unique_ptr<CompletionEngine> tiny_engine() {
  static const std::unique_ptr<Model> model =
      load_model(std::filesystem::path(QWICK_FIXTURES) / "reference" / "tiny" / "mlx4");
  static std::unique_ptr<Backend> backend = [] {
    BackendOptions o;
    o.threads = 1;
    o.max_context = 1024;
    return make_cpu_backend(*model, o);
  }();
  return std::make_unique<BackendEngine>(*backend, model->config.vocab_size, BackendEngineOptions{});
}

// A body's answer must be JSON: a result, or {"error": {message, type, param, code}} with the
// status as its code.
void check_answer(const httplib::Result& r, const std::string& body) {
  ASSERT_TRUE(r) << "no answer to " << body.substr(0, 300);
  if (r->get_header_value("Content-Type") == "text/event-stream") {
    EXPECT_EQ(r->status, 200);
    EXPECT_TRUE(r->body.ends_with("data: [DONE]\n\n") ||
                r->body.find("data: {\"error\"") != std::string::npos)
        << r->body.substr(0, 300);
    return;
  }
  const ojson j = ojson::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->status << " " << r->body.substr(0, 300) << " for " << body.substr(0, 300);
  if (r->status == 200) return;
  EXPECT_TRUE(r->status == 400 || r->status == 404)
      << r->status << " " << r->body << " for " << body.substr(0, 300);
  ASSERT_TRUE(j.contains("error")) << r->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_EQ(j["error"]["code"], r->status);
  EXPECT_TRUE(j["error"]["type"].is_string());
}

TEST(ServerBadInput, RandomRequestsGetAnswersNotCrashes) {
  test::TestServer server(tiny_engine(), ServerOptions{});
  httplib::Client client = server.client();
  // QWICK_TEST_SEED draws other requests (10,000 over five seeds passed when this was written).
  const char* seed = std::getenv("QWICK_TEST_SEED");
  RandomJson random(seed != nullptr ? static_cast<uint32_t>(std::atoi(seed)) : 2024);
  const ojson chat = ojson::parse(R"({"model": "m", "messages": [{"role": "user", "content": "hello"}],
                                      "max_tokens": 3, "temperature": 0})");
  const char* chat_fields[] = {"messages",
                               "max_tokens",
                               "max_completion_tokens",
                               "n_predict",
                               "temperature",
                               "top_p",
                               "top_k",
                               "min_p",
                               "stop",
                               "seed",
                               "logprobs",
                               "top_logprobs",
                               "logit_bias",
                               "tools",
                               "tool_choice",
                               "stream",
                               "stream_options",
                               "n",
                               "response_format",
                               "chat_template_kwargs",
                               "presence_penalty",
                               "frequency_penalty",
                               "repeat_penalty",
                               "repetition_penalty",
                               "repeat_last_n",
                               "parallel_tool_calls",
                               "reasoning_format",
                               "reasoning_effort",
                               "cache_prompt",
                               "model",
                               "user"};
  const char* message_fields[] = {"role",      "content",     "tool_calls", "reasoning_content",
                                  "reasoning", "tool_call_id"};
  int answered_ok = 0, rejected = 0;
  for (int i = 0; i < 400; ++i) {
    ojson body = chat;
    const size_t kind = random.below(10);
    std::string path = "/v1/chat/completions";
    if (kind == 0) {
      path = "/v1/completions";
      body.erase("messages");
      body["prompt"] = random.below(2) ? random.value() : ojson("once upon");
    } else if (kind == 1) {
      path = random.below(2) ? "/tokenize" : "/detokenize";
      body = {{random.below(2) ? "content" : "tokens", random.value()}, {"with_pieces", random.value()}};
    } else if (kind == 2) {
      path = "/apply-template";
    }
    for (size_t n = 1 + random.below(3); n > 0; --n) {
      const bool has_message = body.contains("messages") && body["messages"].is_array() &&
                               !body["messages"].empty() && body["messages"][0].is_object();
      if (random.below(3) == 0 && has_message)
        body["messages"][0][message_fields[random.below(std::size(message_fields))]] = random.value();
      else if (path != "/tokenize" && path != "/detokenize")
        body[chat_fields[random.below(std::size(chat_fields))]] = random.value();
    }
    std::string text = body.dump();
    if (random.below(8) == 0) text = text.substr(0, random.below(text.size()));  // truncated
    const auto r = client.Post(path, text, "application/json");
    check_answer(r, text);
    if (HasFatalFailure()) return;
    ++(r->status == 200 ? answered_ok : rejected);
  }
  // Both outcomes were exercised, and the server is fine.
  EXPECT_GT(answered_ok, 40);
  EXPECT_GT(rejected, 40);
  const auto h = client.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

// The agent APIs' answers: a result or a stream that ends properly, else a 4xx in the endpoint's
// own error shape.
void check_agent_answer(const httplib::Result& r, const std::string& path, const std::string& body) {
  ASSERT_TRUE(r) << "no answer to " << body.substr(0, 300);
  const bool anthropic = path == "/v1/messages";
  if (r->get_header_value("Content-Type") == "text/event-stream") {
    EXPECT_EQ(r->status, 200);
    EXPECT_TRUE(
        r->body.ends_with(anthropic ? "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n" : "}\n\n"))
        << r->body.substr(0, 300);
    if (!anthropic) {
      EXPECT_TRUE(r->body.find("event: response.completed\n") != std::string::npos ||
                  r->body.find("event: response.incomplete\n") != std::string::npos)
          << r->body.substr(r->body.size() > 300 ? r->body.size() - 300 : 0);
    }
    return;
  }
  const ojson j = ojson::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->status << " " << r->body.substr(0, 300) << " for " << body.substr(0, 300);
  if (r->status == 200) {
    EXPECT_EQ(j.value(anthropic ? "type" : "object", ""), anthropic ? "message" : "response")
        << r->body.substr(0, 300);
    return;
  }
  EXPECT_EQ(r->status, 400) << r->body << " for " << body.substr(0, 300);
  if (anthropic) {
    ASSERT_EQ(j.value("type", ""), "error") << r->body;
    EXPECT_TRUE(j.at("error").at("message").is_string() && j.at("error").at("type").is_string()) << r->body;
  } else {
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_EQ(j.at("error").value("code", 0), r->status) << r->body;
    EXPECT_TRUE(j.at("error").at("message").is_string()) << r->body;
  }
}

TEST(ServerBadInput, AgentApiRandomRequestsGetAnswersNotCrashes) {
  test::TestServer server(tiny_engine(), ServerOptions{});
  httplib::Client client = server.client();
  const char* seed = std::getenv("QWICK_TEST_SEED");
  RandomJson random(seed != nullptr ? static_cast<uint32_t>(std::atoi(seed)) : 2025);
  const ojson messages = ojson::parse(R"({"model": "m", "max_tokens": 3, "temperature": 0,
      "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]})");
  const ojson responses = ojson::parse(R"({"model": "m", "max_output_tokens": 3, "temperature": 0,
      "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}]})");
  const char* messages_fields[] = {"messages",    "system",   "max_tokens",     "temperature",
                                   "top_p",       "top_k",    "stop_sequences", "tools",
                                   "tool_choice", "thinking", "stream",         "metadata"};
  const char* responses_fields[] = {
      "input", "instructions",         "max_output_tokens",   "temperature", "top_p",
      "tools", "tool_choice",          "reasoning",           "text",        "stream",
      "store", "previous_response_id", "parallel_tool_calls", "metadata"};
  const char* item_fields[] = {"type",      "role",   "content", "call_id", "name",
                               "arguments", "output", "id",      "input"};
  int answered_ok = 0, rejected = 0;
  for (int i = 0; i < 300; ++i) {
    const bool anthropic = random.below(2) == 0;
    ojson body = anthropic ? messages : responses;
    const std::string list = anthropic ? "messages" : "input";
    for (size_t n = 1 + random.below(3); n > 0; --n) {
      if (random.below(3) == 0 && body[list].is_array() && !body[list].empty() && body[list][0].is_object())
        body[list][0][item_fields[random.below(std::size(item_fields))]] = random.value();
      else if (random.below(4) == 0 && body[list].is_array() && !body[list].empty() &&
               body[list][0].is_object() && body[list][0]["content"].is_array())
        body[list][0]["content"][0][item_fields[random.below(std::size(item_fields))]] = random.value();
      else if (anthropic)
        body[messages_fields[random.below(std::size(messages_fields))]] = random.value();
      else
        body[responses_fields[random.below(std::size(responses_fields))]] = random.value();
    }
    std::string text = body.dump();
    if (random.below(8) == 0) text = text.substr(0, random.below(text.size()));  // truncated
    const std::string path = anthropic ? "/v1/messages" : "/v1/responses";
    const auto r = client.Post(path, text, "application/json");
    check_agent_answer(r, path, text);
    if (HasFatalFailure()) return;
    ++(r->status == 200 ? answered_ok : rejected);
  }
  EXPECT_GT(answered_ok, 30);
  EXPECT_GT(rejected, 30);
  EXPECT_EQ(client.Get("/health")->status, 200);
}

TEST(ServerBadInput, DeepNestingAndOddBodies) {
  test::TestServer server;
  httplib::Client client = server.client();
  for (const size_t depth : {101u, 100000u, 2000000u}) {
    const std::string nested = std::string(depth, '[') + std::string(depth, ']');
    const std::string body =
        R"({"messages": [{"role": "user", "content": "hi"}], "metadata": )" + nested + "}";
    check_answer(client.Post("/v1/chat/completions", body, "application/json"), body.substr(0, 100));
    const ojson args = {
        {"messages", ojson::array({{{"role", "user"}, {"content", "a"}},
                                   {{"role", "assistant"},
                                    {"tool_calls",
                                     ojson::array({{{"type", "function"},
                                                    {"function", {{"name", "f"}, {"arguments", nested}}}}})}},
                                   {{"role", "user"}, {"content", "b"}}})}};
    const auto r = client.Post("/v1/chat/completions", args.dump(), "application/json");
    check_answer(r, "nested arguments");
    EXPECT_EQ(r->status, 400);
  }
  for (const char* body : {"", "null", "[]", "\"text\"", "{", "{}", "{\"messages\": null}", "\xff\xfe"}) {
    const auto r = client.Post("/v1/chat/completions", body, "application/json");
    check_answer(r, body);
    EXPECT_EQ(r->status, 400) << body;
  }
  // A wrong method or path.
  check_answer(client.Get("/v1/chat/completions"), "GET");
  check_answer(client.Delete("/v1/models"), "DELETE");
  EXPECT_EQ(client.Get("/health")->status, 200);
}

}  // namespace
}  // namespace qwick
