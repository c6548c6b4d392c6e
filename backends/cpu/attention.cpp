// Attention over a KV cache (Backend::cached_attention): each query row reads
// the cache rows its sequence has filled and no others, in one pass for the
// scores and one for the weighted values. A decode step is bound by reading
// the cache, so what counts is reading only those rows, once each.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backends/cpu/parallel_for.hpp"
#include "backends/cpu/cpu_backend.hpp"

namespace tessera {
namespace {

// out = softmax_j(scale * q . keys[j]) values[j] over j < n, each row of keys
// and values `width` floats; `scores` holds n floats. The order of every sum
// is fixed for a machine (the dot product's in vector lanes, the sums over j
// in index order), so its runs repeat their bits.
__attribute__((target_clones("avx512f", "avx2", "default")))
void attend_row(const float* __restrict q, const float* __restrict keys, const float* __restrict values,
                float* __restrict out, float* __restrict scores, std::int64_t n, std::int64_t width, float scale) {
  float max = -INFINITY;
  for (std::int64_t j = 0; j < n; ++j) {
    const float* key = keys + j * width;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t i = 0; i < width; ++i) dot += q[i] * key[i];
    scores[j] = dot * scale;
    max = std::max(max, scores[j]);
  }
  float sum = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) {
    scores[j] = std::exp(scores[j] - max);
    sum += scores[j];
  }
  std::fill(out, out + width, 0.0f);
  for (std::int64_t j = 0; j < n; ++j) {
    const float weight = scores[j];
    const float* value = values + j * width;
    for (std::int64_t i = 0; i < width; ++i) out[i] += weight * value[i];
  }
  const float inverse = 1.0f / sum;
  for (std::int64_t i = 0; i < width; ++i) out[i] *= inverse;
}

}  // namespace

void CpuBackend::run_cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                                      const Tensor& positions, const Tensor& out, float scale) {
  const Shape& s = q.shape();
  const std::int64_t sequences = s[0], heads = s[1], queries = s[2], width = s[3], capacity = keys.shape()[2];
  const std::int32_t* at = positions.data<std::int32_t>();
  for (std::int64_t b = 0; b < sequences; ++b)  // every position first: an error computes nothing
    if (at[b] < 0 || at[b] + queries > capacity)
      throw ShapeError("cached_attention: sequence " + std::to_string(b) + " has " + std::to_string(queries) +
                       " queries at position " + std::to_string(at[b]) + " of a cache of " + std::to_string(capacity));
  const std::int64_t rows = sequences * heads * queries;
  if (rows == 0 || width == 0) return;
  KernelScope scope(threads());
  // One row of scores per thread, kept by the backend: nothing is allocated per step.
  float* scores = scratch_tensor("cached_attention", Shape{threads(), capacity}, DType::f32).data<float>();
  const float* query = q.data<float>();
  const float* key = keys.data<float>();
  const float* value = values.data<float>();
  float* result = out.data<float>();
  parallel_for(rows, threads() > 1, [&](std::int64_t row) {
    const std::int64_t sequence_head = row / queries, t = row % queries;
    const std::int64_t cache = sequence_head * capacity * width;
    attend_row(query + row * width, key + cache, value + cache, result + row * width,
               scores + static_cast<std::int64_t>(omp_get_thread_num()) * capacity, at[sequence_head / heads] + t + 1,
               width, scale);
  });
}

}  // namespace tessera
