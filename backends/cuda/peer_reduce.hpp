// The reduction of logical GPU devices' collectives, as one host/device
// element function: element i of every destination = the reduction of
// element i of every source, all buffers of one GPU. peer_reduce.cu launches
// it; tests run it on the host against ShmKernels, whose arithmetic it repeats:
// sources in order, f32 and bf16 accumulated in f32 (bf16 rounded once),
// max as `x > acc ? x : acc`, mean the sum divided by the number of sources;
// integers sum and max in their own type.
#pragma once

#include <cstdint>

#include "backends/cuda/cast.hpp"
#include "backends/host_device.hpp"
#include "backends/op_kinds.hpp"
#include "engine/core/dtype.hpp"

namespace tessera {

// Passed to the kernel by value (kernel parameters: 4 KiB at most), so every
// member of a collective fits: the most logical devices a GPU holds.
inline constexpr int kPeerReduceMaxBuffers = 64;

struct PeerReduce {
  const void* srcs[kPeerReduceMaxBuffers] = {};
  void* dsts[kPeerReduceMaxBuffers] = {};
  int sources = 0, destinations = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;

  TESSERA_HOST_DEVICE void operator()(std::int64_t i) const {
    switch (dtype) {
      case DType::f32: {
        const float r = reduce_floats<float>(i);
        for (int j = 0; j < destinations; ++j) static_cast<float*>(dsts[j])[i] = r;
        return;
      }
      case DType::bf16: {
        const std::uint16_t r = cast_f32_to_bf16(reduce_floats<std::uint16_t>(i));
        for (int j = 0; j < destinations; ++j) static_cast<std::uint16_t*>(dsts[j])[i] = r;
        return;
      }
      case DType::i32: return reduce_integers<std::int32_t>(i);
      case DType::i64: return reduce_integers<std::int64_t>(i);
    }
  }

 private:
  template <typename T>
  TESSERA_HOST_DEVICE static float load(const void* p, std::int64_t i) {
    if constexpr (sizeof(T) == 2) return cast_bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
    else return static_cast<const float*>(p)[i];
  }

  // All sources are read before any destination is written: a destination
  // may be a source (in place).
  template <typename T>
  TESSERA_HOST_DEVICE float reduce_floats(std::int64_t i) const {
    float acc = load<T>(srcs[0], i);
    for (int k = 1; k < sources; ++k) {
      const float x = load<T>(srcs[k], i);
      acc = op == ReduceOp::max ? (x > acc ? x : acc) : acc + x;
    }
    return op == ReduceOp::mean ? acc / static_cast<float>(sources) : acc;
  }

  template <typename T>
  TESSERA_HOST_DEVICE void reduce_integers(std::int64_t i) const {
    T acc = static_cast<const T*>(srcs[0])[i];
    for (int k = 1; k < sources; ++k) {
      const T x = static_cast<const T*>(srcs[k])[i];
      acc = op == ReduceOp::max ? (x > acc ? x : acc) : static_cast<T>(acc + x);
    }
    for (int j = 0; j < destinations; ++j) static_cast<T*>(dsts[j])[i] = acc;
  }
};

}  // namespace tessera
