// GELU in its exact form, gelu(x) = x Φ(x) = 0.5 x (1 + erf(x / √2)), and
// its derivative Φ(x) + x φ(x), on f32 arrays, for the CPU backend.
//
// Why not oneDNN's: on AVX2 its gelu_erf is slow, as an eltwise primitive
// and as a matmul post-op alike. On a Zen 1 (2026-11-28), one thread, 65,536
// elements: oneDNN 2.6's 0.159 ms forward and 0.197 backward, these 0.088 and
// 0.171; its post-op added 0.166 ms to a 0.897 ms product (64x256 by
// 256x1024, a transformer's first feed-forward layer), this pass 0.09.
// With AVX-512 (a Zen 5, 2026-11-28), on the zoo GPT's training step (four
// of each a step, 1M elements each, one thread): oneDNN's forward 1.74-1.85
// ms a step and backward 3.45-4.16, these 0.85-0.88 and 1.68-1.71. Its
// matmul post-op there is at least as fast as the product then this pass (inference
// steps 1% apart on one thread and 3% on two, the post-op ahead), so
// matmuls keep it (matmul_gelu_in_house).
//
// erf is a rational fit x P(x²) / Q(x²) on |x| <= 4 (erf(4) rounds to 1 in
// f32), made by scripts/erf_fit.py: within 4e-7 of erf, relative, evaluated
// in f32. exp (for φ) is 2^n e^r, |r| <= ln2 / 2, with a degree-6 fit of e^r:
// within 1.2e-7, relative. One body in GCC's vector extensions is compiled
// for AVX2 with FMA (8 lanes) and AVX-512 (16). Without AVX2 and FMA, both use
// the C library's.
#pragma once

#include <cstdint>

#include "backends/cpu/vector_math.hpp"
#include "engine/core/dtype.hpp"

namespace tessera {

// y[i] = gelu(x[i]) for i < n; y may be x. Spreads over the calling
// thread's OpenMP team (a KernelScope's threads). A kernel the CPU does not
// run is refused (std::invalid_argument). NaN gives NaN.
void gelu_erf(const float* x, float* y, std::int64_t n, VectorIsa kernel = widest_vector_isa());

// y[i] = gelu(x[i]) rounded to bf16 as a cast rounds it (mixed precision's
// cast fused into the op), a block at a time through the L1 cache and in the
// kernel's vectors, rather than into an f32 tensor that a cast then reads:
// on the zoo GPT's [8, 128, 1024] (a Zen 5, 2026-11-29) 0.49 -> 0.25 ms a
// call on one thread, 0.24 -> 0.12 on two, the same bits.
void gelu_erf_to_bf16(const float* x, bf16* y, std::int64_t n, VectorIsa kernel = widest_vector_isa());

// dx[i] = dy[i] gelu'(x[i]) for i < n; dx may be dy.
void gelu_erf_backward(const float* x, const float* dy, float* dx, std::int64_t n,
                       VectorIsa kernel = widest_vector_isa());

}  // namespace tessera
