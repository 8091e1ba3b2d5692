#include "server/response_task.h"

namespace qwick {

ResponseTask::ResponseTask(const Tokenizer& tokenizer, ResponseOptions options, ServerMetrics& metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      created_(Clock::now()),
      decoder_(tokenizer, !options_.special),
      stops_(options_.stop),
      parser_(options_.parser) {}

void ResponseTask::post(ResponseEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

bool ResponseTask::wait(std::vector<ResponseEvent>& out, Clock::duration timeout) {
  std::unique_lock lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  for (auto& e : events_) out.push_back(std::move(e));
  events_.clear();
  return true;
}

void ResponseTask::on_prefill(int64_t done, int64_t total) {
  ResponseEvent e;
  e.kind = ResponseEvent::Kind::kPrefill;
  e.done = done;
  e.total = total;
  post(std::move(e));
}

bool ResponseTask::emit(const std::string& text, std::vector<OutputDelta>& deltas) {
  const size_t first_new = deltas.size();
  if (options_.chat)
    parser_.feed(text, deltas);
  else if (!text.empty())
    deltas.push_back({OutputDelta::Kind::kContent, text, -1});
  return truncate_calls(deltas, first_new);
}

bool ResponseTask::truncate_calls(std::vector<OutputDelta>& deltas, size_t from) {
  if (options_.parallel_tool_calls) return false;
  // Only the first call is kept: the output ends with it.
  for (size_t i = from; i < deltas.size(); ++i)
    if (deltas[i].tool_index >= 1) {
      deltas.resize(i);
      break;
    }
  return options_.chat && !parser_.message().tool_calls.empty();
}

bool ResponseTask::feed(const std::string& text, std::vector<OutputDelta>& deltas) {
  const bool calls_done = emit(stops_.feed(text), deltas);
  return calls_done || stops_.stopped();
}

void ResponseTask::finish_text(std::vector<OutputDelta>& deltas) {
  if (text_done_) return;
  text_done_ = true;
  if (!ended_by_text_ && !feed(decoder_.flush(), deltas)) emit(stops_.flush(), deltas);
  if (!options_.chat) return;
  const size_t before = deltas.size();
  parser_.finish(deltas);
  truncate_calls(deltas, before);
}

TokenAction ResponseTask::on_token(const GeneratedToken& token) {
  if (cancelled_.load()) return TokenAction::kCancel;
  if (first_token_) {
    first_token_ = false;
    metrics_.record_first_token(std::chrono::duration<double>(Clock::now() - created_).count());
  }
  if (options_.logprobs) unsent_tokens_.push_back(token);
  // A token counts as reasoning when the parser reads reasoning before it (so </think> does).
  if (options_.chat && parser_.in_reasoning()) ++reasoning_tokens_;
  ResponseEvent e;
  if (feed(decoder_.push(token.id), e.deltas)) {
    ended_by_text_ = true;
    finish_text(e.deltas);
  }
  // Log-probabilities ride with the next deltas (a token may complete no text yet).
  if (!e.deltas.empty()) {
    e.tokens.swap(unsent_tokens_);
    post(std::move(e));
  }
  return ended_by_text_ ? TokenAction::kStop : TokenAction::kContinue;
}

void ResponseTask::on_finished(const CompletionStats& stats) {
  ResponseEvent out;
  finish_text(out.deltas);
  out.tokens.swap(unsent_tokens_);
  if (!out.deltas.empty() || !out.tokens.empty()) post(std::move(out));
  metrics_.record_completion(stats);
  ResponseEvent e;
  e.kind = ResponseEvent::Kind::kFinished;
  e.stats = stats;
  e.stats.reasoning_tokens = reasoning_tokens_;
  // llama-server's rule: a normal stop with at least one parsed call is "tool_calls".
  e.finish_reason = stats.finish_reason;
  e.stop_string = stops_.matched();
  if (e.finish_reason == "stop" && options_.chat && !parser_.message().tool_calls.empty())
    e.finish_reason = "tool_calls";
  post(std::move(e));
}

void ResponseTask::on_failed(const std::string& message, bool shutting_down) {
  if (!shutting_down) metrics_.record_failed();
  ResponseEvent e;
  e.kind = ResponseEvent::Kind::kFailed;
  e.error = message;
  e.shutting_down = shutting_down;
  post(std::move(e));
}

}  // namespace qwick
