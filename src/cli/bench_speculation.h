// qwick bench --draft-accuracy: speculative decoding measured at a chosen acceptance rate.
//
// Random weights make the MTP head's drafts worthless, so the bench first decodes the true greedy
// continuation of each context, then speculates with an oracle that replaces every drafted token
// by the true next one with probability P, else by a wrong one. The head still runs, and the
// verify pass, acceptance, rollback and commit are real; the output must equal the plain greedy
// one (an Error otherwise). Per context length it prints the plain decode rate, each (depth, P)
// with its tokens a step and the split of a step (draft, verify, the rest), and the cost of a
// verify pass of 1..8 rows against a plain decode step.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/backend.h"

namespace qwick {

struct SpeculationBench {
  std::vector<int64_t> lengths;    // context lengths
  std::vector<double> accuracies;  // oracle draft accuracies P
  std::vector<int> depths;         // drafts a step
  int64_t tokens = 64;             // generated tokens a run
  int64_t chunk = 512;             // prefill chunk
};

// Runs on `backend` (which must run the MTP head); returns the measurements as JSON.
nlohmann::json bench_speculation(Backend& backend, int64_t vocab_size, const SpeculationBench& spec);

}  // namespace qwick
