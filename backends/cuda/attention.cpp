// Attention over a KV cache on the CUDA backend (attention.cu), f32 only: bf16
// raises UnsupportedError, and supports() says so beforehand.
#include "backends/cuda/attention_kernels.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
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

}  // namespace tessera
