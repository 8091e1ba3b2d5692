// A read-only memory map of a whole file. Weights are used in place from these maps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qwick {

class MappedFile {
 public:
  // Maps `path` read-only; throws Error naming the file if it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Asks the kernel to start reading the whole file in (MADV_WILLNEED); returns at once.
  void prefetch() const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace qwick
