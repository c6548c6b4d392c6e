// Attention on the CUDA backend: over a KV cache (attention.cu), f32 only:
// bf16 raises UnsupportedError, and supports() says so beforehand; and fused
// (flash_attention.cu), bf16 q, k and v on tensor cores, by the kernels the
// backend was asked for (flash_forward, flash_backward).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

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

bool CudaBackend::supports_fused_attention(DType stored, DType multiply, DType out, std::int64_t width) const {
  return multiply == DType::bf16 && (stored == DType::bf16 || stored == DType::f32) &&
         (out == DType::f32 || out == DType::bf16) && flash_attention_supported(width, shared_limit_, flash_forward());
}

namespace {

// A fused attention operand's strides, from its shape: [..., T, K] (the
// leading axes' product as heads of one batch; [B, H, T, K] as B batches of
// H heads), or [B, T, H, K] when `tokens_first`.
FlashOperand flash_operand(const Tensor& t, bool tokens_first) {
  const Shape& s = t.shape();
  const int rank = s.rank();
  FlashOperand o{.data = t.raw_data(), .f32 = t.dtype() == DType::f32};
  if (tokens_first) {  // [B, T, H, K]
    o.batch = s[1] * s[2] * s[3];
    o.head = s[3];
    o.row = s[2] * s[3];
  } else {
    o.head = s[rank - 2] * s[rank - 1];
    o.batch = rank == 4 ? s[1] * o.head : 0;
    o.row = s[rank - 1];
  }
  return o;
}

// The kernels' sizes for q [..., Tq, K] and k [..., Tk, K], or both [B, T, H, K] (tokens first).
FlashAttentionShape attention_shape(const Tensor& q, const Tensor& k, const AttentionArgs& args) {
  const Shape& qs = q.shape();
  const int rank = qs.rank();
  FlashAttentionShape shape{.width = qs[rank - 1], .scale = args.scale, .causal = args.causal};
  if (args.tokens_first) {
    shape.batches = qs[0];
    shape.heads = qs[2];
    shape.queries = qs[1];
    shape.keys = k.shape()[1];
    return shape;
  }
  shape.queries = qs[rank - 2];
  shape.keys = k.shape()[rank - 2];
  if (rank == 4) {
    shape.batches = qs[0];
    shape.heads = qs[1];
  } else {
    for (int i = 0; i < rank - 2; ++i) shape.heads *= qs[i];
  }
  return shape;
}

// The flash kernels move 16-byte words: a tensor viewed at another offset is
// refused before it could make a misaligned access that poisons the context.
void check_aligned(const char* op, std::initializer_list<const Tensor*> tensors, Device device) {
  for (const Tensor* t : tensors)
    if (reinterpret_cast<std::uintptr_t>(t->raw_data()) % 16 != 0)
      throw UnsupportedError(std::string(op) + ": " + t->describe() + " does not start on a 16-byte boundary on " +
                             device.str());
}

}  // namespace

FlashKernel CudaBackend::flash_forward() const { return mma_forward_ ? FlashKernel::mma : FlashKernel::wmma; }
FlashKernel CudaBackend::flash_backward() const { return mma_backward_ ? FlashKernel::mma : FlashKernel::wmma; }

bool CudaBackend::prefers_attention_op(DType operands, DType out, std::int64_t width) const {
  return operands == DType::bf16 && (out == DType::f32 || out == DType::bf16) &&
         flash_attention_supported(width, shared_limit_, flash_forward()) &&
         flash_attention_backward_supported(width, shared_limit_, flash_backward());
}

void CudaBackend::run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& logsumexp, const AttentionArgs& args) {
  if (!prefers_attention_op(q.dtype(), out.dtype(), q.shape()[q.rank() - 1]))
    throw UnsupportedError("attention: the cuda backend on " + device().str() + " has no kernel for " + q.describe() +
                           " into " + out.describe() + " (bf16 q, k, v; heads 32, 64 or 128 wide, where the kernels' shared memory fits a block of this GPU)");
  check_aligned("attention", {&q, &k, &v, &out}, device());
  const bool t = args.tokens_first;
  CudaDeviceGuard guard(gpu_);
  cuda_flash_attention(flash_operand(q, t), flash_operand(k, t), flash_operand(v, t), flash_operand(out, t),
                       attention_shape(q, k, args), stream_, logsumexp.data<float>(), flash_forward());
}

void CudaBackend::run_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& logsumexp, const Tensor& dout, const Tensor& dq,
                                         const Tensor& dk, const Tensor& dv, const AttentionArgs& args) {
  if (!prefers_attention_op(q.dtype(), out.dtype(), q.shape()[q.rank() - 1]))
    throw UnsupportedError("attention backward: the cuda backend on " + device().str() + " has no kernel for " +
                           q.describe() + " into " + out.describe() + " (bf16 q, k, v; heads 32, 64 or 128 wide, where the kernels' shared memory fits a block of this GPU)");
  check_aligned("attention backward", {&q, &k, &v, &out, &dout, &dq, &dk, &dv}, device());
  const bool t = args.tokens_first;
  CudaDeviceGuard guard(gpu_);
  cuda_flash_attention_backward(flash_operand(q, t), flash_operand(k, t), flash_operand(v, t), flash_operand(out, t),
                                flash_operand(dout, t), logsumexp.data<float>(),
                                attention_rows_scratch(logsumexp.numel()),
                                {flash_operand(dq, t), flash_operand(dk, t), flash_operand(dv, t)},
                                attention_shape(q, k, args), stream_, flash_backward());
}

// Kernels on this backend's one stream run in order, so one scratch serves every call.
float* CudaBackend::attention_rows_scratch(std::int64_t floats) {
  const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(floats, 1)) * sizeof(float);
  if (!attention_rows_scratch_ || attention_rows_scratch_->bytes() < bytes)
    attention_rows_scratch_ = std::make_shared<Buffer>(allocator_, bytes);
  return static_cast<float*>(attention_rows_scratch_->data());
}

void CudaBackend::run_fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                      const FusedAttentionArgs& args) {
  // The heads-first shapes (Backend::fused_attention checked them, and the width).
  check_aligned("fused_attention", {&q, &k, &v, &out}, device());
  const Shape& qs = q.shape();
  const int rank = qs.rank();
  const auto axis = [&](const Tensor& t, bool tokens_first, int heads_first_axis) {
    if (!tokens_first) return t.shape()[heads_first_axis];
    static constexpr int kTokensFirst[] = {0, 2, 1, 3};  // [B, T, H, K] axis of each [B, H, T, K] axis
    return t.shape()[kTokensFirst[heads_first_axis]];
  };
  FlashAttentionShape shape{.queries = axis(q, args.q_tokens_first, rank - 2),
                            .keys = axis(k, args.k_tokens_first, rank - 2),
                            .width = qs[rank - 1],
                            .scale = args.scale,
                            .causal = args.causal};
  if (rank == 4) {
    shape.batches = qs[0];
    shape.heads = axis(q, args.q_tokens_first, 1);
  } else {
    for (int i = 0; i < rank - 2; ++i) shape.heads *= qs[i];
  }
  CudaDeviceGuard guard(gpu_);
  cuda_flash_attention(flash_operand(q, args.q_tokens_first), flash_operand(k, args.k_tokens_first),
                       flash_operand(v, args.v_tokens_first), flash_operand(out, args.out_tokens_first), shape,
                       stream_, nullptr, flash_forward());
}

}  // namespace tessera
