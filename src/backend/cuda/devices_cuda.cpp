// Device selection for a build with CUDA (a build without it compiles backend/devices_cpu_only.cpp).
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace qwick {

std::vector<std::string> built_devices() {
  return {"cpu", "cuda"};
}
std::string default_device() {
  return cuda_device_count() > 0 ? "cuda" : "cpu";
}

std::unique_ptr<Backend> make_backend(const std::string& device, const Model& model,
                                      const BackendOptions& options) {
  if (device == "cpu") return make_cpu_backend(model, options);
  if (device == "cuda") {
    if (cuda_device_count() == 0) fail("--device cuda: no CUDA GPU is available");
    return make_cuda_backend(model, options);
  }
  fail("--device {}: unknown device (expected cpu or cuda)", device);
}

DeviceInfo probe_device(const std::string& device) {
  if (device == "cpu") return probe_cpu();
  if (device == "cuda") return probe_cuda_device();
  fail("no device \"{}\" in this build", device);
}

}  // namespace qwick
