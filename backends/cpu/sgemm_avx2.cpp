// sgemm_avx2.hpp's GEMM: blocks of op(b) (kBlockK x kBlockN) and op(a)
// (kBlockM x kBlockK) packed into panels, a 6 x 16 register tile per kernel
// call. Sizes for a core with a 32 KiB L1 and a 512 KiB L2 (Zen 2/3): a
// kernel call reads one b panel (16 KiB, kept in L1 while the a panels of its
// block stream past it) and one a panel (6 KiB) from the a block (144 KiB,
// kept in L2).
#include "backends/cpu/sgemm_avx2.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "backends/cpu/transpose_8x8.hpp"

namespace tessera {
namespace {

constexpr int kTileRows = 6;
constexpr int kTileColumns = 16;  // two vectors of 8
constexpr std::int64_t kBlockK = 256;
constexpr std::int64_t kBlockM = 144;   // 24 panels of 6 rows
constexpr std::int64_t kBlockN = 1024;  // 64 panels of 16 columns

// Where a's panels may write past their end (pack_transposing's 8-float
// stores into panels of 6).
constexpr std::int64_t kSlackFloats = 8;
constexpr std::size_t kThreadFloats = kBlockK * (kBlockM + kBlockN) + kSlackFloats;
// What a missing row or column of an edge panel reads.
alignas(32) constexpr float kZeros[kBlockK] = {};

// Both operands pack the same way: `count` lines (rows of op(a), columns
// of op(b)) from `first`, and k [k0, k0 + depth), into panels of Width
// lines: panel q holds, for each k, its Width lines' values (zeros past the
// last line), from panels + q * Width * depth. What differs is how the
// operand lies: a k's values for all its lines together (copies), or a
// line's values for all its k together (8 x 8 transposes).
template <int Width>
[[gnu::target("avx2")]] void pack_copying(const float* data, std::int64_t stride, std::int64_t first,
                                          std::int64_t count, std::int64_t k0, std::int64_t depth, float* panels) {
  for (std::int64_t p = 0; p < depth; ++p) {
    const float* from = data + (k0 + p) * stride + first;
    for (std::int64_t q = 0; q < count; q += Width) {
      float* to = panels + q * depth + p * Width;
      const std::int64_t width = std::min<std::int64_t>(Width, count - q);
      if (width == Width) {
        std::memcpy(to, from + q, Width * sizeof(float));
        continue;
      }
      for (int j = 0; j < Width; ++j) to[j] = j < width ? from[q + j] : 0.0f;
    }
  }
}

// 8 k of 8 lines (past the last line, zeros) transposed at once; a panel
// narrower than 8 stores each k's 8 values Width apart, the next k's store
// overwriting those past its Width, so it writes up to kSlackFloats past
// its end.
template <int Width>
[[gnu::target("avx2")]] void pack_transposing(const float* data, std::int64_t stride, std::int64_t first,
                                              std::int64_t count, std::int64_t k0, std::int64_t depth,
                                              float* panels) {
  // Wider panels that are not whole 8s would have a group's overflow
  // clobber the group before it.
  static_assert(Width <= 8 || Width % 8 == 0, "a panel is at most 8 lines, or whole 8s");
  constexpr int kLines = (Width + 7) / 8 * 8;
  for (std::int64_t q = 0; q < count; q += Width, panels += Width * depth) {
    const std::int64_t width = std::min<std::int64_t>(Width, count - q);
    const float* from[kLines];
    for (int j = 0; j < kLines; ++j) from[j] = j < width ? data + (first + q + j) * stride + k0 : kZeros;
    std::int64_t p = 0;
    for (; p + 8 <= depth; p += 8)
      for (int j = 0; j < Width; j += 8) transpose_8x8(from + j, p, panels + p * Width + j, Width);
    for (; p < depth; ++p)
      for (int j = 0; j < Width; ++j) panels[p * Width + j] = from[j][p];
  }
}

// Rows [row, row + rows) of op(a) into panels of 6 rows.
void pack_a(const GemmOperand& a, std::int64_t row, std::int64_t rows, std::int64_t k0, std::int64_t depth,
            float* panels) {
  if (a.transposed) return pack_copying<kTileRows>(a.data, a.stride, row, rows, k0, depth, panels);
  pack_transposing<kTileRows>(a.data, a.stride, row, rows, k0, depth, panels);
}

// Columns [column, column + columns) of op(b) into panels of 16 columns.
void pack_b(const GemmOperand& b, std::int64_t column, std::int64_t columns, std::int64_t k0, std::int64_t depth,
            float* panels) {
  if (b.transposed) return pack_transposing<kTileColumns>(b.data, b.stride, column, columns, k0, depth, panels);
  pack_copying<kTileColumns>(b.data, b.stride, column, columns, k0, depth, panels);
}

// How a tile's sum goes to out: out = alpha * sum, plus what out held
// unless `first` (the first block of k); after the `last` block, plus the
// bias (the tile's 16 columns, or none), then ReLU where asked.
struct TileStore {
  float alpha;
  bool first, last;
  const float* bias;
  bool relu;
};

// out's 6 x 16 tile (rows out_stride apart) from a_panel b_panel.
[[gnu::target("avx2,fma")]] void multiply_tile(std::int64_t depth, const float* a_panel, const float* b_panel,
                                               const TileStore& store, float* out, std::int64_t out_stride) {
  __m256 sum[kTileRows][2];
#pragma GCC unroll 6
  for (int i = 0; i < kTileRows; ++i) sum[i][0] = sum[i][1] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (std::int64_t p = 0; p < depth; ++p, a_panel += kTileRows, b_panel += kTileColumns) {
    const __m256 left = _mm256_loadu_ps(b_panel), right = _mm256_loadu_ps(b_panel + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kTileRows; ++i) {
      const __m256 x = _mm256_broadcast_ss(a_panel + i);
      sum[i][0] = _mm256_fmadd_ps(x, left, sum[i][0]);
      sum[i][1] = _mm256_fmadd_ps(x, right, sum[i][1]);
    }
  }
  const __m256 scale = _mm256_set1_ps(store.alpha);
  const bool biased = store.last && store.bias != nullptr, relu = store.last && store.relu;
  const __m256 bias_left = biased ? _mm256_loadu_ps(store.bias) : _mm256_setzero_ps();
  const __m256 bias_right = biased ? _mm256_loadu_ps(store.bias + 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
  for (int i = 0; i < kTileRows; ++i, out += out_stride) {
    __m256 left = _mm256_mul_ps(sum[i][0], scale), right = _mm256_mul_ps(sum[i][1], scale);
    if (!store.first) {
      left = _mm256_add_ps(_mm256_loadu_ps(out), left);
      right = _mm256_add_ps(_mm256_loadu_ps(out + 8), right);
    }
    if (biased) {
      left = _mm256_add_ps(left, bias_left);
      right = _mm256_add_ps(right, bias_right);
    }
    if (relu) {  // max(x, 0) returns 0 where x is NaN, as oneDNN's ReLU does (its post-op and op alike)
      left = _mm256_max_ps(left, _mm256_setzero_ps());
      right = _mm256_max_ps(right, _mm256_setzero_ps());
    }
    _mm256_storeu_ps(out, left);
    _mm256_storeu_ps(out + 8, right);
  }
}

// A tile of `rows` x `columns` (at most 6 x 16) at out: whole tiles in
// place, edge tiles through a whole one on the side.
void multiply_tile_at(std::int64_t depth, const float* a_panel, const float* b_panel, TileStore store, float* out,
                      std::int64_t out_stride, std::int64_t rows, std::int64_t columns) {
  if (rows == kTileRows && columns == kTileColumns) return multiply_tile(depth, a_panel, b_panel, store, out, out_stride);
  const auto bytes = static_cast<std::size_t>(columns) * sizeof(float);
  alignas(32) float tile[kTileRows * kTileColumns] = {};
  alignas(32) float bias[kTileColumns] = {};
  for (std::int64_t i = 0; i < rows && !store.first; ++i) std::memcpy(tile + i * kTileColumns, out + i * out_stride, bytes);
  if (store.bias != nullptr) {
    std::memcpy(bias, store.bias, bytes);
    store.bias = bias;
  }
  multiply_tile(depth, a_panel, b_panel, store, tile, kTileColumns);
  for (std::int64_t i = 0; i < rows; ++i) std::memcpy(out + i * out_stride, tile + i * kTileColumns, bytes);
}

// out's rows [row0, row1) and columns [column0, column1), with this thread's
// scratch.
void multiply_part(std::int64_t k, float alpha, const GemmOperand& a, const GemmOperand& b, float* out,
                   std::int64_t out_stride, const GemmEpilogue& epilogue, std::int64_t row0, std::int64_t row1,
                   std::int64_t column0, std::int64_t column1, float* scratch) {
  float* a_block = scratch;
  float* b_block = scratch + kBlockK * kBlockM + kSlackFloats;
  for (std::int64_t column = column0; column < column1; column += kBlockN) {
    const std::int64_t columns = std::min(kBlockN, column1 - column);
    for (std::int64_t k0 = 0; k0 < k; k0 += kBlockK) {
      const std::int64_t depth = std::min(kBlockK, k - k0);
      pack_b(b, column, columns, k0, depth, b_block);
      for (std::int64_t row = row0; row < row1; row += kBlockM) {
        const std::int64_t rows = std::min(kBlockM, row1 - row);
        pack_a(a, row, rows, k0, depth, a_block);
        for (std::int64_t c = 0; c < columns; c += kTileColumns) {
          const TileStore store{.alpha = alpha, .first = k0 == 0, .last = k0 + depth == k,
                                .bias = epilogue.bias != nullptr ? epilogue.bias + column + c : nullptr,
                                .relu = epilogue.relu};
          for (std::int64_t r = 0; r < rows; r += kTileRows)
            multiply_tile_at(depth, a_block + r * depth, b_block + c * depth, store,
                             out + (row + r) * out_stride + column + c, out_stride,
                             std::min<std::int64_t>(kTileRows, rows - r),
                             std::min<std::int64_t>(kTileColumns, columns - c));
        }
      }
    }
  }
}

// [begin, end) of `size` for part `part` of `parts`, cut at multiples of `unit`.
std::pair<std::int64_t, std::int64_t> share(std::int64_t size, std::int64_t unit, int part, int parts) {
  const std::int64_t units = (size + unit - 1) / unit;
  return {std::min(size, units * part / parts * unit), std::min(size, units * (part + 1) / parts * unit)};
}

}  // namespace

std::size_t sgemm_avx2_scratch_floats(int threads) { return kThreadFloats * static_cast<std::size_t>(threads); }

void sgemm_avx2(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, GemmOperand a, GemmOperand b, float* out,
                std::int64_t out_stride, float* scratch, int threads, const GemmEpilogue& epilogue) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // the empty sum's zeros, then the epilogue
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        const float x = epilogue.bias != nullptr ? epilogue.bias[j] : 0.0f;
        out[i * out_stride + j] = epilogue.relu ? std::max(x, 0.0f) : x;
      }
    return;
  }
  // Threads take parts of the longer side (in tiles): each packs the a and
  // b blocks it reads.
  const bool by_columns = (n + kTileColumns - 1) / kTileColumns >= (m + kTileRows - 1) / kTileRows;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const auto [begin, end] = by_columns ? share(n, kTileColumns, t, team) : share(m, kTileRows, t, team);
    float* own = scratch + kThreadFloats * static_cast<std::size_t>(t);
    if (begin < end) {
      if (by_columns)
        multiply_part(k, alpha, a, b, out, out_stride, epilogue, 0, m, begin, end, own);
      else
        multiply_part(k, alpha, a, b, out, out_stride, epilogue, begin, end, 0, n, own);
    }
  }
}

}  // namespace tessera
