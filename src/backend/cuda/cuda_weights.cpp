// Weight upload: plan every piece's place in one device allocation, then fill a pinned staging
// buffer piece by piece and copy it over in large transfers.
#include "backend/cuda/cuda_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/matmul/matmul.h"

namespace qwick::cuda {
namespace {

struct Piece {
  size_t offset = 0, bytes = 0;
  std::function<void(uint8_t*)> fill;  // writes `bytes` bytes
};

// A matrix whose device pointers are offsets into the storage until relocate().
struct PlannedMatrix {
  DeviceMatrix m;
  size_t data = 0, scales = 0, biases = 0;
};

class Planner {
 public:
  size_t add(size_t bytes, std::function<void(uint8_t*)> fill) {
    total_ = (total_ + 255) / 256 * 256;
    pieces_.push_back({total_, bytes, std::move(fill)});
    total_ += bytes;
    return pieces_.back().offset;
  }

  size_t vector(const std::vector<float>& v) {
    return add(v.size() * sizeof(float),
               [&v](uint8_t* dst) { std::memcpy(dst, v.data(), v.size() * sizeof(float)); });
  }

  // `name` only labels errors.
  size_t matrix(const WeightMatrix& w, const std::string& name) {
    const auto key = std::make_tuple(w.data, w.rows, w.cols);
    if (auto it = seen_.find(key); it != seen_.end()) return it->second;  // tied embedding
    const size_t id = stack({&w}, {name}).whole;
    return seen_[key] = id;
  }

  // Matrices of one format, group size and width planned as one matrix (their rows back to back,
  // and likewise their scales and biases), so that one launch can read them all; each part is also
  // a matrix of its own (a view of its rows). Matrices that differ are planned apart and `whole` is
  // kNone.
  static constexpr size_t kNone = ~size_t{0};
  struct Stack {
    size_t whole = kNone;
    std::vector<size_t> parts;
  };
  static bool alike(const std::vector<const WeightMatrix*>& ws) {
    const WeightMatrix& first = *ws.front();
    return std::all_of(ws.begin(), ws.end(), [&](const WeightMatrix* w) {
      return w->format == first.format && w->group_size == first.group_size && w->cols == first.cols;
    });
  }
  Stack stack(const std::vector<const WeightMatrix*>& ws, const std::vector<std::string>& names) {
    Stack out;
    const WeightMatrix& first = *ws.front();
    if (!alike(ws)) {
      for (size_t i = 0; i < ws.size(); ++i) out.parts.push_back(matrix(*ws[i], names[i]));
      return out;
    }
    PlannedMatrix p = shape(first, names.front());
    for (const WeightMatrix* w : ws) p.m.rows += w->rows;
    const size_t row_bytes = static_cast<size_t>(p.m.row_bytes),
                 group_bytes = first.is_affine() ? static_cast<size_t>(first.cols / first.group_size) * 2 : 0;
    // Each part's pieces: a fill writing its rows at dst + (the part's first row) · bytes per row.
    auto pieces = [&](size_t bytes_per_row, auto fill_of) {
      std::vector<std::pair<size_t, std::function<void(uint8_t*)>>> fills;
      size_t row = 0;
      for (const WeightMatrix* w : ws) fills.emplace_back(row * bytes_per_row, fill_of(*w)), row += w->rows;
      return add(bytes_per_row * static_cast<size_t>(p.m.rows), [fills](uint8_t* dst) {
        for (const auto& [at, fill] : fills) fill(dst + at);
      });
    };
    p.data = pieces(row_bytes, [row_bytes](const WeightMatrix& w) { return rows_fill(w, row_bytes); });
    if (first.is_affine()) {
      p.scales = pieces(group_bytes, [group_bytes](const WeightMatrix& w) {
        return groups_fill(w, w.scales, group_bytes);
      });
      p.biases = pieces(group_bytes, [group_bytes](const WeightMatrix& w) {
        return groups_fill(w, w.biases, group_bytes);
      });
    }
    planned_.push_back(p);
    out.whole = planned_.size() - 1;
    if (ws.size() == 1) return out;
    int64_t row = 0;
    for (const WeightMatrix* w : ws) {
      PlannedMatrix v = p;
      v.m.rows = w->rows;
      v.data += static_cast<size_t>(row) * row_bytes;
      v.scales += static_cast<size_t>(row) * group_bytes;
      v.biases += static_cast<size_t>(row) * group_bytes;
      planned_.push_back(v);
      out.parts.push_back(planned_.size() - 1);
      row += w->rows;
    }
    return out;
  }

