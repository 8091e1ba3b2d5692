#include "server/responses_request.h"

#include <limits>
#include <set>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

// A message item's text: a string, or input_text / output_text parts.
std::string message_text(const ojson& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(param, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!part.is_object()) wrong_type(p, "a content part object", part);
    const auto type = get_string(part, "type");
    if (type != "input_text" && type != "output_text" && type != "text") {
      if (type == "input_image" || type == "input_file" || type == "input_audio")
        throw invalid_request(p + ": " + *type + " is not supported (this server runs the text model)",
                              p + ".type");
      throw invalid_request(p + ".type must be input_text or output_text", p + ".type");
    }
    const auto t = get_string(part, "text");
    if (!t) throw invalid_request(p + ".text must be a string", p + ".text");
    text += *t;
  }
  return text;
}

// Builds the template's messages from input items.
class Conversation {
 public:
  explicit Conversation(const ojson& previous) {
    if (!previous.is_array()) return;
    messages_ = previous;
    for (const ojson& m : messages_)
      if (const auto it = m.find("tool_calls"); it != m.end())
        for (const ojson& c : *it) call_ids_.insert(c["id"].get<std::string>());
  }

  void add(const ojson& item, const std::string& p) {
    if (!item.is_object()) wrong_type(p, "an input item object", item);
    const std::string type = get_string(item, "type").value_or("message");
    if (type == "message")
      message(item, p);
    else if (type == "function_call")
      function_call(item, p);
    else if (type == "function_call_output")
      function_call_output(item, p);
    else if (type == "reasoning")
      reasoning(item, p);
    else
      throw invalid_request(p + ".type: input item type \"" + type + "\" is not supported", p + ".type");
  }

  ojson take() {
    if (!pending_reasoning_.empty())
      messages_.push_back(
          {{"role", "assistant"}, {"content", ""}, {"reasoning_content", pending_reasoning_}});
    return std::move(messages_);
  }

 private:
  void message(const ojson& item, const std::string& p) {
    const auto role = get_string(item, "role");
    const ojson* content = field(item, "content");
    if (content == nullptr) throw invalid_request(p + ".content is required", p + ".content");
    const std::string text = message_text(*content, p + ".content");
    if (role == "assistant") {
      ojson& m = assistant();
      m["content"] = m["content"].get<std::string>() + text;
    } else if (role == "user" || role == "system" || role == "developer") {
      messages_.push_back({{"role", role == "developer" ? "system" : *role}, {"content", text}});
    } else {
      throw invalid_request(p + ".role must be user, assistant, system or developer", p + ".role");
    }
  }

