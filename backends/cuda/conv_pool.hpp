// Direct f32 2-D convolution and pooling, channels-last, as host/device
// functions: conv_pool.cu runs each with one thread per output element, and
// tests check them on the host against the CPU backend (oneDNN).
//
// Every output element loops over the terms that contribute to it, in a fixed
// order, into a float accumulator: no atomics, deterministic. Layouts are the
// CPU backend's: x[N, H, W, C], w[KH, KW, C, F] (Keras HWIO), y[N, OH, OW, F].
// Output row oh reads input rows oh * stride - pad_top + i for i in [0, KH);
// rows outside [0, H) are padding (zeros for convolution, skipped by pooling).
// Average pooling divides by the number of in-bounds elements of the window
// (oneDNN's pooling_avg_exclude_padding, Keras' behaviour); max pooling's
// gradient goes to the first maximum of the window in row-major order, as the
// CPU backend's does.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/host_device.hpp"
#include "backends/op_kinds.hpp"
#if !defined(__CUDACC__)
#include "backends/op_args.hpp"  // host only: the geometry makers below
#endif

namespace tessera {

struct ConvGeometry {
  std::int64_t n = 0, h = 0, w = 0, c = 0;  // input x[N, H, W, C]
  std::int64_t oh = 0, ow = 0, f = 0;       // output y[N, OH, OW, F] (F = C for pooling)
  std::int64_t kh = 1, kw = 1;              // window
  std::int64_t sh = 1, sw = 1;              // strides
  std::int64_t pt = 0, pl = 0;              // padding before (top, left)
};

#if !defined(__CUDACC__)
inline ConvGeometry conv_geometry(const Shape& x, const Shape& w, const Shape& y,
                                  const Conv2dArgs& a) {
  return {x[0], x[1], x[2], x[3], y[1], y[2], y[3], w[0], w[1],
          a.stride_h, a.stride_w, a.pad_top, a.pad_left};
}

inline ConvGeometry pool_geometry(const Shape& x, const Shape& y, const Pool2dArgs& a) {
  return {x[0], x[1], x[2], x[3], y[1], y[2], y[3], a.window_h, a.window_w,
          a.stride_h, a.stride_w, a.pad_top, a.pad_left};
}
#endif

// The coordinates of a flat index into a row-major 4-D tensor [d0, d1, d2, d3].
struct Index4 {
  std::int64_t i0, i1, i2, i3;
};
TESSERA_HOST_DEVICE inline Index4 unravel4(std::int64_t index, std::int64_t d1, std::int64_t d2, std::int64_t d3) {
  const std::int64_t i3 = index % d3;
  index /= d3;
  const std::int64_t i2 = index % d2;
  index /= d2;
  return {index / d1, index % d1, i2, i3};
}

// The output position o (in [0, count)) whose window row i covers input row
// `in`, or -1: o * stride - pad + i == in.
TESSERA_HOST_DEVICE inline std::int64_t covering_output(std::int64_t in, std::int64_t i,
                                                        std::int64_t stride, std::int64_t pad,
                                                        std::int64_t count) {
  const std::int64_t t = in + pad - i;
  if (t < 0 || t % stride != 0) return -1;
  const std::int64_t o = t / stride;
  return o < count ? o : -1;
}

// y[index] (flat over [N, OH, OW, F]) = bias[f] + sum_{i, j, c} x * w.
TESSERA_HOST_DEVICE inline float conv2d_forward_element(const float* x, const float* w,
                                                        const float* bias, const ConvGeometry& g,
                                                        std::int64_t index) {
  const Index4 at = unravel4(index, g.oh, g.ow, g.f);
  const std::int64_t n = at.i0, oy = at.i1, ox = at.i2, f = at.i3;
  float acc = 0.0f;
  for (std::int64_t i = 0; i < g.kh; ++i) {
    const std::int64_t iy = oy * g.sh - g.pt + i;
    if (iy < 0 || iy >= g.h) continue;
    for (std::int64_t j = 0; j < g.kw; ++j) {
      const std::int64_t ix = ox * g.sw - g.pl + j;
      if (ix < 0 || ix >= g.w) continue;
      const float* xp = x + ((n * g.h + iy) * g.w + ix) * g.c;
      const float* wp = w + (i * g.kw + j) * g.c * g.f + f;
      for (std::int64_t c = 0; c < g.c; ++c) acc += xp[c] * wp[c * g.f];
    }
  }
  return bias != nullptr ? acc + bias[f] : acc;
}

// dx[index] (flat over [N, H, W, C]) = sum over the (output, window) pairs
// reading it of dy * w.
TESSERA_HOST_DEVICE inline float conv2d_backward_data_element(const float* dy, const float* w,
                                                              const ConvGeometry& g,
                                                              std::int64_t index) {
  const Index4 at = unravel4(index, g.h, g.w, g.c);
  const std::int64_t n = at.i0, iy = at.i1, ix = at.i2, c = at.i3;
  float acc = 0.0f;
  for (std::int64_t i = 0; i < g.kh; ++i) {
    const std::int64_t oy = covering_output(iy, i, g.sh, g.pt, g.oh);
    if (oy < 0) continue;
    for (std::int64_t j = 0; j < g.kw; ++j) {
      const std::int64_t ox = covering_output(ix, j, g.sw, g.pl, g.ow);
      if (ox < 0) continue;
      const float* dyp = dy + ((n * g.oh + oy) * g.ow + ox) * g.f;
      const float* wp = w + ((i * g.kw + j) * g.c + c) * g.f;
      for (std::int64_t f = 0; f < g.f; ++f) acc += dyp[f] * wp[f];
    }
  }
  return acc;
}

// dw[index] (flat over [KH, KW, C, F]) = sum_{n, oy, ox} x * dy.
TESSERA_HOST_DEVICE inline float conv2d_backward_weights_element(const float* x, const float* dy,
                                                                 const ConvGeometry& g,
                                                                 std::int64_t index) {
  const Index4 at = unravel4(index, g.kw, g.c, g.f);
  const std::int64_t i = at.i0, j = at.i1, c = at.i2, f = at.i3;
  float acc = 0.0f;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t oy = 0; oy < g.oh; ++oy) {
      const std::int64_t iy = oy * g.sh - g.pt + i;
      if (iy < 0 || iy >= g.h) continue;
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        const std::int64_t ix = ox * g.sw - g.pl + j;
        if (ix < 0 || ix >= g.w) continue;
        acc += x[((n * g.h + iy) * g.w + ix) * g.c + c] * dy[((n * g.oh + oy) * g.ow + ox) * g.f + f];
      }
    }
  return acc;
}

