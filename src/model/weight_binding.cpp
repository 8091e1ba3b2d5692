// Binding checkpoint tensors to the weight structs, for the three layouts of model-spec.md §3.
#include <cmath>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/numeric.h"
#include "model/weights.h"

namespace qwick {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kF16:
      return "f16";
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kAffine4:
      return "affine 4-bit";
    case WeightFormat::kAffine8:
      return "affine 8-bit";
  }
  return "?";
}

const char* checkpoint_layout_name(CheckpointLayout layout) {
  switch (layout) {
    case CheckpointLayout::kOfficial:
      return "official (model.language_model.*, fused experts)";
    case CheckpointLayout::kTransformers:
      return "transformers (model.*, per-expert tensors)";
    case CheckpointLayout::kMlx:
      return "mlx (language_model.model.*, switch_mlp)";
  }
  return "?";
}

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

WeightFormat dense_format(const TensorInfo& t) {
  switch (t.dtype) {
    case DType::kF32:
      return WeightFormat::kF32;
    case DType::kF16:
      return WeightFormat::kF16;
    case DType::kBF16:
      return WeightFormat::kBF16;
    default:
      fail(
          "tensor \"{}\" has dtype {}; expected F32, F16 or BF16 (or U32 with .scales/.biases for MLX "
          "affine)",
          t.name, dtype_name(t.dtype));
  }
}

struct LayoutNames {
  CheckpointLayout layout;
  std::string prefix, head;  // of the decoder's tensors, and the lm_head module
};

// The layout, from the name of the token embedding; nullopt when there is none (a head-only file).
std::optional<LayoutNames> detect_layout(const Checkpoint& ckpt) {
  if (ckpt.has("language_model.model.embed_tokens.weight"))
    return LayoutNames{CheckpointLayout::kMlx, "language_model.model.", "language_model.lm_head"};
  if (ckpt.has("model.language_model.embed_tokens.weight"))
    return LayoutNames{CheckpointLayout::kOfficial, "model.language_model.", "lm_head"};
  if (ckpt.has("model.embed_tokens.weight"))
    return LayoutNames{CheckpointLayout::kTransformers, "model.", "lm_head"};
  return std::nullopt;
}

// The MTP head's tensors sit under the first of these prefixes the checkpoint uses: the official
// release's `mtp.`, and the spellings a conversion that renames the decoder may give it.
std::optional<std::string> find_mtp_prefix(const Checkpoint& ckpt) {
  const std::vector<std::string> names = ckpt.names();
  for (const char* prefix : {"mtp.", "model.mtp.", "language_model.model.mtp.", "language_model.mtp."})
    for (const std::string& n : names)
      if (n.starts_with(prefix)) return std::string(prefix);
  return std::nullopt;
}

class Binder {
 public:
  Binder(const ModelConfig& config, Checkpoint& ckpt, LayoutNames names)
      : cfg_(config),
        ckpt_(ckpt),
        layout_(names.layout),
        prefix_(std::move(names.prefix)),
        head_(std::move(names.head)) {}

  ModelWeights bind() {
    ModelWeights w;
    w.layout = layout_;
    const int64_t H = cfg_.hidden_size;
    w.embed = matrix(prefix_ + "embed_tokens", cfg_.vocab_size, H);
    w.final_norm = norm(prefix_ + "norm.weight", H);
    if (cfg_.tie_word_embeddings) {
      w.lm_head = w.embed;
      if (ckpt_.has(head_ + ".weight")) lm_head_ignored_ = true;
    } else {
      w.lm_head = matrix(head_, cfg_.vocab_size, H);
    }
    for (int L = 0; L < cfg_.n_layers(); ++L)
      w.layers.push_back(
          layer(layer_prefix(L), cfg_.layers[static_cast<size_t>(L)], fmt::format("layer {}", L)));
    if (const auto mtp_prefix = find_mtp_prefix(ckpt_)) w.mtp = mtp(*mtp_prefix);

    std::vector<std::string> ignored = {"model.visual.", "visual.", "vision_tower.", "model.vision_tower."};
    if (lm_head_ignored_) ignored.push_back(head_ + ".");
    const auto extra = ckpt_.unused(ignored);
    if (!extra.empty())
      fail(
          "unexpected tensor \"{}\" ({} tensor(s) in the checkpoint are not part of the {}-layer qwen3_5_moe "
          "text model this config describes)",
          extra.front(), extra.size(), cfg_.n_layers());
    return w;
  }

