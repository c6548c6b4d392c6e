// NumPy broadcasting of two operands as index arithmetic a GPU thread can do:
// from a flat index into the output, the flat indices into a and b.
//
// Built on the host from the three shapes (make_broadcast_index), then passed
// to a kernel by value. Operand strides are 0 on the axes where the operand is
// broadcast (extent 1 or missing on the left). To keep the per-element work
// small and the rank bounded, the builder drops output axes of extent 1 and
// merges neighbouring axes that are contiguous in both operands: same shapes
// become one axis, [2,1,3] x [4,3] becomes [2,4,3] with strides (3,0,1) and
// (0,3,1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/host_device.hpp"
#include "engine/core/error.hpp"

namespace tessera {

struct BroadcastOffsets {
  std::int64_t a = 0, b = 0;
};

struct BroadcastIndex {
  static constexpr int kMaxDims = 6;
  int rank = 0;  // 0: every output element reads element 0 of both operands
  std::int64_t extent[kMaxDims] = {};     // output extents, outermost first
  std::int64_t a_stride[kMaxDims] = {};   // element strides of a per output axis
  std::int64_t b_stride[kMaxDims] = {};

  TESSERA_HOST_DEVICE BroadcastOffsets operator()(std::int64_t out_index) const { return at(out_index); }

  // In Index arithmetic: std::uint32_t where narrow() holds (StridedIndex::at
  // says why).
  template <typename Index = std::int64_t>
  TESSERA_HOST_DEVICE BroadcastOffsets at(Index out_index) const {
    Index a = 0, b = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const Index e = static_cast<Index>(extent[d]);
      const Index coord = out_index % e;
      out_index /= e;
      a += coord * static_cast<Index>(a_stride[d]);
      b += coord * static_cast<Index>(b_stride[d]);
    }
    return {static_cast<std::int64_t>(a), static_cast<std::int64_t>(b)};
  }

  // Whether at<std::uint32_t> gives the offsets of every output index below `count`.
  bool narrow(std::int64_t count) const {
    std::int64_t largest_a = 0, largest_b = 0;
    for (int d = 0; d < rank; ++d) {
      largest_a += (extent[d] - 1) * a_stride[d];
      largest_b += (extent[d] - 1) * b_stride[d];
    }
    constexpr std::int64_t limit = std::int64_t{1} << 32;
    return count < limit && largest_a < limit && largest_b < limit;  // count < 2^32: so is every extent
  }
};

namespace broadcast_detail {

// Row-major strides of `operand` aligned right against `out`, 0 where broadcast.
inline std::vector<std::int64_t> strides_into(const std::vector<std::int64_t>& operand,
                                              const std::vector<std::int64_t>& out) {
  std::vector<std::int64_t> strides(out.size(), 0);
  const std::size_t lead = out.size() - operand.size();
  std::int64_t stride = 1;
  for (std::size_t i = operand.size(); i-- > 0;) {
    if (operand[i] != 1) strides[lead + i] = stride;
    stride *= operand[i];
  }
  return strides;
}

}  // namespace broadcast_detail

// The mapper of out = a (op) b; `out` is the broadcast shape of a and b (the
// caller checked it). Throws UnsupportedError when more than kMaxDims axes
// remain after merging.
inline BroadcastIndex make_broadcast_index(const std::vector<std::int64_t>& a,
                                           const std::vector<std::int64_t>& b,
                                           const std::vector<std::int64_t>& out) {
  const std::vector<std::int64_t> sa = broadcast_detail::strides_into(a, out);
  const std::vector<std::int64_t> sb = broadcast_detail::strides_into(b, out);
  // Axes innermost first, merged as they come.
  std::vector<std::int64_t> extent, a_stride, b_stride;
  for (std::size_t i = out.size(); i-- > 0;) {
    if (out[i] == 1) continue;  // coordinate always 0
    if (!extent.empty() && sa[i] == a_stride.back() * extent.back() &&
        sb[i] == b_stride.back() * extent.back()) {
      extent.back() *= out[i];  // contiguous with the inner axis in both operands
      continue;
    }
    extent.push_back(out[i]);
    a_stride.push_back(sa[i]);
    b_stride.push_back(sb[i]);
  }
  if (extent.size() > static_cast<std::size_t>(BroadcastIndex::kMaxDims))
    throw UnsupportedError("binary broadcast needs " + std::to_string(extent.size()) +
                           " axes after merging; the cuda backend handles at most " +
                           std::to_string(BroadcastIndex::kMaxDims));
  BroadcastIndex index;
  index.rank = static_cast<int>(extent.size());
  for (int d = 0; d < index.rank; ++d) {
    const std::size_t from = extent.size() - 1 - static_cast<std::size_t>(d);  // outermost first
    index.extent[d] = extent[from];
    index.a_stride[d] = a_stride[from];
    index.b_stride[d] = b_stride[from];
  }
  return index;
}

}  // namespace tessera
