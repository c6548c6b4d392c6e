// Floats to integers as every backend casts and fills them: truncated toward
// zero and saturated at the integer's range, NaN to 0. C++ leaves the
// out-of-range cases undefined, and the CPU and CUDA backends must agree bit
// for bit (f32 and bf16 values are exact in double).
#pragma once

#include <cstdint>

#include "backends/host_device.hpp"

namespace tessera {

TESSERA_HOST_DEVICE inline std::int64_t float_to_i64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775808.0) return INT64_MAX;  // 2^63
  if (x <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<std::int64_t>(x);
}

TESSERA_HOST_DEVICE inline std::int32_t float_to_i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483647.0) return INT32_MAX;
  if (x <= -2147483648.0) return INT32_MIN;
  return static_cast<std::int32_t>(x);
}

}  // namespace tessera
