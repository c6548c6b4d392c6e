// ShmKernels: the AVX-512 and the portable kernels against a scalar reference,
// bit for bit, over lengths around every vector and chunk boundary, aligned
// and misaligned destinations, streaming and ordinary stores, in place.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include "distribution/collectives/shm_kernels.hpp"
#include "engine/core/tensor.hpp"

using namespace tessera;

namespace {

// The implementations this machine can run: portable, and AVX-512 where available.
std::vector<bool> implementations() {
  std::vector<bool> avx512{false};
  if (ShmKernels::avx512_available()) avx512.push_back(true);
  return avx512;
}

// A 64-byte aligned buffer (a tensor's storage) of random values of `dtype`.
struct Bytes {
  Tensor storage;
  std::byte* at(std::size_t offset) const { return static_cast<std::byte*>(storage.raw_data()) + offset; }
};

Bytes random_buffer(std::size_t bytes, DType dtype, unsigned seed) {
  Bytes b{Tensor::empty({static_cast<std::int64_t>(bytes + 7) / 8}, DType::i64)};
  std::mt19937_64 gen(seed);
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i + es <= bytes; i += es) {
    const auto r = static_cast<std::int64_t>(gen() % 2000001) - 1000000;  // values with fractions in float
    const float f = static_cast<float>(r) / 997.0f;
    switch (dtype) {
      case DType::f32: std::memcpy(b.at(i), &f, 4); break;
      case DType::bf16: {
        const bf16 v = to_bf16(f);
        std::memcpy(b.at(i), &v.bits, 2);
        break;
      }
      case DType::i32: {
        auto v = static_cast<std::int32_t>(r);
        std::memcpy(b.at(i), &v, 4);
        break;
      }
      case DType::i64: std::memcpy(b.at(i), &r, 8); break;
    }
  }
  return b;
}

// Random source and destination contents, made once per dtype and copied
// into fresh buffers for every case (in place overwrites a source).
struct Pool {
  static constexpr std::size_t kSources = 5, kDestinations = 3;
  Pool(DType dtype, std::size_t bytes) : bytes(bytes) {
    for (std::size_t k = 0; k < kSources + kDestinations; ++k) {
      pristine.push_back(random_buffer(bytes, dtype, static_cast<unsigned>(k + 1)));
      work.push_back(Bytes{Tensor::empty(pristine.back().storage.shape(), DType::i64)});
    }
  }
  // Restores the first `used` bytes of every buffer.
  void reset(std::size_t used) {
    for (std::size_t k = 0; k < work.size(); ++k) std::memcpy(work[k].at(0), pristine[k].at(0), used);
  }
  const Bytes& source(std::size_t k) const { return work[k]; }
  const Bytes& destination(std::size_t j) const { return work[kSources + j]; }
  std::size_t bytes;
  std::vector<Bytes> pristine, work;
};

// The reduction of element i, in order, as the kernels define it.
template <typename T, typename Acc>
void reference(const std::vector<const void*>& srcs, void* dst, std::int64_t count, ReduceOp op) {
  for (std::int64_t i = 0; i < count; ++i) {
    auto load = [&](std::size_t k) -> Acc {
      if constexpr (std::is_same_v<T, bf16>) return to_f32(static_cast<const bf16*>(srcs[k])[i]);
      else return static_cast<const T*>(srcs[k])[i];
    };
    Acc acc = load(0);
    for (std::size_t k = 1; k < srcs.size(); ++k) {
      const Acc x = load(k);
      acc = op == ReduceOp::max ? (x > acc ? x : acc) : acc + x;
    }
    if constexpr (std::is_floating_point_v<Acc>)
      if (op == ReduceOp::mean) acc /= static_cast<float>(srcs.size());
    if constexpr (std::is_same_v<T, bf16>) static_cast<bf16*>(dst)[i] = to_bf16(acc);
    else static_cast<T*>(dst)[i] = acc;
  }
}

void reference(DType dtype, const std::vector<const void*>& srcs, void* dst, std::int64_t count, ReduceOp op) {
  switch (dtype) {
    case DType::f32: return reference<float, float>(srcs, dst, count, op);
    case DType::bf16: return reference<bf16, float>(srcs, dst, count, op);
    case DType::i32: return reference<std::int32_t, std::int32_t>(srcs, dst, count, op);
    case DType::i64: return reference<std::int64_t, std::int64_t>(srcs, dst, count, op);
  }
}

