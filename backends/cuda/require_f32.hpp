// The CUDA kernels written so far compute in f32: another dtype is an
// UnsupportedError naming the op, the dtype and the device (supports() says
// the same beforehand).
#pragma once

#include <string>

#include "engine/core/error.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

inline void require_f32(const Tensor& t, const std::string& op, const Device& device) {
  if (t.dtype() != DType::f32)
    throw UnsupportedError(op + ": dtype " + std::string(dtype_name(t.dtype())) + " is not supported on " + device.str() +
                           " (f32 is)");
}

}  // namespace tessera
