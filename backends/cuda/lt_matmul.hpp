// A matmul whose bias (and ReLU) cuBLASLt adds as the GEMM writes its output
// (CUBLASLT_EPILOGUE_BIAS, _RELU_BIAS, _RELU), instead of a second pass over
// the output in memory after cublasGemmEx (matmul.cpp). The f32 sum is
// rounded once, after the bias.
//
// cuBLASLt needs a descriptor of the product and of each operand, and an
// algorithm chosen by its heuristic for the operands' alignment (its default
// assumes 256 bytes; the executor's arena gives 64, a view of rows less):
// made once per shape, dtype, epilogue and alignment (LtPlans, one per
// backend, used by the backend's one thread), and reused. Where cuBLASLt
// has no algorithm for a case (a batched product, a bias on less than 16
// bytes), `run` says so and the caller takes the cuBLAS path. Split sums are
// kept in f32 (no reduction in the output's dtype).
//
// Not yet run on a GPU: CudaBackend takes this path only when
// TESSERA_CUDA_MATMUL_EPILOGUE=cublaslt asks (cuda_backend.hpp).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "backends/cuda/gemm_mapping.hpp"

namespace tessera {

// One GEMM of a row-major matmul (gemm_mapping.hpp's arguments) with its epilogue.
struct LtProduct {
  const ColumnMajorGemm& gemm;
  cudaDataType in, out;  // operands', output's (and the bias's: cuBLASLt takes it in the output's dtype)
  cublasLtEpilogue_t epilogue;
  const void *a, *b;     // cuBLAS's A and B (Tessera's b and a)
  void* c;
  const void* bias;      // null for CUBLASLT_EPILOGUE_RELU
  float alpha;
};

// What a plan depends on: the GEMM's sizes, transposes and leading
// dimensions, the dtypes, the epilogue and each operand's alignment.
struct LtPlanKey {
  std::array<std::int64_t, 15> fields{};
  bool operator==(const LtPlanKey&) const = default;
};
struct LtPlanKeyHash {
  std::size_t operator()(const LtPlanKey& key) const noexcept;
};

class LtPlans {
 public:
  LtPlans(cublasLtHandle_t handle, void* workspace, std::size_t workspace_bytes);
  ~LtPlans();
  LtPlans(const LtPlans&) = delete;
  LtPlans& operator=(const LtPlans&) = delete;

  // Enqueues the product on `stream`; false (nothing enqueued) where cuBLASLt
  // has no algorithm for it. Throws on a failed cuBLASLt call.
  bool run(const LtProduct& p, cudaStream_t stream);

  // Products `run` took: a test's evidence that the path ran.
  std::int64_t products() const { return products_; }

 private:
  struct Plan;
  Plan* plan_for(const LtProduct& p);

  cublasLtHandle_t handle_;
  void* workspace_;
  std::size_t workspace_bytes_;
  std::unordered_map<LtPlanKey, std::unique_ptr<Plan>, LtPlanKeyHash> plans_;
  std::int64_t products_ = 0;
};

}  // namespace tessera