  // Parts [first, first + count) of one stack (planned back to back) as one matrix.
  size_t joined(const Stack& s, size_t first, size_t count) {
    PlannedMatrix v = planned_[s.parts[first]];
    for (size_t i = first + 1; i < first + count; ++i) v.m.rows += planned_[s.parts[i]].m.rows;
    planned_.push_back(v);
    return planned_.size() - 1;
  }

  // Matrices of one width decoded to f32 and rounded to bf16, as the CPU's bf16 products take them
  // (matmul_bf16.h), their rows back to back in one bf16 matrix.
  size_t decoded_bf16(const std::vector<const WeightMatrix*>& ws, const std::vector<std::string>& names) {
    PlannedMatrix p;
    p.m.cols = ws.front()->cols;
    p.m.row_bytes = p.m.cols * 2;
    for (size_t i = 0; i < ws.size(); ++i) {
      const WeightMatrix& w = *ws[i];
      if (w.cols != p.m.cols)
        fail("{}: {} inputs where {} has {}", names[i], w.cols, names.front(), p.m.cols);
      shape(w, names[i]);  // the checks
      p.m.rows += w.rows;
    }
    p.data = add(static_cast<size_t>(p.m.rows * p.m.row_bytes), [ws](uint8_t* dst) {
      auto* out = reinterpret_cast<uint16_t*>(dst);
      std::vector<float> row(static_cast<size_t>(ws.front()->cols));
      for (const WeightMatrix* w : ws)
        for (int64_t r = 0; r < w->rows; ++r) {
          dequantize_row(*w, r, row.data());
          for (float v : row) *out++ = f32_to_bf16(v);
        }
    });
    planned_.push_back(p);
    return planned_.size() - 1;
  }

  // After the storage exists: the matrix with real device pointers.
  DeviceMatrix resolve(size_t id, const uint8_t* base) const {
    const PlannedMatrix& p = planned_[id];
    DeviceMatrix m = p.m;
    m.data = base + p.data;
    if (m.format != WeightFormat::kBF16) {
      m.scales = reinterpret_cast<const uint16_t*>(base + p.scales);
      m.biases = reinterpret_cast<const uint16_t*>(base + p.biases);
    }
    return m;
  }

  size_t total() const { return total_; }

  // Fills and copies every piece, through a pinned staging buffer (pieces larger than it go alone).
  void upload(uint8_t* base, cudaStream_t stream) const {
    constexpr size_t kStaging = size_t{128} << 20;
    uint8_t* staging = nullptr;
    check(cudaMallocHost(&staging, kStaging), "cudaMallocHost (weight staging)");
    std::unique_ptr<uint8_t, decltype(&cudaFreeHost)> guard(staging, &cudaFreeHost);
    size_t begin = 0, end = 0;  // device range [begin, end) staged, at staging + (offset - begin)
    auto flush = [&] {
      if (end > begin) {
        check(cudaMemcpyAsync(base + begin, staging, end - begin, cudaMemcpyHostToDevice, stream),
              "weight upload");
        check(cudaStreamSynchronize(stream), "weight upload");
      }
      begin = end = 0;
    };
    for (const Piece& p : pieces_) {
      if (p.bytes > kStaging) {
        flush();
        std::vector<uint8_t> big(p.bytes);
        p.fill(big.data());
        check(cudaMemcpy(base + p.offset, big.data(), p.bytes, cudaMemcpyHostToDevice), "weight upload");
        continue;
      }
      if (end == 0 || p.offset + p.bytes - begin > kStaging) {
        flush();
        begin = p.offset;
      }
      p.fill(staging + (p.offset - begin));
      end = p.offset + p.bytes;
    }
    flush();
  }

