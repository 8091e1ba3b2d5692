#include "scripted_engine.h"

#include <algorithm>
#include <thread>

namespace qwick::test {

ScriptedEngine::ScriptedEngine(const Tokenizer& tokenizer, int64_t vocab_size, Options options)
    : tokenizer_(tokenizer), vocab_(vocab_size), options_(options) {}

std::vector<CompletionStats> ScriptedEngine::finished() const {
  std::lock_guard lock(mutex_);
  return finished_;
}

std::vector<int32_t> ScriptedEngine::last_prompt() const {
  std::lock_guard lock(mutex_);
  return last_prompt_;
}

CompletionStats ScriptedEngine::run(const CompletionJob& job, CompletionObserver& observer) {
  CompletionStats s;
  s.prompt_tokens = static_cast<int64_t>(job.prompt.size());
  auto record = [&] {
    std::lock_guard lock(mutex_);
    finished_.push_back(s);
    last_prompt_ = job.prompt;
    return s;
  };
  const std::string prompt = tokenizer_.decode(job.prompt);
  std::string script = "ok";
  if (const size_t at = prompt.rfind("reply>"); at != std::string::npos) {
    const size_t begin = at + 6;
    const size_t end = std::min(prompt.find("<|im_end|>", begin), prompt.find("\n</tool_response>", begin));
    script = prompt.substr(begin, end - begin);
  }
  std::vector<int32_t> tokens = tokenizer_.encode(script, true);
  if (!job.stop_ids.empty()) tokens.push_back(job.stop_ids.front());

  const int64_t n = s.prompt_tokens;
  observer.on_prefill(0, n);
  for (int c = 1; c <= options_.prefill_chunks; ++c) {
    if (observer.cancelled()) {
      s.finish_reason = "cancelled";
      return record();
    }
    std::this_thread::sleep_for(options_.chunk_delay);
    observer.on_prefill(n * c / options_.prefill_chunks, n);
  }
  s.finish_reason = "length";
  for (int32_t t : tokens) {
    if (job.max_tokens >= 0 && s.generated_tokens >= job.max_tokens) break;
    if (std::find(job.stop_ids.begin(), job.stop_ids.end(), t) != job.stop_ids.end()) {
      s.finish_reason = "stop";
      break;
    }
    GeneratedToken g;
    g.id = t;
    g.logprob = -0.25f;
    if (job.top_logprobs > 0) g.top.push_back({t, -0.25f});
    ++s.generated_tokens;
    const TokenAction action = observer.on_token(g);
    if (action != TokenAction::kContinue) {
      s.finish_reason = action == TokenAction::kStop ? "stop" : "cancelled";
      break;
    }
    std::this_thread::sleep_for(options_.token_delay);
    if (observer.cancelled()) {
      s.finish_reason = "cancelled";
      break;
    }
  }
  return record();
}

}  // namespace qwick::test
