#include "text/output_parser.h"

#include <array>
#include <span>

#include "text/tool_arguments.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kCallOpenTag = "<tool_call>", kCallCloseTag = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=", kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=", kParamClose = "</parameter>";
constexpr size_t kMaxNameLength = 256;  // longer "names" are text, not a tag

using Tags = std::span<const std::string_view>;
constexpr std::array<std::string_view, 1> kThinkTags{kThinkOpen};
constexpr std::array<std::string_view, 2> kReasoningTags{kThinkClose, kCallOpenTag};
constexpr std::array<std::string_view, 1> kContentTags{kCallOpenTag};
constexpr std::array<std::string_view, 1> kReasoningEndTags{kThinkClose};  // without tool calls
constexpr std::array<std::string_view, 1> kFunctionTags{kFunctionOpen};
constexpr std::array<std::string_view, 3> kBodyTags{kParamOpen, kFunctionClose, kCallCloseTag};
constexpr std::array<std::string_view, 4> kValueTags{kParamClose, kParamOpen, kFunctionClose, kCallCloseTag};
constexpr std::array<std::string_view, 1> kCloseTags{kCallCloseTag};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// `s` is a proper prefix of one of `tags` (the rest may still arrive).
bool could_become(std::string_view s, Tags tags) {
  for (std::string_view t : tags)
    if (s.size() < t.size() && starts_with(t, s)) return true;
  return false;
}

// Length of the longest suffix of `s` that is a proper prefix of one of `tags`.
size_t partial_tag_suffix(std::string_view s, Tags tags) {
  size_t longest = 0;
  for (std::string_view t : tags)
    for (size_t n = std::min(s.size(), t.size() - 1); n > longest; --n)
      if (s.substr(s.size() - n) == t.substr(0, n)) {
        longest = n;
        break;
      }
  return longest;
}

// The first occurrence of any of `tags`: (position, tag), or npos.
std::pair<size_t, std::string_view> find_tag(std::string_view s, Tags tags) {
  std::pair<size_t, std::string_view> best{std::string_view::npos, {}};
  for (std::string_view t : tags)
    if (const size_t p = s.find(t); p < best.first) best = {p, t};
  return best;
}

size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  return end;
}

