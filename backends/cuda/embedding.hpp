// embedding, embedding_block, one_hot and embedding_backward as host/device
// element functions: embedding.cu launches them over every output element
// (the backward over every dout element), and tests run them on the host
// against the CPU backend (backends/cpu/embedding.cpp).
//
// Ids are checked first, by IdCheck over every id: a kernel cannot throw, so an
// id outside [0, vocab) lowers a device-side slot (initialised to all ones) to
// its position with atomicMin; the host copies the slot back, and when it was
// written, copies that id back and throws the CPU backend's ShapeError (the
// first bad position, as the CPU reports). The ops run only after the check,
// so, as on the CPU, an error leaves the output untouched.
#pragma once

#include <cstdint>

#include "backends/host_device.hpp"

namespace tessera {

inline constexpr unsigned long long kNoBadId = ~0ull;

struct IdCheck {
  std::int64_t vocab = 0;

  template <typename Id>
  TESSERA_HOST_DEVICE void operator()(const Id* ids, unsigned long long* first_bad,
                                      std::int64_t i) const {
    const std::int64_t id = ids[i];
    if (id >= 0 && id < vocab) return;
    const auto position = static_cast<unsigned long long>(i);
#if defined(__CUDA_ARCH__)
    atomicMin(first_bad, position);
#else
    if (position < *first_bad) *first_bad = position;
#endif
  }
};

// out[p, j] = table[ids[p] - first_row, j] where that row lies in the table's
// `block` rows, else 0 (embedding: first_row 0, block the table's rows; for
// embedding_block the rows of other devices, which they add in). Any dtype:
// elements move as opaque words.
struct EmbeddingGather {
  std::int64_t dim = 0, first_row = 0, block = 0;
  std::int64_t count = 0;  // ids * dim

  template <typename Word, typename Id>
  TESSERA_HOST_DEVICE void operator()(const Word* table, const Id* ids, Word* out,
                                      std::int64_t i) const {
    const std::int64_t p = i / dim, j = i % dim;
    const std::int64_t local = static_cast<std::int64_t>(ids[p]) - first_row;
    out[i] = local >= 0 && local < block ? table[local * dim + j] : Word{0};
  }
};

// out[p, c] = one if ids[p] == c else 0; `one` is 1.0 in out's dtype (the f32
// or bf16 bits).
struct OneHot {
  std::int64_t classes = 0;
  std::int64_t count = 0;  // ids * classes

  template <typename Word, typename Id>
  TESSERA_HOST_DEVICE void operator()(const Id* ids, Word* out, Word one, std::int64_t i) const {
    const std::int64_t p = i / classes, c = i % classes;
    out[i] = static_cast<std::int64_t>(ids[p]) == c ? one : Word{0};
  }
};

// dtable[ids[p], j] += dout[p, j] (f32). On the GPU with atomicAdd: ids that
// repeat add into one row in whatever order the threads run, not the CPU's
// order of positions, so results differ from the CPU's in the last bits (tests
// compare with a tolerance) and from run to run.
struct EmbeddingScatterAdd {
  std::int64_t dim = 0;
  std::int64_t count = 0;  // ids * dim

  template <typename Id>
  TESSERA_HOST_DEVICE void operator()(const Id* ids, const float* dout, float* dtable,
                                      std::int64_t i) const {
    const std::int64_t p = i / dim, j = i % dim;
    float* at = dtable + static_cast<std::int64_t>(ids[p]) * dim + j;
#if defined(__CUDA_ARCH__)
    atomicAdd(at, dout[i]);
#else
    *at += dout[i];
#endif
  }
};

}  // namespace tessera
