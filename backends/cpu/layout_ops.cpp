// Kernels that move elements without arithmetic: copy, fill, cast, broadcast,
// transpose, slice, a KV cache's write. Plain loops over element bytes, so every dtype works.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/bf16_rounding.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/float_to_integer.hpp"
#include "backends/cpu/strided_loop.hpp"

namespace tessera {
namespace {

// Copies elements (as opaque words of their size) from x, read with `x_strides`
// over out's axes.
template <typename Word>
void strided_copy(const Tensor& x, const Tensor& out, const std::vector<std::int64_t>& x_strides) {
  const Word* px = static_cast<const Word*>(x.raw_data());
  Word* po = static_cast<Word*>(out.raw_data());
  std::vector<std::int64_t> strides[1] = {x_strides};
  for_each_row<1>(out.shape(), strides,
                  [&](std::int64_t o, const std::int64_t* off, std::int64_t n, const std::int64_t* s) {
                    // Whole rows (attention's head transposes): a copy, not an element
                    // loop; short ones stay in the loop (a library call costs more).
                    if (s[0] == 1 && n >= 16)
                      return static_cast<void>(std::memcpy(po + o, px + off[0], n * sizeof(Word)));
                    for (std::int64_t i = 0; i < n; ++i) po[o + i] = px[off[0] + i * s[0]];
                  });
}

void strided_copy_any(const Tensor& x, const Tensor& out, const std::vector<std::int64_t>& strides) {
  switch (dtype_size(x.dtype())) {
    case 2: return strided_copy<std::uint16_t>(x, out, strides);
    case 4: return strided_copy<std::uint32_t>(x, out, strides);
    default: return strided_copy<std::uint64_t>(x, out, strides);
  }
}

template <typename T>
void fill_typed(const Tensor& out, T value) {
  T* p = static_cast<T*>(out.raw_data());
  std::int64_t n = out.numel();
  parallel_for(n, n > 65536, [&](std::int64_t i) { p[i] = value; });
}

// Conversions for cast and fill that round once. Going through double and then
// float rounds twice, and a value just above a tie at the first rounding can land
// on the tie and then round the wrong way: i64 2^60 + 2^36 + 1 became f32 2^60
// (not 2^60 + 2^37), i32 2^24 + 2^16 + 1 became bf16 2^24 (not 2^24 + 2^17).
// The fix rounds to odd into float (truncate, and set the last bit when anything
// was dropped), after which to_bf16's round-to-nearest-even is exact.
float odd_rounded(float truncated, bool inexact) {
  if (!inexact) return truncated;
  std::uint32_t u;
  std::memcpy(&u, &truncated, sizeof u);
  u |= 1u;
  std::memcpy(&truncated, &u, sizeof u);
  return truncated;
}

bf16 double_to_bf16(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f) || static_cast<double>(f) == v) return to_bf16(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return to_bf16(odd_rounded(f, true));
}

bf16 integer_to_bf16(std::int64_t v) {
  std::uint64_t magnitude = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  int dropped = std::max(0, static_cast<int>(std::bit_width(magnitude)) - 24);
  std::uint64_t kept = magnitude >> dropped;  // < 2^24: exact in a float
  float f = std::ldexp(odd_rounded(static_cast<float>(kept), (kept << dropped) != magnitude), dropped);
  return to_bf16(v < 0 ? -f : f);
}

// Element i of t converted to float, bf16 or i64, each rounded once.
float load_f32(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return static_cast<const float*>(t.raw_data())[i];
    case DType::bf16: return to_f32(static_cast<const bf16*>(t.raw_data())[i]);
    case DType::i32: return static_cast<float>(static_cast<const std::int32_t*>(t.raw_data())[i]);
    case DType::i64: return static_cast<float>(static_cast<const std::int64_t*>(t.raw_data())[i]);
  }
  return 0;
}

bf16 load_bf16(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return to_bf16(static_cast<const float*>(t.raw_data())[i]);
    case DType::bf16: return static_cast<const bf16*>(t.raw_data())[i];
    case DType::i32: return integer_to_bf16(static_cast<const std::int32_t*>(t.raw_data())[i]);
    case DType::i64: return integer_to_bf16(static_cast<const std::int64_t*>(t.raw_data())[i]);
  }
  return {};
}

std::int64_t load_i64(const Tensor& t, std::int64_t i) {  // floats truncate toward zero, saturating
  switch (t.dtype()) {
    case DType::f32: return float_to_i64(static_cast<const float*>(t.raw_data())[i]);
    case DType::bf16: return float_to_i64(to_f32(static_cast<const bf16*>(t.raw_data())[i]));
    case DType::i32: return static_cast<const std::int32_t*>(t.raw_data())[i];
    case DType::i64: return static_cast<const std::int64_t*>(t.raw_data())[i];
  }
  return 0;
}

}  // namespace

void CpuBackend::run_copy(const Tensor& src, const Tensor& dst) {
  if (src.raw_data() != dst.raw_data()) std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
}

void CpuBackend::run_fill(const Tensor& out, double value) {
  KernelScope scope(threads());
  switch (out.dtype()) {
    case DType::f32: return fill_typed(out, static_cast<float>(value));
    case DType::bf16: return fill_typed(out, double_to_bf16(value));
    case DType::i32: return fill_typed(out, float_to_i32(value));
    case DType::i64: return fill_typed(out, float_to_i64(value));
  }
}

