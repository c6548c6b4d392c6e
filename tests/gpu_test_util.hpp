// Helpers of the GPU tests. A test that needs a GPU is decorated with
//   * doctest::test_suite("gpu") * skip_without_gpu()
// so a plain run skips it and `tessera_tests --gpu-suite` runs it (CTest
// reports that entry as skipped where no GPU is found, see tests/main.cpp).
#pragma once

#include <doctest/doctest.h>

#include "backends/registry.hpp"

namespace tessera::test {

inline doctest::skip skip_without_gpu() { return doctest::skip(true); }

inline Backend& gpu() { return backend_for(Device::cuda(0)); }

inline Tensor to_gpu(const Tensor& host) {
  Tensor t = Tensor::empty(host.shape(), host.dtype(), Device::cuda(0));
  gpu().copy(host, t);
  return t;
}

inline Tensor to_host(const Tensor& device_tensor) {
  Tensor t = Tensor::empty(device_tensor.shape(), device_tensor.dtype());
  backend_for(device_tensor.device()).copy(device_tensor, t);
  return t;
}

}  // namespace tessera::test