std::string first_difference(const void* a, const void* b, std::size_t bytes) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (std::size_t i = 0; i < bytes; ++i)
    if (x[i] != y[i]) return "byte " + std::to_string(i) + " of " + std::to_string(bytes);
  return "";
}

}  // namespace

TEST_CASE("shm kernels: reductions match a scalar reference bit for bit") {
  const std::vector<std::int64_t> counts = {1, 15, 16, 17, 65, 1000, 16384 + 70, 70001};
  struct Layout {
    std::size_t src_offset, dst_offset, other_dst_offset;  // in elements
  };
  const std::vector<Layout> layouts = {{0, 0, 0}, {3, 5, 5}, {0, 1, 0}};
  for (DType dtype : {DType::f32, DType::bf16, DType::i32, DType::i64}) {
    const std::size_t es = dtype_size(dtype);
    Pool pool(dtype, (70001 + 64) * es);
    for (bool avx512 : implementations())
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
        if (op == ReduceOp::mean && !is_floating(dtype)) continue;
        for (std::size_t n : {1, 2, 3, 5})
          for (std::size_t m : {1, 3})
            for (std::int64_t count : counts)
              for (const Layout& layout : layouts)
                for (bool stream : {false, true})
                  for (bool in_place : {false, true}) {
                    CAPTURE(avx512);
                    CAPTURE(dtype_name(dtype));
                    CAPTURE(name(op));
                    CAPTURE(n);
                    CAPTURE(m);
                    CAPTURE(count);
                    CAPTURE(layout.dst_offset);
                    CAPTURE(layout.other_dst_offset);
                    CAPTURE(stream);
                    CAPTURE(in_place);
                    pool.reset(static_cast<std::size_t>(count + 8) * es);
                    std::vector<const void*> srcs;
                    std::vector<void*> dsts;
                    for (std::size_t k = 0; k < n; ++k) srcs.push_back(pool.source(k).at(layout.src_offset * es));
                    for (std::size_t j = 0; j < m; ++j)
                      dsts.push_back(pool.destination(j).at((j == 0 ? layout.dst_offset : layout.other_dst_offset) * es));
                    if (in_place) dsts[0] = const_cast<void*>(srcs[n - 1]);
                    std::vector<std::byte> want(static_cast<std::size_t>(count) * es);
                    reference(dtype, srcs, want.data(), count, op);
                    ShmKernels kernels(avx512);
                    kernels.reduce(srcs, dsts, count, dtype, op, stream);
                    ShmKernels::store_fence();
                    for (std::size_t j = 0; j < m; ++j) {
                      std::string diff = first_difference(dsts[j], want.data(), want.size());
                      CHECK_MESSAGE(diff.empty(), "destination " << j << ": " << diff);
                    }
                  }
      }
  }
}

TEST_CASE("shm kernels: copies into several destinations") {
  unsigned seed = 100;
  for (bool avx512 : implementations())
    for (std::size_t bytes : {1, 63, 64, 65, 4095, 4096, 4097, 70000, 300001})
      for (std::size_t m : {1, 2, 4})
        for (std::size_t dst_offset : {0, 1, 8})
          for (bool stream : {false, true}) {
            CAPTURE(avx512);
            CAPTURE(bytes);
            CAPTURE(m);
            CAPTURE(dst_offset);
            CAPTURE(stream);
            Bytes src = random_buffer(bytes + 64, DType::i32, seed++);
            std::vector<Bytes> out;
            std::vector<void*> dsts;
            for (std::size_t j = 0; j < m; ++j) {
              out.push_back(random_buffer(bytes + 64, DType::i64, seed++));
              dsts.push_back(out.back().at(j % 2 ? 0 : dst_offset));  // mixed alignments
            }
            ShmKernels(avx512).copy(src.at(3), dsts, bytes, stream);
            ShmKernels::store_fence();
            for (std::size_t j = 0; j < m; ++j) {
              std::string diff = first_difference(dsts[j], src.at(3), bytes);
              CHECK_MESSAGE(diff.empty(), "destination " << j << ": " << diff);
            }
          }
}
