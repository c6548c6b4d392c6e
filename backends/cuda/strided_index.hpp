// One operand's flat-index → element-offset map, as index arithmetic a GPU
// thread can do: the building block of the layout kernels (broadcast_to,
// transpose, slice, concat) and of the reductions.
//
// A StridedIndex walks a logical shape in row-major order and returns
// sum(coord[d] * stride[d]). Built on the host (make_strided_index), passed to
// kernels by value. The builder drops extent-1 axes (their coordinate is
// always 0) and merges an axis into its inner neighbour when the two are
// contiguous, so the common cases (a plain copy, a broadcast of a row) take
// one division per element and the rank stays bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/host_device.hpp"
#include "engine/core/error.hpp"

namespace tessera {

struct StridedIndex {
  static constexpr int kMaxDims = 6;
  int rank = 0;  // 0: every flat index maps to offset 0
  std::int64_t extent[kMaxDims] = {};  // outermost first
  std::int64_t stride[kMaxDims] = {};  // in elements

  TESSERA_HOST_DEVICE std::int64_t operator()(std::int64_t flat) const { return at(flat); }

  // The map in Index arithmetic: std::uint32_t where narrow() holds, since a
  // GPU divides 32-bit integers in a few instructions and 64-bit ones in a
  // long software routine, which costs more than the element's load.
  template <typename Index = std::int64_t>
  TESSERA_HOST_DEVICE std::int64_t at(Index flat) const {
    Index offset = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const Index e = static_cast<Index>(extent[d]);
      offset += (flat % e) * static_cast<Index>(stride[d]);
      flat /= e;
    }
    return static_cast<std::int64_t>(offset);
  }

  // Whether at<std::uint32_t> gives every offset of flat indices [0, count):
  // count below 2^32 keeps every extent below it too (an extent of 2^32 would
  // become a divisor of 0).
  bool narrow(std::int64_t count) const {
    std::int64_t largest = 0;  // the offset of the last element of every axis
    for (int d = 0; d < rank; ++d) largest += (extent[d] - 1) * stride[d];
    return count < kNarrowLimit && largest < kNarrowLimit;
  }
  static constexpr std::int64_t kNarrowLimit = std::int64_t{1} << 32;
};

// Row-major element strides of `dims`.
inline std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> strides(dims.size(), 1);
  for (std::size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

// The map of the logical shape `extent` (outermost first) with `stride` per
// axis. Throws UnsupportedError naming `op` when more than kMaxDims axes
// remain after dropping and merging.
inline StridedIndex make_strided_index(const std::vector<std::int64_t>& extent,
                                       const std::vector<std::int64_t>& stride,
                                       const std::string& op) {
  std::vector<std::int64_t> e, s;  // innermost first while merging
  for (std::size_t i = extent.size(); i-- > 0;) {
    if (extent[i] == 1) continue;
    if (!e.empty() && stride[i] == s.back() * e.back()) {
      e.back() *= extent[i];
      continue;
    }
    e.push_back(extent[i]);
    s.push_back(stride[i]);
  }
  if (e.size() > static_cast<std::size_t>(StridedIndex::kMaxDims))
    throw UnsupportedError(op + " needs " + std::to_string(e.size()) +
                           " axes after merging; the cuda backend handles at most " +
                           std::to_string(StridedIndex::kMaxDims));
  StridedIndex index;
  index.rank = static_cast<int>(e.size());
  for (int d = 0; d < index.rank; ++d) {
    const std::size_t from = e.size() - 1 - static_cast<std::size_t>(d);
    index.extent[d] = e[from];
    index.stride[d] = s[from];
  }
  return index;
}

}  // namespace tessera
