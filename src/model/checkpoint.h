// A model directory's weights: one safetensors file, or shards listed by model.safetensors.index.json.
//
// All shards are memory-mapped and validated when opened. Binding code looks tensors up by name and
// marks them used; afterwards `unused()` lists what no binding consumed, so a naming drift in a new
// checkpoint fails loudly instead of silently dropping weights.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"

namespace qwick {

class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> open(const std::filesystem::path& dir);

  const TensorInfo* find(std::string_view name) const;
  // Returns the tensor and marks it used; throws Error naming it when it is missing.
  const TensorInfo& take(std::string_view name);
  bool has(std::string_view name) const { return find(name) != nullptr; }

  // Names of tensors never taken, excluding those under any of `ignored_prefixes`.
  std::vector<std::string> unused(const std::vector<std::string>& ignored_prefixes) const;
  std::vector<std::string> names() const;

  size_t tensor_count() const { return by_name_.size(); }
  size_t total_bytes() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // Reads every shard into the page cache now (instead of on first use), with a progress line when
  // stderr is a terminal.
  void load_pages() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
  std::set<std::string, std::less<>> used_;
};

}  // namespace qwick