  // The head under `p` (model-spec.md §2.8). Every piece must be there once any is.
  MtpWeights mtp(const std::string& p) {
    const int64_t H = cfg_.hidden_size;
    MtpWeights m;
    m.pre_fc_norm_embedding = norm(p + "pre_fc_norm_embedding.weight", H);
    m.pre_fc_norm_hidden = norm(p + "pre_fc_norm_hidden.weight", H);
    m.fc = matrix(p + "fc", H, 2 * H);
    m.layer = layer(p + "layers.0.", LayerKind::kAttention, "the MTP head");
    m.norm = norm(p + "norm.weight", H);
    return m;
  }

 private:
  std::string layer_prefix(int L) const { return prefix_ + "layers." + std::to_string(L) + "."; }

  const TensorInfo& take_shaped(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo& t = ckpt_.take(name);
    if (t.shape != shape)
      fail("tensor \"{}\" has shape {}; the config needs {}", name, t.shape_string(), shape_str(shape));
    return t;
  }

  // `module` is the path without .weight; affine when the checkpoint has module.scales.
  // Stacked tensors (experts) pass `stack` > 0 and get one matrix per leading index.
  std::vector<WeightMatrix> matrices(const std::string& module, int64_t stack, int64_t rows, int64_t cols) {
    const std::string wname = module + ".weight";
    // [stack,] rows, last
    auto with_lead = [stack, rows](int64_t last) {
      return stack > 0 ? std::vector<int64_t>{stack, rows, last} : std::vector<int64_t>{rows, last};
    };
    WeightMatrix m;
    m.rows = rows;
    m.cols = cols;
    const TensorInfo* probe = ckpt_.find(wname);
    if (probe == nullptr) fail("missing tensor \"{}\"", wname);
    if (ckpt_.has(module + ".scales")) {
      if (!cfg_.quant.enabled)
        fail("tensor \"{}.scales\" marks {} as quantized but config.json has no quantization block", module,
             module);
      const auto spec = cfg_.quant.for_module(module);
      if (!spec)
        fail("tensor \"{}.scales\" exists but the config's quantization block leaves {} unquantized", module,
             module);
      if (probe->dtype != DType::kU32)
        fail("tensor \"{}\" has dtype {}; quantized weights are U32", wname, dtype_name(probe->dtype));
      if (cols % spec->group_size != 0)
        fail("tensor \"{}\": {} inputs are not a multiple of group_size {}", wname, cols, spec->group_size);
      if (!probe->shape.empty() && probe->shape.back() * 32 != cols * spec->bits) {
        const int64_t implied = probe->shape.back() * 32 / cols;
        fail("tensor \"{}\" is packed {} wide, i.e. {}-bit for {} inputs, but the config says {} bits", wname,
             probe->shape.back(), implied, cols, spec->bits);
      }
      const TensorInfo& t = take_shaped(wname, with_lead(cols * spec->bits / 32));
      const std::vector<int64_t> gshape = with_lead(cols / spec->group_size);
      const TensorInfo& s = take_shaped(module + ".scales", gshape);
      const TensorInfo& b = take_shaped(module + ".biases", gshape);
      for (const TensorInfo* x : {&s, &b})
        if (x->dtype != DType::kBF16)
          fail("tensor \"{}\" has dtype {}; qwick reads BF16 scales and biases", x->name,
               dtype_name(x->dtype));
      m.format = spec->bits == 4 ? WeightFormat::kAffine4 : WeightFormat::kAffine8;
      m.group_size = spec->group_size;
      m.data = t.data;
      m.row_stride = static_cast<size_t>(cols * spec->bits / 8);
      m.scales = s.data;
      m.biases = b.data;
      m.group_stride = static_cast<size_t>(cols / spec->group_size) * 2;
    } else {
      if (probe->dtype == DType::kU32)
        fail("tensor \"{}\" is packed (U32) but \"{}.scales\" is missing", wname, module);
      const TensorInfo& t = take_shaped(wname, with_lead(cols));
      m.format = dense_format(t);
      m.data = t.data;
      m.row_stride = static_cast<size_t>(cols) * static_cast<size_t>(m.bits() / 8);
    }
    return split_stack(m, std::max<int64_t>(stack, 1));
  }

  static std::vector<WeightMatrix> split_stack(const WeightMatrix& whole, int64_t stack) {
    std::vector<WeightMatrix> out;
    for (int64_t e = 0; e < stack; ++e) {
      WeightMatrix m = whole;
      m.data = whole.data + static_cast<size_t>(e * whole.rows) * whole.row_stride;
      if (whole.is_affine()) {
        m.scales = whole.scales + static_cast<size_t>(e * whole.rows) * whole.group_stride;
        m.biases = whole.biases + static_cast<size_t>(e * whole.rows) * whole.group_stride;
      }
      out.push_back(m);
    }
    return out;
  }

