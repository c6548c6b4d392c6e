// The CUDA backend: one object per GPU, kernels enqueued on one stream.
//
// Each CudaBackend owns a non-blocking cudaStream_t on its device, a cuBLAS
// handle bound to that stream and a cuBLASLt handle (cuBLASLt takes the stream
// per call), all released by the destructor. Kernels are asynchronous: a copy
// into host memory, and synchronize(), wait for the stream. Matmul goes through
// cuBLAS with the row-major → column-major mapping of gemm_mapping.hpp; unary
// and binary ops, reductions, direct 2-D convolution and pooling, softmax,
// layer norm, random fills, dropout and the optimizer updates (f32), the
// data-movement ops broadcast_to, transpose, slice and concat (any dtype),
// cast (f32, bf16, i32, i64), embedding and embedding_block (any dtype),
// one_hot (f32, bf16) and embedding_backward (f32) run the backend's own
// kernels (elementwise.cu, reduce.cu, conv_pool.cu, softmax.cu, layer_norm.cu,
// random.cu, optimizer.cu, layout.cu, cast.cu, embedding.cu).
//
// This header has no CUDA includes (the CUDA handle types are forward
// declared), so the registry and the tests compile against it as plain C++.
// Only compiled when the build has CUDA (TESSERA_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cuda/cuda_allocator.hpp"

struct CUstream_st;      // cudaStream_t is CUstream_st*
struct cublasContext;    // cublasHandle_t is cublasContext*
struct cublasLtContext;  // cublasLtHandle_t is cublasLtContext*

namespace tessera {

enum class FlashKernel;  // flash_attention.hpp
class LtPlans;            // lt_matmul.hpp
struct ColumnMajorGemm;   // gemm_mapping.hpp

class CudaBackend final : public Backend {
 public:
  // Creates the stream and library handles on GPU `gpu` for cuda device
  // `device` (its index is the GPU's when the device has the GPU to itself),
  // which shares the GPU with `shares` - 1 other logical devices: its
  // allocator then allows it 1/shares of the GPU's memory. Throws
  // DeviceError for a non-cuda device or a GPU that does not exist, Error
  // when CUDA fails.
  CudaBackend(Device device, int gpu, int shares = 1);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  Allocator& allocator() override { return allocator_; }
  bool supports(OpKind kind, DType dtype) const override;
  // bf16 products of bf16 (or f32, rounded) q, k, v into f32 or bf16, heads 32, 64 or 128 wide
  // (flash_attention.cu).
  bool supports_fused_attention(DType stored, DType multiply, DType out, std::int64_t width) const override;
  // bf16 q, k, v into f32 or bf16, heads 32, 64 or 128 wide: FlashAttention's
  // forward and backward kernels (flash_attention.cu, flash_attention_backward.cu).
  bool prefers_attention_op(DType operands, DType out, std::int64_t width) const override;
  void synchronize() override;  // cudaStreamSynchronize on this backend's stream
  std::unique_ptr<OpTimer> make_op_timer() override;  // events on the stream (cuda_op_timer.hpp)

  int gpu() const { return gpu_; }  // the CUDA ordinal this device runs on
  CUstream_st* stream() const { return stream_; }
  cublasContext* cublas() const { return cublas_; }
  cublasLtContext* cublas_lt() const { return cublas_lt_; }
  // Matmuls whose bias or ReLU cuBLASLt's epilogue added (lt_matmul.hpp): a test's evidence.
  std::int64_t lt_epilogue_products() const;

