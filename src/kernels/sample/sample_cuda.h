// Choosing the next token on the GPU, so a decode step never has to copy the logits to the host.
//
// Greedy (temperature <= 0): the largest logit, ties to the lowest id. Otherwise the host Sampler's
// order (runtime/sampler.h): top-k -> top-p -> min-p -> temperature -> one draw. The cuts are found
// by bisection over the 32-bit ordered keys of the logits, each step one block-wide count or sum:
//   top-k  the largest key τ with #{key ≥ τ} ≥ k
//   top-p  the largest key τ with Σ_{kept, key ≥ τ} p ≥ top_p · Σ_kept p,   p = exp(l - l_max)
//   min-p  p ≥ min_p (p_max = 1)
// then r = u · Σ_kept exp((l - l_max) / T) is located in a prefix sum in id order. u comes from a
// counter-based generator (splitmix64 of seed and draw number), so a replayed CUDA graph draws a new
// number each step. One difference from the host: tokens tied exactly at a cut are all kept.
//
// A grid of 1024-thread blocks finds the argmax, the largest finite logit and the finite count over
// id ranges (greedy needs nothing more: 248K logits read by one block took 39 µs); the last block to
// finish merges them, runs the cuts and the draw, stores the token in the next step's input slot and
// advances the device position counter.
//
// With a top-k of at most kSampleFastTopK, each block also leaves its candidates: the finite logits of
// its range at or above its own k-th largest (at most kSampleBlockCandidates, id order). Every token the
// global top-k keeps is among them, so the last block cuts and draws over those few thousand instead of
// bisecting the whole vocabulary in one block (~1.4 ms a token at top-k 20, top-p 0.95: 64 passes over
// 248K logits). Where a block's ties overflow its room, or top-k keeps every finite token, the last
// block takes the whole vocabulary as before. Tests: tests/cuda/sample_cuda_test.cpp (Sample.*).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/sampling_params.h"

namespace qwick::cuda {

// The device's copy of what the sampler uses of SamplingParams (the cuts, the temperature and the
// seed; penalties and biases are the host Sampler's), with the count of numbers drawn so far. It
// lives on the device; the host rewrites it only between steps.
struct SamplingState {
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint64_t draws = 0;  // random numbers used so far; advanced by the kernel
};
// The state for `p`, `draws` numbers drawn so far.
inline SamplingState sampling_state(const SamplingParams& p, uint64_t draws) {
  return {p.temperature, p.top_k, p.top_p, p.min_p, p.seed, draws};
}
// Whether `p` asks for the draws state `s` makes.
inline bool draws_as(const SamplingState& s, const SamplingParams& p) {
  return p.temperature == s.temperature && p.top_k == s.top_k && p.top_p == s.top_p && p.min_p == s.min_p &&
         p.seed == s.seed;
}

struct alignas(16) SamplePartial {  // one block's share of the first pass (read back as one float4)
  float best;
  int32_t best_i;
  float top;
  float n_finite;
};
inline constexpr int kSampleMaxBlocks = 256;
struct SampleCandidate {
  int32_t id;
  float logit;
};
inline constexpr int kSampleFastTopK = 64;
inline constexpr int kSampleBlockCandidates = 128;  // room for ties at a block's cut

struct SampleArgs {
  const float* logits;  // [V]
  int64_t V;
  SamplingState* state;                   // device
  int32_t* token;                         // device: where the chosen id goes (the next step's input slot)
  int32_t* position;                      // device position counter to advance by one, or null
  SamplePartial* partials;                // device scratch [kSampleMaxBlocks]
  int32_t* counter;                       // device [1], zero before the first call; the last block resets it
  SampleCandidate* candidates = nullptr;  // device scratch [kSampleMaxBlocks][kSampleBlockCandidates]
  int32_t* candidate_counts = nullptr;    // device scratch [kSampleMaxBlocks]; null: no candidates
  // Mapped host memory the chosen id is also stored to, or null: the host reads it once the step's
  // work is done, with no copy queued between one decode step and the next.
  int32_t* host_token = nullptr;
};
void sample_token(const SampleArgs& a, cudaStream_t stream);

}  // namespace qwick::cuda
