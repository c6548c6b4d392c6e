// The CUDA backend's row-major → column-major GEMM mapping and its matmul
// epilogue functions, checked on the CPU (no GPU or CUDA toolkit needed): the
// generated cuBLAS arguments are run through a column-major reference GEMM with
// cuBLAS's sgemm semantics and compared with a plain row-major matmul.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backends/cuda/epilogue.hpp"
#include "backends/cuda/gemm_mapping.hpp"
#include "backends/registry.hpp"
#include "tests/test_util.hpp"

using namespace tessera;
using namespace tessera::test;

namespace {

std::vector<float> random_values(std::int64_t count, unsigned seed) {
  return random_tensor(Shape{count}, seed).to_vector<float>();
}

// cuBLAS sgemm, column-major: C = alpha op(A) op(B) + beta C, op(A) m x k,
// op(B) k x n, C m x n, with leading dimensions; A, B and C start at the given
// element offsets. Out-of-range reads or writes throw (vector::at); `writes`
// counts the stores per element of C.
void reference_sgemm(bool transa, bool transb, std::int64_t m, std::int64_t n, std::int64_t k,
                     float alpha, const std::vector<float>& a, std::int64_t a_offset,
                     std::int64_t lda, const std::vector<float>& b, std::int64_t b_offset,
                     std::int64_t ldb, float beta, std::vector<float>& c, std::int64_t c_offset,
                     std::int64_t ldc, std::vector<int>& writes) {
  // cuBLAS's argument rules.
  REQUIRE(lda >= std::max<std::int64_t>(1, transa ? k : m));
  REQUIRE(ldb >= std::max<std::int64_t>(1, transb ? n : k));
  REQUIRE(ldc >= std::max<std::int64_t>(1, m));
  auto at = [](const std::vector<float>& v, std::int64_t i) { return v.at(static_cast<std::size_t>(i)); };
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t i = 0; i < m; ++i) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        float av = transa ? at(a, a_offset + p + i * lda) : at(a, a_offset + i + p * lda);
        float bv = transb ? at(b, b_offset + j + p * ldb) : at(b, b_offset + p + j * ldb);
        acc += static_cast<double>(av) * bv;
      }
      auto ci = static_cast<std::size_t>(c_offset + i + j * ldc);
      float& cv = c.at(ci);
      cv = static_cast<float>(alpha * acc + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * cv));
      ++writes.at(ci);
    }
}

// Runs the mapped calls like the CUDA backend does and returns the row-major
// output (every element must be written exactly once).
std::vector<float> run_mapping(const ColumnMajorGemm& g, const std::vector<float>& a,
                               const std::vector<float>& b, std::int64_t out_size, float alpha) {
  std::vector<float> c(static_cast<std::size_t>(out_size), std::numeric_limits<float>::quiet_NaN());
  std::vector<int> writes(c.size(), 0);
  if (g.zero_k()) return std::vector<float>(c.size(), 0.0f);  // the backend fills zeros
  const auto& cublas_a = g.swap_operands ? b : a;
  const auto& cublas_b = g.swap_operands ? a : b;
  for (const GemmCall& call : g.calls)
    for (std::int64_t p = 0; p < g.batch_count; ++p)
      reference_sgemm(g.transa, g.transb, g.m, g.n, g.k, alpha, cublas_a,
                      call.offset_a + p * g.stride_a, g.lda, cublas_b,
                      call.offset_b + p * g.stride_b, g.ldb, 0.0f, c,
                      call.offset_c + p * g.stride_c, g.ldc, writes);
  for (std::size_t i = 0; i < writes.size(); ++i)
    if (writes[i] != 1) {
      FAIL_CHECK("output element " << i << " written " << writes[i] << " times");
      break;
    }
  return c;
}

// Plain row-major out = alpha * op(a) @ op(b) with NumPy batch broadcasting,
// written independently of the mapping.
std::vector<float> reference_matmul(const Shape& as, const std::vector<float>& a, const Shape& bs,
                                    const std::vector<float>& b, const MatmulArgs& args) {
  Shape out = matmul_output_shape(as, bs, args);
  const int ra = as.rank(), rb = bs.rank(), ro = out.rank();
  const std::int64_t m = out[ro - 2], n = out[ro - 1];
  const std::int64_t k = args.transpose_a ? as[ra - 2] : as[ra - 1];
  const std::int64_t a_cols = as[ra - 1], b_cols = bs[rb - 1];
  std::int64_t batches = 1;
  for (int i = 0; i < ro - 2; ++i) batches *= out[i];
  // Offset of the matrix of operand `s` for output batch `index` (broadcast axes read index 0).
  auto matrix_offset = [&](const Shape& s, std::int64_t index) {
    const int r = s.rank();
    std::int64_t offset = 0, stride = s[r - 2] * s[r - 1];
    for (int axis = ro - 3; axis >= 0; --axis) {
      std::int64_t i = index % out[axis];
      index /= out[axis];
      int own = axis - (ro - r);
      if (own < 0) continue;
      if (s[own] != 1) offset += i * stride;
      stride *= s[own];
    }
    return offset;
  };
  std::vector<float> c(static_cast<std::size_t>(batches * m * n));
  for (std::int64_t batch = 0; batch < batches; ++batch) {
    std::int64_t ao = matrix_offset(as, batch), bo = matrix_offset(bs, batch);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          float av = args.transpose_a ? a[ao + p * a_cols + i] : a[ao + i * a_cols + p];
          float bv = args.transpose_b ? b[bo + j * b_cols + p] : b[bo + p * b_cols + j];
          acc += static_cast<double>(av) * bv;
        }
        c[static_cast<std::size_t>((batch * m + i) * n + j)] = static_cast<float>(args.alpha * acc);
      }
  }
  return c;
}

