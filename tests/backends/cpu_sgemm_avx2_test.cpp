// backends/cpu/sgemm_avx2.hpp's GEMM against a product in double, over
// shapes with edge tiles and several blocks of k, every transpose, strides
// wider than the rows; and its promise that neither the thread count nor a
// split of out by rows or columns changes a bit of the result.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/sgemm_avx2.hpp"
#include "backends/cpu/vector_math.hpp"
#include "backends/registry.hpp"

using namespace tessera;

namespace {

// A matrix of rows x columns stored with `stride` floats a row, values in
// [-1, 1) from a small linear congruential generator.
struct Matrix {
  std::int64_t rows, columns, stride;
  std::vector<float> data;
  Matrix(std::int64_t r, std::int64_t c, std::int64_t pad, std::uint32_t seed)
      : rows(r), columns(c), stride(c + pad), data(static_cast<std::size_t>(std::max<std::int64_t>(r * (c + pad), 1))) {
    for (auto& x : data) {
      seed = seed * 1664525u + 1013904223u;
      x = static_cast<float>(seed >> 8) / static_cast<float>(1u << 23) - 1.0f;
    }
  }
  GemmOperand operand(bool transposed) const { return {data.data(), stride, transposed}; }
};

// op(x) (i, j) of a matrix stored as x.
float element(const Matrix& x, bool transposed, std::int64_t i, std::int64_t j) {
  return transposed ? x.data[j * x.stride + i] : x.data[i * x.stride + j];
}

struct Case {
  std::int64_t m, n, k;
};

// Shapes with whole and edge tiles (6 x 16), one and several blocks of
// k (256), of rows (144) and of columns (1024).
const Case kCases[] = {{1, 1, 1}, {6, 16, 256}, {7, 17, 3}, {13, 35, 300}, {150, 40, 257},
                       {5, 1030, 2}, {290, 20, 9}, {64, 64, 513}};

std::vector<float> product(const Case& c, float alpha, const Matrix& a, bool ta, const Matrix& b, bool tb,
                           std::int64_t out_stride, int threads, float fill) {
  std::vector<float> out(static_cast<std::size_t>(c.m * out_stride), fill);
  std::vector<float> scratch(sgemm_avx2_scratch_floats(threads));
  sgemm_avx2(c.m, c.n, c.k, alpha, a.operand(ta), b.operand(tb), out.data(), out_stride, scratch.data(), threads);
  return out;
}

}  // namespace

TEST_CASE("the AVX2 GEMM computes alpha op(a) op(b) for every transpose, edge and block of k") {
  if (!vector_isa_runs(VectorIsa::avx2)) {
    MESSAGE("skipped: this CPU lacks AVX2 or FMA");
    return;
  }
  for (const Case& c : kCases)
    for (int transposes = 0; transposes < 4; ++transposes) {
      const bool ta = transposes & 1, tb = transposes & 2;
      const Matrix a = ta ? Matrix(c.k, c.m, 3, 1) : Matrix(c.m, c.k, 3, 1);
      const Matrix b = tb ? Matrix(c.n, c.k, 5, 2) : Matrix(c.k, c.n, 5, 2);
      const float alpha = 0.75f;
      const std::int64_t out_stride = c.n + 4;
      const float fill = 12345.0f;  // what lies past each row's n columns must stay
      const std::vector<float> out = product(c, alpha, a, ta, b, tb, out_stride, 2, fill);
      double worst = 0.0;
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t j = 0; j < out_stride; ++j) {
          const float got = out[i * out_stride + j];
          if (j >= c.n) {
            CHECK(got == fill);
            continue;
          }
          double expected = 0.0, magnitude = 0.0;
          for (std::int64_t p = 0; p < c.k; ++p) {
            const double term = double(element(a, ta, i, p)) * double(element(b, tb, p, j));
            expected += term;
            magnitude += std::fabs(term);
          }
          expected *= alpha;
          worst = std::max(worst, std::fabs(got - expected) / (std::fabs(alpha) * magnitude + 1e-30));
        }
      INFO("m " << c.m << ", n " << c.n << ", k " << c.k << ", a transposed " << ta << ", b transposed " << tb);
      CHECK(worst < 1e-6);  // f32 sums of k terms: a few ulps of the sum of magnitudes
    }
}

TEST_CASE("the AVX2 GEMM's result does not depend on the threads or on a split of out") {
  if (!vector_isa_runs(VectorIsa::avx2)) {
    MESSAGE("skipped: this CPU lacks AVX2 or FMA");
    return;
  }
  const Case c{150, 70, 600};
  const Matrix a(c.k, c.m, 0, 3), b(c.k, c.n, 0, 4);  // a transposed: a weight gradient's layer input
  const std::vector<float> one = product(c, 1.0f, a, true, b, false, c.n, 1, 0.0f);
  for (int threads : {2, 3}) CHECK(product(c, 1.0f, a, true, b, false, c.n, threads, 0.0f) == one);

  // Rows [40, 150) alone (a's columns from 40), as a row-sharded product
  // would compute them, and columns [16, 70) alone.
  const std::int64_t row0 = 40, column0 = 16;
  std::vector<float> rows(static_cast<std::size_t>((c.m - row0) * c.n));
  std::vector<float> columns(static_cast<std::size_t>(c.m * (c.n - column0)));
  std::vector<float> scratch(sgemm_avx2_scratch_floats(2));
  sgemm_avx2(c.m - row0, c.n, c.k, 1.0f, {a.data.data() + row0, a.stride, true}, b.operand(false), rows.data(), c.n,
             scratch.data(), 2);
  sgemm_avx2(c.m, c.n - column0, c.k, 1.0f, a.operand(true), {b.data.data() + column0, b.stride, false},
             columns.data(), c.n - column0, scratch.data(), 2);
  bool rows_same = true, columns_same = true;
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = 0; j < c.n; ++j) {
      if (i >= row0) rows_same = rows_same && rows[(i - row0) * c.n + j] == one[i * c.n + j];
      if (j >= column0) columns_same = columns_same && columns[i * (c.n - column0) + j - column0] == one[i * c.n + j];
    }
  CHECK(rows_same);
  CHECK(columns_same);
}

