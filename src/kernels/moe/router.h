// MoE routing for one token (model-spec.md §2.6): softmax over all experts in f32, the top k, then
// the k weights renormalised to sum to 1. Ties go to the lower expert index (deterministic).
#pragma once

#include <cstdint>

namespace qwick {

void route_token(const float* logits, int n_experts, int k, int32_t* expert_ids, float* weights);

}  // namespace qwick