// Stored shape of an operand: batch axes, then the matrix (rows x cols),
// swapped when the operand is used transposed.
Shape operand_shape(std::vector<std::int64_t> batch, std::int64_t rows, std::int64_t cols,
                    bool transposed) {
  batch.push_back(transposed ? cols : rows);
  batch.push_back(transposed ? rows : cols);
  return Shape(std::move(batch));
}

// Maps, runs and compares one problem; returns the mapping for further checks.
ColumnMajorGemm check_against_reference(const Shape& as, const Shape& bs, const MatmulArgs& args) {
  CAPTURE(as.str());
  CAPTURE(bs.str());
  CAPTURE(args.transpose_a);
  CAPTURE(args.transpose_b);
  auto a = random_values(as.numel(), 11), b = random_values(bs.numel(), 12);
  ColumnMajorGemm g = column_major_gemm(as, bs, args);
  auto expected = reference_matmul(as, a, bs, b, args);
  auto actual = run_mapping(g, a, b, static_cast<std::int64_t>(expected.size()), args.alpha);
  check_close(actual, expected, 1e-5, 1e-5);
  return g;
}

}  // namespace

TEST_CASE("gemm mapping: rank-2 arguments swap the operands and pass N, M, K") {
  ColumnMajorGemm g = column_major_gemm({7, 13}, {13, 5}, {});
  CHECK(g.swap_operands);
  CHECK_FALSE(g.transa);
  CHECK_FALSE(g.transb);
  CHECK(g.m == 5);  // N
  CHECK(g.n == 7);  // M
  CHECK(g.k == 13);
  CHECK(g.lda == 5);   // b[K, N] read column-major is bᵀ with ld N
  CHECK(g.ldb == 13);  // a[M, K] read column-major is aᵀ with ld K
  CHECK(g.ldc == 5);
  CHECK(g.batch_count == 1);
  REQUIRE(g.calls.size() == 1);
  CHECK(g.calls[0] == GemmCall{});

  // Each operand keeps its transpose flag and its stored row length.
  g = column_major_gemm({13, 7}, {5, 13}, {.transpose_a = true, .transpose_b = true});
  CHECK(g.transa);  // b's flag
  CHECK(g.transb);  // a's flag
  CHECK(g.m == 5);
  CHECK(g.n == 7);
  CHECK(g.k == 13);
  CHECK(g.lda == 13);
  CHECK(g.ldb == 7);
  CHECK(g.ldc == 5);
}

TEST_CASE("gemm mapping matches a row-major reference for every transpose and odd sizes") {
  const std::int64_t sizes[] = {1, 7, 65};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto m : sizes)
        for (auto n : sizes)
          for (auto k : sizes) {
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            MatmulArgs args{.transpose_a = ta, .transpose_b = tb, .alpha = ta ? 0.5f : 1.0f};
            check_against_reference(operand_shape({}, m, k, ta), operand_shape({}, k, n, tb), args);
          }
}

TEST_CASE("gemm mapping: batched and broadcast batch axes") {
  struct Case {
    std::vector<std::int64_t> batch_a, batch_b;
  };
  const Case cases[] = {
      {{4}, {4}},              // equal batches: one strided-batched call
      {{2, 3}, {2, 3}},        // two axes fold into one stride
      {{3}, {}},               // shared weight
      {{}, {5}},               // shared left operand
      {{2, 3}, {3}},           // b broadcast over the outer axis
      {{2, 1}, {1, 3}},        // each broadcast on a different axis: several calls
      {{3, 1}, {3, 4}},        // a broadcast on the inner axis only
      {{1, 4}, {3, 1}},        //
      {{2, 1, 3}, {1, 1}},     // rank 5 against rank 4, with extent-1 axes
      {{1, 2, 1}, {3, 1, 2}},  // mixed, three batch axes
      {{1, 1}, {1}},           // all batch extents 1
  };
  for (const auto& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        MatmulArgs args{.transpose_a = ta, .transpose_b = tb, .alpha = 2.0f};
        check_against_reference(operand_shape(c.batch_a, 3, 7, ta), operand_shape(c.batch_b, 7, 5, tb),
                                args);
      }
}