 protected:
  void run_copy(const Tensor& src, const Tensor& dst) override;
  void run_fill(const Tensor& out, double value) override;
  void run_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                  const MatmulArgs& args) override;
  // conv_pool.cpp
  void run_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                          const Conv2dArgs& args) override;
  void run_conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                const Conv2dArgs& args) override;
  void run_conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                   const Tensor* db, const Conv2dArgs& args) override;
  void run_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dArgs& args) override;
  void run_pool2d_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                           const Pool2dArgs& args) override;
  // elementwise.cpp
  void run_unary(UnaryOp op, const Tensor& x, const Tensor& y) override;
  void run_unary_backward(UnaryOp op, const Tensor& x, const Tensor& dy, const Tensor& dx) override;
  void run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  // reduce.cpp
  void run_reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;
  // layout.cpp
  void run_broadcast_to(const Tensor& x, const Tensor& out) override;
  void run_transpose(const Tensor& x, const Tensor& out, const std::vector<int>& perm) override;
  void run_concat(const std::vector<Tensor>& inputs, const Tensor& out, int axis) override;
  void run_slice(const Tensor& x, const Tensor& out, int axis, std::int64_t start) override;
  // cast.cpp
  void run_cast(const Tensor& x, const Tensor& out) override;
  // embedding.cpp
  void run_embedding(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void run_embedding_block(const Tensor& table, const Tensor& ids, const Tensor& out,
                           std::int64_t first_row, std::int64_t vocab) override;
  void run_embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) override;
  void run_one_hot(const Tensor& ids, const Tensor& out) override;
  // softmax.cpp
  void run_softmax(const Tensor& x, const Tensor& y, int axis, bool log, bool causal) override;
  void run_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, int axis,
                            bool log) override;
  // attention.cpp
  void run_cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values, const Tensor& positions,
                            const Tensor& out, float scale) override;
  void run_fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const FusedAttentionArgs& args) override;
  void run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& logsumexp,
                     const AttentionArgs& args) override;
  void run_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& logsumexp, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, const AttentionArgs& args) override;
  // layer_norm.cpp
  void run_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                      const Tensor& mean, const Tensor& rstd, float epsilon) override;
  void run_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                               const Tensor& dgamma, const Tensor& dbeta) override;
  // random.cpp
  void run_random_uniform(const Tensor& out, std::uint64_t seed, std::uint64_t offset, float low,
                          float high) override;
  void run_random_normal(const Tensor& out, std::uint64_t seed, std::uint64_t offset, float mean,
                         float stddev) override;
  void run_dropout(const Tensor& x, const Tensor& out, float rate, std::uint64_t seed,
                   std::uint64_t offset) override;
  // optimizer.cpp
  void run_moving_average(const Tensor& state, const Tensor& value, float momentum) override;
  void run_cache_write(const Tensor& cache, const Tensor& rows, const Tensor& positions) override;
  void run_sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity,
                      const SgdArgs& args) override;
  void run_adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamArgs& args) override;

 private:
  void release() noexcept;  // destroys whatever handles exist (constructor failure, destructor)
  void ensure_cublas_workspace();  // first matmul: cuBLAS's workspace from allocator_
  float* partials_scratch();        // kReduceScratchFloats for partial sums: reduce, layer norm (reduce.cpp)
  float* attention_rows_scratch(std::int64_t floats);  // one float per query row: attention backward's delta
  Tensor product_scratch(const Shape& shape);  // f32 sums of a matmul whose bf16 out comes after an epilogue
  // matmul.cpp: false where the product's epilogue stays a pass of its own
  bool run_lt_epilogue(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out,
                       const MatmulArgs& args, const ColumnMajorGemm& g);
  FlashKernel flash_forward() const;   // attention.cpp
  FlashKernel flash_backward() const;  // attention.cpp

  int gpu_;
  CudaAllocator allocator_;
  CUstream_st* stream_ = nullptr;
  cublasContext* cublas_ = nullptr;
  cublasLtContext* cublas_lt_ = nullptr;
  std::shared_ptr<Buffer> cublas_workspace_;  // freed after the handles (member order)
  std::shared_ptr<Buffer> partials_scratch_;
  std::shared_ptr<Buffer> attention_rows_scratch_;
  std::shared_ptr<Buffer> product_scratch_;
  int shared_limit_ = 0;  // a block's opt-in shared memory (bytes): which flash kernels fit
  // The flash attention kernels of each pass (flash_attention.hpp): the wmma ones, or,
  // where TESSERA_CUDA_FLASH_FORWARD=mma (_BACKWARD=mma) asks, the mma ones, until a
  // GPU has proven them.
  bool mma_forward_ = false, mma_backward_ = false;
  // Bias and ReLU as cuBLASLt's epilogue (lt_matmul.hpp), where
  // TESSERA_CUDA_MATMUL_EPILOGUE=cublaslt asks, until a GPU has proven it.
  bool lt_epilogue_ = false;
  std::unique_ptr<LtPlans> lt_plans_;  // made at the first such product; released before the handles
};

// GPUs the CUDA runtime reports; 0 when there is no driver or no device.
int cuda_runtime_device_count();
// The backend of cuda device `device` on GPU `gpu`, one of `shares` logical
// devices of it (registry.hpp; the index is checked there).
std::unique_ptr<Backend> make_cuda_backend(Device device, int gpu, int shares);

}  // namespace tessera