 private:
  // The device shape of w (rows left 0), after checking the kernels can read it.
  static PlannedMatrix shape(const WeightMatrix& w, const std::string& name) {
    if (w.cols % 64 != 0) fail("{}: {} inputs; the CUDA kernels need a multiple of 64", name, w.cols);
    PlannedMatrix p;
    p.m.cols = w.cols;
    if (w.is_affine()) {
      if (w.group_size % 32 != 0 || w.cols % w.group_size != 0)
        fail("{}: group size {} does not suit the CUDA kernels (a multiple of 32 dividing {})", name,
             w.group_size, w.cols);
      p.m.format = w.format;
      p.m.group_size = w.group_size;
      p.m.row_bytes = w.cols * w.bits() / 8;
    } else {
      p.m.format = WeightFormat::kBF16;
      p.m.row_bytes = w.cols * 2;
    }
    return p;
  }

  // Writes w's rows of `row_bytes` (affine codes as stored, dense values as bf16).
  static std::function<void(uint8_t*)> rows_fill(const WeightMatrix& w, size_t row_bytes) {
    if (w.is_affine())
      return [w, row_bytes](uint8_t* dst) {
        for (int64_t r = 0; r < w.rows; ++r)
          std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                      w.data + static_cast<size_t>(r) * w.row_stride, row_bytes);
      };
    return [w](uint8_t* dst) {
      auto* out = reinterpret_cast<uint16_t*>(dst);
      for (int64_t r = 0; r < w.rows; ++r) {
        const uint8_t* src = w.data + static_cast<size_t>(r) * w.row_stride;
        uint16_t* o = out + r * w.cols;
        switch (w.format) {
          case WeightFormat::kBF16:
            std::memcpy(o, src, static_cast<size_t>(w.cols) * 2);
            break;
          case WeightFormat::kF16:
            for (int64_t c = 0; c < w.cols; ++c) o[c] = f32_to_bf16(f16_to_f32(load_u16(src + 2 * c)));
            break;
          default:
            for (int64_t c = 0; c < w.cols; ++c) o[c] = f32_to_bf16(load_f32(src + 4 * c));
        }
      }
    };
  }

  // Writes w's per-row group values (scales or biases, from src) of `group_bytes` per row.
  static std::function<void(uint8_t*)> groups_fill(const WeightMatrix& w, const uint8_t* src,
                                                   size_t group_bytes) {
    return [w, src, group_bytes](uint8_t* dst) {
      for (int64_t r = 0; r < w.rows; ++r)
        std::memcpy(dst + static_cast<size_t>(r) * group_bytes, src + static_cast<size_t>(r) * w.group_stride,
                    group_bytes);
    };
  }

  std::vector<Piece> pieces_;
  std::vector<PlannedMatrix> planned_;
  std::map<std::tuple<const uint8_t*, int64_t, int64_t>, size_t> seen_;
  size_t total_ = 0;
};

// An attention layer's input projections planned: q (query rows), gate (kNone without the output
// gate), k, v, and q|gate|k|v as one matrix (whole, kNone when their formats differ). The gate's rows
// are taken out of q_proj's per-head interleave (CudaAttentionWeights).
struct AttentionInput {
  size_t whole, q, gate, k, v;
};
AttentionInput plan_attention_input(Planner& plan, const AttentionWeights& att, const ModelConfig& cfg,
                                    const std::string& at) {
  const WeightMatrix &qg = att.q_proj, &k = att.k_proj, &v = att.v_proj;
  AttentionInput out{Planner::kNone, Planner::kNone, Planner::kNone, Planner::kNone, Planner::kNone};
  if (!cfg.attn_output_gate) {
    const Planner::Stack in = plan.stack({&qg, &k, &v}, {at + "q_proj", at + "k_proj", at + "v_proj"});
    out.whole = in.whole, out.q = in.parts[0], out.k = in.parts[1], out.v = in.parts[2];
    return out;
  }
  const int64_t hd = cfg.head_dim, heads = cfg.n_heads;
  if (qg.rows != 2 * heads * hd)
    fail("{}q_proj: {} rows where the gated heads need {}", at, qg.rows, 2 * heads * hd);
  std::vector<WeightMatrix> rows;  // every head's query rows, then every head's gate rows
  for (int64_t half = 0; half < 2; ++half)
    for (int64_t h = 0; h < heads; ++h) rows.push_back(qg.row_slice((2 * h + half) * hd, hd));
  std::vector<const WeightMatrix*> parts;
  std::vector<std::string> names;
  for (const WeightMatrix& r : rows) parts.push_back(&r), names.push_back(at + "q_proj");
  parts.insert(parts.end(), {&k, &v});
  names.insert(names.end(), {at + "k_proj", at + "v_proj"});
  const size_t n = static_cast<size_t>(heads);
  const bool together = Planner::alike(parts);
  if (!together) parts.resize(2 * n), names.resize(2 * n);  // k or v differ: q and gate stacked alone
  Planner::Stack in = plan.stack(parts, names);
  if (!together) {
    in.parts.insert(in.parts.end(), {plan.matrix(k, at + "k_proj"), plan.matrix(v, at + "v_proj")});
    in.whole = Planner::kNone;
  }
  out.whole = in.whole;
  out.q = plan.joined(in, 0, n), out.gate = plan.joined(in, n, n);
  out.k = in.parts[2 * n], out.v = in.parts[2 * n + 1];
  return out;
}

}  // namespace

