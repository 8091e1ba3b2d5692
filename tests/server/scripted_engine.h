// A CompletionEngine for server tests: instead of running a model it replies with a script
// written in the prompt, so a test controls the exact tokens a response is made of.
//
// The script is the text after the last "reply>" in the detokenized prompt, up to the next
// <|im_end|> (in a chat prompt: the last user message) or the end of a tool result, or the end of
// the prompt; so a test's tool can answer with the model's next reply. It is tokenized
// with the model's tokenizer (special tokens honoured) and emitted token by token, then the first
// stop id; without "reply>" the reply is "ok". Optional delays stand in for a slow prefill (in
// chunks, with progress reports and cancellation checks between them) and slow decoding.
// Every finished job's stats are recorded for the tests to inspect.
#pragma once

#include <chrono>
#include <mutex>
#include <vector>

#include "runtime/completion.h"
#include "text/tokenizer.h"

namespace qwick::test {

class ScriptedEngine : public CompletionEngine {
 public:
  struct Options {
    int64_t context = 4096;
    int prefill_chunks = 1;
    std::chrono::milliseconds chunk_delay{0}, token_delay{0};
  };
  ScriptedEngine(const Tokenizer& tokenizer, int64_t vocab_size, Options options);

  int64_t context_size() const override { return options_.context; }
  int64_t vocab_size() const override { return vocab_; }
  CompletionStats run(const CompletionJob& job, CompletionObserver& observer) override;

  std::vector<CompletionStats> finished() const;
  // The prompt tokens of the last finished job.
  std::vector<int32_t> last_prompt() const;

 private:
  const Tokenizer& tokenizer_;
  int64_t vocab_;
  Options options_;
  mutable std::mutex mutex_;
  std::vector<CompletionStats> finished_;
  std::vector<int32_t> last_prompt_;
};

}  // namespace qwick::test
