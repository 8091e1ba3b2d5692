#include "text/chat_template.h"

#include "text/builtin_templates.h"
#include "text/python_json.h"
#include "text/utf8.h"

// Each block below names the template lines it implements; Jinja semantics are copied where the
// template depends on them: an undefined value renders as "", `x in y` is key lookup on a mapping,
// substring on a string and membership on a list, |trim is Python's str.strip().

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kToolsHeader =
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view kToolsInstructions =
    "\n"
    "\n"
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n"
    "\n"
    "<tool_call>\n"
    "<function=example_function_name>\n"
    "<parameter=example_parameter_1>\n"
    "value_1\n"
    "</parameter>\n"
    "<parameter=example_parameter_2>\n"
    "This is the value for the second parameter\n"
    "that can span\n"
    "multiple lines\n"
    "</parameter>\n"
    "</function>\n"
    "</tool_call>\n"
    "\n"
    "<IMPORTANT>\n"
    "Reminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be "
    "nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function "
    "call, but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n"
    "</IMPORTANT>";

[[noreturn]] void raise(const std::string& message) {
  throw ChatTemplateError(message);
}

// `object.key`: nullptr when undefined (not an object, or no such key).
const ojson* member(const ojson* object, const char* key) {
  if (object == nullptr || !object->is_object()) return nullptr;
  const auto it = object->find(key);
  return it == object->end() ? nullptr : &*it;
}

bool is_string(const ojson* v, std::string_view text) {
  return v != nullptr && v->is_string() && *v == text;
}

// Jinja/Python truthiness; undefined is false.
bool truthy(const ojson* v) {
  if (v == nullptr || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number_integer() || v->is_number_unsigned()) return v->get<int64_t>() != 0;
  if (v->is_number_float()) return v->get<double>() != 0.0;
  return !v->empty();  // string, array, object
}

// Python's `needle in container`.
bool contains(const ojson& container, const std::string& needle) {
  if (container.is_string()) return container.get_ref<const std::string&>().find(needle) != std::string::npos;
  if (container.is_object()) return container.contains(needle);
  if (container.is_array()) {
    for (const auto& e : container)
      if (e.is_string() && e == needle) return true;
    return false;
  }
  raise("a content part must be an object, got " + container.dump());
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

std::string strip(std::string_view s) {
  return std::string(python_strip(s));
}
std::string lstrip_newlines(std::string_view s) {
  const size_t b = s.find_first_not_of('\n');
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b));
}
std::string rstrip_newlines(std::string_view s) {
  const size_t e = s.find_last_not_of('\n');
  return e == std::string_view::npos ? std::string() : std::string(s.substr(0, e + 1));
}

// `"a" + b` in the template: b must be a string (Python raises on anything else).
const std::string& text_of(const ojson* v, const char* what) {
  if (v == nullptr || !v->is_string()) raise(std::string(what) + " must be a string");
  return v->get_ref<const std::string&>();
}

class Renderer {
 public:
  Renderer(const ChatTemplateInput& input, ChatTemplateKind kind) : in_(input), kind_(kind) {}
  std::string render();

 private:
  std::string render_content(const ojson* content, bool do_vision_count, bool is_system_content);
  void render_assistant(const ojson& message, std::string content, size_t index);
  void render_tool_call(const ojson* call, bool first, const std::string& content);
  void emit(std::initializer_list<std::string_view> parts) {
    for (std::string_view p : parts) out_.append(p);
  }
  bool kwarg_is(const char* name, bool value) const {
    const ojson* v = member(&in_.kwargs, name);
    return v != nullptr && v->is_boolean() && v->get<bool>() == value;
  }

  const ChatTemplateInput& in_;
  ChatTemplateKind kind_;
  std::string out_;
  int image_count_ = 0, video_count_ = 0;
  size_t last_query_index_ = 0;
};

