// An 8 x 8 block of floats transposed in AVX2 registers, for the CPU
// kernels that copy a matrix's rows into columns (matmul.cpp's transposed
// weights, sgemm_avx2.cpp's panels).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tessera {

// out + j * out_stride = column j of the 8 x 8 floats at rows[i] + offset,
// stored in order of j (a store may run past its 8 columns' stride into the
// next one's place, which the next store then fills).
[[gnu::target("avx2")]] inline void transpose_8x8(const float* const* rows, std::int64_t offset, float* out,
                                                  std::int64_t out_stride) {
  __m256 v[8], t[8];
  for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(rows[i] + offset);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    v[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    v[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    v[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    v[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(v[i], v[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(v[i], v[i + 4], 0x31);
  }
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + j * out_stride, t[j]);
}

}  // namespace tessera