  WeightMatrix matrix(const std::string& module, int64_t rows, int64_t cols) {
    return matrices(module, 0, rows, cols).front();
  }

  // A dense fused tensor without the .weight suffix (official experts.gate_up_proj / down_proj).
  WeightMatrix fused_dense(const std::string& name, std::vector<int64_t> shape) {
    const TensorInfo& t = take_shaped(name, shape);
    WeightMatrix m;
    m.format = dense_format(t);
    m.rows = shape[1];
    m.cols = shape[2];
    m.data = t.data;
    m.row_stride = static_cast<size_t>(m.cols) * static_cast<size_t>(m.bits() / 8);
    return m;
  }

  std::vector<float> vector_f32(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo& t = take_shaped(name, shape);
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      switch (t.dtype) {
        case DType::kF32:
          v[i] = load_f32(t.data + 4 * i);
          break;
        case DType::kBF16:
          v[i] = bf16_to_f32(load_u16(t.data + 2 * i));
          break;
        case DType::kF16:
          v[i] = f16_to_f32(load_u16(t.data + 2 * i));
          break;
        default:
          fail("tensor \"{}\" has dtype {}; expected F32, BF16 or F16", name, dtype_name(t.dtype));
      }
      if (!std::isfinite(v[i])) fail("tensor \"{}\" holds a non-finite value at index {}", name, i);
    }
    return v;
  }

  // Zero-centred RMSNorm weight, returned as the multiplier 1 + w. MLX files already hold 1 + w.
  std::vector<float> norm(const std::string& name, int64_t n) {
    std::vector<float> v = vector_f32(name, {n});
    if (layout_ != CheckpointLayout::kMlx)
      for (float& x : v) x += 1.0f;
    return v;
  }

  AttentionWeights attention(const std::string& p) {
    AttentionWeights a;
    const int64_t H = cfg_.hidden_size, hd = cfg_.head_dim;
    a.q_proj = matrix(p + "self_attn.q_proj", cfg_.q_proj_rows(), H);
    a.k_proj = matrix(p + "self_attn.k_proj", cfg_.n_kv_heads * hd, H);
    a.v_proj = matrix(p + "self_attn.v_proj", cfg_.n_kv_heads * hd, H);
    a.o_proj = matrix(p + "self_attn.o_proj", H, cfg_.n_heads * hd);
    a.q_norm = norm(p + "self_attn.q_norm.weight", hd);
    a.k_norm = norm(p + "self_attn.k_norm.weight", hd);
    return a;
  }

  DeltaNetWeights deltanet(const std::string& p) {
    DeltaNetWeights d;
    const int64_t H = cfg_.hidden_size, C = cfg_.conv_channels(), Vt = cfg_.lin_v_total();
    const int64_t Hv = cfg_.lin_n_v_heads, K = cfg_.conv_kernel;
    d.in_proj_qkv = matrix(p + "linear_attn.in_proj_qkv", C, H);
    d.in_proj_z = matrix(p + "linear_attn.in_proj_z", Vt, H);
    d.in_proj_b = matrix(p + "linear_attn.in_proj_b", Hv, H);
    d.in_proj_a = matrix(p + "linear_attn.in_proj_a", Hv, H);
    d.out_proj = matrix(p + "linear_attn.out_proj", H, Vt);
    // transformers stores the depthwise conv as [C, 1, K], MLX as [C, K, 1]: the same bytes.
    const std::string conv = p + "linear_attn.conv1d.weight";
    const TensorInfo* ct = ckpt_.find(conv);
    const bool mlx_shape = ct != nullptr && ct->shape == std::vector<int64_t>{C, K, 1};
    d.conv = vector_f32(conv, mlx_shape ? std::vector<int64_t>{C, K, 1} : std::vector<int64_t>{C, 1, K});
    d.a_neg = vector_f32(p + "linear_attn.A_log", {Hv});
    for (float& x : d.a_neg) x = -std::exp(x);
    d.dt_bias = vector_f32(p + "linear_attn.dt_bias", {Hv});
    d.norm = vector_f32(p + "linear_attn.norm.weight", {cfg_.lin_v_dim});
    return d;
  }

  MoeWeights moe(const std::string& p, const std::string& what) {
    MoeWeights m;
    const int64_t H = cfg_.hidden_size, I = cfg_.expert_dim, S = cfg_.shared_expert_dim, E = cfg_.n_experts;
    m.router = matrix(p + "mlp.gate", E, H);
    m.shared.gate = matrix(p + "mlp.shared_expert.gate_proj", S, H);
    m.shared.up = matrix(p + "mlp.shared_expert.up_proj", S, H);
    m.shared.down = matrix(p + "mlp.shared_expert.down_proj", H, S);
    m.shared_gate = matrix(p + "mlp.shared_expert_gate", 1, H);
    m.experts.resize(static_cast<size_t>(E));
    if (ckpt_.has(p + "mlp.switch_mlp.gate_proj.weight")) {  // MLX: stacked [E, ...] per projection
      auto g = matrices(p + "mlp.switch_mlp.gate_proj", E, I, H);
      auto u = matrices(p + "mlp.switch_mlp.up_proj", E, I, H);
      auto d = matrices(p + "mlp.switch_mlp.down_proj", E, H, I);
      for (int64_t e = 0; e < E; ++e) m.experts[e] = {g[e], u[e], d[e]};
    } else if (ckpt_.has(p + "mlp.experts.gate_up_proj")) {  // official: fused [E, 2I, H], gate rows first
      const WeightMatrix gu = fused_dense(p + "mlp.experts.gate_up_proj", {E, 2 * I, H});
      const WeightMatrix dn = fused_dense(p + "mlp.experts.down_proj", {E, H, I});
      for (int64_t e = 0; e < E; ++e) {
        const WeightMatrix both = gu.row_slice(e * 2 * I, 2 * I);
        m.experts[e] = {both.row_slice(0, I), both.row_slice(I, I), dn.row_slice(e * H, H)};
      }
    } else if (ckpt_.has(p + "mlp.experts.0.gate_proj.weight")) {  // transformers: one tensor per expert
      for (int64_t e = 0; e < E; ++e) {
        const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        m.experts[e] = {matrix(q + "gate_proj", I, H), matrix(q + "up_proj", I, H),
                        matrix(q + "down_proj", H, I)};
      }
    } else {
      fail(
          "missing expert weights for {}: no {}mlp.switch_mlp.gate_proj.weight, {}mlp.experts.gate_up_proj "
          "or {}mlp.experts.0.gate_proj.weight",
          what, p, p, p);
    }
    return m;
  }

  // The decoder layer under `p`; `what` names it in errors.
  LayerWeights layer(const std::string& p, LayerKind kind, const std::string& what) {
    LayerWeights lw;
    const int64_t H = cfg_.hidden_size;
    lw.input_norm = norm(p + "input_layernorm.weight", H);
    lw.post_norm = norm(p + "post_attention_layernorm.weight", H);
    if (kind == LayerKind::kAttention)
      lw.mixer = attention(p);
    else
      lw.mixer = deltanet(p);
    lw.moe = moe(p, what);
    return lw;
  }

  const ModelConfig& cfg_;
  Checkpoint& ckpt_;
  CheckpointLayout layout_;
  std::string prefix_, head_;
  bool lm_head_ignored_ = false;
};

}  // namespace

