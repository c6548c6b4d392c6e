#include "backends/cpu/conv2d_padding.hpp"

#include <algorithm>
#include <cstring>

namespace tessera {

std::int64_t padded_floats(const Shape& x, const Conv2dArgs& a) {
  return x[0] * (x[1] + a.pad_top + a.pad_bottom) * (x[2] + a.pad_left + a.pad_right) * x[3];
}

void lay_out_padded(const Tensor& x, const Conv2dArgs& a, float* out) {
  const Shape& s = x.shape();
  const std::int64_t n = s[0], h = s[1] + a.pad_top + a.pad_bottom, w = s[2] + a.pad_left + a.pad_right, c = s[3];
  const float* in = x.data<float>();
  const auto row_bytes = static_cast<std::size_t>(s[2] * c) * sizeof(float);
#pragma omp for schedule(static)
  for (std::int64_t r = 0; r < n * h; ++r) {
    float* row = out + r * w * c;
    const std::int64_t y = r % h - a.pad_top, image = r / h;
    if (y < 0 || y >= s[1]) {
      std::fill_n(row, w * c, 0.0f);
      continue;
    }
    std::fill_n(row, a.pad_left * c, 0.0f);
    std::memcpy(row + a.pad_left * c, in + (image * s[1] + y) * s[2] * c, row_bytes);
    std::fill_n(row + (a.pad_left + s[2]) * c, a.pad_right * c, 0.0f);
  }
}

}  // namespace tessera
