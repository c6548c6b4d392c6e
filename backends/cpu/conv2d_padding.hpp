// A convolution's input with its padding laid out as zeros, for the CPU's own
// convolution kernels: they then read every window whole, with no bounds
// checks in their inner loops.
#pragma once

#include "backends/op_args.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

inline bool padded(const Conv2dArgs& a) { return a.pad_top || a.pad_bottom || a.pad_left || a.pad_right; }

// Floats of x[N, H, W, C] padded: N * (H + top + bottom) * (W + left + right) * C.
std::int64_t padded_floats(const Shape& x, const Conv2dArgs& a);

// x into `out`, [N, H + top + bottom, W + left + right, C], the padding zero.
// Called by every thread of an OpenMP team, which share the rows; it ends in
// the team's barrier.
void lay_out_padded(const Tensor& x, const Conv2dArgs& a, float* out);

}  // namespace tessera
