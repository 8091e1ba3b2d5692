#include "backend/cuda/cuda_context.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/deltanet/deltanet_chunked_cuda.h"
#include "model/model.h"

namespace qwick::cuda {

CudaContext::CudaContext(const Model& model, const BackendOptions& backend_options)
    : cfg(model.config),
      max_context(backend_options.max_context > 0 ? backend_options.max_context
                                                  : cfg.max_position_embeddings),
      options(parse_cuda_off(backend_options.cuda_off)),
      int16(!backend_options.exact),
      kv_dtype(backend_options.kv_dtype) {
  if (kv_dtype == KvDtype::kF32) fail("--kv-type: the CUDA backend keeps its KV cache in bf16 or q8");
  if (cfg.n_heads % cfg.n_kv_heads != 0) fail("n_heads must be a multiple of n_kv_heads");
  if (cfg.expert_dim % kGemmTileRows != 0)
    fail("moe_intermediate_size {} must be a multiple of {} for the CUDA backend", cfg.expert_dim,
         kGemmTileRows);
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), "cudaEventCreate");
  weights = upload_weights(model, stream);
  allocate_decode();
}

CudaContext::~CudaContext() {
  if (stream) cudaStreamSynchronize(stream);
  if (fork) cudaEventDestroy(fork);
  if (join) cudaEventDestroy(join);
  if (side) cudaStreamDestroy(side);
  if (stream) cudaStreamDestroy(stream);
}

int64_t CudaContext::proj_stride() const {
  return std::max({cfg.conv_channels(), cfg.lin_v_total(), cfg.q_proj_rows(),
                   int64_t{cfg.n_kv_heads} * cfg.head_dim, int64_t{cfg.lin_n_v_heads}});
}

void CudaContext::make_prefill_copies() {
  constexpr size_t kHeadroom = size_t{4} << 30;
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  if (free > kHeadroom) add_prefill_copies(weights, free - kHeadroom, stream);
}

void CudaContext::allocate_decode() {
  const int64_t H = cfg.hidden_size, E = cfg.n_experts, k = cfg.n_experts_per_tok;
  const int64_t nq_hd = int64_t{cfg.n_heads} * cfg.head_dim;
  auto carve = [&](Carver& c) {
    const auto u = [](int64_t v) { return static_cast<size_t>(v); };
    d.token = c.take<int32_t>(1);
    d.position = c.take<int32_t>(1);
    d.sampling = c.take<SamplingState>(1);
    d.x = c.take<float>(u(H));
    d.normed = c.take<float>(u(H));
    d.proj = c.take<float>(u(4 * proj_stride()));
    d.conv = c.take<float>(u(cfg.conv_channels()));
    d.beta = c.take<float>(u(cfg.lin_n_v_heads));
    d.decay = c.take<float>(u(cfg.lin_n_v_heads));
    d.dn_out = c.take<float>(u(cfg.lin_v_total()));
    d.dn_normed = c.take<float>(u(cfg.lin_v_total()));
    d.q = c.take<float>(u(nq_hd));
    attention_splits = attention_decode_splits(cfg.n_kv_heads);
    d.partial = c.take<float>(u(cfg.n_heads) * u(attention_splits) * u(cfg.head_dim + 2));
    d.att_out = c.take<float>(u(nq_hd));
    d.router = c.take<float>(u(E + 1));
    d.route_counter = c.take<int32_t>(1);
    d.moe_sync = c.take<unsigned long long>(u(kMoeSyncWords * cfg.n_layers()));
    d.ids = c.take<int32_t>(u(k));
    d.gate_up_index = c.take<int32_t>(u(2 * k + 2));
    d.down_index = c.take<int32_t>(u(k + 1));
    d.weights = c.take<float>(u(k));
    d.gate_up = c.take<float>(u((2 * k + 2) * imax()));
    d.act = c.take<float>(u((k + 1) * imax()));
    d.down = c.take<float>(u((k + 1) * H));
    d.logits = c.take<float>(u(cfg.vocab_size));
    d.sample_partials = c.take<SamplePartial>(kSampleMaxBlocks);
    d.sample_counter = c.take<int32_t>(1);
    d.sample_candidates = c.take<SampleCandidate>(size_t{kSampleMaxBlocks} * kSampleBlockCandidates);
    d.sample_candidate_counts = c.take<int32_t>(kSampleMaxBlocks);
  };
  Carver sizing(nullptr);
  carve(sizing);
  decode_buf_ = DeviceBuffer(sizing.used());
  Carver real(decode_buf_.data());
  carve(real);
  check(cudaMemsetAsync(d.route_counter, 0, sizeof(int32_t), stream), "route counter");
  check(cudaMemsetAsync(d.moe_sync, 0,
                        sizeof(unsigned long long) * static_cast<size_t>(kMoeSyncWords * cfg.n_layers()),
                        stream),
        "moe counters");
  check(cudaMemsetAsync(d.sample_counter, 0, sizeof(int32_t), stream), "sample counter");
  sync();
}

