#include "backends/cpu/conv2d_forward_direct.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>

#include "backends/cpu/conv2d_padding.hpp"
#include "backends/cpu/vector_math.hpp"

namespace tessera {
namespace {

constexpr int kTilePositions = 6;  // output positions of a tile along a row: broadcast inputs
constexpr int kTileVectors = 4;    // vectors of 16 output channels: 6 x 4 = 24 accumulators
constexpr int kLanes = 16;

struct Geometry {
  std::int64_t h, w, c;      // x[N, H, W, C] with its padding laid out
  std::int64_t oh, ow, f;    // y[N, OH, OW, F]
  std::int64_t stride_h, stride_w;
  std::int64_t window;       // KH * KW * C
  // Where window row r = (i * KW + j) * C + ch lies from its window's corner
  // (a table: no division in the inner loop, and no allocation per call).
  std::array<std::int64_t, kConvForwardDirectWindow> offsets;

  Geometry(const Shape& x, const Shape& kernel, const Shape& y, const Conv2dArgs& a)
      : h(x[1] + a.pad_top + a.pad_bottom), w(x[2] + a.pad_left + a.pad_right), c(x[3]), oh(y[1]), ow(y[2]),
        f(y[3]), stride_h(a.stride_h), stride_w(a.stride_w), window(kernel[0] * kernel[1] * c), offsets{} {
    std::int64_t r = 0;
    for (std::int64_t i = 0; i < kernel[0]; ++i)
      for (std::int64_t j = 0; j < kernel[1]; ++j)
        for (std::int64_t ch = 0; ch < c; ++ch) offsets[static_cast<std::size_t>(r++)] = (i * w + j) * c + ch;
  }
};

// y's kPositions positions from `out` on, kVectors vectors of channels,
// from x's windows from `corner` on (stride_w apart) and the kernel's rows
// from `kernel` on (F apart), the bias (or zero) to start with.
template <int kPositions, int kVectors>
[[gnu::target("avx512f,fma")]] void tile(const Geometry& g, const float* corner, const float* kernel,
                                         const float* bias, bool relu, float* out) {
  __m512 sum[kPositions][kVectors];
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v) {
    const __m512 start = bias ? _mm512_loadu_ps(bias + v * kLanes) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int p = 0; p < kPositions; ++p) sum[p][v] = start;
  }
  const std::int64_t step = g.stride_w * g.c;
  const std::int64_t* offset = g.offsets.data();
  for (std::int64_t r = 0; r < g.window; ++r, kernel += g.f) {
    const float* in = corner + offset[r];
    __m512 weights[kVectors];
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) weights[v] = _mm512_loadu_ps(kernel + v * kLanes);
#pragma GCC unroll 8
    for (int p = 0; p < kPositions; ++p) {
      const __m512 x = _mm512_set1_ps(in[p * step]);
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) sum[p][v] = _mm512_fmadd_ps(x, weights[v], sum[p][v]);
    }
  }
  // The ReLU keeps what is above zero and zeroes the rest, a NaN included,
  // as oneDNN's post-op does (max(x, 0) returning its second operand).
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int p = 0; p < kPositions; ++p)
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      const __m512 y = sum[p][v];
      _mm512_storeu_ps(out + p * g.f + v * kLanes,
                       relu ? _mm512_mask_mov_ps(zero, _mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ), y) : y);
    }
}

using TileKernel = void (*)(const Geometry&, const float*, const float*, const float*, bool, float*);

template <int kPositions>
TileKernel tile_with_positions(std::int64_t vectors) {
  switch (vectors) {
    case 1: return tile<kPositions, 1>;
    case 2: return tile<kPositions, 2>;
    case 3: return tile<kPositions, 3>;
    default: return tile<kPositions, 4>;
  }
}

TileKernel tile_kernel(std::int64_t positions, std::int64_t vectors) {
  switch (positions) {
    case 1: return tile_with_positions<1>(vectors);
    case 2: return tile_with_positions<2>(vectors);
    case 3: return tile_with_positions<3>(vectors);
    case 4: return tile_with_positions<4>(vectors);
    case 5: return tile_with_positions<5>(vectors);
    default: return tile_with_positions<6>(vectors);
  }
}

}  // namespace

bool conv_forward_direct(DType dtype, const Shape& x, const Shape& w, Activation activation) {
  return dtype == DType::f32 && x[3] <= kConvForwardDirectChannels && w[3] % kLanes == 0 &&
         w[0] * w[1] * w[2] <= kConvForwardDirectWindow &&
         (activation == Activation::none || activation == Activation::relu) &&
         widest_vector_isa() == VectorIsa::avx512;
}

std::size_t conv_forward_direct_scratch(const Shape& x, const Conv2dArgs& args) {
  return static_cast<std::size_t>(padded(args) ? padded_floats(x, args) : 0);
}

void conv2d_forward_direct(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                           const Conv2dArgs& args, float* scratch, int threads) {
  const Geometry g(x.shape(), w.shape(), y.shape(), args);
  const float* xs = padded(args) ? scratch : x.data<float>();
  const float* kernel = w.data<float>();
  const float* b = bias ? bias->data<float>() : nullptr;
  const bool relu = args.activation == Activation::relu;
  const std::int64_t rows = y.shape()[0] * g.oh;
#pragma omp parallel num_threads(threads)
  {
    if (padded(args)) lay_out_padded(x, args, scratch);  // ends in the team's barrier
#pragma omp for schedule(static)
    for (std::int64_t row = 0; row < rows; ++row) {
      const std::int64_t image = row / g.oh, oy = row % g.oh;
      const float* line = xs + (image * g.h + oy * g.stride_h) * g.w * g.c;
      float* out = y.data<float>() + row * g.ow * g.f;
      for (std::int64_t first = 0; first < g.f; first += kTileVectors * kLanes) {
        const std::int64_t vectors = std::min<std::int64_t>(kTileVectors, (g.f - first) / kLanes);
        for (std::int64_t ox = 0; ox < g.ow; ox += kTilePositions)
          tile_kernel(std::min<std::int64_t>(kTilePositions, g.ow - ox), vectors)(
              g, line + ox * g.stride_w * g.c, kernel + first, b ? b + first : nullptr, relu, out + ox * g.f + first);
      }
    }
  }
}

}  // namespace tessera
