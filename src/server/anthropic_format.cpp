#include "server/anthropic_format.h"

#include "server/openai_format.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
    case 405:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status < 500 ? "invalid_request_error" : "api_error";
  }
}

// A tool call's arguments as the input object (the parser writes a JSON object).
ojson tool_input(const std::string& arguments) {
  ojson input = ojson::parse(arguments, nullptr, false);
  return input.is_object() ? input : ojson::object();
}

ojson block_json(const OutputBlock& b, bool started) {
  switch (b.kind) {
    case OutputBlock::Kind::kReasoning:
      return {{"type", "thinking"}, {"thinking", started ? "" : b.text}, {"signature", ""}};
    case OutputBlock::Kind::kText:
      return {{"type", "text"}, {"text", started ? "" : b.text}};
    case OutputBlock::Kind::kToolCall:
      return {{"type", "tool_use"},
              {"id", b.id},
              {"name", b.name},
              {"input", started ? ojson::object() : tool_input(b.text)}};
  }
  return {};
}

}  // namespace

ojson anthropic_error(const ApiError& e) {
  return {{"type", "error"}, {"error", {{"type", anthropic_error_type(e.status())}, {"message", e.what()}}}};
}

MessagesWriter::MessagesWriter(std::string model, int64_t prompt_tokens)
    : id_(random_id("msg_", 24)), model_(std::move(model)), prompt_tokens_(prompt_tokens) {}

void MessagesWriter::event(const char* type, const ojson& data) {
  if (out_ == nullptr) return;
  *out_ += "event: ";
  *out_ += type;
  *out_ += "\ndata: " + wire_json(data) + "\n\n";
}

ojson MessagesWriter::message(const ojson& content) const {
  const bool done = !stop_reason_.empty();
  const int64_t prompt = done ? stats_.prompt_tokens : prompt_tokens_;
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", content},
          {"stop_reason", done ? ojson(stop_reason_) : ojson()},
          {"stop_sequence", stop_sequence_.empty() ? ojson() : ojson(stop_sequence_)},
          {"usage",
           {{"input_tokens", prompt - stats_.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", stats_.cached_tokens},
            {"output_tokens", stats_.generated_tokens}}}};
}

std::string MessagesWriter::stream_start() {
  std::string out;
  out_ = &out;
  event("message_start", {{"type", "message_start"}, {"message", message(ojson::array())}});
  event("ping", {{"type", "ping"}});
  out_ = nullptr;
  return out;
}

void MessagesWriter::opened(const OutputBlock& block, size_t index) {
  event("content_block_start",
        {{"type", "content_block_start"}, {"index", index}, {"content_block", block_json(block, true)}});
}

void MessagesWriter::appended(const OutputBlock& block, size_t index, const std::string& delta) {
  ojson d;
  switch (block.kind) {
    case OutputBlock::Kind::kReasoning:
      d = {{"type", "thinking_delta"}, {"thinking", delta}};
      break;
    case OutputBlock::Kind::kText:
      d = {{"type", "text_delta"}, {"text", delta}};
      break;
    case OutputBlock::Kind::kToolCall:
      d = {{"type", "input_json_delta"}, {"partial_json", delta}};
      break;
  }
  event("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", std::move(d)}});
}

void MessagesWriter::closed(const OutputBlock&, size_t index) {
  event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
}

bool MessagesWriter::add(const std::vector<ResponseEvent>& events, std::string* out) {
  out_ = out;
  bool complete = false;
  for (const ResponseEvent& e : events) {
    if (e.kind == ResponseEvent::Kind::kOutput) {
      blocks_.add(e.deltas, *this);
    } else if (e.kind == ResponseEvent::Kind::kFinished) {
      blocks_.finish(*this);
      stats_ = e.stats;
      if (e.finish_reason == "length")
        stop_reason_ = "max_tokens";
      else if (blocks_.has_tool_calls())
        stop_reason_ = "tool_use";
      else if (!e.stop_string.empty())
        stop_reason_ = "stop_sequence";
      else
        stop_reason_ = "end_turn";
      if (stop_reason_ == "stop_sequence") stop_sequence_ = e.stop_string;
      const ojson usage = message(ojson::array())["usage"];
      event("message_delta", {{"type", "message_delta"},
                              {"delta",
                               {{"stop_reason", stop_reason_},
                                {"stop_sequence", stop_sequence_.empty() ? ojson() : ojson(stop_sequence_)}}},
                              {"usage", usage}});
      event("message_stop", {{"type", "message_stop"}});
      complete = true;
    } else if (e.kind == ResponseEvent::Kind::kFailed) {
      error_ = std::make_unique<ApiError>(generation_failure(e));
      event("error", anthropic_error(*error_));
      complete = true;
    }
  }
  out_ = nullptr;
  return complete;
}

int MessagesWriter::status() const {
  return error_ ? error_->status() : 200;
}

std::string MessagesWriter::body() {
  if (error_) return wire_json(anthropic_error(*error_));
  ojson content = ojson::array();
  for (const OutputBlock& b : blocks_.blocks()) content.push_back(block_json(b, false));
  return wire_json(message(content));
}

}  // namespace qwick
