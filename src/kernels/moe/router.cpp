#include "kernels/moe/router.h"

#include <cmath>

namespace qwick {

void route_token(const float* logits, int n_experts, int k, int32_t* expert_ids, float* weights) {
  float max_logit = -INFINITY;
  for (int e = 0; e < n_experts; ++e) max_logit = std::fmax(max_logit, logits[e]);
  double total = 0;
  for (int e = 0; e < n_experts; ++e) total += std::exp(static_cast<double>(logits[e] - max_logit));
  // Selection by insertion into a sorted list of k: n_experts * k comparisons, no allocation.
  int n = 0;
  for (int e = 0; e < n_experts; ++e) {
    const float p = static_cast<float>(std::exp(static_cast<double>(logits[e] - max_logit)) / total);
    if (n == k && !(p > weights[k - 1])) continue;
    int i = n < k ? n++ : k - 1;
    while (i > 0 && p > weights[i - 1]) {
      weights[i] = weights[i - 1];
      expert_ids[i] = expert_ids[i - 1];
      --i;
    }
    weights[i] = p;
    expert_ids[i] = e;
  }
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) sum += weights[i];
  for (int i = 0; i < k; ++i) weights[i] /= sum;
}

}  // namespace qwick
