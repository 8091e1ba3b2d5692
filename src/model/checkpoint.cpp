#include "model/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/progress.h"

namespace qwick {
namespace fs = std::filesystem;

std::unique_ptr<Checkpoint> Checkpoint::open(const fs::path& dir) {
  auto ckpt = std::make_unique<Checkpoint>();
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> files;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", index_path.string(), e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail("{}: missing \"weight_map\" object", index_path.string());
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        fail("{}: weight_map entry \"{}\" is not a file name", index_path.string(), it.key());
      const std::string file = it.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "..")
        fail("{}: weight_map entry \"{}\" names an invalid file \"{}\"", index_path.string(), it.key(), file);
      weight_map[it.key()] = file;
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
    }
    if (files.empty()) fail("{}: weight_map is empty", index_path.string());
  } else if (fs::exists(dir / "model.safetensors")) {
    files.push_back("model.safetensors");
  } else {
    if (!fs::is_directory(dir)) fail("{}: not a model directory", dir.string());
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".safetensors") files.push_back(entry.path().filename().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) fail("{}: no .safetensors files and no model.safetensors.index.json", dir.string());
  }

  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    const fs::path path = dir / file;
    if (!fs::exists(path)) fail("{}: shard {} listed in the index does not exist", dir.string(), file);
    ckpt->shards_.push_back(SafetensorsFile::open(path.string()));
    const SafetensorsFile& shard = *ckpt->shards_.back();
    for (const TensorInfo& t : shard.tensors()) {
      auto [it, inserted] = ckpt->by_name_.emplace(t.name, &t);
      if (!inserted) fail("tensor \"{}\" appears in both {} and {}", t.name, *it->second->file, shard.path());
      if (!weight_map.empty()) {
        auto w = weight_map.find(t.name);
        if (w == weight_map.end())
          fail("tensor \"{}\" in {} is not listed in {}", t.name, shard.path(), index_path.string());
        if (w->second != file)
          fail("tensor \"{}\" is in {} but the index places it in {}", t.name, file, w->second);
      }
    }
  }
  for (const auto& [name, file] : weight_map)
    if (!ckpt->by_name_.count(name))
      fail("tensor \"{}\" is listed in the index but missing from {}", name, file);
  return ckpt;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::take(std::string_view name) {
  const TensorInfo* t = find(name);
  if (t == nullptr) fail("missing tensor \"{}\"", name);
  used_.emplace(name);
  return *t;
}

std::vector<std::string> Checkpoint::unused(const std::vector<std::string>& ignored_prefixes) const {
  std::vector<std::string> out;
  for (const auto& [name, t] : by_name_) {
    if (used_.count(name)) continue;
    bool ignored = false;
    for (const auto& p : ignored_prefixes) ignored = ignored || name.rfind(p, 0) == 0;
    if (!ignored) out.push_back(name);
  }
  return out;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : by_name_) out.push_back(name);
  return out;
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : by_name_) n += t->nbytes;
  return n;
}

void Checkpoint::load_pages() const {
  size_t total = 0;
  for (const auto& s : shards_) total += s->size();
  Progress progress("loading weights", total);
  constexpr size_t kStep = size_t{64} << 20;
  for (const auto& s : shards_) {
    s->prefetch();  // let the kernel read ahead while we touch the pages in order
    volatile uint8_t sink = 0;
    for (size_t off = 0; off < s->size(); off += kStep) {
      const size_t end = std::min(s->size(), off + kStep);
      for (size_t p = off; p < end; p += 4096) sink = sink + s->data()[p];
      progress.advance(end - off);
    }
  }
}

}  // namespace qwick