std::string dump(const ojson& v) {
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

OutputParser::OutputParser(OutputParserOptions options)
    : options_(std::move(options)),
      state_(options_.starts_in_reasoning && options_.reasoning ? State::kReasoning : State::kContent),
      think_allowed_(options_.reasoning) {}

void OutputParser::feed(std::string_view text, std::vector<OutputDelta>& deltas) {
  pending_.append(text);
  while (step(deltas)) {
  }
}

bool OutputParser::step(std::vector<OutputDelta>& deltas) {
  switch (state_) {
    case State::kReasoning:
    case State::kContent:
      return step_text(deltas);
    case State::kCallOpen:
      return step_call_open(deltas);
    case State::kCallJson:
      return step_call_json(deltas);
    case State::kCallBody:
      return step_call_body(deltas);
    case State::kValue:
      return step_value();
    case State::kCallClose:
      return step_call_close(deltas);
  }
  return false;
}

void OutputParser::skip_whitespace() {
  size_t n = 0;
  while (n < pending_.size() && is_space(pending_[n])) ++n;
  pending_.erase(0, n);
}

void OutputParser::emit_text(OutputDelta::Kind kind, std::string_view text,
                             std::vector<OutputDelta>& deltas) {
  if (text.empty()) return;
  (kind == OutputDelta::Kind::kReasoning ? message_.reasoning_content : message_.content).append(text);
  deltas.push_back({kind, std::string(text), -1});
  segment_start_ = false;
}

// Reasoning or content: text up to the next tag, holding back a possible partial tag and
// trailing whitespace.
bool OutputParser::step_text(std::vector<OutputDelta>& deltas) {
  const bool reasoning = state_ == State::kReasoning;
  const auto kind = reasoning ? OutputDelta::Kind::kReasoning : OutputDelta::Kind::kContent;
  if (segment_start_) skip_whitespace();
  if (pending_.empty()) return false;
  if (think_allowed_) {
    if (starts_with(pending_, kThinkOpen)) {
      pending_.erase(0, kThinkOpen.size());
      state_ = State::kReasoning;
      segment_start_ = true;
      think_allowed_ = false;
      return true;
    }
    if (could_become(pending_, kThinkTags)) return false;
    think_allowed_ = false;
  }
  const Tags tags = reasoning ? (options_.tool_calls ? Tags(kReasoningTags) : Tags(kReasoningEndTags))
                              : (options_.tool_calls ? Tags(kContentTags) : Tags());
  const auto [pos, tag] = find_tag(pending_, tags);
  if (pos != std::string_view::npos) {
    emit_text(kind, std::string_view(pending_).substr(0, trailing_space_start(pending_.substr(0, pos))),
              deltas);
    pending_.erase(0, pos + tag.size());
    if (tag == kThinkClose) {
      state_ = State::kContent;
    } else {
      state_ = State::kCallOpen;
      call_raw_ = kCallOpenTag;
      call_in_reasoning_ = reasoning;
      call_malformed_ = false;
    }
    segment_start_ = true;
    return true;
  }
  const size_t end = trailing_space_start(
      std::string_view(pending_).substr(0, pending_.size() - partial_tag_suffix(pending_, tags)));
  emit_text(kind, std::string_view(pending_).substr(0, end), deltas);
  pending_.erase(0, end);
  return false;
}

// After <tool_call>: expects <function=NAME> (or Qwen3-style JSON).
bool OutputParser::step_call_open(std::vector<OutputDelta>& deltas) {
  consume(std::min(pending_.find_first_not_of(" \t\r\n"), pending_.size()));
  if (pending_.empty()) return false;
  if (pending_[0] == '{') {
    state_ = State::kCallJson;
    return true;
  }
  if (!starts_with(pending_, kFunctionOpen)) {
    if (could_become(pending_, kFunctionTags)) return false;
    call_failed(deltas);
    return true;
  }
  const size_t close = pending_.find('>', kFunctionOpen.size());
  const std::string_view name = std::string_view(pending_).substr(
      kFunctionOpen.size(), std::min(close, pending_.size()) - kFunctionOpen.size());
  if (name.find_first_of("<\n") != std::string_view::npos || name.size() > kMaxNameLength ||
      (close != std::string::npos && name.empty())) {
    call_failed(deltas);
    return true;
  }
  if (close == std::string::npos) return false;
  call_name_ = name;
  call_arguments_ = ojson::object();
  consume(close + 1);
  state_ = State::kCallBody;
  return true;
}

// <tool_call>{"name": ..., "arguments": {...}}</tool_call>, the format of earlier Qwen models.
bool OutputParser::step_call_json(std::vector<OutputDelta>& deltas) {
  const size_t end = pending_.find(kCallCloseTag);
  if (end == std::string::npos) return false;
  const ojson call = ojson::parse(std::string_view(pending_).substr(0, end), nullptr, false);
  consume(end + kCallCloseTag.size());
  const ojson* args = call.is_object() && call.contains("arguments") ? &call["arguments"] : nullptr;
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string() ||
      (args != nullptr && !args->is_object())) {
    call_failed(deltas);
    return true;
  }
  call_name_ = call["name"].get<std::string>();
  call_arguments_ = args != nullptr ? *args : ojson::object();
  end_call(deltas);
  return true;
}

// Between parameters. Whitespace is held until what follows is known: dropped before a tag,
// kept before text that is not one (so the result does not depend on chunking).
bool OutputParser::step_call_body(std::vector<OutputDelta>& deltas) {
  const size_t spaces = std::min(pending_.find_first_not_of(" \t\r\n"), pending_.size());
  const std::string_view rest = std::string_view(pending_).substr(spaces);
  if (rest.empty()) return false;
  if (starts_with(rest, kParamOpen)) {
    const size_t close = rest.find('>', kParamOpen.size());
    const std::string_view name =
        rest.substr(kParamOpen.size(), std::min(close, rest.size()) - kParamOpen.size());
    const bool malformed =
        name.find_first_of("<\n") != std::string_view::npos || name.size() > kMaxNameLength;
    if (!malformed) {
      if (close == std::string::npos) return false;
      param_name_ = name;
      param_value_.clear();
      consume(spaces + close + 1);
      state_ = State::kValue;
      return true;
    }
  } else if (starts_with(rest, kFunctionClose)) {
    consume(spaces + kFunctionClose.size());
    state_ = State::kCallClose;
    return true;
  } else if (starts_with(rest, kCallCloseTag)) {
    consume(spaces + kCallCloseTag.size());
    end_call(deltas);
    return true;
  } else if (could_become(rest, kBodyTags)) {
    return false;
  }
  // Not a tag: stray text inside the call, which makes it no call (read up to the next possible
  // tag; its trailing whitespace waits like any other).
  const size_t next = rest.find('<', 1);
  const size_t text_end = trailing_space_start(rest.substr(0, std::min(next, rest.size())));
  call_malformed_ = true;
  consume(spaces + text_end);
  return true;
}

