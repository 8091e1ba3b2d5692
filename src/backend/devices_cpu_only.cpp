// Device selection for a build without CUDA (the CUDA build compiles backend/cuda/devices_cuda.cpp
// instead): the CPU is the only device.
#include "backend/backend.h"
#include "core/error.h"

namespace qwick {

std::vector<std::string> built_devices() {
  return {"cpu"};
}
std::string default_device() {
  return "cpu";
}

std::unique_ptr<Backend> make_backend(const std::string& device, const Model& model,
                                      const BackendOptions& options) {
  if (device == "cpu") return make_cpu_backend(model, options);
  if (device == "cuda")
    fail("--device cuda: this build has no CUDA backend (configure with -DQWICK_CUDA=ON and nvcc)");
  fail("--device {}: unknown device (expected cpu or cuda)", device);
}

DeviceInfo probe_device(const std::string& device) {
  if (device != "cpu") fail("no device \"{}\" in this build", device);
  return probe_cpu();
}

}  // namespace qwick
