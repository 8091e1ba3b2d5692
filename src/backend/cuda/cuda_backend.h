// The CUDA backend: the whole model on one NVIDIA GPU (Hopper), behind the Backend interface.
// Only built when QWICK_CUDA is on; backend/cuda/devices_cuda.cpp is the one place that selects it.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace qwick {

// GPUs the CUDA runtime can use (0 without a driver or device).
int cuda_device_count();
std::unique_ptr<Backend> make_cuda_backend(const Model& model, const BackendOptions& options);
// Name and memory of GPU 0, and a measured device-to-device copy bandwidth.
DeviceInfo probe_cuda_device();

}  // namespace qwick