// macro render_content(content, do_vision_count, is_system_content=false)
std::string Renderer::render_content(const ojson* content, bool do_vision_count, bool is_system_content) {
  if (content == nullptr || content->is_null()) return "";
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) raise("Unexpected content type.");
  const bool vision_id = truthy(member(&in_.kwargs, "add_vision_id"));
  std::string out;
  for (const ojson& item : *content) {
    const ojson* type = member(&item, "type");
    if (contains(item, "image") || contains(item, "image_url") || is_string(type, "image")) {
      if (is_system_content) raise("System message cannot contain images.");
      if (do_vision_count) ++image_count_;
      if (vision_id) out += "Picture " + std::to_string(image_count_) + ": ";
      out += "<|vision_start|><|image_pad|><|vision_end|>";
    } else if (contains(item, "video") || is_string(type, "video")) {
      if (is_system_content) raise("System message cannot contain videos.");
      if (do_vision_count) ++video_count_;
      if (vision_id) out += "Video " + std::to_string(video_count_) + ": ";
      out += "<|vision_start|><|video_pad|><|vision_end|>";
    } else if (contains(item, "text")) {
      // {{ item.text }}: undefined (a string or list part) renders as nothing.
      if (const ojson* text = member(&item, "text")) {
        if (text->is_structured()) raise("a text part's text must be a string, got " + text->dump());
        out += python_str(*text);
      }
    } else {
      raise("Unexpected item type in content.");
    }
  }
  return out;
}

std::string Renderer::render() {
  const ojson& messages = in_.messages;
  if (messages.is_null() || (messages.is_array() && messages.empty())) raise("No messages provided.");
  if (!messages.is_array()) raise("messages must be a list");
  // `tools and tools is iterable and tools is not mapping`: a non-empty list gives the tools block,
  // a mapping, number or boolean is ignored. (The template would list a string's characters as
  // tools; that is refused instead.)
  const ojson& tools = in_.tools;
  if (tools.is_string()) raise("tools must be a list, got a string");

  // The system turn, with the tools block when there are tools.
  const bool system_first = is_string(member(&messages[0], "role"), "system");
  if (tools.is_array() && !tools.empty()) {
    out_ += kToolsHeader;
    for (const ojson& tool : tools) emit({"\n", python_json_dumps(tool)});
    out_ += "\n</tools>";
    out_ += kToolsInstructions;
    if (system_first) {
      const std::string content = strip(render_content(member(&messages[0], "content"), false, true));
      if (!content.empty()) emit({"\n\n", content});
    }
    out_ += "<|im_end|>\n";
  } else if (system_first) {
    emit({"<|im_start|>system\n", strip(render_content(member(&messages[0], "content"), false, true)),
          "<|im_end|>\n"});
  }

  // The last real user query: the last user message that is not only a tool response.
  bool multi_step_tool = true;
  last_query_index_ = messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    if (!multi_step_tool || !is_string(member(&messages[i], "role"), "user")) continue;
    const std::string content = strip(render_content(member(&messages[i], "content"), false, false));
    if (!(starts_with(content, "<tool_response>") && ends_with(content, "</tool_response>"))) {
      multi_step_tool = false;
      last_query_index_ = i;
    }
  }
  if (multi_step_tool) raise("No user query found in messages.");

  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& message = messages[i];
    std::string content = strip(render_content(member(&message, "content"), true, false));
    const ojson* role = member(&message, "role");
    if (is_string(role, "system")) {
      if (i != 0) raise("System message must be at the beginning.");
    } else if (is_string(role, "user")) {
      emit({"<|im_start|>user\n", content, "<|im_end|>\n"});
    } else if (is_string(role, "assistant")) {
      render_assistant(message, std::move(content), i);
    } else if (is_string(role, "tool")) {
      // Consecutive tool results share one user turn (a first message has no previtem: no header).
      if (i > 0 && truthy(&messages[i - 1]) && !is_string(member(&messages[i - 1], "role"), "tool"))
        out_ += "<|im_start|>user";
      emit({"\n<tool_response>\n", content, "\n</tool_response>"});
      if (i + 1 == messages.size() || !is_string(member(&messages[i + 1], "role"), "tool"))
        out_ += "<|im_end|>\n";
    } else {
      raise("Unexpected message role.");
    }
  }

  if (in_.add_generation_prompt) {
    out_ += "<|im_start|>assistant\n";
    out_ += kwarg_is("enable_thinking", false) ? "<think>\n\n</think>\n\n" : "<think>\n";
  }
  return std::move(out_);
}

