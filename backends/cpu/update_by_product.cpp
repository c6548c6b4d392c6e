// Optimizer updates by the product a^T b on AVX-512
// (Backend::*_update_by_product): a dense layer's weight gradient never goes
// to memory.
//
// param [M, N] is updated in tiles of 6 rows by 64 columns (or what is left).
// A tile's gradient, the sum over k of a[k, rows] b[k, columns], grows in 24
// registers over the K rows of a and b: per k, 4 vectors of b and 6 broadcasts
// of a feed 24 FMAs. b is first copied into panels of 64 columns and a into
// panels of 6 rows, so that a panel's K rows lie together (N or M floats
// apart in place, they would fall into the same few L1 sets where N or M is a
// multiple of 1024). Then the step reads the tile's param and state,
// applies itself to the gradient in registers, and writes them back. While a
// tile multiplies, it prefetches the next tile's param and state lines, one
// per k, so that its update finds them in L1, and for writing (prefetchw):
// the matmuls before it left param's lines in the other cores' caches, and a
// read prefetch's shared copy still waits for them to let go at the store.
// The CNN's dense layer (a [64, 9216], b [64, 128], SGD with momentum) on two
// threads of a Zen 5 whose vCPUs share no cache (2026-12-07), param and
// velocity read last by the other thread: 1.21-1.37 ms with read prefetches,
// 0.62-0.77 with prefetchw (0.54-0.63 with nothing in the other's cache); in
// the CNN's training step that call 0.84x its time (5 of 5 pairs of
// bench/ab_compare.py). One thread: the same within noise.
//
// The MLP's second layer (a [128, 1024], b [128, 1024], Adam), alone with its
// state out of the caches, on a 2-vCPU Zen 5 (2026-11-29): the matmul and
// update took 1.47-1.56 ms on one thread and 0.84-0.92 on two, this call
// 1.30-1.42 and 0.68-0.76; without the prefetches 1.50-1.70 and 0.79-0.86.
// With the state in the caches it gains nothing (1.37 against 1.41 ms, 0.73
// against 0.73): its product runs 5-10% slower than oneDNN's, which the
// update's saved pass pays back. In the MLP's training step (bench_models
// --profile) the two layers' weight gradients and Adam took 2.51-2.62 ms on
// one thread, their two calls 2.26-2.39; on two threads 1.31 against
// 1.20-1.33. Packing a as well (bench_fusions, Intel Xeon family 6 model 207,
// 2026-12-02, that layer on one thread, state in the caches): this call over
// the matmul and Adam 0.90-0.96, against 0.95-1.01 with a read in place; on
// two threads 1.02-1.05 both ways (there the fusion loses a little).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "backends/cpu/adam_step.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/vector_math.hpp"

namespace tessera {
namespace {

constexpr int kLanes = 16;
constexpr int kTileRows = 6;
constexpr int kTileVectors = 4;
constexpr std::int64_t kPanelColumns = kTileVectors * kLanes;
// b's panels (K x N floats) stay in a core's L2: every tile reads them all.
constexpr std::int64_t kMostPanelFloats = 128 * 1024;  // 512 KiB

// _mm512_sqrt_ps, written so that GCC 12 does not warn of its own
// _mm512_undefined_ps (-Wuninitialized): the mask keeps every lane.
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512 sqrt_of(__m512 x) {
  return _mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xFFFF), x);
}

