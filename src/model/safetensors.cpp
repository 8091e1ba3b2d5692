#include "model/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace qwick {
namespace {

using json = nlohmann::json;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses the header JSON, rejecting duplicate keys in any object (nlohmann keeps the last one).
json parse_header_json(std::string_view text, const std::string& where) {
  std::vector<std::set<std::string>> keys_per_object;
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_per_object.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys_per_object.empty()) keys_per_object.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_per_object.empty() && !keys_per_object.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", where, e.what());
  }
  if (!duplicate.empty()) fail("{}: header has duplicate key \"{}\"", where, duplicate);
  return header;
}

int64_t checked_numel(const json& shape, const std::string& where, const std::string& name) {
  if (!shape.is_array()) fail("{}: tensor \"{}\" has no shape array", where, name);
  int64_t n = 1;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) fail("{}: tensor \"{}\" has an invalid dimension {}", where, name, d.dump());
    const uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (v != 0 && static_cast<uint64_t>(n) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / v))
      fail("{}: tensor \"{}\" shape {} overflows", where, name, shape.dump());
    n *= static_cast<int64_t>(v);
  }
  return n;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto map = std::make_unique<MappedFile>(path);
  auto file = parse(std::span<const uint8_t>(map->data(), map->size()), path);
  file->map_ = std::move(map);
  return file;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes,
                                                        const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  f->bytes_ = bytes;
  f->parse_header();
  return f;
}

void SafetensorsFile::prefetch() const {
  if (map_) map_->prefetch();
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

void SafetensorsFile::parse_header() {
  const std::string& where = path_;
  if (bytes_.size() < 8) fail("{}: file is too short ({} bytes) to be safetensors", where, bytes_.size());
  const uint64_t header_len = read_u64_le(bytes_.data());
  if (header_len > kMaxSafetensorsHeader)
    fail("{}: header length {} exceeds the {} byte limit", where, header_len, kMaxSafetensorsHeader);
  if (header_len > bytes_.size() - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes)", where, header_len, bytes_.size());
  const std::string_view text(reinterpret_cast<const char*>(bytes_.data() + 8), header_len);
  if (text.empty() || text.front() != '{') fail("{}: header does not start with '{{'", where);
  const json header = parse_header_json(text, where);
  if (!header.is_object()) fail("{}: header is not a JSON object", where);

  const uint8_t* data = bytes_.data() + 8 + header_len;
  const uint64_t data_size = bytes_.size() - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ is not an object", where);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("{}: __metadata__ value for \"{}\" is not a string", where, m.key());
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail("{}: entry \"{}\" is not an object", where, key);
    const auto dtype_it = v.find("dtype");
    if (dtype_it == v.end() || !dtype_it->is_string()) fail("{}: tensor \"{}\" has no dtype", where, key);
    const auto dtype = parse_dtype(dtype_it->get<std::string>());
    if (!dtype) fail("{}: tensor \"{}\" has unknown dtype \"{}\"", where, key, dtype_it->get<std::string>());
    const auto shape_it = v.find("shape");
    if (shape_it == v.end()) fail("{}: tensor \"{}\" has no shape", where, key);
    const int64_t numel = checked_numel(*shape_it, where, key);
    const auto off_it = v.find("data_offsets");
    if (off_it == v.end() || !off_it->is_array() || off_it->size() != 2 ||
        !(*off_it)[0].is_number_unsigned() || !(*off_it)[1].is_number_unsigned())
      fail("{}: tensor \"{}\" has invalid data_offsets", where, key);
    const uint64_t begin = (*off_it)[0].get<uint64_t>(), end = (*off_it)[1].get<uint64_t>();
    if (begin > end) fail("{}: tensor \"{}\" data_offsets [{}, {}] are reversed", where, key, begin, end);
    if (end > data_size)
      fail("{}: tensor \"{}\" data_offsets [{}, {}] run past the data buffer ({} bytes)", where, key, begin,
           end, data_size);
    const int bits = dtype_bits(*dtype);
    const unsigned __int128 total_bits = static_cast<unsigned __int128>(numel) * static_cast<unsigned>(bits);
    if (total_bits % 8 != 0 || total_bits / 8 != end - begin)
      fail("{}: tensor \"{}\" is {} {} ({} bytes) but data_offsets span {} bytes", where, key,
           dtype_it->get<std::string>(), shape_it->dump(), static_cast<uint64_t>(total_bits / 8),
           end - begin);
    TensorInfo t;
    t.name = key;
    t.dtype = *dtype;
    for (const auto& d : *shape_it) t.shape.push_back(d.get<int64_t>());
    t.data = data + begin;
    t.nbytes = end - begin;
    t.file = &path_;
    tensors_.push_back(std::move(t));
  }

  // The data buffer must be covered exactly: sorted by offset, each tensor starts where the previous
  // one ended and the last one ends at the end of the file.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->data != b->data ? a->data < b->data : a->nbytes < b->nbytes;
  });
  uint64_t expect = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : by_offset) {
    const uint64_t begin = static_cast<uint64_t>(t->data - data);
    if (begin < expect)
      fail("{}: tensor \"{}\" overlaps tensor \"{}\" in the data buffer", where, t->name, prev->name);
    if (begin > expect)
      fail("{}: {} unused bytes in the data buffer before tensor \"{}\"", where, begin - expect, t->name);
    expect = begin + t->nbytes;
    prev = t;
  }
  if (expect != data_size)
    fail("{}: data buffer is {} bytes but the tensors cover {}", where, data_size, expect);

  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
}

