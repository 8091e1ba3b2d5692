// How the next token is chosen from the logits, as a request states it: the one parameters type from
// the HTTP request (server/openai_request.h) and the CLI down to the host Sampler (runtime/sampler.h)
// and the device sampler (Backend::decode_sampled, kernels/sample/sample_cuda.h), which takes the cuts,
// the temperature and the seed (the caller keeps penalties and biases on the host).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace qwick {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // 0: all tokens
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;  // multiplicative (CTRL style); 1 = off
  float presence_penalty = 0.0f;    // OpenAI style, subtracted once per seen token
  float frequency_penalty = 0.0f;   // subtracted per occurrence
  int penalty_last_n = 64;          // window of recent tokens the penalties look at; -1 = all
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;
};

}  // namespace qwick
