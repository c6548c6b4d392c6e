// Host-side launcher of the fused attention kernel (flash_attention.cu):
// out = softmax(scale * q k^T) v, bf16 q, k and v, f32 or bf16 out, the
// scores never in memory. Enqueues on `stream` and checks the launch; does
// not synchronize.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera {

struct FlashAttentionShape {
  std::int64_t heads = 0;    // the leading axes' product: independent attentions
  std::int64_t queries = 0;  // Tq
  std::int64_t keys = 0;     // Tk
  std::int64_t width = 0;    // K, a head's width: one of flash_attention_widths
  float scale = 1.0f;
  bool causal = false;       // query i sees keys 0 .. i + Tk - Tq
};

// The head widths the kernel is compiled for.
bool flash_attention_width_supported(std::int64_t width);

// q, k, v: bf16 [heads, T, width] (q: Tq rows, k and v: Tk), contiguous,
// 16-byte aligned; out: f32 or bf16 (out_bf16) [heads, Tq, width].
void cuda_flash_attention(const void* q, const void* k, const void* v, void* out, bool out_bf16,
                          const FlashAttentionShape& shape, cudaStream_t stream);

}  // namespace tessera
