#include "backends/cpu/conv2d_weights_direct.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "backends/cpu/conv2d_padding.hpp"
#include "backends/cpu/vector_math.hpp"

namespace tessera {
namespace {

constexpr int kTileRows = 6;      // window rows of a tile: broadcast inputs
constexpr int kTileVectors = 4;   // vectors of 16 outputs of a tile: 6 x 4 = 24 accumulators
constexpr int kLanes = 16;
// Output positions a tile streams before its accumulators go back to memory.
// Runs of 96 positions ran 6% slower than 384, and 384 to 1536 alike
// (the reference CNN's second convolution, 2 threads).
constexpr std::int64_t kRunPositions = 512;

struct Geometry {
  std::int64_t n, h, w, c;       // x[N, H, W, C] with its padding laid out
  std::int64_t oh, ow, f;        // dy[N, OH, OW, F]
  std::int64_t kw, window;       // dw[KH, KW, C, F]; window = KH*KW*C
  std::int64_t stride_h, stride_w;

  Geometry(const Shape& x, const Shape& dy, const Shape& dw, const Conv2dArgs& a)
      : n(x[0]), h(x[1] + a.pad_top + a.pad_bottom), w(x[2] + a.pad_left + a.pad_right), c(x[3]), oh(dy[1]),
        ow(dy[2]), f(dy[3]), kw(dw[1]), window(dw[0] * dw[1] * dw[2]), stride_h(a.stride_h), stride_w(a.stride_w) {}
  std::int64_t rows() const { return n * oh; }  // output rows over the batch
  // Output rows a tile streams before its accumulators go back to memory.
  std::int64_t run_rows() const { return std::max<std::int64_t>(1, kRunPositions / std::max<std::int64_t>(1, ow)); }
  std::int64_t partial_floats() const { return window * f + f; }  // dw's, then db's
  // Where window row r = (i * KW + j) * C + ch lies from its window's corner.
  std::int64_t offset(std::int64_t r) const {
    const std::int64_t ch = r % c, j = r / c % kw, i = r / c / kw;
    return (i * w + j) * c + ch;
  }
};

// partial[kRows rows F apart, kVectors vectors] += x's window rows
// [first_input, first_input + kRows) times dy's outputs [first_output, ...
// + 16 kVectors), over the output rows [first_row, end_row) of the batch;
// `dy` points at first_row's row.
template <int kRows, int kVectors>
[[gnu::target("avx512f,fma")]] void accumulate_tile(const Geometry& g, const float* x, const float* dy,
                                                    std::int64_t first_row, std::int64_t end_row,
                                                    std::int64_t first_input, std::int64_t first_output,
                                                    float* partial) {
  __m512 sum[kRows][kVectors];
  std::int64_t offset[kRows];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
    offset[i] = g.offset(first_input + i);
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) sum[i][v] = _mm512_loadu_ps(partial + i * g.f + v * kLanes);
  }
  const std::int64_t x_step = g.stride_w * g.c;
  for (std::int64_t row = first_row; row < end_row; ++row) {
    const std::int64_t image = row / g.oh, y = row % g.oh;
    const float* corner = x + (image * g.h + y * g.stride_h) * g.w * g.c;
    const float* out = dy + (row - first_row) * g.ow * g.f + first_output;
    for (std::int64_t q = 0; q < g.ow; ++q, corner += x_step, out += g.f) {
      __m512 d[kVectors];
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) d[v] = _mm512_loadu_ps(out + v * kLanes);
#pragma GCC unroll 8
      for (int i = 0; i < kRows; ++i) {
        const __m512 in = _mm512_set1_ps(corner[offset[i]]);
#pragma GCC unroll 8
        for (int v = 0; v < kVectors; ++v) sum[i][v] = _mm512_fmadd_ps(in, d[v], sum[i][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) _mm512_storeu_ps(partial + i * g.f + v * kLanes, sum[i][v]);
}

using TileKernel = void (*)(const Geometry&, const float*, const float*, std::int64_t, std::int64_t, std::int64_t,
                            std::int64_t, float*);

template <int kRows>
TileKernel tile_with_rows(std::int64_t vectors) {
  switch (vectors) {
    case 1: return accumulate_tile<kRows, 1>;
    case 2: return accumulate_tile<kRows, 2>;
    case 3: return accumulate_tile<kRows, 3>;
    default: return accumulate_tile<kRows, 4>;
  }
}

TileKernel tile_kernel(std::int64_t rows, std::int64_t vectors) {
  switch (rows) {
    case 1: return tile_with_rows<1>(vectors);
    case 2: return tile_with_rows<2>(vectors);
    case 3: return tile_with_rows<3>(vectors);
    case 4: return tile_with_rows<4>(vectors);
    case 5: return tile_with_rows<5>(vectors);
    default: return tile_with_rows<6>(vectors);
  }
}

// bias[F] += the `floats` of dy's rows (positions of F floats): a vector of
// the bias at a time, its sum over positions in four registers (an add's
// latency is four positions' loads).
[[gnu::target("avx512f")]] void add_rows(const Geometry& g, const float* dy, std::int64_t floats, float* bias) {
  const std::int64_t positions = floats / g.f;
  for (std::int64_t output = 0; output < g.f; output += kLanes) {
    __m512 sum[4] = {_mm512_loadu_ps(bias + output), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    std::int64_t p = 0;
    for (; p + 4 <= positions; p += 4)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) sum[k] = _mm512_add_ps(sum[k], _mm512_loadu_ps(dy + (p + k) * g.f + output));
    for (; p < positions; ++p) sum[0] = _mm512_add_ps(sum[0], _mm512_loadu_ps(dy + p * g.f + output));
    _mm512_storeu_ps(bias + output, _mm512_add_ps(_mm512_add_ps(sum[0], sum[1]), _mm512_add_ps(sum[2], sum[3])));
  }
}

// staged = the ReLU's gradient over `floats`, as oneDNN's takes it: dy * 0
// where relu <= 0 (so a NaN or inf there gives NaN), dy elsewhere (a NaN
// relu included).
[[gnu::target("avx512f")]] void stage_through_relu(const float* dy, const float* relu, std::int64_t floats,
                                                   float* staged) {
  const __m512 zero = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < floats; i += kLanes) {  // whole vectors: F is a multiple of 16
    const __m512 d = _mm512_loadu_ps(dy + i);
    const __mmask16 off = _mm512_cmp_ps_mask(_mm512_loadu_ps(relu + i), zero, _CMP_LE_OQ);
    _mm512_storeu_ps(staged + i, _mm512_mask_mul_ps(d, off, d, zero));
  }
}

}  // namespace

bool conv_weights_direct(DType dtype, const Shape& dw) {
  return dtype == DType::f32 && dw[3] % kLanes == 0 && widest_vector_isa() == VectorIsa::avx512;
}

std::size_t conv_weights_direct_scratch(const Shape& x, const Shape& dy, const Shape& dw, const Conv2dArgs& args,
                                        int threads, bool through_relu) {
  const Geometry g(x, dy, dw, args);
  const std::int64_t padded_x = padded(args) ? padded_floats(x, args) : 0;
  const std::int64_t staged = through_relu ? g.run_rows() * g.ow * g.f : 0;
  return static_cast<std::size_t>(threads * (g.partial_floats() + staged) + padded_x);
}

void conv2d_backward_weights_direct(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor* db,
                                    const Conv2dArgs& args, float* scratch, int threads, const Tensor* relu_output) {
  const Geometry g(x.shape(), dy.shape(), dw.shape(), args);
  const std::int64_t partial_floats = g.partial_floats();
  const std::int64_t staged_floats = relu_output ? g.run_rows() * g.ow * g.f : 0;
  float* padded_x = scratch + threads * (partial_floats + staged_floats);
  const float* xs = padded(args) ? padded_x : x.data<float>();
  const float* dys = dy.data<float>();
  const float* relu = relu_output ? relu_output->data<float>() : nullptr;
  const std::int64_t row_floats = g.ow * g.f;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    if (padded(args)) lay_out_padded(x, args, padded_x);  // ends in the team's barrier
    float* partial = scratch + t * partial_floats;
    float* staged = scratch + threads * partial_floats + t * staged_floats;
    std::fill_n(partial, partial_floats, 0.0f);
    const std::int64_t begin = g.rows() * t / team, end = g.rows() * (t + 1) / team;
    for (std::int64_t first = begin; first < end; first += g.run_rows()) {
      const std::int64_t last = std::min(end, first + g.run_rows());
      // Through a ReLU, the run's dy is masked once into a buffer that stays
      // in cache while every tile reads it.
      const float* run = dys + first * row_floats;
      if (relu) {
        stage_through_relu(run, relu + first * row_floats, (last - first) * row_floats, staged);
        run = staged;
      }
      for (std::int64_t input = 0; input < g.window; input += kTileRows)
        for (std::int64_t output = 0; output < g.f; output += kTileVectors * kLanes) {
          const TileKernel tile = tile_kernel(std::min<std::int64_t>(kTileRows, g.window - input),
                                              std::min<std::int64_t>(kTileVectors, (g.f - output) / kLanes));
          tile(g, xs, run, first, last, input, output, partial + input * g.f + output);
        }
      if (db != nullptr) add_rows(g, run, (last - first) * row_floats, partial + g.window * g.f);  // run is in cache
    }
    // Partials of threads the team did not get stay out of the sum.
#pragma omp barrier
    float* out = dw.data<float>();
    float* bias = db ? db->data<float>() : nullptr;
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < partial_floats; ++i) {
      float total = 0.0f;
      for (int other = 0; other < team; ++other) total += scratch[other * partial_floats + i];
      if (i < g.window * g.f) out[i] = total;
      else if (bias) bias[i - g.window * g.f] = total;
    }
  }
}

}  // namespace tessera