ModelWeights bind_weights(const ModelConfig& config, Checkpoint& checkpoint) {
  const auto names = detect_layout(checkpoint);
  if (!names)
    fail(
        "cannot find the token embedding: no tensor named language_model.model.embed_tokens.weight, "
        "model.language_model.embed_tokens.weight or model.embed_tokens.weight");
  return Binder(config, checkpoint, *names).bind();
}

MtpWeights bind_mtp_weights(const ModelConfig& config, Checkpoint& checkpoint) {
  const auto prefix = find_mtp_prefix(checkpoint);
  if (!prefix) fail("the checkpoint has no MTP head (no tensor named mtp.*)");
  // A head-only file has no embedding to tell its layout by: MLX files fold the norms' 1 in and
  // quantize every matrix, so an affine fc marks one.
  auto names = detect_layout(checkpoint);
  if (!names) {
    const bool mlx = checkpoint.has(*prefix + "fc.scales");
    names = LayoutNames{mlx ? CheckpointLayout::kMlx : CheckpointLayout::kOfficial, "", ""};
  }
  MtpWeights head = Binder(config, checkpoint, *names).mtp(*prefix);
  for (const std::string& name : checkpoint.unused({}))
    if (name.starts_with(*prefix)) fail("unexpected tensor \"{}\" in the MTP head", name);
  return head;
}

}  // namespace qwick
