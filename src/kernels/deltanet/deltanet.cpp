#include "kernels/deltanet/deltanet.h"

#include <cmath>
#include <cstring>

#include "kernels/activation.h"

namespace qwick {

void causal_conv_silu(const float* in, int64_t T, int64_t C, const float* w, int K, float* state, float* out,
                      int64_t c_begin, int64_t c_end) {
  const int64_t hist = K - 1;
  for (int64_t c = c_begin; c < c_end; ++c) {
    const float* wc = w + c * K;
    for (int64_t t = 0; t < T; ++t) {
      float acc = 0.0f;
      for (int j = 0; j < K; ++j) {
        const int64_t src = t - hist + j;  // index into the chunk; negative = from the state
        const float x = src >= 0 ? in[src * C + c] : state[(hist + src) * C + c];
        acc += wc[j] * x;
      }
      out[t * C + c] = silu(acc);
    }
    // Keep the last K-1 input rows: from the chunk where it is long enough, else shift the state.
    for (int64_t j = 0; j < hist; ++j) {
      const int64_t src = T - hist + j;
      state[j * C + c] = src >= 0 ? in[src * C + c] : state[(hist + src) * C + c];
    }
  }
}

void deltanet_gates(const float* b, const float* a, const float* a_neg, const float* dt_bias, int64_t n_heads,
                    float* beta, float* decay) {
  for (int64_t h = 0; h < n_heads; ++h) {
    beta[h] = sigmoid(b[h]);
    decay[h] = std::exp(a_neg[h] * softplus(a[h] + dt_bias[h]));
  }
}

void deltanet_scan_head(const DeltaNetHeadScan& s, int64_t T, int64_t Dk, int64_t Dv, float* state,
                        const VectorOps& ops) {
  for (int64_t t = 0; t < T; ++t) {
    const float* q = s.q + t * s.ld_qk;
    const float* k = s.k + t * s.ld_qk;
    const float* v = s.v + t * s.ld_v;
    const float decay = s.decay[t * s.ld_g], beta = s.beta[t * s.ld_g];
    float* o = s.o + t * s.ld_o;
    for (int64_t j = 0; j < Dv; ++j) o[j] = ops.deltanet_row(state + j * Dk, k, q, decay, beta, v[j], Dk);
  }
}

}  // namespace qwick