void CudaContext::ensure_prefill_rows(int64_t rows) {
  if (rows <= prefill_rows_) return;
  prefill_buf_ = DeviceBuffer();  // free the smaller one first
  const int64_t H = cfg.hidden_size, E = cfg.n_experts, k = cfg.n_experts_per_tok, I = cfg.expert_dim,
                S = cfg.shared_expert_dim, C = cfg.conv_channels(), Vt = cfg.lin_v_total(),
                Hv = cfg.lin_n_v_heads;
  const int64_t nq_hd = int64_t{cfg.n_heads} * cfg.head_dim, kvr = int64_t{cfg.n_kv_heads} * cfg.head_dim;
  const int64_t n = rows, pairs = rows * k;
  auto carve = [&](Carver& c) {
    const auto u = [](int64_t v) { return static_cast<size_t>(v); };
    p.tokens = c.take<int32_t>(u(n));
    p.hidden = c.take<float>(u(n * H));
    p.normed = c.take<uint16_t>(u(n * H));
    p.att_in = c.take<float>(u(n * (cfg.q_proj_rows() + 2 * kvr)));
    p.q16 = c.take<uint16_t>(u(n * nq_hd));
    p.att16 = c.take<uint16_t>(u(n * nq_hd));
    p.dn_in = c.take<float>(u(n * (C + Vt + 2 * Hv)));
    p.conv = c.take<float>(u(n * C));
    p.beta = c.take<float>(u(n * Hv));
    p.decay = c.take<float>(u(n * Hv));
    p.dn_out = c.take<float>(u(n * Vt));
    p.dn16 = c.take<uint16_t>(u(n * Vt));
    p.dn_chunked = c.take<float>(u(deltanet_chunked_workspace_floats(n, cfg.lin_n_v_heads)));
    p.router = c.take<float>(u(n * route_ld()));
    p.ids = c.take<int32_t>(u(pairs));
    p.weights = c.take<float>(u(pairs));
    p.grouping.offsets = c.take<int32_t>(u(E + 1));
    p.grouping.counts = c.take<int32_t>(u(E + 1));
    p.grouping.slot_row = c.take<int32_t>(u(pairs));
    p.grouping.slot_of = c.take<int32_t>(u(pairs));
    p.grouping.tiles = c.take<GemmTile>(u(moe_max_tiles(pairs, static_cast<int>(E))));
    p.grouping.tile_count = c.take<int32_t>(1);
    p.gate_up = c.take<float>(u(pairs * 2 * I));
    p.act = c.take<uint16_t>(u(pairs * I));
    p.down = c.take<float>(u(pairs * H));
    p.shared_gate_up = c.take<float>(u(n * 2 * S));
    p.shared_act = c.take<uint16_t>(u(n * S));
    p.shared_down = c.take<float>(u(n * H));
    p.logits = c.take<float>(u(std::min(n, kLogitRowsPerPass) * cfg.vocab_size));
  };
  Carver sizing(nullptr);
  carve(sizing);
  prefill_buf_ = DeviceBuffer(sizing.used());
  Carver real(prefill_buf_.data());
  carve(real);
  check(cudaMemsetAsync(p.grouping.counts, 0, static_cast<size_t>(E + 1) * sizeof(int32_t), stream),
        "cudaMemsetAsync");
  prefill_rows_ = rows;
}