TEST_CASE("the AVX2 GEMM adds its bias and applies ReLU once, after the last block of k") {
  if (!vector_isa_runs(VectorIsa::avx2)) {
    MESSAGE("skipped: this CPU lacks AVX2 or FMA");
    return;
  }
  for (const Case& c : {Case{13, 35, 300}, Case{150, 40, 600}, Case{6, 16, 5}})
    for (bool relu : {false, true}) {
      const Matrix a(c.m, c.k, 0, 7), b(c.k, c.n, 0, 8), bias(1, c.n, 0, 9);
      const float alpha = 0.5f;
      std::vector<float> out(static_cast<std::size_t>(c.m * c.n)), scratch(sgemm_avx2_scratch_floats(2));
      sgemm_avx2(c.m, c.n, c.k, alpha, a.operand(false), b.operand(false), out.data(), c.n, scratch.data(), 2,
                 {.bias = bias.data.data(), .relu = relu});
      double worst = 0.0;
      int zeros = 0;
      for (std::int64_t i = 0; i < c.m; ++i)
        for (std::int64_t j = 0; j < c.n; ++j) {
          double sum = 0.0, magnitude = std::fabs(bias.data[j]);
          for (std::int64_t p = 0; p < c.k; ++p) {
            sum += double(a.data[i * a.stride + p]) * double(b.data[p * b.stride + j]);
            magnitude += std::fabs(alpha * double(a.data[i * a.stride + p]) * double(b.data[p * b.stride + j]));
          }
          double expected = alpha * sum + bias.data[j];
          if (relu) expected = std::max(expected, 0.0);
          zeros += out[i * c.n + j] == 0.0f;
          worst = std::max(worst, std::fabs(out[i * c.n + j] - expected) / magnitude);
        }
      INFO("m " << c.m << ", n " << c.n << ", k " << c.k << ", relu " << relu);
      CHECK(worst < 1e-6);
      CHECK((zeros > 0) == relu);  // about half the outputs are negative before ReLU
    }
}

TEST_CASE("the AVX2 GEMM's ReLU zeroes a NaN, as oneDNN's does, so that every path gives the same step") {
  if (!vector_isa_runs(VectorIsa::avx2)) {
    MESSAGE("skipped: this CPU lacks AVX2 or FMA");
    return;
  }
  Matrix a(6, 4, 0, 10), b(4, 16, 0, 11);
  a.data[2 * 4 + 1] = std::numeric_limits<float>::quiet_NaN();  // row 2
  std::vector<float> out(6 * 16), scratch(sgemm_avx2_scratch_floats(1));
  sgemm_avx2(6, 16, 4, 1.0f, a.operand(false), b.operand(false), out.data(), 16, scratch.data(), 1, {.relu = true});
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 16; ++j) {
      CHECK_FALSE(std::isnan(out[i * 16 + j]));
      if (i == 2) CHECK(out[i * 16 + j] == 0.0f);
    }
  // oneDNN's ReLU on the same NaN.
  Backend& cpu = backend_for(Device::cpu(0));
  Tensor x = Tensor::from_vector<float>({1.0f, NAN, -2.0f, 3.0f}, {4}), y = Tensor::empty({4}, DType::f32);
  cpu.unary(UnaryOp::relu, x, y);
  CHECK(y.to_vector<float>() == std::vector<float>{1.0f, 0.0f, 0.0f, 3.0f});
}

TEST_CASE("the AVX2 GEMM over no k writes zeros, then its epilogue") {
  if (!vector_isa_runs(VectorIsa::avx2)) {
    MESSAGE("skipped: this CPU lacks AVX2 or FMA");
    return;
  }
  const Matrix a(3, 1, 0, 5), b(1, 4, 0, 6);
  std::vector<float> out(12, 7.0f), scratch(sgemm_avx2_scratch_floats(1));
  sgemm_avx2(3, 4, 0, 1.0f, a.operand(false), b.operand(false), out.data(), 4, scratch.data(), 1);
  CHECK(out == std::vector<float>(12, 0.0f));
  const float bias[] = {1.0f, -2.0f, 3.0f, -4.0f};
  sgemm_avx2(3, 4, 0, 1.0f, a.operand(false), b.operand(false), out.data(), 4, scratch.data(), 1,
             {.bias = bias, .relu = true});
  for (int i = 0; i < 12; ++i) CHECK(out[i] == std::max(bias[i % 4], 0.0f));
}
