#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "core/error.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/unsupported_fields.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void unsupported(const std::string& param, const std::string& what) {
  throw invalid_request(what, param);
}

// Features that need what this server does not have; each is refused by name.
void refuse_unsupported(const ojson& body) {
  refuse_unsupported_fields(body);
  if (const auto n = get_integer(body, "n", 1, 128); n && *n != 1)
    unsupported("n", "n must be 1: this server generates one choice per request");
  if (field(body, "functions") != nullptr || field(body, "function_call") != nullptr)
    unsupported(field(body, "functions") ? "functions" : "function_call",
                "the legacy functions / function_call fields are not supported; use tools and tool_choice");
  if (field(body, "audio") != nullptr) unsupported("audio", "audio output is not supported");
  if (const ojson* m = field(body, "modalities")) {
    if (!m->is_array()) wrong_type("modalities", "an array", *m);
    for (const auto& x : *m)
      if (x != "text") unsupported("modalities", "only the text modality is supported, got " + x.dump());
  }
  if (field(body, "prediction") != nullptr)
    unsupported("prediction", "predicted outputs (prediction) are not supported");
  if (field(body, "web_search_options") != nullptr)
    unsupported("web_search_options", "web search is not supported");
}

// --- sampling and limits, shared by both endpoints -----------------------------------------------

void read_sampling(const ojson& body, const RequestDefaults& d, CompletionRequest& r) {
  SamplingParams& s = r.sampling;
  s = default_sampling(d);
  if (auto x = get_number(body, "temperature", 0, 100)) s.temperature = static_cast<float>(*x);
  if (auto x = get_number(body, "top_p", 0, 1)) s.top_p = static_cast<float>(*x);
  if (auto x = get_integer(body, "top_k", -1, std::numeric_limits<int32_t>::max()))
    s.top_k = *x < 0 ? 0 : static_cast<int>(*x);
  if (auto x = get_number(body, "min_p", 0, 1)) s.min_p = static_cast<float>(*x);
  if (auto x = get_number(body, "presence_penalty", -2, 2)) s.presence_penalty = static_cast<float>(*x);
  if (auto x = get_number(body, "frequency_penalty", -2, 2)) s.frequency_penalty = static_cast<float>(*x);
  for (const char* name : {"repetition_penalty", "repeat_penalty"})
    if (auto x = get_number(body, name, 0, 100)) {
      if (*x <= 0) throw invalid_request(std::string(name) + " must be greater than 0", name);
      s.repetition_penalty = static_cast<float>(*x);
    }
  if (auto x = get_integer(body, "repeat_last_n", -1, std::numeric_limits<int32_t>::max()))
    s.penalty_last_n = static_cast<int>(*x);

  if (auto x =
          get_integer(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    s.seed = seed_value(*x);

  s.logit_bias.clear();
  if (const ojson* b = field(body, "logit_bias")) {
    if (!b->is_object()) wrong_type("logit_bias", "an object of token id -> bias", *b);
    for (const auto& [key, value] : b->items()) {
      const std::string param = "logit_bias." + key;
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id >= d.vocab_size)
        throw invalid_request(
            fmt::format("logit_bias key \"{}\" is not a token id (0 .. {})", key, d.vocab_size - 1), param);
      if (!value.is_number()) wrong_type(param, "a number", value);
      const double bias = value.get<double>();
      if (!std::isfinite(bias) || bias < -100 || bias > 100)
        throw invalid_request(param + " must be between -100 and 100", param);
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
    }
  }

  // llama-server's order: n_predict, max_completion_tokens, max_tokens.
  r.max_tokens = d.max_tokens;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (const char* name : {"max_tokens", "max_completion_tokens", "n_predict"})
    if (auto x = get_integer(body, name, -1, kMax)) {
      if (*x == 0)
        throw invalid_request(std::string(name) + " must be at least 1 (or -1 for no limit)", name);
      r.max_tokens = *x;
    }

  if (const ojson* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) wrong_type(fmt::format("stop[{}]", i), "a string", (*stop)[i]);
        r.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *stop);
    }
  }

  r.stream = get_bool(body, "stream").value_or(false);
  if (const ojson* o = field(body, "stream_options")) {
    if (!o->is_object()) wrong_type("stream_options", "an object", *o);
    r.include_usage = get_bool(*o, "include_usage").value_or(false);
  }
  r.cache_prompt = get_bool(body, "cache_prompt").value_or(d.cache_prompt);
}