// db[f] = sum_{n, oy, ox} dy[n, oy, ox, f].
TESSERA_HOST_DEVICE inline float conv2d_backward_bias_element(const float* dy,
                                                              const ConvGeometry& g,
                                                              std::int64_t f) {
  float acc = 0.0f;
  const std::int64_t rows = g.n * g.oh * g.ow;
  for (std::int64_t r = 0; r < rows; ++r) acc += dy[r * g.f + f];
  return acc;
}

// The window of output (n, oy, ox, c) clipped to the input: rows [y0, y1),
// columns [x0, x1) (empty when the window lies wholly in the padding).
struct PoolWindow {
  std::int64_t y0, y1, x0, x1;
};

TESSERA_HOST_DEVICE inline PoolWindow pool_window(const ConvGeometry& g, std::int64_t oy,
                                                  std::int64_t ox) {
  std::int64_t y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
  std::int64_t y1 = y0 + g.kh, x1 = x0 + g.kw;
  y0 = y0 < 0 ? 0 : y0;
  x0 = x0 < 0 ? 0 : x0;
  y1 = y1 > g.h ? g.h : y1;
  x1 = x1 > g.w ? g.w : x1;
  return {y0, y1 > y0 ? y1 : y0, x0, x1 > x0 ? x1 : x0};
}

// Flat x offset of the first maximum of the window of (n, oy, ox, c), or -1
// when the window is empty.
TESSERA_HOST_DEVICE inline std::int64_t pool_argmax(const float* x, const ConvGeometry& g,
                                                    std::int64_t n, std::int64_t oy,
                                                    std::int64_t ox, std::int64_t c) {
  const PoolWindow win = pool_window(g, oy, ox);
  std::int64_t best = -1;
  for (std::int64_t iy = win.y0; iy < win.y1; ++iy)
    for (std::int64_t ix = win.x0; ix < win.x1; ++ix) {
      const std::int64_t at = ((n * g.h + iy) * g.w + ix) * g.c + c;
      if (best < 0 || x[at] > x[best]) best = at;  // the first maximum wins a tie
    }
  return best;
}

// y[index] (flat over [N, OH, OW, C]).
TESSERA_HOST_DEVICE inline float pool2d_forward_element(PoolKind kind, const float* x,
                                                        const ConvGeometry& g,
                                                        std::int64_t index) {
  const Index4 at = unravel4(index, g.oh, g.ow, g.c);
  const std::int64_t n = at.i0, oy = at.i1, ox = at.i2, c = at.i3;
  if (kind == PoolKind::max) {
    const std::int64_t best = pool_argmax(x, g, n, oy, ox, c);
    return best < 0 ? 0.0f : x[best];
  }
  const PoolWindow win = pool_window(g, oy, ox);
  float acc = 0.0f;
  for (std::int64_t iy = win.y0; iy < win.y1; ++iy)
    for (std::int64_t ix = win.x0; ix < win.x1; ++ix) acc += x[((n * g.h + iy) * g.w + ix) * g.c + c];
  const std::int64_t count = (win.y1 - win.y0) * (win.x1 - win.x0);
  return count > 0 ? acc / static_cast<float>(count) : 0.0f;
}

// dx[index] (flat over [N, H, W, C]) = sum over the windows covering it of
// dy / count (avg), or of dy where it is the window's first maximum (max);
// zero where x <= 0 under relu_before (x is a ReLU's output, Pool2dArgs).
TESSERA_HOST_DEVICE inline float pool2d_backward_element(PoolKind kind, const float* x,
                                                         const float* dy, const ConvGeometry& g,
                                                         std::int64_t index, bool relu_before) {
  if (relu_before && !(x[index] > 0.0f)) return 0.0f;
  const Index4 at = unravel4(index, g.h, g.w, g.c);
  const std::int64_t n = at.i0, iy = at.i1, ix = at.i2, c = at.i3;
  float acc = 0.0f;
  for (std::int64_t i = 0; i < g.kh; ++i) {
    const std::int64_t oy = covering_output(iy, i, g.sh, g.pt, g.oh);
    if (oy < 0) continue;
    for (std::int64_t j = 0; j < g.kw; ++j) {
      const std::int64_t ox = covering_output(ix, j, g.sw, g.pl, g.ow);
      if (ox < 0) continue;
      const float d = dy[((n * g.oh + oy) * g.ow + ox) * g.c + c];
      if (kind == PoolKind::max) {
        if (pool_argmax(x, g, n, oy, ox, c) == index) acc += d;
      } else {
        const PoolWindow win = pool_window(g, oy, ox);
        acc += d / static_cast<float>((win.y1 - win.y0) * (win.x1 - win.x0));
      }
    }
  }
  return acc;
}

}  // namespace tessera
