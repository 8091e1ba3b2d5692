#include "cli/engine_options.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "model/synthetic_model.h"
#include "text/synthetic_tokenizer.h"

namespace qwick {

void EngineOptions::add_to(ArgParser& p) {
  p.option({"-m", "--model"}, "DIR",
           "model directory (Hugging Face layout); default: the built-in small model", &model,
           "LLAMA_ARG_MODEL");
  p.option({"-t", "--threads"}, "N", "CPU threads (0 = one per core)", &threads, "LLAMA_ARG_THREADS");
  p.option({"-c", "--ctx-size"}, "N", "context size in tokens (0 = the model's maximum)", &ctx_size,
           "LLAMA_ARG_CTX_SIZE");
  p.option(
      {"--kv-type"}, "TYPE",
      "attention KV cache type: bf16, f32 or q8 (a byte a value and a scale a row, half of bf16's bytes)",
      &kv_type, "QWICK_KV_TYPE");
  p.option({"--device"}, "DEV", "where to run: cpu or cuda (default: cuda when built and a GPU is present)",
           &device, "QWICK_DEVICE");
  p.flag({"--exact"}, "f32 activations in every decode matrix product (reference numerics, slower decode)",
         &exact, "QWICK_EXACT");
  p.option({"--cuda-off"}, "LIST",
           "CUDA debug switches to turn off, comma separated: graph, fusion, overlap, step-ahead", &cuda_off,
           "QWICK_CUDA_OFF");
}

BackendOptions EngineOptions::backend_options() const {
  BackendOptions b;
  b.threads = threads;
  if (ctx_size < 0) fail("--ctx-size must not be negative, got {}", ctx_size);
  b.max_context = ctx_size;
  b.exact = exact;
  b.cuda_off = cuda_off;
  if (kv_type == "bf16")
    b.kv_dtype = KvDtype::kBF16;
  else if (kv_type == "f32")
    b.kv_dtype = KvDtype::kF32;
  else if (kv_type == "q8")
    b.kv_dtype = KvDtype::kQ8;
  else
    fail("--kv-type: unknown type \"{}\" (expected bf16, f32 or q8)", kv_type);
  return b;
}

std::string builtin_model_dir() {
  namespace fs = std::filesystem;
  fs::path base;
  if (const char* h = std::getenv("QWICK_HOME"); h && *h) {
    base = h;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    base = fs::path(x) / "qwick";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = fs::path(home) / ".cache" / "qwick";
  } else {
    base = fs::temp_directory_path() / "qwick";
  }
  return (base / "builtin-small").string();
}

std::string model_dir_or_builtin(const std::string& model) {
  if (!model.empty()) return model;
  const std::filesystem::path dir = builtin_model_dir();
  if (!std::filesystem::exists(dir / "config.json")) {
    std::fprintf(stderr, "making the built-in small model in %s\n", dir.c_str());
    SyntheticModelSpec spec;
    spec.preset = "small";
    write_synthetic_model(spec, dir.string());
  }
  // (Also for a built-in model made before the text files were part of it.)
  if (!std::filesystem::exists(dir / "tokenizer.json"))
    write_synthetic_text_files(dir.string(), special_token_base(load_model_config(dir).vocab_size));
  return dir.string();
}

Engine open_engine(const EngineOptions& options) {
  const std::string dir = model_dir_or_builtin(options.model);
  Engine e;
  e.model = load_model(dir);
  const std::string device = options.device.empty() ? default_device() : options.device;
  if (device == "cpu") e.model->checkpoint->load_pages();  // the CPU backend reads the weights in place
  e.backend = make_backend(device, *e.model, options.backend_options());
  return e;
}

}  // namespace qwick
