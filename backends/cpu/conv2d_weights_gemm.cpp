#include "backends/cpu/conv2d_weights_gemm.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <oneapi/dnnl/dnnl.h>

#include "backends/cpu/cpu_backend.hpp"

namespace tessera {
namespace {

// A band's col buffer is kept to about 768 KiB: one 24x24 image of the
// reference CNN's 3x3x32 windows (648 KiB) is one band. On a Zen 1 (512 KiB of
// L2 a core, 8 MiB of L3) half an image a band (331 KiB) ran as fast, two and
// four images 1% and 12% slower on two threads.
constexpr std::int64_t kBandFloats = 192 * 1024;

struct Geometry {
  std::int64_t n, h, w, c;     // x[N, H, W, C]
  std::int64_t oh, ow, f;      // dy[N, OH, OW, F]
  std::int64_t kh, kw, window; // dw[KH, KW, C, F]; window = KH*KW*C, a row of col
  std::int64_t band_rows, bands_per_image;

  Geometry(const Shape& x, const Shape& dy, const Shape& dw)
      : n(x[0]), h(x[1]), w(x[2]), c(x[3]), oh(dy[1]), ow(dy[2]), f(dy[3]), kh(dw[0]), kw(dw[1]),
        window(dw[0] * dw[1] * dw[2]) {
    const std::int64_t bands = std::max<std::int64_t>(1, (oh * ow * window + kBandFloats - 1) / kBandFloats);
    band_rows = (oh + bands - 1) / bands;
    bands_per_image = (oh + band_rows - 1) / band_rows;
  }
  std::int64_t units() const { return n * bands_per_image; }
  std::int64_t band_floats() const { return band_rows * ow * window; }
};

// col[(r - first_row) * OW + q, (i * KW + j) * C + ch] = x[image, r*sh - pt + i, q*sw - pl + j, ch],
// zero outside the image, for output rows [first_row, end_row).
void im2col_band(const float* x, float* col, const Geometry& g, const Conv2dArgs& a, std::int64_t image,
                 std::int64_t first_row, std::int64_t end_row) {
  const float* img = x + image * g.h * g.w * g.c;
  const std::size_t channel_bytes = static_cast<std::size_t>(g.c) * sizeof(float);
  for (std::int64_t r = first_row; r < end_row; ++r)
    for (std::int64_t q = 0; q < g.ow; ++q) {
      float* row = col + ((r - first_row) * g.ow + q) * g.window;
      const std::int64_t left = q * a.stride_w - a.pad_left;
      const bool inside_w = left >= 0 && left + g.kw <= g.w;
      for (std::int64_t i = 0; i < g.kh; ++i) {
        float* out = row + i * g.kw * g.c;
        const std::int64_t y = r * a.stride_h - a.pad_top + i;
        if (y < 0 || y >= g.h) {
          std::memset(out, 0, static_cast<std::size_t>(g.kw) * channel_bytes);
        } else if (inside_w) {  // the window's row is contiguous in x
          std::memcpy(out, img + (y * g.w + left) * g.c, static_cast<std::size_t>(g.kw) * channel_bytes);
        } else {
          for (std::int64_t j = 0; j < g.kw; ++j) {
            const std::int64_t xw = left + j;
            if (xw < 0 || xw >= g.w)
              std::memset(out + j * g.c, 0, channel_bytes);
            else
              std::memcpy(out + j * g.c, img + (y * g.w + xw) * g.c, channel_bytes);
          }
        }
      }
    }
}

}  // namespace

bool conv_weights_through_gemm(DType dtype, const Shape& x, const Shape& dy, const Shape& dw, int threads) {
  if (dtype != DType::f32 || !onednn_runs_avx2()) return false;
  const Geometry g(x, dy, dw);
  return g.window >= 64 && g.units() >= threads;
}

std::size_t conv_weights_gemm_scratch(const Shape& x, const Shape& dy, const Shape& dw, int threads) {
  const Geometry g(x, dy, dw);
  // Per thread: its band, its partial dw^T[F, window] and its partial db[F].
  return static_cast<std::size_t>(threads) * static_cast<std::size_t>(g.band_floats() + g.f * g.window + g.f);
}

void conv2d_backward_weights_gemm(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor* db,
                                  const Conv2dArgs& args, float* scratch, int threads) {
  const Geometry g(x.shape(), dy.shape(), dw.shape());
  const std::int64_t partials = g.f * g.window + g.f;  // dw^T[F, window], then db[F]
  const std::int64_t per_thread = g.band_floats() + partials;
  const float* xs = x.data<float>();
  const float* dys = dy.data<float>();
  // Partials of threads the team may not get stay zero.
  for (int t = 0; t < threads; ++t) std::fill_n(scratch + t * per_thread + g.band_floats(), partials, 0.0f);
  // A failed sgemm is reported after the region (no exception may leave it).
  int failed = dnnl_success;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    float* col = scratch + t * per_thread;
    float* partial = col + g.band_floats();
    float* partial_bias = partial + g.f * g.window;
    // Whole bands per thread, in order, so a thread's images are adjacent.
    const std::int64_t begin = g.units() * t / team, end = g.units() * (t + 1) / team;
    for (std::int64_t u = begin; u < end; ++u) {
      const std::int64_t image = u / g.bands_per_image, first_row = u % g.bands_per_image * g.band_rows;
      const std::int64_t end_row = std::min(g.oh, first_row + g.band_rows), rows = (end_row - first_row) * g.ow;
      im2col_band(xs, col, g, args, image, first_row, end_row);
      // partial[F, window] += dy_band^T[F, rows] col[rows, window]; inside a
      // parallel region oneDNN's sgemm runs on this thread alone.
      const float* dy_band = dys + (image * g.oh + first_row) * g.ow * g.f;
      const dnnl_status_t status =
          dnnl_sgemm('T', 'N', g.f, g.window, rows, 1.0f, dy_band, g.f, col, g.window, 1.0f, partial, g.window);
      if (status != dnnl_success) {
#pragma omp atomic write
        failed = static_cast<int>(status);
      }
      if (db != nullptr)  // the band's dy is in cache now
        for (std::int64_t p = 0; p < rows; ++p)
          for (std::int64_t o = 0; o < g.f; ++o) partial_bias[o] += dy_band[p * g.f + o];
    }
  }
  if (failed != dnnl_success)
    throw Error("conv2d_backward_weights: oneDNN's sgemm failed (status " + std::to_string(failed) + ") for x " +
                x.describe() + " and dy " + dy.describe());
  // dw[window, F] = the partials' sum, transposed (F x window floats per thread: small).
  float* out = dw.data<float>();
  for (std::int64_t k = 0; k < g.window; ++k)
    for (std::int64_t o = 0; o < g.f; ++o) {
      float sum = 0.0f;
      for (int t = 0; t < threads; ++t) sum += scratch[t * per_thread + g.band_floats() + o * g.window + k];
      out[k * g.f + o] = sum;
    }
  if (db == nullptr) return;
  float* bias = db->data<float>();
  for (std::int64_t o = 0; o < g.f; ++o) {
    float sum = 0.0f;
    for (int t = 0; t < threads; ++t) sum += scratch[t * per_thread + g.band_floats() + g.f * g.window + o];
    bias[o] = sum;
  }
}

}  // namespace tessera