// Adam on one vector of 16 (adam_loop's arithmetic, in the same order).
struct AdamVector {
  static constexpr int kArrays = 3;  // param, m, v
  AdamStep s;
  [[gnu::target("avx512f,fma"), gnu::always_inline]] inline void apply(__m512 g, float* const* at) const {
    float *p = at[0], *m = at[1], *v = at[2];
    const __m512 param = _mm512_loadu_ps(p);
    g = _mm512_add_ps(g, _mm512_mul_ps(_mm512_set1_ps(s.l2), param));
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(s.b1), _mm512_loadu_ps(m)),
                                    _mm512_mul_ps(_mm512_set1_ps(1.0f - s.b1), g));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(s.b2), _mm512_loadu_ps(v)),
                                    _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(1.0f - s.b2), g), g));
    _mm512_storeu_ps(m, mi);
    _mm512_storeu_ps(v, vi);
    const __m512 step = _mm512_div_ps(_mm512_mul_ps(_mm512_set1_ps(s.alpha), mi),
                                      _mm512_add_ps(sqrt_of(vi), _mm512_set1_ps(s.eps)));
    _mm512_storeu_ps(p, _mm512_sub_ps(_mm512_mul_ps(param, _mm512_set1_ps(s.decay)), step));
  }
};

// Keras' SGD on one vector of 16 (sgd_loop's arithmetic, in the same order).
// Without momentum the velocity is never read (the tiles still prefetch it).
struct SgdVector {
  static constexpr int kArrays = 2;  // param, velocity
  SgdArgs a;
  [[gnu::target("avx512f,fma"), gnu::always_inline]] inline void apply(__m512 g, float* const* at) const {
    float *p = at[0], *v = at[1];
    const __m512 param = _mm512_loadu_ps(p), lr = _mm512_set1_ps(a.learning_rate);
    g = _mm512_add_ps(g, _mm512_mul_ps(_mm512_set1_ps(a.weight_decay), param));
    if (a.momentum == 0.0f) {
      _mm512_storeu_ps(p, _mm512_sub_ps(param, _mm512_mul_ps(lr, g)));
      return;
    }
    const __m512 momentum = _mm512_set1_ps(a.momentum);
    const __m512 vi = _mm512_sub_ps(_mm512_mul_ps(momentum, _mm512_loadu_ps(v)), _mm512_mul_ps(lr, g));
    _mm512_storeu_ps(v, vi);
    const __m512 delta =
        a.nesterov ? _mm512_sub_ps(_mm512_mul_ps(momentum, vi), _mm512_mul_ps(lr, g)) : vi;
    _mm512_storeu_ps(p, _mm512_add_ps(param, delta));
  }
};

// One call's operands: a's and b's panels, and the update's arrays (param
// first), each [M, N].
template <class Update>
struct Operands {
  float* a_panels;  // a [K, M] packed: the panel of rows [r, r + 6), K rows of its height, from a_panels + r * K
  float* panels;    // b packed: panel j, K rows of its width, from panels + j * 64 * K
  std::int64_t k, m, n;
  std::array<float*, Update::kArrays> arrays;
  Update update;
};

// A tile: rows [row, row + rows), columns [column, column + 16 vectors).
struct Tile {
  std::int64_t row = 0, rows = 0, column = 0, vectors = 0;
};

template <class Update, int kRows, int kVectors>
[[gnu::target("avx512f,fma,prfchw")]] void update_tile(const Operands<Update>& o, const Tile& tile, const Tile& next) {
  __m512 sum[kRows][kVectors];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) sum[i][v] = _mm512_setzero_ps();
  const float* a = o.a_panels + tile.row * o.k;  // its panel, whose rows are kRows wide
  const float* b = o.panels + tile.column * o.k;  // its panel, whose rows are kVectors * 16 wide
  // The next tile's lines: array by array, row by row, vector by vector
  // (counted without divisions: the loop over k has few cycles to spare).
  int array = next.rows > 0 ? 0 : Update::kArrays;
  std::int64_t row = 0, vector = 0;
  // Inlined, so that it is compiled for this function's target (prefetchw).
  auto prefetch = [&]() __attribute__((always_inline)) {
    _mm_prefetch(reinterpret_cast<const char*>(o.arrays[array] + (next.row + row) * o.n + next.column +
                                               vector * kLanes),
                 _MM_HINT_ET0);
    if (++vector < next.vectors) return;
    vector = 0;
    if (++row < next.rows) return;
    row = 0;
    ++array;
  };
  for (std::int64_t k = 0; k < o.k; ++k, a += kRows, b += kVectors * kLanes) {
    if (array < Update::kArrays) prefetch();
    __m512 column[kVectors];
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) column[v] = _mm512_loadu_ps(b + v * kLanes);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const __m512 in = _mm512_set1_ps(a[i]);
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) sum[i][v] = _mm512_fmadd_ps(in, column[v], sum[i][v]);
    }
  }
  while (array < Update::kArrays) prefetch();  // K shorter than the next tile's lines
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      float* at[Update::kArrays];
      for (int j = 0; j < Update::kArrays; ++j) at[j] = o.arrays[j] + (tile.row + i) * o.n + tile.column + v * kLanes;
      o.update.apply(sum[i][v], at);
    }
}

