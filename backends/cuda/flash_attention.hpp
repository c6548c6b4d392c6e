// Host-side launcher of the fused attention kernel (flash_attention.cu):
// out = softmax(scale * q k^T) v with bf16 products and f32 sums, the scores
// never in memory. q, k, v are bf16, or f32 rounded to bf16 as they are
// read; out is f32 or bf16. Enqueues on `stream` and checks the launch; does
// not synchronize.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera {

// Where row t of head h of batch b starts, in elements: b * batch + h * head + t * row.
struct FlashOperand {
  void* data = nullptr;
  bool f32 = false;  // f32 elements (q, k, v: rounded to bf16 as read); else bf16
  std::int64_t batch = 0, head = 0, row = 0;
};

struct FlashAttentionShape {
  std::int64_t batches = 1, heads = 1;  // B x H independent attentions
  std::int64_t queries = 0, keys = 0;   // Tq, Tk
  std::int64_t width = 0;               // K, a head's width: see flash_attention_width_supported
  float scale = 1.0f;
  bool causal = false;                  // query i sees keys 0 .. i + Tk - Tq
};

// Each pass has two kernels while the second is proven on GPUs:
//   wmma (flash_attention.cu, flash_attention_backward.cu): WMMA fragments
//     stored through shared memory between the products and the softmax;
//     verified on an H200;
//   mma (flash_attention_mma.cu, flash_attention_backward_mma.cu):
//     FlashAttention-2's, the products, weights and sums in registers
//     (mma.sync). Not yet run on a GPU: CudaBackend takes them only when asked
//     (TESSERA_CUDA_FLASH_FORWARD=mma, TESSERA_CUDA_FLASH_BACKWARD=mma).
enum class FlashKernel { wmma, mma };

// Whether the kernel is compiled for heads of `width` (32, 64, 128) and its
// shared memory for them fits a block whose opt-in limit is `shared_limit`
// bytes (cudaDevAttrMaxSharedMemoryPerBlockOptin; the wmma kernel takes 110
// KiB for 128-wide heads: more than an RTX 30xx or 40xx block may have).
bool flash_attention_supported(std::int64_t width, int shared_limit, FlashKernel kernel = FlashKernel::wmma);

// Every 16-byte word of q, k, v and out must be aligned: their rows start at
// multiples of 8 elements. `logsumexp`, where not null, gets each query row's
// log of its sum of exp(scale * score) (f32 [batches * heads, queries]; -inf
// where a row sees no key): what the backward pass recomputes weights from.
void cuda_flash_attention(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v, FlashOperand out,
                          const FlashAttentionShape& shape, cudaStream_t stream, float* logsumexp = nullptr,
                          FlashKernel kernel = FlashKernel::wmma);
// The mma kernel's own, which cuda_flash_attention calls for FlashKernel::mma.
bool flash_attention_mma_supported(std::int64_t width, int shared_limit);
void cuda_flash_attention_mma(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v,
                              const FlashOperand& out, const FlashAttentionShape& shape, cudaStream_t stream,
                              float* logsumexp);

// FlashAttention's backward pass (flash_attention_backward.cu) for bf16 q, k,
// v and dout, out f32 or bf16 as the forward pass wrote it with
// `logsumexp`: dq, dk, dv (f32 or bf16). `delta` is scratch of one f32 per
// query row (batches * heads * queries). Whether heads of `width` fit, as
// flash_attention_supported.
bool flash_attention_backward_supported(std::int64_t width, int shared_limit,
                                        FlashKernel kernel = FlashKernel::wmma);
struct FlashGradients {
  FlashOperand dq, dk, dv;
};
void cuda_flash_attention_backward(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v,
                                   const FlashOperand& out, const FlashOperand& dout, const float* logsumexp,
                                   float* delta, const FlashGradients& grads, const FlashAttentionShape& shape,
                                   cudaStream_t stream, FlashKernel kernel = FlashKernel::wmma);
// The mma kernels' own, which cuda_flash_attention_backward calls for FlashKernel::mma.
bool flash_attention_backward_mma_supported(std::int64_t width, int shared_limit);
void cuda_flash_attention_backward_mma(const FlashOperand& q, const FlashOperand& k, const FlashOperand& v,
                                       const FlashOperand& out, const FlashOperand& dout, const float* logsumexp,
                                       float* delta, const FlashGradients& grads, const FlashAttentionShape& shape,
                                       cudaStream_t stream);

}  // namespace tessera