void CudaContext::gemv_one(const DeviceMatrix& m, const float* x, float* y, bool accumulate,
                           const float* norm, bool stream_lm) {
  GemvArgs a = gemv_of(m, x, y, accumulate, norm);
  a.stream = stream_lm;
  gemv(a, stream);
}

GemvArgs CudaContext::gemv_of(const DeviceMatrix& m, const float* x, float* y, bool accumulate,
                              const float* norm) const {
  GemvArgs a = gemv_args(m);
  a.x = x;
  a.y = y;
  a.accumulate = accumulate;
  a.norm_weight = norm;
  a.eps = cfg.rms_norm_eps;
  return a;
}

GemvArgs CudaContext::gemv_settings() const {
  GemvArgs a;
  a.overlap = options.overlap;
  a.i16 = int16;
  return a;
}

GemvArgs CudaContext::gemv_args(const DeviceMatrix& m) const {
  GemvArgs a = gemv_settings();
  a.single = m;
  a.format = m.format;
  a.max_rows = m.rows;
  a.max_cols = m.cols;
  return a;
}

void CudaContext::gemv_stack(std::initializer_list<DeviceMatrix> mats, const DeviceMatrix* table,
                             const float* x, float* y, int64_t y_stride, const float* norm,
                             bool trigger_after_wait) {
  const DeviceMatrix& first = *mats.begin();
  const bool uniform =
      std::all_of(mats.begin(), mats.end(), [&](const DeviceMatrix& m) { return same_format(m, first); });
  if (!uniform || mats.size() > kGemvMaxStack) {
    int64_t problem = 0;
    for (const DeviceMatrix& m : mats) {
      GemvArgs a = gemv_of(m, x, y + y_stride * problem++, false, norm);
      a.trigger_after_wait = trigger_after_wait;
      gemv(a, stream);
    }
    return;
  }
  GemvArgs a = gemv_settings();
  a.trigger_after_wait = trigger_after_wait;
  a.table = table;
  a.problems = static_cast<int>(mats.size());
  a.format = first.format;
  int problem = 0;
  for (const DeviceMatrix& m : mats) {
    a.max_rows = std::max(a.max_rows, m.rows), a.max_cols = std::max(a.max_cols, m.cols);
    a.stack_rows[problem++] = m.rows;
  }
  a.x = x;
  a.y = y;
  a.y_stride = y_stride;
  a.norm_weight = norm;
  a.eps = cfg.rms_norm_eps;
  gemv(a, stream);
}

int64_t CudaContext::project_in(const DeviceMatrix& stacked, const DeviceMatrix& stacked16,
                                std::initializer_list<DeviceMatrix> parts, float* y, int64_t n,
                                uint16_t* y16) {
  int64_t ld = 0;
  for (const DeviceMatrix& m : parts) ld += m.rows;
  const auto project = [&](const DeviceMatrix& m, int64_t col) {
    GemmArgs a = gemm_args(m, p.normed, cfg.hidden_size, n, y16 ? nullptr : y + col, ld);
    if (y16) a.y16 = y16 + col;
    a.overlap = prefill_overlap();
    gemm(a, stream);
  };
  if (stacked.rows == ld) {
    project(prefill_matrix(stacked, stacked16, n), 0);
    return ld;
  }
  int64_t col = 0;
  for (const DeviceMatrix& m : parts) project(m, col), col += m.rows;
  return ld;
}

void CudaContext::gemm_one(const DeviceMatrix& m, const uint16_t* x, int64_t ldx, int64_t n, float* y,
                           int64_t ldy, bool accumulate, cudaStream_t s) {
  GemmArgs a = gemm_args(m, x, ldx, n, y, ldy);
  a.accumulate = accumulate;
  a.overlap = prefill_overlap() && !s;
  gemm(a, s ? s : stream);
}

}  // namespace qwick::cuda
