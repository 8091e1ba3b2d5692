#include "model/tensor_io.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/numeric.h"
#include "model/safetensors.h"

namespace qwick {
namespace {

const TensorInfo& find_tensor(const SafetensorsFile& f, const std::string& key) {
  const TensorInfo* t = f.find(key);
  if (t == nullptr) {
    std::string names;
    for (const auto& x : f.tensors()) names += (names.empty() ? "" : ", ") + x.name;
    fail("{}: no tensor \"{}\" (it holds: {})", f.path(), key, names);
  }
  return *t;
}

}  // namespace

std::vector<int32_t> read_i32_tensor(const std::string& path, const std::string& key) {
  const auto f = SafetensorsFile::open(path);
  const TensorInfo& t = find_tensor(*f, key);
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::kI32) {
      out[i] = static_cast<int32_t>(load_u32(t.data + 4 * i));
    } else if (t.dtype == DType::kI64) {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        fail("{}: tensor \"{}\" value {} does not fit a token id", path, key, v);
      out[i] = static_cast<int32_t>(v);
    } else {
      fail("{}: tensor \"{}\" is {}, expected I32 or I64", path, key, dtype_name(t.dtype));
    }
  }
  return out;
}

F32Tensor read_f32_tensor(const std::string& path, const std::string& key) {
  const auto f = SafetensorsFile::open(path);
  const TensorInfo& t = find_tensor(*f, key);
  F32Tensor out;
  out.shape = t.shape;
  out.data.resize(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.data.size(); ++i) {
    switch (t.dtype) {
      case DType::kF32:
        out.data[i] = load_f32(t.data + 4 * i);
        break;
      case DType::kBF16:
        out.data[i] = bf16_to_f32(load_u16(t.data + 2 * i));
        break;
      case DType::kF16:
        out.data[i] = f16_to_f32(load_u16(t.data + 2 * i));
        break;
      default:
        fail("{}: tensor \"{}\" is {}, expected F32, BF16 or F16", path, key, dtype_name(t.dtype));
    }
  }
  return out;
}

void write_f32_tensor(const std::string& path, const std::string& key, const F32Tensor& tensor) {
  std::vector<uint8_t> bytes(tensor.data.size() * 4);
  std::memcpy(bytes.data(), tensor.data.data(), bytes.size());
  SafetensorsWriter w;
  w.add_bytes(key, DType::kF32, tensor.shape, std::move(bytes));
  w.write(path);
}

}  // namespace qwick
