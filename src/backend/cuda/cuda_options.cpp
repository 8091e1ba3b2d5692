#include "backend/cuda/cuda_options.h"

#include <algorithm>

#include "core/error.h"

namespace qwick {

CudaOptions parse_cuda_off(const std::string& list) {
  CudaOptions o;
  size_t begin = 0;
  while (begin < list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = list.substr(begin, end - begin);
    if (name == "graph")
      o.graph = false;
    else if (name == "fusion")
      o.fusion = false;
    else if (name == "overlap")
      o.overlap = false;
    else if (name == "step-ahead")
      o.step_ahead = false;
    else if (!name.empty())
      fail("--cuda-off: unknown name \"{}\" (known: graph, fusion, overlap, step-ahead)", name);
    begin = end + 1;
  }
  return o;
}

}  // namespace qwick