template <class Update>
using TileKernel = void (*)(const Operands<Update>&, const Tile&, const Tile&);

template <class Update, int kRows>
TileKernel<Update> tile_with_rows(std::int64_t vectors) {
  switch (vectors) {
    case 1: return update_tile<Update, kRows, 1>;
    case 2: return update_tile<Update, kRows, 2>;
    case 3: return update_tile<Update, kRows, 3>;
    default: return update_tile<Update, kRows, 4>;
  }
}

template <class Update>
TileKernel<Update> tile_kernel(const Tile& t) {
  switch (t.rows) {
    case 1: return tile_with_rows<Update, 1>(t.vectors);
    case 2: return tile_with_rows<Update, 2>(t.vectors);
    case 3: return tile_with_rows<Update, 3>(t.vectors);
    case 4: return tile_with_rows<Update, 4>(t.vectors);
    case 5: return tile_with_rows<Update, 5>(t.vectors);
    default: return tile_with_rows<Update, 6>(t.vectors);
  }
}

// b [K, N] into panels of 64 columns, each K rows of its width; the team
// shares the panels.
void pack_panels(const float* b, std::int64_t k, std::int64_t n, float* panels) {
#pragma omp for schedule(static)
  for (std::int64_t column = 0; column < n; column += kPanelColumns) {
    const std::int64_t width = std::min(kPanelColumns, n - column);
    for (std::int64_t row = 0; row < k; ++row)
      std::memcpy(panels + column * k + row * width, b + row * n + column, static_cast<std::size_t>(width) * sizeof(float));
  }
}

// a [K, M]'s rows [begin, end) into panels of 6 of them (a tile's height),
// each K rows of its height: read in place, a tile's K lines of a lie M floats
// apart, in the same few L1 sets where M is a multiple of 1024 (the MLP's),
// and every tile of the row would fetch them again from L2. `begin` is a
// multiple of 6; only the panel that ends at M may be shorter.
//
// Eight panels fill in one pass over K, which reads three whole lines of each
// row of a; one panel a pass read a line per 6 floats and, where M is a
// multiple of 1024, fetched it again for the next panel. Sixteen a pass
// write streams K * 24 bytes apart that share L1 sets where K is a multiple
// of 512. One thread, Zen 5, 2026-12-07: K 64 x M 9216 (the CNN's dense
// layer) 290-340 -> 66 us, 128 x 1024 60-70 -> 14, 128 x 784 31-45 -> 10.
void pack_row_panels(const float* a, std::int64_t k, std::int64_t m, std::int64_t begin, std::int64_t end,
                     float* panels) {
  constexpr std::int64_t kPanelsPerPass = 8;
  const std::int64_t panel_floats = kTileRows * k;
  const std::int64_t whole_end = begin + (end - begin) / kTileRows * kTileRows;
  for (std::int64_t first = begin; first < whole_end; first += kPanelsPerPass * kTileRows) {
    const std::int64_t count = std::min(kPanelsPerPass, (whole_end - first) / kTileRows);
    for (std::int64_t i = 0; i < k; ++i) {
      const float* from = a + i * m + first;
      float* to = panels + first * k + i * kTileRows;
      for (std::int64_t p = 0; p < count; ++p)
        std::memcpy(to + p * panel_floats, from + p * kTileRows, kTileRows * sizeof(float));
    }
  }
  if (whole_end < end) {  // the last panel, shorter
    const std::int64_t height = end - whole_end;
    float* panel = panels + whole_end * k;
    for (std::int64_t i = 0; i < k; ++i)
      std::memcpy(panel + i * height, a + i * m + whole_end, static_cast<std::size_t>(height) * sizeof(float));
  }
}

