// The generation loop: prefill the prompt, then sample and decode one token at a time until a stop
// token, the token limit, or the caller says stop. Times both phases the way llama.cpp reports them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "runtime/sampler.h"

namespace qwick {

struct GenerationRequest {
  std::span<const int32_t> prompt;
  int64_t max_tokens = 128;        // < 0: until a stop token or the context is full
  std::vector<int32_t> stop_ids;   // ignored when ignore_eos
  bool ignore_eos = false;
  int64_t prefill_chunk = 512;
};

struct GenerationResult {
  std::vector<int32_t> tokens;    // generated, stop token excluded
  std::string finish_reason;      // "stop", "length" or "cancelled"
  int64_t prompt_tokens = 0;
  double prompt_ms = 0;           // prefill
  int64_t decode_steps = 0;
  double decode_ms = 0;           // sum of decode steps
};

// `on_token` sees each generated token; returning false ends generation ("cancelled").
// The prompt is appended to the backend's current sequence.
GenerationResult generate(Backend& backend, Sampler& sampler, int64_t vocab_size, const GenerationRequest& request,
                          const std::function<bool(int32_t)>& on_token);

}  // namespace qwick
