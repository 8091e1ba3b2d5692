// qwick info: what a model directory holds.
#include <cstdio>
#include <map>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/model.h"

namespace qwick {

int cmd_info(int argc, char** argv) {
  std::string dir, mtp;
  ArgParser p("qwick info MODEL_DIR", "Loads and validates a model directory and summarises it.");
  p.positional("MODEL_DIR", "model directory", &dir, true);
  p.option({"--mtp"}, "DIR", "take the MTP head from this checkpoint of the same model", &mtp);
  if (!p.parse(argc, argv)) return 0;
  const auto model = load_model(dir, mtp);
  const ModelConfig& c = model->config;
  std::string pattern;
  for (LayerKind k : c.layers) pattern += k == LayerKind::kAttention ? 'A' : 'D';
  std::printf("model        %s\n", dir.c_str());
  std::printf("type         %s, layout %s\n", c.model_type.c_str(),
              checkpoint_layout_name(model->weights.layout));
  std::printf("layers       %d: %d DeltaNet + %d attention   [%s]  (D = DeltaNet, A = attention)\n",
              c.n_layers(), c.n_deltanet_layers(), c.n_attention_layers(), pattern.c_str());
  std::printf("hidden       %lld, vocab %lld, rms eps %g, tied embeddings %s\n",
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size),
              static_cast<double>(c.rms_norm_eps), c.tie_word_embeddings ? "yes" : "no");
  std::printf("attention    %d q heads / %d kv heads x %d, rotary %d dims, theta %g, output gate %s\n",
              c.n_heads, c.n_kv_heads, c.head_dim, c.rotary_dim, c.rope_theta,
              c.attn_output_gate ? "yes" : "no");
  std::printf("deltanet     %d qk heads x %d, %d v heads x %d, conv %d\n", c.lin_n_k_heads, c.lin_k_dim,
              c.lin_n_v_heads, c.lin_v_dim, c.conv_kernel);
  std::printf("moe          %d experts, top %d, expert dim %lld, shared expert dim %lld\n", c.n_experts,
              c.n_experts_per_tok, static_cast<long long>(c.expert_dim),
              static_cast<long long>(c.shared_expert_dim));
  if (const auto& head = model->weights.mtp)
    std::printf("mtp head     yes (%s), from %s: speculative decoding available\n",
                weight_format_name(head->fc.format), mtp.empty() ? "the model directory" : mtp.c_str());
  else
    std::printf("mtp head     none (no mtp.* tensors): no speculative decoding\n");
  std::printf("context      %lld positions\n", static_cast<long long>(c.max_position_embeddings));
  if (c.quant.enabled) {
    std::map<int, int> bits;
    for (const auto& [path, spec] : c.quant.overrides)
      if (spec) ++bits[spec->bits];
    std::printf("quantization affine %d-bit, group %d", c.quant.defaults.bits, c.quant.defaults.group_size);
    for (const auto& [b, n] : bits) std::printf(", %d module(s) at %d-bit", n, b);
    std::printf("\n");
  } else {
    std::printf("quantization none\n");
  }
  std::map<std::string, std::pair<size_t, size_t>> by_dtype;
  for (const auto& shard : model->checkpoint->shards())
    for (const auto& t : shard->tensors()) {
      auto& e = by_dtype[std::string(dtype_name(t.dtype))];
      ++e.first;
      e.second += t.nbytes;
    }
  std::printf("tensors      %zu in %zu file(s), %.3f GB\n", model->checkpoint->tensor_count(),
              model->checkpoint->shards().size(),
              static_cast<double>(model->checkpoint->total_bytes()) / 1e9);
  for (const auto& [dt, e] : by_dtype)
    std::printf("             %-5s %6zu tensors %10.3f GB\n", dt.c_str(), e.first,
                static_cast<double>(e.second) / 1e9);
  const auto stops = model->stop_token_ids();
  std::printf("stop ids    ");
  for (int32_t id : stops) std::printf(" %d", id);
  std::printf("\n");
  return 0;
}

}  // namespace qwick
