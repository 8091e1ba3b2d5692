// Whole-tensor reads and writes of small safetensors files (token lists, logits, hidden states),
// for `qwick eval` and the tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwick {

struct F32Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Reads tensor `key` as int32 (from I32 or I64) / as f32 (from F32, BF16 or F16). Throws Error
// naming the file and key when it is missing or of another type.
std::vector<int32_t> read_i32_tensor(const std::string& path, const std::string& key);
F32Tensor read_f32_tensor(const std::string& path, const std::string& key);

void write_f32_tensor(const std::string& path, const std::string& key, const F32Tensor& tensor);

}  // namespace qwick
