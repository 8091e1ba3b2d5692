#include "server/anthropic_request.h"

#include <limits>
#include <set>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

// The blocks of a content field: a string is one text block.
ojson blocks_of(const ojson& content, const std::string& param) {
  if (content.is_string()) return ojson::array({{{"type", "text"}, {"text", content}}});
  if (!content.is_array()) wrong_type(param, "a string or an array of content blocks", content);
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!content[i].is_object()) wrong_type(p, "a content block object", content[i]);
    if (!get_string(content[i], "type")) throw invalid_request(p + ".type must be a string", p + ".type");
  }
  return content;
}

std::string block_text(const ojson& block, const std::string& param) {
  const auto text = get_string(block, "text");
  if (!text) throw invalid_request(param + ".text must be a string", param + ".text");
  return *text;
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& param, const char* where) {
  if (type == "image" || type == "document")
    throw invalid_request(param + ": " + type + " blocks are not supported (this server runs the text model)",
                          param + ".type");
  throw invalid_request(param + ": content block type \"" + type + "\" is not supported in " + where,
                        param + ".type");
}

// The text of a system prompt or a tool result: a string or text blocks.
std::string plain_text(const ojson& content, const std::string& param, const char* where) {
  std::string text;
  const ojson blocks = blocks_of(content, param);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", param, i);
    const std::string type = blocks[i]["type"].get<std::string>();
    if (type != "text") unsupported_block(type, p, where);
    if (!text.empty()) text += "\n";
    text += block_text(blocks[i], p);
  }
  return text;
}

ojson assistant_message(const ojson& blocks, const std::string& param, std::set<std::string>& tool_ids) {
  ojson msg = {{"role", "assistant"}};
  std::string content, reasoning;
  ojson calls = ojson::array();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const ojson& b = blocks[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      content += block_text(b, p);
    } else if (type == "thinking") {
      const auto thinking = get_string(b, "thinking");
      if (!thinking) throw invalid_request(p + ".thinking must be a string", p + ".thinking");
      reasoning += *thinking;
    } else if (type == "redacted_thinking") {
      // Encrypted reasoning of another model: nothing this one can read.
    } else if (type == "tool_use") {
      const auto id = get_string(b, "id");
      const auto name = get_string(b, "name");
      if (!id || id->empty()) throw invalid_request(p + ".id must be a non-empty string", p + ".id");
      if (!name || name->empty()) throw invalid_request(p + ".name must be a non-empty string", p + ".name");
      const ojson* input = field(b, "input");
      if (input != nullptr && !input->is_object()) wrong_type(p + ".input", "an object", *input);
      tool_ids.insert(*id);
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", input ? *input : ojson::object()}}}});
    } else {
      unsupported_block(type, p, "assistant messages");
    }
  }
  msg["content"] = content;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  return msg;
}

// A user turn: its tool results as tool messages, then its text (if any) as a user message.
void user_messages(const ojson& blocks, const std::string& param, const std::set<std::string>& tool_ids,
                   ojson& out) {
  ojson parts = ojson::array();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const ojson& b = blocks[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      parts.push_back({{"type", "text"}, {"text", block_text(b, p)}});
    } else if (type == "tool_result") {
      const auto id = get_string(b, "tool_use_id");
      if (!id) throw invalid_request(p + ".tool_use_id must be a string", p + ".tool_use_id");
      if (!tool_ids.contains(*id))
        throw invalid_request(
            p + ": tool_result for \"" + *id + "\", which no earlier assistant tool_use issued",
            p + ".tool_use_id");
      const ojson* content = field(b, "content");
      std::string result = content ? plain_text(*content, p + ".content", "tool results") : "";
      if (get_bool(b, "is_error").value_or(false)) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else {
      unsupported_block(type, p, "user messages");
    }
  }
  if (!parts.empty()) out.push_back({{"role", "user"}, {"content", std::move(parts)}});
}

// The template takes one system message, first: the `system` field and any system messages
// among `messages` (Claude Code sends some) are joined into it, in order.
ojson read_messages(const ojson& body) {
  ojson out = ojson::array();
  std::string system;
  auto add_system = [&](const ojson& content, const std::string& param) {
    const std::string text = plain_text(content, param, "system prompts");
    system += (system.empty() ? "" : "\n\n") + text;
  };
  if (const ojson* s = field(body, "system")) add_system(*s, "system");
  const ojson* messages = field(body, "messages");
  if (messages == nullptr) throw invalid_request("messages is required", "messages");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) throw invalid_request("messages must not be empty", "messages");
  std::set<std::string> tool_ids;
  for (size_t i = 0; i < messages->size(); ++i) {
    const ojson& m = (*messages)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(p, "an object", m);
    const auto role = get_string(m, "role");
    const ojson* content = field(m, "content");
    if (content == nullptr) throw invalid_request(p + ".content is required", p + ".content");
    const ojson blocks = blocks_of(*content, p + ".content");
    if (role == "assistant") {
      if (i + 1 == messages->size())
        throw invalid_request(p + ": a final assistant message (prefill) is not supported", p + ".role");
      out.push_back(assistant_message(blocks, p + ".content", tool_ids));
    } else if (role == "user") {
      user_messages(blocks, p + ".content", tool_ids, out);
    } else if (role == "system") {
      add_system(blocks, p + ".content");
    } else {
      throw invalid_request(p + ".role must be \"user\", \"assistant\" or \"system\"", p + ".role");
    }
  }
  if (!system.empty()) out.insert(out.begin(), ojson{{"role", "system"}, {"content", system}});
  return out;
}

