// Entry points of the CUDA backend, for the device registry. Only compiled when
// the build has CUDA (TESSERA_HAVE_CUDA).
#pragma once

#include <memory>

#include "backends/backend.hpp"

namespace tessera {

// GPUs the CUDA runtime reports; 0 when there is no driver or no device.
int cuda_runtime_device_count();
// The backend of GPU `device` (its index is checked by the registry).
std::unique_ptr<Backend> make_cuda_backend(Device device);

}  // namespace tessera
