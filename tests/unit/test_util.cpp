#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "kernels/attention/kv_q8.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"

namespace qwick::test {
namespace fs = std::filesystem;

fs::path fixture(const std::string& relative) {
  return fs::path(QWICK_FIXTURES) / "reference" / relative;
}

namespace {
// This process's directory of scratch directories, removed when the process exits (ctest runs each
// test in a process of its own, so each would otherwise leave one behind).
struct ScratchRoot {
  fs::path path = fs::temp_directory_path() / ("qwick-test-" + std::to_string(::getpid()));
  ~ScratchRoot() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};
}  // namespace

fs::path scratch_dir(const std::string& name) {
  static const ScratchRoot root;
  const fs::path dir = root.path / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_tokens(size_t n, int64_t vocab_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab_size - 1));
  std::vector<int32_t> v(n);
  for (int32_t& t : v) t = dist(rng);
  return v;
}

Q8Rows q8_rows(const std::vector<float>& x, int hd) {
  const size_t row = static_cast<size_t>(hd);
  Q8Rows q{std::vector<uint8_t>(x.size()), std::vector<float>(x.size() / row)};
  for (size_t r = 0; r < q.scales.size(); ++r)
    q.scales[r] = kv_q8_code_row(x.data() + r * row, hd, q.codes.data() + r * row);
  return q;
}

TensorMap read_all_tensors(const fs::path& dir) {
  TensorMap out;
  const auto ckpt = Checkpoint::open(dir);
  for (const auto& shard : ckpt->shards())
    for (const TensorInfo& t : shard->tensors())
      out[t.name] = RawTensor{t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
  return out;
}

void write_tensors(const fs::path& file, const TensorMap& tensors) {
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  for (const auto& [name, t] : tensors) w.add_bytes(name, t.dtype, t.shape, t.bytes);
  w.write(file.string());
}

void copy_checkpoint(const fs::path& src, const fs::path& dst, const std::function<void(TensorMap&)>& edit) {
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".json" && name != "model.safetensors.index.json")
      fs::copy_file(e.path(), dst / name, fs::copy_options::overwrite_existing);
  }
  TensorMap tensors = read_all_tensors(src);
  edit(tensors);
  write_tensors(dst / "model.safetensors", tensors);
}

int run_qwick(const std::string& args, std::string* output, const std::string& stdin_text) {
  const fs::path in = fs::temp_directory_path() / ("qwick-stdin-" + std::to_string(::getpid()));
  {
    std::ofstream f(in, std::ios::binary);
    f << stdin_text;
  }
  const std::string cmd = std::string(QWICK_BINARY) + " " + args + " < " + in.string() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  fs::remove(in);
  if (output != nullptr) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace qwick::test