void CpuBackend::run_cast(const Tensor& x, const Tensor& out) {
  if (x.dtype() == out.dtype()) return run_copy(x, out);
  KernelScope scope(threads());
  std::int64_t n = x.numel();
  // Mixed precision's casts, on every step: loops over plain pointers, which
  // the compiler vectorizes (the loop below reads each element's dtype); to
  // bf16 in the widest vectors this CPU has (bf16_rounding.hpp).
  if (x.dtype() == DType::f32 && out.dtype() == DType::bf16) {
    const float* from = x.data<float>();
    bf16* to = out.data<bf16>();
    constexpr std::int64_t kBlock = 16384;
    const std::int64_t blocks = (n + kBlock - 1) / kBlock;
    parallel_for(blocks, blocks > 4,
                 [&](std::int64_t b) { round_to_bf16(from + b * kBlock, to + b * kBlock, std::min(kBlock, n - b * kBlock)); });
    return;
  }
  if (x.dtype() == DType::bf16 && out.dtype() == DType::f32) {
    const bf16* from = x.data<bf16>();
    float* to = out.data<float>();
    parallel_for(n, n > 65536, [&](std::int64_t i) { to[i] = to_f32(from[i]); });
    return;
  }
  parallel_for(n, n > 65536, [&](std::int64_t i) {
    switch (out.dtype()) {
      case DType::f32: static_cast<float*>(out.raw_data())[i] = load_f32(x, i); break;
      case DType::bf16: static_cast<bf16*>(out.raw_data())[i] = load_bf16(x, i); break;
      case DType::i32:  // floats saturate; i64 wraps
        static_cast<std::int32_t*>(out.raw_data())[i] =
            is_floating(x.dtype()) ? float_to_i32(load_f32(x, i)) : static_cast<std::int32_t>(load_i64(x, i));
        break;
      case DType::i64: static_cast<std::int64_t*>(out.raw_data())[i] = load_i64(x, i); break;
    }
  });
}

namespace {

// Copies, for every index of the axes before `axis`, a block of `bytes` bytes
// from `src` (rows `src_row` bytes apart) to `dst` (rows `dst_row` apart).
void copy_blocks(const char* src, std::size_t src_row, char* dst, std::size_t dst_row, std::size_t bytes,
                 std::int64_t rows) {
  parallel_for(rows, rows * static_cast<std::int64_t>(bytes) > (1 << 20), [&](std::int64_t r) {
    std::memcpy(dst + static_cast<std::size_t>(r) * dst_row, src + static_cast<std::size_t>(r) * src_row, bytes);
  });
}

// Elements per index of the axes before `axis` (for x of `shape`).
std::int64_t outer(const Shape& shape, int axis) {
  std::int64_t n = 1;
  for (int i = 0; i < axis; ++i) n *= shape[i];
  return n;
}

}  // namespace

void CpuBackend::run_concat(const std::vector<Tensor>& inputs, const Tensor& out, int axis) {
  KernelScope scope(threads());
  std::int64_t rows = outer(out.shape(), axis);
  std::size_t out_row = rows == 0 ? 0 : out.nbytes() / static_cast<std::size_t>(rows), offset = 0;
  for (const Tensor& in : inputs) {
    std::size_t in_row = rows == 0 ? 0 : in.nbytes() / static_cast<std::size_t>(rows);
    copy_blocks(static_cast<const char*>(in.raw_data()), in_row, static_cast<char*>(out.raw_data()) + offset,
                out_row, in_row, rows);
    offset += in_row;
  }
}

void CpuBackend::run_slice(const Tensor& x, const Tensor& out, int axis, std::int64_t start) {
  KernelScope scope(threads());
  std::int64_t rows = outer(x.shape(), axis);
  if (rows == 0) return;
  std::size_t x_row = x.nbytes() / static_cast<std::size_t>(rows), out_row = out.nbytes() / static_cast<std::size_t>(rows);
  std::size_t begin = x.shape()[axis] == 0 ? 0 : x_row / static_cast<std::size_t>(x.shape()[axis]) * static_cast<std::size_t>(start);
  copy_blocks(static_cast<const char*>(x.raw_data()) + begin, x_row, static_cast<char*>(out.raw_data()), out_row,
              out_row, rows);
}

void CpuBackend::run_cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions) {
  const Shape& s = cache.shape();
  const std::int64_t heads = s[1], capacity = s[2], length = rows.shape()[2];
  const std::int32_t* at = positions.data<std::int32_t>();
  for (std::int64_t b = 0; b < s[0]; ++b)  // every position first: an error writes nothing
    if (at[b] < 0 || at[b] + length > capacity)
      throw ShapeError("cache_write: sequence " + std::to_string(b) + " writes " + std::to_string(length) +
                       " rows at position " + std::to_string(at[b]) + " of a cache of " + std::to_string(capacity));
  const std::size_t row = static_cast<std::size_t>(s[3]) * dtype_size(cache.dtype());
  const auto* from = static_cast<const char*>(rows.raw_data());
  auto* to = static_cast<char*>(cache.raw_data());
  for (std::int64_t b = 0; b < s[0]; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      std::memcpy(to + static_cast<std::size_t>((b * heads + h) * capacity + at[b]) * row,
                  from + static_cast<std::size_t>((b * heads + h) * length) * row, static_cast<std::size_t>(length) * row);
}

void CpuBackend::run_broadcast_to(const Tensor& x, const Tensor& out) {
  KernelScope scope(threads());
  strided_copy_any(x, out, broadcast_strides(x.shape(), out.shape()));
}

void CpuBackend::run_transpose(const Tensor& x, const Tensor& out, const std::vector<int>& perm) {
  auto x_strides = contiguous_strides(x.shape());
  std::vector<std::int64_t> strides(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) strides[i] = x_strides[perm[i]];
  KernelScope scope(threads());
  strided_copy_any(x, out, strides);
}

}  // namespace tessera