  void function_call(const ojson& item, const std::string& p) {
    const auto call_id = get_string(item, "call_id");
    const auto name = get_string(item, "name");
    const auto arguments = get_string(item, "arguments");
    if (!call_id || call_id->empty())
      throw invalid_request(p + ".call_id must be a non-empty string", p + ".call_id");
    if (!name || name->empty()) throw invalid_request(p + ".name must be a non-empty string", p + ".name");
    if (!arguments)
      throw invalid_request(p + ".arguments must be a string (a JSON object)", p + ".arguments");
    if (nesting_depth(*arguments) > kMaxNesting)
      throw invalid_request(fmt::format("{}.arguments nests deeper than {} levels", p, kMaxNesting),
                            p + ".arguments");
    const ojson parsed = ojson::parse(*arguments, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object())
      throw invalid_request(p + ".arguments must be a JSON object (as a string)", p + ".arguments");
    call_ids_.insert(*call_id);
    assistant()["tool_calls"].push_back(
        {{"id", *call_id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", parsed}}}});
  }

  void function_call_output(const ojson& item, const std::string& p) {
    const auto call_id = get_string(item, "call_id");
    if (!call_id) throw invalid_request(p + ".call_id must be a string", p + ".call_id");
    if (!call_ids_.contains(*call_id))
      throw invalid_request(
          p + ": output for call_id \"" + *call_id + "\", which no earlier function_call issued",
          p + ".call_id");
    const ojson* output = field(item, "output");
    if (output == nullptr) throw invalid_request(p + ".output is required", p + ".output");
    messages_.push_back(
        {{"role", "tool"}, {"tool_call_id", *call_id}, {"content", message_text(*output, p + ".output")}});
  }

  void reasoning(const ojson& item, const std::string& p) {
    std::string text;
    for (const char* name : {"content", "summary"}) {
      const ojson* parts = field(item, name);
      if (parts == nullptr) continue;
      if (!parts->is_array()) wrong_type(p + "." + name, "an array", *parts);
      for (size_t i = 0; i < parts->size(); ++i) {
        const std::string pp = fmt::format("{}.{}[{}]", p, name, i);
        if (!(*parts)[i].is_object()) wrong_type(pp, "an object", (*parts)[i]);
        const auto t = get_string((*parts)[i], "text");
        if (!t) throw invalid_request(pp + ".text must be a string", pp + ".text");
        text += *t;
      }
      if (!text.empty()) break;  // the full reasoning when given, else its summary
    }
    pending_reasoning_ += text;
  }

  // The assistant message items extend: the last message when it is an assistant one not yet
  // answered by tool results, else a new one (which takes the reasoning that came before it).
  ojson& assistant() {
    if (messages_.empty() || messages_.back()["role"] != "assistant" || !pending_reasoning_.empty()) {
      messages_.push_back({{"role", "assistant"}, {"content", ""}});
      if (!pending_reasoning_.empty())
        messages_.back()["reasoning_content"] = std::exchange(pending_reasoning_, {});
    }
    return messages_.back();
  }

  ojson messages_ = ojson::array();
  std::set<std::string> call_ids_;
  std::string pending_reasoning_;
};

// The tools the model may call (null when none), the tool_choice, and whether a tool asks for
// strict arguments.
ojson read_tools(const ojson& body, bool& may_call, ToolChoice& choice, bool& strict) {
  ojson out = ojson::array();
  strict = false;
  choice = {};
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object()) wrong_type(p, "an object", t);
      const auto type = get_string(t, "type");
      if (type != "function")
        throw invalid_request(
            p + ".type: only function tools are supported, got " + (type ? "\"" + *type + "\"" : "none"),
            p + ".type");
      const auto name = get_string(t, "name");
      if (!name || name->empty()) throw invalid_request(p + ".name must be a non-empty string", p + ".name");
      const ojson* params = field(t, "parameters");
      if (params != nullptr && !params->is_object())
        wrong_type(p + ".parameters", "a JSON Schema object", *params);
      strict |= get_bool(t, "strict").value_or(false);
      ojson function = {{"name", *name}};
      if (const auto d = get_string(t, "description")) function["description"] = *d;
      function["parameters"] = params ? *params : ojson::object();
      out.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
  }
  may_call = !out.empty();
  if (const ojson* c = field(body, "tool_choice")) {
    if (c->is_object()) {
      const auto name = get_string(*c, "name");
      if (get_string(*c, "type") != "function" || !name || name->empty())
        throw invalid_request(
            "tool_choice must be auto, none, required or {\"type\": \"function\", \"name\": ...} "
            "(allowed_tools "
            "and built-in tools are not supported)",
            "tool_choice");
      choice = {ToolChoice::Mode::kNamed, *name};
    } else {
      if (!c->is_string()) wrong_type("tool_choice", "a string or an object", *c);
      if (*c == "required")
        choice.mode = ToolChoice::Mode::kRequired;
      else if (*c == "none")
        may_call = false;
      else if (*c != "auto")
        throw invalid_request("tool_choice must be auto, none, required or a named function", "tool_choice");
    }
  }
  return out.empty() || !may_call ? ojson() : out;
}

void refuse_unsupported(const ojson& body) {
  if (get_bool(body, "background").value_or(false))
    throw invalid_request("background responses are not supported", "background");
  if (field(body, "conversation") != nullptr)
    throw invalid_request("conversation objects are not supported; use previous_response_id", "conversation");
  if (field(body, "prompt") != nullptr) throw invalid_request("prompt templates are not supported", "prompt");
  if (get_integer(body, "top_logprobs", 0, 20).value_or(0) > 0)
    throw invalid_request("top_logprobs is not supported on /v1/responses", "top_logprobs");
}

// text.format: text (free), json_object, or json_schema {name, schema, strict} (flat, unlike Chat
// Completions' response_format). Null when absent.
const ojson* read_text_format(const ojson& body, std::optional<RequestedConstraint>& constraint) {
  const ojson* text = field(body, "text");
  if (text == nullptr) return nullptr;
  if (!text->is_object()) wrong_type("text", "an object", *text);
  const ojson* format = field(*text, "format");
  if (format == nullptr) return nullptr;
  if (!format->is_object()) wrong_type("text.format", "an object", *format);
  const auto type = get_string(*format, "type");
  if (type == "json_object") {
    constraint = RequestedConstraint{ConstraintSpec::json_object(), "text.format"};
  } else if (type == "json_schema") {
    const ojson* schema = field(*format, "schema");
    if (schema == nullptr || (!schema->is_object() && !schema->is_boolean()))
      throw invalid_request("text.format.schema must be a JSON Schema", "text.format.schema");
    get_bool(*format, "strict");  // type-checked; the schema is enforced either way
    constraint = RequestedConstraint{ConstraintSpec::json_schema(*schema), "text.format"};
  } else if (type != "text") {
    throw invalid_request("text.format.type must be text, json_object or json_schema", "text.format.type");
  }
  return format;
}

}  // namespace

