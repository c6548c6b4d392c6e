// Attention on the CUDA backend: over a KV cache (attention.cu), f32 only:
// bf16 raises UnsupportedError, and supports() says so beforehand; and fused
// (flash_attention.cu), bf16 q, k and v on tensor cores.
#include "backends/cuda/attention_kernels.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/flash_attention.hpp"
#include "backends/cuda/require_f32.hpp"

namespace tessera {

void CudaBackend::run_cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                                       const Tensor& positions, const Tensor& out, float scale) {
  require_f32(q, "cached_attention", device());
  const Shape& s = q.shape();
  const CachedAttentionRows rows{.heads = s[1], .queries = s[2], .capacity = keys.shape()[2], .width = s[3],
                                 .rows = s[0] * s[1] * s[2], .scale = scale};
  CudaDeviceGuard guard(gpu_);
  cuda_cached_attention(q.data<float>(), keys.data<float>(), values.data<float>(), positions.data<std::int32_t>(),
                        out.data<float>(), rows, stream_);
}

bool CudaBackend::supports_fused_attention(DType in, DType out, std::int64_t width) const {
  return in == DType::bf16 && (out == DType::f32 || out == DType::bf16) && flash_attention_width_supported(width);
}

void CudaBackend::run_fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                      float scale, bool causal) {
  const Shape& s = q.shape();
  const int rank = s.rank();
  const FlashAttentionShape shape{.heads = s.numel() / (s[rank - 2] * s[rank - 1]),
                                  .queries = s[rank - 2],
                                  .keys = k.shape()[rank - 2],
                                  .width = s[rank - 1],
                                  .scale = scale,
                                  .causal = causal};
  CudaDeviceGuard guard(gpu_);
  cuda_flash_attention(q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(), out.dtype() == DType::bf16, shape,
                       stream_);
}

}  // namespace tessera
