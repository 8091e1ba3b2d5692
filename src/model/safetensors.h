// Reading and writing safetensors files.
//
// Layout: u64 little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}}
// then the data buffer; offsets are relative to its start (file offset 8 + N + begin).
//
// The reader validates what the reference implementation (huggingface/safetensors) validates, so a
// file either loads completely or is rejected with a message naming the file, the tensor and the
// fault: header length bound, JSON syntax, no duplicate keys, known dtypes, dtype x shape equal to
// the byte span, offsets inside the data buffer, no overlaps and no holes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace qwick {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapped file; no alignment is guaranteed
  size_t nbytes = 0;
  const std::string* file = nullptr;  // path of the file it lives in, for messages

  int64_t numel() const;
  std::string shape_string() const;  // "[8192, 256]"
};

inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

class SafetensorsFile {
 public:
  // Maps and validates the file; throws Error on any fault.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  // Validates an in-memory image (the fuzz target's entry point). `bytes` must outlive the result.
  static std::unique_ptr<SafetensorsFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t size() const { return bytes_.size(); }
  const uint8_t* data() const { return bytes_.data(); }
  void prefetch() const;  // MADV_WILLNEED on the mapping (no-op for in-memory images)

 private:
  SafetensorsFile() = default;
  void parse_header();

  std::string path_;
  std::unique_ptr<MappedFile> map_;
  std::span<const uint8_t> bytes_;
  std::vector<TensorInfo> tensors_;  // sorted by name
  std::map<std::string, std::string> metadata_;
};

// Writes a safetensors file, streaming each tensor's bytes from a fill function so that files far
// larger than memory can be written. Tensors are stored sorted by element alignment, then name (as
// the reference writer does), so every tensor starts aligned to its element size.
class SafetensorsWriter {
 public:
  // Called repeatedly with consecutive pieces of a tensor's bytes: (byte offset, piece to fill).
  using Fill = std::function<void(size_t offset, std::span<uint8_t> out)>;

  void add(std::string name, DType dtype, std::vector<int64_t> shape, Fill fill);
  void add_bytes(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void set_metadata(std::string key, std::string value);
  size_t data_bytes() const;
  // Writes the file; `on_bytes` (optional) is told how many bytes went out, for progress.
  void write(const std::string& path, const std::function<void(size_t)>& on_bytes = {}) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes;
    Fill fill;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace qwick