// Every tile of param, the threads of the team taking whole rows of tiles in
// order, each tile prefetching the one its thread does next.
template <class Update>
void update_by_product(const Tensor& a, const Tensor& b, std::array<float*, Update::kArrays> arrays,
                       const Update& update, float* scratch, int threads) {
  const Operands<Update> o{.a_panels = scratch + b.numel(), .panels = scratch, .k = a.shape()[0],
                           .m = a.shape()[1], .n = b.shape()[1], .arrays = arrays, .update = update};
  const std::int64_t row_tiles = (o.m + kTileRows - 1) / kTileRows;
  const std::int64_t per_row = (o.n + kPanelColumns - 1) / kPanelColumns;
  auto tile_at = [&](std::int64_t index) {  // index over row tiles, then column panels
    Tile t;
    t.row = index / per_row * kTileRows;
    t.rows = std::min<std::int64_t>(kTileRows, o.m - t.row);
    t.column = index % per_row * kPanelColumns;
    t.vectors = std::min(kPanelColumns, o.n - t.column) / kLanes;
    return t;
  };
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const std::int64_t first_row_tile = row_tiles * t / team, end_row_tile = row_tiles * (t + 1) / team;
    // Each thread reads only the rows of a it packed itself.
    pack_row_panels(a.data<float>(), o.k, o.m, first_row_tile * kTileRows, std::min(end_row_tile * kTileRows, o.m),
                    o.a_panels);
    pack_panels(b.data<float>(), o.k, o.n, o.panels);  // ends in the team's barrier
    const std::int64_t begin = first_row_tile * per_row, end = end_row_tile * per_row;
    for (std::int64_t index = begin; index < end; ++index) {
      const Tile tile = tile_at(index);
      const Tile next = index + 1 < end ? tile_at(index + 1) : Tile{};
      tile_kernel<Update>(tile)(o, tile, next);
    }
  }
}

constexpr const char* kPanelsKey = "update by product: panels";  // the backend's scratch buffer
// b's panels, then a's.
std::size_t panel_bytes(const Tensor& a, const Tensor& b) {
  return static_cast<std::size_t>(a.numel() + b.numel()) * sizeof(float);
}

}  // namespace

bool CpuBackend::supports_update_by_product(DType dtype, const Shape& a, const Shape& b) const {
  return dtype == DType::f32 && a.rank() == 2 && b.rank() == 2 && a[0] == b[0] && b[1] % kLanes == 0 &&
         a[0] * b[1] <= kMostPanelFloats && widest_vector_isa() == VectorIsa::avx512;
}

void CpuBackend::run_adam_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b, const Tensor& m,
                                            const Tensor& v, const AdamArgs& args) {
  float* panels = static_cast<float*>(scratch_buffer(kPanelsKey, panel_bytes(a, b)).data());
  KernelScope scope(threads());
  update_by_product(a, b, {param.data<float>(), m.data<float>(), v.data<float>()}, AdamVector{adam_step(args)}, panels,
                    threads());
}

void CpuBackend::run_sgd_update_by_product(const Tensor& param, const Tensor& a, const Tensor& b,
                                           const Tensor& velocity, const SgdArgs& args) {
  float* panels = static_cast<float*>(scratch_buffer(kPanelsKey, panel_bytes(a, b)).data());
  KernelScope scope(threads());
  update_by_product(a, b, {param.data<float>(), velocity.data<float>()}, SgdVector{args}, panels, threads());
}

}  // namespace tessera
