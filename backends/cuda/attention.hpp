// Attention over a KV cache (Backend::cached_attention) as host/device
// functions: tests check them on the host against the CPU backend, and
// attention.cu runs them on the GPU, a warp per query row.
//
// Row r of the B * H * T query rows is query t = r % T of sequence-and-head
// r / T, whose keys and values start at (r / T) * C * K. It sees the cache's
// rows 0 .. positions[b] + t (b = r / T / H), clamped to the cache: a kernel
// cannot throw (the CPU backend reports positions past the cache).
//
// Each pass over a row is split among `lanes` threads (lane l takes cache rows
// j = l, l + lanes, ... and, in the last pass, key-width columns i = l,
// l + lanes, ...) and the kernel combines the lanes' max and sums in a fixed
// tree, so runs repeat bit for bit. The scores live in `scores`, a row of C
// floats per query row in flight (shared memory on the GPU).
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/host_device.hpp"

namespace tessera {

struct CachedAttentionRows {
  std::int64_t heads = 1, queries = 1, capacity = 0, width = 0;  // H, T, C, K
  std::int64_t rows = 0;                                         // B * H * T
  float scale = 1.0f;

  // The cache rows query row `row` sees.
  TESSERA_HOST_DEVICE std::int64_t valid(const std::int32_t* positions, std::int64_t row) const {
    const std::int64_t n = positions[row / queries / heads] + row % queries + 1;
    return n < 0 ? 0 : n > capacity ? capacity : n;
  }
  // Where its sequence-and-head's keys and values start.
  TESSERA_HOST_DEVICE std::int64_t cache_offset(std::int64_t row) const { return row / queries * capacity * width; }
};

// Pass 1: scores[j] = scale * q . keys[j] for this lane's j < n; the max of
// them (-inf where it has none).
TESSERA_HOST_DEVICE inline float cached_attention_scores(const float* q, const float* keys, float* scores,
                                                         const CachedAttentionRows& a, std::int64_t row,
                                                         std::int64_t n, std::int64_t lane, std::int64_t lanes) {
  const float* query = q + row * a.width;
  const float* cache = keys + a.cache_offset(row);
  float max = -INFINITY;
  for (std::int64_t j = lane; j < n; j += lanes) {
    float dot = 0.0f;
    for (std::int64_t i = 0; i < a.width; ++i) dot += query[i] * cache[j * a.width + i];
    scores[j] = dot * a.scale;
    max = max < scores[j] ? scores[j] : max;
  }
  return max;
}

// Pass 2: scores[j] = exp(scores[j] - max) for this lane's j, max being the
// whole row's; their sum.
TESSERA_HOST_DEVICE inline float cached_attention_exp(float* scores, std::int64_t n, float max, std::int64_t lane,
                                                      std::int64_t lanes) {
  float sum = 0.0f;
  for (std::int64_t j = lane; j < n; j += lanes) {
    scores[j] = ::expf(scores[j] - max);
    sum += scores[j];
  }
  return sum;
}

// Pass 3: out[i] = sum_j scores[j] values[j][i] / sum for this lane's
// columns i, j ascending (0 for a row that sees nothing).
TESSERA_HOST_DEVICE inline void cached_attention_write(const float* values, const float* scores, float* out,
                                                       const CachedAttentionRows& a, std::int64_t row,
                                                       std::int64_t n, float sum, std::int64_t lane,
                                                       std::int64_t lanes) {
  const float* cache = values + a.cache_offset(row);
  const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (std::int64_t i = lane; i < a.width; i += lanes) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) acc += scores[j] * cache[j * a.width + i];
    out[row * a.width + i] = acc * inverse;
  }
}

}  // namespace tessera
