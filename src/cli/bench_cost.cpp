#include "cli/bench_cost.h"

#include <variant>

namespace qwick {
namespace {

double elements(const WeightMatrix& w) {
  return static_cast<double>(w.rows) * static_cast<double>(w.cols);
}
double row_bytes(const WeightMatrix& w) {
  return static_cast<double>(w.storage_bytes()) / static_cast<double>(w.rows);
}

}  // namespace

TokenCost token_cost(const Model& model, KvDtype kv) {
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  TokenCost cost;
  double active = 0, bytes = 0;
  auto add = [&](const WeightMatrix& m) {
    active += elements(m);
    bytes += static_cast<double>(m.storage_bytes());
  };
  auto add_all = [&](const WeightMatrix& m) {
    cost.total_params += elements(m);
    cost.total_bytes += static_cast<double>(m.storage_bytes());
  };
  bytes += row_bytes(w.embed);  // one embedding row
  add(w.lm_head);
  add_all(w.embed);
  if (w.lm_head.data != w.embed.data) add_all(w.lm_head);
  for (const LayerWeights& lw : w.layers) {
    if (const auto* a = std::get_if<AttentionWeights>(&lw.mixer)) {
      for (const WeightMatrix* m : {&a->q_proj, &a->k_proj, &a->v_proj, &a->o_proj}) add(*m), add_all(*m);
    } else {
      const auto& d = std::get<DeltaNetWeights>(lw.mixer);
      for (const WeightMatrix* m : {&d.in_proj_qkv, &d.in_proj_z, &d.in_proj_b, &d.in_proj_a, &d.out_proj})
        add(*m), add_all(*m);
    }
    const MoeWeights& moe = lw.moe;
    for (const WeightMatrix* m :
         {&moe.router, &moe.shared_gate, &moe.shared.gate, &moe.shared.up, &moe.shared.down})
      add(*m), add_all(*m);
    for (const ExpertWeights& e : moe.experts)
      for (const WeightMatrix* m : {&e.gate, &e.up, &e.down}) add_all(*m);
    if (!moe.experts.empty())
      for (const WeightMatrix* m : {&moe.experts[0].gate, &moe.experts[0].up, &moe.experts[0].down})
        for (int k = 0; k < c.n_experts_per_tok; ++k) add(*m);
  }
  cost.weight_bytes = bytes;
  cost.matmul_flops = 2 * active;
  cost.lm_head_flops = 2 * elements(w.lm_head);
  const double state = static_cast<double>(c.lin_n_v_heads) * c.lin_v_dim * c.lin_k_dim +
                       static_cast<double>(c.conv_kernel - 1) * static_cast<double>(c.conv_channels());
  cost.state_bytes = 2 * 4 * state * c.n_deltanet_layers();
  cost.kv_bytes_per_ctx =  // K and V rows of each kv head
      2.0 * static_cast<double>(kv_row_bytes(kv, c.head_dim)) * c.n_kv_heads * c.n_attention_layers();
  // Per value row and token: S·k, the update, S·q (2 + 3 + 2 FLOPs per state element).
  cost.deltanet_flops = 7.0 * c.lin_n_v_heads * c.lin_v_dim * c.lin_k_dim * c.n_deltanet_layers();
  cost.attn_flops_per_ctx = 4.0 * c.n_heads * c.head_dim * c.n_attention_layers();
  return cost;
}

}  // namespace qwick