// --- chat ---------------------------------------------------------------------------------------

void check_content(const ojson& content, const std::string& param) {
  if (content.is_null() || content.is_string()) return;
  if (!content.is_array()) wrong_type(param, "a string, null or an array of content parts", content);
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!part.is_object()) wrong_type(p, "a content part object", part);
    const auto type = get_string(part, "type");
    if (!type) throw invalid_request(p + ".type is missing", p + ".type");
    if (*type == "image_url" || *type == "image" || *type == "input_image" || *type == "video_url" ||
        *type == "video")
      throw invalid_request(p + ": image and video input is not supported (this server runs the text model)",
                            p + ".type");
    if (*type != "text")
      throw invalid_request(p + ": content part type \"" + *type + "\" is not supported", p + ".type");
    const ojson* text = field(part, "text");
    if (text == nullptr || !text->is_string())
      throw invalid_request(p + ".text must be a string", p + ".text");
  }
}

ojson read_tool_call(const ojson& call, const std::string& param) {
  if (!call.is_object()) wrong_type(param, "an object", call);
  const ojson* function = field(call, "function");
  if (function == nullptr || !function->is_object())
    throw invalid_request(param + ".function must be an object", param + ".function");
  const auto name = get_string(*function, "name");
  if (!name || name->empty())
    throw invalid_request(param + ".function.name must be a non-empty string", param + ".function.name");
  const ojson* args = field(*function, "arguments");
  ojson out = call;
  if (args == nullptr) {
    out["function"]["arguments"] = ojson::object();
  } else if (args->is_string()) {
    if (nesting_depth(args->get<std::string>()) > kMaxNesting)
      throw invalid_request(
          fmt::format("{}.function.arguments nests deeper than {} levels", param, kMaxNesting),
          param + ".function.arguments");
    const ojson parsed = ojson::parse(args->get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object())
      throw invalid_request(param + ".function.arguments must be a JSON object (as a string or an object)",
                            param + ".function.arguments");
  } else if (!args->is_object()) {
    wrong_type(param + ".function.arguments", "a JSON object (as a string or an object)", *args);
  }
  return out;
}

ojson read_messages(const ojson& body) {
  const ojson* messages = field(body, "messages");
  if (messages == nullptr) throw invalid_request("messages is required", "messages");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) throw invalid_request("messages must not be empty", "messages");
  ojson out = ojson::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const ojson& m = (*messages)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(p, "an object", m);
    const auto role = get_string(m, "role");
    if (!role) throw invalid_request(p + ".role is required", p + ".role");
    ojson msg = m;
    if (*role == "developer") {
      msg["role"] = "system";  // OpenAI's newer name for the system role
    } else if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool") {
      throw invalid_request(
          p + ".role: unknown role \"" + *role + "\" (expected system, developer, user, assistant or tool)",
          p + ".role");
    }
    if (const auto it = m.find("content"); it != m.end()) check_content(*it, p + ".content");
    if (*role == "assistant") {
      // vLLM's name for the reasoning field.
      if (field(m, "reasoning") != nullptr && field(m, "reasoning_content") == nullptr) {
        msg["reasoning_content"] = m["reasoning"];
        msg.erase("reasoning");
      }
      if (const ojson* r = field(msg, "reasoning_content"); r != nullptr && !r->is_string())
        wrong_type(p + ".reasoning_content", "a string", *r);
      if (const ojson* calls = field(m, "tool_calls")) {
        if (!calls->is_array()) wrong_type(p + ".tool_calls", "an array", *calls);
        for (size_t j = 0; j < calls->size(); ++j)
          msg["tool_calls"][j] = read_tool_call((*calls)[j], fmt::format("{}.tool_calls[{}]", p, j));
      }
    } else if (field(m, "tool_calls") != nullptr) {
      throw invalid_request(p + ".tool_calls: only assistant messages carry tool calls", p + ".tool_calls");
    }
    if (const ojson* id = field(m, "tool_call_id"); id != nullptr && !id->is_string())
      wrong_type(p + ".tool_call_id", "a string", *id);
    out.push_back(std::move(msg));
  }
  return out;
}

