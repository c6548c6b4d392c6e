// Matmul on cuBLAS: cublasGemmStridedBatchedEx with the row-major → column-major
// arguments of gemm_mapping.hpp (one call per entry of its `calls`), f32
// accumulation (CUBLAS_COMPUTE_32F: no TF32, results as exact as the CPU's),
// alpha folded into the GEMM; a bias and activation run as one epilogue pass
// over the output (cuda_kernels.cu) after it (in place, or from f32 sums in
// scratch into a bf16 out, so that it is rounded once), or, where the
// backend was asked to (lt_matmul.hpp) and cuBLASLt can, a bias and ReLU as
// cuBLASLt's epilogue of the GEMM itself.
#include <algorithm>

#include <cublas_v2.h>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/gemm_mapping.hpp"
#include "backends/cuda/lt_matmul.hpp"

namespace tessera {
namespace {

// cuBLAS's recommended workspace for Hopper (and enough for Ampere).
constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

cudaDataType cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::i32: return CUDA_R_32I;
    case DType::i64: return CUDA_R_64I;
  }
  return CUDA_R_32F;
}

cublasOperation_t op(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

const char* byte_pointer(const Tensor& t, std::int64_t element_offset) {
  return static_cast<const char*>(t.raw_data()) +
         element_offset * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

}  // namespace

void CudaBackend::ensure_cublas_workspace() {
  if (cublas_workspace_) return;
  auto workspace = std::make_shared<Buffer>(allocator_, kCublasWorkspaceBytes);
  TESSERA_CUBLAS_CHECK(cublasSetWorkspace(cublas_, workspace->data(), workspace->bytes()));
  cublas_workspace_ = std::move(workspace);
}

void CudaBackend::run_matmul(const Tensor& a, const Tensor& b, const Tensor* bias,
                             const Tensor& out, const MatmulArgs& args) {
  // a and b share a floating dtype (checked by Backend::matmul). Supported
  // type combinations of cublasGemmEx with f32 compute: f32·f32 → f32 and
  // bf16·bf16 → bf16 or f32.
  const DType in = a.dtype();
  if (!(out.dtype() == in || (in == DType::bf16 && out.dtype() == DType::f32)))
    throw DTypeError("matmul: " + a.describe() + " @ " + b.describe() + " into " +
                     out.describe() + " is not supported on cuda (f32 @ f32 → f32, bf16 @ bf16 "
                     "→ bf16 or f32)");
  if (bias != nullptr && !is_floating(bias->dtype()))
    throw DTypeError("matmul: bias is " + bias->describe() + ", expected f32 or bf16");

  const ColumnMajorGemm g = column_major_gemm(a.shape(), b.shape(), args);
  if (g.calls.empty()) return;  // empty output
  CudaDeviceGuard guard(gpu_);
  if (run_lt_epilogue(a, b, bias, out, args, g)) return;
  // A bf16 out after a bias or activation: the GEMM's f32 sums into scratch,
  // then the epilogue pass rounds act(sums + bias) once into out.
  const bool epilogue = bias != nullptr || args.activation != Activation::none;
  const Tensor product = out.dtype() == DType::bf16 && epilogue ? product_scratch(out.shape()) : out;
  if (g.zero_k()) {
    // Nothing to contract: op(a) @ op(b) is all zeros (then bias and activation).
    TESSERA_CUDA_CHECK(cudaMemsetAsync(product.raw_data(), 0, product.nbytes(), stream_));
  } else {
    ensure_cublas_workspace();
    const float alpha = args.alpha, beta = 0.0f;
    // swap_operands: cuBLAS's A is b and its B is a (see gemm_mapping.hpp).
    const Tensor& cublas_a = g.swap_operands ? b : a;
    const Tensor& cublas_b = g.swap_operands ? a : b;
    for (const GemmCall& call : g.calls) {
      TESSERA_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
          cublas_, op(g.transa), op(g.transb), g.m, g.n, g.k, &alpha,
          byte_pointer(cublas_a, call.offset_a), cuda_data_type(in), g.lda, g.stride_a,
          byte_pointer(cublas_b, call.offset_b), cuda_data_type(in), g.ldb, g.stride_b, &beta,
          const_cast<char*>(byte_pointer(product, call.offset_c)), cuda_data_type(product.dtype()), g.ldc,
          g.stride_c, g.batch_count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
  if (epilogue) {
    const std::int64_t cols = out.shape()[out.rank() - 1];
    cuda_matmul_epilogue(static_cast<const float*>(product.raw_data()), out.raw_data(), out.dtype() == DType::bf16,
                         bias != nullptr ? bias->raw_data() : nullptr,
                         bias != nullptr && bias->dtype() == DType::bf16, out.numel() / cols, cols,
                         args.activation, stream_);
  }
}

// Kernels on this backend's one stream run in order, so one scratch serves every call.
Tensor CudaBackend::product_scratch(const Shape& shape) {
  const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(shape.numel(), 1)) * sizeof(float);
  if (!product_scratch_ || product_scratch_->bytes() < bytes) product_scratch_ = std::make_shared<Buffer>(allocator_, bytes);
  return Tensor::view(product_scratch_, 0, shape, DType::f32);
}

std::int64_t CudaBackend::lt_epilogue_products() const { return lt_plans_ ? lt_plans_->products() : 0; }

// cuBLASLt's epilogue where asked (TESSERA_CUDA_MATMUL_EPILOGUE=cublaslt):
// a bias in the output's dtype (cuBLASLt's rule; an f32 bias of a bf16 out
// takes the pass), ReLU or neither after it, one unbatched GEMM.
bool CudaBackend::run_lt_epilogue(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                                  const MatmulArgs& args, const ColumnMajorGemm& g) {
  const bool relu = args.activation == Activation::relu;
  if (!lt_epilogue_ || (bias == nullptr && !relu) || (args.activation != Activation::none && !relu) ||
      (bias != nullptr && bias->dtype() != out.dtype()) || g.batch_count != 1 || g.calls.size() != 1 || g.zero_k())
    return false;
  ensure_cublas_workspace();
  if (!lt_plans_) lt_plans_ = std::make_unique<LtPlans>(cublas_lt_, cublas_workspace_->data(), cublas_workspace_->bytes());
  const GemmCall& call = g.calls.front();
  const Tensor& cublas_a = g.swap_operands ? b : a;
  const Tensor& cublas_b = g.swap_operands ? a : b;
  const LtProduct product{.gemm = g,
                          .in = cuda_data_type(a.dtype()),
                          .out = cuda_data_type(out.dtype()),
                          .epilogue = bias == nullptr ? CUBLASLT_EPILOGUE_RELU
                                                      : (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS),
                          .a = byte_pointer(cublas_a, call.offset_a),
                          .b = byte_pointer(cublas_b, call.offset_b),
                          .c = const_cast<char*>(byte_pointer(out, call.offset_c)),
                          .bias = bias != nullptr ? bias->raw_data() : nullptr,
                          .alpha = args.alpha};
  return lt_plans_->run(product, stream_);
}

}  // namespace tessera
