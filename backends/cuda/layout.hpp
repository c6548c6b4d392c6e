// The data-movement ops (broadcast_to, transpose, slice, concat) as one
// host/device copy: element i goes from src[src_base + src(i)] to
// dst[dst_base + dst(i)]. layout.cu launches it for element sizes 2, 4 and 8
// (any dtype: no arithmetic happens), and tests run it on the host against the
// CPU backend. The builders below turn each op's shapes into a StridedCopy.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cuda/strided_index.hpp"
#include "backends/host_device.hpp"

namespace tessera {

struct StridedCopy {
  StridedIndex src, dst;
  std::int64_t src_base = 0, dst_base = 0;
  std::int64_t count = 0;  // elements to copy

  template <typename Word, typename Index = std::int64_t>
  TESSERA_HOST_DEVICE void operator()(const Word* from, Word* to, std::int64_t i) const {
    to[dst_base + dst.at(static_cast<Index>(i))] = from[src_base + src.at(static_cast<Index>(i))];
  }
  // Whether 32-bit index arithmetic covers it (StridedIndex::narrow).
  bool narrow() const { return src.narrow(count) && dst.narrow(count); }
};

// cache[b, h, positions[b] + t, k] = rows[b, h, t, k], element i of rows
// [B, H, T, K] into a KV cache [B, H, C, K]. A row past the cache is not
// written: a kernel cannot throw (the CPU backend reports it).
struct CacheWrite {
  std::int64_t heads = 0, length = 0, capacity = 0, width = 0;  // H, T, C, K
  std::int64_t count = 0;                                       // B * H * T * K

  template <typename Word>
  TESSERA_HOST_DEVICE void operator()(const Word* rows, const std::int32_t* positions, Word* cache,
                                      std::int64_t i) const {
    const std::int64_t k = i % width, t = i / width % length, sequence_head = i / (width * length);
    const std::int64_t at = positions[sequence_head / heads] + t;
    if (at >= 0 && at < capacity) cache[(sequence_head * capacity + at) * width + k] = rows[i];
  }
};

// out = x broadcast to `out` (NumPy rules; the caller checked them).
inline StridedCopy make_broadcast_copy(const std::vector<std::int64_t>& x,
                                       const std::vector<std::int64_t>& out) {
  std::vector<std::int64_t> strides(out.size(), 0);
  const std::size_t lead = out.size() - x.size();
  const std::vector<std::int64_t> x_strides = contiguous_strides(x);
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] != 1) strides[lead + i] = x_strides[i];  // 0 where broadcast
  StridedCopy c;
  c.src = make_strided_index(out, strides, "broadcast_to");
  c.dst = make_strided_index(out, contiguous_strides(out), "broadcast_to");
  c.count = 1;
  for (std::int64_t e : out) c.count *= e;
  return c;
}

// out = x with axes permuted: out.shape[i] = x.shape[perm[i]].
inline StridedCopy make_transpose_copy(const std::vector<std::int64_t>& x,
                                       const std::vector<int>& perm) {
  const std::vector<std::int64_t> x_strides = contiguous_strides(x);
  std::vector<std::int64_t> out(perm.size()), strides(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    out[i] = x[static_cast<std::size_t>(perm[i])];
    strides[i] = x_strides[static_cast<std::size_t>(perm[i])];
  }
  StridedCopy c;
  c.src = make_strided_index(out, strides, "transpose");
  c.dst = make_strided_index(out, contiguous_strides(out), "transpose");
  c.count = 1;
  for (std::int64_t e : out) c.count *= e;
  return c;
}

// out = x[..., start : start + out[axis], ...].
inline StridedCopy make_slice_copy(const std::vector<std::int64_t>& x,
                                   const std::vector<std::int64_t>& out, int axis,
                                   std::int64_t start) {
  const std::vector<std::int64_t> x_strides = contiguous_strides(x);
  StridedCopy c;
  c.src = make_strided_index(out, x_strides, "slice");
  c.src_base = start * x_strides[static_cast<std::size_t>(axis)];
  c.dst = make_strided_index(out, contiguous_strides(out), "slice");
  c.count = 1;
  for (std::int64_t e : out) c.count *= e;
  return c;
}

// The part of a concat that copies `input` into `out` at `offset` along `axis`
// (offset: the extents of the inputs before it).
inline StridedCopy make_concat_copy(const std::vector<std::int64_t>& input,
                                    const std::vector<std::int64_t>& out, int axis,
                                    std::int64_t offset) {
  const std::vector<std::int64_t> out_strides = contiguous_strides(out);
  StridedCopy c;
  c.src = make_strided_index(input, contiguous_strides(input), "concat");
  c.dst = make_strided_index(input, out_strides, "concat");
  c.dst_base = offset * out_strides[static_cast<std::size_t>(axis)];
  c.count = 1;
  for (std::int64_t e : input) c.count *= e;
  return c;
}

// 16 bytes moved as one word: the widened copies' element.
struct alignas(16) Words16 {
  std::uint64_t low, high;
};

// The same copy moving `factor` consecutive elements as one word, where every
// run of `factor` elements is contiguous in src and dst alike: both indices'
// innermost axes are contiguous (stride 1) with extents divisible by factor,
// and every other stride and both bases are multiples of it. Flat index
// i = factor * j + r then maps to factor * index'(j) + r on both sides. A
// transpose that keeps the last axis ([B, T, H, 64] -> [B, H, T, 64]) then
// does a quarter of the index arithmetic and a quarter of the loads (f32 in
// 16-byte words). Returns false, leaving `wide` alone, where it does not hold.
inline bool widen_copy(const StridedCopy& copy, std::int64_t factor, StridedCopy& wide) {
  auto widen = [factor](const StridedIndex& index, StridedIndex& out) {
    if (index.rank == 0 || index.stride[index.rank - 1] != 1 || index.extent[index.rank - 1] % factor != 0)
      return false;
    out = index;
    out.extent[index.rank - 1] /= factor;
    for (int d = 0; d < index.rank - 1; ++d) {
      if (index.stride[d] % factor != 0) return false;
      out.stride[d] /= factor;
    }
    return true;
  };
  StridedCopy result;
  if (factor <= 1 || copy.count % factor != 0 || copy.src_base % factor != 0 || copy.dst_base % factor != 0 ||
      !widen(copy.src, result.src) || !widen(copy.dst, result.dst))
    return false;
  result.src_base = copy.src_base / factor;
  result.dst_base = copy.dst_base / factor;
  result.count = copy.count / factor;
  wide = result;
  return true;
}

}  // namespace tessera