TEST_CASE("gemm mapping: how batch axes become strided-batched calls") {
  // Equal batches: one call of 6 problems, every operand strided.
  ColumnMajorGemm g = column_major_gemm({2, 3, 4, 6}, {2, 3, 6, 5}, {});
  REQUIRE(g.calls.size() == 1);
  CHECK(g.batch_count == 6);
  CHECK(g.stride_a == 6 * 5);  // cuBLAS's A is b
  CHECK(g.stride_b == 4 * 6);
  CHECK(g.stride_c == 4 * 5);

  // A shared left operand: stride 0 for it.
  g = column_major_gemm({4, 6}, {3, 6, 5}, {});
  REQUIRE(g.calls.size() == 1);
  CHECK(g.batch_count == 3);
  CHECK(g.stride_a == 30);
  CHECK(g.stride_b == 0);

  // a[2, 1] against b[1, 3]: two calls (one per a matrix) of three problems.
  g = column_major_gemm({2, 1, 4, 6}, {1, 3, 6, 5}, {});
  CHECK(g.batch_count == 3);
  CHECK(g.stride_a == 30);
  CHECK(g.stride_b == 0);
  CHECK(g.stride_c == 20);
  REQUIRE(g.calls.size() == 2);
  CHECK(g.calls[0] == GemmCall{0, 0, 0});
  CHECK(g.calls[1] == GemmCall{0, 24, 60});
}

TEST_CASE("gemm mapping folds a shared weight into one GEMM over all rows") {
  // a[2, 3, M, K] @ w[K, N] is a[6 M, K] @ w: one plain GEMM with n = 6 M.
  ColumnMajorGemm g = column_major_gemm({2, 3, 4, 6}, {5, 6}, {.transpose_b = true});
  CHECK(g.batch_count == 1);
  CHECK(g.n == 24);
  CHECK(g.m == 5);
  REQUIRE(g.calls.size() == 1);
  check_against_reference({2, 3, 4, 6}, {6, 5}, {});

  // Not with a transposed a (its rows are not contiguous): six problems.
  g = column_major_gemm({2, 3, 6, 4}, {6, 5}, {.transpose_a = true});
  CHECK(g.batch_count == 6);
  CHECK(g.n == 4);
  CHECK(g.stride_a == 0);
}

TEST_CASE("gemm mapping: empty outputs and an empty contraction") {
  CHECK(column_major_gemm({0, 5}, {5, 3}, {}).calls.empty());
  CHECK(column_major_gemm({4, 5}, {5, 0}, {}).calls.empty());
  CHECK(column_major_gemm({2, 0, 4, 5}, {5, 3}, {}).calls.empty());
  ColumnMajorGemm g = column_major_gemm({4, 0}, {0, 3}, {});
  CHECK(g.zero_k());
  CHECK_FALSE(g.calls.empty());
  CHECK(g.lda >= 1);
  CHECK(g.ldb >= 1);
}

TEST_CASE("gemm mapping rejects operands that do not multiply") {
  CHECK_THROWS_AS(column_major_gemm({4, 5}, {6, 3}, {}), ShapeError);
  CHECK_THROWS_AS(column_major_gemm({2, 4, 5}, {3, 5, 3}, {}), ShapeError);
  CHECK_THROWS_AS(column_major_gemm({5}, {5, 3}, {}), ShapeError);
}

TEST_CASE("gemm epilogue: bf16 conversions agree with the engine's") {
  const float values[] = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159f, 1e-40f, 65504.0f, 1.00390625f,
                          1.01171875f, -2.0078125f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), 3.4e38f};
  for (float v : values) {
    CAPTURE(v);
    CHECK(float_to_bf16_bits(v) == to_bf16(v).bits);
    CHECK(bf16_bits_to_float(to_bf16(v).bits) == to_f32(to_bf16(v)));
  }
  float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(nan))));
}

TEST_CASE("gemm epilogue matches the CPU backend's fused bias and activation") {
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor a = random_tensor({6, 9}, 21, -2.0f, 2.0f), b = random_tensor({9, 5}, 22, -2.0f, 2.0f);
  Tensor bias = random_tensor({5}, 23);
  const Activation activations[] = {Activation::none, Activation::relu, Activation::gelu_tanh,
                                    Activation::gelu_erf, Activation::tanh, Activation::sigmoid};
  MatmulArgs plain{.alpha = 0.75f};
  Tensor product = Tensor::empty({6, 5}, DType::f32);
  cpu.matmul(a, b, nullptr, product, plain);
  auto pv = product.to_vector<float>(), bv = bias.to_vector<float>();
  for (Activation act : activations) {
    CAPTURE(std::string(name(act)));
    MatmulArgs args{.activation = act, .alpha = 0.75f};
    Tensor fused = Tensor::empty({6, 5}, DType::f32);
    cpu.matmul(a, b, &bias, fused, args);
    std::vector<float> expected(pv.size());
    for (std::size_t i = 0; i < pv.size(); ++i) expected[i] = matmul_epilogue(pv[i], bv[i % 5], act);
    check_close(fused, expected, 1e-5, 1e-5);
  }
}