// A parameter value ends at </parameter>, or without it at the next parameter or the call's end.
bool OutputParser::step_value() {
  const Tags tags(kValueTags);
  const auto [pos, tag] = find_tag(pending_, tags);
  if (pos == std::string_view::npos) {
    const size_t n = pending_.size() - partial_tag_suffix(pending_, tags);
    param_value_.append(pending_, 0, n);
    consume(n);
    return false;
  }
  param_value_.append(pending_, 0, pos);
  consume(tag == kParamClose ? pos + tag.size() : pos);
  end_value();
  state_ = State::kCallBody;
  return true;
}

// After </function>: the call is complete, with or without the </tool_call> that should follow.
bool OutputParser::step_call_close(std::vector<OutputDelta>& deltas) {
  consume(std::min(pending_.find_first_not_of(" \t\r\n"), pending_.size()));
  if (pending_.empty()) return false;
  if (starts_with(pending_, kCallCloseTag))
    consume(kCallCloseTag.size());
  else if (could_become(pending_, kCloseTags))
    return false;
  end_call(deltas);
  return true;
}

void OutputParser::consume(size_t n) {
  call_raw_.append(pending_, 0, n);
  pending_.erase(0, n);
}

// The template writes "<parameter=K>\n" VALUE "\n</parameter>": one newline each side is framing.
void OutputParser::end_value() {
  std::string_view value = param_value_;
  if (starts_with(value, "\n")) value.remove_prefix(1);
  if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
  if (call_arguments_.contains(param_name_)) call_malformed_ = true;
  call_arguments_[param_name_] =
      convert_parameter(value, find_parameter_schema(options_.tools, call_name_, param_name_));
}

void OutputParser::end_call(std::vector<OutputDelta>& deltas) {
  if (call_malformed_ || !tool_call_mismatch(options_.tools, call_name_, call_arguments_).empty()) {
    call_failed(deltas);
    return;
  }
  message_.tool_calls.push_back({call_name_, ""});
  const int index = static_cast<int>(message_.tool_calls.size()) - 1;
  deltas.push_back({OutputDelta::Kind::kToolCallStart, call_name_, index});
  // One fragment a parameter, as a client streaming the call would see them.
  std::vector<std::string> fragments;
  for (const auto& [key, value] : call_arguments_.items())
    fragments.push_back((fragments.empty() ? "{" : ",") + dump(key) + ":" + dump(value));
  fragments.push_back(fragments.empty() ? "{}" : "}");
  for (std::string& f : fragments) {
    message_.tool_calls.back().arguments += f;
    deltas.push_back({OutputDelta::Kind::kToolCallArguments, std::move(f), index});
  }
  call_raw_.clear();
  resume_text();
  segment_start_ = true;  // a new stretch of text: its leading whitespace is dropped
}

// What looked like a call is not one: its text goes where the call opened, as written, and the
// text after it continues it.
void OutputParser::call_failed(std::vector<OutputDelta>& deltas) {
  emit_text(call_in_reasoning_ ? OutputDelta::Kind::kReasoning : OutputDelta::Kind::kContent, call_raw_,
            deltas);
  call_raw_.clear();
  resume_text();
}

void OutputParser::resume_text() {
  state_ = call_in_reasoning_ ? State::kReasoning : State::kContent;
}

void OutputParser::finish(std::vector<OutputDelta>& deltas) {
  while (step(deltas)) {
  }
  switch (state_) {
    case State::kReasoning:
    case State::kContent:
      break;
    // A call cut short (</function> not written) is text, as written.
    case State::kCallOpen:
    case State::kCallJson:
    case State::kValue:
    case State::kCallBody:
      consume(pending_.size());
      call_raw_.erase(trailing_space_start(call_raw_));
      call_failed(deltas);
      break;
    // After </function>: what is left is whitespace or part of </tool_call>.
    case State::kCallClose:
      consume(pending_.size());
      end_call(deltas);
      break;
  }
  // Left over in reasoning or content: text held back as a possible tag, and trailing space.
  const auto kind = state_ == State::kReasoning ? OutputDelta::Kind::kReasoning : OutputDelta::Kind::kContent;
  emit_text(kind, std::string_view(pending_).substr(0, trailing_space_start(pending_)), deltas);
  pending_.clear();
}

}  // namespace qwick