bool same_format(const DeviceMatrix& a, const DeviceMatrix& b) {
  return a.format == b.format;
}

UploadedMatrix upload_matrix(const WeightMatrix& w, cudaStream_t stream) {
  Planner plan;
  const size_t id = plan.matrix(w, "matrix");
  UploadedMatrix u;
  u.storage = DeviceBuffer(plan.total());
  plan.upload(u.storage.data(), stream);
  u.m = plan.resolve(id, u.storage.data());
  return u;
}

CudaModelWeights upload_weights(const Model& model, cudaStream_t stream) {
  const ModelConfig& cfg = model.config;
  const ModelWeights& w = model.weights;
  Planner plan;

  // Pass 1: plan. Host structs keep ids/offsets; pass 2 turns them into device pointers.
  struct LayerPlan {
    size_t input_norm, post_norm;
    std::vector<size_t> mats;  // attention: q k v o gate (kNone without) | deltanet: qkv z b a out
    size_t in_stack;           // attention: q|gate|k|v | deltanet: qkv|z|b|a as one matrix, or kNone
    std::vector<size_t> vecs;  // attention: q_norm k_norm | deltanet: conv a_neg dt_bias norm
    size_t router, shared_gate, route16, sg, su, sd;
    std::vector<size_t> experts;  // 3 per expert
  };
  std::vector<float> inv_freq;
  for (int i = 0; i < cfg.rotary_dim / 2; ++i)
    inv_freq.push_back(1.0f / std::pow(static_cast<float>(cfg.rope_theta),
                                       static_cast<float>(2 * i) / static_cast<float>(cfg.rotary_dim)));
  const size_t embed = plan.matrix(w.embed, "embedding");
  const size_t lm_head = plan.matrix(w.lm_head, "lm_head");
  const size_t final_norm = plan.vector(w.final_norm);
  const size_t rope = plan.vector(inv_freq);
  std::vector<LayerPlan> layers(w.layers.size());
  for (size_t L = 0; L < w.layers.size(); ++L) {
    const LayerWeights& lw = w.layers[L];
    LayerPlan& lp = layers[L];
    const std::string at = fmt::format("layer {} ", L);
    lp.input_norm = plan.vector(lw.input_norm);
    lp.post_norm = plan.vector(lw.post_norm);
    if (const auto* att = std::get_if<AttentionWeights>(&lw.mixer)) {
      const AttentionInput in = plan_attention_input(plan, *att, cfg, at);
      lp.in_stack = in.whole;
      lp.mats = {in.q, in.k, in.v, plan.matrix(att->o_proj, at + "o_proj"), in.gate};
      lp.vecs = {plan.vector(att->q_norm), plan.vector(att->k_norm)};
    } else {
      const auto& dn = std::get<DeltaNetWeights>(lw.mixer);
      const Planner::Stack in =
          plan.stack({&dn.in_proj_qkv, &dn.in_proj_z, &dn.in_proj_b, &dn.in_proj_a},
                     {at + "in_proj_qkv", at + "in_proj_z", at + "in_proj_b", at + "in_proj_a"});
      lp.in_stack = in.whole;
      lp.mats = in.parts;
      lp.mats.push_back(plan.matrix(dn.out_proj, at + "out_proj"));
      lp.vecs = {plan.vector(dn.conv), plan.vector(dn.a_neg), plan.vector(dn.dt_bias), plan.vector(dn.norm)};
    }
    const MoeWeights& moe = lw.moe;
    lp.router = plan.matrix(moe.router, at + "router");
    lp.shared_gate = plan.matrix(moe.shared_gate, at + "shared_expert_gate");
    lp.route16 =
        plan.decoded_bf16({&moe.router, &moe.shared_gate}, {at + "router", at + "shared_expert_gate"});
    lp.sg = plan.matrix(moe.shared.gate, at + "shared_expert.gate_proj");
    lp.su = plan.matrix(moe.shared.up, at + "shared_expert.up_proj");
    lp.sd = plan.matrix(moe.shared.down, at + "shared_expert.down_proj");
    for (size_t e = 0; e < moe.experts.size(); ++e) {
      const ExpertWeights& ex = moe.experts[e];
      const std::string name = fmt::format("{}expert {} ", at, e);
      lp.experts.push_back(plan.matrix(ex.gate, name + "gate"));
      lp.experts.push_back(plan.matrix(ex.up, name + "up"));
      lp.experts.push_back(plan.matrix(ex.down, name + "down"));
    }
  }

  CudaModelWeights out;
  out.storage = DeviceBuffer(plan.total());
  plan.upload(out.storage.data(), stream);
  const uint8_t* base = out.storage.data();
  auto M = [&](size_t id) { return plan.resolve(id, base); };
  auto stacked = [&](size_t id) { return id == Planner::kNone ? DeviceMatrix{} : M(id); };
  auto V = [&](size_t off) { return reinterpret_cast<const float*>(base + off); };

  // The tables: every device array of DeviceMatrix, in one second allocation.
  std::vector<DeviceMatrix> tables;
  struct TableRefs {
    size_t qkv = 0, proj = 0, route = 0, experts = 0;
  };
  std::vector<TableRefs> refs(layers.size());
  out.embed = M(embed);
  out.lm_head = M(lm_head);
  out.final_norm = V(final_norm);
  out.rope_inv_freq = V(rope);
  for (size_t L = 0; L < layers.size(); ++L) {
    const LayerPlan& lp = layers[L];
    CudaLayerWeights cl;
    cl.input_norm = V(lp.input_norm);
    cl.post_norm = V(lp.post_norm);
    if (lp.vecs.size() == 2) {
      CudaAttentionWeights a{M(lp.mats[0]), M(lp.mats[1]),       M(lp.mats[2]),
                             M(lp.mats[3]), stacked(lp.mats[4]), stacked(lp.in_stack),
                             nullptr,       V(lp.vecs[0]),       V(lp.vecs[1])};
      refs[L].qkv = tables.size();
      tables.insert(tables.end(), {a.q, a.k, a.v, a.gate});
      cl.mixer = a;
    } else {
      CudaDeltaNetWeights d{M(lp.mats[0]), M(lp.mats[1]),        M(lp.mats[2]), M(lp.mats[3]),
                            M(lp.mats[4]), stacked(lp.in_stack), nullptr,       V(lp.vecs[0]),
                            V(lp.vecs[1]), V(lp.vecs[2]),        V(lp.vecs[3])};
      refs[L].proj = tables.size();
      tables.insert(tables.end(), {d.qkv, d.b, d.a, d.z});
      cl.mixer = d;
    }
    CudaMoeWeights& m = cl.moe;
    m.router = M(lp.router);
    m.shared_gate = M(lp.shared_gate);
    m.route16 = M(lp.route16);
    m.shared_gate_proj = M(lp.sg);
    m.shared_up = M(lp.su);
    m.shared_down = M(lp.sd);
    refs[L].route = tables.size();
    tables.insert(tables.end(), {m.router, m.shared_gate});
    refs[L].experts = tables.size();
    for (size_t id : lp.experts) tables.push_back(M(id));
    tables.insert(tables.end(), {m.shared_gate_proj, m.shared_up, m.shared_down});
    m.expert_format = lp.experts.empty() ? WeightFormat::kBF16 : M(lp.experts[0]).format;
    m.expert_group_size = lp.experts.empty() ? 0 : M(lp.experts[0]).group_size;
    for (size_t id : lp.experts) {
      if (M(id).format != m.expert_format) fail("layer {}: the routed experts mix weight formats", L);
      if (M(id).group_size != m.expert_group_size) m.expert_group_size = 0;  // mixed: no int8 activations
    }
    out.layers.push_back(cl);
  }
  out.tables = DeviceBuffer(tables.size() * sizeof(DeviceMatrix));
  check(cudaMemcpy(out.tables.data(), tables.data(), tables.size() * sizeof(DeviceMatrix),
                   cudaMemcpyHostToDevice),
        "weight tables upload");
  const auto* t = reinterpret_cast<const DeviceMatrix*>(out.tables.data());
  for (size_t L = 0; L < layers.size(); ++L) {
    CudaLayerWeights& cl = out.layers[L];
    if (auto* a = std::get_if<CudaAttentionWeights>(&cl.mixer)) a->qkv_table = t + refs[L].qkv;
    if (auto* d = std::get_if<CudaDeltaNetWeights>(&cl.mixer)) d->proj_table = t + refs[L].proj;
    cl.moe.route_table = t + refs[L].route;
    cl.moe.experts = t + refs[L].experts;
  }
  out.bytes = static_cast<int64_t>(out.storage.size() + out.tables.size());
  return out;
}

