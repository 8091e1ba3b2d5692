// Helpers shared by the unit tests: fixture paths, scratch directories, random data, editing a
// checkpoint into a malformed copy, and running the qwick binary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace qwick::test {

std::filesystem::path fixture(const std::string& relative);  // under tests/fixtures/reference
// A fresh, empty directory for one test, under a directory of this process's removed at its exit.
std::filesystem::path scratch_dir(const std::string& name);

std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f);
std::vector<int32_t> random_tokens(size_t n, int64_t vocab_size, uint64_t seed);

// Rows of hd values ([n, hd]) in a q8 KV cache's form (kv_q8.h): a code a value, a scale a row.
struct Q8Rows {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
Q8Rows q8_rows(const std::vector<float>& x, int hd);

// One tensor of a checkpoint being edited.
struct RawTensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using TensorMap = std::map<std::string, RawTensor>;

// Copies model directory `src` to `dst` (config files as they are) with every tensor passed
// through `edit` first; written as one model.safetensors.
void copy_checkpoint(const std::filesystem::path& src, const std::filesystem::path& dst,
                     const std::function<void(TensorMap&)>& edit);
TensorMap read_all_tensors(const std::filesystem::path& dir);
void write_tensors(const std::filesystem::path& file, const TensorMap& tensors);

// Runs the qwick binary with `args` (shell-quoted by the caller); returns exit code, fills output
// with stdout+stderr.
int run_qwick(const std::string& args, std::string* output, const std::string& stdin_text = "");

}  // namespace qwick::test