void Renderer::render_assistant(const ojson& message, std::string content, size_t index) {
  std::string reasoning;
  if (const ojson* rc = member(&message, "reasoning_content"); rc != nullptr && rc->is_string()) {
    reasoning = rc->get<std::string>();
  } else if (const size_t close = content.find("</think>"); close != std::string::npos) {
    const std::string before = rstrip_newlines(std::string_view(content).substr(0, close));
    const size_t open = before.rfind("<think>");
    reasoning = lstrip_newlines(open == std::string::npos ? before : before.substr(open + 7));
    content = lstrip_newlines(std::string_view(content).substr(content.rfind("</think>") + 8));
  }
  reasoning = strip(reasoning);
  const bool preserve = kind_ == ChatTemplateKind::kQwen36 && kwarg_is("preserve_thinking", true);
  if (preserve || index > last_query_index_)
    emit({"<|im_start|>assistant\n<think>\n", reasoning, "\n</think>\n\n", content});
  else
    emit({"<|im_start|>assistant\n", content});

  // `tool_calls is iterable and not mapping`: a list is rendered, a mapping or a number skipped;
  // a string would be iterated by character and fail on the first (it has no name).
  const ojson* calls = member(&message, "tool_calls");
  if (truthy(calls) && calls->is_string()) raise("tool_calls must be a list, got a string");
  if (truthy(calls) && calls->is_array())
    for (size_t j = 0; j < calls->size(); ++j) render_tool_call(&(*calls)[j], j == 0, content);
  out_ += "<|im_end|>\n";
}

void Renderer::render_tool_call(const ojson* call, bool first, const std::string& content) {
  if (const ojson* function = member(call, "function")) call = function;
  const std::string& name = text_of(member(call, "name"), "a tool call's function name");
  if (!first)
    emit({"\n<tool_call>\n<function=", name, ">\n"});
  else if (!python_strip(content).empty())
    emit({"\n\n<tool_call>\n<function=", name, ">\n"});
  else
    emit({"<tool_call>\n<function=", name, ">\n"});
  if (const ojson* args = member(call, "arguments")) {
    if (!args->is_object()) raise("tool call arguments must be a JSON object, got " + args->dump());
    for (const auto& [key, value] : args->items()) {
      emit({"<parameter=", key, ">\n"});
      if (value.is_string())
        out_ += value.get<std::string>();
      else if (kind_ == ChatTemplateKind::kQwen36 || value.is_object() || value.is_array())
        out_ += python_json_dumps(value);
      else
        out_ += python_str(value);  // Qwen3.5: `args_value | string`
      out_ += "\n</parameter>\n";
    }
  }
  out_ += "</function>\n</tool_call>";
}

// Tool-call arguments sent as a JSON string (OpenAI's wire form) become the object they encode.
// Returns nullptr when nothing needs parsing, so the common case copies nothing.
std::unique_ptr<ojson> parse_string_arguments(const ojson& messages) {
  auto needs = [](const ojson& call) {
    const ojson* target = member(&call, "function") ? member(&call, "function") : &call;
    const ojson* args = member(target, "arguments");
    return args != nullptr && args->is_string();
  };
  bool any = false;
  if (messages.is_array())
    for (const ojson& m : messages)
      if (const ojson* calls = member(&m, "tool_calls"); calls != nullptr && calls->is_array())
        for (const ojson& c : *calls) any = any || needs(c);
  if (!any) return nullptr;
  auto copy = std::make_unique<ojson>(messages);
  for (ojson& m : *copy) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (ojson& c : m["tool_calls"]) {
      if (!needs(c)) continue;
      ojson& target = member(&c, "function") ? c["function"] : c;
      const std::string text = target["arguments"].get<std::string>();
      ojson parsed = ojson::parse(text, nullptr, false);
      if (parsed.is_discarded()) raise("tool call arguments are not valid JSON: " + text);
      target["arguments"] = std::move(parsed);
    }
  }
  return copy;
}

}  // namespace

std::string render_chat_template(const ChatTemplateInput& input, ChatTemplateKind kind) {
  if (const auto parsed = parse_string_arguments(input.messages)) {
    ChatTemplateInput copy{*parsed, input.tools, input.kwargs, input.add_generation_prompt};
    return Renderer(copy, kind).render();
  }
  return Renderer(input, kind).render();
}

std::optional<ChatTemplateKind> recognise_chat_template(std::string_view text) {
  if (ends_with(text, "\n")) text.remove_suffix(1);
  if (text == qwen36_chat_template()) return ChatTemplateKind::kQwen36;
  if (text == qwen35_chat_template()) return ChatTemplateKind::kQwen35;
  return std::nullopt;
}

}  // namespace qwick