void add_prefill_copies(CudaModelWeights& w, size_t budget, cudaStream_t stream) {
  // (sources, their copy): one source decoded as it is, or a SwiGLU pair stacked in 8-row runs.
  struct Job {
    std::vector<const DeviceMatrix*> from;
    DeviceMatrix* copy;
  };
  std::vector<Job> jobs;
  for (CudaLayerWeights& l : w.layers) {
    if (auto* a = std::get_if<CudaAttentionWeights>(&l.mixer))
      jobs.insert(jobs.end(), {{{&a->in_proj}, &a->in_proj16}, {{&a->o}, &a->o16}});
    else if (auto* d = std::get_if<CudaDeltaNetWeights>(&l.mixer))
      jobs.insert(jobs.end(), {{{&d->in_proj}, &d->in_proj16}, {{&d->out}, &d->out16}});
    const CudaMoeWeights& m = l.moe;
    if (m.shared_gate_proj.rows == m.shared_up.rows && m.shared_gate_proj.cols == m.shared_up.cols &&
        m.shared_gate_proj.rows % 64 == 0)
      jobs.push_back({{&m.shared_gate_proj, &m.shared_up}, &l.moe.shared_gate_up16});
    jobs.push_back({{&m.shared_down}, &l.moe.shared_down16});
  }
  // A single bf16 source is its own copy; everything else takes 256-byte aligned bytes of `copies`.
  const auto own = [](const Job& j) {
    return j.from.size() == 1 && j.from[0]->format == WeightFormat::kBF16;
  };
  const auto bytes = [&](const Job& j) {
    const DeviceMatrix& m = *j.from[0];
    return m.rows == 0 || own(j) ? size_t{0} : (j.from.size() * m.rows * m.cols * 2 + 255) / 256 * 256;
  };
  size_t total = 0;
  for (const Job& j : jobs) total += bytes(j);
  if (total > budget) return;
  w.copies = DeviceBuffer(total);
  size_t offset = 0;
  for (const Job& j : jobs) {
    const DeviceMatrix& first = *j.from[0];
    if (first.rows == 0) continue;
    if (own(j)) {
      *j.copy = first;
      continue;
    }
    auto* out = reinterpret_cast<uint16_t*>(w.copies.data() + offset);
    for (size_t part = 0; part < j.from.size(); ++part)
      decode_bf16(*j.from[part], out, stream, j.from.size() == 1 ? -1 : static_cast<int>(part));
    DeviceMatrix c;
    c.rows = static_cast<int64_t>(j.from.size()) * first.rows;
    c.cols = first.cols;
    c.row_bytes = 2 * first.cols;
    c.data = reinterpret_cast<const uint8_t*>(out);
    *j.copy = c;
    offset += bytes(j);
  }
  check(cudaStreamSynchronize(stream), "prefill copies");
  w.bytes += static_cast<int64_t>(total);
}

}  // namespace qwick::cuda