// The tools the model may call (null when none), and the tool_choice: tool_choice none renders
// the conversation without them; `strict` says a function asks for strict arguments.
ojson read_tools(const ojson& body, ToolChoice& choice, bool& strict) {
  strict = false;
  const ojson* tools = field(body, "tools");
  if (tools != nullptr) {
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object()) wrong_type(p, "an object", t);
      const auto type = get_string(t, "type");
      if (type && *type != "function")
        throw invalid_request(p + ".type: only function tools are supported, got \"" + *type + "\"",
                              p + ".type");
      const ojson* f = field(t, "function");
      if (f == nullptr || !f->is_object())
        throw invalid_request(p + ".function must be an object", p + ".function");
      const auto name = get_string(*f, "name");
      if (!name || name->empty())
        throw invalid_request(p + ".function.name must be a non-empty string", p + ".function.name");
      if (const ojson* params = field(*f, "parameters"); params != nullptr && !params->is_object())
        wrong_type(p + ".function.parameters", "a JSON Schema object", *params);
      strict |= get_bool(*f, "strict").value_or(false);
    }
  }
  choice = {};
  if (const ojson* c = field(body, "tool_choice")) {
    if (c->is_object()) {
      const ojson* f = field(*c, "function");
      const auto name = f != nullptr && f->is_object() ? get_string(*f, "name") : std::nullopt;
      if (get_string(*c, "type") != "function" || !name || name->empty())
        throw invalid_request(
            "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
            "{\"name\": ...}}",
            "tool_choice");
      choice = {ToolChoice::Mode::kNamed, *name};
    } else {
      if (!c->is_string()) wrong_type("tool_choice", "a string or an object", *c);
      const std::string mode = c->get<std::string>();
      if (mode == "required")
        choice.mode = ToolChoice::Mode::kRequired;
      else if (mode == "none")
        return nullptr;
      else if (mode != "auto")
        throw invalid_request(
            "tool_choice must be \"auto\", \"none\", \"required\" or a named function, got \"" + mode + "\"",
            "tool_choice");
    }
  }
  return tools != nullptr && !tools->empty() ? *tools : ojson();
}

ojson read_kwargs(const ojson& body, const RequestDefaults& d) {
  ojson kwargs = d.chat_template_kwargs;
  if (const auto effort = get_string(body, "reasoning_effort")) {
    if (*effort == "none")
      kwargs["enable_thinking"] = false;
    else if (*effort != "minimal" && *effort != "low" && *effort != "medium" && *effort != "high")
      throw invalid_request("reasoning_effort must be none, minimal, low, medium or high",
                            "reasoning_effort");
  }
  if (const ojson* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object()) wrong_type("chat_template_kwargs", "an object", *k);
    for (const auto& [key, value] : k->items()) kwargs[key] = value;
  }
  return kwargs;
}

ChatTemplateInput read_conversation(const ojson& body, const RequestDefaults& d, ToolChoice& choice,
                                    bool& strict) {
  ChatTemplateInput in;
  in.messages = read_messages(body);
  in.tools = read_tools(body, choice, strict);
  in.kwargs = read_kwargs(body, d);
  return in;
}

}  // namespace

uint64_t seed_value(int64_t seed) {
  return seed < 0 ? std::random_device{}() * 0x9E3779B97F4A7C15ull + std::random_device{}()
                  : static_cast<uint64_t>(seed);
}

SamplingParams default_sampling(const RequestDefaults& d) {
  SamplingParams s = d.sampling;
  s.seed = seed_value(d.seed);
  return s;
}