std::string previous_response_id(const ojson& body) {
  return get_string(body, "previous_response_id").value_or("");
}

ResponsesRequest parse_responses_request(const ojson& body, const RequestDefaults& d, const ojson& previous) {
  refuse_unsupported(body);
  ResponsesRequest r;
  r.previous_response_id = previous_response_id(body);
  CompletionRequest& c = r.chat;
  c.chat = true;

  Conversation conversation(previous);
  const ojson* input = field(body, "input");
  if (input == nullptr) throw invalid_request("input is required", "input");
  if (input->is_string()) {
    conversation.add({{"role", "user"}, {"content", *input}}, "input");
  } else if (input->is_array()) {
    for (size_t i = 0; i < input->size(); ++i) conversation.add((*input)[i], fmt::format("input[{}]", i));
  } else {
    wrong_type("input", "a string or an array of input items", *input);
  }
  r.history = conversation.take();
  if (r.history.empty()) throw invalid_request("input must not be empty", "input");

  // The instructions and the leading system messages: one system message first.
  const auto instructions = get_string(body, "instructions");
  std::string system = instructions.value_or("");
  size_t first = 0;
  for (; first < r.history.size() && r.history[first]["role"] == "system"; ++first)
    system += (system.empty() ? "" : "\n\n") + r.history[first]["content"].get<std::string>();
  ojson messages = ojson::array();
  if (!system.empty() || first > 0) messages.push_back({{"role", "system"}, {"content", system}});
  for (size_t i = first; i < r.history.size(); ++i) messages.push_back(r.history[i]);
  c.conversation.messages = std::move(messages);
  ToolChoice choice;
  bool strict = false;
  c.conversation.tools = read_tools(body, c.tool_calls, choice, strict);
  c.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
  const ojson* format = read_text_format(body, c.constraint);
  add_constraint(c.constraint,
                 tool_constraint(c.conversation.tools, choice, strict, c.parallel_tool_calls,
                                 strict && choice.mode == ToolChoice::Mode::kAuto ? "tools" : "tool_choice"));

  c.conversation.kwargs = d.chat_template_kwargs;
  ojson reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (const ojson* rs = field(body, "reasoning")) {
    if (!rs->is_object()) wrong_type("reasoning", "an object", *rs);
    if (const auto effort = get_string(*rs, "effort")) {
      static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium", "high", "xhigh"};
      if (!kEfforts.contains(*effort))
        throw invalid_request("reasoning.effort must be none, minimal, low, medium, high or xhigh",
                              "reasoning.effort");
      if (*effort == "none") c.conversation.kwargs["enable_thinking"] = false;
      reasoning["effort"] = *effort;
    }
    if (const auto summary = get_string(*rs, "summary")) reasoning["summary"] = *summary;
  }
  c.reasoning_format = ReasoningFormat::kParsed;

  c.sampling = default_sampling(d);
  // The response repeats the values as sent (not as floats), else the server's defaults.
  const double temperature = get_number(body, "temperature", 0, 2).value_or(c.sampling.temperature);
  const double top_p = get_number(body, "top_p", 0, 1).value_or(c.sampling.top_p);
  c.sampling.temperature = static_cast<float>(temperature);
  c.sampling.top_p = static_cast<float>(top_p);
  c.max_tokens = d.max_tokens;
  const auto max_output = get_integer(body, "max_output_tokens", 1, std::numeric_limits<int32_t>::max());
  if (max_output) c.max_tokens = *max_output;
  c.stream = get_bool(body, "stream").value_or(false);
  c.cache_prompt = d.cache_prompt;
  r.store = get_bool(body, "store").value_or(true);
  const ojson* metadata = field(body, "metadata");
  if (metadata != nullptr && !metadata->is_object()) wrong_type("metadata", "an object", *metadata);

  const ojson* tools = field(body, "tools");
  const ojson* choice_sent = field(body, "tool_choice");
  r.echo = {
      {"instructions", instructions ? ojson(*instructions) : ojson()},
      {"max_output_tokens", max_output ? ojson(*max_output) : ojson()},
      {"metadata", metadata ? *metadata : ojson::object()},
      {"parallel_tool_calls", c.parallel_tool_calls},
      {"previous_response_id", r.previous_response_id.empty() ? ojson() : ojson(r.previous_response_id)},
      {"reasoning", reasoning},
      {"store", r.store},
      {"temperature", temperature},
      {"text", {{"format", format != nullptr ? *format : ojson{{"type", "text"}}}}},
      {"tool_choice", choice_sent != nullptr ? *choice_sent : ojson("auto")},
      {"tools", tools ? *tools : ojson::array()},
      {"top_p", top_p},
      {"truncation", "disabled"}};
  return r;
}

}  // namespace qwick
