#include "server/responses_format.h"

#include <ctime>

#include "server/openai_format.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

const char* item_prefix(OutputBlock::Kind kind) {
  switch (kind) {
    case OutputBlock::Kind::kReasoning:
      return "rs_";
    case OutputBlock::Kind::kText:
      return "msg_";
    case OutputBlock::Kind::kToolCall:
      return "fc_";
  }
  return "";
}

ojson part_json(const OutputBlock& b, bool done) {
  const std::string text = done ? b.text : "";
  if (b.kind == OutputBlock::Kind::kReasoning) return {{"type", "reasoning_text"}, {"text", text}};
  return {
      {"type", "output_text"}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}, {"text", text}};
}

}  // namespace

ResponsesWriter::ResponsesWriter(std::string model, ojson echo, Completion on_complete)
    : id_(random_id("resp_", 32)),
      model_(std::move(model)),
      created_(static_cast<int64_t>(std::time(nullptr))),
      echo_(std::move(echo)),
      on_complete_(std::move(on_complete)) {}

void ResponsesWriter::event(const std::string& type, ojson data) {
  if (out_ == nullptr) return;
  ojson e = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : data.items()) e[k] = std::move(v);
  *out_ += "event: " + type + "\ndata: " + wire_json(e) + "\n\n";
}

ojson ResponsesWriter::item(size_t index, bool done) const {
  const OutputBlock& b = blocks_.blocks()[index];
  const std::string& id = item_ids_[index];
  switch (b.kind) {
    case OutputBlock::Kind::kReasoning:
      return {{"id", id},
              {"type", "reasoning"},
              {"summary", ojson::array()},
              {"content", done ? ojson::array({part_json(b, true)}) : ojson::array()}};
    case OutputBlock::Kind::kText:
      return {{"id", id},
              {"type", "message"},
              {"status", done ? "completed" : "in_progress"},
              {"content", done ? ojson::array({part_json(b, true)}) : ojson::array()},
              {"role", "assistant"}};
    case OutputBlock::Kind::kToolCall:
      return {{"id", id},
              {"type", "function_call"},
              {"status", done ? "completed" : "in_progress"},
              {"arguments", done ? b.text : ""},
              {"call_id", b.id},
              {"name", b.name}};
  }
  return {};
}

ojson ResponsesWriter::response() const {
  ojson r = {
      {"id", id_},
      {"object", "response"},
      {"created_at", created_},
      {"status", status_},
      {"background", false},
      {"error", error_ ? ojson{{"code", "server_error"}, {"message", error_->what()}} : ojson()},
      {"incomplete_details", status_ == "incomplete" ? ojson{{"reason", "max_output_tokens"}} : ojson()},
      {"model", model_}};
  for (const auto& [k, v] : echo_.items()) r[k] = v;
  ojson output = ojson::array();
  if (status_ != "in_progress")
    for (size_t i = 0; i < blocks_.blocks().size(); ++i) output.push_back(item(i, true));
  r["output"] = std::move(output);
  r["usage"] = status_ == "in_progress" || error_
                   ? ojson()
                   : ojson{{"input_tokens", stats_.prompt_tokens},
                           {"input_tokens_details", {{"cached_tokens", stats_.cached_tokens}}},
                           {"output_tokens", stats_.generated_tokens},
                           {"output_tokens_details", {{"reasoning_tokens", 0}}},
                           {"total_tokens", stats_.prompt_tokens + stats_.generated_tokens}};
  return r;
}

ojson ResponsesWriter::assistant_message() const {
  std::string content, reasoning;
  ojson calls = ojson::array();
  for (const OutputBlock& b : blocks_.blocks()) {
    if (b.kind == OutputBlock::Kind::kReasoning) reasoning += b.text;
    if (b.kind == OutputBlock::Kind::kText) content += b.text;
    if (b.kind == OutputBlock::Kind::kToolCall) {
      ojson arguments = ojson::parse(b.text, nullptr, false);
      calls.push_back(
          {{"id", b.id},
           {"type", "function"},
           {"function",
            {{"name", b.name}, {"arguments", arguments.is_object() ? arguments : ojson::object()}}}});
    }
  }
  ojson m = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  return m;
}