ojson parse_body(const std::string& body) {
  if (nesting_depth(body) > kMaxNesting)
    throw invalid_request(
        fmt::format("the request body nests arrays and objects deeper than {} levels", kMaxNesting));
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const ojson::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 3: ..." (or
    // out_of_range.406 "number overflow parsing '1e999'")
    const std::string what = e.what();
    const size_t at = what.find("] ");
    throw invalid_request("the request body is not valid JSON: " +
                          (at == std::string::npos ? what : what.substr(at + 2)));
  }
  if (!j.is_object()) throw invalid_request("the request body must be a JSON object, got " + type_name(j));
  return j;
}

CompletionRequest parse_chat_request(const ojson& body, const RequestDefaults& d) {
  refuse_unsupported(body);
  CompletionRequest r;
  r.chat = true;
  ToolChoice choice;
  bool strict = false;
  r.conversation = read_conversation(body, d, choice, strict);
  r.tool_calls = !r.conversation.tools.is_null();
  r.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
  r.reasoning_format = d.reasoning_format;
  if (const auto f = get_string(body, "reasoning_format")) {
    if (*f == "none")
      r.reasoning_format = ReasoningFormat::kNone;
    else if (*f == "deepseek" || *f == "auto")
      r.reasoning_format = ReasoningFormat::kParsed;
    else
      throw invalid_request("reasoning_format must be \"none\", \"deepseek\" or \"auto\", got \"" + *f + "\"",
                            "reasoning_format");
  }
  read_sampling(body, d, r);
  r.constraint = read_constraint(body);
  add_constraint(r.constraint,
                 tool_constraint(r.conversation.tools, choice, strict, r.parallel_tool_calls,
                                 strict && choice.mode == ToolChoice::Mode::kAuto ? "tools" : "tool_choice"));
  r.logprobs = get_bool(body, "logprobs").value_or(false);
  if (const auto top = get_integer(body, "top_logprobs", 0, 20)) {
    if (!r.logprobs) throw invalid_request("top_logprobs needs logprobs: true", "top_logprobs");
    r.top_logprobs = static_cast<int>(*top);
  }
  return r;
}

CompletionRequest parse_completion_request(const ojson& body, const RequestDefaults& d) {
  refuse_unsupported(body);
  if (get_bool(body, "echo").value_or(false)) unsupported("echo", "echo is not supported");
  if (const auto s = get_string(body, "suffix"); s && !s->empty())
    unsupported("suffix", "suffix (fill in the middle) is not supported");
  if (const auto b = get_integer(body, "best_of", 1, 128); b && *b != 1)
    unsupported("best_of", "best_of must be 1: this server generates one choice per request");
  CompletionRequest r;
  r.chat = false;
  const ojson* prompt = field(body, "prompt");
  if (prompt == nullptr) throw invalid_request("prompt is required", "prompt");
  const ojson* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text.empty()) throw invalid_request("prompt must not be empty", "prompt");
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    for (size_t i = 0; i < p->size(); ++i) {
      const ojson& t = (*p)[i];
      if (!t.is_number_integer()) wrong_type(fmt::format("prompt[{}]", i), "a token id", t);
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= d.vocab_size)
        throw invalid_request(
            fmt::format("prompt[{}]: token id {} is out of range (0 .. {})", i, t.dump(), d.vocab_size - 1),
            "prompt");
      r.prompt_ids.push_back(static_cast<int32_t>(id));
    }
  } else if (prompt->is_array() && prompt->size() > 1) {
    unsupported("prompt", "one prompt per request: send several prompts as separate requests");
  } else {
    wrong_type("prompt", "a string, an array of token ids, or an array holding one of those", *prompt);
  }
  read_sampling(body, d, r);
  r.constraint = read_constraint(body);
  if (const ojson* lp = field(body, "logprobs")) {
    if (lp->is_boolean()) {
      r.logprobs = lp->get<bool>();
    } else {
      const auto n = get_integer(body, "logprobs", 0, 20);
      r.logprobs = true;
      r.top_logprobs = static_cast<int>(*n);
    }
  }
  return r;
}

ChatTemplateInput parse_template_request(const ojson& body, const RequestDefaults& d) {
  ToolChoice choice;  // the template does not depend on it
  bool strict = false;
  ChatTemplateInput in = read_conversation(body, d, choice, strict);
  in.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  return in;
}

}  // namespace qwick