// ---- writer ---------------------------------------------------------------------------------------

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, Fill fill) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t nbytes = static_cast<size_t>(numel) * static_cast<size_t>(dtype_bits(dtype)) / 8;
  entries_.push_back({std::move(name), dtype, std::move(shape), nbytes, std::move(fill)});
}

void SafetensorsWriter::add_bytes(std::string name, DType dtype, std::vector<int64_t> shape,
                                  std::vector<uint8_t> bytes) {
  auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add(std::move(name), dtype, std::move(shape), [shared](size_t offset, std::span<uint8_t> out) {
    std::memcpy(out.data(), shared->data() + offset, out.size());
  });
  if (entries_.back().nbytes != shared->size())
    fail("safetensors writer: tensor \"{}\" has {} bytes, its shape needs {}", entries_.back().name,
         shared->size(), entries_.back().nbytes);
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

size_t SafetensorsWriter::data_bytes() const {
  size_t n = 0;
  for (const auto& e : entries_) n += e.nbytes;
  return n;
}

void SafetensorsWriter::write(const std::string& path, const std::function<void(size_t)>& on_bytes) const {
  std::vector<const Entry*> order;
  for (const auto& e : entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    const int ba = dtype_bits(a->dtype), bb = dtype_bits(b->dtype);
    return ba != bb ? ba > bb : a->name < b->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const Entry* e : order) {
    header[e->name] = {{"dtype", std::string(dtype_name(e->dtype))},
                       {"shape", e->shape},
                       {"data_offsets", {offset, offset + e->nbytes}}};
    offset += e->nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data buffer starts 8-byte aligned

  FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) fail("cannot create {}: {}", path, std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, out) != n) {
      std::fclose(out);
      fail("cannot write {}: {}", path, std::strerror(errno));
    }
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  put(len, 8);
  put(text.data(), text.size());
  constexpr size_t kPiece = size_t{16} << 20;
  std::vector<uint8_t> buffer;
  for (const Entry* e : order) {
    for (size_t done = 0; done < e->nbytes; done += kPiece) {
      const size_t n = std::min(kPiece, e->nbytes - done);
      buffer.resize(n);
      e->fill(done, std::span<uint8_t>(buffer.data(), n));
      put(buffer.data(), n);
      if (on_bytes) on_bytes(n);
    }
  }
  if (std::fclose(out) != 0) fail("cannot write {}: {}", path, std::strerror(errno));
}

}  // namespace qwick