std::string ResponsesWriter::stream_start() {
  std::string out;
  out_ = &out;
  event("response.created", {{"response", response()}});
  event("response.in_progress", {{"response", response()}});
  out_ = nullptr;
  return out;
}

void ResponsesWriter::opened(const OutputBlock& block, size_t index) {
  item_ids_.push_back(random_id(item_prefix(block.kind), 32));
  event("response.output_item.added", {{"output_index", index}, {"item", item(index, false)}});
  if (block.kind != OutputBlock::Kind::kToolCall)
    event("response.content_part.added", {{"item_id", item_ids_[index]},
                                          {"output_index", index},
                                          {"content_index", 0},
                                          {"part", part_json(block, false)}});
}

void ResponsesWriter::appended(const OutputBlock& block, size_t index, const std::string& delta) {
  const std::string& id = item_ids_[index];
  switch (block.kind) {
    case OutputBlock::Kind::kReasoning:
      event("response.reasoning_text.delta",
            {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"delta", delta}});
      break;
    case OutputBlock::Kind::kText:
      event("response.output_text.delta", {{"item_id", id},
                                           {"output_index", index},
                                           {"content_index", 0},
                                           {"delta", delta},
                                           {"logprobs", ojson::array()}});
      break;
    case OutputBlock::Kind::kToolCall:
      event("response.function_call_arguments.delta",
            {{"item_id", id}, {"output_index", index}, {"delta", delta}});
      break;
  }
}

void ResponsesWriter::closed(const OutputBlock& block, size_t index) {
  const std::string& id = item_ids_[index];
  switch (block.kind) {
    case OutputBlock::Kind::kReasoning:
      event("response.reasoning_text.done",
            {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", block.text}});
      break;
    case OutputBlock::Kind::kText:
      event("response.output_text.done", {{"item_id", id},
                                          {"output_index", index},
                                          {"content_index", 0},
                                          {"text", block.text},
                                          {"logprobs", ojson::array()}});
      break;
    case OutputBlock::Kind::kToolCall:
      event("response.function_call_arguments.done",
            {{"item_id", id}, {"output_index", index}, {"name", block.name}, {"arguments", block.text}});
      break;
  }
  if (block.kind != OutputBlock::Kind::kToolCall)
    event("response.content_part.done",
          {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part_json(block, true)}});
  event("response.output_item.done", {{"output_index", index}, {"item", item(index, true)}});
}

bool ResponsesWriter::add(const std::vector<ResponseEvent>& events, std::string* out) {
  out_ = out;
  bool complete = false;
  for (const ResponseEvent& e : events) {
    if (e.kind == ResponseEvent::Kind::kOutput) {
      blocks_.add(e.deltas, *this);
    } else if (e.kind == ResponseEvent::Kind::kFinished) {
      blocks_.finish(*this);
      stats_ = e.stats;
      status_ = e.finish_reason == "length" ? "incomplete" : "completed";
      const ojson r = response();
      event(status_ == "completed" ? "response.completed" : "response.incomplete", {{"response", r}});
      if (on_complete_) on_complete_(r, assistant_message());
      complete = true;
    } else if (e.kind == ResponseEvent::Kind::kFailed) {
      error_ = std::make_unique<ApiError>(generation_failure(e));
      status_ = "failed";
      event("response.failed", {{"response", response()}});
      complete = true;
    }
  }
  out_ = nullptr;
  return complete;
}

int ResponsesWriter::status() const {
  return error_ ? error_->status() : 200;
}

std::string ResponsesWriter::body() {
  return wire_json(error_ ? error_->body() : response());
}

}  // namespace qwick
