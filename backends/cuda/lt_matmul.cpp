// cuBLASLt products with their epilogue (lt_matmul.hpp).
#include "backends/cuda/lt_matmul.hpp"

#include <functional>

#include "backends/cuda/cuda_check.hpp"

namespace tessera {

// The descriptors of one GEMM and the algorithm cuBLASLt's heuristic chose
// for it (`found` false: none; the plan is kept, so that is asked once).
struct LtPlans::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

LtPlans::LtPlans(cublasLtHandle_t handle, void* workspace, std::size_t workspace_bytes)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

LtPlans::~LtPlans() = default;

namespace {

// A column-major matrix as stored: rows x cols with leading dimension ld
// (op() is the product descriptor's: a transposed operand is stored cols x rows).
cublasLtMatrixLayout_t layout(cudaDataType type, bool transposed, std::int64_t rows, std::int64_t cols,
                              std::int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(transposed ? cols : rows),
                                                  static_cast<std::uint64_t>(transposed ? rows : cols), ld));
  return l;
}

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

template <typename T>
void prefer(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value));
}

// The largest power of two up to 256 that divides the address: the
// alignment an algorithm may count on.
std::uint32_t alignment(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::uint32_t bytes = 256;
  while (bytes > 1 && address % bytes != 0) bytes /= 2;
  return bytes;
}

// Owns a preference descriptor for the heuristic's one call.
struct Preference {
  cublasLtMatmulPreference_t handle = nullptr;
  Preference() { TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&handle)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(handle); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
};

}  // namespace

std::size_t LtPlanKeyHash::operator()(const LtPlanKey& key) const noexcept {
  std::size_t h = 0;
  for (std::int64_t f : key.fields) h = h * 1000003u ^ std::hash<std::int64_t>{}(f);
  return h;
}

LtPlans::Plan* LtPlans::plan_for(const LtProduct& p) {
  const ColumnMajorGemm& g = p.gemm;
  const LtPlanKey key{{g.m, g.n, g.k, g.transa, g.transb, g.lda, g.ldb, g.ldc, p.in, p.out, p.epilogue,
                       alignment(p.a), alignment(p.b), alignment(p.c), alignment(p.bias)}};
  auto& slot = plans_[key];
  if (slot) return slot.get();
  auto plan = std::make_unique<Plan>();
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, g.transa ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, g.transb ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
  // The heuristic reads the bias pointer's alignment: a real one, as each run sets it again.
  if (p.bias != nullptr) set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  plan->a = layout(p.in, g.transa, g.m, g.k, g.lda);
  plan->b = layout(p.in, g.transb, g.k, g.n, g.ldb);
  plan->c = layout(p.out, false, g.m, g.n, g.ldc);

  Preference preference;
  prefer(preference.handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{workspace_bytes_});
  prefer(preference.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(p.a));
  prefer(preference.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(p.b));
  prefer(preference.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(p.c));
  prefer(preference.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(p.c));
  // Split sums in f32, never in a bf16 output's dtype.
  prefer(preference.handle, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
         std::uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE});
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c,
                                                               plan->c, preference.handle, 1, &result, &found);
  plan->found = status == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan->found) plan->algo = result.algo;
  slot = std::move(plan);
  return slot.get();
}

bool LtPlans::run(const LtProduct& p, cudaStream_t stream) {
  const ColumnMajorGemm& g = p.gemm;
  if (g.batch_count != 1 || g.calls.size() != 1 || g.zero_k()) return false;
  if (p.bias != nullptr && alignment(p.bias) < 16) return false;
  Plan* plan = plan_for(p);
  if (!plan->found) return false;
  if (p.bias != nullptr) set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  const float beta = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(handle_, plan->desc, &p.alpha, p.a, plan->a, p.b, plan->b, &beta,
                                               p.c, plan->c, p.c, plan->c, &plan->algo, workspace_,
                                               workspace_bytes_, stream);
  // Refused before anything was enqueued: the cuBLAS path runs instead, from now on.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
    plan->found = false;
    return false;
  }
  TESSERA_CUBLAS_CHECK(status);
  ++products_;
  return true;
}

}  // namespace tessera
