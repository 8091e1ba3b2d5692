#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace qwick {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerationResult generate(Backend& backend, Sampler& sampler, int64_t vocab_size, const GenerationRequest& request,
                          const std::function<bool(int32_t)>& on_token) {
  if (request.prompt.empty()) fail("the prompt is empty");
  GenerationResult result;
  std::vector<float> logits(static_cast<size_t>(vocab_size));
  for (int32_t t : request.prompt) sampler.accept(t);

  auto t0 = std::chrono::steady_clock::now();
  PrefillOptions options;
  options.chunk = request.prefill_chunk;
  backend.prefill(request.prompt, logits, options);
  result.prompt_ms = ms_since(t0);
  result.prompt_tokens = static_cast<int64_t>(request.prompt.size());

  // Without penalties or biases the backend may choose tokens itself, next to its logits (the CUDA
  // backend does it inside the decode step); otherwise every step's logits come back to the sampler.
  const SamplingParams& sp = sampler.params();
  const bool device_sampling = sp.repetition_penalty == 1.0f && sp.presence_penalty == 0.0f &&
                               sp.frequency_penalty == 0.0f && sp.logit_bias.empty();
  const DeviceSampling ds{sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.seed};

  const int64_t limit = request.max_tokens < 0 ? INT64_MAX : request.max_tokens;
  result.finish_reason = "length";
  int32_t token = sampler.sample(logits);
  while (static_cast<int64_t>(result.tokens.size()) < limit) {
    if (!request.ignore_eos &&
        std::find(request.stop_ids.begin(), request.stop_ids.end(), token) != request.stop_ids.end()) {
      result.finish_reason = "stop";
      break;
    }
    result.tokens.push_back(token);
    sampler.accept(token);
    if (on_token && !on_token(token)) {
      result.finish_reason = "cancelled";
      break;
    }
    if (static_cast<int64_t>(result.tokens.size()) >= limit) break;
    if (backend.position() >= backend.max_context()) break;  // context full: "length"
    t0 = std::chrono::steady_clock::now();
    int32_t next = 0;
    if (device_sampling && backend.decode_sampled(token, ds, &next)) {
      token = next;
    } else {
      backend.decode(token, logits);
      token = sampler.sample(logits);
    }
    result.decode_ms += ms_since(t0);
    ++result.decode_steps;
  }
  return result;
}

}  // namespace qwick
