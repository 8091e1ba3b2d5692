// The model's weights, one plain struct per layer kind, bound by name from a checkpoint.
//
// Matrices stay in the checkpoint's format and memory (see weight_matrix.h). Small vectors (norms,
// conv taps, decay parameters) are copied to f32 at bind time in the form the forward pass uses:
// zero-centred norms with their 1 added, A_log turned into -exp(A_log).
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/weight_matrix.h"

namespace qwick {

// Which naming scheme the checkpoint uses (model-spec.md §3).
enum class CheckpointLayout {
  kOfficial,      // model.language_model.*, fused experts.gate_up_proj / experts.down_proj (bf16 release)
  kTransformers,  // model.*, one tensor per expert (transformers save_pretrained)
  kMlx,           // language_model.model.*, switch_mlp stacked experts, 1 folded into the norms
};
const char* checkpoint_layout_name(CheckpointLayout layout);

struct AttentionWeights {
  WeightMatrix q_proj;        // [n_heads * head_dim * 2, hidden]: per head [q (head_dim) | gate (head_dim)]
  WeightMatrix k_proj;        // [n_kv_heads * head_dim, hidden]
  WeightMatrix v_proj;        // [n_kv_heads * head_dim, hidden]
  WeightMatrix o_proj;        // [hidden, n_heads * head_dim]
  std::vector<float> q_norm;  // [head_dim], 1 + w
  std::vector<float> k_norm;  // [head_dim], 1 + w
};

struct DeltaNetWeights {
  WeightMatrix in_proj_qkv;    // [2 * Hk*Dk + Hv*Dv, hidden]: rows q (Hk*Dk) | k (Hk*Dk) | v (Hv*Dv)
  WeightMatrix in_proj_z;      // [Hv*Dv, hidden]: output gate of the gated norm
  WeightMatrix in_proj_b;      // [Hv, hidden]: beta = sigmoid(b)
  WeightMatrix in_proj_a;      // [Hv, hidden]: decay input
  WeightMatrix out_proj;       // [hidden, Hv*Dv]
  std::vector<float> conv;     // [channels, K]: causal depthwise taps, tap K-1 multiplies the newest row
  std::vector<float> a_neg;    // [Hv]: -exp(A_log)
  std::vector<float> dt_bias;  // [Hv]
  std::vector<float> norm;     // [Dv]: gated RMSNorm weight, used as is (no 1 added)
};

struct ExpertWeights {
  WeightMatrix gate;  // [I, hidden]
  WeightMatrix up;    // [I, hidden]
  WeightMatrix down;  // [hidden, I]
};

struct MoeWeights {
  WeightMatrix router;                 // [n_experts, hidden]
  std::vector<ExpertWeights> experts;  // n_experts, I = moe_intermediate_size
  ExpertWeights shared;                // I = shared_expert_intermediate_size
  WeightMatrix shared_gate;            // [1, hidden]: sigmoid gate of the shared expert
};

struct LayerWeights {
  std::vector<float> input_norm;  // [hidden], 1 + w
  std::vector<float> post_norm;   // [hidden], 1 + w
  std::variant<DeltaNetWeights, AttentionWeights> mixer;
  MoeWeights moe;
};

// The multi-token-prediction head (model-spec.md §2.8), `mtp.*` in the checkpoint: one more
// decoder layer that predicts the token after next from the main model's final-normed hidden state
// and the next token's embedding. It shares the embedding and lm_head with the main model.
struct MtpWeights {
  std::vector<float> pre_fc_norm_embedding;  // [hidden], 1 + w: RMSNorm of the next token's embedding
  std::vector<float> pre_fc_norm_hidden;     // [hidden], 1 + w: RMSNorm of the main model's hidden state
  WeightMatrix fc;          // [hidden, 2 * hidden]: inputs [normed embedding | normed hidden]
  LayerWeights layer;       // one gated full-attention layer with its MoE
  std::vector<float> norm;  // [hidden], 1 + w: before the shared lm_head
};

struct ModelWeights {
  CheckpointLayout layout = CheckpointLayout::kOfficial;
  WeightMatrix embed;             // [vocab, hidden]
  WeightMatrix lm_head;           // [vocab, hidden] (the embedding itself when tied)
  std::vector<float> final_norm;  // [hidden], 1 + w
  std::vector<LayerWeights> layers;
  std::optional<MtpWeights> mtp;  // absent when the checkpoint has no `mtp.*` tensors
};

// Binds every tensor the config needs, and the MTP head when the checkpoint has one (all of it, or
// an error naming the missing piece). Throws Error naming the tensor when one is missing, has the
// wrong shape or dtype, or when the checkpoint holds a tensor no binding consumed (the vision tower
// excepted).
ModelWeights bind_weights(const ModelConfig& config, Checkpoint& checkpoint);

// Binds only the MTP head of `checkpoint`: another checkpoint of the same model (any layout, every
// other tensor ignored) or a file holding just `mtp.*`. Throws Error when it has no head, or naming
// the tensor whose shape differs from what `config` needs.
MtpWeights bind_mtp_weights(const ModelConfig& config, Checkpoint& checkpoint);

}  // namespace qwick