// The tools in the template's (OpenAI) form, or null when none may be called; the tool_choice,
// and whether a tool asks for strict arguments.
ojson read_tools(const ojson& body, bool* parallel, ToolChoice& choice_out, bool& strict) {
  strict = false;
  choice_out = {};
  const ojson* tools = field(body, "tools");
  ojson out = ojson::array();
  if (tools != nullptr) {
    if (!tools->is_array()) wrong_type("tools", "an array", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& t = (*tools)[i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object()) wrong_type(p, "an object", t);
      if (const auto type = get_string(t, "type"); type && *type != "custom")
        throw invalid_request(p + ".type: only custom tools are supported, got \"" + *type + "\"",
                              p + ".type");
      const auto name = get_string(t, "name");
      if (!name || name->empty()) throw invalid_request(p + ".name must be a non-empty string", p + ".name");
      const ojson* schema = field(t, "input_schema");
      if (schema == nullptr || !schema->is_object())
        throw invalid_request(p + ".input_schema must be a JSON Schema object", p + ".input_schema");
      strict |= get_bool(t, "strict").value_or(false);
      ojson function = {{"name", *name}};
      if (const auto description = get_string(t, "description")) function["description"] = *description;
      function["parameters"] = *schema;
      out.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
  }
  *parallel = true;
  if (const ojson* choice = field(body, "tool_choice")) {
    if (!choice->is_object()) wrong_type("tool_choice", "an object", *choice);
    const auto type = get_string(*choice, "type");
    if (type == "none") return nullptr;
    if (type == "any") {
      choice_out.mode = ToolChoice::Mode::kRequired;
    } else if (type == "tool") {
      const auto name = get_string(*choice, "name");
      if (!name || name->empty())
        throw invalid_request("tool_choice.name must name the tool to call", "tool_choice.name");
      choice_out = {ToolChoice::Mode::kNamed, *name};
    } else if (type != "auto") {
      throw invalid_request("tool_choice.type must be auto, any, tool or none", "tool_choice.type");
    }
    *parallel = !get_bool(*choice, "disable_parallel_tool_use").value_or(false);
  }
  return out.empty() ? ojson() : out;
}

ojson read_kwargs(const ojson& body, const RequestDefaults& d) {
  ojson kwargs = d.chat_template_kwargs;
  if (const ojson* thinking = field(body, "thinking")) {
    if (!thinking->is_object()) wrong_type("thinking", "an object", *thinking);
    const auto type = get_string(*thinking, "type");
    if (type == "enabled" || type == "adaptive") {
      // budget_tokens is checked, not enforced: the model ends its reasoning itself.
      get_integer(*thinking, "budget_tokens", 0, std::numeric_limits<int32_t>::max());
      kwargs["enable_thinking"] = true;
    } else if (type == "disabled") {
      kwargs["enable_thinking"] = false;
    } else {
      throw invalid_request("thinking.type must be enabled, adaptive or disabled", "thinking.type");
    }
  }
  return kwargs;
}

ChatTemplateInput read_conversation(const ojson& body, const RequestDefaults& d, bool* parallel,
                                    ToolChoice& choice, bool& strict) {
  ChatTemplateInput in;
  in.messages = read_messages(body);
  in.tools = read_tools(body, parallel, choice, strict);
  in.kwargs = read_kwargs(body, d);
  return in;
}

}  // namespace

CompletionRequest parse_messages_request(const ojson& body, const RequestDefaults& d) {
  CompletionRequest r;
  r.chat = true;
  ToolChoice choice;
  bool strict = false;
  r.conversation = read_conversation(body, d, &r.parallel_tool_calls, choice, strict);
  r.tool_calls = !r.conversation.tools.is_null();
  r.constraint = tool_constraint(r.conversation.tools, choice, strict, r.parallel_tool_calls,
                                 strict && choice.mode == ToolChoice::Mode::kAuto ? "tools" : "tool_choice");
  r.reasoning_format = ReasoningFormat::kParsed;
  r.sampling = default_sampling(d);
  SamplingParams& s = r.sampling;
  if (auto x = get_number(body, "temperature", 0, 2)) s.temperature = static_cast<float>(*x);
  if (auto x = get_number(body, "top_p", 0, 1)) s.top_p = static_cast<float>(*x);
  if (auto x = get_integer(body, "top_k", 0, std::numeric_limits<int32_t>::max()))
    s.top_k = static_cast<int>(*x);
  r.max_tokens = d.max_tokens;
  if (auto x = get_integer(body, "max_tokens", 1, std::numeric_limits<int32_t>::max())) r.max_tokens = *x;
  if (const ojson* stops = field(body, "stop_sequences")) {
    if (!stops->is_array()) wrong_type("stop_sequences", "an array of strings", *stops);
    for (size_t i = 0; i < stops->size(); ++i) {
      if (!(*stops)[i].is_string()) wrong_type(fmt::format("stop_sequences[{}]", i), "a string", (*stops)[i]);
      r.stop.push_back((*stops)[i].get<std::string>());
    }
  }
  if (const ojson* metadata = field(body, "metadata"); metadata && !metadata->is_object())
    wrong_type("metadata", "an object", *metadata);
  r.stream = get_bool(body, "stream").value_or(false);
  r.cache_prompt = d.cache_prompt;
  return r;
}

ChatTemplateInput parse_count_tokens_request(const ojson& body, const RequestDefaults& d) {
  bool parallel = true, strict = false;
  ToolChoice choice;  // counting does not depend on it
  return read_conversation(body, d, &parallel, choice, strict);
}

}  // namespace qwick
